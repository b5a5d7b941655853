package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/devk/devk/certs"
	"github.com/devk/devk/cluster"
	"github.com/devk/devk/cluster/pki"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/nodelock"
	"github.com/devk/devk/phase"
)

// ExitExpiring is check-expiration's status when --fail-within finds a
// certificate expiring sooner (or missing).
const ExitExpiring = 2

// expiringError asks for ExitExpiring.
type expiringError struct {
	names  []string
	within string
}

func (e *expiringError) Error() string {
	return fmt.Sprintf("%d expire within %s or are missing: %s (a devk cluster's `devk up` replaces a certificate with less than %s left; a kubeadm node's: kubeadm certs renew)",
		len(e.names), e.within, strings.Join(e.names, ", "), pki.RenewBefore)
}

func (e *expiringError) ExitCode() int { return ExitExpiring }

// certsFlags name the node whose certificates a certs command reads: a
// devk cluster by --name, or kubeadm's layout by its directories.
type certsFlags struct {
	Name          string
	PKIDir        string
	KubeconfigDir string
	ManifestsDir  string
	// CRISocket and NodeName are renew's: where the static pods run.
	CRISocket string
	NodeName  string
	// UserKubeconfig is renew's on a devk cluster: where up merged
	// context devk-NAME.
	UserKubeconfig string
}

func (f *certsFlags) add(cmd *cobra.Command) {
	kubeadm := layout.Kubeadm("")
	fl := cmd.Flags()
	fl.StringVar(&f.Name, "name", layout.DefaultName, "the devk cluster")
	fl.StringVar(&f.PKIDir, "pki-dir", "", "the certificates' directory, for a node devk did not make (kubeadm: "+kubeadm.PKIDir+")")
	fl.StringVar(&f.KubeconfigDir, "kubeconfig-dir", "", "the directory of admin.conf and the other kubeconfigs (kubeadm: "+filepath.Dir(kubeadm.Kubeconfig)+")")
	fl.StringVar(&f.ManifestsDir, "manifests-dir", "", "the kubelet's static pod dir, to tell which components use each file (kubeadm: "+kubeadm.ManifestsDir+")")
}

// files resolves the flags: a devk cluster's layout, or the directories
// given (--pki-dir names a node devk did not make; the kubeconfigs default
// to its parent directory, as kubeadm lays them out). It also fills the
// node's CRI socket and node name (a devk cluster's, or the flags').
func (f *certsFlags) files() (certs.Files, error) {
	if f.PKIDir != "" {
		out := certs.Files{PKIDir: f.PKIDir, KubeconfigDir: f.KubeconfigDir, ManifestsDir: f.ManifestsDir}
		if out.KubeconfigDir == "" {
			out.KubeconfigDir = filepath.Dir(filepath.Clean(f.PKIDir))
		}
		if out.ManifestsDir == "" {
			out.ManifestsDir = filepath.Join(out.KubeconfigDir, "manifests")
		}
		if f.CRISocket == "" {
			f.CRISocket = layout.KubeadmCRISocket
		}
		return out, nil
	}
	if f.KubeconfigDir != "" || f.ManifestsDir != "" {
		return certs.Files{}, fmt.Errorf("for a node that devk did not make, pass --pki-dir (kubeadm: %s) too", layout.Kubeadm("").PKIDir)
	}
	home, err := layout.HomeDir("")
	if err != nil {
		return certs.Files{}, err
	}
	cfg, p, err := layout.Open(home, f.Name)
	if err != nil {
		return certs.Files{}, fmt.Errorf("%w; for a kubeadm node pass --pki-dir %s", err, layout.Kubeadm("").PKIDir)
	}
	if f.CRISocket == "" {
		f.CRISocket = cfg.CRISocket
		if cfg.OwnRuntime || f.CRISocket == "" {
			f.CRISocket = p.ContainerdSocket()
		}
	}
	if f.NodeName == "" {
		f.NodeName = cfg.NodeName
	}
	return certs.Files{PKIDir: p.PKI(), KubeconfigDir: filepath.Dir(p.Kubeconfig("admin")), ManifestsDir: p.Manifests()}, nil
}

func newCertsCmd(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "certs",
		Short: "Check when a control plane's certificates expire; renew them, restart what uses them, verify",
	}
	cmd.AddCommand(newCertsCheckCmd(g), newCertsRenewCmd(g))
	return cmd
}

