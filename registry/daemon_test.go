package registry

import (
	"context"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/supervise"
)

// TestDaemonEnsureRunning runs the real `devk registry serve` as up
// does: not over a registry devk did not start, started and then found
// running, restarted when an older devk's runs, refused when the process
// serves another store, and stopped with its dirs.
func TestDaemonEnsureRunning(t *testing.T) {
	ctx := context.Background()
	home := t.TempDir()
	r, err := New(t.TempDir(), opts(nil))
	if err != nil {
		t.Fatal(err)
	}
	foreign := httptest.NewServer(r)
	d := Daemon{Home: home, Addr: strings.TrimPrefix(foreign.URL, "http://"), Exe: devkBin(t)}
	procs := d.Paths().Procs()
	t.Cleanup(func() { procs.Stop(ctx, ProcessName, stopGrace) })

	if _, _, err := d.EnsureRunning(ctx); err == nil || !strings.Contains(err.Error(), "a registry that devk did not start answers on "+d.Addr) {
		t.Fatalf("EnsureRunning with another registry on %s: %v", d.Addr, err)
	}
	if _, ok := procs.Running(ProcessName); ok {
		t.Fatal("EnsureRunning started a registry beside one it did not start")
	}
	foreign.Close() // its port is free for devk's
	r.Close()

	pid, started, err := d.EnsureRunning(ctx)
	if err != nil || !started || pid == 0 || !Answers(ctx, d.Addr) {
		t.Fatalf("EnsureRunning = %d, %v, %v; answers: %v", pid, started, err, Answers(ctx, d.Addr))
	}
	if argv := supervise.Argv(pid); !slices.Contains(argv, d.Paths().RegistryRoot()) || !slices.Contains(argv, d.Paths().RegistryCredential()) {
		t.Errorf("the registry runs as %q; want it to serve the home's store with the home's credential", argv)
	}
	if again, started, err := d.EnsureRunning(ctx); err != nil || started || again != pid {
		t.Fatalf("EnsureRunning again = %d, %v, %v; want %d kept", again, started, err, pid)
	}

	// An older devk's registry took writes without --credential.
	older := []string{d.Exe, "registry", "serve", "--addr", d.Addr, "--root", d.Paths().RegistryRoot()}
	restartAs(t, d, older)
	restarted, started, err := d.EnsureRunning(ctx)
	if err != nil || !started || restarted == pid || !slices.Contains(supervise.Argv(restarted), "--credential") {
		t.Fatalf("EnsureRunning over an older devk's registry = %d (%q), %v, %v; want it restarted with --credential", restarted, supervise.Argv(restarted), started, err)
	}

	// One serving another store is not taken for this home's.
	other := []string{d.Exe, "registry", "serve", "--addr", d.Addr, "--root", t.TempDir(), "--credential", testCredential}
	restartAs(t, d, other)
	if _, _, err := d.EnsureRunning(ctx); err == nil || !strings.Contains(err.Error(), "does not serve "+d.Addr+" from "+d.Paths().RegistryRoot()) {
		t.Fatalf("EnsureRunning over a registry of another store: %v", err)
	}

	if err := d.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := procs.Running(ProcessName); ok || Answers(ctx, d.Addr) {
		t.Error("the registry runs after Stop")
	}
	for _, dir := range []string{d.Paths().Run(), d.Paths().Logs()} {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("%s is left after Stop: %v", dir, err)
		}
	}
}

// restartAs replaces the registry d's pid file names by one running
// argv, in d's home, and waits until it answers.
func restartAs(t *testing.T, d Daemon, argv []string) {
	t.Helper()
	ctx := context.Background()
	procs := d.Paths().Procs()
	if _, err := procs.Stop(ctx, ProcessName, stopGrace); err != nil {
		t.Fatal(err)
	}
	if _, _, err := procs.Start(supervise.Process{Name: ProcessName, Argv: argv, Env: []string{"DEVK_HOME=" + d.Home}}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, pollInterval, startTimeout, true, func(ctx context.Context) (bool, error) {
		return Answers(ctx, d.Addr), nil
	})
	if err != nil {
		t.Fatalf("%q did not answer: %v\n%s", argv, err, supervise.Tail(d.Paths().LogFile(ProcessName), logTailLines))
	}
}

// TestForwarders runs the real `devk registry forward` as up does, on
// the loopback device standing for the cluster's bridge: pulls answer
// through the mirror, a second Start keeps it, one with other arguments
// restarts it, and Stop stops every forwarder of the cluster.
func TestForwarders(t *testing.T) {
	ctx := context.Background()
	reg := serve(t, t.TempDir())
	f := Forwarders{
		Procs: layout.Supervised{Dir: t.TempDir()}.Procs(),
		// 127.0.0.2 is on lo too: the mirror takes the registry's port
		// on another address, as it does on the bridge.
		Network:    layout.Network{HostIP: "127.0.0.2", HostBridge: "lo", Subnet: "10.99.0.0/24"},
		Registries: LoopbackHosts(reg, "registry.example:5000", reg+"/prefix"),
		Exe:        devkBin(t),
	}
	t.Cleanup(func() { f.Stop(ctx) })
	if len(f.Registries) != 1 {
		t.Fatalf("LoopbackHosts = %q; want %s once", f.Registries, reg)
	}
	name, mirror := ForwarderName(reg), f.Mirror(reg)
	if !strings.HasPrefix(mirror, "127.0.0.2:") || !slices.Equal(f.Mirrors(), []string{mirror}) {
		t.Fatalf("Mirror(%s) = %s, Mirrors = %q", reg, mirror, f.Mirrors())
	}

	started, err := f.Start(ctx)
	if err != nil || !slices.Equal(started, []string{mirror}) || !Answers(ctx, mirror) {
		t.Fatalf("Start = %q, %v; want %s started and answering", started, err, mirror)
	}
	pid, _ := f.Procs.Running(name)
	if started, err := f.Start(ctx); err != nil || len(started) != 0 {
		t.Fatalf("Start again = %q, %v; want the running forwarder kept", started, err)
	}
	f.Network.Subnet = "10.99.1.0/24"
	if started, err := f.Start(ctx); err != nil || len(started) != 1 {
		t.Fatalf("Start with another subnet = %q, %v; want it restarted", started, err)
	}
	if now, _ := f.Procs.Running(name); now == pid || !slices.Contains(supervise.Argv(now), f.Network.Subnet) {
		t.Fatalf("the forwarder runs as %q (pid %d, was %d); want it restarted for %s", supervise.Argv(now), now, pid, f.Network.Subnet)
	}

	if n, err := f.Stop(ctx); err != nil || n != 1 {
		t.Fatalf("Stop = %d, %v; want 1", n, err)
	}
	if _, ok := f.Procs.Running(name); ok || Answers(ctx, mirror) {
		t.Error("the forwarder runs after Stop")
	}
}
