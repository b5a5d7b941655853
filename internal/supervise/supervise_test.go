package supervise

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestParseStat(t *testing.T) {
	stat := "1234 (my (odd) prog) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 100 18446744073709551615"
	if got, zombie, err := parseStat(stat); err != nil || got != 987654 || zombie {
		t.Errorf("parseStat = %d, %v, %v; want 987654, not a zombie", got, zombie, err)
	}
	if _, zombie, err := parseStat("1234 (sh) Z 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 0 0 0"); err != nil || !zombie {
		t.Errorf("parseStat of a zombie = %v, %v", zombie, err)
	}
}

func TestProcessSupervision(t *testing.T) {
	p := testDir(t, 0)
	ctx := context.Background()
	proc := Process{Name: "sleeper", Argv: []string{"/bin/sh", "-c", "trap 'exit 0' TERM; echo hello; while :; do sleep 0.05; done"}}
	pid, started, err := p.Start(proc)
	if err != nil || !started {
		t.Fatalf("Start = %d, %v, %v", pid, started, err)
	}
	t.Cleanup(func() { p.Stop(ctx, "sleeper", time.Second) })
	if again, started, err := p.Start(proc); err != nil || started || again != pid {
		t.Errorf("second Start = %d, %v, %v; want the running pid %d, not started", again, started, err, pid)
	}
	if got, ok := p.Running("sleeper"); !ok || got != pid {
		t.Errorf("Running = %d, %v", got, ok)
	}
	stopped, err := p.Stop(ctx, "sleeper", 2*time.Second)
	if err != nil || !stopped {
		t.Errorf("Stop = %v, %v", stopped, err)
	}
	if _, ok := p.Running("sleeper"); ok {
		t.Error("still running after Stop")
	}
	if _, err := os.Stat(p.PIDFile("sleeper")); !os.IsNotExist(err) {
		t.Errorf("pid file left behind: %v", err)
	}
	if log, _ := os.ReadFile(p.LogFile("sleeper")); !strings.Contains(string(log), "hello") {
		t.Errorf("log %q lacks the process's output", log)
	}
	// A pid file naming a process that is not ours (another start time).
	os.WriteFile(p.PIDFile("other"), []byte("1 12345\n"), 0o644)
	if _, ok := p.Running("other"); ok {
		t.Error("a recycled pid was taken for ours")
	}
}

// TestDaemonInheritsNoDescriptor: a descriptor devk inherited without
// close-on-exec (flock's lock, say) reaches neither the daemon nor its
// log writer.
func TestDaemonInheritsNoDescriptor(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// What a parent that is not Go leaves: a descriptor without CLOEXEC.
	fd, err := unix.Dup(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	d := Dir{PIDFile: func(n string) string { return filepath.Join(dir, n+".pid") }, LogFile: func(n string) string { return filepath.Join(dir, n+".log") }, Work: dir}
	_, _, err = d.Start(Process{Name: "fds", Argv: []string{"/bin/sh", "-c", "ls /proc/self/fd >" + filepath.Join(dir, "fds") + "; exec sleep 5"}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Stop(context.Background(), "fds", time.Second) // and its log writer, before the temp dir goes
	var got []byte
	for i := 0; i < 200 && len(got) == 0; i++ {
		time.Sleep(10 * time.Millisecond)
		got, _ = os.ReadFile(filepath.Join(dir, "fds"))
	}
	if len(got) == 0 {
		t.Fatal("the daemon did not list its descriptors")
	}
	if fds := strings.Fields(string(got)); slices.Contains(fds, strconv.Itoa(fd)) {
		t.Errorf("the daemon holds inherited descriptor %d (its descriptors: %v)", fd, fds)
	}
	// Nor its log writer.
	wpid, ok := d.LogWriterRunning("fds")
	if !ok {
		t.Fatal("no log writer")
	}
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", wpid))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if target, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", wpid, e.Name())); target == f.Name() {
			t.Errorf("the log writer holds the inherited lock file as descriptor %s", e.Name())
		}
	}
}
