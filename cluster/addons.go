package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/devk/devk/cluster/internal/addons"
	"github.com/devk/devk/internal/addon"
	"github.com/devk/devk/internal/cri"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/poll"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/phase"
)

// The addons are what kubeadm's addon phase installs: kube-proxy (a
// DaemonSet) and CoreDNS (a Deployment behind the kube-dns Service),
// which cluster/internal/addons renders and applies.
//
// The phases are addon/kube-proxy and addon/coredns, which only apply,
// then addon/wait, which waits for both workloads at once: their pods
// pull and start side by side, so up pays for the slower of the two, not
// for both in turn. Skipping an addon's phase leaves it out of the wait;
// skipping addon/wait applies without waiting.

// upAddon is one of up's addons: what it applies and the workload
// addon/wait waits for.
type upAddon struct {
	// Name is the phase's and the component's (Config.Images key).
	Name  string
	Short string
	// Writes names the objects, for --dry-run.
	Writes []string
	// objects apply the addon's objects, the workload last.
	objects func(ctx context.Context, cs kubernetes.Interface, cfg layout.Config, image string, n *addons.Count) error
	// workload is the addon's DaemonSet or Deployment.
	workload addon.Workload
}

// KubeProxyRuns says whether up may run kube-proxy on the cluster cfg
// describes, and why not. kube-proxy runs privileged on the host network
// of its node and rewrites that network namespace's iptables: it may run
// only where the node's host-network pods are in the node's own network
// namespace (devk's containerd there), never where they share the
// machine's.
func KubeProxyRuns(cfg layout.Config) (bool, string) {
	if !cfg.OwnRuntime {
		return false, "the runtime is not devk's containerd in the node's network namespace: host-network pods may share the machine's, whose iptables kube-proxy would rewrite"
	}
	return true, ""
}

// upAddons are up's addons in the order of their phases.
func upAddons() []upAddon {
	return []upAddon{
		{
			Name: addons.KubeProxy,
			Short: "kube-proxy (iptables mode) as kubeadm's DaemonSet: ServiceAccount, node-proxier binding, ConfigMap (config.conf, " +
				"kubeconfig.conf), its Role and RoleBinding; conntrack limits left alone",
			Writes:   addons.KubeProxyWrites(),
			objects:  addons.ApplyKubeProxy,
			workload: addonWorkload(addons.KubeProxy),
		},
		{
			Name: addons.CoreDNS,
			Short: "CoreDNS as kubeadm's Deployment behind Service kube-dns at the kubelet's clusterDNS; it answers for the " +
				"cluster domain only: other names are not forwarded (devk's clusters contact nothing beyond the machine)",
			Writes:   addons.CoreDNSWrites(),
			objects:  addons.ApplyCoreDNS,
			workload: addonWorkload(addons.CoreDNS),
		},
	}
}

// addonWorkload is the workload of the addon component (internal/addon's
// Workloads; TestAddonWorkloads checks that each of up's addons has one).
func addonWorkload(component string) addon.Workload {
	w, _ := addon.Lookup(component)
	return w
}

// addonPhases are up's addon/… phases: one per addon, then the one wait.
func addonPhases() []*phase.Phase[*Cluster] {
	var out []*phase.Phase[*Cluster]
	for _, a := range upAddons() {
		p := &phase.Phase[*Cluster]{
			Name:  a.Name,
			Short: a.Short,
			IO: func(c *Cluster) ([]string, []string) {
				return []string{c.Files.ConfigFile() + " (images." + a.Name + ")"}, a.Writes
			},
			Run: func(ctx context.Context, c *Cluster) (phase.Outcome, error) { return c.applyAddon(ctx, a) },
		}
		p.If = func(c *Cluster) (bool, string) {
			if on, key := addons.On(c.Config.Spec.Addons, a.Name); !on {
				return false, key + " is false in the cluster's config (devk up --config)"
			}
			if a.Name == addons.KubeProxy {
				return KubeProxyRuns(c.Config)
			}
			return true, ""
		}
		out = append(out, p)
	}
	return append(out, &phase.Phase[*Cluster]{
		Name:  "wait",
		Short: "wait until the addons applied in this run are rolled out (as kubectl rollout status decides: every pod updated and available), both at once",
		IO: func(c *Cluster) ([]string, []string) {
			return []string{"daemonset kube-system/kube-proxy", "deployment kube-system/coredns"}, nil
		},
		Run: phase.Method((*Cluster).runAddonWait),
	})
}

// applyAddon applies a's objects. Its work was done already when no
// object changed and the workload is ready; otherwise addon/wait waits
// for the workload.
func (c *Cluster) applyAddon(ctx context.Context, a upAddon) (phase.Outcome, error) {
	image := c.Config.Images[a.Name]
	if image == "" {
		return phase.Done, fmt.Errorf("cluster.json records no %s image (images.%s): the images phase pushes it, so run `devk up` again (or `devk up phase images`), or leave the addon out with --skip-phases addon/%s",
			a.Name, a.Name, a.Name)
	}
	cs, err := c.Client()
	if err != nil {
		return phase.Done, err
	}
	// An image `devk swap` put there stays, as a swapped static pod's
	// does.
	live, err := addon.Get(ctx, cs, a.workload)
	if err != nil {
		return phase.Done, err
	}
	image, _ = addon.KeptImage(image, live)
	return c.applyAddonWith(ctx, cs, a, image)
}

