package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/big"
	"net"
	neturl "net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/devk/devk/cluster/pki"
	"github.com/devk/devk/digest"
	"github.com/devk/devk/internal/cri"
	"github.com/devk/devk/internal/failpoint"
	"github.com/devk/devk/internal/kube"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/poll"
	"github.com/devk/devk/internal/staticpod"
	"github.com/devk/devk/phase"
)

// Renewal timing: every default once, here.
const (
	// DefaultRestartTimeout bounds the wait for the restarted static pods
	// to run again and serve the renewed certificates.
	DefaultRestartTimeout = 3 * time.Minute
	renewPollInterval     = 250 * time.Millisecond
	// tlsDialTimeout bounds one look at a server's certificate.
	tlsDialTimeout = 3 * time.Second
)

// FailpointJob names renew's kill points in test builds:
// certs-renew/<phase>, and certs-renew/renew/<name> before each file.
const FailpointJob = "certs-renew"

// AllNames is the argument that renews every certificate devk can.
const AllNames = "all"

// RenewOptions say what renew renews, on which node.
type RenewOptions struct {
	Files Files `json:"files"`
	// Names are kubeadm's names (apiserver, admin.conf, …) or AllNames.
	Names []string `json:"names"`
	// CRISocket is the node's runtime, where the static pods are restarted.
	CRISocket string `json:"criSocket"`
	// NodeName is the kubelet's node name; empty: any static pod of the
	// runtime named <pod>-….
	NodeName string `json:"nodeName"`
	// Validity is the renewed certificates' lifetime (pki.CertValidity).
	Validity time.Duration `json:"validity"`
	// Timeout bounds the wait for the restarted pods (DefaultRestartTimeout).
	Timeout time.Duration `json:"timeout"`
	// MergeAdmin, when set, puts a renewed admin.conf's credentials
	// where the user's kubectl finds them: a devk cluster's context
	// devk-NAME in UserKubeconfig, merged as up merges it. Nil on a
	// kubeadm node, whose admin.conf is the user's to copy.
	MergeAdmin     func(context.Context) (phase.Outcome, error) `json:"-"`
	UserKubeconfig string                                       `json:"userKubeconfig,omitempty"`
	Now            func() time.Time                             `json:"-"`
}

// Renewed is one certificate renew replaced.
type Renewed struct {
	Name      string    `json:"name"`
	Path      string    `json:"path"`
	OldSerial string    `json:"oldSerial"`
	Serial    string    `json:"serial"`
	NotAfter  time.Time `json:"notAfter"`
	// Verified says how the new certificate was seen in use.
	Verified string `json:"verified,omitempty"`

	cert    Cert
	renewed *x509.Certificate
}

// RenewJob is the state of one renewal.
type RenewJob struct {
	RenewOptions
	Renewed []*Renewed `json:"renewed"`
	// Restarted are the static pods whose sandboxes were removed.
	Restarted []string `json:"restarted"`
	// KubeconfigMerged says what MergeAdmin did with the renewed
	// admin.conf, when it ran.
	KubeconfigMerged string `json:"kubeconfigMerged,omitempty"`

	selected []Cert
	rt       *cri.Client
	removed  map[string]bool // sandbox IDs removed
}

