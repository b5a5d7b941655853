//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// runLockName is the file in the work directory one e2e run holds
// exclusively for as long as it runs: two runs on one machine would
// collide on cluster names and the registry's port.
const runLockName = "run.lock"

// holdRunLock takes the run lock, waiting for another run to end. The
// lock is released when the process exits.
func holdRunLock() error {
	f, err := os.OpenFile(filepath.Join(workDir, runLockName), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: another e2e run holds %s; waiting for it\n", f.Name())
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
			return err
		}
	}
	return nil // f stays open: the lock lives as long as the process
}

// homePrefix names every DEVK_HOME an e2e test makes (under the temp
// dir): the sweep brings down only clusters of those, never a cluster of
// another home that happens to share a name.
const homePrefix = "devk-e2e-home-"

// newHome is a DEVK_HOME of the test's own, removed after it.
func newHome(t testing.TB) string {
	t.Helper()
	home, err := os.MkdirTemp("", homePrefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	return home
}

// staleHomes are the DEVK_HOMEs an earlier e2e run left behind when it
// was killed before its cleanup. With the run lock held none of them is
// in use.
func staleHomes() []string {
	matches, _ := filepath.Glob(filepath.Join(os.TempDir(), homePrefix+"*", "clusters"))
	homes := make([]string, 0, len(matches))
	for _, m := range matches {
		homes = append(homes, filepath.Dir(m))
	}
	return homes
}

// sweepStaleClusters brings down every cluster of a stale home, so a run
// killed half way (a session's end, a CI timeout) cannot fail the next
// run's preflight with "exists already". It says what it swept.
func sweepStaleClusters() {
	for _, home := range staleHomes() {
		clusters, _ := os.ReadDir(filepath.Join(home, "clusters"))
		for _, c := range clusters {
			cmd := exec.Command(devkBin, "down", "--name", c.Name())
			cmd.Env = append(os.Environ(), "DEVK_HOME="+home)
			out, err := cmd.CombinedOutput()
			if err != nil {
				fmt.Fprintf(os.Stderr, "e2e: devk down of stale cluster %s in %s: %v\n%s", c.Name(), home, err, out)
				continue
			}
			fmt.Fprintf(os.Stderr, "e2e: brought down cluster %s an earlier run left in %s\n", c.Name(), home)
		}
		os.RemoveAll(home)
	}
}
