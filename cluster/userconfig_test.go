package cluster

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/devk/devk/cluster/config"
	"github.com/devk/devk/cluster/internal/addons"
	"github.com/devk/devk/cluster/internal/controlplane"
	"github.com/devk/devk/cluster/internal/kubeletconfig"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/internal/staticpod"
	"github.com/devk/devk/phase"
)

const header = "apiVersion: " + config.APIVersion + "\nkind: " + config.Kind + "\n"

// fullConfig sets every key but nodes (cluster/config's tests use it too).
var fullConfig = func() string {
	data, err := os.ReadFile("config/testdata/full.yaml")
	if err != nil {
		panic(err)
	}
	return string(data)
}()

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "devk.yaml")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// openWith opens a cluster in home with the config file body (none
// when empty).
func openWith(t *testing.T, home, name, body string) (*Cluster, error) {
	t.Helper()
	o := Options{Name: name, Home: home, Reporter: progress.Discard()}
	if body != "" {
		o.UserConfigFile = writeConfig(t, body)
	}
	return Open(o)
}

func mustOpenWith(t *testing.T, home, name, body string) *Cluster {
	t.Helper()
	c, err := openWith(t, home, name, body)
	if err != nil {
		t.Fatal(err)
	}
	for comp := range map[string]bool{"etcd": true, "apiserver": true, "controller-manager": true, "scheduler": true} {
		c.Config.Images[comp] = "127.0.0.1:5000/" + comp + "@sha256:" + strings.Repeat("a", 64)
	}
	return c
}

func manifestFlags(t *testing.T, c *Cluster, pod string) map[string]string {
	t.Helper()
	data, err := controlplane.Manifest(pod, controlplane.ManifestInput{Config: c.Config, Node: c.FirstNode().Net, Files: c.FirstNode().Files, Image: c.Config.Images[componentOf(pod)]})
	if err != nil {
		t.Fatal(err)
	}
	p, err := staticpod.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	return staticpod.Flags(p, pod)
}

func componentOf(pod string) string {
	for _, sp := range StaticPods {
		if sp.Name == pod {
			return sp.Component
		}
	}
	return ""
}

