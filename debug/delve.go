package debug

import (
	"context"
	"fmt"
	"net"
	"net/rpc"
	"net/rpc/jsonrpc"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/devk/devk/internal/poll"
)

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

// delveBreakpoint is what devk sends and reads of Delve's Breakpoint.
type delveBreakpoint struct {
	ID           int    `json:"id"`
	File         string `json:"file"`
	Line         int    `json:"line"`
	FunctionName string `json:"functionName,omitempty"`
}

// Delve is a client of a headless Delve's JSON-RPC API.
type Delve struct{ c *rpc.Client }

// attachPoll is how often Dial tries the debugger's port.
const attachPoll = 200 * time.Millisecond

// Dial connects to the headless debugger at addr, trying until it
// accepts or timeout passes, and selects API version 2.
func Dial(ctx context.Context, addr string, timeout time.Duration) (*Delve, error) {
	var conn net.Conn
	err := wait.PollUntilContextTimeout(ctx, attachPoll, timeout, true, func(ctx context.Context) (bool, error) {
		d := net.Dialer{Timeout: attachPoll}
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
	d := &Delve{c: jsonrpc.NewClient(conn)}
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

// Break sets a breakpoint at file:line, file as the binary reports it.
func (d *Delve) Break(file string, line int) (delveBreakpoint, error) {
	var out struct{ Breakpoint delveBreakpoint }
	err := d.call("CreateBreakpoint", struct{ Breakpoint delveBreakpoint }{delveBreakpoint{File: file, Line: line}}, &out)
	return out.Breakpoint, err
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
