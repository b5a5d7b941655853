package upgrade

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/devk/devk/cluster/kubeadmupgrade"
	"github.com/devk/devk/internal/addon"
	"github.com/devk/devk/internal/staticpod"
	"github.com/devk/devk/internal/supervise"
)

var (
	// helpFlag is a flag's line in a component's --help (cobra's
	// "  -v, --name type  usage", etcd's "  --name 'default'").
	helpFlag = regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z0-9][a-z0-9-]*)\b`)
	// helpGate is a feature gate's line in --feature-gates' usage
	// ("kube:Name=true|false (BETA - default=true)"; "Name=…" before
	// v1.31).
	helpGate = regexp.MustCompile(`(?m)^\s+(?:kube:)?([A-Z][A-Za-z0-9]*)=true\|false`)
)

// Help is what a binary's --help says it takes.
type Help struct {
	Flags map[string]bool
	Gates map[string]bool
}

// ParseHelp reads the flags and feature gates a --help lists.
func ParseHelp(text string) Help {
	h := Help{Flags: map[string]bool{}, Gates: map[string]bool{}}
	for _, m := range helpFlag.FindAllStringSubmatch(text, -1) {
		h.Flags[m[1]] = true
	}
	for _, m := range helpGate.FindAllStringSubmatch(text, -1) {
		h.Gates[m[1]] = true
	}
	return h
}

// helpOf runs binary --help (which exits 0, or 2 with the help on stderr
// for some) and parses it.
func helpOf(ctx context.Context, binary string) (Help, error) {
	out, _ := exec.CommandContext(ctx, binary, "--help").CombinedOutput()
	h := ParseHelp(string(out))
	if len(h.Flags) == 0 {
		return h, fmt.Errorf("%s --help lists no flags:\n%s", binary, out)
	}
	return h, nil
}

// Unknown says what of flags (--name → value) and gates a binary's help
// does not list, one line each, naming where each is set.
func (h Help) Unknown(component, where string, flags map[string]string, gates []string) []string {
	var out []string
	for _, f := range slices.Sorted(maps.Keys(flags)) {
		if !h.Flags[f] {
			out = append(out, fmt.Sprintf("%s: flag --%s (in %s) is not one the new %s takes: it was removed or renamed; drop it (extraArgs in the config file, or the manifest) and run devk upgrade again", component, f, where, component))
		}
	}
	for _, g := range gates {
		if !h.Gates[g] {
			out = append(out, fmt.Sprintf("%s: feature gate %s (in %s) is not one the new %s knows: it graduated and was removed, or was renamed; drop it from featureGates and run devk upgrade again", component, g, where, component))
		}
	}
	return out
}

// gatesOf are the feature gates a --feature-gates value sets
// ("A=true,kube:B=false").
func gatesOf(value string) []string {
	var out []string
	for _, kv := range strings.Split(value, ",") {
		name, _, _ := strings.Cut(strings.TrimSpace(kv), "=")
		name = strings.TrimPrefix(name, "kube:")
		if name != "" {
			out = append(out, name)
		}
	}
	return out
}

// checkFlags runs each new binary's --help and refuses, before anything
// changes, a flag or feature gate the cluster gives that component which
// the new one does not take: the static pods' manifests on every
// control-plane node, kube-proxy's DaemonSet, each node's kubelet command
// line and its config's featureGates (on a cluster kubeadm bootstraps,
// the manifests' extraArgs and the feature gates: kubeadm writes the
// rest). It says how many it checked.
func (j *Job) checkFlags(ctx context.Context) (int, error) {
	helps := map[string]Help{}
	help := func(component string) (Help, error) {
		if h, ok := helps[component]; ok {
			return h, nil
		}
		bin, err := j.newBinary(component)
		if err != nil {
			return Help{}, err
		}
		h, err := helpOf(ctx, bin)
		helps[component] = h
		return h, err
	}
	var problems []string
	checked := 0
	check := func(component, container, where string, flags map[string]string, extraGates []string) error {
		h, err := help(component)
		if err != nil {
			return err
		}
		gates := append(gatesOf(flags["feature-gates"]), extraGates...)
		checked += len(flags) + len(gates)
		problems = append(problems, h.Unknown(container, where, flags, gates)...)
		return nil
	}
	cs, err := j.client()
	if err != nil {
		return 0, err
	}
	// On a cluster kubeadm bootstraps, the new kubeadm writes the flags
	// itself (translating its own between versions): what it passes on
	// as given is checked, the manifests' extraArgs and the kubelets'
	// feature gates.
	var given map[string][]string
	if j.kubeadm() {
		if given, err = kubeadmupgrade.ExtraArgs(ctx, cs); err != nil {
			return 0, err
		}
	}
	for _, n := range j.c.Config.ControlPlanes() {
		if n.Leaving {
			continue
		}
		files, err := j.c.Files.Node(j.c.Config, n.Name)
		if err != nil {
			return 0, err
		}
		for _, comp := range controlPlaneComponents {
			path := files.Manifests() + "/" + comp.Pod + ".yaml"
			data, err := os.ReadFile(path)
			if err != nil {
				return 0, fmt.Errorf("read %s's manifest: %w", comp.Pod, err)
			}
			pod, err := staticpod.Parse(data)
			if err != nil {
				return 0, fmt.Errorf("%s: %w", path, err)
			}
			flags := staticpod.Flags(pod, comp.Pod)
			if j.kubeadm() {
				maps.DeleteFunc(flags, func(name, _ string) bool { return !slices.Contains(given[comp.Pod], name) })
			}
			if err := check(comp.Name, comp.Pod, path, flags, nil); err != nil {
				return 0, err
			}
		}
	}
	if err := j.checkProxyAndKubelets(ctx, cs, check); err != nil {
		return 0, err
	}
	if len(problems) > 0 {
		return checked, fmt.Errorf("the cluster gives the new components what they no longer take (nothing was changed):\n  %s", strings.Join(problems, "\n  "))
	}
	return checked, nil
}

// checkProxyAndKubelets checks kube-proxy's flags and each kubelet's
// command line and config's feature gates; on a cluster kubeadm
// bootstraps only the feature gates: kubeadm writes kube-proxy's
// DaemonSet and the kubelets' flags (kubeadm-flags.env), and its
// upgrade translates them.
func (j *Job) checkProxyAndKubelets(ctx context.Context, cs kubernetes.Interface, check func(component, container, where string, flags map[string]string, extraGates []string) error) error {
	if !j.kubeadm() {
		if err := j.checkProxy(ctx, cs, check); err != nil {
			return err
		}
	}
	kubelets, err := j.c.Kubelets()
	if err != nil {
		return err
	}
	for _, k := range kubelets {
		n, err := j.c.NodeNamed(k.Node)
		if err != nil {
			return err
		}
		files, config := n.Files, n.KubeletConfigFile() // devk's, or the one kubeadm wrote
		pid, ok := files.Procs().Running("kubelet")
		if !ok {
			return fmt.Errorf("the kubelet of node %s does not run: start it with `devk up%s` first", k.Node, j.c.NameFlag())
		}
		flags := map[string]string{}
		if !j.kubeadm() {
			argv := supervise.Argv(pid)
			flags = staticpod.Flags(&corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "kubelet", Command: argv}}}}, "kubelet")
		}
		gates, err := configGates(config)
		if err != nil {
			return err
		}
		if err := check("kubelet", "kubelet", "node "+k.Node+"'s kubelet command line and "+config, flags, gates); err != nil {
			return err
		}
	}
	return nil
}

// checkProxy checks the flags of kube-proxy's DaemonSet.
func (j *Job) checkProxy(ctx context.Context, cs kubernetes.Interface, check func(component, container, where string, flags map[string]string, extraGates []string) error) error {
	proxy, _ := addon.Lookup("kube-proxy")
	ds, err := cs.AppsV1().DaemonSets(proxy.Namespace).Get(ctx, proxy.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("read %s: %w", proxy, err)
	}
	pod := &corev1.Pod{Spec: ds.Spec.Template.Spec}
	return check("kube-proxy", "kube-proxy", "DaemonSet "+proxy.String(), staticpod.Flags(pod, "kube-proxy"), nil)
}

// configGates are the featureGates a KubeletConfiguration file sets.
func configGates(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var cfg struct {
		FeatureGates map[string]bool `json:"featureGates"`
	}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return slices.Sorted(maps.Keys(cfg.FeatureGates)), nil
}