// TestUserConfigReachesEveryComponent: a file that sets every key makes
// a cluster whose config, manifests, kubelet and kube-proxy say what the
// file says.
func TestUserConfigReachesEveryComponent(t *testing.T) {
	c := mustOpenWith(t, t.TempDir(), "", fullConfig)
	cfg := c.Config
	if cfg.Name != "dev" || cfg.PodCIDR != "10.200.0.0/16" || cfg.ServiceCIDR != "10.100.0.0/16" ||
		cfg.Network.Subnet != "10.251.7.0/24" || cfg.FirstNode().IP != "10.251.7.2" || !cfg.KeepTaint {
		t.Fatalf("config: name %s pods %s services %s nodes %s advertise %s keepTaint %v", cfg.Name, cfg.PodCIDR, cfg.ServiceCIDR, cfg.Network.Subnet, cfg.FirstNode().IP, cfg.KeepTaint)
	}
	if err := cfg.Validate("dev"); err != nil {
		t.Fatalf("the config a file makes does not validate as cluster.json: %v", err)
	}
	if pc, err := c.pkiConfig(c.FirstNode()); err != nil || pc.Validity != 10*time.Minute {
		t.Errorf("certValidity 10m: the certificates get %v (%v)", pc.Validity, err)
	}

	api := manifestFlags(t, c, "kube-apiserver")
	for flag, want := range map[string]string{
		"feature-gates":            "ComponentFlagz=true,ComponentStatusz=true", // the component's gate over the cluster's
		"runtime-config":           "api/alpha=false",
		"emulated-version":         "1.33",
		"enable-admission-plugins": "NodeRestriction,AlwaysPullImages", // an extra arg over devk's default
		"audit-log-maxage":         "3",                                // an extra arg devk does not set
		"service-cluster-ip-range": "10.100.0.0/16",
		"etcd-servers":             "https://10.251.7.2:2379",
	} {
		if api[flag] != want {
			t.Errorf("kube-apiserver --%s=%q, want %q", flag, api[flag], want)
		}
	}
	cm := manifestFlags(t, c, "kube-controller-manager")
	if cm["feature-gates"] != "ComponentFlagz=true,ComponentStatusz=false" || cm["controllers"] != "*" || cm["cluster-cidr"] != "10.200.0.0/16" || cm["runtime-config"] != "" || cm["emulated-version"] != "1.33" {
		t.Errorf("kube-controller-manager flags: %v", cm)
	}
	if s := manifestFlags(t, c, "kube-scheduler"); s["v"] != "4" || s["feature-gates"] != "ComponentFlagz=true,ComponentStatusz=false" || s["emulated-version"] != "1.33" {
		t.Errorf("kube-scheduler flags: %v", s)
	}
	if e := manifestFlags(t, c, "etcd"); e["feature-gates"] != "" || e["emulated-version"] != "" {
		t.Errorf("etcd got --feature-gates=%q --emulated-version=%q; it is not a Kubernetes component", e["feature-gates"], e["emulated-version"])
	}

	kc, err := kubeletconfig.YAML(kubeletconfig.Input{Config: cfg, Node: c.FirstNode().Net, Files: c.FirstNode().Files, CRISocket: cfg.CRISocket})
	if err != nil {
		t.Fatal(err)
	}
	var kubelet struct {
		FeatureGates map[string]bool `json:"featureGates"`
		ClusterDNS   []string        `json:"clusterDNS"`
	}
	if err := yaml.Unmarshal(kc, &kubelet); err != nil {
		t.Fatal(err)
	}
	if g := kubelet.FeatureGates; len(g) != 3 || !g["ComponentFlagz"] || g["ComponentStatusz"] || g["KubeletTracing"] {
		t.Errorf("kubelet featureGates %v", g)
	}
	if !slices.Equal(kubelet.ClusterDNS, []string{"10.100.0.10"}) {
		t.Errorf("kubelet clusterDNS %v, want the serviceSubnet's tenth address", kubelet.ClusterDNS)
	}
	args := c.FirstNode().KubeletArgs()
	for _, want := range []string{"--v=3", "--max-pods=50", "--node-ip=10.251.7.2"} {
		if !slices.Contains(args, want) {
			t.Errorf("kubelet args %v lack %s", args, want)
		}
	}
	if slices.Contains(args, "--v=1") {
		t.Errorf("kubelet args %v keep the default --v=1 under the file's --v=3", args)
	}

	kp, err := addons.KubeProxyConfigYAML(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(kp), "featureGates:\n  ComponentFlagz: false\n  ComponentStatusz: false\n") {
		t.Errorf("kube-proxy config lacks the feature gates:\n%s", kp)
	}
	if got := addons.KubeProxyCommand(cfg.Spec.KubeProxy.ExtraArgs); !slices.Equal(got, []string{"/usr/local/bin/kube-proxy", "--config=/var/lib/kube-proxy/config.conf", "--hostname-override=$(NODE_NAME)", "--v=2"}) {
		t.Errorf("kube-proxy command %q", got)
	}

	for _, p := range addonPhases() {
		if p.If == nil {
			continue
		}
		run, why := p.If(c)
		switch p.Name {
		case addons.CoreDNS:
			if run || !strings.Contains(why, "addons.coreDNS is false") {
				t.Errorf("addon/coredns with addons.coreDNS: false: run %v (%s)", run, why)
			}
		case addons.KubeProxy:
			if ok, _ := KubeProxyRuns(cfg); run != ok {
				t.Errorf("addon/kube-proxy with addons.kubeProxy left out: run %v (%s), want KubeProxyRuns' %v", run, why, ok)
			}
		}
	}
}

