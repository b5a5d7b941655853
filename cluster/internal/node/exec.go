package node

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/devk/devk/cluster/internal/containerd"
	"github.com/devk/devk/internal/execx"
	"github.com/devk/devk/internal/mountns"
)

// `devk node exec` runs a command in a node as `docker exec` runs one in
// a kind node: in the node's network and mount namespaces, with the
// node's environment. devk execs nsenter, which execs a shell that goes
// to the working directory and execs the command: what runs is the
// command itself, in devk's place (its pid, its signals, its exit status,
// devk's stdin, stdout and stderr). Before that, a lookup inside the node
// finds the command, so that devk, not the command, reports one it
// cannot run.

// Exec is a command ready to run in a node: Argv from Path (nsenter on
// the host) with Env, changing nothing by itself.
type Exec struct {
	// Node is the node's name.
	Node string
	// Path is nsenter's absolute path on the host, Argv its command line
	// (Argv[0] "nsenter").
	Path string
	Argv []string
	// Env is the command's whole environment.
	Env []string
	// Command is the command as the user gave it.
	Command []string
}

// ExecInput is what node n's command is run with besides the node's own
// files.
type ExecInput struct {
	// Command is the command and its arguments.
	Command []string
	// Dir is the working directory to run it in (inside the node: / when
	// the node has no such directory).
	Dir string
	// Environ is the caller's environment, which the command gets with
	// the node's variables set on top.
	Environ []string
	// Extra are variables to set besides (the daemons' NO_PROXY).
	Extra []string
	// ToolDirs go on PATH after the node's own bin directory (devk's
	// kubectl).
	ToolDirs []string
	// CRISocket is the node's runtime.
	CRISocket string
	// Home is the resolved DEVK_HOME the node's cluster is in, which
	// the command gets (devk's systemctl in the node finds it there).
	Home string
}

// Sentinel errors of a command that cannot run in the node, which `devk
// node exec` tells apart by its exit status (127 and 126, as a shell,
// env and docker exec do).
var (
	ErrCommandNotFound      = errors.New("command not found")
	ErrCommandNotExecutable = errors.New("command not executable")
)

// DefaultExecPath is the PATH a command run in a node gets after the
// node's own directories when the caller has none.
const DefaultExecPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Exit statuses of execLookup (as a shell's for a command not found and
// one it cannot execute).
const (
	lookupNotFound      = 127
	lookupNotExecutable = 126
)

// execLookup finds $2 as execvp does ($PATH for a name without a slash)
// in working directory $1 (else /), inside the node: a file it can
// execute, or exit 127 (none) or 126 (not a file it can execute).
const execLookup = `set -f; cd -- "$1" 2>/dev/null || cd /
case $2 in
*/*) [ -e "$2" ] || exit 127; p=$2 ;;
*) p=; IFS=:; for d in $PATH; do f=${d:-.}/$2; if [ -f "$f" ] && [ -x "$f" ]; then p=$f; break; fi; done
   [ -n "$p" ] || exit 127 ;;
esac
[ -f "$p" ] && [ -x "$p" ] || exit 126`

// execRun goes to working directory $1 (else /) and execs the rest.
const execRun = `cd -- "$1" 2>/dev/null || cd /
shift
exec "$@"`

// shell is the shell that runs execLookup and execRun inside the node.
const shell = "/bin/sh"

// Exec prepares in.Command to run in node n. It checks that the node's
// namespaces are there and looks the command up inside the node
// (ErrCommandNotFound, ErrCommandNotExecutable); it changes nothing.
func (n Node) Exec(ctx context.Context, in ExecInput) (Exec, error) {
	if len(in.Command) == 0 || in.Command[0] == "" {
		return Exec{}, errors.New("no command to run in the node")
	}
	for _, ns := range []struct{ kind, file string }{{"network", n.Net.NetNSPath()}, {"mount", n.Files.MountNS()}} {
		if _, _, ok := mountns.ID(ns.file); !ok {
			return Exec{}, fmt.Errorf("node %s has no %s namespace at %s: is cluster %s up? `devk up%s` makes it again", n.Name(), ns.kind, ns.file, n.Config.Name, NameFlag(n.Config.Name))
		}
	}
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		return Exec{}, fmt.Errorf("enter node %s: %w (install util-linux)", n.Name(), err)
	}
	env := n.execEnv(in)
	dir := in.Dir
	if dir == "" {
		dir = "/"
	}
	if err := n.lookup(ctx, nsenter, env, dir, in.Command[0]); err != nil {
		return Exec{}, err
	}
	argv := n.Enter(append([]string{shell, "-c", execRun, "sh", dir}, in.Command...)...)
	return Exec{Node: n.Name(), Path: nsenter, Argv: argv, Env: env, Command: in.Command}, nil
}

