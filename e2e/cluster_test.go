//go:build e2e

package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/supervise"
)

// eventually tries every eventuallyInterval for eventuallyTimeout.
const (
	eventuallyTimeout  = 2 * time.Minute
	eventuallyInterval = 500 * time.Millisecond
)

// clusterPorts are the loopback ports a cluster listens on.
var clusterPorts = []int{6443, 2379, 2380, 2381, 10250, 10248, 10257, 10259}

// TestClusterUpDown brings up a cluster from the v1.34.4 tree built from
// source, checks the control plane runs the pushed digests, the addons
// are ready and the node schedules pods, runs `devk up` again and checks
// nothing changed (the addons' pods included), then `devk
// down` and checks that no process, mount, cgroup or port is left.
func TestClusterUpDown(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs containerd and a kubelet (run `make e2e` as root)")
	}
	for _, bin := range []string{"containerd", "runc"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s not found: apt-get install containerd runc containernetworking-plugins (.ci/run does)", bin)
		}
	}
	for _, p := range clusterPorts {
		if owner := listening(p); owner != "" {
			t.Fatalf("port %d is taken before the test (%s): a cluster is running here; `devk down` it first", p, owner)
		}
	}
	tree := Tree(t)
	home, kubeconfig, env := ownHome(t)
	devk := func(t *testing.T, args ...string) Result {
		t.Helper()
		return MustDevkEnv(t, tree, env, args...)
	}
	dir := filepath.Join(home, "clusters", "devk")
	hostBefore := hostNetState(t)
	fsBefore := hostFSState(t)
	downed := false
	t.Cleanup(func() {
		if !downed {
			if r := Devk(t, tree, env, "down"); r.Err != nil {
				t.Errorf("cleanup: devk down: %v\n%s", r.Err, r.Stderr)
			}
		}
	})

	// up, as a user would, from inside the tree.
	up := devk(t, "up", "-o", "json")
	var res struct {
		Context, Kubeconfig, Node string
		Images                    map[string]string
		Seconds                   float64
	}
	if err := json.Unmarshal([]byte(up.Stdout), &res); err != nil {
		t.Fatalf("devk up -o json printed %q: %v", up.Stdout, err)
	}
	t.Logf("devk up took %.1fs", res.Seconds)
	cs := clientFor(t, res.Kubeconfig)
	// The whole scenario's bound: its debug step alone takes minutes.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	step(t, "node Ready", func(t *testing.T) {
		node, err := cs.CoreV1().Nodes().Get(ctx, res.Node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !nodeReady(node) {
			t.Fatalf("node %s is not Ready after devk up: %+v", node.Name, node.Status.Conditions)
		}
	})

	// up applies its objects server-side as "devk"; cluster-info keeps the
	// signature the bootstrapsigner adds beside devk's kubeconfig key.
	step(t, "cluster-info applied by devk and signed", func(t *testing.T) {
		eventually(t, ctx, "cluster-info applied by devk and signed", func() error {
			cm, err := cs.CoreV1().ConfigMaps("kube-public").Get(ctx, "cluster-info", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !slices.ContainsFunc(cm.ManagedFields, func(m metav1.ManagedFieldsEntry) bool {
				return m.Manager == "devk" && m.Operation == metav1.ManagedFieldsOperationApply
			}) {
				return fmt.Errorf("cluster-info was not applied by devk: %+v", cm.ManagedFields)
			}
			for k := range cm.Data {
				if strings.HasPrefix(k, "jws-kubeconfig-") {
					return nil
				}
			}
			return fmt.Errorf("cluster-info is not signed yet: %v", slices.Collect(maps.Keys(cm.Data)))
		})
	})

	// The four control-plane pods run the digests devk pushed.
	step(t, "control-plane pods run the pushed digests", func(t *testing.T) {
		pushed := pushedDigests(t, tree)
		wantPods := map[string]string{"etcd": "etcd", "kube-apiserver": "apiserver", "kube-controller-manager": "controller-manager", "kube-scheduler": "scheduler"}
		eventually(t, ctx, "control-plane pods Running with the pushed digests", func() error {
			for pod, comp := range wantPods {
				p, err := cs.CoreV1().Pods("kube-system").Get(ctx, pod+"-"+res.Node, metav1.GetOptions{})
				if err != nil {
					return err
				}
				if p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) == 0 {
					return fmt.Errorf("%s is %s", p.Name, p.Status.Phase)
				}
				id := p.Status.ContainerStatuses[0].ImageID
				if !strings.HasSuffix(id, "@"+pushed[comp]) || pushed[comp] == "" {
					return fmt.Errorf("%s runs %s, devk pushed %s", p.Name, id, pushed[comp])
				}
				if img := p.Spec.Containers[0].Image; !strings.Contains(img, "@sha256:") {
					return fmt.Errorf("%s's manifest names %s, not a digest", p.Name, img)
				}
			}
			return nil
		})
	})

	// Scheduler + kubelet + runtime: a host-network pod tolerating the
	// control-plane taint is scheduled and runs.
	step(t, "pods run", func(t *testing.T) {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "e2e-hostnet", Namespace: "default"},
			Spec: corev1.PodSpec{
				HostNetwork: true,
				Tolerations: []corev1.Toleration{{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
				Containers:  []corev1.Container{{Name: "pause", Image: res.Images["pause"]}},
			},
		}
		eventually(t, ctx, "the default service account", func() error {
			_, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
			return err
		})
		if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, ctx, "the host-network pod to run", func() error {
			p, err := cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if p.Spec.NodeName != res.Node || p.Status.Phase != corev1.PodRunning {
				return fmt.Errorf("pod on %q is %s", p.Spec.NodeName, p.Status.Phase)
			}
			return nil
		})
		checkWorkloads(t, ctx, cs, dir, res.Node, res.Images["pause"])
	})

	// An image the registry lacks is "not found" in the pod's status: the
	// node pulls through the bridge's forwarder alone (containerd's
	// hosts.toml has it as the registry's server), never from its own
	// loopback, where nothing listens ("connection refused").
	step(t, "a missing image reads not found", func(t *testing.T) {
		missing := strings.Split(res.Images["pause"], "@")[0] + ":devk-e2e-missing"
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "e2e-missing-image", Namespace: "default"},
			Spec: corev1.PodSpec{
				HostNetwork: true,
				Tolerations: []corev1.Toleration{{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
				Containers:  []corev1.Container{{Name: "missing", Image: missing}},
			},
		}
		if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		defer cs.CoreV1().Pods("default").Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		eventually(t, ctx, "the pull of "+missing+" to fail", func() error {
			p, err := cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			for _, c := range p.Status.ContainerStatuses {
				if w := c.State.Waiting; w != nil && w.Message != "" {
					if !strings.Contains(w.Message, "not found") || strings.Contains(w.Message, "connection refused") {
						t.Fatalf("the pull failed as %s: %s; want not found", w.Reason, w.Message)
					}
					t.Logf("%s: %s", w.Reason, w.Message)
					return nil
				}
			}
			return fmt.Errorf("no pull error yet: %+v", p.Status.ContainerStatuses)
		})
	})

	// The node's rules, sysctls and interfaces are the node's: the host's
	// iptables and sysctls are as they were (its links gained only devk's
	// bridge and veth, checked after down).
	step(t, "host network untouched while pods run", func(t *testing.T) {
		if during := hostNetState(t); during.iptables != hostBefore.iptables || during.sysctls != hostBefore.sysctls {
			t.Errorf("the host's iptables or sysctls changed while the cluster runs:\nbefore:\n%s\n%s\nduring:\n%s\n%s", hostBefore.iptables, hostBefore.sysctls, during.iptables, during.sysctls)
		}
	})
	// The node writes its kubelet's device-plugin socket, container-log
	// links, CNI cache, runc state and shim sockets in its own mount
	// namespace, to its own directories: the host's are as they were.
	step(t, "host filesystem untouched while pods run", func(t *testing.T) {
		fsBefore.check(t, "while the cluster runs pods", hostFSState(t))
		for _, p := range []string{"fs/var/lib/kubelet/device-plugins/kubelet.sock", "fs/run/containerd/s", "fs/var/lib/cni"} {
			if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
				t.Errorf("the node's own %s: %v", p, err)
			}
		}
		if links, _ := filepath.Glob(filepath.Join(dir, "fs/var/log/containers/*.log")); len(links) == 0 {
			t.Errorf("no container-log links in the node's own %s", filepath.Join(dir, "fs/var/log/containers"))
		}
	})

	// status agrees: every component healthy, running what its manifest names.
	step(t, "status", func(t *testing.T) {
		st := devk(t, "status", "-o", "json")
		var status struct {
			NodeReady  bool
			Components []struct {
				Name, ManifestImage, RunningImage string
				Healthy                           bool
			}
		}
		if err := json.Unmarshal([]byte(st.Stdout), &status); err != nil {
			t.Fatalf("devk status -o json printed %q: %v", st.Stdout, err)
		}
		if !status.NodeReady || len(status.Components) != 4 {
			t.Errorf("devk status: node ready %v, %d components", status.NodeReady, len(status.Components))
		}
		for _, c := range status.Components {
			if !c.Healthy || c.ManifestImage == "" || c.RunningImage != c.ManifestImage {
				t.Errorf("devk status: %s healthy=%v manifest %s running %s", c.Name, c.Healthy, c.ManifestImage, c.RunningImage)
			}
		}
	})

	// Each component's goroutines, each frame a file of the tree (or the
	// module cache, GOROOT) and a line within it.
	step(t, "stacks", func(t *testing.T) { checkStacks(t, tree, devk) })

	// The API server under Delve, a breakpoint hit, and back.
	step(t, "debug", func(t *testing.T) {
		checkDebug(t, tree, filepath.Join(dir, "manifests"), res.Kubeconfig, res.Node, res.Images["pause"], devk, func(args ...string) Result { return Devk(t, tree, env, args...) })
	})

	step(t, "daemon logs", func(t *testing.T) { checkDaemonLogs(t, home, "devk") })

	// up again: nothing changes.
	step(t, "up again changes nothing", func(t *testing.T) {
		before := snapshot(t, ctx, cs, dir)
		again := devk(t, "up")
		after := snapshot(t, ctx, cs, dir)
		for k, v := range before {
			if after[k] != v {
				t.Errorf("devk up on a healthy cluster changed %s: %s -> %s", k, v, after[k])
			}
		}
		if !strings.Contains(again.Stdout, "nothing changed") || !strings.Contains(again.Stderr, "reused") {
			t.Errorf("second devk up did not report that nothing changed:\n%s%s", again.Stdout, again.Stderr)
		}
	})

	// After "up again": a debugged addon's --stop leaves its container as
	// it was, but the fields it changed owned by the swap's update, which
	// the next up's apply takes back (one write, no rollout).
	step(t, "debug an addon", func(t *testing.T) { checkDebugAddon(t, tree, res.Kubeconfig, devk) })

	// down: nothing left.
	step(t, "down leaves nothing", func(t *testing.T) {
		down := devk(t, "down")
		downed = true
		t.Logf("devk down: %s", strings.TrimSpace(down.Stdout))
		checkNothingLeft(t, home, kubeconfig, res.Context)
		if after := hostNetState(t); after != hostBefore {
			t.Errorf("the host's network differs after down:\nbefore: %+v\nafter:  %+v", hostBefore, after)
		}
		t.Run("host filesystem untouched after down", func(t *testing.T) {
			fsBefore.check(t, "after down", hostFSState(t))
		})
		if r := Devk(t, tree, env, "down"); r.Err != nil || !strings.Contains(r.Stdout, "nothing to do") {
			t.Errorf("a second devk down should say there is nothing to do: %v\n%s%s", r.Err, r.Stdout, r.Stderr)
		}
	})
}

