package stacks

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/devk/devk/internal/kube"
	"github.com/devk/devk/internal/layout"
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

// Fetch reads the goroutine dump at e with the kubeconfig's credentials
// (the cluster's admin.conf), or e.TLS's.
func Fetch(ctx context.Context, kubeconfig string, e Endpoint) ([]byte, error) {
	var cs *kubernetes.Clientset
	var err error
	if e.TLS != nil {
		cs, err = kube.ClientForConfig(&rest.Config{Host: e.Host, TLSClientConfig: *e.TLS}, kube.WithTimeout(FetchTimeout))
	} else {
		cs, err = kube.Client(kubeconfig, kube.WithHost(e.Host), kube.WithTimeout(FetchTimeout))
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

// nodeOf is the cluster's node called name, node 0 when name is empty.
func nodeOf(cfg layout.Config, name string) (layout.NodeNet, error) {
	if name == "" {
		return cfg.FirstNode(), nil
	}
	n, _, err := cfg.FindNode(name)
	return n, err
}
