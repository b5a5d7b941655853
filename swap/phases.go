package swap

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/devk/devk/build"
	"github.com/devk/devk/image"
	"github.com/devk/devk/phase"
)

// Phases are `devk swap` (and `--rollback`). Interrupted swaps are
// finished first; then the binaries; then the static pods one after
// another, each verified (or rolled back) before the next starts, in the
// catalog's order. Every static pod has the same steps, named
// <component>/<step>; under --rollback a pod skips pull and backup and
// writes its backup instead of a new image.
func Phases() []*phase.Phase[*Job] {
	ps := []*phase.Phase[*Job]{
		{
			Name:  "resume",
			Short: "finish or undo the swaps a kill or a second Ctrl-C interrupted, from their journals",
			If: func(j *Job) (bool, string) {
				return j.Node.ManifestsDir != "" && j.touchesNode(), "the node is not touched"
			},
			IO: func(j *Job) ([]string, []string) {
				work := ManifestFor(j.Node.ManifestsDir, "").WorkDir
				return []string{filepath.Join(work, "*.swap.json"), filepath.Join(work, "*.yaml.swapping")},
					[]string{filepath.Join(j.Node.ManifestsDir, "*.yaml") + " (only of interrupted swaps)"}
			},
			Run: run((*Job).resume),
		},
		{
			Name:  "select",
			Short: "decide what to swap: the components named, or each static pod whose manifest does not name its last pushed digest",
			IO: func(j *Job) ([]string, []string) {
				if j.Rollback {
					return []string{filepath.Join(ManifestFor(j.Node.ManifestsDir, "").WorkDir, "*.yaml.prev"), filepath.Join(j.Node.ManifestsDir, "*.yaml")}, nil
				}
				return []string{j.statePath(), filepath.Join(j.Node.ManifestsDir, "*.yaml")}, nil
			},
			Run: run((*Job).runSelect),
		},
		{
			Name:  "registry",
			Short: "check that the registry still has each pushed image, before any file is touched",
			Needs: []string{"select"},
			If: func(j *Job) (bool, string) {
				if j.Rollback {
					return false, "--rollback goes back to what the node ran"
				}
				if err := j.selectPods(); err == nil && len(j.pods) == 0 {
					return false, "no static pod to swap"
				}
				return true, ""
			},
			IO: func(j *Job) ([]string, []string) {
				var refs []string
				for _, c := range build.Catalog {
					if c.StaticPod && (!j.selected || j.selectErr != nil || j.pods[c.Name] != nil) {
						refs = append(refs, j.pushedRef(c))
					}
				}
				return refs, nil
			},
			Run: run((*Job).checkRegistry),
		},
		kubectlPhase(),
		kubeletPhase(),
	}
	for _, c := range build.Catalog {
		if c.StaticPod {
			ps = append(ps, podPhases(c))
		}
	}
	return ps
}

// run adapts a method of Job to a phase's Run.
func run(f func(*Job, context.Context) (phase.Outcome, error)) func(context.Context, *Job) (phase.Outcome, error) {
	return func(ctx context.Context, j *Job) (phase.Outcome, error) { return f(j, ctx) }
}

