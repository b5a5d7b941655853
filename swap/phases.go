package swap

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/devk/devk/build"
	"github.com/devk/devk/digest"
	"github.com/devk/devk/image"
	"github.com/devk/devk/internal/addon"
	"github.com/devk/devk/internal/kube"
	"github.com/devk/devk/phase"
)

// Phases are `devk swap` (and `--rollback`). Interrupted swaps are
// finished first; then the binaries; then the static pods one after
// another, each verified (or rolled back) before the next starts, in the
// catalog's order; then the addons, likewise. Every static pod has the
// same steps, named <component>/<step>; under --rollback a pod skips
// pull and backup and writes its backup instead of a new image. Every
// addon has set-image, rollout and verify; under --rollback set-image
// applies the image the last swap replaced.
func Phases() []*phase.Phase[*Job] {
	ps := []*phase.Phase[*Job]{
		{
			Name:  "resume",
			Short: "finish or undo the swaps a kill or a second Ctrl-C interrupted, and put back the static pods of interrupted `devk run`s, from their journals",
			If: func(j *Job) (bool, string) {
				return j.Node.ManifestsDir != "" && j.touchesNode(), "the node is not touched"
			},
			IO: func(j *Job) ([]string, []string) {
				work := ManifestFor(j.Node.ManifestsDir, "").WorkDir
				return []string{filepath.Join(work, "*.swap.json"), filepath.Join(work, "*.yaml.swapping")},
					[]string{filepath.Join(j.Node.ManifestsDir, "*.yaml") + " (only of interrupted swaps)"}
			},
			Run: phase.Method((*Job).resume),
		},
		{
			Name:  "select",
			Short: "decide what to swap: the components named, or each static pod and addon that does not run its last pushed digest",
			IO: func(j *Job) ([]string, []string) {
				workloads := "the addons' workloads (" + strings.Join(addonNames(), ", ") + ")"
				if j.Rollback {
					return []string{filepath.Join(ManifestFor(j.Node.ManifestsDir, "").WorkDir, "*.yaml.prev"), filepath.Join(j.Node.ManifestsDir, "*.yaml"), workloads}, nil
				}
				return []string{j.statePath(), filepath.Join(j.Node.ManifestsDir, "*.yaml"), workloads}, nil
			},
			Run: phase.Method((*Job).runSelect),
		},
		{
			Name:  "registry",
			Short: "check that the registry still has each pushed image, before any file is touched",
			Needs: []string{"select"},
			If: func(j *Job) (bool, string) {
				if j.Rollback {
					return false, "--rollback goes back to what the node ran"
				}
				if j.RegistryChecked {
					return false, "checked by devk's client before any node changed"
				}
				if err := j.selectPods(); err == nil && len(j.pods) == 0 && j.addonsSelected && j.addonsErr == nil && len(j.addonSwaps) == 0 {
					return false, "no static pod or addon to swap"
				}
				return true, ""
			},
			IO: func(j *Job) ([]string, []string) {
				var refs []string
				for _, c := range build.Catalog {
					if c.StaticPod && (!j.selected || j.selectErr != nil || j.pods[c.Name] != nil) {
						refs = append(refs, j.pushedRef(c.Name))
					}
				}
				for _, w := range addon.Workloads {
					if !j.addonsSelected || j.addonsErr != nil || j.addonSwaps[w.Component] != nil {
						refs = append(refs, j.pushedRef(w.Component))
					}
				}
				return refs, nil
			},
			Run: phase.Method((*Job).checkRegistry),
		},
		kubectlPhase(),
		kubeletPhase(),
	}
	for _, c := range build.Catalog {
		if c.StaticPod {
			ps = append(ps, podPhases(c))
		}
	}
	for _, w := range addon.Workloads {
		ps = append(ps, addonPhases(w))
	}
	return ps
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
				return false, "the manifest names " + digest.ShortRef(p.target.Image) + " already"
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
		return "mirror pod kube-system/" + kube.MirrorPodName(c.Binary, name)
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
					return []string{j.pushedRef(c.Name)}, []string{cri(j) + " images"}
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
						[]string{m.Path + " -> " + m.VacatedPath(), cri(j) + " (stop " + c.Binary + "'s containers)"}
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
	if j.State != nil {
		return "the tree's state.json, sent by the client"
	}
	return "_output/devk/state.json of the tree"
}

// pushedRef names the image a swap of the component would use, for
// plans.
func (j *Job) pushedRef(name string) string {
	if j.state != nil {
		if cs := j.state.Components[name]; cs != nil && cs.Pushed != nil {
			return cs.Pushed.Ref
		}
	}
	return name + "'s last pushed image (" + j.statePath() + ")"
}

// resume finishes (or undoes) each static pod's interrupted swap; a
// --rollback of a pod restores what its swap replaced instead.
func (j *Job) resume(ctx context.Context) (phase.Outcome, error) {
	if err := j.lockNode(); err != nil {
		return phase.Done, err
	}
	res, err := ResumeAll(ctx, j.Node.ManifestsDir, j.connect, func(c build.Component) bool { return j.Rollback && j.named(c.Name) })
	j.Report.StaticPods = append(j.Report.StaticPods, res...)
	if err != nil {
		return phase.Done, err
	}
	var done []string
	for _, r := range res {
		done = append(done, r.Pod)
	}
	if len(done) == 0 {
		return phase.Unchanged("no swap was interrupted"), nil
	}
	return phase.Changed("finished the interrupted swap of %s", strings.Join(done, ", ")), nil
}