// checkDaemonLogs: every daemon devk runs for cluster name (node 0's
// kubelet and containerd, the registry forwarder, the registry) writes
// through a log writer of its own, still running after up exited, to a
// 0600 log. (After down, checkNothingLeft finds no writer: their command
// lines name the logs under home.)
func checkDaemonLogs(t *testing.T, home, name string) {
	t.Helper()
	cp := layout.HomeFiles(home).Cluster(name)
	type daemon struct {
		procs supervise.Dir
		name  string
	}
	daemons := []daemon{{cp.FirstNode().Procs(), "kubelet"}, {cp.FirstNode().Procs(), "containerd"}, {layout.HomeFiles(home).Procs(), "registry"}}
	fwd, _ := filepath.Glob(cp.FirstNode().PIDFile("forward-*"))
	if len(fwd) == 0 {
		t.Errorf("no registry forwarder's pid file in %s", cp.FirstNode().Run())
	}
	for _, f := range fwd {
		daemons = append(daemons, daemon{cp.FirstNode().Procs(), strings.TrimSuffix(filepath.Base(f), ".pid")})
	}
	for _, d := range daemons {
		if _, ok := d.procs.Running(d.name); !ok {
			t.Errorf("%s does not run", d.name)
			continue
		}
		pid, ok := d.procs.LogWriterRunning(d.name)
		if !ok {
			t.Errorf("%s's log writer does not run", d.name)
			continue
		}
		log := d.procs.LogFile(d.name)
		if argv := supervise.Argv(pid); !slices.Contains(argv, log) {
			t.Errorf("%s's log writer (pid %d) does not write %s: %q", d.name, pid, log, argv)
		}
		fi, err := os.Stat(log)
		if err != nil {
			t.Errorf("%s's log: %v", d.name, err)
			continue
		}
		if fi.Mode().Perm() != supervise.LogFileMode {
			t.Errorf("%s has mode %v, want %v", log, fi.Mode().Perm(), supervise.LogFileMode)
		}
		if data, _ := os.ReadFile(log); !strings.Contains(string(data), "devk starts: ") {
			t.Errorf("%s lacks devk's start line:\n%s", log, data[:min(len(data), 500)])
		}
	}
}