// podPhases swap one static pod.
func podPhases(c build.Component) *phase.Phase[*Job] {
	manifest := func(j *Job) Manifest { return ManifestFor(j.Node.ManifestsDir, c.Binary) }
	// pod runs one step of the pod's swap.
	pod := func(step func(*podSwap, context.Context) (phase.Outcome, error)) func(context.Context, *Job) (phase.Outcome, error) {
		return func(ctx context.Context, j *Job) (phase.Outcome, error) {
			if err := j.selectPods(); err != nil {
				return phase.Done, err
			}
			p := j.pods[c.Name]
			if p == nil {
				return phase.Done, fmt.Errorf("%s is not selected: name it (devk swap %s)", c.Name, c.Name)
			}
			return step(p, ctx)
		}
	}
	// changes skips a step when the manifest names the target already,
	// and (swap) when rolling back.
	changes := func(swapOnly bool) func(*Job) (bool, string) {
		return func(j *Job) (bool, string) {
			if swapOnly && j.Rollback {
				return false, "--rollback"
			}
			if p := j.pods[c.Name]; p != nil && p.unchanged {
				return false, "the manifest names " + shortRef(p.target.Image) + " already"
			}
			return true, ""
		}
	}
	// io leaves out what a pod that is not selected would do.
	io := func(f func(*Job) ([]string, []string)) func(*Job) ([]string, []string) {
		return func(j *Job) ([]string, []string) {
			if j.selected && j.selectErr == nil && j.pods[c.Name] == nil {
				return nil, nil
			}
			return f(j)
		}
	}
	cri := func(j *Job) string { return "CRI " + j.Node.CRISocket }
	mirror := func(j *Job) string {
		name := j.NodeName
		if name == "" {
			name = "<node>"
		}
		return "mirror pod kube-system/" + c.Binary + "-" + name
	}
	return &phase.Phase[*Job]{
		Name:  c.Name,
		Short: "swap the static pod " + c.Binary + " and verify it before the next pod",
		If: func(j *Job) (bool, string) {
			if err := j.selectPods(); err != nil {
				return true, "" // its first step says why
			}
			if j.pods[c.Name] == nil {
				return false, "not selected"
			}
			return true, ""
		},
		Children: []*phase.Phase[*Job]{
			{
				Name:  "pull",
				Short: "pull the pushed image through CRI while the old pod serves",
				Needs: []string{"select"},
				If:    changes(true),
				IO: io(func(j *Job) ([]string, []string) {
					return []string{j.pushedRef(c)}, []string{cri(j) + " images"}
				}),
				Run: pod((*podSwap).pull),
			},
			{
				Name:  "backup",
				Short: "keep the manifest as the pending backup and write the swap's journal",
				If:    changes(true),
				IO: io(func(j *Job) ([]string, []string) {
					m := manifest(j)
					return []string{m.Path}, []string{m.PendingPath(), m.JournalPath()}
				}),
				Run: pod((*podSwap).backup),
			},
			{
				Name:  "hand-over",
				Short: "move the manifest out, stop the old container through CRI (no grace period), wait until the kubelet lets go of the old pod",
				Needs: []string{c.Name + "/backup"},
				If:    changes(false),
				IO: io(func(j *Job) ([]string, []string) {
					m := manifest(j)
					return []string{cri(j) + " sandboxes and containers", filepath.Join(j.Node.KubeletRootDir, "pods", "<uid>"), mirror(j)},
						[]string{m.Path + " -> " + filepath.Join(m.WorkDir, c.Binary+".yaml.vacated"), cri(j) + " (stop " + c.Binary + "'s containers)"}
				}),
				Run: pod((*podSwap).handOver),
			},
			{
				Name:  "write",
				Short: "write the manifest naming the pushed digest (--rollback: the backup), atomically through a temp file outside the manifests dir",
				Needs: []string{c.Name + "/backup"},
				If:    changes(false),
				IO: io(func(j *Job) ([]string, []string) {
					m := manifest(j)
					from := m.PendingPath()
					if j.Rollback {
						from += " (if a swap was interrupted), else " + m.BackupPath()
					}
					return []string{from}, []string{m.Path}
				}),
				Run: pod((*podSwap).write),
			},
			{
				Name:  "ready",
				Short: "wait until a new container runs the digest and its probe answers; a crash or --timeout rolls back",
				Needs: []string{c.Name + "/write"},
				If:    changes(false),
				IO: io(func(j *Job) ([]string, []string) {
					return []string{cri(j) + " containers", c.Binary + "'s health endpoint (its manifest's probe)"}, nil
				}),
				Run: pod((*podSwap).ready),
			},
			{
				Name:  "verify",
				Short: verifyShort(c),
				Needs: []string{c.Name + "/write"},
				IO: io(func(j *Job) ([]string, []string) {
					reads := []string{manifest(j).Path, cri(j) + " containers", mirror(j), c.Binary + "'s health endpoint"}
					if c.Name == "apiserver" {
						reads = append(reads, "/version of "+j.Node.Kubeconfig+"'s server")
					}
					return reads, nil
				}),
				Run: pod((*podSwap).verify),
			},
			{
				Name:  "finish",
				Short: "keep the replaced manifest for --rollback and drop the journal",
				Needs: []string{c.Name + "/backup"},
				If: func(j *Job) (bool, string) {
					if p := j.pods[c.Name]; p != nil && p.unchanged && !j.Rollback {
						return false, "nothing was changed"
					}
					return true, ""
				},
				IO: io(func(j *Job) ([]string, []string) {
					m := manifest(j)
					if j.Rollback {
						return nil, []string{m.JournalPath() + " (removed)", m.PendingPath() + " (removed)"}
					}
					return []string{m.PendingPath()}, []string{m.BackupPath(), m.JournalPath() + " (removed)"}
				}),
				Run: pod((*podSwap).finish),
			},
		},
	}
}

