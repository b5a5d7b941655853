// Package joinnode is a node's join as kubeadm's join does it, apart
// from the phases that run it: discovery's files (the node's CA and
// bootstrap kubeconfig) and the token and pins it uses, the kubelet's
// TLS bootstrap and the Node's registration, the wait for the Node to be
// Ready, upload-certs and download-certs for a control-plane node, and
// the nodes up's nodes phase joins. cluster's join phases call it; it
// never imports cluster.
package joinnode

import (
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	certutil "k8s.io/client-go/util/cert"

	"github.com/devk/devk/cluster/config"
	"github.com/devk/devk/cluster/internal/kubeletconfig"
	"github.com/devk/devk/internal/addon"
	"github.com/devk/devk/internal/atomicfile"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/poll"
	"github.com/devk/devk/join"
	"github.com/devk/devk/pki"
)

// Timeout bounds a joining node's wait for its TLS bootstrap (the CSR
// approved and signed, kubelet.conf written) and for its Node to be
// Ready with kube-proxy running on it; PollInterval is how often it
// looks.
const (
	Timeout      = 3 * time.Minute
	PollInterval = 250 * time.Millisecond
)

// Discover is kubeadm's token discovery from endpoint with tok, the CA
// pinned by one of pins, bounded by timeout (0: join.DefaultTimeout): it
// writes the node's CA and its kubelet's bootstrap kubeconfig into node
// and says whether it changed either, and the server and CA it found.
func Discover(ctx context.Context, endpoint string, tok join.Token, pins []join.Pin, timeout time.Duration, node layout.NodeFiles) (changed bool, detail string, err error) {
	if timeout == 0 {
		timeout = join.DefaultTimeout
	}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	d, err := join.Discover(dctx, endpoint, tok, pins)
	if err != nil {
		return false, "", err
	}
	cas, err := certutil.ParseCertsPEM(d.CAPEM)
	if err != nil {
		return false, "", err
	}
	kc, err := join.BootstrapKubeconfig(d.Server, d.CAPEM, tok)
	if err != nil {
		return false, "", err
	}
	for _, f := range []struct {
		path string
		data []byte
		perm os.FileMode
	}{
		{pki.CertPath(node.PKI(), pki.CAName), d.CAPEM, 0o644},
		{node.Kubeconfig(kubeletconfig.BootstrapKubeconfig), kc, 0o600},
	} {
		w, err := atomicfile.WriteIfChanged(f.path, f.data, f.perm, "")
		if err != nil {
			return false, "", err
		}
		changed = changed || w
	}
	return changed, fmt.Sprintf("%s, CA %s", d.Server, join.CAPin(cas[0])), nil
}

// Pins are the CA hashes discovery accepts: hashes
// (--discovery-token-ca-cert-hash) when given, else the hash of the CA
// in caFile (the cluster's own).
func Pins(hashes []string, caFile string) ([]join.Pin, error) {
	if len(hashes) > 0 {
		return join.ParsePins(hashes)
	}
	cas, err := certutil.CertsFromFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("the cluster's CA, to pin: %w", err)
	}
	return []join.Pin{join.PinOf(cas[0])}, nil
}

// TLSBootstrapped says whether the node whose files are node has its
// kubelet's own client certificate: the kubelet writes its kubeconfig
// once its CSR was signed.
func TLSBootstrapped(node layout.NodeFiles) bool {
	_, err := os.Stat(node.Kubeconfig("kubelet"))
	return err == nil
}

// WaitRegistered waits, at most Timeout, until node name's kubelet (its
// files in node) has its client certificate by TLS bootstrap and its
// Node is registered; a kubelet that exits ends the wait with its log.
func WaitRegistered(ctx context.Context, cs kubernetes.Interface, name string, node layout.NodeFiles) error {
	why := "the kubelet has no client certificate yet (its CSR is not signed)"
	err := wait.PollUntilContextTimeout(ctx, PollInterval, Timeout, true, func(ctx context.Context) (bool, error) {
		if _, ok := node.Procs().Running("kubelet"); !ok {
			return false, fmt.Errorf("the node's kubelet exited; its log ends:\n%s", node.Procs().ExitedTail(ctx, "kubelet", 20))
		}
		if !TLSBootstrapped(node) {
			return false, nil
		}
		if _, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); err != nil {
			why = "the Node is not registered: " + err.Error()
			return false, nil
		}
		return true, nil
	})
	if poll.TimedOut(ctx, err) {
		return fmt.Errorf("node %s did not join within %s: %s; see %s and `kubectl get csr`", name, Timeout, why, node.LogFile("kubelet"))
	}
	return err
}