// hostNet is what of the host's network devk must leave as it found it.
type hostNet struct {
	iptables, sysctls, links, routes string
}

// hostNetState reads the host's iptables rules (v4 and v6, without
// counters and comments), the sysctls a node sets in its own namespace,
// its interfaces and routes.
func hostNetState(t *testing.T) hostNet {
	t.Helper()
	var st hostNet
	for _, save := range []string{"iptables-save", "ip6tables-save"} {
		out, err := exec.Command(save).Output()
		if err != nil {
			t.Fatalf("%s: %v", save, err)
		}
		for _, l := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(l, "#") {
				continue
			}
			if strings.HasPrefix(l, ":") { // ":CHAIN POLICY [packets:bytes]"
				l = strings.Join(strings.Fields(l)[:2], " ")
			}
			st.iptables += l + "\n"
		}
	}
	for _, k := range []string{"net/ipv4/ip_forward", "net/bridge/bridge-nf-call-iptables", "net/ipv4/conf/all/route_localnet", "net/netfilter/nf_conntrack_max"} {
		v, _ := os.ReadFile("/proc/sys/" + k)
		st.sysctls += k + "=" + strings.TrimSpace(string(v)) + "\n"
	}
	links, err := exec.Command("ip", "-o", "link", "show").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(links)), "\n") {
		if f := strings.Fields(l); len(f) > 1 {
			st.links += f[1] + " "
		}
	}
	routes, err := exec.Command("ip", "route", "show", "table", "all").Output()
	if err != nil {
		t.Fatal(err)
	}
	st.routes = string(routes)
	return st
}

