package loadbalancer

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/devk/devk/internal/poll"
)

// API is HAProxy's runtime API on its stats socket: a plain text
// protocol, one command per connection (HAProxy answers and closes).
type API struct {
	// Socket is Config.StatsSocket.
	Socket string
}

// Command sends one command and returns HAProxy's answer.
func (a API) Command(ctx context.Context, command string) (string, error) {
	if strings.ContainsAny(command, "\r\n") {
		return "", fmt.Errorf("haproxy command %q: one line only", command)
	}
	ctx, cancel := context.WithTimeout(ctx, commandTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", a.Socket)
	if err != nil {
		return "", fmt.Errorf("haproxy runtime API: %w: is haproxy running? start the load balancer first", err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if _, err := io.WriteString(conn, command+"\n"); err != nil {
		return "", fmt.Errorf("haproxy %q: %w", command, err)
	}
	out, err := io.ReadAll(conn)
	if err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return "", fmt.Errorf("haproxy %q: %w", command, err)
	}
	return string(out), nil
}

// State is a server's administrative state, as `set server … state` takes it.
type State string

const (
	// Ready puts the server back into load balancing (it takes traffic
	// again once its checks pass).
	Ready State = "ready"
	// Drain gives it no new connection; established ones go on, and it
	// is still checked.
	Drain State = "drain"
	// Maint gives it no traffic at all and stops its checks.
	Maint State = "maint"
)

// SetState sets the administrative state of server in backend.
func (a API) SetState(ctx context.Context, backend, server string, s State) error {
	switch s {
	case Ready, Drain, Maint:
	default:
		return fmt.Errorf("server state %q: use %q, %q or %q", s, Ready, Drain, Maint)
	}
	if err := checkServer(backend, server); err != nil {
		return err
	}
	cmd := fmt.Sprintf("set server %s/%s state %s", backend, server, s)
	out, err := a.Command(ctx, cmd)
	if err != nil {
		return err
	}
	// Success is an empty answer; anything else is HAProxy's refusal
	// ("No such server.").
	if msg := strings.TrimSpace(out); msg != "" {
		return fmt.Errorf("haproxy refused %q: %s", cmd, msg)
	}
	return nil
}

func checkServer(backend, server string) error {
	for _, n := range []string{backend, server} {
		if !serverName.MatchString(n) {
			return fmt.Errorf("%q is not a proxy or server name of haproxy's", n)
		}
	}
	return nil
}

// Stat is one line of `show stat`: a frontend, a backend or a server.
type Stat struct {
	// Proxy is pxname (the frontend's or backend's name), Server svname
	// (a server's name, or FRONTEND or BACKEND).
	Proxy, Server string
	// Sessions is scur, the sessions open now; Total is stot, every
	// session so far.
	Sessions, Total int64
	// Status is UP, DOWN, DRAIN, MAINT, NOLB, … ("UP 1/2" while a check
	// result is counted towards fall or rise).
	Status string
	// CheckStatus is the last health check's result (L7OK, L7STS, L4CON, …).
	CheckStatus string
}

// Stats is `show stat`: every frontend, backend and server.
func (a API) Stats(ctx context.Context) ([]Stat, error) {
	out, err := a.Command(ctx, "show stat")
	if err != nil {
		return nil, err
	}
	return ParseStat([]byte(out))
}

// Server is the `show stat` line of server in backend.
func (a API) Server(ctx context.Context, backend, server string) (Stat, error) {
	stats, err := a.Stats(ctx)
	if err != nil {
		return Stat{}, err
	}
	var names []string
	for _, s := range stats {
		if s.Proxy != backend || s.Server == "FRONTEND" || s.Server == "BACKEND" {
			continue
		}
		if s.Server == server {
			return s, nil
		}
		names = append(names, s.Server)
	}
	return Stat{}, fmt.Errorf("haproxy has no server %s/%s (its servers there: %s)", backend, server, strings.Join(names, ", "))
}

// ParseStat parses `show stat`'s CSV: a header line "# pxname,svname,…"
// naming the columns, then one line per proxy or server. Columns are
// found by name, so HAProxy versions that add columns parse the same.
func ParseStat(data []byte) ([]Stat, error) {
	header, rest, _ := bytes.Cut(data, []byte("\n"))
	names, ok := bytes.CutPrefix(header, []byte("# "))
	if !ok {
		return nil, fmt.Errorf("haproxy show stat: the first line is %q, not the \"# pxname,…\" header", header)
	}
	col := map[string]int{}
	cols, err := csv.NewReader(bytes.NewReader(names)).Read()
	if err != nil {
		return nil, fmt.Errorf("haproxy show stat header: %w", err)
	}
	for i, n := range cols {
		col[n] = i
	}
	for _, need := range []string{"pxname", "svname", "scur", "stot", "status", "check_status"} {
		if _, ok := col[need]; !ok {
			return nil, fmt.Errorf("haproxy show stat: no %s column in its header", need)
		}
	}
	r := csv.NewReader(bytes.NewReader(rest))
	r.FieldsPerRecord = len(cols)
	var out []Stat
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("haproxy show stat: %w", err)
		}
		s := Stat{Proxy: rec[col["pxname"]], Server: rec[col["svname"]], Status: rec[col["status"]], CheckStatus: rec[col["check_status"]]}
		for _, f := range []struct {
			name string
			v    *int64
		}{{"scur", &s.Sessions}, {"stot", &s.Total}} {
			text := rec[col[f.name]]
			if text == "" {
				continue // a column that does not apply to this line
			}
			if *f.v, err = strconv.ParseInt(text, 10, 64); err != nil {
				return nil, fmt.Errorf("haproxy show stat %s/%s: %s %q is not a number", s.Proxy, s.Server, f.name, text)
			}
		}
		out = append(out, s)
	}
}

// Info is `show info`, the worker's "Name: value" lines.
func (a API) Info(ctx context.Context) (map[string]string, error) {
	out, err := a.Command(ctx, "show info")
	if err != nil {
		return nil, err
	}
	info := map[string]string{}
	for l := range strings.SplitSeq(out, "\n") {
		if k, v, ok := strings.Cut(l, ": "); ok {
			info[k] = v
		}
	}
	if info["Pid"] == "" {
		return nil, fmt.Errorf("haproxy show info: no Pid in its answer %q", out)
	}
	return info, nil
}

// WaitIdleWithin waits, up to timeout, until server in backend has no
// session left; it must be taken out first (Drain or Maint), or new
// sessions would keep coming. A watch through the server ends only when
// its API server shuts down, so a caller that stops the server next
// bounds this wait by what it can spare and leaves the rest to the
// graceful shutdown.
func (a API) WaitIdleWithin(ctx context.Context, backend, server string, timeout time.Duration) error {
	var last Stat
	err := wait.PollUntilContextTimeout(ctx, drainPollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		s, err := a.Server(ctx, backend, server)
		if err != nil {
			return false, err
		}
		if strings.HasPrefix(s.Status, "UP") || strings.HasPrefix(s.Status, "NOLB") {
			return false, fmt.Errorf("server %s/%s is %s and takes new connections: set its state to %s first", backend, server, s.Status, Drain)
		}
		last = s
		return s.Sessions == 0, nil
	})
	if poll.TimedOut(ctx, err) {
		return fmt.Errorf("server %s/%s still has %d sessions after %s: its clients keep their connections open; stop the API server anyway (they connect again through the load balancer)", backend, server, last.Sessions, timeout)
	}
	return err
}