func (c *Cluster) applyAddonWith(ctx context.Context, cs kubernetes.Interface, a upAddon, image string) (phase.Outcome, error) {
	var n addons.Count
	if err := a.objects(ctx, cs, c.Config, image, &n); err != nil {
		return phase.Done, fmt.Errorf("apply %s's objects (%d applied): %w", a.Name, n.Applied, err)
	}
	if n.Changed > 0 {
		c.addonsApplied = append(c.addonsApplied, a.workload)
		return phase.Changed("%d of %d objects written", n.Changed, n.Applied), nil
	}
	if err := c.ready(ctx, cs, a.workload); err != nil {
		c.addonsApplied = append(c.addonsApplied, a.workload)
		return phase.Changed("%d objects unchanged; not ready: %v", n.Applied, err), nil
	}
	return phase.Unchanged("%d objects unchanged, %s ready", n.Applied, a.workload), nil
}

// runAddonWait waits, at most addonWaitTimeout, until every workload the
// addon phases of this run applied is ready.
func (c *Cluster) runAddonWait(ctx context.Context) (phase.Outcome, error) {
	pending := c.addonsApplied
	if len(pending) == 0 {
		return phase.Unchanged("nothing to wait for"), nil
	}
	cs, err := c.Client()
	if err != nil {
		return phase.Done, err
	}
	t0 := time.Now()
	took, pending, err := waitEach(ctx, c, c.FirstNode(), addonPollInterval, addonWaitTimeout, pending, func(ctx context.Context, w addon.Workload) (string, error) {
		return w.Component, c.ready(ctx, cs, w)
	})
	if poll.TimedOut(ctx, err) {
		// A last look, under the phase's context: the poll's last checks
		// may have been cut short by its deadline.
		var b strings.Builder
		for _, w := range pending {
			why := c.ready(ctx, cs, w)
			if why == nil {
				continue
			}
			fmt.Fprintf(&b, "\n%s: %v", w, why)
			s, err := addon.Get(ctx, cs, w)
			var pods []corev1.Pod
			if err == nil && s != nil {
				pods, err = s.Pods(ctx, cs)
			}
			switch {
			case err != nil:
				fmt.Fprintf(&b, "\n  (its pods could not be listed: %v)", err)
			case s != nil: // else gone, as why says
				b.WriteString(s.DescribeNotReady(pods, c.kubectlCommand()))
			}
		}
		if b.Len() == 0 {
			return phase.Unchanged("ready after %s", progress.Round(time.Since(t0))), nil
		}
		return phase.Done, fmt.Errorf("the addons were not ready after %s:%s", addonWaitTimeout, b.String())
	}
	if err != nil {
		return phase.Done, err
	}
	return phase.Unchanged("%s", strings.Join(took, ", ")), nil
}

// ready says why w is not ready, nil when it is. When this run started
// the kubelet, the node's pods may be new while the API still holds their
// predecessors' ready statuses (after `devk down --keep-data`, or a
// reboot): then w is ready only once every container its pods report
// runs in the node's runtime.
func (c *Cluster) ready(ctx context.Context, cs kubernetes.Interface, w addon.Workload) error {
	s, err := addon.Get(ctx, cs, w)
	if err != nil {
		return err
	}
	if s == nil {
		return fmt.Errorf("the cluster has no %s", w)
	}
	if done, why := s.RolledOut(); !done {
		return errors.New(why)
	}
	if c.kubeletStarted.IsZero() {
		return nil
	}
	pods, err := s.Pods(ctx, cs)
	if err != nil {
		return err
	}
	// The pods run on every node, each node's in its own runtime.
	ns, err := c.nodes()
	if err != nil {
		return err
	}
	var running []cri.Container
	for _, n := range ns {
		cs, err := runningContainers(ctx, c.criSocket(n), metav1.NamespaceSystem)
		if err != nil {
			return fmt.Errorf("node %s: %w", n.Name(), err)
		}
		running = append(running, cs...)
	}
	return statusesCurrent(pods, running)
}

// statusesCurrent says which of a ready workload's pods is not ready
// after all, or reports a container that does not run (a status from
// before the node's runtime was emptied); pods on their way out do not
// count.
func statusesCurrent(pods []corev1.Pod, running []cri.Container) error {
	ids := map[string]bool{}
	for _, ct := range running {
		ids[ct.ID] = true
	}
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		if !addon.PodReady(&p) {
			return fmt.Errorf("pod %s is not ready (its workload's status is older)", p.Name)
		}
		for _, st := range p.Status.ContainerStatuses {
			_, id, _ := strings.Cut(st.ContainerID, "://")
			if !ids[id] {
				return fmt.Errorf("pod %s reports container %s ready, which does not run: the kubelet has not reported the pod since it started", p.Name, st.Name)
			}
		}
	}
	return nil
}

// kubectlCommand is a kubectl command line for kube-system of this
// cluster that works without the user's kubeconfig or a kubectl on PATH.
func (c *Cluster) kubectlCommand() string {
	kubectl := "kubectl"
	if _, err := os.Stat(c.KubectlPath()); err == nil {
		kubectl = c.KubectlPath()
	}
	return kubectl + " --kubeconfig " + c.FirstNode().Files.Kubeconfig("admin") + " -n kube-system"
}

// runningContainers are the running containers of namespace's pods in
// the runtime at socket.
func runningContainers(ctx context.Context, socket, namespace string) ([]cri.Container, error) {
	rt, err := cri.Dial(socket)
	if err != nil {
		return nil, err
	}
	defer rt.Close()
	return rt.Containers(ctx, cri.Filter{PodNamespace: namespace, RunningOnly: true})
}
