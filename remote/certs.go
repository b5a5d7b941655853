package remote

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/devk/devk/agent"
	"github.com/devk/devk/certs"
	"github.com/devk/devk/digest"
	"github.com/devk/devk/internal/staticpod"
)

// ControlPlane is a control-plane node and where it keeps its files, as
// the node names its paths: what check-expiration reads, and its runtime.
type ControlPlane struct {
	Node  string
	Files agent.CertsTask
	// CRISocket is its kubelet's runtime (a path).
	CRISocket string
	// Etcd is how its API server reaches etcd (endpoints, the node's
	// files, prefix): its --etcd-* flags.
	Etcd agent.EtcdTask
}

// ControlPlanes are the cluster's control-plane nodes (those running a
// kube-apiserver static pod: its mirror pod, labelled component and tier
// as kubeadm and devk label it), by the Node's creation time (the first
// control plane first), with their files: the PKI directory is where the
// API server's --client-ca-file is, the kubeconfigs where the
// controller-manager's --kubeconfig is (else the PKI directory's parent,
// kubeadm's layout), the manifests and the runtime the kubelet's
// staticPodPath and containerRuntimeEndpoint (its /configz, through the
// API server's node proxy). only, when given, picks
// nodes by name; each must be one.
func (s *Session) ControlPlanes(ctx context.Context, only []string) ([]ControlPlane, error) {
	pods, err := s.cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: labels.Set{"tier": "control-plane"}.String()})
	if err != nil {
		return nil, fmt.Errorf("list the control plane's pods in kube-system: %w", err)
	}
	byNode := map[string]map[string]*corev1.Pod{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; !mirror || p.Spec.NodeName == "" {
			continue
		}
		if byNode[p.Spec.NodeName] == nil {
			byNode[p.Spec.NodeName] = map[string]*corev1.Pod{}
		}
		byNode[p.Spec.NodeName][p.Labels["component"]] = p
	}
	nodes, err := s.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list the nodes: %w", err)
	}
	slices.SortStableFunc(nodes.Items, func(a, b corev1.Node) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
	var out []ControlPlane
	var names []string
	for _, n := range nodes.Items {
		api := byNode[n.Name]["kube-apiserver"]
		if api == nil {
			continue
		}
		names = append(names, n.Name)
		if len(only) > 0 && !slices.Contains(only, n.Name) {
			continue
		}
		f, err := filesOf(n.Name, api, byNode[n.Name]["kube-controller-manager"])
		if err != nil {
			return nil, err
		}
		kc, err := s.kubeletConfig(ctx, n.Name)
		if err != nil {
			return nil, err
		}
		f.ManifestsDir = kc.StaticPodPath
		flags := staticpod.Flags(api, "kube-apiserver")
		etcd := agent.EtcdTask{CACert: flags["etcd-cafile"], Cert: flags["etcd-certfile"], Key: flags["etcd-keyfile"], Prefix: flags["etcd-prefix"]}
		if flags["etcd-servers"] != "" {
			etcd.Endpoints = strings.Split(flags["etcd-servers"], ",")
		}
		out = append(out, ControlPlane{Node: n.Name, Files: f, CRISocket: kc.CRISocket, Etcd: etcd})
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("the cluster has no node running a kube-apiserver static pod (no mirror pod labelled tier=control-plane in kube-system): a managed control plane has no files devk can read")
	}
	for _, o := range only {
		if !slices.Contains(names, o) {
			return nil, fmt.Errorf("--node %s: no such control-plane node; the cluster's are: %s", o, strings.Join(names, ", "))
		}
	}
	return out, nil
}

// filesOf reads where node keeps its PKI and kubeconfigs from its API
// server's and controller-manager's mirror pods (cm may be nil).
func filesOf(node string, api, cm *corev1.Pod) (agent.CertsTask, error) {
	ca := staticpod.Flags(api, "kube-apiserver")["client-ca-file"]
	if !path.IsAbs(ca) {
		return agent.CertsTask{}, fmt.Errorf("node %s: its API server (pod kube-system/%s) has no --client-ca-file naming an absolute path: devk cannot tell where its certificates are", node, api.Name)
	}
	f := agent.CertsTask{PKIDir: path.Dir(ca), KubeconfigDir: path.Dir(path.Dir(ca))}
	if cm != nil {
		if kc := staticpod.Flags(cm, "kube-controller-manager")["kubeconfig"]; path.IsAbs(kc) {
			f.KubeconfigDir = path.Dir(kc)
		}
	}
	return f, nil
}

// kubeletFiles are where a node's kubelet keeps its static pods and
// reaches its runtime.
type kubeletFiles struct {
	StaticPodPath, CRISocket string
}

// kubeletConfig reads node's kubelet's static pod path and runtime
// socket from its /configz.
func (s *Session) kubeletConfig(ctx context.Context, node string) (kubeletFiles, error) {
	data, err := s.cs.CoreV1().RESTClient().Get().Resource("nodes").Name(node).SubResource("proxy").Suffix("configz").DoRaw(ctx)
	if err != nil {
		return kubeletFiles{}, fmt.Errorf("node %s: read its kubelet's configuration (/api/v1/nodes/%s/proxy/configz): %w", node, node, err)
	}
	return parseConfigz(node, data)
}

