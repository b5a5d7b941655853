package loadbalancer

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/devk/devk/internal/supervise"
	"github.com/devk/devk/internal/testutil"
)

// These tests run the real HAProxy (Debian's 2.6) in front of TLS servers
// on 127.0.0.1 that stand in for API servers.

const (
	// requestTimeout bounds one request through the load balancer.
	requestTimeout = 3 * time.Second
	// checkWait bounds a test's wait for a health check's verdict:
	// CheckFall checks CheckInterval apart, and some slack.
	checkWait = 5 * time.Second
	testPoll  = 50 * time.Millisecond
	// requests is how many requests a test sends to see where they go.
	requests = 12
)

// requireHAProxy fails, never skips, without the binary: CI installs it,
// and a skipped test would hide that it does not.
// idleWithin bounds the tests' waits for a drained server to be idle.
const idleWithin = 30 * time.Second

func requireHAProxy(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(DefaultBinary); err != nil {
		t.Fatalf("these tests run the real HAProxy, and %v: install it with `apt-get install haproxy`", err)
	}
}

func runHAProxy(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, DefaultBinary, args...).CombinedOutput()
	return string(out), err
}

// backend is an API server's stand-in: it answers /readyz 200 (500 once
// ready is false) and anything else with its name.
type backend struct {
	name  string
	srv   *httptest.Server
	ready atomic.Bool
}

func newBackend(t *testing.T, name string) *backend {
	b := &backend{name: name}
	b.ready.Store(true)
	b.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			if !b.ready.Load() {
				http.Error(w, "not ready", http.StatusInternalServerError)
				return
			}
			io.WriteString(w, "ok")
			return
		}
		io.WriteString(w, name)
	}))
	// The frontend probes connect and close without TLS: not worth a line.
	b.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	b.srv.StartTLS()
	t.Cleanup(b.srv.Close)
	return b
}

func (b *backend) server() Backend {
	return Backend{Name: b.name, Address: b.srv.Listener.Addr().String()}
}

// newLB is a load balancer over backends with its state in a temp dir,
// stopped at the end of the test (its log shown if the test failed).
func newLB(t *testing.T, backends ...*backend) LB {
	requireHAProxy(t)
	dir := t.TempDir()
	l := LB{
		Config: Config{
			Frontend:    testutil.FreeAddr(t),
			StatsSocket: filepath.Join(dir, "haproxy.sock"),
			StateFile:   filepath.Join(dir, "servers.state"),
			// Confined as a cluster's is: only loopback's connections,
			// only from 127.0.0.0/8, workers unprivileged and chrooted.
			Interface: "lo",
			Sources:   []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
			User:      UnprivilegedUser,
			Group:     UnprivilegedGroup,
			Chroot:    filepath.Join(dir, "empty"),
		},
		File: filepath.Join(dir, "haproxy.cfg"),
		Procs: supervise.Dir{
			PIDFile: func(name string) string { return filepath.Join(dir, "run", name+".pid") },
			LogFile: func(name string) string { return filepath.Join(dir, "logs", name+".log") },
			Work:    dir,
		},
	}
	for _, b := range backends {
		l.Config.Backends = append(l.Config.Backends, b.server())
	}
	t.Cleanup(func() {
		if _, err := l.Stop(context.Background()); err != nil {
			t.Errorf("stop haproxy: %v", err)
		}
		if t.Failed() {
			logData, _ := os.ReadFile(l.Procs.LogFile(ProcessName))
			t.Logf("haproxy's log:\n%s", logData)
		}
	})
	return l
}

// client trusts the backends' certificate (httptest's, the same for all).
// Without keep-alive every request is a new connection, which HAProxy
// balances anew.
func client(b *backend, keepAlive bool) *http.Client {
	pool := x509.NewCertPool()
	pool.AddCert(b.srv.Certificate())
	return &http.Client{Timeout: requestTimeout, Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: pool},
		DisableKeepAlives: !keepAlive,
	}}
}

// get is the name of the backend that answered a request through l.
func get(c *http.Client, l LB) (string, error) {
	resp, err := c.Get("https://" + l.Config.Frontend + "/")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", resp.Status, body)
	}
	return string(body), nil
}

