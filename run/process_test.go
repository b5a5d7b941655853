package run

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/devk/devk/internal/supervise"
	"github.com/devk/devk/internal/syncbuf"
)

// helperEnv makes the test binary the process under test (TestHelper).
const helperEnv = "DEVK_RUN_TEST_HELPER"

// TestHelper is not a test: run with helperEnv set, it is a process for
// the tests below. "trap": print the environment, then wait for SIGINT
// and exit 3. "parent": start a sleep as devk run starts its process,
// print its pid, and wait to be killed.
func TestHelper(t *testing.T) {
	switch os.Getenv(helperEnv) {
	case "trap":
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, os.Interrupt)
		fmt.Println(strings.Join(os.Environ(), ","))
		<-sigs
		os.Exit(3)
	case "parent":
		p, err := start([]string{"sleep", "60"}, nil, "/", io.Discard, io.Discard)
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		fmt.Println(p.id.PID, p.id.Start)
		time.Sleep(time.Minute)
		os.Exit(0)
	}
}

// helper is the command line of TestHelper (its mode in helperEnv).
func helper() []string {
	return []string{os.Args[0], "-test.run=^TestHelper$", "-test.count=1"}
}

func TestProcessEndsByItself(t *testing.T) {
	p, err := start([]string{"sh", "-c", "exit 7"}, nil, "/", io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	e := p.wait(context.Background(), make(chan struct{}), time.Second)
	if e.Code != 7 || e.Stopped || e.Signal != "" {
		t.Errorf("exit %+v, want code 7, not stopped", e)
	}
}

// TestStopSendsSIGINT: a stop (the first Ctrl-C) reaches the process as
// SIGINT, which it handles; it sees exactly the environment it was given.
func TestStopSendsSIGINT(t *testing.T) {
	var out syncbuf.Buffer
	p, err := start(helper(), []string{helperEnv + "=trap", "ONLY=this"}, "/", &out, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return strings.Contains(out.String(), "ONLY=this"), nil
	}); err != nil {
		t.Fatalf("the process printed %q", out.String())
	}
	if env := strings.TrimSpace(out.String()); env != helperEnv+"=trap,ONLY=this" {
		t.Errorf("the process's environment is %q, want only what it was given", env)
	}
	stop := make(chan struct{})
	close(stop)
	e := p.wait(context.Background(), stop, 10*time.Second)
	if e.Code != 3 || !e.Stopped {
		t.Errorf("exit %+v, want code 3 (its SIGINT handler), stopped", e)
	}
}

// TestStopKillsAfterGrace: a process that ignores SIGINT is killed once
// the grace period is over.
func TestStopKillsAfterGrace(t *testing.T) {
	p, err := start([]string{"sh", "-c", "trap '' INT; sleep 60"}, nil, "/", io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // let the shell set its trap
	stop := make(chan struct{})
	close(stop)
	t0 := time.Now()
	e := p.wait(context.Background(), stop, 300*time.Millisecond)
	if e.Signal != "SIGKILL" || !e.Stopped {
		t.Errorf("exit %+v, want killed by SIGKILL", e)
	}
	if took := time.Since(t0); took > 5*time.Second {
		t.Errorf("stopping took %s", took)
	}
}

// TestProcessDiesWithDevk: a kill -9 of devk takes the process with it,
// so nothing holds the static pod's ports until the next command.
func TestProcessDiesWithDevk(t *testing.T) {
	argv := helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), helperEnv+"=parent")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(line)
	if len(f) != 2 {
		t.Fatalf("the helper said %q", line)
	}
	pid, _ := strconv.Atoi(f[0])
	start, _ := strconv.ParseUint(f[1], 10, 64)
	child := supervise.ProcessID{PID: pid, Start: start}
	if !child.Running() {
		t.Fatal("the child does not run")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return !child.Running(), nil
	}); err != nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		t.Fatal("the process outlived the devk that started it")
	}
}