func (j *Job) runSelect(ctx context.Context) (phase.Outcome, error) {
	if err := j.selectAll(ctx); err != nil {
		return phase.Done, err
	}
	if len(j.comps) == 0 && len(j.addons) == 0 && len(j.pods) == 0 && len(j.addonSwaps) == 0 && len(j.Report.StaticPods) == 0 {
		j.Report.Nothing = "every pushed static-pod component and addon already runs its last pushed digest"
	}
	var names []string
	for _, c := range build.Catalog {
		if p := j.pods[c.Name]; p != nil {
			names = append(names, c.Name)
		}
	}
	for _, w := range addon.Workloads {
		if j.addonSwaps[w.Component] != nil {
			names = append(names, w.Component)
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
	if err := j.selectAll(ctx); err != nil {
		return phase.Done, err
	}
	// What each swap points at: the pushed image (a debug swap's debug
	// image, or the one its manifest replaced).
	type target struct{ name, ref string }
	var targets []target
	for _, c := range build.Catalog {
		if p := j.pods[c.Name]; p != nil {
			targets = append(targets, target{c.Name, p.target.Image})
		}
	}
	for _, w := range addon.Workloads {
		if a := j.addonSwaps[w.Component]; a != nil {
			targets = append(targets, target{w.Component, a.target})
		}
	}
	refs := make([][2]string, len(targets))
	for i, t := range targets {
		refs[i] = [2]string{t.name, t.ref}
	}
	n, err := CheckPushed(ctx, refs, j.Insecure)
	if err != nil {
		return phase.Done, err
	}
	return phase.Unchanged("%d pushed images present", n), nil
}

// CheckPushed asks each image's registry whether it still has it (refs:
// component and reference pairs), and returns how many it found: the
// registry phase's check, which a swap through the cluster makes on the
// client before any agent runs.
func CheckPushed(ctx context.Context, refs [][2]string, insecure bool) (int, error) {
	n := 0
	for _, t := range refs {
		name, ref := t[0], t[1]
		host, _, _ := strings.Cut(ref, "/")
		remote, err := image.NewRemote(host, image.RemoteOptions{Insecure: insecure})
		if err != nil {
			return n, err
		}
		r, err := remote.ParseReference(ref)
		if err != nil {
			return n, err
		}
		if _, err := remote.Head(ctx, r); err != nil {
			if errors.Is(err, image.ErrNotFound) {
				return n, fmt.Errorf("the registry no longer has %s: push it again with `devk push %s`", ref, name)
			}
			return n, fmt.Errorf("check %s in its registry: %w", ref, err)
		}
		n++
	}
	return n, nil
}

// addonPhases swap one addon through the API server.
func addonPhases(w addon.Workload) *phase.Phase[*Job] {
	step := func(f func(*addonSwap, context.Context) (phase.Outcome, error)) func(context.Context, *Job) (phase.Outcome, error) {
		return func(ctx context.Context, j *Job) (phase.Outcome, error) {
			if err := j.selectAddons(ctx); err != nil {
				return phase.Done, err
			}
			a := j.addonSwaps[w.Component]
			if a == nil {
				return phase.Done, fmt.Errorf("%s is not selected: name it (devk swap %s)", w.Component, w.Component)
			}
			return f(a, ctx)
		}
	}
	// io leaves out what an addon that is not selected would do.
	io := func(f func(*Job) ([]string, []string)) func(*Job) ([]string, []string) {
		return func(j *Job) ([]string, []string) {
			if j.addonsSelected && j.addonsErr == nil && j.addonSwaps[w.Component] == nil {
				return nil, nil
			}
			return f(j)
		}
	}
	obj := w.String()
	pods := "the pods of " + obj + " (by its selector)"
	return &phase.Phase[*Job]{
		Name:  w.Component,
		Short: "swap the addon " + obj + "'s image and verify every pod before the next addon",
		If: func(j *Job) (bool, string) {
			if !j.addonsSelected || j.addonsErr != nil {
				return true, "" // its first step selects, or says why not
			}
			if j.addonSwaps[w.Component] == nil {
				return false, "not selected"
			}
			return true, ""
		},
		Children: []*phase.Phase[*Job]{
			{
				Name:  "set-image",
				Short: "apply the pushed image (repo@sha256:…) to container " + w.Container + " as field manager " + addon.FieldManager + ", recording the image it replaces on the object (--rollback: apply that one)",
				Needs: []string{"select"},
				If: func(j *Job) (bool, string) {
					if a := j.addonSwaps[w.Component]; a != nil && a.unchanged {
						return false, obj + " names " + digest.ShortRef(a.target) + " already"
					}
					return true, ""
				},
				IO: io(func(j *Job) ([]string, []string) {
					from := j.pushedRef(w.Component)
					if j.Rollback {
						from = obj + "'s " + addon.PreviousImageAnnotation + " annotation"
					}
					return []string{from}, []string{obj + " (container " + w.Container + "'s image; annotations " + addon.SwappedImageAnnotation + ", " + addon.PreviousImageAnnotation + ")"}
				}),
				Run: step((*addonSwap).setImage),
			},
			{
				Name:  "rollout",
				Short: "wait until the controller has every pod on the image and available, no old pod left; a crash loop, a failed pull or --timeout puts the previous image back",
				Needs: []string{w.Component + "/set-image"},
				IO: io(func(j *Job) ([]string, []string) {
					return []string{obj + " (status)", pods + ", and a failing pod's log"}, nil
				}),
				Run: step((*addonSwap).rollout),
			},
			{
				Name:  "verify",
				Short: "check the workload's image and every pod's imageID and readiness, and the CRI imageRef on every node devk runs, against the digest; a failure puts the previous image back",
				Needs: []string{w.Component + "/rollout"},
				IO: io(func(j *Job) ([]string, []string) {
					return []string{obj, pods, "CRI " + j.Node.CRISocket + " containers (pods on this node)"}, nil
				}),
				Run: step((*addonSwap).verify),
			},
		},
	}
}