func newCertsCheckCmd(g *globalOptions) *cobra.Command {
	var f certsFlags
	var within string
	cmd := &cobra.Command{
		Use:   "check-expiration",
		Short: "List every certificate and kubeconfig: expiry, residual time, CA, renewable, used by",
		Long: `List a control-plane node's certificates, as kubeadm certs check-expiration
does: each certificate of the PKI directory (a devk cluster's also has
the controller-manager's and scheduler's serving certificates,
controller-manager-server and scheduler-server; a kubeadm node has none,
and is not told they are missing) and the client certificate of each
kubeconfig (admin, super-admin, controller-manager, scheduler), with
when it expires, the time left, the CA that signed it, whether devk can
renew it (not when devk has the CA's certificate but not its key: an
external CA), and which static pods name the file. Then the CAs. kubelet.conf
is left out, as kubeadm leaves it out: the kubelet renews its own client
certificate. It reads files only; the cluster may be down.

A devk cluster is found by --name; a kubeadm node by --pki-dir
(/etc/kubernetes/pki), its kubeconfigs in the parent directory and its
manifests in manifests/ there unless --kubeconfig-dir and --manifests-dir
say otherwise.

Exit status: 0; 2 with --fail-within when anything expires sooner or is
missing (for cron and CI); 1 on any other error.`,
		Example: `  devk certs check-expiration
  devk certs check-expiration --name dev2 -o json
  devk certs check-expiration --fail-within 30d
  sudo devk certs check-expiration --pki-dir /etc/kubernetes/pki`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var failWithin time.Duration
			if within != "" {
				var err error
				if failWithin, err = certs.ParseWithin(within); err != nil {
					return fmt.Errorf("--fail-within: %w", err)
				}
			}
			files, err := f.files()
			if err != nil {
				return err
			}
			r, err := certs.Inspect(files, time.Now())
			if err != nil {
				return err
			}
			if g.Structured() {
				if err := g.Result(r); err != nil {
					return err
				}
			} else {
				printExpiration(g, r)
			}
			if within != "" {
				if names := r.ExpiringWithin(failWithin); len(names) > 0 {
					return &expiringError{names: names, within: within}
				}
			}
			return nil
		},
	}
	f.add(cmd)
	cmd.Flags().StringVar(&within, "fail-within", "", "exit 2 if anything expires within this time or is missing: days (30d) or a Go duration (720h)")
	resultHelp(cmd, certs.Report{}, false)
	return cmd
}

