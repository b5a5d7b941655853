package clustercmd

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/devk/devk/cluster"
	"github.com/devk/devk/cmd/devk/internal/cli"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/phase"
)

// NewDownCmd is `devk down`.
func NewDownCmd(g *cli.Options) *cobra.Command {
	var (
		o     cluster.Options
		flags phase.Flags
	)
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Tear a cluster down and leave nothing behind",
		Long: `Tear down a cluster made by ` + "`devk up`" + `: stop the kubelet, remove every pod
and container through CRI, stop the private containerd (and its shims) and
the embedded registry by pid, unmount what lies under the cluster
directory, remove the kubepods and k8s.io cgroups, delete the CNI bridge,
remove context devk-NAME from your kubeconfig and remove the directory.
Afterwards no devk process, mount, cgroup or listening port remains.

--keep-data keeps pki/, etcd/ and cluster.json, so the next ` + "`devk up`" + ` comes
back with the same certificates and the same etcd contents.`,
		Example: `  devk down
  devk down --name dev2 --keep-data`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Reporter = g.Reporter()
			defer g.FollowLogs(cmd.Context(), o.Name)()
			popts := g.PhaseOptions(&flags)
			t0 := time.Now()
			c, _, err := cluster.Down(cmd.Context(), o, popts)
			if errors.Is(err, layout.ErrNoCluster) {
				if g.Structured() {
					return g.Result(downResult{Name: o.Name})
				}
				fmt.Fprintf(g.Stdout, "cluster %s does not exist; nothing to do\n", o.Name)
				return nil
			}
			if err != nil || flags.DryRun {
				return err
			}
			took := time.Since(t0)
			if g.Structured() {
				return g.Result(downResult{Name: c.Config.Name, Existed: true, KeptData: o.KeepData, Seconds: took.Seconds()})
			}
			if o.KeepData {
				fmt.Fprintf(g.Stdout, "cluster %s is down in %s; pki and etcd data kept in %s\n", c.Config.Name, progress.Round(took), c.Files.Dir)
			} else {
				fmt.Fprintf(g.Stdout, "cluster %s is gone in %s\n", c.Config.Name, progress.Round(took))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Name, "name", layout.DefaultName, "cluster name")
	f.BoolVar(&o.KeepData, "keep-data", false, "keep pki/, etcd/ and cluster.json for the next devk up")
	f.StringVar(&o.UserKubeconfig, "write-kubeconfig", "", "kubeconfig to remove context devk-NAME from (default $KUBECONFIG, else ~/.kube/config)")
	// --kubeconfig meant this before it meant, everywhere, the credentials
	// devk talks to an API server with (as kubectl's).
	f.StringVar(&o.UserKubeconfig, "kubeconfig", "", "same as --write-kubeconfig")
	cli.Deprecate(f, "kubeconfig", "use --write-kubeconfig (--kubeconfig is the credentials devk uses, as kubectl's)")
	phase.Bind(cmd, cluster.DownPhases(), &flags)
	cli.ResultHelp(cmd, downResult{}, false)
	return cmd
}

// downResult is devk down's result with -o json|yaml.
type downResult struct {
	Name     string  `json:"name"`
	Existed  bool    `json:"existed"`
	KeptData bool    `json:"keptData"`
	Seconds  float64 `json:"seconds"`
}