// hostFS is what of the host's filesystem a node must leave as it found
// it: the names under /var/lib, /var/log, /run and /etc, three levels
// deep, and the mtime of a kubelet's device-plugin socket if the host
// has one (a real kubelet's, or one an older devk left).
type hostFS struct {
	names        []string
	deviceSocket string
}

// hostFSRoots are the host directories whose names hostFSState lists.
var hostFSRoots = []string{"/var/lib", "/var/log", "/run", "/etc"}

// hostFSDepth is how deep below each root hostFSState lists.
const hostFSDepth = 3

// hostDevicePluginSocket is the kubelet's fixed device-plugin socket.
const hostDevicePluginSocket = "/var/lib/kubelet/device-plugins/kubelet.sock"

// hostFSIgnored says whether a path changes for reasons other than a
// node writing to the host: named network namespaces, which are the
// host's by design (`ip netns add` makes /run/netns, devk-<node> is
// there while the node is, and other programs on the machine make their
// own; containerd's pods' are in the node's state dir); devk's lock
// files (nodelock.RootDir, on tmpfs); libmount's state dir /run/mount,
// which any `mount` run as root makes when it is missing (a machine that
// booted with systemd has it; a fresh VM without may not, and devk's
// mounts in a node's namespace share the host's /run); the package
// manager's state and logs, which another user of the machine may change
// meanwhile.
func hostFSIgnored(path string) bool {
	for _, d := range []string{"/run/netns", "/run/devk", "/run/mount", "/var/lib/dpkg", "/var/lib/apt", "/var/log/apt"} {
		if path == d || strings.HasPrefix(path, d+"/") {
			return true
		}
	}
	return false
}

