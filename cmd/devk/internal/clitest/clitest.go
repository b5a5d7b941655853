// Package clitest runs a group's commands in its tests as devk runs
// them: under a root that has the flags every command shares.
package clitest

import (
	"bytes"
	"context"
	"io"
	"testing"

	"github.com/spf13/cobra"

	"github.com/devk/devk/cmd/devk/internal/cli"
)

// Root is a devk root command holding the commands cmds make, to run
// with args, its results on stdout and progress on stderr.
func Root(stdout, stderr io.Writer, args []string, cmds ...func(*cli.Options) *cobra.Command) *cobra.Command {
	g := cli.NewOptions(stdout, stderr, cli.DevVersion)
	root := &cobra.Command{Use: "devk", SilenceUsage: true, SilenceErrors: true}
	g.Bind(root, args)
	for _, c := range cmds {
		root.AddCommand(c(g))
	}
	return root
}

// Run runs devk args with the command newCmd makes, and returns what it
// printed.
func Run(t *testing.T, newCmd func(*cli.Options) *cobra.Command, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errb bytes.Buffer
	err = Root(&out, &errb, args, newCmd).ExecuteContext(context.Background())
	return out.String(), errb.String(), err
}
