// Package config is a cluster's config file, `devk up --config FILE`,
// in the spirit of kind's pkg/apis/config: the versioned types
// (apiVersion devk.dev/v1alpha1, kind Cluster), strict decoding whose
// every problem names its file:line and key, the defaults, validation,
// and the settings of each component that devk owns and a file may not
// change (owned.go), which rendering reads too.
//
// The file says what the cluster should be. It is the whole truth for
// what it covers: a key left out means its default, not "as before".
// Two exceptions: networking.nodeSubnet left out means "a free one" for
// a new cluster and "the one it has" for an existing one, and name left
// out means --name (else devk).
//
// What depends on the machine (host routes, other clusters, the cluster
// as it is) package cluster checks when it opens the cluster.
package config

import (
	yaml3 "go.yaml.in/yaml/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devk/devk/internal/layout"
)

const (
	// APIVersion and Kind head every config file.
	APIVersion = layout.ConfigGroup + "/v1alpha1"
	Kind       = "Cluster"

	// TaintKeep and TaintRemove are controlPlaneTaint's values.
	TaintKeep   = "keep"
	TaintRemove = "remove"
	// DefaultControlPlaneTaint is kind's way: pods schedule on the one node.
	DefaultControlPlaneTaint = TaintRemove
)

// Cluster is the config file.
type Cluster struct {
	metav1.TypeMeta `json:",inline"`
	// Name names the cluster; --name, when given too, must agree.
	Name string `json:"name,omitempty"`
	// Spec: featureGates, runtimeConfig, apiServer, controllerManager,
	// scheduler, kubelet, kubeProxy, addons, certValidity, audit,
	// bootstrapper and the kubeadm config's patches; cluster.json stores
	// it as it is.
	layout.Spec `json:",inline"`
	// Networking are the cluster's networks.
	Networking Networking `json:"networking,omitzero"`
	// ControlPlaneTaint is keep or remove (the default).
	ControlPlaneTaint string `json:"controlPlaneTaint,omitempty"`
	// Nodes are the cluster's nodes, as kind's config lists them: the
	// first the control plane (the node up makes), then workers, each
	// joined as `devk node add` joins it. Left out: as many as the
	// cluster has (a new cluster: one).
	Nodes []Node `json:"nodes,omitempty"`

	// file and root are where it was read from, for problems found later.
	file string
	root *yaml3.Node
}

// Node is one node of the config file.
type Node struct {
	// Role is control-plane or worker.
	Role string `json:"role"`
	// Name defaults to kind's: <cluster>-control-plane for the first,
	// <cluster>-worker, <cluster>-worker2, … for the workers.
	Name string `json:"name,omitempty"`
	// Tree is another Kubernetes tree (a directory `devk source get`
	// made, relative to the file or absolute) whose kubelet this worker
	// runs, within the version skew policy; left out, the cluster's.
	Tree string `json:"tree,omitempty"`
}

// Networking are the cluster's networks; each is fixed when the cluster
// is made.
type Networking struct {
	// PodSubnet defaults to layout.DefaultPodCIDR.
	PodSubnet string `json:"podSubnet,omitempty"`
	// ServiceSubnet defaults to layout.DefaultServiceCIDR.
	ServiceSubnet string `json:"serviceSubnet,omitempty"`
	// NodeSubnet defaults to the first free /24 of
	// layout.DefaultNodeSubnets.
	NodeSubnet string `json:"nodeSubnet,omitempty"`
}
