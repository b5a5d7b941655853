package controlplane

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/devk/devk/internal/kube"
	"github.com/devk/devk/internal/layout"
)

// Check is the health check of one control-plane component of a node.
type Check struct {
	// Name is the component's static pod (etcd, kube-apiserver).
	Name string
	// Healthy is nil when the component answers healthy.
	Healthy func(ctx context.Context) error
}

// Checks are the health checks of the control plane of node n, in start
// order: each component's own health endpoint.
func Checks(cfg layout.Config, n layout.NodeNet) []Check {
	probe := func(port int, path string) func(context.Context) error {
		return func(ctx context.Context) error {
			return kube.Probe(ctx, "https://"+net.JoinHostPort(n.IP, strconv.Itoa(port))+path)
		}
	}
	// kubeadm binds the controller-manager and the scheduler to the
	// node's loopback: asked from inside it.
	controllers := func(port int, path string) func(context.Context) error {
		return func(ctx context.Context) error {
			base, netns := cfg.Controller(n, port)
			return kube.ProbeIn(ctx, netns, base+path)
		}
	}
	return []Check{
		// etcd's health is on the node's loopback: asked from inside it.
		{"etcd", func(ctx context.Context) error {
			u := "http://" + net.JoinHostPort(etcdMetricsHost, strconv.Itoa(cfg.Ports.EtcdMetrics)) + "/health"
			return kube.ProbeIn(ctx, n.NetNSPath(), u)
		}},
		// The node's own API server (with a load balancer, clients reach
		// it through that; its checks ask the same /readyz).
		{"kube-apiserver", probe(cfg.Ports.APIServer, "/readyz")},
		{"kube-controller-manager", controllers(cfg.Ports.ControllerManager, "/healthz")},
		{"kube-scheduler", controllers(cfg.Ports.Scheduler, "/healthz")},
	}
}

// ContainerLog is the newest log file of the control-plane container
// name of node nodeName under podLogs (the kubelet's pod logs dir);
// empty when the container never started.
func ContainerLog(podLogs, nodeName, name string) string {
	matches, _ := filepath.Glob(filepath.Join(podLogs, "kube-system_"+kube.MirrorPodName(name, nodeName)+"_*", name, "*.log"))
	newest, newestT := "", time.Time{}
	for _, m := range matches {
		if fi, err := os.Stat(m); err == nil && fi.ModTime().After(newestT) {
			newest, newestT = m, fi.ModTime()
		}
	}
	return newest
}