// hits sends requests new connections through l and counts who answered.
func hits(t *testing.T, c *http.Client, l LB) map[string]int {
	t.Helper()
	got := map[string]int{}
	for range requests {
		name, err := get(c, l)
		if err != nil {
			t.Fatalf("request through the load balancer: %v", err)
		}
		got[name]++
	}
	return got
}

// waitStatus waits until server's status in HAProxy's stats is status
// ("UP", not "UP 1/2": a server that has passed its checks) and returns
// that stat.
func waitStatus(t *testing.T, l LB, server, status string) Stat {
	t.Helper()
	var last Stat
	var lastErr error
	err := wait.PollUntilContextTimeout(context.Background(), testPoll, checkWait, true, func(ctx context.Context) (bool, error) {
		last, lastErr = l.API().Server(ctx, BackendName, server)
		return lastErr == nil && last.Status == status, nil
	})
	if err != nil {
		t.Fatalf("server %s: status %q (%v), not %s within %s", server, last.Status, lastErr, status, checkWait)
	}
	return last
}

func apply(t *testing.T, l LB, want Action) {
	t.Helper()
	got, err := l.Apply(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("Apply = %s; want %s", got, want)
	}
}

func TestBalancesOverEveryBackend(t *testing.T) {
	t.Parallel()
	a, b := newBackend(t, "a"), newBackend(t, "b")
	l := newLB(t, a, b)
	ctx := context.Background()

	apply(t, l, Started)
	pid, ok := l.Procs.Running(ProcessName)
	if !ok {
		t.Fatal("haproxy is not running after Apply")
	}
	for _, cfg := range []struct {
		balance Balance
		action  Action
	}{{RoundRobin, Unchanged}, {LeastConn, Reloaded}} {
		t.Run(string(cfg.balance), func(t *testing.T) {
			l.Config.Balance = cfg.balance
			apply(t, l, cfg.action)
			if again, _ := l.Procs.Running(ProcessName); again != pid {
				t.Errorf("the master's pid changed from %d to %d", pid, again)
			}
			if got := hits(t, client(a, false), l); got["a"] == 0 || got["b"] == 0 {
				t.Errorf("requests reached %v; want both backends", got)
			}
			for _, s := range []string{"a", "b"} {
				if st, err := l.API().Server(ctx, BackendName, s); err != nil || !strings.HasPrefix(st.Status, "UP") || st.Total == 0 {
					t.Errorf("stat of %s = %+v, %v; want UP with sessions so far", s, st, err)
				}
			}
		})
	}
}

// TestWorkerConfined: the worker that talks to clients runs as nobody
// inside the empty chroot, the master (which binds again on a reload)
// stays root; a client from outside Sources is closed unserved, one
// inside is served.
func TestWorkerConfined(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Fatal("HAProxy drops to nobody only when started as root: run the tests as root, as CI does")
	}
	a := newBackend(t, "a")
	l := newLB(t, a)
	ctx := context.Background()
	apply(t, l, Started)
	master, _ := l.Procs.Running(ProcessName)
	info, err := l.API().Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	worker := info["Pid"]
	nobody, err := user.Lookup(UnprivilegedUser)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct {
		pid, uid, root string
	}{{strconv.Itoa(master), "0", "/"}, {worker, nobody.Uid, l.Config.Chroot}} {
		status, err := os.ReadFile(filepath.Join("/proc", p.pid, "status"))
		if err != nil {
			t.Fatal(err)
		}
		if uids := uidLine(string(status)); uids != strings.Repeat(p.uid+"\t", 3)+p.uid {
			t.Errorf("pid %s runs as uids %q; want %s", p.pid, uids, p.uid)
		}
		if root, err := os.Readlink(filepath.Join("/proc", p.pid, "root")); err != nil || root != p.root {
			t.Errorf("pid %s has root %q (%v); want %s", p.pid, root, err, p.root)
		}
	}
	if got, err := get(client(a, false), l); err != nil || got != "a" {
		t.Fatalf("request from 127.0.0.1: %q, %v; want a's answer", got, err)
	}

	// Only 127.0.0.2 may: a request from 127.0.0.1 is cut.
	l.Config.Sources = []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}
	apply(t, l, Reloaded)
	if got, err := get(client(a, false), l); err == nil {
		t.Errorf("request from 127.0.0.1 outside the sources got %q; want it refused", got)
	}
	c := client(a, false)
	c.Transport.(*http.Transport).DialContext = (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}).DialContext
	if got, err := get(c, l); err != nil || got != "a" {
		t.Errorf("request from 127.0.0.2: %q, %v; want a's answer", got, err)
	}
}

