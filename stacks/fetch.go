package stacks

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/devk/devk/internal/kube"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/staticpod"
)

// Components are the components whose goroutines Fetch reads, by the
// names `devk swap` and `devk build` give them.
var Components = []string{APIServer, ControllerManager, Scheduler, Kubelet, Etcd}

// The components' names.
const (
	APIServer         = "apiserver"
	ControllerManager = "controller-manager"
	Scheduler         = "scheduler"
	Kubelet           = "kubelet"
	Etcd              = "etcd"
)

// CheckComponent says whether Fetch reads component's goroutines.
func CheckComponent(component string) error {
	if slices.Contains(Components, component) {
		return nil
	}
	return fmt.Errorf("unknown component %q: want one of %s", component, strings.Join(Components, ", "))
}

// GoroutinePath is the profiling endpoint's goroutine dump; DumpDebug
// asks for every goroutine's full stack in the text a Go panic prints.
const (
	GoroutinePath = "/debug/pprof/goroutine"
	DumpDebug     = "2"
)

// FetchTimeout bounds the request of one dump: an API server's is
// megabytes, and a busy node's may take seconds to write.
const FetchTimeout = 30 * time.Second

// Endpoint is where one component's goroutine dump is read: the server
// (an API server, or the component's own secure port) and the path on it.
type Endpoint struct {
	Component string
	Node      string
	// Host is https://IP:PORT, requested with the admin kubeconfig's
	// client certificate (etcd's: with TLS's).
	Host string
	Path string
	// TLS, for etcd, is the etcd CA and the client certificate (the
	// node's healthcheck client) its client URL requires.
	TLS *rest.TLSClientConfig
}

// URL is the endpoint's full address, for messages and the result.
func (e Endpoint) URL() string {
	return e.Host + e.Path + "?" + url.Values{"debug": {DumpDebug}}.Encode()
}

// EndpointOf is where component's dump is read on node n of the cluster
// cfg: the API server's and the controllers' own secure ports at the
// node's address (their serving certificates have it), the kubelet's
// through the API server's node proxy.
func EndpointOf(cfg layout.Config, n layout.NodeNet, component string) (Endpoint, error) {
	e := Endpoint{Component: component, Node: n.Name, Path: GoroutinePath}
	port := 0
	switch component {
	case APIServer:
		port = cfg.Ports.APIServer
	case ControllerManager:
		port = cfg.Ports.ControllerManager
	case Scheduler:
		port = cfg.Ports.Scheduler
	case Etcd:
		port = cfg.Ports.EtcdClient
	case Kubelet:
		e.Host = cfg.APIServerURL()
		e.Path = "/api/v1/nodes/" + url.PathEscape(n.Name) + "/proxy" + GoroutinePath
		return e, nil
	default:
		return Endpoint{}, CheckComponent(component)
	}
	if !n.IsControlPlane() {
		return Endpoint{}, fmt.Errorf("node %s is a worker: it runs no %s; pick a control-plane node with --node (%s)",
			n.Name, component, strings.Join(cfg.ControlPlaneNames(), ", "))
	}
	e.Host = "https://" + n.IP + ":" + strconv.Itoa(port)
	return e, nil
}

// Fetch reads the goroutine dump at e with conn's credentials (a
// cluster's admin.conf, or the kubeconfig of a cluster reached through
// its API), or e.TLS's.
func Fetch(ctx context.Context, conn *rest.Config, e Endpoint) ([]byte, error) {
	var cs *kubernetes.Clientset
	var err error
	if e.TLS != nil {
		cs, err = kube.ClientForConfig(&rest.Config{Host: e.Host, TLSClientConfig: *e.TLS}, kube.WithTimeout(FetchTimeout))
	} else {
		cs, err = kube.ClientForConfig(conn, kube.WithHost(e.Host), kube.WithTimeout(FetchTimeout))
	}
	if err != nil {
		return nil, err
	}
	dump, err := cs.CoreV1().RESTClient().Get().AbsPath(e.Path).Param("debug", DumpDebug).DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("the goroutines of %s on node %s (%s): %w: is it running (`devk status`) with profiling on?", e.Component, e.Node, e.URL(), err)
	}
	return dump, nil
}

// EndpointThrough is where component's dump is read on a cluster devk
// reaches only through its API (conn): the API server's at the
// kubeconfig's server, or with node at that node's API server (the
// address and port its mirror pod advertises, which its serving
// certificate has); the kubelet's through the node proxy (node, default
// the first node). The controller-manager's and scheduler's secure ports
// serve certificates the cluster's CA did not sign (kubeadm makes them in
// memory) and etcd's takes its client certificate on the node: those are
// read only on a devk cluster of this machine.
func EndpointThrough(ctx context.Context, conn *rest.Config, component, node string) (Endpoint, error) {
	e := Endpoint{Component: component, Node: node, Host: conn.Host, Path: GoroutinePath}
	cs, err := kube.ClientForConfig(conn)
	if err != nil {
		return Endpoint{}, err
	}
	switch component {
	case APIServer:
		if node == "" {
			e.Node = "(the kubeconfig's server)"
			return e, nil
		}
		mp, err := cs.CoreV1().Pods(metav1.NamespaceSystem).Get(ctx, kube.MirrorPodName("kube-apiserver", node), metav1.GetOptions{})
		if err != nil {
			return Endpoint{}, fmt.Errorf("--node %s: its API server's pod: %w", node, err)
		}
		flags := staticpod.Flags(mp, "kube-apiserver")
		addr, port := flags["advertise-address"], cmp.Or(flags["secure-port"], strconv.Itoa(layout.DefaultPorts.APIServer))
		if addr == "" {
			return Endpoint{}, fmt.Errorf("--node %s: its API server's pod names no --advertise-address: read the one the kubeconfig names (no --node)", node)
		}
		e.Host = "https://" + net.JoinHostPort(addr, port)
		return e, nil
	case Kubelet:
		if node == "" {
			nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			if err != nil || len(nodes.Items) == 0 {
				return Endpoint{}, fmt.Errorf("the cluster's nodes (pass --node): %v", err)
			}
			slices.SortStableFunc(nodes.Items, func(a, b corev1.Node) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
			e.Node = nodes.Items[0].Name
		}
		e.Path = "/api/v1/nodes/" + url.PathEscape(e.Node) + "/proxy" + GoroutinePath
		return e, nil
	case ControllerManager, Scheduler, Etcd:
		return Endpoint{}, fmt.Errorf("through the cluster devk reads the goroutines of the API server and the kubelets: %s's secure port serves a certificate the cluster's CA did not sign (etcd's wants its client certificate on the node), so devk reads it only on a devk cluster of this machine (--name)", component)
	}
	return Endpoint{}, CheckComponent(component)
}

// nodeOf is the cluster's node called name, node 0 when name is empty.
func nodeOf(cfg layout.Config, name string) (layout.NodeNet, error) {
	if name == "" {
		return cfg.FirstNode(), nil
	}
	n, _, err := cfg.FindNode(name)
	return n, err
}