// lookup finds command inside node n with env's PATH (execLookup).
func (n Node) lookup(ctx context.Context, nsenter string, env []string, dir, command string) error {
	a := n.Enter(shell, "-c", execLookup, "sh", dir, command)
	_, err := execx.Output(ctx, execx.Cmd{Name: nsenter, Args: a[1:], Env: env})
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		return err
	}
	where := "node " + n.Name()
	if !strings.Contains(command, "/") {
		where += "'s PATH (" + execx.Getenv(env, "PATH") + ")"
	}
	switch exit.ExitCode() {
	case lookupNotFound:
		return fmt.Errorf("%s: %w in %s: the node sees this machine's programs: install it here, or give its path", command, ErrCommandNotFound, where)
	case lookupNotExecutable:
		return fmt.Errorf("%s: %w in %s: it is not a file with execute permission", command, ErrCommandNotExecutable, where)
	}
	return fmt.Errorf("enter node %s: %w", n.Name(), err)
}

// execEnv is the environment of a command run in node n: the caller's,
// with on top PATH (the node's bin directory, where devk puts its
// kubelet, then in.ToolDirs, the caller's PATH, and last the CNI
// plugins', whose names, such as bridge, would hide iproute2's),
// KUBECONFIG (a control-plane node's admin.conf, a worker's kubelet.conf:
// what kubeadm leaves on each), the runtime for crictl
// (CONTAINER_RUNTIME_ENDPOINT) and, on devk's own containerd, for ctr
// (CONTAINERD_ADDRESS, CONTAINERD_NAMESPACE k8s.io: the pods'), CNI_PATH,
// and DEVK_HOME, DEVK_CLUSTER and DEVK_NODE, which say where the command
// runs (devk's systemctl in the node reads them).
func (n Node) execEnv(in ExecInput) []string {
	path := execx.Getenv(in.Environ, "PATH")
	if path == "" {
		path = DefaultExecPath
	}
	dirs := append(append([]string{filepath.Dir(n.Files.KubeletBinary())}, in.ToolDirs...), path, containerd.CNIBinDir())
	kubeconfig := n.Files.Kubeconfig("kubelet")
	if n.Net.IsControlPlane() {
		kubeconfig = n.Files.Kubeconfig("admin")
	}
	set := []string{
		"PATH=" + strings.Join(dirs, ":"),
		"KUBECONFIG=" + kubeconfig,
		"CONTAINER_RUNTIME_ENDPOINT=unix://" + in.CRISocket,
		"CNI_PATH=" + containerd.CNIBinDir(),
		"DEVK_CLUSTER=" + n.Config.Name,
		"DEVK_NODE=" + n.Name(),
	}
	if in.Home != "" {
		set = append(set, "DEVK_HOME="+in.Home)
	}
	if in.CRISocket == n.Files.ContainerdSocket() {
		set = append(set, "CONTAINERD_ADDRESS="+in.CRISocket, "CONTAINERD_NAMESPACE="+containerd.Namespace)
	}
	return setEnv(in.Environ, append(set, in.Extra...))
}

// setEnv is environ with the variables of set (KEY=VALUE) in place of
// its own of those names, each name once.
func setEnv(environ, set []string) []string {
	names := map[string]bool{}
	for _, kv := range set {
		k, _, _ := strings.Cut(kv, "=")
		names[k] = true
	}
	out := slices.DeleteFunc(slices.Clone(environ), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return names[k]
	})
	for i, kv := range set {
		k, _, _ := strings.Cut(kv, "=")
		if !slices.ContainsFunc(set[i+1:], func(later string) bool { return strings.HasPrefix(later, k+"=") }) {
			out = append(out, kv)
		}
	}
	return out
}