// TestUserConfigAgainstTheMachine: what depends on the machine, other
// clusters and the flags is refused at Open, before anything is made.
func TestUserConfigAgainstTheMachine(t *testing.T) {
	home := t.TempDir()
	other := mustOpenWith(t, home, "", header+"name: other\nnetworking:\n  nodeSubnet: 10.251.9.0/24\n")
	if err := other.SaveConfig(); err != nil {
		t.Fatal(err)
	}
	yes := true
	for _, tc := range []struct {
		name, cluster, body string
		keepTaint           *bool
		want                string
	}{
		{"another cluster's nodes", "", header + "name: dev\nnetworking:\n  nodeSubnet: 10.251.9.128/25\n",
			nil, "devk.yaml:5: networking.nodeSubnet: 10.251.9.128/25 overlaps devk cluster other's nodes (10.251.9.0/24): choose another, or leave it out for a free one"},
		// Loopback (which the host routes to lo on every machine) is not
		// private; overlap with a host route: TestPlaceAtTaken.
		{"loopback", "", header + "name: dev\nnetworking:\n  nodeSubnet: 127.1.0.0/24\n", nil, "networking.nodeSubnet: 127.1.0.0/24 is not in a private range"},
		// Only private (RFC 1918) and CGNAT ranges: not multicast, reserved or public ones.
		{"a multicast node subnet", "", header + "name: dev\nnetworking:\n  nodeSubnet: 224.1.0.0/24\n", nil,
			"devk.yaml:5: networking.nodeSubnet: 224.1.0.0/24 is not in a private range: choose a subnet inside 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16 (RFC 1918), or 100.64.0.0/10 (CGNAT)"},
		{"a reserved node subnet", "", header + "name: dev\nnetworking:\n  nodeSubnet: 198.18.0.0/24\n", nil, "198.18.0.0/24 is not in a private range"},
		{"a public node subnet", "", header + "name: dev\nnetworking:\n  nodeSubnet: 8.8.8.0/24\n", nil, "8.8.8.0/24 is not in a private range"},
		{"wider than a private range", "", header + "name: dev\nnetworking:\n  nodeSubnet: 172.0.0.0/8\n", nil, "172.0.0.0/8 is not in a private range"},
		{"the name and --name", "dev2", header + "name: dev\n", nil, `devk.yaml:3: name: is "dev", but --name is "dev2": leave one of them out`},
		{"the taint and --keep-taint", "", header + "controlPlaneTaint: remove\n", &yes, "controlPlaneTaint: is remove, but --keep-taint=true says otherwise"},
		{"the bootstrapper and --bootstrapper", "", header + "bootstrapper: kubeadm\n", nil, "bootstrapper: is kubeadm, but --bootstrapper is devk: leave one of them out"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bootstrapper := ""
			if strings.Contains(tc.body, "bootstrapper:") {
				bootstrapper = layout.BootstrapperDevk
			}
			_, err := Open(Options{Name: tc.cluster, Home: home, UserConfigFile: writeConfig(t, tc.body), KeepTaint: tc.keepTaint, Bootstrapper: bootstrapper})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
			if got := layout.Clusters(home); !slices.Equal(got, []string{"other"}) {
				t.Errorf("clusters after a refused config: %v", got)
			}
		})
	}
	// A dry run checks the file as a run does, and makes nothing either.
	_, _, err := Up(context.Background(), Options{Home: home, UserConfigFile: writeConfig(t, header+"networking:\n  podSubnet: 10.0.0.0/33\n")}, phase.Options{DryRun: true})
	if err == nil || !strings.Contains(err.Error(), `networking.podSubnet: "10.0.0.0/33" is not a CIDR`) {
		t.Errorf("up --dry-run with a bad file: %v", err)
	}
	if _, err := os.Stat(filepath.Join(home, "clusters", layout.DefaultName)); !os.IsNotExist(err) {
		t.Errorf("a refused dry run left a cluster dir: %v", err)
	}
	// A free node subnet is chosen clear of the file's pod subnet.
	c := mustOpenWith(t, home, "", header+"networking:\n  podSubnet: 10.250.0.0/22\n")
	if c.Config.Network.Subnet != "10.250.4.0/24" {
		t.Errorf("node subnet %s beside podSubnet 10.250.0.0/22, want the first free /24 after it, 10.250.4.0/24", c.Config.Network.Subnet)
	}
}

