package run

import (
	"path/filepath"

	"github.com/devk/devk/build"
	"github.com/devk/devk/internal/kube"
	"github.com/devk/devk/phase"
)

// buildParent is the phase holding --debug's build phases.
const buildParent = "build"

// Phases are `devk run`: with --debug the debug build is made first,
// with --go-run the binary is compiled first
// (the node is not locked for that); the node's interrupted swaps and
// runs are finished; the command line is made from the manifest and
// printed, and its IDE launch configuration written, before anything on
// the node changes; then the pod is handed over to the process as a swap
// hands it to a new image, the process runs, and the pod is put back and
// verified.
func Phases() []*phase.Phase[*Job] {
	manifest := func(j *Job) string { return j.m.Path }
	cri := func(j *Job) string { return "CRI " + j.Node.CRISocket }
	mirror := func(j *Job) string {
		node := j.NodeName
		if node == "" {
			node = "<node>"
		}
		return "mirror pod kube-system/" + kube.MirrorPodName(j.comp.Binary, node)
	}
	builds := phase.Nest(buildParent, phase.Map(build.Phases(), func(j *Job) *build.Job { return j.build }))
	return []*phase.Phase[*Job]{
		{
			Name:     buildParent,
			Short:    "--debug: the component's debug build (-N -l where the tree changed since its last normal build) and Delve, as devk build --debug makes them",
			If:       func(j *Job) (bool, string) { return j.Debug, "--debug not given" },
			Children: builds,
		},
		{
			Name:  "compile",
			Short: "--go-run: build the tree's main package with a plain go build, as go run does",
			If: func(j *Job) (bool, string) {
				return j.GoRun, "the binary `devk build` made runs (--go-run compiles)"
			},
			IO: func(j *Job) ([]string, []string) {
				return []string{filepath.Join(j.tree.Root, j.comp.Package)}, []string{j.goRunBinary()}
			},
			Run: phase.Method((*Job).compile),
		},
		{
			Name:  "resume",
			Short: "finish the node's interrupted swaps and put back the static pods of interrupted runs, from their journals",
			IO: func(j *Job) ([]string, []string) {
				work := j.m.WorkDir
				return []string{filepath.Join(work, "*.swap.json"), filepath.Join(work, "*.yaml.swapping")},
					[]string{filepath.Join(j.Node.ManifestsDir, "*.yaml") + " (only of interrupted swaps and runs)"}
			},
			Run: phase.Method((*Job).resume),
		},
		{
			Name:  "command",
			Short: "the manifest's command, args and env with the tree's binary in the image's place, printed",
			IO: func(j *Job) ([]string, []string) {
				bin := j.goRunBinary()
				if !j.GoRun {
					bin = "the binary " + filepath.Join(j.tree.OutputDir(), "state.json") + " names"
				}
				return []string{manifest(j), bin}, nil
			},
			Run: phase.Method((*Job).commandLine),
		},
		{
			Name:  "launch-config",
			Short: "write a VS Code launch configuration that runs the same on this machine",
			Needs: []string{"command"},
			IO: func(j *Job) ([]string, []string) {
				return nil, []string{j.Result.LaunchJSON}
			},
			Run: phase.Method((*Job).launchConfig),
		},
		{
			Name:  "backup",
			Short: "keep the manifest as the pending backup and write the run's journal",
			Needs: []string{"command"},
			IO: func(j *Job) ([]string, []string) {
				return []string{manifest(j)}, []string{j.m.PendingPath(), j.m.JournalPath()}
			},
			Run: phase.Method((*Job).backup),
		},
		{
			Name:  "take-out",
			Short: "move the manifest out, stop the pod's container through CRI, wait until the kubelet lets go of the pod",
			Needs: []string{"backup"},
			IO: func(j *Job) ([]string, []string) {
				return []string{cri(j) + " sandboxes and containers"},
					[]string{manifest(j) + " -> " + j.m.VacatedPath(), cri(j) + " (stop " + j.comp.Binary + "'s containers)"}
			},
			Run: phase.Method((*Job).takeOut),
		},
		{
			Name:  "run",
			Short: "run the process in the node, in the foreground, until it ends or Ctrl-C stops it",
			Needs: []string{"take-out"},
			IO: func(j *Job) ([]string, []string) {
				return []string{"the binary the command phase printed"}, []string{j.m.JournalPath() + " (the process)"}
			},
			Run: phase.Method((*Job).runProcess),
		},
		{
			Name:  "put-back",
			Short: "put the manifest back, wait until the pod runs its image healthy, verify it as a swap does, drop the journal",
			Needs: []string{"backup"},
			IO: func(j *Job) ([]string, []string) {
				return []string{j.m.PendingPath(), cri(j) + " containers", mirror(j), j.comp.Binary + "'s health endpoint (its manifest's probe)"},
					[]string{manifest(j), j.m.JournalPath() + " (removed)"}
			},
			Run: phase.Method((*Job).putBack),
		},
	}
}
