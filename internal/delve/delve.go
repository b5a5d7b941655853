// Package delve is how devk runs Delve (the headless `dlv exec` command
// line around a component's own, in a static pod or as the supervised
// kubelet) and talks to it (the JSON-RPC API's calls devk makes). It is
// a leaf: it imports nothing of devk's but poll and atomicfile.
package delve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/rpc"
	"net/rpc/jsonrpc"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/devk/devk/internal/atomicfile"
	"github.com/devk/devk/internal/poll"
)

// Command is the command line that runs command (a binary and its
// flags) under the headless debugger d.Debugger, serving clients at
// d.Listen (host:port); the program runs at once (--continue) unless
// d.StopAtStart, when it waits before main for a client to continue it.
// Its own flags follow `--`.
func (d Debugged) Command(command []string) []string {
	out := []string{d.Debugger, "exec", "--headless", "--accept-multiclient", "--api-version=2", ListenFlag(d.Listen)}
	if !d.StopAtStart {
		out = append(out, "--continue")
	}
	return append(append(out, command[0], "--"), command[1:]...)
}

// ListenFlag is the flag of Command that names where the debugger
// listens, for telling whether a command line runs it there.
func ListenFlag(listen string) string { return "--listen=" + listen }

// Delve's JSON-RPC API, version 2 (Delve's Documentation/api/json-rpc):
// the four calls devk makes, with the fields it reads. (Delve's own client
// package pulls its whole debugger and newer x/net and x/crypto into
// devk's module; these are the wire types.)
const (
	delveAPIVersion = 2
	delveService    = "RPCServer."
	delveHalt       = "halt"
	delveContinue   = "continue"
)

// DelveState is what devk reads of Delve's DebuggerState.
type DelveState struct {
	Running       bool
	Exited        bool `json:"exited"`
	ExitStatus    int  `json:"exitStatus"`
	CurrentThread *struct {
		File     string `json:"file"`
		Line     int    `json:"line"`
		Function *struct {
			Name string `json:"name"`
		} `json:"function"`
	} `json:"currentThread"`
}

// Breakpoint is what devk sends and reads of Delve's Breakpoint.
type Breakpoint struct {
	ID           int    `json:"id"`
	File         string `json:"file"`
	Line         int    `json:"line"`
	FunctionName string `json:"functionName,omitempty"`
}

// Delve is a client of a headless Delve's JSON-RPC API.
type Delve struct {
	c    *rpc.Client
	addr string
}

// dialPoll is how often Dial tries the debugger's port.
const dialPoll = 200 * time.Millisecond

// Dial connects to the headless debugger at addr, trying until it
// accepts or timeout passes, and selects API version 2.
func Dial(ctx context.Context, addr string, timeout time.Duration) (*Delve, error) {
	var conn net.Conn
	err := wait.PollUntilContextTimeout(ctx, dialPoll, timeout, true, func(ctx context.Context) (bool, error) {
		d := net.Dialer{Timeout: dialPoll}
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return false, nil
		}
		conn = c
		return true, nil
	})
	if poll.TimedOut(ctx, err) {
		return nil, fmt.Errorf("the debugger at %s did not accept a client within %s", addr, timeout)
	}
	if err != nil {
		return nil, err
	}
	return client(conn, addr)
}

// client is a client of the debugger on conn, at the API version devk
// speaks.
func client(conn net.Conn, addr string) (*Delve, error) {
	d := &Delve{c: jsonrpc.NewClient(conn), addr: addr}
	if err := d.call("SetApiVersion", struct{ APIVersion int }{delveAPIVersion}, &struct{}{}); err != nil {
		d.c.Close()
		return nil, fmt.Errorf("the debugger at %s: %w", addr, err)
	}
	return d, nil
}

func (d *Delve) call(method string, in, out any) error {
	return d.c.Call(delveService+method, in, out)
}

// State is the debugger's state, at once even while the target runs.
func (d *Delve) State() (*DelveState, error) {
	var out struct{ State *DelveState }
	if err := d.call("State", struct{ NonBlocking bool }{true}, &out); err != nil {
		return nil, err
	}
	if out.State == nil {
		return nil, fmt.Errorf("the debugger sent no state")
	}
	return out.State, nil
}

// Halt stops the target.
func (d *Delve) Halt() error {
	var out struct{ State DelveState }
	return d.call("Command", struct {
		Name string `json:"name"`
	}{delveHalt}, &out)
}

// haltRetry is how long Break waits on a breakpoint before it looks
// whether the target still runs, and halts it again.
const haltRetry = time.Second

// Break sets a breakpoint at file:line, file as the binary reports it,
// within timeout. Delve sets one only with the target stopped, and
// answers a halt at once and stops the target after: a halt that came as
// Delve resumed the target (dlv --continue just after its start) is
// lost, and the breakpoint's call then waits for a stop that never
// comes. So while it waits, Break looks every haltRetry, through a
// connection of its own (Delve reads no further request on one whose
// call waits), and halts the target again while it runs.
func (d *Delve) Break(file string, line int, timeout time.Duration) (Breakpoint, error) {
	var out struct{ Breakpoint Breakpoint }
	call := d.c.Go(delveService+"CreateBreakpoint", struct{ Breakpoint Breakpoint }{Breakpoint{File: file, Line: line}}, &out, make(chan *rpc.Call, 1))
	tick := time.NewTicker(haltRetry)
	defer tick.Stop()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		select {
		case <-call.Done:
			return out.Breakpoint, call.Error
		case <-tick.C:
			if err := d.haltIfRunning(); err != nil {
				return Breakpoint{}, err
			}
		case <-deadline.C:
			return Breakpoint{}, fmt.Errorf("the debugger at %s did not set it within %s: its target did not stop", d.addr, timeout)
		}
	}
}

// haltIfRunning halts the target, through a second client, if it runs.
func (d *Delve) haltIfRunning() error {
	conn, err := net.DialTimeout("tcp", d.addr, dialPoll)
	if err != nil {
		return fmt.Errorf("the debugger at %s: %w", d.addr, err)
	}
	other, err := client(conn, d.addr)
	if err != nil {
		return err
	}
	defer other.c.Close()
	st, err := other.State()
	if err != nil || !st.Running {
		return err
	}
	return other.Halt()
}

// Close disconnects; with cont it first lets the target run on (without
// waiting for its next stop). The debugger keeps serving other clients.
func (d *Delve) Close(cont bool) error {
	if cont {
		// Sent before the connection closes; the reply is not awaited.
		d.c.Go(delveService+"Command", struct {
			Name string `json:"name"`
		}{delveContinue}, &struct{ State DelveState }{}, nil)
	}
	return d.c.Close()
}

// Debugged is how a program runs under the debugger: where dlv is,
// where it listens, whether it waits for a client before main. For a
// program devk supervises (the kubelet) it is recorded in a file whose
// presence is the switch: the program's command line is Command's.
type Debugged struct {
	Debugger    string `json:"debugger"`
	Listen      string `json:"listen"`
	StopAtStart bool   `json:"stopAtStart,omitempty"`
}

// ReadDebugged is the record at path; nil when there is none.
func ReadDebugged(path string) (*Debugged, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var d Debugged
	if err := json.Unmarshal(data, &d); err != nil || d.Debugger == "" || d.Listen == "" {
		return nil, fmt.Errorf("%s is not a record of devk debug (remove it, or run `devk debug --stop kubelet`): %v", path, err)
	}
	return &d, nil
}

// Write records d at path, atomically.
func (d Debugged) Write(path string) error {
	data, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(path, append(data, '\n'), 0o600, filepath.Dir(path))
}
