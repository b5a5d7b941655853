package swap

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/devk/devk/build"
	"github.com/devk/devk/internal/execx"
	"github.com/devk/devk/internal/kube"
	"github.com/devk/devk/internal/poll"
	"github.com/devk/devk/phase"
)

// nodeReadyPoll is how often the wait for a restarted kubelet looks at
// the Node and its Lease.
const nodeReadyPoll = 500 * time.Millisecond

func kubectlPhase() *phase.Phase[*Job] {
	return binaryPhase("kubectl", "install the built kubectl: compare bytes, atomic rename keeping PATH.prev, `kubectl version --client`",
		func(j *Job) ([]string, []string) {
			return []string{j.builtBinary("kubectl")}, []string{j.KubectlDest, PrevPath(j.KubectlDest)}
		})
}

func kubeletPhase() *phase.Phase[*Job] {
	return binaryPhase("kubelet", "install the built kubelet of devk's cluster, restart it and wait for the node to be Ready (else the old one goes back)",
		func(j *Job) ([]string, []string) {
			if j.Kubelet == nil {
				return nil, []string{"nothing: no kubelet of a devk cluster here"}
			}
			return []string{j.builtBinary("kubelet"), "Node and Lease of " + j.Node.Kubeconfig + "'s server"},
				[]string{j.Kubelet.Binary, PrevPath(j.Kubelet.Binary), "the kubelet process (restarted)"}
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
			out, err := j.swapBinary(ctx, c)
			if err == nil || out.Changed {
				j.Report.Binaries = append(j.Report.Binaries, out)
			}
			switch {
			case err != nil:
				return phase.Done, err
			case !out.Changed:
				return phase.Unchanged("%s holds these bytes already", out.Dest), nil
			}
			return phase.Changed("%s is %s", out.Dest, out.Version), nil
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

func (j *Job) swapBinary(ctx context.Context, c build.Component) (BinaryOutcome, error) {
	out := BinaryOutcome{Component: c.Name}
	var dest string
	var check CheckFunc
	switch c.Name {
	case "kubectl":
		dest, check = j.KubectlDest, KubectlCheck
	case "kubelet":
		if j.Kubelet == nil {
			return out, fmt.Errorf("no devk cluster runs a kubelet here: `devk swap kubelet` replaces the kubelet of a cluster made by `devk up`")
		}
		if err := j.lockNode(); err != nil {
			return out, err
		}
		dest, check = j.Kubelet.Binary, versionCheck("--version")
	}
	if dest == "" {
		return out, fmt.Errorf("no destination for %s: pass --dest PATH", c.Name)
	}
	var err error
	if j.Rollback {
		out.BinaryResult, err = RollbackBinary(ctx, dest, check)
	} else {
		cs := j.state.Components[c.Name]
		if cs == nil || cs.Binary == nil {
			return out, fmt.Errorf("%s is not built yet: run `devk build %s`", c.Name, c.Name)
		}
		out.BinaryResult, err = InstallBinary(ctx, cs.Binary.Path, dest, check)
	}
	if err != nil || !out.Changed || c.Name != "kubelet" {
		return out, err
	}
	restart := func(ctx context.Context) error {
		since := time.Now()
		if err := j.Kubelet.Restart(ctx); err != nil {
			return err
		}
		return j.waitNodeReady(ctx, since)
	}
	if rerr := restart(ctx); rerr != nil {
		// Put the old kubelet back and restart it again.
		if !j.Rollback && out.Prev != "" {
			if _, err := RollbackBinary(ctx, dest, nil); err == nil {
				if err := restart(context.WithoutCancel(ctx)); err == nil {
					return out, fmt.Errorf("the new kubelet did not bring the node Ready (%v): %w; the old kubelet is back and Ready", rerr, ErrRolledBack)
				}
			}
		}
		return out, fmt.Errorf("restart the kubelet: %w (its log is in the cluster's logs dir)", rerr)
	}
	return out, nil
}

// waitNodeReady waits until a node reports Ready and its kubelet renewed
// the node lease after since: the restarted kubelet, not the old one's
// last word.
func (j *Job) waitNodeReady(ctx context.Context, since time.Time) error {
	client, err := kube.Client(j.Node.Kubeconfig)
	if err != nil {
		return err
	}
	timeout := j.Timeout // NewJob's default when not given
	last := "no node yet"
	err = wait.PollUntilContextTimeout(ctx, nodeReadyPoll, timeout, true, func(ctx context.Context) (bool, error) {
		nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, n := range nodes.Items {
			for _, c := range n.Status.Conditions {
				if c.Type != corev1.NodeReady {
					continue
				}
				last = fmt.Sprintf("node %s Ready=%s (%s)", n.Name, c.Status, c.Message)
				if c.Status != corev1.ConditionTrue {
					continue
				}
				// The node lease's renew time (microseconds, renewed at
				// once by a starting kubelet) tells the new kubelet from
				// the old one's last heartbeat.
				lease, err := client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, n.Name, metav1.GetOptions{})
				if err == nil && lease.Spec.RenewTime != nil && lease.Spec.RenewTime.Time.After(since) {
					return true, nil
				}
				last = fmt.Sprintf("node %s Ready, waiting for the restarted kubelet to renew its lease", n.Name)
			}
		}
		return false, nil
	})
	if poll.TimedOut(ctx, err) {
		return fmt.Errorf("node not Ready after %s: %s", timeout, last)
	}
	return err
}

// versionCheck runs `binary flag` and returns what it printed.
func versionCheck(flag string) CheckFunc {
	return func(ctx context.Context, path string) (string, error) {
		out, err := execx.Output(ctx, execx.Cmd{Name: path, Args: []string{flag}})
		if err != nil {
			return "", err
		}
		v := strings.TrimSpace(string(out))
		return strings.TrimPrefix(v, "Kubernetes "), nil
	}
}