// hostFSState lists the host's hostFSRoots (symlinks are not followed)
// and reads the device-plugin socket's mtime.
func hostFSState(t *testing.T) hostFS {
	t.Helper()
	var st hostFS
	for _, root := range hostFSRoots {
		err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				if os.IsNotExist(err) {
					return nil // gone between the listing and the look
				}
				return err
			}
			if p == root {
				return nil
			}
			if hostFSIgnored(p) {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			rel, _ := filepath.Rel(root, p)
			depth := strings.Count(rel, "/") + 1
			name := p
			if d.IsDir() {
				name += "/"
			}
			st.names = append(st.names, name)
			if d.IsDir() && depth >= hostFSDepth {
				return filepath.SkipDir
			}
			return nil
		})
		if err != nil {
			t.Fatalf("list %s: %v", root, err)
		}
	}
	slices.Sort(st.names)
	st.deviceSocket = "absent"
	if fi, err := os.Lstat(hostDevicePluginSocket); err == nil {
		st.deviceSocket = fi.ModTime().UTC().Format(time.RFC3339Nano)
	}
	return st
}

// check fails the test for any difference between before and now.
func (before hostFS) check(t *testing.T, when string, now hostFS) {
	t.Helper()
	var added, removed []string
	for _, n := range now.names {
		if _, found := slices.BinarySearch(before.names, n); !found {
			added = append(added, n)
		}
	}
	for _, n := range before.names {
		if _, found := slices.BinarySearch(now.names, n); !found {
			removed = append(removed, n)
		}
	}
	if len(added) > 0 || len(removed) > 0 {
		t.Errorf("the host's filesystem changed %s (%d names listed before):\nadded:   %v\nremoved: %v", when, len(before.names), added, removed)
	}
	if now.deviceSocket != before.deviceSocket {
		t.Errorf("%s changed %s: mtime %s, was %s", hostDevicePluginSocket, when, now.deviceSocket, before.deviceSocket)
	}
}

// checkNothingLeft is the nothing-left-behind list: no cluster
// directory, process, mount, cgroup, listening port or kubeconfig context.
func checkNothingLeft(t *testing.T, home, kubeconfig, context string) {
	t.Helper()
	dir := filepath.Join(home, "clusters", "devk")
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s still exists after devk down: %v", dir, err)
	}
	for _, pid := range procsMentioning(home) {
		t.Errorf("process %s still runs after devk down", pid)
	}
	if data, err := os.ReadFile("/proc/self/mountinfo"); err == nil && strings.Contains(string(data), home) {
		t.Errorf("mounts under %s remain:\n%s", home, grepLines(string(data), home))
	}
	for _, name := range []string{"kubepods", "k8s.io", "devk-devk"} {
		if m, _ := filepath.Glob("/sys/fs/cgroup/*/" + name); len(m) > 0 {
			t.Errorf("cgroups remain: %v", m)
		}
		if _, err := os.Stat("/sys/fs/cgroup/" + name); err == nil {
			t.Errorf("cgroup /sys/fs/cgroup/%s remains", name)
		}
	}
	for _, p := range clusterPorts {
		if owner := listening(p); owner != "" {
			t.Errorf("port %d still listens after devk down (%s)", p, owner)
		}
	}
	if data, err := os.ReadFile(kubeconfig); err == nil && strings.Contains(string(data), context) {
		t.Errorf("context %s remains in %s", context, kubeconfig)
	}
	if ns, _ := filepath.Glob("/run/netns/devk-*"); len(ns) > 0 {
		t.Errorf("node network namespaces remain: %v", ns)
	}
	if _, err := os.Stat("/sys/class/net/dkb-devk"); err == nil {
		t.Error("devk's bridge dkb-devk remains")
	}
}