// TestBootstrapperFlag: --bootstrapper kubeadm makes a new cluster
// kubeadm's, as the config file's key does; an existing cluster's cannot
// change either way; a bad value and --kubeadm-skip-phases without
// kubeadm are refused.
func TestBootstrapperFlag(t *testing.T) {
	home := t.TempDir()
	c, err := Open(Options{Name: "kad", Home: home, Bootstrapper: layout.BootstrapperKubeadm, KubeadmSkipPhases: []string{"addon/kube-proxy"}})
	if err != nil || !c.Config.Spec.Kubeadm() {
		t.Fatalf("a new cluster with --bootstrapper kubeadm: %v, %+v", err, c.Config.Spec)
	}
	if err := c.SaveConfig(); err != nil {
		t.Fatal(err)
	}
	if again, err := Open(Options{Name: "kad", Home: home}); err != nil || !again.Config.Spec.Kubeadm() {
		t.Errorf("up again without the flag: %v", err)
	}
	d, err := Open(Options{Name: "own", Home: home})
	if err != nil || d.Config.Spec.Kubeadm() {
		t.Fatalf("a new cluster without the flag: %v", err)
	}
	if err := d.SaveConfig(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"kubeadm on devk's cluster", Options{Name: "own", Bootstrapper: layout.BootstrapperKubeadm}, "--bootstrapper kubeadm, but devk made cluster own, and a cluster's bootstrapper cannot change: `devk down --name own` first"},
		{"devk on kubeadm's cluster", Options{Name: "kad", Bootstrapper: layout.BootstrapperDevk}, "--bootstrapper devk, but kubeadm made cluster kad"},
		{"a bad value", Options{Name: "new", Bootstrapper: "kind"}, "--bootstrapper kind: want devk (devk's own phases) or kubeadm"},
		{"skip phases without kubeadm", Options{Name: "own", KubeadmSkipPhases: []string{"preflight"}}, "--kubeadm-skip-phases: kubeadm does not bootstrap cluster own: add --bootstrapper kubeadm"},
		{"patches for a cluster devk bootstraps", Options{Name: "new2", UserConfigFile: writeConfig(t, header+"kubeadmConfigPatches:\n- \"kind: ClusterConfiguration\"\n")}, "kubeadmConfigPatches patches kubeadm's config, but devk's own phases bootstrap cluster new2: add --bootstrapper kubeadm"},
		{"a changed spec on kubeadm's cluster", Options{Name: "kad", UserConfigFile: writeConfig(t, header+"bootstrapper: kubeadm\napiServer:\n  extraArgs:\n    v: \"4\"\n")}, "changes the config of cluster kad, which kubeadm bootstrapped"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.Home = home
			if _, err := Open(tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want %q", err, tc.want)
			}
		})
	}
}

