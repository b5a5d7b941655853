package swap

import (
	"fmt"

	"github.com/devk/devk/build"
	"github.com/devk/devk/internal/staticpod"
)

// Debugging is how a swap runs a static pod's component under a debugger
// (`devk debug`), or ends that (Stop); for the kubelet, which binary it
// installs (the debug build's, or with Stop the normal one).
type Debugging struct {
	// Image is the debug image (repo@sha256:…): the component's with the
	// debugger in it; empty: the one last pushed (state.json's
	// DebugPushed).
	Image string
	// Command is the container's command under the debugger, given its
	// own (the component's binary and flags).
	Command func(command []string) ([]string, error)
	// Stop puts back the container the debug manifest replaced (kept in
	// staticpod.DebugAnnotation): image, command and probes as they were;
	// for the kubelet, its normal build.
	Stop bool
	// StopAtStart: the component waits before main for a debugger
	// client to continue it, so the swap waits only until its container
	// (or the kubelet) runs: not for health, the mirror pod or the node's
	// Ready, which need the component to run on.
	StopAtStart bool
	// Port is the debugger's: an addon's pod off the host network
	// publishes it on its node.
	Port int32
	// Restart restarts the kubelet even when its binary holds the same
	// bytes: its command line changed (it runs under the debugger now,
	// or no longer).
	Restart bool
}

// atStart says the swap leaves its component waiting before main for a
// debugger client (Debugging.StopAtStart).
func (j *Job) atStart() bool { return j.Debug != nil && !j.Debug.Stop && j.Debug.StopAtStart }

// wrap is how staticpod.WithImage wraps a container's command under the
// debugger: nil (the container put back as it was) for no debugging or
// a stop.
func (d *Debugging) wrap() func(command []string) ([]string, error) {
	if d == nil || d.Stop {
		return nil
	}
	return d.Command
}

// newDebugSwap is the swap of c to its debug image or, stopping, back to
// the container its debug manifest replaced.
func (j *Job) newDebugSwap(c build.Component) (*podSwap, error) {
	image := j.Debug.Image
	if image == "" && !j.Debug.Stop {
		cs := j.state.Components[c.Name]
		if cs == nil || cs.DebugPushed == nil {
			return nil, fmt.Errorf("no debug image of %s was pushed: run `devk debug %s`", c.Name, c.Name)
		}
		image = cs.DebugPushed.Ref
	}
	if j.Debug.Stop {
		pod, _, err := ManifestFor(j.Node.ManifestsDir, c.Binary).Read()
		if err != nil {
			return nil, err
		}
		orig, debugging, err := staticpod.DebugOriginal(pod)
		if err != nil {
			return nil, err
		}
		if !debugging {
			return nil, fmt.Errorf("%s is not being debugged (its manifest has no %s annotation): nothing to stop", c.Binary, staticpod.DebugAnnotation)
		}
		image = orig.Image
	}
	return j.newPodSwap(podImage{Pod: c.Binary, Image: image}, j.Debug.Stop)
}
