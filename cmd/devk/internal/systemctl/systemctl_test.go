package systemctl

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/devk/devk/cluster/innode"
	"github.com/devk/devk/internal/supervise"
)

func TestInvoked(t *testing.T) {
	for argv0, want := range map[string]bool{"systemctl": true, "/usr/bin/systemctl": true, "/h/clusters/devk/bin/systemctl": true, "devk": false, "/usr/bin/systemctl.real": false, "systemctl-devk": false} {
		if got := Invoked(argv0); got != want {
			t.Errorf("Invoked(%q) = %v, want %v", argv0, got, want)
		}
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want invocation
		err  string
	}{
		{name: "restart", args: []string{"restart", "kubelet"}, want: invocation{verb: "restart", units: []string{"kubelet"}, lines: defaultStatusLines}},
		{name: "kubeadm's is-active", args: []string{"is-active", "kubelet"}, want: invocation{verb: "is-active", units: []string{"kubelet"}, lines: defaultStatusLines}},
		{name: "options anywhere", args: []string{"--no-pager", "status", "kubelet.service", "-l", "--lines=3"}, want: invocation{verb: "status", units: []string{"kubelet.service"}, lines: 3}},
		{name: "-n N", args: []string{"status", "-n", "0"}, want: invocation{verb: "status", units: []string{unitName}, lines: 0}},
		{name: "-nN", args: []string{"status", "-n7"}, want: invocation{verb: "status", units: []string{unitName}, lines: 7}},
		{name: "status alone is the kubelet's", args: []string{"status"}, want: invocation{verb: "status", units: []string{unitName}, lines: defaultStatusLines}},
		{name: "enable --now, quiet", args: []string{"enable", "--now", "-q", "kubelet"}, want: invocation{verb: "enable", units: []string{"kubelet"}, now: true, quiet: true, lines: defaultStatusLines}},
		{name: "daemon-reload", args: []string{"daemon-reload"}, want: invocation{verb: "daemon-reload", lines: defaultStatusLines}},
		{name: "help", args: []string{"--help"}, want: invocation{help: true, lines: defaultStatusLines}},
		{name: "no verb", args: []string{"-q"}, err: "no verb"},
		{name: "unknown verb", args: []string{"reboot"}, err: `unknown command verb "reboot"`},
		{name: "unknown option", args: []string{"restart", "--force", "kubelet"}, err: `unrecognized option "--force"`},
		{name: "--user", args: []string{"--user", "restart", "kubelet"}, err: "a node has no user manager"},
		{name: "restart what", args: []string{"restart"}, err: "which unit?"},
		{name: "daemon-reload of a unit", args: []string{"daemon-reload", "kubelet"}, err: "takes no unit"},
		{name: "-n without a number", args: []string{"status", "-n"}, err: "wants a number"},
		{name: "-n not a number", args: []string{"status", "-n", "x"}, err: "wants a number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parse(tc.args)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("parse(%q) = %+v, %v; want an error with %q", tc.args, got, err, tc.err)
				}
				return
			}
			if err != nil || got.verb != tc.want.verb || strings.Join(got.units, ",") != strings.Join(tc.want.units, ",") ||
				got.quiet != tc.want.quiet || got.now != tc.want.now || got.lines != tc.want.lines || got.help != tc.want.help {
				t.Errorf("parse(%q) = %+v, %v; want %+v", tc.args, got, err, tc.want)
			}
		})
	}
}

// sleepUnit is a Unit on the real supervisor, its daemon a sleep: what
// innode.KubeletService does with the node's kubelet.
type sleepUnit struct {
	procs  supervise.Dir
	starts int
}

func newSleepUnit(t *testing.T) *sleepUnit {
	dir := t.TempDir()
	u := &sleepUnit{procs: supervise.Dir{
		PIDFile: func(n string) string { return filepath.Join(dir, "run", n+".pid") },
		LogFile: func(n string) string { return filepath.Join(dir, "logs", n+".log") },
		Work:    dir,
	}}
	t.Cleanup(func() { _, _ = u.procs.Stop(context.Background(), "kubelet", time.Second) })
	return u
}

func (u *sleepUnit) Node() string { return "devk-control-plane" }

func (u *sleepUnit) State() innode.KubeletState {
	st := innode.KubeletState{Log: u.procs.LogFile("kubelet")}
	if pid, ok := u.procs.Running("kubelet"); ok {
		st.PID, st.Argv, st.Since = pid, supervise.Argv(pid), time.Now().Add(-time.Minute)
	}
	return st
}

func (u *sleepUnit) Start(context.Context) error {
	u.starts++
	_, _, err := u.procs.Start(supervise.Process{Name: "kubelet", Argv: []string{"sh", "-c", "echo kubelet says hello; exec sleep 600"}})
	return err
}

func (u *sleepUnit) Stop(ctx context.Context) error {
	_, err := u.procs.Stop(ctx, "kubelet", time.Second)
	return err
}

func (u *sleepUnit) Restart(ctx context.Context) error {
	if err := u.Stop(ctx); err != nil {
		return err
	}
	return u.Start(ctx)
}