// TestUserConfigIsKept: the file's spec is stored in cluster.json; an up
// without --config keeps it, an up with a changed file replaces it, and
// a file that changes a network of the cluster is refused.
func TestUserConfigIsKept(t *testing.T) {
	home := t.TempDir()
	c := mustOpenWith(t, home, "", fullConfig)
	if err := c.SaveConfig(); err != nil {
		t.Fatal(err)
	}
	again := mustOpenWith(t, home, "dev", "")
	if !again.Config.KeepTaint || again.Config.Spec.APIServer.ExtraArgs["audit-log-maxage"] != "3" || layout.On(again.Config.Spec.Addons.CoreDNS) {
		t.Errorf("up without --config lost the stored spec: %+v", again.Config.Spec)
	}
	stored, _ := os.ReadFile(c.Files.ConfigFile())

	// A file without nodeSubnet keeps the cluster's; the rest replaces
	// the spec (what it leaves out is the default).
	changed := strings.Replace(fullConfig, "  nodeSubnet: 10.251.7.0/24\n", "", 1)
	changed = strings.Replace(changed, "controlPlaneTaint: keep\n", "", 1)
	changed = strings.Replace(changed, "addons:\n  coreDNS: false\n", "", 1)
	c2 := mustOpenWith(t, home, "", changed)
	if c2.Config.Network.Subnet != "10.251.7.0/24" || c2.Config.KeepTaint || !layout.On(c2.Config.Spec.Addons.CoreDNS) {
		t.Errorf("applied file: nodes %s keepTaint %v coreDNS %v", c2.Config.Network.Subnet, c2.Config.KeepTaint, c2.Config.Spec.Addons.CoreDNS)
	}

	for _, tc := range []struct{ from, to, key string }{
		{"podSubnet: 10.200.0.0/16", "podSubnet: 10.201.0.0/16", "networking.podSubnet: is 10.201.0.0/16, but cluster dev has 10.200.0.0/16"},
		{"  serviceSubnet: 10.100.0.0/16\n", "", "networking.serviceSubnet: is 10.96.0.0/16, but cluster dev has 10.100.0.0/16"},
		{"nodeSubnet: 10.251.7.0/24", "nodeSubnet: 10.251.8.0/24", "networking.nodeSubnet: is 10.251.8.0/24, but cluster dev has 10.251.7.0/24"},
	} {
		_, err := openWith(t, home, "", strings.Replace(fullConfig, tc.from, tc.to, 1))
		if err == nil || !strings.Contains(err.Error(), tc.key) || !strings.Contains(err.Error(), "`devk down --name dev` first") {
			t.Errorf("%s -> %s: %v", tc.from, tc.to, err)
		}
	}
	if now, _ := os.ReadFile(c.Files.ConfigFile()); string(now) != string(stored) {
		t.Error("a refused file changed cluster.json")
	}

	// cluster.json edited by hand to hand devk's flags to extraArgs.
	tampered := strings.Replace(string(stored), `"audit-log-maxage": "3"`, `"etcd-servers": "https://10.0.0.1:2379"`, 1)
	if tampered == string(stored) {
		t.Fatalf("cluster.json does not hold the extra args:\n%s", stored)
	}
	if err := os.WriteFile(c.Files.ConfigFile(), []byte(tampered), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := openWith(t, home, "dev", ""); err == nil || !strings.Contains(err.Error(), "apiServer.extraArgs.etcd-servers: devk sets --etcd-servers") ||
		!strings.Contains(err.Error(), "apply a config file with `devk up --config`") {
		t.Errorf("a cluster.json with devk's flags in its spec: %v", err)
	}
	// The way out it names: a config file replaces the spec.
	if c, err := openWith(t, home, "", fullConfig); err != nil || c.Config.Spec.APIServer.ExtraArgs["etcd-servers"] != "" {
		t.Errorf("a config file applied over a refused spec: %v", err)
	}
}

// TestConfigChangeRewritesOnlyWhatChanged: applying the same file again
// rewrites nothing; a gate on the API server alone rewrites its manifest
// and nothing else (the kubelet's config and flags, the other manifests,
// kube-proxy's objects stay).
func TestConfigChangeRewritesOnlyWhatChanged(t *testing.T) {
	ctx := context.Background()
	home := t.TempDir()
	c := mustOpenWith(t, home, "", fullConfig)
	for _, sp := range StaticPods {
		if out, err := c.writeManifest(ctx, c.FirstNode(), sp); err != nil || !out.Changed {
			t.Fatalf("%s: %v %+v", sp.Name, err, out)
		}
	}
	type state struct {
		kubeletConfig, kubeProxyConfig string
		kubeletArgs, kubeProxyCommand  []string
	}
	stateOf := func(c *Cluster) state {
		kc, _ := kubeletconfig.YAML(kubeletconfig.Input{Config: c.Config, Node: c.FirstNode().Net, Files: c.FirstNode().Files, CRISocket: c.Config.CRISocket})
		kp, _ := addons.KubeProxyConfigYAML(c.Config)
		return state{string(kc), string(kp), c.FirstNode().KubeletArgs(), addons.KubeProxyCommand(c.Config.Spec.KubeProxy.ExtraArgs)}
	}
	before := stateOf(c)
	if err := c.SaveConfig(); err != nil {
		t.Fatal(err)
	}
	apply := func(body string) (*Cluster, map[string]bool) {
		c := mustOpenWith(t, home, "", body)
		changed := map[string]bool{}
		for _, sp := range StaticPods {
			out, err := c.writeManifest(ctx, c.FirstNode(), sp)
			if err != nil {
				t.Fatal(err)
			}
			changed[sp.Name] = out.Changed
		}
		return c, changed
	}
	same, changed := apply(fullConfig)
	for pod, ch := range changed {
		if ch {
			t.Errorf("the same file again rewrote %s", pod)
		}
	}
	if after := stateOf(same); !equalState(before, after) {
		t.Errorf("the same file again changed the kubelet or kube-proxy: %+v -> %+v", before, after)
	}

	gated := strings.Replace(fullConfig, "    ComponentStatusz: true\n", "    ComponentStatusz: true\n    OpenAPIEnums: false\n", 1)
	c2, changed := apply(gated)
	want := map[string]bool{"etcd": false, "kube-apiserver": true, "kube-controller-manager": false, "kube-scheduler": false}
	if !mapsEqual(changed, want) {
		t.Errorf("an apiServer gate rewrote %v, want %v", changed, want)
	}
	if after := stateOf(c2); !equalState(before, after) {
		t.Errorf("an apiServer gate changed the kubelet or kube-proxy: %+v -> %+v", before, after)
	}
	if f := manifestFlags(t, c2, "kube-apiserver"); f["feature-gates"] != "ComponentFlagz=true,ComponentStatusz=true,OpenAPIEnums=false" {
		t.Errorf("kube-apiserver --feature-gates=%s", f["feature-gates"])
	}

	// A kubelet flag changes the kubelet's arguments (so it restarts),
	// not its config; a kubelet gate its config.
	c3 := mustOpenWith(t, home, "", strings.Replace(fullConfig, `max-pods: "50"`, `max-pods: "60"`, 1))
	if s := stateOf(c3); s.kubeletConfig != before.kubeletConfig || slices.Equal(s.kubeletArgs, before.kubeletArgs) {
		t.Errorf("kubelet.extraArgs changed: config changed %v, args changed %v", s.kubeletConfig != before.kubeletConfig, !slices.Equal(s.kubeletArgs, before.kubeletArgs))
	}
	c4 := mustOpenWith(t, home, "", strings.Replace(fullConfig, "KubeletTracing: false", "KubeletTracing: true", 1))
	if s := stateOf(c4); s.kubeletConfig == before.kubeletConfig || !slices.Equal(s.kubeletArgs, before.kubeletArgs) || s.kubeProxyConfig != before.kubeProxyConfig {
		t.Errorf("kubelet.featureGates changed: kubelet config changed %v, args changed %v, kube-proxy config changed %v",
			s.kubeletConfig != before.kubeletConfig, !slices.Equal(s.kubeletArgs, before.kubeletArgs), s.kubeProxyConfig != before.kubeProxyConfig)
	}
	// A kube-proxy flag changes its DaemonSet's command alone.
	c5 := mustOpenWith(t, home, "", strings.Replace(fullConfig, `v: "2"`, `v: "5"`, 1))
	if s := stateOf(c5); slices.Equal(s.kubeProxyCommand, before.kubeProxyCommand) || s.kubeProxyConfig != before.kubeProxyConfig || !slices.Equal(s.kubeletArgs, before.kubeletArgs) {
		t.Errorf("kubeProxy.extraArgs changed: %+v", s)
	}
}

func equalState[T any](a, b T) bool {
	ja, _ := yaml.Marshal(a)
	jb, _ := yaml.Marshal(b)
	return string(ja) == string(jb)
}

func mapsEqual(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestSwappedManifestKeepsItsImageOnConfigChange: a config change
// rewrites a swapped manifest with the swapped image and the swap's
// stamp, so the next up still keeps the image.
func TestSwappedManifestKeepsItsImageOnConfigChange(t *testing.T) {
	ctx := context.Background()
	home := t.TempDir()
	c := mustOpenWith(t, home, "", header)
	sp := StaticPod{Name: "kube-apiserver", Component: "apiserver"}
	if _, err := c.writeManifest(ctx, c.FirstNode(), sp); err != nil {
		t.Fatal(err)
	}
	// What a swap leaves: another image and its stamp.
	swapped := "127.0.0.1:5000/kube-apiserver@sha256:" + strings.Repeat("2", 64)
	pod := controlplane.InstalledPod(c.FirstNode().Files.ManifestPath(sp.Name))
	pod.Spec.Containers[0].Image = swapped
	pod.Annotations = map[string]string{staticpod.WrittenAnnotation: "2026-01-01T00:00:00Z"}
	data, _ := yaml.Marshal(pod)
	if err := os.WriteFile(c.FirstNode().Files.ManifestPath(sp.Name), data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := c.SaveConfig(); err != nil {
		t.Fatal(err)
	}
	c2 := mustOpenWith(t, home, "", header+"apiServer:\n  extraArgs:\n    v: \"3\"\n")
	if out, err := c2.writeManifest(ctx, c2.FirstNode(), sp); err != nil || !out.Changed {
		t.Fatalf("a flag change: %v %+v", err, out)
	}
	got := controlplane.InstalledPod(c.FirstNode().Files.ManifestPath(sp.Name))
	if img, ok := staticpod.SwappedImage(got); !ok || img != swapped {
		t.Errorf("after the flag change the manifest names %s (stamped %v), want the swapped %s", got.Spec.Containers[0].Image, ok, swapped)
	}
	if staticpod.Flags(got, sp.Name)["v"] != "3" {
		t.Errorf("the flag change is not in the manifest: %v", got.Spec.Containers[0].Command)
	}
	if out, _ := c2.writeManifest(ctx, c2.FirstNode(), sp); out.Changed {
		t.Errorf("the next up rewrote it again: %s", out.Detail)
	}
}

// idleEnv makes the test binary, started as a stand-in kubelet, wait
// for its end before the testing package parses the kubelet's flags.
const idleEnv = "DEVK_TEST_IDLE_AS_KUBELET"

func init() {
	if os.Getenv(idleEnv) != "" {
		time.Sleep(time.Minute)
		os.Exit(0)
	}
}

// TestKubeletArgsDiffer reads a running process's command line: this
// test binary, started with the kubelet's arguments.
func TestKubeletArgsDiffer(t *testing.T) {
	c := mustOpenWith(t, t.TempDir(), "", header+"kubelet:\n  extraArgs:\n    v: \"3\"\n")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := &exec.Cmd{Path: self, Args: c.FirstNode().KubeletArgs(), Env: append(os.Environ(), idleEnv+"=1")}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	// Until the child has exec'd, its command line is not its own yet.
	for i := 0; i < 500; i++ {
		data, _ := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/cmdline")
		if strings.HasPrefix(string(data), c.FirstNode().KubeletArgs()[0]+"\x00") {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if c.FirstNode().KubeletArgsDiffer(cmd.Process.Pid) {
		data, _ := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/cmdline")
		t.Fatalf("a kubelet started with kubeletArgs differs: %q vs %q", data, c.FirstNode().KubeletArgs())
	}
	c.Config.Spec.Kubelet.ExtraArgs["v"] = "4"
	if !c.FirstNode().KubeletArgsDiffer(cmd.Process.Pid) {
		t.Error("a changed kubelet flag is not seen")
	}
}

// TestUserConfigNodes: the file's nodes and --nodes/--control-planes
// must agree; the file's nodes join in its order, control planes first.
func TestUserConfigNodes(t *testing.T) {
	// --nodes and the file must agree.
	home := t.TempDir()
	file := writeConfig(t, header+"nodes:\n- role: control-plane\n- role: worker\n")
	if _, err := Open(Options{Home: home, UserConfigFile: file, Nodes: 3}); err == nil || !strings.Contains(err.Error(), "lists 2 nodes, but --nodes is 3") {
		t.Errorf("--nodes 3 with a 2-node file: %v", err)
	}
	c, err := Open(Options{Home: home, UserConfigFile: writeConfig(t, header+"nodes:\n- role: control-plane\n- role: worker\n- {role: worker, name: big}\n")})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.nodesToJoin(); !slices.Equal(got, []config.Node{{Role: layout.RoleWorker, Name: "devk-worker"}, {Role: layout.RoleWorker, Name: "big"}}) {
		t.Errorf("the file's nodes join as %v", got)
	}
	if c.Config.HA() {
		t.Error("a cluster of one control plane has a control-plane endpoint")
	}
	if _, err := Open(Options{Home: home, UserConfigFile: file, ControlPlanes: 2}); err == nil || !strings.Contains(err.Error(), "lists 1 control-plane nodes, but --control-planes is 2") {
		t.Errorf("--control-planes 2 with a 1-control-plane file: %v", err)
	}
	c, err = Open(Options{Home: home, UserConfigFile: writeConfig(t, header+"nodes:\n- role: control-plane\n- role: worker\n- {role: control-plane, name: cp2}\n")})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.nodesToJoin(); !slices.Equal(got, []config.Node{{Role: layout.RoleControlPlane, Name: "cp2"}, {Role: layout.RoleWorker, Name: "devk-worker"}}) {
		t.Errorf("the file's nodes join as %v", got)
	}
	if c.Config.ControlPlaneEndpoint != c.Config.Network.HostIP+":6443" {
		t.Errorf("a new cluster of 2 control planes has endpoint %q, want the host bridge address %s", c.Config.ControlPlaneEndpoint, c.Config.Network.HostIP)
	}
}

// TestKubeadmPatchRefusedBeforeAnythingIsMade: a kubeadmConfigPatches
// entry that selects no document of kubeadm's config is a preflight
// problem (nothing is made yet), naming the entry; a good one is none.
func TestKubeadmPatchRefusedBeforeAnythingIsMade(t *testing.T) {
	home := t.TempDir()
	for _, tc := range []struct {
		name, patches, want string
	}{
		{"no document", "kubeadmConfigPatches:\n- |\n  kind: NoSuchConfiguration\n  foo: bar\n", "kubeadmConfigPatches[0]: matches no document"},
		{"a good patch", "kubeadmConfigPatches:\n- |\n  kind: ClusterConfiguration\n  apiServer:\n    extraArgs:\n    - name: v\n      value: \"2\"\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Open(Options{Home: home, Name: "kp", Bootstrapper: layout.BootstrapperKubeadm, UserConfigFile: writeConfig(t, header+tc.patches)})
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.kubeadmPreflight("v1.34.4")
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("a good patch is a problem: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("problem %v, want one saying %q", err, tc.want)
			}
		})
	}
}
