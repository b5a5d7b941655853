package swap

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/devk/devk/build"
	"github.com/devk/devk/internal/kube"
	"github.com/devk/devk/internal/poll"
	"github.com/devk/devk/phase"
	"github.com/devk/devk/swap/binary"
)

// nodeReadyPoll is how often the wait for a restarted kubelet looks at
// the Node and its Lease.
const nodeReadyPoll = 500 * time.Millisecond

func kubectlPhase() *phase.Phase[*Job] {
	return binaryPhase("kubectl", "install the built kubectl: compare bytes, atomic rename keeping PATH.prev, `kubectl version --client`",
		func(j *Job) ([]string, []string) {
			return []string{j.builtBinary("kubectl")}, []string{j.KubectlDest, binary.PrevPath(j.KubectlDest)}
		})
}

func kubeletPhase() *phase.Phase[*Job] {
	return binaryPhase("kubelet", "install the built kubelet on each node of devk's cluster (or those --node names), one at a time: restart it and wait for the node to be Ready (else the old one goes back there, and the swap stops)",
		func(j *Job) ([]string, []string) {
			if len(j.Kubelets) == 0 {
				return nil, []string{"nothing: no kubelet of a devk cluster here"}
			}
			reads := []string{j.builtBinary("kubelet")}
			var writes []string
			for _, k := range j.Kubelets {
				reads = append(reads, "Node and Lease "+k.Node)
				writes = append(writes, k.Binary, binary.PrevPath(k.Binary), k.Node+"'s kubelet process (restarted)")
			}
			for _, k := range j.KeptKubelets {
				writes = append(writes, "not "+k.Node+"'s kubelet: "+k.Why)
			}
			return reads, writes
		})
}

// binaryPhase swaps (or rolls back) the binary of the component name,
// when it was named.
func binaryPhase(name, short string, io func(*Job) ([]string, []string)) *phase.Phase[*Job] {
	return &phase.Phase[*Job]{
		Name:  name,
		Short: short,
		If:    func(j *Job) (bool, string) { return j.named(name), "not named" },
		IO: func(j *Job) ([]string, []string) {
			if !j.named(name) {
				return nil, nil
			}
			return io(j)
		},
		Run: func(ctx context.Context, j *Job) (phase.Outcome, error) {
			c, err := build.Lookup(name)
			if err != nil {
				return phase.Done, err
			}
			outs, err := j.swapBinaries(ctx, c)
			changed := 0
			var details []string
			for _, out := range outs {
				j.Report.Binaries = append(j.Report.Binaries, out)
				if out.Changed {
					changed++
					details = append(details, out.Dest+" is "+out.Version)
				} else {
					details = append(details, out.Dest+" holds these bytes already")
				}
			}
			if err != nil {
				return phase.Done, err
			}
			if name == "kubelet" {
				j.Report.KeptKubelets = j.KeptKubelets
				for _, k := range j.KeptKubelets {
					details = append(details, k.Node+" keeps its kubelet: "+k.Why)
				}
			}
			return phase.Outcome{Detail: strings.Join(details, "; "), Changed: changed > 0}, nil
		},
	}
}

// builtBinary is where the tree's last build of name is, for plans.
func (j *Job) builtBinary(name string) string {
	if j.state != nil {
		if cs := j.state.Components[name]; cs != nil && cs.Binary != nil {
			return cs.Binary.Path
		}
	}
	if j.Rollback {
		return "the .prev of the installed one"
	}
	return "the built " + name + " (" + j.statePath() + ")"
}

// swapBinaries installs (or rolls back) component c's binary: kubectl
// at its destination, or the kubelet on each node of j.Kubelets in turn,
// each node Ready with the new kubelet before the next; the first that
// fails gets its old kubelet back and stops the swap. The outcomes are
// those of the binaries it got to, the failed one's too when it changed.
func (j *Job) swapBinaries(ctx context.Context, c build.Component) ([]BinaryOutcome, error) {
	if c.Name != "kubelet" {
		out, err := j.swapBinary(ctx, c, j.KubectlDest, binary.KubectlVersion)
		if err != nil && !out.Changed {
			return nil, err
		}
		return []BinaryOutcome{out}, err
	}
	if len(j.Kubelets) == 0 {
		return nil, fmt.Errorf("no devk cluster runs a kubelet here: `devk swap kubelet` replaces the kubelet of a cluster made by `devk up`")
	}
	if err := j.lockNode(); err != nil {
		return nil, err
	}
	var outs []BinaryOutcome
	for _, k := range j.Kubelets {
		out, err := j.swapKubelet(ctx, c, k)
		if err == nil || out.Changed {
			outs = append(outs, out)
		}
		if err != nil {
			if len(j.Kubelets) > 1 {
				err = fmt.Errorf("node %s: %w", k.Node, err)
			}
			return outs, err
		}
	}
	return outs, nil
}

