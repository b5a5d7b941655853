package cluster

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/devk/devk/cluster/internal/addons"
	"github.com/devk/devk/internal/addon"
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
// describes, and why not (addons.KubeProxyRuns).
func KubeProxyRuns(cfg layout.Config) (bool, string) { return addons.KubeProxyRuns(cfg) }

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
			Run: func(ctx context.Context, c *Cluster) (phase.Outcome, error) { return c.applyAddon(ctx, a, false) },
		}
		p.If = func(c *Cluster) (bool, string) { return addons.Applies(c.Config, a.Name) }
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

// ApplyKubeProxyAgain applies kube-proxy's objects again, when its
// DaemonSet is there already (up's addon phase applies them first),
// after a node's own kube-proxy came or went (addons.NodeKubeProxy).
func (c *Cluster) ApplyKubeProxyAgain(ctx context.Context) error {
	if ok, _ := addons.Applies(c.Config, addons.KubeProxy); !ok {
		return nil
	}
	_, err := c.applyAddon(ctx, upAddons()[0], true)
	return err
}

// applyAddon applies a's objects (again: only when its workload is
// there). Its work was done already when no object changed and the
// workload is ready; otherwise addon/wait waits for the workload.
func (c *Cluster) applyAddon(ctx context.Context, a upAddon, again bool) (phase.Outcome, error) {
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
	if again && live == nil {
		return phase.Unchanged("no %s yet", a.workload), nil
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
		why := addons.DescribeNotReady(ctx, cs, pending, func(ctx context.Context, w addon.Workload) error { return c.ready(ctx, cs, w) }, c.kubectlCommand())
		if why == "" {
			return phase.Unchanged("ready after %s", progress.Round(time.Since(t0))), nil
		}
		return phase.Done, fmt.Errorf("the addons were not ready after %s:%s", addonWaitTimeout, why)
	}
	if err != nil {
		return phase.Done, err
	}
	return phase.Unchanged("%s", strings.Join(took, ", ")), nil
}

// ready says why w is not ready, nil when it is (addons.Ready): when
// this run started the kubelet, only once every container its pods
// report runs in the nodes' runtimes.
func (c *Cluster) ready(ctx context.Context, cs kubernetes.Interface, w addon.Workload) error {
	if c.kubeletStarted.IsZero() {
		return addons.Ready(ctx, cs, w, nil)
	}
	return addons.Ready(ctx, cs, w, func() ([]addons.Runtime, error) {
		ns, err := c.nodes()
		if err != nil {
			return nil, err
		}
		var out []addons.Runtime
		for _, n := range ns {
			out = append(out, addons.Runtime{Node: n.Name(), Socket: c.criSocket(n)})
		}
		return out, nil
	})
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