// uidLine is the Uid line of /proc/<pid>/status: real, effective, saved
// and filesystem uids, tab-separated.
func uidLine(status string) string {
	for l := range strings.SplitSeq(status, "\n") {
		if v, ok := strings.CutPrefix(l, "Uid:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func TestFailingReadyzTakesServerOut(t *testing.T) {
	t.Parallel()
	a, b := newBackend(t, "a"), newBackend(t, "b")
	l := newLB(t, a, b)
	apply(t, l, Started)
	c := client(a, false)
	// Until its first check passes a server is "UP 1/2", one failure
	// from down; from then on it takes CheckFall failures.
	waitStatus(t, l, "b", "UP")

	b.ready.Store(false)
	start := time.Now()
	if st := waitStatus(t, l, "b", "DOWN"); st.CheckStatus != "L7STS" {
		t.Errorf("b's check status = %s; want L7STS (its /readyz answered 500)", st.CheckStatus)
	}
	t.Logf("b out %s after its /readyz failed", time.Since(start).Round(time.Millisecond))
	if got := hits(t, c, l); got["a"] != requests {
		t.Errorf("requests reached %v with b failing /readyz; want all on a", got)
	}

	b.ready.Store(true)
	waitStatus(t, l, "b", "UP")
	if got := hits(t, c, l); got["b"] == 0 {
		t.Errorf("requests reached %v with b ready again; want some on b", got)
	}
}

func TestDrainMaintReady(t *testing.T) {
	t.Parallel()
	a, b := newBackend(t, "a"), newBackend(t, "b")
	l := newLB(t, a, b)
	apply(t, l, Started)
	ctx := context.Background()
	api := l.API()
	c := client(a, false)
	stat := func(server string) Stat {
		t.Helper()
		s, err := api.Server(ctx, BackendName, server)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	setState := func(server string, s State) {
		t.Helper()
		if err := api.SetState(ctx, BackendName, server, s); err != nil {
			t.Fatal(err)
		}
	}

	// An established connection to a, as a watch holds one: made while
	// b is out, so it goes to a.
	setState("b", Maint)
	held := client(a, true)
	defer held.CloseIdleConnections()
	if name, err := get(held, l); err != nil || name != "a" {
		t.Fatalf("held connection reached %q, %v; want a", name, err)
	}
	setState("b", Ready)
	waitStatus(t, l, "b", "UP")

	setState("a", Drain)
	if st := stat("a"); st.Status != "DRAIN" || st.Sessions != 1 {
		t.Fatalf("a after drain = %+v; want DRAIN with the held session", st)
	}
	total := stat("a").Total
	if got := hits(t, c, l); got["b"] != requests {
		t.Errorf("requests reached %v with a draining; want all on b", got)
	}
	if name, err := get(held, l); err != nil || name != "a" {
		t.Errorf("the held connection to a answered %q, %v while a drains; want a", name, err)
	}
	if err := api.WaitIdleWithin(ctx, BackendName, "a", 300*time.Millisecond); err == nil || !strings.Contains(err.Error(), "still has 1 sessions") {
		t.Errorf("WaitIdleWithin with a session held = %v; want it to time out naming 1 session", err)
	}
	held.CloseIdleConnections()
	start := time.Now()
	if err := api.WaitIdleWithin(ctx, BackendName, "a", idleWithin); err != nil {
		t.Fatal(err)
	}
	t.Logf("a idle %s after the held connection closed", time.Since(start).Round(time.Millisecond))

	setState("a", Maint)
	if st := stat("a"); st.Status != "MAINT" {
		t.Errorf("a after maint = %+v", st)
	}
	if got := hits(t, c, l); got["b"] != requests {
		t.Errorf("requests reached %v with a in maint; want all on b", got)
	}
	if st := stat("a"); st.Total != total {
		t.Errorf("a took %d new sessions while drained or in maint", st.Total-total)
	}

	setState("a", Ready)
	waitStatus(t, l, "a", "UP")
	if got := hits(t, c, l); got["a"] == 0 {
		t.Errorf("requests reached %v with a ready again; want some on a", got)
	}

	for _, tc := range []struct {
		name string
		err  func() error
		want string
	}{
		{"unknown server", func() error { return api.SetState(ctx, BackendName, "zz", Drain) }, "No such server"},
		{"unknown state", func() error { return api.SetState(ctx, BackendName, "a", "off") }, `use "ready", "drain" or "maint"`},
		{"not a server name", func() error { return api.SetState(ctx, BackendName, "a b", Drain) }, "not a proxy or server name"},
		{"stat of an unknown server", func() error { _, err := api.Server(ctx, BackendName, "zz"); return err }, "no server apiservers/zz (its servers there: a, b)"},
		{"wait for a server in use", func() error { return api.WaitIdleWithin(ctx, BackendName, "b", idleWithin) }, "and takes new connections: set its state to drain first"},
		{"two lines", func() error { _, err := api.Command(ctx, "show info\nshow stat"); return err }, "one line only"},
		{"no socket", func() error { _, err := API{Socket: l.Config.StatsSocket + ".none"}.Stats(ctx); return err }, "is haproxy running? start the load balancer first"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.err(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v; want an error with %q", err, tc.want)
			}
		})
	}
}

func TestRefusesBadConfig(t *testing.T) {
	t.Parallel()
	a := newBackend(t, "a")
	for _, tc := range []struct {
		name string
		// setup changes the config or the file, and returns what runs it.
		setup func(t *testing.T, l *LB) func() error
		want  []string
	}{
		{"socket path too long for haproxy", func(t *testing.T, l *LB) func() error {
			l.Config.StatsSocket = filepath.Join(filepath.Dir(l.File), strings.Repeat("s", 100)+".sock")
			return func() error {
				_, err := l.Apply(context.Background())
				if _, serr := os.Stat(l.File); serr == nil {
					t.Error("a config haproxy refuses was written")
				}
				return err
			}
		}, []string{"haproxy refuses", "haproxy.cfg.new-", "too long (max 97)", "haproxy.cfg is left as it was: change the setting haproxy names"}},
		{"a file haproxy does not parse", func(t *testing.T, l *LB) func() error {
			os.WriteFile(l.File, []byte("global\n    bogus 1\n"), 0o644)
			return func() error { _, _, err := l.Start(context.Background()); return err }
		}, []string{"haproxy refuses", "unknown keyword 'bogus' in 'global' section", "let Apply write it again"}},
		{"frontend port taken", func(t *testing.T, l *LB) func() error {
			taken, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { taken.Close() })
			l.Config.Frontend = taken.Addr().String()
			return func() error { _, err := l.Apply(context.Background()); return err }
		}, []string{"haproxy exited; its log ends", "cannot bind socket"}},
		{"no haproxy", func(t *testing.T, l *LB) func() error {
			l.Binary = filepath.Join(t.TempDir(), "haproxy")
			return func() error { _, err := l.Apply(context.Background()); return err }
		}, []string{"haproxy is not installed", "apt-get install --no-install-recommends haproxy"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLB(t, a)
			run := tc.setup(t, &l)
			err := run()
			if err == nil {
				t.Fatal("a config haproxy cannot run was taken")
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q lacks %q", err, want)
				}
			}
			if pid, ok := l.Procs.Running(ProcessName); ok {
				t.Errorf("haproxy runs (pid %d) on a bad config", pid)
			}
			if noBinary := tc.name == "no haproxy"; errors.Is(err, ErrNoHAProxy) != noBinary {
				t.Errorf("errors.Is(%v, ErrNoHAProxy) = %v; want %v", err, !noBinary, noBinary)
			}
			if left, _ := filepath.Glob(l.File + ".new-*"); len(left) > 0 {
				t.Errorf("checked candidates left behind: %v", left)
			}
			t.Logf("error: %v", err)
		})
	}
}

