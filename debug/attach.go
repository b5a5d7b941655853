package debug

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"k8s.io/client-go/kubernetes"

	"github.com/devk/devk/digest"
	"github.com/devk/devk/internal/addon"
	"github.com/devk/devk/internal/delve"
	"github.com/devk/devk/internal/kube"
	"github.com/devk/devk/phase"
)

// attach connects to the component's debugger (an addon's: each of its
// pods'), sets the breakpoints (the component halted for as long as
// that takes) and lets it run on; one waiting at its start stays there
// for the user's client.
func (j *job) attach(ctx context.Context) (phase.Outcome, error) {
	addrs := []string{j.listen()}
	if j.addon != nil {
		var err error
		if addrs, err = j.addonDebuggers(ctx); err != nil {
			return phase.Done, err
		}
		// The IDE files and the result attach to the first: --node's.
		host, _, _ := net.SplitHostPort(addrs[0])
		j.Address = host
		j.res.Addresses = addrs
	}
	j.res.WaitsAtStart = j.StopAtStart
	var errs []error
	for _, addr := range addrs {
		bps, err := j.attachAt(ctx, addr)
		if err != nil {
			errs = append(errs, err)
		}
		if addr == addrs[0] {
			j.res.Breakpoints = bps
		}
	}
	if err := errors.Join(errs...); err != nil {
		return phase.Done, err
	}
	detail := fmt.Sprintf("%d breakpoint(s) set", len(j.res.Breakpoints))
	if len(addrs) > 1 {
		detail += fmt.Sprintf(" in each of %d pods", len(addrs))
	}
	if j.StopAtStart {
		return phase.Changed("%s; %s waits before main: connect and continue", detail, j.comp.Binary), nil
	}
	return phase.ChangedIf(len(j.breaks) > 0, "dlv at %s: %s", strings.Join(addrs, ", "), detail), nil
}

// attachAt sets the breakpoints in the debugger at addr and lets its
// component run on (unless it waits at its start).
func (j *job) attachAt(ctx context.Context, addr string) ([]Breakpoint, error) {
	d, err := delve.Dial(ctx, addr, AttachTimeout)
	if err != nil {
		return nil, err
	}
	st, err := d.State()
	if err != nil {
		d.Close(false)
		return nil, fmt.Errorf("the debugger at %s: %w", addr, err)
	}
	if st.Exited {
		d.Close(false)
		return nil, fmt.Errorf("%s exited under the debugger at %s (status %d): see `devk export logs`", j.comp.Binary, addr, st.ExitStatus)
	}
	cont := !j.StopAtStart
	if len(j.breaks) == 0 {
		return nil, d.Close(false)
	}
	if st.Running {
		if err := d.Halt(); err != nil {
			d.Close(cont)
			return nil, fmt.Errorf("halt %s at %s to set breakpoints: %w", j.comp.Binary, addr, err)
		}
	}
	var bps []Breakpoint
	var errs []error
	for _, b := range j.breaks {
		bp, err := d.Break(b.reported, b.line, AttachTimeout)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s:%d (%s in the binary): %w", b.file, b.line, b.reported, err))
			continue
		}
		bps = append(bps, Breakpoint{ID: bp.ID, File: b.file, Reported: bp.File, Line: bp.Line, Function: bp.FunctionName})
	}
	if err := d.Close(cont); err != nil {
		errs = append(errs, fmt.Errorf("disconnect from the debugger: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return bps, fmt.Errorf("%s runs under the debugger at %s, but breakpoints failed: %w", j.comp.Binary, addr, err)
	}
	return bps, nil
}

// addonState reads the addon's workload (nil when the cluster has
// none), and the client it read it with.
func (j *job) addonState(ctx context.Context) (*addon.State, kubernetes.Interface, error) {
	cs, err := kube.Client(j.Swap.Node.Kubeconfig)
	if err != nil {
		return nil, nil, err
	}
	st, err := addon.Get(ctx, cs, *j.addon)
	return st, cs, err
}

// addonDebuggers are where the debuggers of the addon's pods that run
// the debug image listen, reachable from the host: each pod's node
// address (a host-network pod listens there; another's port is
// published there), the pod on the node of Address first.
func (j *job) addonDebuggers(ctx context.Context) ([]string, error) {
	st, cs, err := j.addonState(ctx)
	if err != nil {
		return nil, err
	}
	if st == nil {
		return nil, fmt.Errorf("the cluster has no %s", j.addon)
	}
	pods, err := st.Pods(ctx, cs)
	if err != nil {
		return nil, err
	}
	want := digest.Of(st.Image())
	var addrs []string
	for i := range pods {
		p := &pods[i]
		if digest.Of(j.addon.PodImage(p)) != want || p.Status.HostIP == "" {
			continue
		}
		addrs = append(addrs, net.JoinHostPort(p.Status.HostIP, strconv.Itoa(j.Port)))
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("no pod of %s runs %s yet", j.addon, st.Image())
	}
	slices.Sort(addrs)
	if i := slices.Index(addrs, j.listen()); i > 0 {
		addrs[0], addrs[i] = addrs[i], addrs[0]
	}
	return addrs, nil
}
