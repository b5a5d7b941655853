package nodelock

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestSecondHolderIsRefusedAndNamesTheFirst(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "locks")
	node := t.TempDir()
	l, err := AcquireIn(dir, node, "devk swap apiserver")
	if err != nil {
		t.Fatal(err)
	}
	// Another spelling of the same directory is the same node.
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(node, link); err != nil {
		t.Fatal(err)
	}
	for _, spelling := range []string{node, node + "/", link, filepath.Join(node, "..", filepath.Base(node))} {
		_, err := AcquireIn(dir, spelling, "devk down")
		var be *BusyError
		if !errors.As(err, &be) || !errors.Is(err, ErrBusy) {
			t.Fatalf("%s: second acquire: %v, want a BusyError", spelling, err)
		}
		if be.Holder.PID != os.Getpid() || be.Holder.Command != "devk swap apiserver" {
			t.Errorf("%s: holder %+v", spelling, be.Holder)
		}
		if msg := err.Error(); !strings.Contains(msg, "devk swap apiserver (pid ") || !strings.Contains(msg, "since ") {
			t.Errorf("message does not name the holder: %s", msg)
		}
	}
	l.Release()
	l2, err := AcquireIn(dir, link, "devk down")
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	defer l2.Release()
	if _, err := os.Stat(l.Path); err != nil {
		t.Errorf("the lock file went away: %v", err)
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o700 {
		t.Errorf("lock dir mode %v, want 0700", fi.Mode().Perm())
	}
}

func TestDifferentNodesDoNotShareALock(t *testing.T) {
	dir := t.TempDir()
	a, err := AcquireIn(dir, filepath.Join(t.TempDir(), "a", "manifests"), "a")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release()
	b, err := AcquireIn(dir, filepath.Join(t.TempDir(), "b", "manifests"), "b")
	if err != nil {
		t.Fatalf("a different node: %v", err)
	}
	b.Release()
}

func TestUnsafeLockDirIsRefused(t *testing.T) {
	open := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(open, 0o777)
	if _, err := AcquireIn(open, t.TempDir(), "x"); err == nil || !strings.Contains(err.Error(), "chmod 0700") {
		t.Errorf("world-writable lock dir: %v", err)
	}
	target := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	os.Symlink(target, link)
	if _, err := AcquireIn(link, t.TempDir(), "x"); err == nil {
		t.Error("a symlinked lock dir was accepted")
	}
	// A symlink planted at the lock file's own path is not followed.
	dir := t.TempDir()
	node := t.TempDir()
	key, _ := Key(node)
	victim := filepath.Join(t.TempDir(), "victim")
	os.WriteFile(victim, []byte("keep"), 0o644)
	os.Symlink(victim, FileFor(dir, key))
	if _, err := AcquireIn(dir, node, "x"); err == nil {
		t.Error("a lock file symlink was followed")
	}
	if data, _ := os.ReadFile(victim); string(data) != "keep" {
		t.Errorf("victim changed: %q", data)
	}
}

