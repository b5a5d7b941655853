package remote

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"path"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/devk/devk/agent"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/staticpod"
)

// ControlPlane is a control-plane node and where it keeps its files, as
// the node names its paths, read from its mirror pods.
type ControlPlane struct {
	Node string
	// Files are what check-expiration reads; ManifestsDir is filled by
	// withKubelet.
	Files agent.CertsTask
	// Etcd is how its API server reaches etcd: its --etcd-* flags.
	Etcd layout.Etcd
}

// ControlPlanes are the cluster's control-plane nodes (those running a
// kube-apiserver static pod: its mirror pod, labelled component and tier
// as kubeadm and devk label it), by the Node's creation time (the first
// control plane first), with their files: the PKI directory is where the
// API server's --client-ca-file is, the kubeconfigs where the
// controller-manager's --kubeconfig is (else the PKI directory's parent,
// kubeadm's layout), etcd as its --etcd-* flags say. only, when given,
// picks nodes by name; each must be one.
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
		cp, err := controlPlaneOf(n.Name, api, byNode[n.Name]["kube-controller-manager"])
		if err != nil {
			return nil, err
		}
		out = append(out, cp)
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

// controlPlaneOf is node as its API server's and controller-manager's
// mirror pods (cm may be nil) say.
func controlPlaneOf(node string, api, cm *corev1.Pod) (ControlPlane, error) {
	flags := staticpod.Flags(api, "kube-apiserver")
	ca := flags["client-ca-file"]
	if !path.IsAbs(ca) {
		return ControlPlane{}, fmt.Errorf("node %s: its API server (pod kube-system/%s) has no --client-ca-file naming an absolute path: devk cannot tell where its certificates are", node, api.Name)
	}
	cp := ControlPlane{Node: node, Files: agent.CertsTask{PKIDir: path.Dir(ca), KubeconfigDir: path.Dir(path.Dir(ca))}, Etcd: layout.EtcdOf(flags, layout.Etcd{})}
	if cm != nil {
		if kc := staticpod.Flags(cm, "kube-controller-manager")["kubeconfig"]; path.IsAbs(kc) {
			cp.Files.KubeconfigDir = path.Dir(kc)
		}
	}
	return cp, nil
}

// kubeletFiles are where a node's kubelet keeps its static pods (none:
// it runs none) and pods' logs, and reaches its runtime.
type kubeletFiles struct {
	StaticPodPath, CRISocket, PodLogsDir string
	// Healthz is its health endpoint (healthzBindAddress, healthzPort):
	// "" when its port is 0 (off).
	Healthz string
}

// withKubelet reads node cp's kubelet's static pod path (into
// cp.Files.ManifestsDir) and runtime socket from its /configz, through
// the API server's node proxy.
func (s *Session) withKubelet(ctx context.Context, cp *ControlPlane) (kubeletFiles, error) {
	kf, err := s.kubelet(ctx, cp.Node)
	if err == nil && kf.StaticPodPath == "" {
		err = fmt.Errorf("node %s: its kubelet runs no static pods (no staticPodPath in its /configz)", cp.Node)
	}
	cp.Files.ManifestsDir = kf.StaticPodPath
	return kf, err
}

// kubelet reads node's kubelet's files from its /configz, through the API
// server's node proxy.
func (s *Session) kubelet(ctx context.Context, node string) (kubeletFiles, error) {
	data, err := s.cs.CoreV1().RESTClient().Get().Resource("nodes").Name(node).SubResource("proxy").Suffix("configz").DoRaw(ctx)
	if err != nil {
		return kubeletFiles{}, fmt.Errorf("node %s: read its kubelet's configuration (/api/v1/nodes/%s/proxy/configz): %w", node, node, err)
	}
	return parseConfigz(node, data)
}

// defaultPodLogsDir is the kubelet's podLogsDir when its config names
// none; defaultHealthzPort its healthzPort.
const (
	defaultPodLogsDir  = "/var/log/pods"
	defaultHealthzPort = 10248
)

// parseConfigz is kubelet's reading of a kubelet's /configz.
func parseConfigz(node string, data []byte) (kubeletFiles, error) {
	var cfg struct {
		KubeletConfig struct {
			StaticPodPath            string `json:"staticPodPath"`
			ContainerRuntimeEndpoint string `json:"containerRuntimeEndpoint"`
			PodLogsDir               string `json:"podLogsDir"`
			HealthzBindAddress       string `json:"healthzBindAddress"`
			HealthzPort              *int32 `json:"healthzPort"`
		} `json:"kubeletconfig"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return kubeletFiles{}, fmt.Errorf("node %s: its kubelet's /configz: %w", node, err)
	}
	kc := cfg.KubeletConfig
	socket, ok := strings.CutPrefix(kc.ContainerRuntimeEndpoint, "unix://")
	if !ok || !path.IsAbs(socket) {
		return kubeletFiles{}, fmt.Errorf("node %s: its kubelet's runtime %q is not a unix socket devk can reach", node, kc.ContainerRuntimeEndpoint)
	}
	kf := kubeletFiles{CRISocket: path.Clean(socket), PodLogsDir: defaultPodLogsDir}
	if path.IsAbs(kc.StaticPodPath) {
		kf.StaticPodPath = path.Clean(kc.StaticPodPath)
	}
	if path.IsAbs(kc.PodLogsDir) {
		kf.PodLogsDir = path.Clean(kc.PodLogsDir)
	}
	addr, port := kc.HealthzBindAddress, int32(defaultHealthzPort)
	if addr == "" {
		addr = "127.0.0.1"
	}
	if kc.HealthzPort != nil {
		port = *kc.HealthzPort
	}
	if port > 0 {
		kf.Healthz = "http://" + net.JoinHostPort(addr, strconv.Itoa(int(port))) + "/healthz"
	}
	return kf, nil
}