func TestReloadKeepsServing(t *testing.T) {
	t.Parallel()
	a, b, c, d := newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c"), newBackend(t, "d")
	l := newLB(t, a, b)
	apply(t, l, Started)
	ctx := context.Background()
	api := l.API()
	worker := func() string {
		t.Helper()
		info, err := api.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info["Pid"]
	}
	first := worker()

	// A connection established before the reload, and b taken out: the
	// first must go on through the old worker, the second stay out.
	held := client(a, true)
	defer held.CloseIdleConnections()
	heldBy, err := get(held, l)
	if err != nil {
		t.Fatal(err)
	}
	if err := api.SetState(ctx, BackendName, "b", Maint); err != nil {
		t.Fatal(err)
	}

	// New connections all through the reloads.
	var (
		stop     atomic.Bool
		wg       sync.WaitGroup
		sent     atomic.Int64
		failures []error
	)
	frontend := l // a copy: the test changes l's backends meanwhile
	wg.Go(func() {
		c := client(a, false)
		for !stop.Load() {
			if _, err := get(c, frontend); err != nil {
				failures = append(failures, err)
			}
			sent.Add(1)
		}
	})

	// A server added: reloaded. The new worker's counters start at 0,
	// so they show where its connections went (the load above alternates
	// with hits' own requests, which round robin would otherwise pair).
	l.Config.Backends = append(l.Config.Backends, c.server())
	apply(t, l, Reloaded)
	if w := worker(); w == first {
		t.Errorf("the worker is still %s after the reload", w)
	}
	hits(t, client(a, false), l)
	for server, used := range map[string]bool{"a": true, "b": false, "c": true} {
		st, err := api.Server(ctx, BackendName, server)
		if err != nil {
			t.Fatal(err)
		}
		if used != (st.Total > 0) || server == "b" && st.Status != "MAINT" {
			t.Errorf("after the reload, %s = %+v; want it used: %v (b kept in maint across the reload)", server, st, used)
		}
	}
	if name, err := get(held, l); err != nil || name != heldBy {
		t.Errorf("the connection made before the reload answered %q, %v; want %s", name, err, heldBy)
	}

	// A server moved under the same name: its new address, not the one
	// in the saved state.
	l.Config.Backends[2].Address = d.server().Address
	apply(t, l, Reloaded)
	apply(t, l, Unchanged)

	// A file written by a run that was interrupted before its reload is
	// reloaded by the next Apply, though it holds what Apply would write.
	l.Config.Balance = LeastConn
	if changed, err := l.Write(ctx); err != nil || !changed {
		t.Fatalf("Write = %v, %v; want the file changed", changed, err)
	}
	apply(t, l, Reloaded)

	// A file haproxy refuses is not reloaded: the running one serves on.
	good, _ := os.ReadFile(l.File)
	os.WriteFile(l.File, append(good, "    bogus 1\n"...), 0o644)
	if err := l.Reload(ctx); err == nil || !strings.Contains(err.Error(), "unknown keyword 'bogus'") {
		t.Errorf("Reload of a bad file = %v; want haproxy's refusal", err)
	}
	if _, err := get(client(a, false), l); err != nil {
		t.Errorf("after a refused reload: %v", err)
	}
	apply(t, l, Reloaded) // Write puts the good file back

	stop.Store(true)
	wg.Wait()
	t.Logf("%d requests through 4 reloads, %d failed", sent.Load(), len(failures))
	if len(failures) > 0 {
		t.Errorf("%d of %d requests failed across the reloads, first: %v", len(failures), sent.Load(), failures[0])
	}
	if got := hits(t, client(a, false), l); got["a"] == 0 || got["d"] == 0 || got["b"] != 0 || got["c"] != 0 {
		t.Errorf("requests reached %v; want a and d (server c's new address), b kept in maint, c's old address no more", got)
	}
	if name, err := get(held, l); err != nil || name != heldBy {
		t.Errorf("the connection made before the reloads answered %q, %v; want %s", name, err, heldBy)
	}

	if stopped, err := l.Stop(ctx); err != nil || !stopped {
		t.Fatalf("Stop = %v, %v", stopped, err)
	}
	if conn, err := net.DialTimeout("tcp", l.Config.Frontend, time.Second); err == nil {
		conn.Close()
		t.Error("the frontend still accepts connections after Stop: a worker outlived the master")
	}
	if stopped, err := l.Stop(ctx); err != nil || stopped {
		t.Errorf("second Stop = %v, %v; want nothing to stop", stopped, err)
	}
}
