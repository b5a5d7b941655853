package run

import (
	"fmt"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/devk/devk/build"
	"github.com/devk/devk/internal/staticpod"
)

// Spec is how the process runs: what the static pod's container ran,
// with the tree's binary in the image's place.
type Spec struct {
	// Argv is the command line: the binary, then the container's command
	// after its first word, then its args. It is the one place the
	// command line is built: a debugger wraps it whole (dlv exec … --
	// Argv).
	Argv []string
	// Env is the manifest's environment for the container (NAME=value),
	// and nothing of devk's: no proxy, no GO* or KUBECONFIG of the shell
	// devk runs in.
	Env []string
	// Dir is the working directory: the container's, else /.
	Dir string
}

// rootDir is where a container runs when its manifest names no working
// directory, as the runtime starts it.
const rootDir = "/"

// Command is the Spec of component c run from binary in place of the
// static pod: the manifest's command (its first word must be c's binary:
// a manifest running another program, such as `devk debug`'s debugger,
// is refused),
// args and env; each volume the container mounts must be a hostPath at
// the same path, so that the process finds its files where the
// container did.
func Command(pod *corev1.Pod, c build.Component, binary string) (Spec, error) {
	if _, debugging, _ := staticpod.DebugOriginal(pod); debugging {
		return Spec{}, fmt.Errorf("%s runs under `devk debug`: end that first (`devk debug --stop %s`)", c.Binary, c.Name)
	}
	ctr, err := staticpod.Container(pod, c.Binary)
	if err != nil {
		return Spec{}, err
	}
	s := Spec{Argv: []string{binary}, Dir: ctr.WorkingDir}
	if s.Dir == "" {
		s.Dir = rootDir
	}
	if len(ctr.Command) > 0 {
		if filepath.Base(ctr.Command[0]) != c.Binary {
			return Spec{}, fmt.Errorf("the %s manifest runs %q, not %s: put its own command back first (`devk swap --rollback %s`, or `devk up`)", c.Binary, strings.Join(ctr.Command, " "), c.Binary, c.Name)
		}
		s.Argv = append(s.Argv, ctr.Command[1:]...)
	}
	s.Argv = append(s.Argv, ctr.Args...)
	for _, e := range ctr.Env {
		if e.ValueFrom != nil {
			return Spec{}, fmt.Errorf("the %s manifest's env %s comes from valueFrom, which only the kubelet can resolve: give it a value", c.Binary, e.Name)
		}
		s.Env = append(s.Env, e.Name+"="+e.Value)
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		volumes[v.Name] = v
	}
	for _, vm := range ctr.VolumeMounts {
		v, ok := volumes[vm.Name]
		switch {
		case !ok:
			return Spec{}, fmt.Errorf("the %s manifest mounts volume %s, which it does not declare", c.Binary, vm.Name)
		case v.HostPath == nil:
			return Spec{}, fmt.Errorf("the %s manifest mounts volume %s at %s, which is not a hostPath: devk run gives the process the node's files only", c.Binary, vm.Name, vm.MountPath)
		case filepath.Clean(v.HostPath.Path) != filepath.Clean(vm.MountPath) || vm.SubPath != "":
			return Spec{}, fmt.Errorf("the %s manifest mounts %s at %s: devk run gives the process the node's files where they are, so each hostPath must be mounted at its own path", c.Binary, v.HostPath.Path, filepath.Join(vm.MountPath, vm.SubPath))
		}
	}
	return s, nil
}
