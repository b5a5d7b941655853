//go:build failpoints

package failpoint

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Enabled says whether this build acts on DEVK_FAILPOINT.
const Enabled = true

// EnvVar names the point to act at and how: "swap/after-journal=kill"
// (SIGKILL, as `kill -9`), "…=int" (SIGINT, as Ctrl-C; "int2" sends a
// second one 200 ms later), "…=term", or "…=hold" (sleep HoldFor, so a
// test can run a second command meanwhile). Each point acts once per
// process.
const EnvVar = "DEVK_FAILPOINT"

// HoldFor is how long "hold" sleeps.
const HoldFor = 15 * time.Second

var once sync.Map

// Hit prints "failpoint NAME" to stderr (so a test knows the point was
// reached) and, when DEVK_FAILPOINT names it, sends the signal.
func Hit(name string) {
	point, action, _ := strings.Cut(os.Getenv(EnvVar), "=")
	if point != name {
		return
	}
	if _, done := once.LoadOrStore(name, true); done {
		return
	}
	fmt.Fprintf(os.Stderr, "failpoint %s: %s\n", name, action)
	switch action {
	case "kill", "":
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		time.Sleep(time.Minute) // the signal is on its way
	case "int":
		syscall.Kill(os.Getpid(), syscall.SIGINT)
	case "int2":
		syscall.Kill(os.Getpid(), syscall.SIGINT)
		go func() {
			time.Sleep(200 * time.Millisecond)
			syscall.Kill(os.Getpid(), syscall.SIGINT)
		}()
	case "term":
		syscall.Kill(os.Getpid(), syscall.SIGTERM)
	case "hold":
		time.Sleep(HoldFor)
	}
	// Let the signal handler see it before the step goes on.
	time.Sleep(50 * time.Millisecond)
}