func printExpiration(g *globalOptions, r *certs.Report) {
	when := func(t time.Time) string { return t.UTC().Format("Jan 02, 2006 15:04 MST") }
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 3, ' ', 0)
	fmt.Fprintln(tw, "CERTIFICATE\tEXPIRES\tRESIDUAL TIME\tCERTIFICATE AUTHORITY\tRENEWABLE\tUSED BY")
	for _, c := range r.Certs {
		if c.Missing {
			fmt.Fprintf(tw, "%s\tmissing (%s)\t-\t%s\t-\t%s\n", c.Name, c.Path, c.CA, orDash(strings.Join(c.UsedBy, ", ")))
			continue
		}
		renew := yesNo(c.Renewable)
		if !c.Renewable {
			renew = "no: " + c.Why
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", c.Name, when(c.NotAfter), certs.HumanDuration(c.Residual), c.CA, renew, orDash(strings.Join(c.UsedBy, ", ")))
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "CERTIFICATE AUTHORITY\tEXPIRES\tRESIDUAL TIME\tEXTERNALLY MANAGED")
	for _, c := range r.CAs {
		if c.Missing {
			fmt.Fprintf(tw, "%s\tmissing (%s)\t-\t-\n", c.Name, c.Path)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.Name, when(c.NotAfter), certs.HumanDuration(c.Residual), yesNo(c.External))
	}
	tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newCertsRenewCmd(g *globalOptions) *cobra.Command {
	var f certsFlags
	var flags phase.Flags
	o := certs.RenewOptions{Validity: pki.CertValidity, Timeout: certs.DefaultRestartTimeout}
	cmd := &cobra.Command{
		Use:   "renew all|NAME...",
		Short: "Renew certificates from their CAs, restart the static pods that use them, verify the new ones are in use",
		Long: `Renew a control plane's certificates and kubeconfig client certificates
(the names check-expiration lists, or all) from the CAs that signed them,
as kubeadm certs renew does: the same subject, SANs and usages, a new
serial, valid for --validity from now. Unlike kubeadm, the key is kept,
so each certificate changes in one atomic write and no kill can leave a
certificate beside a key it does not match; the previous file is kept
beside it as <file>.devk-prev.

Then, as kubespray does after renewing, the static pods whose manifests
name a renewed file are restarted by removing their pod sandboxes through
CRI (the kubelet recreates them from the unchanged manifests); then devk
waits until the API server, etcd, the controller-manager and the
scheduler present the new serials on their ports (on a kubeadm node the
last two serve certificates they make themselves, in memory: there they
are seen restarted) and each renewed kubeconfig authenticates as its
subject. If any of that fails, the previous files are put back and the
pods restarted again. A certificate under an external CA (its key is not
here) is left alone by "all" and refused by name. The cluster must be
running.

On a devk cluster a renewed admin.conf then goes into your kubeconfig's
context devk-NAME, as devk up merges it (--write-kubeconfig, as up's).

A devk cluster is found by --name; a kubeadm node by --pki-dir (with
--cri-socket, default ` + layout.KubeadmCRISocket + `, and --node-name).

Unattended, as kubespray's timer does it (cron, as root):
  0 3 * * 0  devk certs check-expiration --fail-within 30d >/dev/null || devk certs renew all`,
		Example: `  devk certs renew all
  devk certs renew apiserver admin.conf
  devk certs renew all --validity 10m      # short-lived, to test rotation
  devk certs renew all --dry-run
  sudo devk certs renew all --pki-dir /etc/kubernetes/pki`,
		Args: cobra.MinimumNArgs(1),
		ValidArgsFunction: func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
			return append([]string{certs.AllNames}, certs.Names()...), cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.Validity <= 0 {
				return fmt.Errorf("--validity %s: give a positive duration (10m, 8760h)", o.Validity)
			}
			if o.Timeout <= 0 {
				return fmt.Errorf("--timeout %s: give a positive duration", o.Timeout)
			}
			files, err := f.files()
			if err != nil {
				return err
			}
			o.Files, o.Names, o.CRISocket, o.NodeName = files, args, f.CRISocket, f.NodeName
			if f.PKIDir == "" {
				// A devk cluster: a renewed admin.conf goes into the
				// user's context as up merges it.
				c, err := cluster.Open(cluster.Options{Name: f.Name, UserKubeconfig: f.UserKubeconfig, Reporter: g.Reporter()})
				if err != nil {
					return err
				}
				o.MergeAdmin, o.UserKubeconfig = c.MergeUserKubeconfig, c.UserKubeconfigFile()
				defer g.followLogs(cmd.Context(), c.Config.Name)()
				if !flags.DryRun {
					// The cluster's lock and every node's: renew restarts
					// the control planes' pods.
					unlock, err := c.Lock()
					if err != nil {
						return err
					}
					defer unlock()
				}
			} else if f.UserKubeconfig != "" {
				return fmt.Errorf("--write-kubeconfig is a devk cluster's (where up merged context devk-NAME); on a node devk did not make, copy admin.conf yourself")
			} else if !flags.DryRun {
				l, err := nodelock.Acquire(files.ManifestsDir, nodelock.Command())
				if err != nil {
					return err
				}
				defer l.Release()
			}
			popts := flags.Options()
			popts.Reporter = g.Reporter()
			popts.PlanOut = g.stderr
			j, err := certs.Renew(cmd.Context(), o, popts)
			if err != nil || flags.DryRun {
				return err
			}
			if g.Structured() {
				return g.Result(j)
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 4, 3, ' ', 0)
			fmt.Fprintln(tw, "RENEWED\tSERIAL\tEXPIRES\tIN USE")
			for _, r := range j.Renewed {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Name, r.Serial, r.NotAfter.UTC().Format("Jan 02, 2006 15:04 MST"), r.Verified)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if j.KubeconfigMerged != "" {
				fmt.Fprintf(g.stdout, "\nyour kubeconfig: %s\n", j.KubeconfigMerged)
			}
			return nil
		},
	}
	f.add(cmd)
	fl := cmd.Flags()
	fl.StringVar(&f.CRISocket, "cri-socket", "", "the node's CRI socket, for a node devk did not make (default "+layout.KubeadmCRISocket+")")
	fl.StringVar(&f.NodeName, "node-name", "", "the kubelet's node name, for a node devk did not make (default: any static pod named <pod>-…)")
	fl.DurationVar(&o.Validity, "validity", pki.CertValidity, "how long the renewed certificates are valid (capped at their CA's end)")
	fl.DurationVar(&o.Timeout, "timeout", certs.DefaultRestartTimeout, "how long to wait for the restarted pods to serve the new certificates")
	fl.StringVar(&f.UserKubeconfig, "write-kubeconfig", "", "a devk cluster's: the kubeconfig whose context devk-NAME gets a renewed admin.conf's credentials, as up merged it (default $KUBECONFIG, else ~/.kube/config)")
	phase.Bind(cmd, certs.RenewPhases(), &flags)
	resultHelp(cmd, certs.RenewJob{}, false)
	return cmd
}
