package systemctl

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"

	"github.com/devk/devk/internal/execx"
)

// Inside a node, the node's namespaces cannot be entered by the paths
// devk enters them by (its /run/netns is the node's own, and its mount
// namespace's file is not bound there), so devk's systemctl starts and
// stops the kubelet from outside: it execs itself, by the node's
// systemctl link, in the mount and network namespaces of its nearest
// ancestor outside the node's mount namespace (the shell that ran `devk
// node exec`, or the devk that ran kubeadm). Queries read pid files and
// /proc, which look the same inside.

// leftNodeEnv marks the systemctl that left the node that way, so that
// it never tries again.
const leftNodeEnv = "DEVK_SYSTEMCTL_LEFT_NODE"

// leaveNode execs `nsenter` into the namespaces of the nearest ancestor
// in another mount namespace, running link (the node's systemctl link:
// a path the same inside and out, named systemctl) with args. It returns
// only when there is no such ancestor (this process is outside any node:
// it goes on itself) or the exec failed.
func leaveNode(link string, args, environ []string) error {
	if execx.Getenv(environ, leftNodeEnv) != "" {
		return nil
	}
	pid, ok := outsideAncestor()
	if !ok {
		return nil
	}
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		return fmt.Errorf("leave the node to start or stop its kubelet: %w (install util-linux)", err)
	}
	argv := append([]string{"nsenter", fmt.Sprintf("--mount=/proc/%d/ns/mnt", pid), fmt.Sprintf("--net=/proc/%d/ns/net", pid), "--", link}, args...)
	err = syscall.Exec(nsenter, argv, append(environ, leftNodeEnv+"=1"))
	return fmt.Errorf("leave the node to start or stop its kubelet: exec %s: %w", strings.Join(argv, " "), err)
}

// outsideAncestor is the nearest ancestor of this process whose mount
// namespace is not this process's; ok false when every ancestor it can
// read shares it.
func outsideAncestor() (int, bool) {
	self, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return 0, false
	}
	for pid := os.Getppid(); pid > 1; {
		ns, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/mnt")
		if err != nil {
			return 0, false
		}
		if ns != self {
			return pid, true
		}
		if pid, err = parentOf(pid); err != nil {
			return 0, false
		}
	}
	return 0, false
}

// parentOf is process pid's parent (field 4 of /proc/<pid>/stat).
func parentOf(pid int) (int, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	f := strings.Fields(s[i+1:])
	if i < 0 || len(f) < 2 {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	return strconv.Atoi(f[1])
}
