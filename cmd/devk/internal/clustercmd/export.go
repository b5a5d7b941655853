package clustercmd

import (
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/devk/devk/cluster/export"
	"github.com/devk/devk/cmd/devk/internal/cli"
	"github.com/devk/devk/image"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/phase"
	"github.com/devk/devk/remote"
)

// NewExportCmd is `devk export`.
func NewExportCmd(g *cli.Options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Export what debugging a cluster needs",
	}
	cmd.AddCommand(newExportLogsCmd(g))
	return cmd
}

func newExportLogsCmd(g *cli.Options) *cobra.Command {
	var (
		o      export.Options
		access cli.Access
	)
	cmd := &cobra.Command{
		Use:   "logs [DIR]",
		Short: "Write a cluster's logs, manifests, API objects and phase times into a directory or tarball",
		Long: `Write what debugging a cluster needs, as ` + "`kind export logs`" + ` does, and print
where: every container log the kubelet kept (the control plane, kube-proxy,
CoreDNS, your pods), the kubelet's and containerd's logs, the static-pod
manifests and the kubelet's config, the runtime's list of containers, every
listable resource's objects in all namespaces (` + "`kubectl get -A -o yaml`" + ` of
each api-resource), and devk's own view: cluster.json, the phase times of
the last ` + "`devk up`" + ` or ` + "`devk down`" + `, and ` + "`devk status`" + `. It changes nothing in the
cluster.

Secrets are redacted (their values read ` + export.Redacted + `); private keys,
certificates and kubeconfigs are not exported; every file is 0600. README.txt
in the export lists what is where.

DIR is a new directory, or an empty one of yours that no other user may
write to (devk writes as root, and another user's directory, or a symlink,
could lead its writes elsewhere); without it, ./devk-logs-NAME-TIME. Every
file is written beneath it, through no link out. With --tar, or a DIR
ending in ` + export.TarSuffix + `, a gzipped tarball is written instead.

A broken cluster is the usual reason to export: what cannot be read (the
API server is down, containerd does not answer) is listed in errors.txt and
on stderr, the rest is written, and the exit status is still 0. A non-zero
status means the export itself could not be written.

Any other cluster is exported through the cluster itself: --kubeconfig (or
$KUBECONFIG's current context when there is no devk cluster named devk
here; --via-cluster forces it) with --registry, a registry the nodes pull
devk's node agent from. The objects are read through the API; on each node
an agent pod collects the static-pod manifests, the container logs and the
runtime's containers into a tarball, which devk reads by exec and checks
by sha256. The kubelet's and the runtime's own logs are the host's there,
and are not exported. The first line says which way devk runs.`,
		Example: `  devk export logs
  devk export logs /tmp/devk-logs
  devk export logs --name dev2 --tar
  devk export logs logs.tar.gz -o json
  devk export logs --kubeconfig ~/work.conf --registry registry.example:5000   # any cluster, through it`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				o.Dest = args[0]
			}
			o.Reporter = g.Reporter()
			o.DevkVersion = g.Version().Line()
			d, err := access.Decide(cmd, g, o.Name, "")
			if err != nil {
				return err
			}
			popts := phase.Options{Reporter: o.Reporter, PlanOut: g.Stderr, Summary: g.Debug()}
			var res *export.Result
			if d.Mode == remote.ThroughCluster {
				res, err = exportThrough(cmd, g, d, &access, o, popts)
			} else {
				if d.Name != "" {
					o.Name = d.Name
				}
				res, err = export.Logs(cmd.Context(), o, popts)
			}
			if err != nil {
				return err
			}
			if len(res.Missing) > 0 {
				where := filepath.Join(res.Path, export.ErrorsFile)
				if res.Tar {
					where = export.ErrorsFile + " in the tarball"
				}
				fmt.Fprintf(g.Stderr, "warning: %d things could not be collected (%s):\n", len(res.Missing), where)
				for _, m := range res.Missing {
					fmt.Fprintf(g.Stderr, "  %s\n", m)
				}
			}
			if g.Structured() {
				return g.Result(res)
			}
			fmt.Fprintln(g.Stdout, res.Path)
			return nil
		},
	}
	cmd.Flags().StringVar(&o.Name, "name", layout.DefaultName, "cluster name")
	cmd.Flags().BoolVar(&o.Tar, "tar", false, "write a gzipped tarball ("+export.TarSuffix+") instead of a directory")
	access.Add(cmd.Flags())
	cli.ResultHelp(cmd, export.Result{}, false)
	return cmd
}

// exportThrough is export logs of a cluster reached through its API.
func exportThrough(cmd *cobra.Command, g *cli.Options, d remote.Decision, access *cli.Access, o export.Options, popts phase.Options) (*export.Result, error) {
	ctx := cmd.Context()
	s, err := remote.Connect(ctx, d, access.Agent(), g.Version().Version, image.RemoteOptions{}, g.Reporter(), remote.ExportNeeds)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	th, err := s.Export(ctx, d.Target)
	if err != nil {
		return nil, err
	}
	return export.LogsThrough(ctx, th, o, popts)
}