// TestClusterBadInput: the registry's port in use is named with its
// process (the cluster's own ports are in its node's network namespace,
// where nothing else listens); a Ctrl-C
// during `devk up` stops it cleanly, after which `devk up` resumes;
// `devk down --keep-data` keeps the CA and etcd's contents for the next
// `devk up`; and `devk down` leaves nothing behind.
func TestClusterBadInput(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs containerd and a kubelet (run `make e2e` as root)")
	}
	tree := Tree(t)
	home, kubeconfig, env := ownHome(t)

	t.Run("port in use", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:5000")
		if err != nil {
			t.Fatalf("cannot hold the registry's port 5000 for the test (is a registry running?): %v", err)
		}
		defer ln.Close()
		r := Devk(t, tree, env, "up")
		if r.Err == nil {
			t.Fatal("devk up succeeded with the registry's port 5000 taken")
		}
		want := fmt.Sprintf("port 5000 (the registry) is in use by pid %d", os.Getpid())
		if !strings.Contains(r.Stderr, want) {
			t.Errorf("stderr does not say %q:\n%s", want, r.Stderr)
		}
		if _, err := os.Stat(filepath.Join(home, "clusters")); !os.IsNotExist(err) {
			t.Errorf("a refused devk up left %s behind", filepath.Join(home, "clusters"))
		}
	})

	t.Run("interrupted up resumes, down cleans", func(t *testing.T) {
		dir := filepath.Join(home, "clusters", "devk")
		t.Cleanup(func() { Devk(t, tree, env, "down") })
		cmd := exec.Command(devkBin, "up")
		cmd.Dir = tree
		cmd.Env = append(os.Environ(), env...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Interrupt once the kubelet runs: containerd, the registry and the
		// kubelet are up, the control plane is starting.
		deadline := time.Now().Add(10 * time.Minute)
		for {
			if _, err := os.Stat(filepath.Join(dir, "run", "kubelet.pid")); err == nil {
				break
			}
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				t.Fatalf("the kubelet never started:\n%s", stderr.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
		cmd.Process.Signal(os.Interrupt)
		err := cmd.Wait()
		if err == nil {
			t.Logf("devk up finished before the interrupt reached it")
		} else if !strings.Contains(stderr.String(), "run `devk up` again to resume") {
			t.Errorf("an interrupted devk up does not say how to go on:\n%s", stderr.String())
		}
		r := Devk(t, tree, env, "up")
		if r.Err != nil {
			t.Fatalf("devk up after an interrupted one: %v\n%s", r.Err, r.Stderr)
		}

		// --keep-data keeps the CA and etcd's contents for the next up.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cs := clientFor(t, filepath.Join(dir, "admin.conf"))
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "keep-me", Namespace: "default"}, Data: map[string]string{"k": "v"}}
		if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		ca, _ := os.ReadFile(filepath.Join(dir, "pki", "ca.crt"))
		if r := Devk(t, tree, env, "down", "--keep-data"); r.Err != nil {
			t.Fatalf("devk down --keep-data: %v\n%s", r.Err, r.Stderr)
		}
		for _, pid := range procsMentioning(home) {
			t.Errorf("process %s still runs after devk down --keep-data", pid)
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 3 {
			t.Errorf("devk down --keep-data left %d entries in %s, want pki, etcd and cluster.json", len(ents), dir)
		}
		if r := Devk(t, tree, env, "up"); r.Err != nil {
			t.Fatalf("devk up after down --keep-data: %v\n%s", r.Err, r.Stderr)
		}
		if again, _ := os.ReadFile(filepath.Join(dir, "pki", "ca.crt")); string(again) != string(ca) {
			t.Error("the CA changed across down --keep-data and up")
		}
		cs = clientFor(t, filepath.Join(dir, "admin.conf"))
		if got, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "keep-me", metav1.GetOptions{}); err != nil || got.Data["k"] != "v" {
			t.Errorf("etcd's contents did not survive down --keep-data: %v %v", got, err)
		}

		if r := Devk(t, tree, env, "down"); r.Err != nil {
			t.Fatalf("devk down: %v\n%s", r.Err, r.Stderr)
		}
		checkNothingLeft(t, home, kubeconfig, "devk-devk")
	})
}