// swapBinary installs the built binary of c at dest (or puts dest's
// .prev back), checked by check.
func (j *Job) swapBinary(ctx context.Context, c build.Component, dest string, check binary.Check) (BinaryOutcome, error) {
	out := BinaryOutcome{Component: c.Name}
	if dest == "" {
		return out, fmt.Errorf("no destination for %s: pass --dest PATH", c.Name)
	}
	var err error
	if j.Rollback {
		out.Result, err = binary.Rollback(ctx, dest, check)
	} else {
		debug := j.Debug != nil && !j.Debug.Stop
		cs := j.state.Components[c.Name]
		if cs == nil || cs.BinaryOf(debug) == nil {
			return out, fmt.Errorf("%s is not built yet: run `devk build %s`", c.Name, c.Name)
		}
		out.Result, err = binary.Install(ctx, cs.BinaryOf(debug).Path, dest, check)
	}
	return out, err
}

// swapKubelet installs the kubelet on node k, restarts it and waits for
// the node to be Ready with it; if it is not, the old kubelet goes back.
func (j *Job) swapKubelet(ctx context.Context, c build.Component, k KubeletNode) (BinaryOutcome, error) {
	out, err := j.swapBinary(ctx, c, k.Binary, binary.VersionFlag("--version"))
	out.Node = k.Node
	if err != nil || (!out.Changed && (j.Debug == nil || !j.Debug.Restart)) {
		return out, err
	}
	restart := func(ctx context.Context) error {
		since := time.Now()
		if err := k.Restart(ctx); err != nil {
			return err
		}
		if j.atStart() {
			return nil // it waits before main for a debugger client: not Ready until continued
		}
		return j.waitNodeReady(ctx, k.Node, since)
	}
	if rerr := restart(ctx); rerr != nil {
		// Put the old kubelet back and restart it again.
		if !j.Rollback && out.Prev != "" {
			if _, err := binary.Rollback(ctx, k.Binary, nil); err == nil {
				if err := restart(context.WithoutCancel(ctx)); err == nil {
					return out, fmt.Errorf("the new kubelet did not bring node %s Ready (%v): %w; the old kubelet is back and Ready", k.Node, rerr, ErrRolledBack)
				}
			}
		}
		return out, fmt.Errorf("restart the kubelet: %w (its log is in the cluster's logs dir)", rerr)
	}
	return out, nil
}

// waitNodeReady waits until the restarted kubelet of node name has
// itself reported the node Ready (WaitNodeReady).
func (j *Job) waitNodeReady(ctx context.Context, name string, since time.Time) error {
	client, err := kube.Client(j.Node.Kubeconfig)
	if err != nil {
		return err
	}
	return WaitNodeReady(ctx, client, name, since, j.Timeout) // NewJob's default when not given
}

// WaitNodeReady waits, at most timeout, until node name's kubelet
// restarted at since has itself reported the node Ready: its Ready
// condition True with a heartbeat from since on, and the node lease
// renewed after since. The old kubelet's last Ready=True is not enough:
// a starting kubelet posts the node's status at once, Ready=False until
// it has checked its runtime ("container runtime status check may not
// have completed yet"), and only then Ready=True.
func WaitNodeReady(ctx context.Context, client kubernetes.Interface, name string, since time.Time, timeout time.Duration) error {
	last := "no node " + name + " yet"
	// Conditions' heartbeats are whole seconds.
	from := since.Truncate(time.Second)
	err := wait.PollUntilContextTimeout(ctx, nodeReadyPoll, timeout, true, func(ctx context.Context) (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range n.Status.Conditions {
			if c.Type != corev1.NodeReady {
				continue
			}
			last = fmt.Sprintf("node %s Ready=%s (%s)", n.Name, c.Status, c.Message)
			if c.Status != corev1.ConditionTrue {
				return false, nil
			}
			if c.LastHeartbeatTime.Time.Before(from) {
				last = fmt.Sprintf("node %s Ready as its old kubelet last said (at %s), waiting for the restarted kubelet's status", n.Name, c.LastHeartbeatTime.Format(time.RFC3339))
				return false, nil
			}
			// The node lease's renew time (microseconds, renewed at
			// once by a starting kubelet) tells the new kubelet from
			// an old heartbeat in the same second.
			lease, err := client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, n.Name, metav1.GetOptions{})
			if err == nil && lease.Spec.RenewTime != nil && lease.Spec.RenewTime.Time.After(since) {
				return true, nil
			}
			last = fmt.Sprintf("node %s Ready, waiting for the restarted kubelet to renew its lease", n.Name)
		}
		return false, nil
	})
	if poll.TimedOut(ctx, err) {
		return fmt.Errorf("node %s not Ready after %s: %s", name, timeout, last)
	}
	return err
}
