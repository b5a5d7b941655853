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
	"github.com/devk/devk/internal/staticpod"
)

// ControlPlaneFiles is a control-plane node and where it keeps what
// check-expiration reads, as the node names its paths.
type ControlPlaneFiles struct {
	Node  string
	Files agent.CertsTask
}

// ControlPlanes are the cluster's control-plane nodes (those running a
// kube-apiserver static pod: its mirror pod, labelled component and tier
// as kubeadm and devk label it), by the Node's creation time (the first
// control plane first), with their files: the PKI directory is where the
// API server's --client-ca-file is, the kubeconfigs where the
// controller-manager's --kubeconfig is (else the PKI directory's parent,
// kubeadm's layout), the manifests the kubelet's staticPodPath (its
// /configz, through the API server's node proxy). only, when given, picks
// nodes by name; each must be one.
func (s *Session) ControlPlanes(ctx context.Context, only []string) ([]ControlPlaneFiles, error) {
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
	var out []ControlPlaneFiles
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
		f, err := s.filesOf(ctx, n.Name, api, byNode[n.Name]["kube-controller-manager"])
		if err != nil {
			return nil, err
		}
		out = append(out, ControlPlaneFiles{Node: n.Name, Files: f})
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

// filesOf reads where node keeps its PKI, kubeconfigs and manifests from
// its API server's and controller-manager's mirror pods (cm may be nil)
// and its kubelet's configuration.
func (s *Session) filesOf(ctx context.Context, node string, api, cm *corev1.Pod) (agent.CertsTask, error) {
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
	staticPods, err := s.staticPodPath(ctx, node)
	if err != nil {
		return agent.CertsTask{}, err
	}
	f.ManifestsDir = staticPods
	return f, nil
}

// staticPodPath is node's kubelet's staticPodPath, from its /configz.
func (s *Session) staticPodPath(ctx context.Context, node string) (string, error) {
	data, err := s.cs.CoreV1().RESTClient().Get().Resource("nodes").Name(node).SubResource("proxy").Suffix("configz").DoRaw(ctx)
	if err != nil {
		return "", fmt.Errorf("node %s: read its kubelet's configuration (/api/v1/nodes/%s/proxy/configz): %w", node, node, err)
	}
	var cfg struct {
		KubeletConfig struct {
			StaticPodPath string `json:"staticPodPath"`
		} `json:"kubeletconfig"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return "", fmt.Errorf("node %s: its kubelet's /configz: %w", node, err)
	}
	if p := cfg.KubeletConfig.StaticPodPath; path.IsAbs(p) {
		return path.Clean(p), nil
	}
	return "", fmt.Errorf("node %s: its kubelet runs no static pods (no staticPodPath in its /configz)", node)
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
		start := time.Now()
		step := n.Node + "/certs"
		s.rep.Start(step)
		data, err := s.Do(ctx, n.Node, agent.Task{Kind: agent.KindCerts, Certs: &n.Files})
		if err != nil {
			s.rep.Fail(step, time.Since(start), err)
			return nil, err
		}
		var one certs.Report
		if err := json.Unmarshal(data, &one); err != nil {
			return nil, fmt.Errorf("node %s: the agent's report: %w", n.Node, err)
		}
		r.Add(n.Node, &one)
		s.rep.Done(step, time.Since(start), fmt.Sprintf("%d certificates, %d CAs (%s)", len(one.Certs), len(one.CAs), n.Files.PKIDir))
	}
	return r, nil
}