func clientFor(t *testing.T, kubeconfig string) *kubernetes.Clientset {
	t.Helper()
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	rc.Timeout = 10 * time.Second
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func pushedDigests(t *testing.T, tree string) map[string]string {
	t.Helper()
	var state struct {
		Components map[string]struct {
			Pushed struct{ Digest string }
		}
	}
	data, err := os.ReadFile(filepath.Join(tree, "_output", "devk", "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &state); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for k, v := range state.Components {
		out[k] = v.Pushed.Digest
	}
	return out
}

func eventually(t *testing.T, ctx context.Context, what string, f func() error) {
	t.Helper()
	var err error
	werr := wait.PollUntilContextTimeout(ctx, eventuallyInterval, eventuallyTimeout, true, func(context.Context) (bool, error) {
		err = f()
		return err == nil, nil
	})
	switch {
	case werr == nil:
	case ctx.Err() != nil:
		t.Fatalf("waiting for %s: %v", what, ctx.Err())
	default:
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// snapshot records what a no-op `devk up` must leave alone: the files it
// writes, the pids it supervises, and each container's ID and restarts.
func snapshot(t *testing.T, ctx context.Context, cs *kubernetes.Clientset, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	files, _ := filepath.Glob(filepath.Join(dir, "pki", "*"))
	more, _ := filepath.Glob(filepath.Join(dir, "pki", "etcd", "*"))
	confs, _ := filepath.Glob(filepath.Join(dir, "*.conf"))
	manifests, _ := filepath.Glob(filepath.Join(dir, "manifests", "*"))
	files = append(append(append(append(files, more...), confs...), manifests...),
		filepath.Join(dir, "kubelet-config.yaml"), filepath.Join(dir, "containerd", "config.toml"), filepath.Join(dir, "bin", "kubelet"))
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil || fi.IsDir() {
			continue
		}
		data, _ := os.ReadFile(f)
		sum := sha256.Sum256(data)
		out["file "+f] = hex.EncodeToString(sum[:8]) + " " + fi.ModTime().String()
	}
	pids, _ := filepath.Glob(filepath.Join(dir, "run", "*.pid"))
	for _, p := range pids {
		data, _ := os.ReadFile(p)
		out["pid "+filepath.Base(p)] = strings.TrimSpace(string(data))
	}
	pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		for _, c := range p.Status.ContainerStatuses {
			out["container "+p.Name+"/"+c.Name] = fmt.Sprintf("%s restarts=%d", c.ContainerID, c.RestartCount)
		}
	}
	return out
}

// procsMentioning lists live processes whose command line or executable
// names dir.
func procsMentioning(dir string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		stat, _ := os.ReadFile("/proc/" + e.Name() + "/stat")
		if i := strings.LastIndexByte(string(stat), ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			continue // a zombie waiting for init to reap it runs nothing
		}
		cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		exe, _ := os.Readlink("/proc/" + e.Name() + "/exe")
		if strings.Contains(string(cmd), dir) || strings.HasPrefix(exe, dir) {
			out = append(out, e.Name()+" "+strings.ReplaceAll(string(cmd), "\x00", " "))
		}
	}
	return out
}

// listening names the process listening on a TCP port, or "".
func listening(port int) string {
	out, err := exec.Command("ss", "-Hltnp", fmt.Sprintf("sport = :%d", port)).Output()
	if err != nil {
		// No ss: read /proc/net/tcp{,6} for a listener.
		for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
			data, _ := os.ReadFile(f)
			if strings.Contains(string(data), fmt.Sprintf(":%04X 00000000000000000000000000000000:0000 0A", port)) ||
				strings.Contains(string(data), fmt.Sprintf(":%04X 00000000:0000 0A", port)) {
				return "a listener in " + f
			}
		}
		return ""
	}
	return strings.TrimSpace(string(out))
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
