// Package innode is what devk runs inside a node of a cluster on this
// machine: the command of `devk node exec` (prepared, in the node's
// namespaces, with its environment) and the node's kubelet as the
// service devk's systemctl in the node serves.
package innode

import (
	"context"
	"errors"
	"os"
	"path/filepath"

	"github.com/devk/devk/cluster"
	"github.com/devk/devk/cluster/internal/node"
)

// ExecOptions are what `devk node exec` is told.
type ExecOptions struct {
	// Name is the cluster ("" for the default); Home is $DEVK_HOME (""
	// for the default).
	Name, Home string
	// Node is the node to run in ("": node 0).
	Node string
	// Command is the command and its arguments.
	Command []string
	// Dir is the working directory to run it in, inside the node (/ when
	// the node has no such directory).
	Dir string
}

// Exec is a command ready to run in a node (node.Exec).
type Exec = node.Exec

// A command that cannot run in the node (node's sentinels).
var (
	ErrCommandNotFound      = node.ErrCommandNotFound
	ErrCommandNotExecutable = node.ErrCommandNotExecutable
)

// NodeExec prepares o.Command to run in a node of the cluster, in its
// network and mount namespaces with its environment (node.Node.Exec): it
// reads cluster.json, checks that the node and its namespaces are there
// and finds the command inside the node. It takes no lock and changes
// nothing; what the command does is its own.
func NodeExec(ctx context.Context, o ExecOptions) (Exec, error) {
	c, err := cluster.Open(cluster.Options{Name: o.Name, Home: o.Home})
	if err != nil {
		return Exec{}, err
	}
	if !c.Exists() {
		return Exec{}, c.NoCluster()
	}
	n, err := c.NodeNamed(o.Node)
	if err != nil {
		return Exec{}, err
	}
	if os.Geteuid() != 0 {
		return Exec{}, errors.New("entering a node's namespaces needs root: run devk with sudo")
	}
	return n.Exec(ctx, node.ExecInput{
		Command: o.Command, Dir: o.Dir, Environ: os.Environ(), Extra: c.DaemonEnv(),
		ToolDirs: []string{filepath.Dir(c.KubectlPath())}, CRISocket: c.CRISocket(n), Home: c.Home,
	})
}
