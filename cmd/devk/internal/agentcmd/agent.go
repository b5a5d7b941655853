// Package agentcmd is `devk agent`, hidden: devk's node agent, which devk
// runs itself, in a pod on a node of a cluster it reaches only through
// the API (package remote); not a command for people.
package agentcmd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/devk/devk/agent"
	"github.com/devk/devk/cmd/devk/internal/cli"
)

// NewAgentCmd is `devk agent`.
func NewAgentCmd(g *cli.Options) *cobra.Command {
	cmd := &cobra.Command{
		Use:    "agent",
		Short:  "devk's node agent: runs in the pod devk makes on a node, its task in $" + agent.EnvTask,
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			raw := os.Getenv(agent.EnvTask)
			if raw == "" {
				return fmt.Errorf("devk agent runs in the pod devk makes on a node, with its task in $%s: it is not a command to run by hand", agent.EnvTask)
			}
			var t agent.Task
			dec := json.NewDecoder(bytes.NewReader([]byte(raw)))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&t); err != nil {
				return fmt.Errorf("$%s: %w (the agent image and the devk that made its pod differ?)", agent.EnvTask, err)
			}
			return agent.Run(cmd.Context(), t, cmd.InOrStdin(), g.Stdout)
		},
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "cat FILE",
		Short: "write the agent's export tarball to stdout (its client runs it by exec)",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			return agent.Cat(args[0], g.Stdout)
		},
	})
	return cmd
}
