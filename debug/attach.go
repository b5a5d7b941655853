package debug

import (
	"context"
	"errors"
	"fmt"

	"github.com/devk/devk/internal/delve"
	"github.com/devk/devk/phase"
)

// attach connects to the component's debugger, sets the breakpoints
// (the component halted for as long as that takes) and lets it run on.
func (j *job) attach(ctx context.Context) (phase.Outcome, error) {
	d, err := delve.Dial(ctx, j.listen(), AttachTimeout)
	if err != nil {
		return phase.Done, err
	}
	st, err := d.State()
	if err != nil {
		d.Close(false)
		return phase.Done, fmt.Errorf("the debugger at %s: %w", j.listen(), err)
	}
	if st.Exited {
		d.Close(false)
		return phase.Done, fmt.Errorf("%s exited under the debugger (status %d): see `devk export logs`", j.comp.Binary, st.ExitStatus)
	}
	// A component at its start stays there for the user's client;
	// one running is halted while the breakpoints go in, then runs on.
	cont := !j.StopAtStart
	j.res.WaitsAtStart = j.StopAtStart
	if len(j.breaks) == 0 {
		d.Close(false)
		if j.StopAtStart {
			return phase.Unchanged("dlv at %s: %s waits before main; connect and continue", j.listen(), j.comp.Binary), nil
		}
		return phase.Unchanged("dlv at %s: %s runs", j.listen(), j.comp.Binary), nil
	}
	if st.Running {
		if err := d.Halt(); err != nil {
			d.Close(cont)
			return phase.Done, fmt.Errorf("halt %s to set breakpoints: %w", j.comp.Binary, err)
		}
	}
	var errs []error
	for _, b := range j.breaks {
		bp, err := d.Break(b.reported, b.line)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s:%d (%s in the binary): %w", b.file, b.line, b.reported, err))
			continue
		}
		j.res.Breakpoints = append(j.res.Breakpoints, Breakpoint{ID: bp.ID, File: b.file, Reported: bp.File, Line: bp.Line, Function: bp.FunctionName})
	}
	if err := d.Close(cont); err != nil {
		errs = append(errs, fmt.Errorf("disconnect from the debugger: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return phase.Done, fmt.Errorf("%s runs under the debugger at %s, but breakpoints failed: %w", j.comp.Binary, j.listen(), err)
	}
	if j.StopAtStart {
		return phase.Changed("%d breakpoint(s) set; %s waits before main: connect and continue", len(j.res.Breakpoints), j.comp.Binary), nil
	}
	return phase.Changed("%d breakpoint(s) set", len(j.res.Breakpoints)), nil
}
