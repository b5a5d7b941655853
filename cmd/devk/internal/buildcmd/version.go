package buildcmd

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/devk/devk/cmd/devk/internal/cli"
)

// NewVersionCmd is `devk version`.
func NewVersionCmd(g *cli.Options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print devk's version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := g.Version()
			if g.Structured() {
				return g.Result(v)
			}
			fmt.Fprintln(g.Stdout, v)
			return nil
		},
	}
	cli.ResultHelp(cmd, cli.VersionInfo{}, false)
	return cmd
}