// TestKilledHolderReleases runs a holder in a child process, kills it
// with SIGKILL and takes the lock at once: the kernel frees flock locks.
func TestKilledHolderReleases(t *testing.T) {
	if os.Getenv("NODELOCK_HOLD") != "" {
		l, err := AcquireIn(os.Getenv("NODELOCK_DIR"), os.Getenv("NODELOCK_HOLD"), "holder")
		if err != nil {
			os.Exit(3)
		}
		_ = l
		os.Stdout.WriteString("held\n")
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	dir, node := t.TempDir(), t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestKilledHolderReleases$")
	cmd.Env = append(os.Environ(), "NODELOCK_HOLD="+node, "NODELOCK_DIR="+dir)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := out.Read(buf); err != nil || string(buf) != "held\n" {
		t.Fatalf("child: %q %v", buf, err)
	}
	_, err := AcquireIn(dir, node, "me")
	var be *BusyError
	if !errors.As(err, &be) || be.Holder.PID != cmd.Process.Pid {
		t.Fatalf("while the child holds it: %v", err)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	l, err := AcquireIn(dir, node, "me")
	if err != nil {
		t.Fatalf("after kill -9 of the holder: %v", err)
	}
	l.Release()
}

// TestJobPairs takes the locks each kind of job takes, as a first
// holder, and then as a second; the second is refused exactly when the
// two change a node in common, naming the first. Real flock: two opens of
// a lock file in one process exclude each other as two processes do.
func TestJobPairs(t *testing.T) {
	home := t.TempDir()
	cluster := filepath.Join(home, "clusters", "c")
	n0 := filepath.Join(cluster, "manifests")
	n1 := filepath.Join(cluster, "nodes", "c-control-plane2", "manifests")
	n2 := filepath.Join(cluster, "nodes", "c-worker", "manifests")
	other := filepath.Join(home, "clusters", "d", "manifests")
	kubeadm := filepath.Join(t.TempDir(), "etc", "kubernetes", "manifests")
	all := []string{n0, n1, n2}
	type job struct {
		name    string
		cluster string   // the cluster lock it takes, if any
		nodes   []string // the node locks it takes
	}
	jobs := []job{
		{"devk up", cluster, all},
		{"devk down", cluster, all},
		{"devk node add c-worker2", cluster, append(slices.Clone(all), filepath.Join(cluster, "nodes", "c-worker2", "manifests"))},
		{"devk node remove c-control-plane2", cluster, all},
		{"devk swap apiserver (rolling)", cluster, all},
		{"devk certs renew all (3 nodes)", cluster, all},
		{"devk swap kubelet --node c-worker", "", []string{n2}},
		{"devk swap kubelet --node c-control-plane2", "", []string{n1}},
		{"devk swap scheduler (node 0 only)", "", []string{n0}},
		{"devk up --name d", filepath.Dir(other), []string{other}},
		{"devk swap --manifests-dir (kubeadm)", "", []string{kubeadm}},
	}
	take := func(dir string, j job) (func(), error) {
		if j.cluster != "" {
			s, err := AcquireClusterIn(dir, j.cluster, j.nodes, j.name)
			if err != nil {
				return nil, err
			}
			return s.Release, nil
		}
		l, err := AcquireIn(dir, j.nodes[0], j.name)
		if err != nil {
			return nil, err
		}
		return l.Release, nil
	}
	conflict := func(a, b job) bool {
		if a.cluster != "" && a.cluster == b.cluster {
			return true
		}
		for _, n := range a.nodes {
			if slices.Contains(b.nodes, n) {
				return true
			}
		}
		return false
	}
	pairs, refused := 0, 0
	for _, a := range jobs {
		for _, b := range jobs {
			dir := filepath.Join(t.TempDir(), "locks")
			release, err := take(dir, a)
			if err != nil {
				t.Fatalf("%s alone: %v", a.name, err)
			}
			releaseB, err := take(dir, b)
			pairs++
			switch want := conflict(a, b); {
			case want && err == nil:
				t.Errorf("%s ran while %s held its locks", b.name, a.name)
				releaseB()
			case want && (!errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), a.name+" (pid ")):
				t.Errorf("%s while %s holds: %v, want it refused naming %s", b.name, a.name, err, a.name)
			case want:
				refused++
			case err != nil:
				t.Errorf("%s while %s holds: %v, want it to run (no node in common)", b.name, a.name, err)
			default:
				releaseB()
			}
			release()
			// Everything was let go of: b runs alone.
			if rb, err := take(dir, b); err != nil {
				t.Errorf("%s after %s let go: %v", b.name, a.name, err)
			} else {
				rb()
			}
		}
	}
	t.Logf("%d pairs of jobs, %d refused", pairs, refused)
}

// TestClusterLockAddsNodesAndLetsGoOnRefusal: a cluster job refused on a
// node's lock keeps nothing (the cluster's lock is free again); one that
// adds a node holds it from then on.
func TestClusterLockAddsNodesAndLetsGoOnRefusal(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "locks")
	cluster := t.TempDir()
	n0, n1 := filepath.Join(cluster, "manifests"), filepath.Join(cluster, "nodes", "w", "manifests")
	swap, err := AcquireIn(dir, n1, "devk swap kubelet --node w")
	if err != nil {
		t.Fatal(err)
	}
	_, err = AcquireClusterIn(dir, cluster, []string{n0, n1}, "devk up")
	var be *BusyError
	if !errors.As(err, &be) || be.Holder.Command != "devk swap kubelet --node w" {
		t.Fatalf("up while a swap holds a node: %v", err)
	}
	// The refused up holds neither the cluster nor node 0.
	l, err := AcquireIn(dir, n0, "devk swap scheduler")
	if err != nil {
		t.Fatalf("node 0 after the refused up: %v", err)
	}
	l.Release()
	swap.Release()
	up, err := AcquireClusterIn(dir, cluster, []string{n0}, "devk up --nodes 2")
	if err != nil {
		t.Fatal(err)
	}
	if up.Holds(n1) {
		t.Error("holds a node it was not given")
	}
	if err := up.AddNode(n1); err != nil || !up.Holds(n1) || !up.Holds(n0+"/") {
		t.Fatalf("AddNode: %v", err)
	}
	if _, err := AcquireIn(dir, n1, "devk swap kubelet --node w"); !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), "devk up --nodes 2") {
		t.Errorf("a swap on the node up added: %v", err)
	}
	if _, err := AcquireClusterIn(dir, cluster, nil, "devk node add"); !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), "cluster "+cluster) {
		t.Errorf("a second cluster job: %v, want it refused on the cluster lock", err)
	}
	up.Release()
	if s, err := AcquireClusterIn(dir, cluster, []string{n0, n1}, "devk down"); err != nil {
		t.Errorf("after release: %v", err)
	} else {
		s.Release()
	}
}