// RenewPhases are `devk certs renew`: select, renew, restart, verify, and
// on a devk cluster kubeconfig-merge.
func RenewPhases() []*phase.Phase[*RenewJob] {
	needs := []string{"select"}
	return []*phase.Phase[*RenewJob]{
		{
			Name:  "select",
			Short: "read the certificates and kubeconfigs, check each named one can be renewed (its CA's key is here) and that the node's runtime runs the static pods that use them",
			IO: func(j *RenewJob) ([]string, []string) {
				return []string{j.Files.PKIDir, j.Files.KubeconfigDir, j.Files.ManifestsDir, j.CRISocket}, nil
			},
			Run: call((*RenewJob).sel),
		},
		{
			Name:  "renew",
			Short: "sign each anew from its CA: same subject, SANs, usages and key, new serial; each file written atomically after a copy (.devk-prev)",
			Needs: needs,
			IO: func(j *RenewJob) ([]string, []string) {
				var w []string
				for _, c := range j.selected {
					w = append(w, c.Path)
				}
				return []string{j.Files.PKIDir + " (CAs)"}, w
			},
			Run: call((*RenewJob).renew),
		},
		{
			Name:  "restart",
			Short: "remove the pod sandboxes of the static pods that use a renewed file, through CRI, so the kubelet recreates them from their unchanged manifests",
			Needs: needs,
			IO: func(j *RenewJob) ([]string, []string) {
				return nil, []string{j.CRISocket + " (pod sandboxes of " + strings.Join(j.pods(), ", ") + ")"}
			},
			Run: call((*RenewJob).restart),
		},
		{
			Name:  "verify",
			Short: "wait until the API server, etcd, the controller-manager and the scheduler present the new serials on their ports (each that has its serving certificate as a file), the API server's /readyz is ok and every renewed kubeconfig authenticates as its subject",
			Needs: needs,
			IO: func(j *RenewJob) ([]string, []string) {
				return []string{"the TLS ports of the API server, etcd, the controller-manager and the scheduler", "SelfSubjectReview"}, nil
			},
			Run: call((*RenewJob).verify),
		},
		{
			Name:  mergePhase,
			Short: "a devk cluster's, when admin.conf was renewed: put its new credentials into your kubeconfig's context devk-NAME, as devk up does",
			Needs: []string{"select", "renew"},
			If: func(j *RenewJob) (bool, string) {
				switch {
				case j.MergeAdmin == nil:
					return false, "not a devk cluster: no context of yours to update"
				case !slices.ContainsFunc(j.Renewed, func(r *Renewed) bool { return r.Name == AdminConf }):
					return false, AdminConf + " was not renewed"
				}
				return true, ""
			},
			IO: func(j *RenewJob) ([]string, []string) {
				if j.MergeAdmin == nil {
					return nil, nil
				}
				return []string{filepath.Join(j.Files.KubeconfigDir, AdminConf)}, []string{j.UserKubeconfig}
			},
			Run: call((*RenewJob).mergeAdmin),
		},
	}
}

func call(f func(*RenewJob, context.Context) (phase.Outcome, error)) func(context.Context, *RenewJob) (phase.Outcome, error) {
	return func(ctx context.Context, j *RenewJob) (phase.Outcome, error) { return f(j, ctx) }
}