// WaitReady waits, at most Timeout, until Node name is Ready (a kubelet
// started at started must have said so itself) and, unless proxy is
// nil, kube-proxy's pod on it is; note is told why it waits.
func WaitReady(ctx context.Context, cs kubernetes.Interface, name string, node layout.NodeFiles, started time.Time, proxy *addon.State, note func(why string)) error {
	var why string
	err := wait.PollUntilContextTimeout(ctx, PollInterval, Timeout, true, func(ctx context.Context) (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			why = err.Error()
			return false, nil
		}
		why = NotReady(n, started)
		if why == "" && proxy != nil {
			why = proxy.PodNotReadyOn(ctx, cs, name)
		}
		if why == "" {
			return true, nil
		}
		note(why)
		return false, nil
	})
	if poll.TimedOut(ctx, err) {
		return fmt.Errorf("node %s is not ready after %s: %s; see %s", name, Timeout, why, node.LogFile("kubelet"))
	}
	return err
}

// NotReady says why Node n is not Ready ("" when it is); a kubelet
// started at started must have said so itself.
func NotReady(n *corev1.Node, started time.Time) string {
	for _, cond := range n.Status.Conditions {
		if cond.Type != corev1.NodeReady {
			continue
		}
		if cond.Status != corev1.ConditionTrue {
			return "not Ready: " + cond.Message
		}
		if !started.IsZero() && cond.LastHeartbeatTime.Time.Before(started.Truncate(time.Second)) {
			return "no heartbeat from the new kubelet yet"
		}
		return ""
	}
	return "no Ready condition yet"
}

// ToJoin are the nodes up's nodes phase joins into cfg: every node it
// has besides node 0 (joined before: their runtime and kubelet are
// started again if they are not running), then new control-plane nodes
// until it has controlPlanes, then new workers until it has nodes,
// named as the config file's fileNodes name them, else kind's way; and
// why it falls short of nodes, if it does.
func ToJoin(cfg layout.Config, fileNodes []config.Node, controlPlanes, nodes int) ([]config.Node, error) {
	var out []config.Node
	for _, n := range cfg.Network.Nodes[min(1, len(cfg.Network.Nodes)):] {
		if n.Leaving {
			continue // node remove finishes it (runNodes says so)
		}
		out = append(out, config.Node{Role: n.Role, Name: n.Name})
	}
	cfg.Network.Nodes = slices.Clone(cfg.Network.Nodes)
	cps, total := len(cfg.ControlPlanes()), max(1, len(cfg.Network.Nodes))
	named := namesStillWanted(cfg, fileNodes)
	var addErr error
	add := func(role string) bool {
		name := cfg.NextNodeName(role)
		if l := named[role]; len(l) > 0 {
			if l[0] != "" {
				name = l[0]
			}
			named[role] = l[1:]
		}
		if _, err := cfg.AddNode(name, role, nil); err != nil {
			addErr = err
			return false
		}
		out = append(out, config.Node{Role: role, Name: name})
		total++
		return true
	}
	for cps < controlPlanes && add(layout.RoleControlPlane) {
		cps++
	}
	for addErr == nil && total < nodes && add(layout.RoleWorker) {
	}
	return out, addErr
}

// namesStillWanted are, by role, the names the config file gives the
// nodes (fileNodes) cfg does not have yet, in the file's order ("" for a
// default name): a file node the cluster has by name is there, and each
// of the cluster's other nodes of that role stands for one the file
// leaves unnamed.
func namesStillWanted(cfg layout.Config, fileNodes []config.Node) map[string][]string {
	listed := map[string]bool{}
	for _, n := range fileNodes {
		listed[n.Name] = true
	}
	unnamed := map[string]int{} // the cluster's nodes the file does not name, by role
	for _, n := range cfg.Network.Nodes[min(1, len(cfg.Network.Nodes)):] {
		if !listed[n.Name] {
			unnamed[n.Role]++
		}
	}
	out := map[string][]string{}
	for _, n := range fileNodes {
		if _, _, err := cfg.FindNode(n.Name); n.Name != "" && err == nil {
			continue
		}
		if n.Name == "" && unnamed[n.Role] > 0 {
			unnamed[n.Role]--
			continue
		}
		out[n.Role] = append(out[n.Role], n.Name)
	}
	return out
}