// parseConfigz is kubeletConfig's reading of a kubelet's /configz.
func parseConfigz(node string, data []byte) (kubeletFiles, error) {
	var cfg struct {
		KubeletConfig struct {
			StaticPodPath            string `json:"staticPodPath"`
			ContainerRuntimeEndpoint string `json:"containerRuntimeEndpoint"`
		} `json:"kubeletconfig"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return kubeletFiles{}, fmt.Errorf("node %s: its kubelet's /configz: %w", node, err)
	}
	kc := cfg.KubeletConfig
	if !path.IsAbs(kc.StaticPodPath) {
		return kubeletFiles{}, fmt.Errorf("node %s: its kubelet runs no static pods (no staticPodPath in its /configz)", node)
	}
	socket, ok := strings.CutPrefix(kc.ContainerRuntimeEndpoint, "unix://")
	if !ok || !path.IsAbs(socket) {
		return kubeletFiles{}, fmt.Errorf("node %s: its kubelet's runtime %q is not a unix socket devk can reach", node, kc.ContainerRuntimeEndpoint)
	}
	return kubeletFiles{StaticPodPath: path.Clean(kc.StaticPodPath), CRISocket: path.Clean(socket)}, nil
}

// Certs reads the certificates of the control-plane nodes only names (all
// when empty), each by its node's agent, into one report as
// check-expiration prints it.
func (s *Session) Certs(ctx context.Context, only []string) (*certs.Report, error) {
	nodes, err := s.ControlPlanes(ctx, only)
	if err != nil {
		return nil, err
	}
	r := &certs.Report{Now: time.Now()}
	for _, n := range nodes {
		var one certs.Report
		if err := s.doStep(ctx, n.Node, "certs", agent.Task{Kind: agent.KindCerts, Certs: &n.Files}, &one, func() string {
			return fmt.Sprintf("%d certificates, %d CAs (%s)", len(one.Certs), len(one.CAs), n.Files.PKIDir)
		}); err != nil {
			return nil, err
		}
		r.Add(n.Node, &one)
	}
	return r, nil
}

// DigestSources are the views of what the cluster runs that `devk digest
// verify` compares, for the static pods of binaries: on each
// control-plane node, what its manifest names and its runtime runs (read
// there by the node's agent) and its mirror pod; the addons' workloads
// and pods through the API.
func (s *Session) DigestSources(ctx context.Context, binaries []string) ([]digest.Source, error) {
	nodes, err := s.ControlPlanes(ctx, nil)
	if err != nil {
		return nil, err
	}
	var out []digest.Source
	for _, n := range nodes {
		var v digest.NodeViews
		task := agent.Task{Kind: agent.KindDigest, Digest: &agent.DigestTask{ManifestsDir: n.Files.ManifestsDir, CRISocket: n.CRISocket, NodeName: n.Node, Binaries: binaries}}
		if err := s.doStep(ctx, n.Node, "digest", task, &v, func() string {
			return fmt.Sprintf("%d static pods (%s, %s)", len(binaries), n.Files.ManifestsDir, n.CRISocket)
		}); err != nil {
			return nil, err
		}
		out = append(out, v.Sources(n.Node)...)
		out = append(out, digest.OnNode{Node: n.Node, Source: digest.Mirror{Client: s.cs, NodeName: n.Node}})
	}
	return append(out, digest.Workload{Client: s.cs}, digest.Pods{Client: s.cs}), nil
}

// Etcd runs `devk etcd ls|get` (e: its verb and query) on the etcd of
// control-plane node (the first when ""), by that node's agent with its
// API server's --etcd-* flags, and returns what it printed.
func (s *Session) Etcd(ctx context.Context, node string, e agent.EtcdTask) (string, error) {
	var only []string
	if node != "" {
		only = []string{node}
	}
	nodes, err := s.ControlPlanes(ctx, only)
	if err != nil {
		return "", err
	}
	cp := nodes[0]
	if len(cp.Etcd.Endpoints) == 0 || cp.Etcd.Cert == "" {
		return "", fmt.Errorf("node %s: its API server has no --etcd-servers and --etcd-certfile: devk cannot reach its etcd as it does", cp.Node)
	}
	e.Endpoints, e.CACert, e.Cert, e.Key = cp.Etcd.Endpoints, cp.Etcd.CACert, cp.Etcd.Cert, cp.Etcd.Key
	if e.Prefix == "" {
		e.Prefix = cp.Etcd.Prefix
	}
	var r agent.EtcdResult
	if err := s.doStep(ctx, cp.Node, "etcd-"+e.Verb, agent.Task{Kind: agent.KindEtcd, Etcd: &e}, &r, func() string { return strings.Join(e.Endpoints, ",") }); err != nil {
		return "", err
	}
	return r.Output, nil
}