func verifyShort(c build.Component) string {
	s := "wait for the mirror pod, then check the manifest, CRI imageRef, mirror pod imageID and config.hash, health"
	if c.Name == "apiserver" {
		s += ", /version"
	}
	return s
}

func (j *Job) statePath() string {
	if j.tree != nil {
		return build.StatePath(j.tree.Root)
	}
	return "_output/devk/state.json of the tree"
}

// pushedRef names the image a swap of c would pull, for plans.
func (j *Job) pushedRef(c build.Component) string {
	if j.state != nil {
		if cs := j.state.Components[c.Name]; cs != nil && cs.Pushed != nil {
			return cs.Pushed.Ref
		}
	}
	return c.Binary + "'s last pushed image (" + j.statePath() + ")"
}

// resume finishes (or undoes) each static pod's interrupted swap; a
// --rollback of a pod restores what its swap replaced instead.
func (j *Job) resume(ctx context.Context) (phase.Outcome, error) {
	if err := j.lockNode(); err != nil {
		return phase.Done, err
	}
	var done []string
	for _, c := range build.Catalog {
		if !c.StaticPod || (j.Rollback && j.named(c.Name)) {
			continue
		}
		jr, err := ManifestFor(j.Node.ManifestsDir, c.Binary).InProgress()
		if err != nil {
			return phase.Done, err
		}
		if jr == nil {
			continue
		}
		n, err := j.connect(ctx)
		if err != nil {
			return phase.Done, err
		}
		res, err := n.Resume(ctx, c.Binary, jr)
		if res != nil {
			j.Report.StaticPods = append(j.Report.StaticPods, res)
		}
		if err != nil {
			return phase.Done, err
		}
		done = append(done, c.Binary)
	}
	if len(done) == 0 {
		return phase.Unchanged("no swap was interrupted"), nil
	}
	return phase.Changed("finished the interrupted swap of %s", strings.Join(done, ", ")), nil
}

func (j *Job) runSelect(_ context.Context) (phase.Outcome, error) {
	if err := j.selectPods(); err != nil {
		return phase.Done, err
	}
	var names []string
	for _, c := range build.Catalog {
		if p := j.pods[c.Name]; p != nil {
			names = append(names, c.Name)
		}
	}
	for _, c := range j.comps {
		if !c.StaticPod {
			names = append(names, c.Name)
		}
	}
	if len(names) == 0 {
		return phase.Unchanged("nothing to swap"), nil
	}
	return phase.Unchanged("%s", strings.Join(names, ", ")), nil
}

// checkRegistry checks that the registry still has each pushed image.
func (j *Job) checkRegistry(ctx context.Context) (phase.Outcome, error) {
	if err := j.selectPods(); err != nil {
		return phase.Done, err
	}
	n := 0
	for _, c := range build.Catalog {
		p := j.pods[c.Name]
		if p == nil {
			continue
		}
		cs, err := j.pushed(c)
		if err != nil {
			return phase.Done, err
		}
		host, _, _ := strings.Cut(cs.Pushed.Ref, "/")
		remote, err := image.NewRemote(host, image.RemoteOptions{Insecure: j.Insecure})
		if err != nil {
			return phase.Done, err
		}
		ref, err := remote.ParseReference(cs.Pushed.Ref)
		if err != nil {
			return phase.Done, err
		}
		if _, err := remote.Head(ctx, ref); err != nil {
			if errors.Is(err, image.ErrNotFound) {
				return phase.Done, fmt.Errorf("the registry no longer has %s (pushed %s): push it again with `devk push %s`", cs.Pushed.Ref, cs.Pushed.PushedAt.Format(time.RFC3339), c.Name)
			}
			return phase.Done, fmt.Errorf("check %s in its registry: %w", cs.Pushed.Ref, err)
		}
		n++
	}
	return phase.Unchanged("%d pushed images present", n), nil
}