// Renew runs the pipeline; on a failure after files were replaced it puts
// the previous ones back (and restarts the pods again) before returning
// the error.
func Renew(ctx context.Context, o RenewOptions, popts phase.Options) (*RenewJob, error) {
	if o.Validity == 0 {
		o.Validity = pki.CertValidity
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultRestartTimeout
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	j := &RenewJob{RenewOptions: o, removed: map[string]bool{}}
	popts.Job = FailpointJob
	defer func() {
		if j.rt != nil {
			j.rt.Close()
		}
	}()
	_, err := phase.Run(ctx, RenewPhases(), j, popts)
	// The merge comes after the renewed files are verified in use: its
	// failure keeps them.
	var failed *phase.Failed
	inMerge := errors.As(err, &failed) && failed.Path == mergePhase
	if err != nil && len(j.Renewed) > 0 && !inMerge && !popts.DryRun {
		return j, j.rollback(err)
	}
	return j, err
}

const mergePhase = "kubeconfig-merge"

// AdminConf is the kubeconfig whose credentials a devk cluster merges
// into the user's kubeconfig.
const AdminConf = "admin.conf"

// mergeAdmin runs MergeAdmin. The renewed files are in use by now, so a
// failure here keeps them and says how to merge again.
func (j *RenewJob) mergeAdmin(ctx context.Context) (phase.Outcome, error) {
	out, err := j.MergeAdmin(ctx)
	if err != nil {
		return phase.Done, fmt.Errorf("the renewed certificates are in use and kept, but your kubeconfig still has the old %s credentials: %w; fix that, then `devk up phase kubeconfig-merge`", AdminConf, err)
	}
	j.KubeconfigMerged = out.Detail
	return out, nil
}

func (j *RenewJob) pods() []string {
	var out []string
	for _, c := range j.selected {
		for _, p := range c.pods {
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	slices.Sort(out)
	return out
}

func (j *RenewJob) sel(ctx context.Context) (phase.Outcome, error) {
	r, err := Inspect(j.Files, j.Now())
	if err != nil {
		return phase.Done, err
	}
	known := map[string]Cert{}
	var names []string
	for _, c := range r.Certs {
		known[c.Name] = c
		names = append(names, c.Name)
	}
	j.selected = nil
	all := slices.Contains(j.Names, AllNames)
	if all && len(j.Names) > 1 {
		return phase.Done, fmt.Errorf("%q renews every certificate: name no others beside it", AllNames)
	}
	var skipped []string
	if all {
		for _, c := range r.Certs {
			if c.Missing || !c.Renewable {
				skipped = append(skipped, c.Name)
				continue
			}
			j.selected = append(j.selected, c)
		}
	} else {
		for _, n := range j.Names {
			c, ok := known[n]
			switch {
			case !ok:
				return phase.Done, fmt.Errorf("no certificate %q: use one of %s, or %s", n, strings.Join(names, ", "), AllNames)
			case c.Missing:
				return phase.Done, fmt.Errorf("%s is missing (%s): there is nothing to renew", n, c.Path)
			case !c.Renewable:
				return phase.Done, fmt.Errorf("%s cannot be renewed here: %s", n, c.Why)
			}
			if !slices.ContainsFunc(j.selected, func(s Cert) bool { return s.Name == n }) {
				j.selected = append(j.selected, c)
			}
		}
	}
	if len(j.selected) == 0 {
		return phase.Done, fmt.Errorf("nothing devk can renew here (%s cannot be)", strings.Join(skipped, ", "))
	}
	// The pods must be running: renewing under a stopped node would leave
	// nothing to restart and nothing to verify.
	if j.rt == nil {
		if j.rt, err = cri.Dial(j.CRISocket); err != nil {
			return phase.Done, err
		}
	}
	if _, err := j.rt.Version(ctx); err != nil {
		return phase.Done, fmt.Errorf("%w: renew needs the cluster running (devk up), to restart and verify what uses the certificates", err)
	}
	if j.NodeName == "" {
		// the kubelet's node name, from its static pods' sandboxes: a
		// pod is then found by its exact name, never another node's
		j.NodeName = digest.NodeName(ctx, j.rt, digest.StaticPodNames())
	}
	for _, p := range j.pods() {
		sbs, err := j.sandboxes(ctx, p)
		if err != nil {
			return phase.Done, err
		}
		if !slices.ContainsFunc(sbs, func(s cri.Sandbox) bool { return s.Ready }) {
			return phase.Done, fmt.Errorf("static pod %s does not run on %s: renew needs the cluster running (devk up), to restart and verify what uses the certificates", p, j.CRISocket)
		}
	}
	var sel []string
	for _, c := range j.selected {
		sel = append(sel, c.Name)
	}
	detail := strings.Join(sel, ", ")
	if len(skipped) > 0 {
		detail += "; not " + strings.Join(skipped, ", ") + " (missing or under an external CA)"
	}
	return phase.Unchanged("%s", detail), nil
}

// sandboxes are the static pod's sandboxes on the node's runtime.
func (j *RenewJob) sandboxes(ctx context.Context, pod string) ([]cri.Sandbox, error) {
	all, err := j.rt.Sandboxes(ctx, metav1.NamespaceSystem)
	if err != nil {
		return nil, err
	}
	var out []cri.Sandbox
	for _, s := range all {
		if !s.Static {
			continue
		}
		if s.PodName == kube.MirrorPodName(pod, j.NodeName) {
			out = append(out, s)
		}
	}
	return out, nil
}

func (j *RenewJob) renew(ctx context.Context) (phase.Outcome, error) {
	now := j.Now()
	for _, c := range j.selected {
		if err := ctx.Err(); err != nil {
			return phase.Done, err
		}
		failpoint.Hit(FailpointJob + "/renew/" + c.Name)
		var old, renewed *x509.Certificate
		var err error
		if c.spec != "" {
			old, renewed, err = pki.Renew(j.Files.PKIDir, c.spec, c.caSpec, now, j.Validity)
		} else {
			old, renewed, err = pki.RenewKubeconfig(j.Files.PKIDir, c.caSpec, c.Path, now, j.Validity)
		}
		if err != nil {
			return phase.Done, fmt.Errorf("renew %s: %w", c.Name, err)
		}
		j.Renewed = append(j.Renewed, &Renewed{Name: c.Name, Path: c.Path, OldSerial: old.SerialNumber.Text(16),
			Serial: renewed.SerialNumber.Text(16), NotAfter: renewed.NotAfter, cert: c, renewed: renewed})
	}
	return phase.Changed("%d renewed, valid until %s", len(j.Renewed), j.Renewed[0].NotAfter.UTC().Format(time.RFC3339)), nil
}

// restart removes the sandboxes of every pod that uses a renewed file.
func (j *RenewJob) restart(ctx context.Context) (phase.Outcome, error) {
	j.Restarted = nil
	for _, p := range j.pods() {
		sbs, err := j.sandboxes(ctx, p)
		if err != nil {
			return phase.Done, err
		}
		for _, s := range sbs {
			if err := j.rt.RemoveSandbox(ctx, s.ID); err != nil {
				return phase.Done, fmt.Errorf("restart %s: %w", p, err)
			}
			j.removed[s.ID] = true
		}
		j.Restarted = append(j.Restarted, p)
	}
	if len(j.Restarted) == 0 {
		return phase.Unchanged("no static pod uses a renewed file"), nil
	}
	return phase.Changed("%s", strings.Join(j.Restarted, ", ")), nil
}

// verify waits until each restarted pod runs in a new sandbox, the
// servers present the renewed certificates, and each renewed kubeconfig
// authenticates as its subject.
func (j *RenewJob) verify(ctx context.Context) (phase.Outcome, error) {
	checks := map[*Renewed]func(context.Context) (string, error){}
	for _, r := range j.Renewed {
		if f := j.checkOf(r); f != nil {
			checks[r] = f
		}
	}
	lastErr := map[string]error{}
	t0 := time.Now()
	err := wait.PollUntilContextTimeout(ctx, renewPollInterval, j.Timeout, true, func(ctx context.Context) (bool, error) {
		for _, p := range j.Restarted {
			sbs, err := j.sandboxes(ctx, p)
			if err != nil {
				return false, err
			}
			if !slices.ContainsFunc(sbs, func(s cri.Sandbox) bool { return s.Ready && !j.removed[s.ID] }) {
				lastErr[p] = fmt.Errorf("static pod %s has no new sandbox yet", p)
				return false, nil
			}
			delete(lastErr, p)
		}
		done := true
		for r, check := range checks {
			how, err := check(ctx)
			if err != nil {
				lastErr[r.Name] = err
				done = false
				continue
			}
			r.Verified = how
			delete(lastErr, r.Name)
			delete(checks, r)
		}
		return done, nil
	})
	if poll.TimedOut(ctx, err) {
		var why []string
		for name, e := range lastErr {
			why = append(why, name+": "+e.Error())
		}
		slices.Sort(why)
		return phase.Done, fmt.Errorf("not in use after %s: %s", j.Timeout, strings.Join(why, "; "))
	}
	if err != nil {
		return phase.Done, err
	}
	for _, r := range j.Renewed {
		if r.Verified == "" {
			r.Verified = "used by " + strings.Join(r.cert.pods, ", ") + ", restarted and running"
			if len(r.cert.pods) == 0 {
				r.Verified = "written (no static pod names it)"
			}
		}
	}
	return phase.Unchanged("%d certificates in use, %d pods restarted in %s", len(j.Renewed), len(j.Restarted), time.Since(t0).Round(100*time.Millisecond)), nil
}

// checkOf is how r is seen in use, nil when only the restart shows it: a
// serving certificate by the serial its server presents, a kubeconfig by
// authenticating with it.
func (j *RenewJob) checkOf(r *Renewed) func(context.Context) (string, error) {
	if r.cert.spec == "" {
		return func(ctx context.Context) (string, error) {
			cs, err := kube.Client(r.Path)
			if err != nil {
				return "", err
			}
			rev, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
			if err != nil {
				return "", err
			}
			if got, want := rev.Status.UserInfo.Username, r.renewed.Subject.CommonName; got != want {
				return "", fmt.Errorf("authenticates as %q, want %q", got, want)
			}
			return "authenticates as " + r.renewed.Subject.CommonName, nil
		}
	}
	addr, err := j.servingAddr(r.cert)
	if err != nil || addr == "" {
		return nil
	}
	return func(ctx context.Context) (string, error) {
		serial, err := presentedSerial(ctx, addr)
		if err != nil {
			return "", err
		}
		if serial.Cmp(r.renewed.SerialNumber) != 0 {
			return "", fmt.Errorf("%s presents serial %s, not the renewed %s", addr, serial.Text(16), r.Serial)
		}
		if r.cert.spec == "apiserver" {
			// Healthy too: /readyz covers etcd and the API server's
			// own start.
			if err := kube.Probe(ctx, "https://"+addr+"/readyz"); err != nil {
				return "", err
			}
			return addr + " presents serial " + r.Serial + ", /readyz ok", nil
		}
		return addr + " presents serial " + r.Serial, nil
	}
}

// server is a component that serves one of the certificates: its static
// pod and container, and the address it presents the certificate on,
// from the container's flags ("" when they name none devk can reach).
type server struct {
	pod  string
	addr func(flags map[string]string) string
}

// servers are the serving certificates renew verifies by the serial their
// server presents.
var servers = map[string]server{
	"apiserver": {"kube-apiserver", func(f map[string]string) string {
		if f["advertise-address"] == "" {
			return ""
		}
		return net.JoinHostPort(f["advertise-address"], flagOr(f, "secure-port", strconv.Itoa(layout.DefaultPorts.APIServer)))
	}},
	"etcd/server":               {"etcd", firstHTTPSURL("advertise-client-urls")},
	"etcd/peer":                 {"etcd", firstHTTPSURL("initial-advertise-peer-urls")},
	pki.ControllerManagerServer: {"kube-controller-manager", securePort(layout.DefaultPorts.ControllerManager)},
	pki.SchedulerServer:         {"kube-scheduler", securePort(layout.DefaultPorts.Scheduler)},
}

func flagOr(f map[string]string, name, def string) string {
	if v := f[name]; v != "" {
		return v
	}
	return def
}

// firstHTTPSURL is the host:port of the first URL of an etcd flag.
func firstHTTPSURL(flag string) func(map[string]string) string {
	return func(f map[string]string) string {
		first, _, _ := strings.Cut(f[flag], ",")
		u, err := neturl.Parse(first)
		if err != nil || u.Scheme != "https" {
			return ""
		}
		return u.Host
	}
}

// securePort is where a controller-manager or scheduler serves:
// --bind-address (all addresses, or none given: loopback) and
// --secure-port (def when not given; 0 serves nothing).
func securePort(def int) func(map[string]string) string {
	return func(f map[string]string) string {
		port := flagOr(f, "secure-port", strconv.Itoa(def))
		if port == "0" {
			return ""
		}
		host := f["bind-address"]
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			host = "127.0.0.1"
		}
		return net.JoinHostPort(host, port)
	}
}

// servingAddr is where the server of c presents it, from its manifest;
// "" when c is no serving certificate devk knows, or its server's
// manifest does not name it (a cluster whose manifests predate the file).
func (j *RenewJob) servingAddr(c Cert) (string, error) {
	srv, ok := servers[c.spec]
	if !ok || !slices.Contains(c.pods, srv.pod) {
		return "", nil
	}
	data, err := os.ReadFile(filepath.Join(j.Files.ManifestsDir, srv.pod+".yaml"))
	if err != nil {
		return "", err
	}
	p, err := staticpod.Parse(data)
	if err != nil {
		return "", err
	}
	return srv.addr(staticpod.Flags(p, srv.pod)), nil
}

// presentedSerial is the serial of the certificate the TLS server at addr
// presents. It is read during the handshake, which may then fail (etcd
// asks for a client certificate devk does not send).
func presentedSerial(ctx context.Context, addr string) (*big.Int, error) {
	var serial *big.Int
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: tlsDialTimeout}, Config: &tls.Config{
		InsecureSkipVerify: true, // only the serial is read; nothing is sent
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) > 0 {
				if crt, err := x509.ParseCertificate(raw[0]); err == nil {
					serial = crt.SerialNumber
				}
			}
			return nil
		},
	}}
	dctx, cancel := context.WithTimeout(ctx, tlsDialTimeout)
	defer cancel()
	conn, err := d.DialContext(dctx, "tcp", addr)
	if conn != nil {
		conn.Close()
	}
	if serial != nil {
		return serial, nil
	}
	if err == nil {
		err = errors.New("no certificate presented")
	}
	return nil, fmt.Errorf("%s: %w", addr, err)
}

// rollback puts back every file renew replaced and restarts the pods
// again, so they run with what they had.
func (j *RenewJob) rollback(cause error) error {
	var restored []string
	var errs []error
	for _, r := range j.Renewed {
		ok, err := pki.Restore(r.Path)
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			restored = append(restored, r.Name)
		}
	}
	if len(j.Restarted) > 0 && j.rt != nil {
		ctx, cancel := context.WithTimeout(context.Background(), tlsDialTimeout*10)
		defer cancel()
		if _, err := j.restart(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	msg := fmt.Errorf("%w; put back the previous %s", cause, strings.Join(restored, ", "))
	if len(j.Restarted) > 0 {
		msg = fmt.Errorf("%w and restarted %s again", msg, strings.Join(j.Restarted, ", "))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w (rolling back also failed: %v)", msg, errors.Join(errs...))
	}
	return msg
}