// TestRun runs devk's systemctl's verbs as kubeadm and users call them,
// in order, on a unit the real supervisor runs: statuses, stdout and
// stderr as systemd's, the pid changed by a restart, other units refused
// before anything opens the node.
func TestRun(t *testing.T) {
	ctx := context.Background()
	u := newSleepUnit(t)
	opened := 0
	open := func(invocation) (Unit, error) { opened++; return u, nil }
	type want struct {
		code   int
		stdout string
		stderr string
	}
	sc := func(t *testing.T, args string, w want) {
		t.Helper()
		var out, errb strings.Builder
		code := run(ctx, strings.Fields(args), &out, &errb, "v0.test", open)
		if code != w.code || !strings.Contains(out.String(), w.stdout) || !strings.Contains(errb.String(), w.stderr) || (w.stderr == "" && errb.Len() > 0) {
			t.Errorf("systemctl %s: exit %d, stdout %q, stderr %q; want %d, %q, %q", args, code, out.String(), errb.String(), w.code, w.stdout, w.stderr)
		}
	}
	sc(t, "is-active kubelet", want{code: exitInactive, stdout: "inactive\n"})
	sc(t, "status kubelet", want{code: exitInactive, stdout: "Active: inactive (dead)"})
	sc(t, "daemon-reload", want{})
	sc(t, "is-enabled kubelet", want{stdout: "enabled\n"})
	sc(t, "start kubelet", want{})
	pid := u.State().PID
	if pid == 0 {
		t.Fatal("start kubelet started nothing")
	}
	sc(t, "is-active kubelet", want{stdout: "active\n"})
	sc(t, "is-active -q kubelet.service", want{})
	sc(t, "status kubelet", want{stdout: "Loaded: loaded"})
	sc(t, "status --no-pager kubelet", want{stdout: "Main PID: " + strconv.Itoa(pid) + " (kubelet)"})
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(readFile(u.State().Log), "hello") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	sc(t, "status -n 5 kubelet", want{stdout: "kubelet says hello"})
	sc(t, "start kubelet", want{})
	if u.State().PID != pid {
		t.Errorf("start of a running kubelet changed its pid %d to %d", pid, u.State().PID)
	}
	sc(t, "restart kubelet", want{})
	if now := u.State().PID; now == pid || now == 0 {
		t.Errorf("restart kept pid %d (now %d); want a new kubelet", pid, now)
	}
	sc(t, "disable kubelet", want{stderr: "disable changes nothing"})
	if u.State().PID == 0 {
		t.Error("disable without --now stopped the kubelet")
	}
	sc(t, "stop kubelet", want{})
	sc(t, "is-active kubelet", want{code: exitInactive, stdout: "inactive"})
	sc(t, "try-restart kubelet", want{})
	if u.State().PID != 0 {
		t.Error("try-restart started a stopped kubelet")
	}
	sc(t, "enable --now kubelet", want{})
	if u.State().PID == 0 {
		t.Error("enable --now did not start the kubelet")
	}
	sc(t, "disable --now -q kubelet", want{})
	if u.State().PID != 0 {
		t.Error("disable --now did not stop the kubelet")
	}

	opened = 0
	sc(t, "restart containerd", want{code: exitNoUnit, stderr: "Failed to restart containerd.service: Unit containerd.service not found.\ndevk's systemctl serves only kubelet.service"})
	sc(t, "start kubelet docker.socket", want{code: exitNoUnit, stderr: "Unit docker.socket not found."})
	sc(t, "status containerd", want{code: exitStatusNoUnit, stderr: "Unit containerd.service could not be found."})
	sc(t, "is-active nosuch", want{code: exitNoUnit, stderr: "Unit nosuch.service not found."})
	sc(t, "reboot", want{code: exitFailure, stderr: `unknown command verb "reboot"`})
	sc(t, "--help", want{stdout: "devk's systemctl"})
	sc(t, "--version", want{stdout: "devk v0.test"})
	if opened != 0 {
		t.Errorf("the node was opened %d times for units it does not serve, help or bad verbs", opened)
	}
}

// TestRunFailures: a node that cannot be opened, a start that fails.
func TestRunFailures(t *testing.T) {
	ctx := context.Background()
	var out, errb strings.Builder
	code := run(ctx, []string{"restart", "kubelet"}, &out, &errb, "v", func(invocation) (Unit, error) { return nil, errNotInNode })
	if code != exitFailure || !strings.Contains(errb.String(), "devk node exec NODE -- systemctl") || !strings.Contains(errb.String(), "never forwards") {
		t.Errorf("outside a node: exit %d, stderr %q", code, errb.String())
	}
	errb.Reset()
	code = run(ctx, []string{"start", "kubelet"}, &out, &errb, "v", func(invocation) (Unit, error) { return failingUnit{newSleepUnit(t)}, nil })
	if code != exitFailure || !strings.Contains(errb.String(), "Failed to start kubelet.service: no kubelet here") {
		t.Errorf("a failed start: exit %d, stderr %q", code, errb.String())
	}
}

// TestMainWithoutNode is Main in an environment without the node's
// variables: exit 1, the message, and nothing run.
func TestMainWithoutNode(t *testing.T) {
	var out, errb strings.Builder
	code := Main(context.Background(), []string{"restart", "kubelet"}, []string{"PATH=/bin"}, &out, &errb, "v")
	if code != exitFailure || !strings.Contains(errb.String(), "this is devk's systemctl") {
		t.Errorf("Main without DEVK_CLUSTER, DEVK_NODE: exit %d, stderr %q", code, errb.String())
	}
}

type failingUnit struct{ *sleepUnit }

func (failingUnit) Start(context.Context) error { return errors.New("no kubelet here") }

func readFile(p string) string {
	data, _ := os.ReadFile(p)
	return string(data)
}
