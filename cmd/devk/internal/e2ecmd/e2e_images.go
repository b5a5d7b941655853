package e2ecmd

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/devk/devk/cmd/devk/internal/cli"
	"github.com/devk/devk/conformance"
	"github.com/devk/devk/internal/layout"
)

func newE2EImagesCmd(g *cli.Options) *cobra.Command {
	var o conformance.ImagesOptions
	cmd := &cobra.Command{
		Use:   "images",
		Short: "Build the e2e specs' test images from the tree and push them to the cluster's registry",
		Long: `Read the images the tree's e2e framework names (` + conformance.ManifestFile + `),
build those devk can make, and push each to the cluster's registry under
exactly the name and tag the framework asks for with the repo list ` + "`devk e2e`" + `
writes (<registry>/<upstream registry and path>/<name>:<tag>, e.g.
127.0.0.1:5000/registry.k8s.io/e2e-test-images/agnhost:2.56):

  agnhost, regression-issue-74839,  the tree's Go programs (test/images/…, the
  nonewprivs, sample-apiserver      sample-apiserver of staging/), laid out as their
                                    Dockerfiles lay them out (/agnhost, entrypoint
                                    ["/agnhost"], cmd ["pause"]; nnp setuid in
                                    /usr/local/bin), on a busybox base; agnhost's
                                    also has OpenBSD's nc, curl, dig and getent
  kitten, nautilus                  agnhost with the Update Demo's picture and
                                    data.json in /, cmd ["test-webserver"]
  busybox, nonroot                  that base: Debian's busybox-static, its applets
                                    linked in /usr/bin (sh, wget, nc, …); nonroot
                                    with USER 1234
  jessie-dnsutils                   the base with Debian's dig and getent
                                    (bind9-dnsutils, libc-bin)
  httpd, nginx                      stand-ins: busybox's httpd serving an index.html
                                    on port 80 from the directory the real image serves
  pause, etcd                       the cluster's own images

The table shows each image, what it was built from and its digest; the
images devk cannot build are listed with the files under test/e2e that
use them (specs there fail or skip for want of them).`,
		Example: `  devk e2e images
  devk e2e images --name dev2 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Reporter = g.Reporter()
			res, err := conformance.BuildImages(cmd.Context(), o)
			if err != nil {
				return err
			}
			if g.Structured() {
				return g.Result(res)
			}
			printE2EImages(g, res)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Name, "name", layout.DefaultName, "cluster name")
	f.StringVar(&o.TreeDir, "tree", "", "the Kubernetes tree (default: the one around the working directory)")
	cli.ResultHelp(cmd, conformance.ImagesResult{}, false)
	return cmd
}

func printE2EImages(g *cli.Options, r *conformance.ImagesResult) {
	tw := tabwriter.NewWriter(g.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "IMAGE\tBUILT FROM\tDIGEST")
	var missing []conformance.ImageRow
	for _, row := range r.Images {
		if row.Missing != "" {
			missing = append(missing, row)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", row.Ref, row.BuiltFrom, row.Digest)
	}
	tw.Flush()
	if len(missing) == 0 {
		return
	}
	fmt.Fprintf(g.Stdout, "\nnot built (%d): specs that use them fail or skip\n", len(missing))
	for _, row := range missing {
		fmt.Fprintf(g.Stdout, "  %s: %s\n", row.Upstream(), row.Missing)
		if len(row.UsedBy) > 0 {
			fmt.Fprintf(g.Stdout, "      used by %s\n", strings.Join(row.UsedBy, ", "))
		}
	}
}
