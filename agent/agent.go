// Package agent is devk's node agent: the node-side half of a command
// that reaches a cluster only through its kubeconfig. devk runs its own
// binary (`devk agent`, hidden) as a short-lived pod pinned to a node,
// with only the host paths its task reads; the agent does the task there
// and writes its result as JSON lines on stdout, which the client reads
// through the pod's log (package remote).
package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/devk/devk/build"
	"github.com/devk/devk/certs"
	"github.com/devk/devk/cluster/export"
	"github.com/devk/devk/digest"
	"github.com/devk/devk/etcdwatch"
	"github.com/devk/devk/internal/cri"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/output"
	"github.com/devk/devk/internal/progress"
)

// EnvTask is the agent container's variable holding its Task as JSON:
// what the pod does is readable in `kubectl get pod -o yaml`.
const EnvTask = "DEVK_AGENT_TASK"

// Kind names what an agent does on its node.
type Kind string

// KindCerts reads a control-plane node's certificates, kubeconfigs and
// CAs (certs.Inspect) and returns their dates, never their keys.
const KindCerts Kind = "certs"

// KindDigest reads what a node's manifests name and its runtime runs for
// static pods (digest.ObserveNode): `devk digest verify`'s node views.
const KindDigest Kind = "digest"

// KindEtcd reads the node's etcd as the API server there does (its
// client certificate, its endpoints): `devk etcd ls|get|diff|watch`,
// whose printed output is the result (a watch's streamed). The key never
// leaves the node.
const KindEtcd Kind = "etcd"

// Task is one agent's work on one node.
type Task struct {
	Kind Kind `json:"kind"`
	// Certs is KindCerts's input.
	Certs *CertsTask `json:"certs,omitempty"`
	// Digest is KindDigest's.
	Digest *DigestTask `json:"digest,omitempty"`
	// Etcd is KindEtcd's.
	Etcd *EtcdTask `json:"etcd,omitempty"`
	// Swap is KindSwap's, Pull KindPull's.
	Swap *SwapTask `json:"swap,omitempty"`
	Pull *PullTask `json:"pull,omitempty"`
	// Export is KindExport's: the node's files.
	Export *export.NodeFiles `json:"export,omitempty"`
	// Load is KindLoad's, Kubelet KindKubelet's.
	Load    *LoadTask    `json:"load,omitempty"`
	Kubelet *KubeletTask `json:"kubelet,omitempty"`
}

// Waits says t's agent, its result written, stays until its pod is
// deleted: an export's tarball is read from it meanwhile.
func (t Task) Waits() bool { return t.Kind == KindExport }

// Work says t's pod has its own directory (WorkDir, an emptyDir): an
// export's tarball, a load's registry.
func (t Task) Work() bool { return t.Kind == KindExport || t.Kind == KindLoad || t.Kind == KindKubelet }

// Stdin says t reads what its client writes on its stdin (a load's
// LoadInput lines, a kubelet's new binary).
func (t Task) Stdin() bool {
	return t.Kind == KindLoad || t.Kind == KindKubelet && t.Kubelet != nil && !t.Kubelet.Rollback
}

// HostPID says t sees the host's processes: a kubelet swap finds the
// node's kubelet among them.
func (t Task) HostPID() bool { return t.Kind == KindKubelet }

// Privileged says t's container is privileged: a kubelet swap reaches
// the kubelet's and PID 1's file systems through /proc/PID/root and
// restarts a systemd unit, which an unprivileged container may not.
func (t Task) Privileged() bool { return t.Kind == KindKubelet }

// The verbs of an etcd task: `devk etcd ls|get`, and `devk etcd diff`
// between two revisions (Rev, UntilRev) the client read around the
// change it made on its machine, printed as diff prints it.
const (
	EtcdLs   = "ls"
	EtcdGet  = "get"
	EtcdDiff = "diff"
	// EtcdWatch streams: `devk etcd watch`, its output sent as it is
	// printed (Line.Output) until the pod is deleted.
	EtcdWatch = "watch"
)

// EtcdTask is one etcd command against a control-plane node's etcd,
// with its API server's --etcd-* flags.
type EtcdTask struct {
	// Verb is one of the Etcd* verbs.
	Verb string `json:"verb"`
	// Conn is the node's API server's etcd (its endpoints and the node's
	// files).
	Conn layout.Etcd `json:"conn"`
	// Target, Namespace, Rev, Count, ShowSecrets and Ignore are the
	// command's, Format its -o.
	Target      string        `json:"target,omitempty"`
	Namespace   string        `json:"namespace,omitempty"`
	Rev         int64         `json:"rev,omitempty"`
	Count       bool          `json:"count,omitempty"`
	ShowSecrets bool          `json:"showSecrets,omitempty"`
	Ignore      []string      `json:"ignore,omitempty"`
	Format      output.Format `json:"format"`
	// Exclude is diff's and watch's --exclude; a diff is from Rev to
	// UntilRev.
	Exclude  []string `json:"exclude,omitempty"`
	UntilRev int64    `json:"untilRev,omitempty"`
}

// EtcdResult is what an etcd task printed.
type EtcdResult struct {
	Output string `json:"output"`
}

// HostNetwork says t's pod runs in the node's network namespace: etcd
// listens on the node's loopback, a swap probes the static pods' health
// there, a load's registry serves the node's runtime there, and a kubelet
// swap finds the kubelet of its network namespace and probes its health.
func (t Task) HostNetwork() bool {
	return t.Kind == KindEtcd || t.Kind == KindSwap || t.Kind == KindLoad || t.Kind == KindKubelet
}

// UsesAPI says t's agent talks to the API server (with its run's
// ServiceAccount): a swap waits for mirror pods. The other tasks get no
// token.
func (t Task) UsesAPI() bool { return t.Kind == KindSwap }

// Streams says t sends its output as it prints it, and runs until its
// pod is deleted: etcd watch.
func (t Task) Streams() bool { return t.Kind == KindEtcd && t.Etcd != nil && t.Etcd.Verb == EtcdWatch }

// DigestTask names a node's static pods and where its kubelet keeps
// their manifests and runs them.
type DigestTask struct {
	ManifestsDir string `json:"manifestsDir"`
	// CRISocket is the runtime's socket (a path).
	CRISocket string `json:"criSocket"`
	// NodeName is the node's: its static pods are <pod>-<node>.
	NodeName string `json:"nodeName"`
	// Binaries are the static pods (kube-apiserver, …).
	Binaries []string `json:"binaries"`
}

// CertsTask says where a control-plane node keeps what check-expiration
// reads, as the node names its paths.
type CertsTask struct {
	PKIDir        string `json:"pkiDir"`
	KubeconfigDir string `json:"kubeconfigDir"`
	ManifestsDir  string `json:"manifestsDir"`
}

// Validate says what is wrong with t before any pod is made for it.
func (t Task) Validate() error {
	switch t.Kind {
	case KindCerts:
		if t.Certs == nil {
			return errors.New("agent task certs: no directories")
		}
		for flag, p := range map[string]string{"pkiDir": t.Certs.PKIDir, "kubeconfigDir": t.Certs.KubeconfigDir, "manifestsDir": t.Certs.ManifestsDir} {
			if err := cleanAbs(p); err != nil {
				return fmt.Errorf("agent task certs: %s %w", flag, err)
			}
		}
		return nil
	case KindDigest:
		d := t.Digest
		if d == nil {
			return errors.New("agent task digest: no node")
		}
		for flag, p := range map[string]string{"manifestsDir": d.ManifestsDir, "criSocket": d.CRISocket} {
			if err := cleanAbs(p); err != nil {
				return fmt.Errorf("agent task digest: %s %w", flag, err)
			}
		}
		if errs := validation.IsDNS1123Subdomain(d.NodeName); len(errs) > 0 {
			return fmt.Errorf("agent task digest: node name %q: %s", d.NodeName, strings.Join(errs, "; "))
		}
		for _, b := range d.Binaries {
			if c, err := build.Lookup(b); err != nil || !c.StaticPod || c.Binary != b {
				return fmt.Errorf("agent task digest: %q is not a static pod's binary", b)
			}
		}
		return nil
	case KindEtcd:
		e := t.Etcd
		if e == nil || !slices.Contains([]string{EtcdLs, EtcdGet, EtcdDiff, EtcdWatch}, e.Verb) {
			return fmt.Errorf("agent task etcd: %s, %s, %s or %s", EtcdLs, EtcdGet, EtcdDiff, EtcdWatch)
		}
		if e.Verb == EtcdDiff && (e.Rev <= 0 || e.UntilRev < e.Rev) {
			return fmt.Errorf("agent task etcd: a diff from revision %d to %d", e.Rev, e.UntilRev)
		}
		for flag, p := range map[string]string{"cacert": e.Conn.CACert, "cert": e.Conn.Cert, "key": e.Conn.Key} {
			if err := cleanAbs(p); err != nil {
				return fmt.Errorf("agent task etcd: %s %w", flag, err)
			}
		}
		if len(e.Conn.Endpoints) == 0 {
			return errors.New("agent task etcd: no endpoints")
		}
		return nil
	case KindSwap:
		return t.Swap.validate()
	case KindPull:
		return t.Pull.validate()
	case KindExport:
		return validateExport(t.Export)
	case KindLoad:
		return t.Load.validate()
	case KindKubelet:
		return t.Kubelet.validate()
	}
	return noTask(t.Kind)
}

// noTask is the error of a task kind the agent does not have.
func noTask(k Kind) error { return fmt.Errorf("agent task %q: devk's agent has no such task", k) }

// cleanAbs says what is wrong with a path an agent mounts: it must be
// clean, absolute and below /.
func cleanAbs(p string) error {
	if !path.IsAbs(p) || path.Clean(p) != p || p == "/" {
		return fmt.Errorf("%q is not a clean absolute path below /", p)
	}
	return nil
}

// Mount is a node's directory an agent mounts, at its own path (so the
// paths in its results are the node's).
type Mount struct {
	Path string
	// Write mounts it read-write; Create makes it if the node lacks it.
	Write, Create bool
}

// Mounts are the node's directories t uses: read-only but where it
// writes; one mount where one read-only directory holds another
// (kubeadm's /etc/kubernetes holds pki/ and manifests/), while a
// read-only one below a writable one is mounted again over it.
func (t Task) Mounts() []Mount {
	var ms []Mount
	ro := func(dirs ...string) {
		for _, d := range dirs {
			ms = append(ms, Mount{Path: d})
		}
	}
	switch t.Kind {
	case KindCerts:
		ro(t.Certs.KubeconfigDir, t.Certs.PKIDir, t.Certs.ManifestsDir)
	case KindDigest:
		// The socket's directory, not the socket: a restarted runtime
		// makes a new one, which a mount of the old file would miss.
		ro(t.Digest.ManifestsDir, path.Dir(t.Digest.CRISocket))
	case KindEtcd:
		c := t.Etcd.Conn
		ro(path.Dir(c.CACert), path.Dir(c.Cert), path.Dir(c.Key))
	case KindSwap:
		ms = t.Swap.mounts()
	case KindPull:
		ro(path.Dir(t.Pull.CRISocket))
	case KindLoad:
		ro(path.Dir(t.Load.CRISocket))
	case KindExport:
		ms = exportMounts(t.Export)
	}
	slices.SortFunc(ms, func(a, b Mount) int { return strings.Compare(a.Path, b.Path) })
	ms = slices.CompactFunc(ms, func(a, b Mount) bool { return a.Path == b.Path })
	var out []Mount
	for _, m := range ms {
		// A directory inside a mounted one needs its own mount only to
		// be mounted otherwise (read-only inside a writable one).
		if !slices.ContainsFunc(out, func(p Mount) bool { return strings.HasPrefix(m.Path, p.Path+"/") && p.Write == m.Write }) {
			out = append(out, m)
		}
	}
	return out
}

// Line is one line an agent writes on stdout: a part of what a streaming
// task prints, or one of its notes; then its result or its error, the
// last line it writes.
type Line struct {
	// Seq numbers the lines from 1, so that a client that reads the log
	// again (its stream cut) skips what it has seen.
	Seq    int    `json:"seq"`
	Output string `json:"output,omitempty"`
	// Event is a step of the task's progress, as `-o json` prints it.
	Event  *progress.Event `json:"event,omitempty"`
	Info   string          `json:"info,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  string          `json:"error,omitempty"`
}

// Final says l is the last line: the result, the error, or both (what a
// failed swap did).
func (l Line) Final() bool { return l.Result != nil || l.Error != "" }

// Run does task t on this node, reading what its client sends on in (a
// load's) and writing its Lines to w (a streaming task's output as it
// comes, then the result); the error is also the agent's exit status
// (1).
func Run(ctx context.Context, t Task, in io.Reader, w io.Writer) error {
	lw := &lineWriter{Reporter: progress.Discard(), w: w}
	result, err := run(ctx, t, in, lw)
	line := Line{Result: result}
	if err != nil {
		line.Error = err.Error()
	}
	if werr := lw.emit(line); werr != nil {
		return werr
	}
	if err == nil && t.Waits() {
		<-ctx.Done() // the pod's deletion (SIGTERM), or its deadline
		return nil
	}
	return err
}

// lineWriter writes an agent's Lines, numbered. As an io.Writer it is a
// streaming task's output; as a progress.Reporter its notes (Infof).
type lineWriter struct {
	progress.Reporter // the rest of a task's progress stays on the node
	mu                sync.Mutex
	w                 io.Writer
	seq               int
}

func (lw *lineWriter) emit(l Line) error {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	lw.seq++
	l.Seq = lw.seq
	data, err := json.Marshal(l)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(lw.w, "%s\n", data)
	return err
}

func (lw *lineWriter) Write(p []byte) (int, error) {
	if err := lw.emit(Line{Output: string(p)}); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (lw *lineWriter) Infof(format string, args ...any) {
	_ = lw.emit(Line{Info: fmt.Sprintf(format, args...)})
}

func run(ctx context.Context, t Task, in io.Reader, lw *lineWriter) (json.RawMessage, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	switch t.Kind {
	case KindCerts:
		n := layout.Kubeadm(t.Certs.KubeconfigDir)
		n.PKIDir, n.ManifestsDir = t.Certs.PKIDir, t.Certs.ManifestsDir
		r, err := certs.Inspect(n, time.Now())
		if err != nil {
			return nil, err
		}
		return json.Marshal(r)
	case KindDigest:
		d := t.Digest
		rt, err := cri.Dial(d.CRISocket)
		if err != nil {
			return nil, err
		}
		defer rt.Close()
		v, err := digest.ObserveNode(ctx, d.ManifestsDir, rt, d.NodeName, d.Binaries)
		if err != nil {
			return nil, err
		}
		return json.Marshal(v)
	case KindEtcd:
		r, err := runEtcd(ctx, *t.Etcd, lw)
		if err != nil {
			return nil, err
		}
		return json.Marshal(r)
	case KindSwap:
		r, err := runSwap(ctx, *t.Swap, lw)
		return marshalBoth(r, err)
	case KindPull:
		r, err := runPull(ctx, *t.Pull)
		return marshalBoth(r, err)
	case KindLoad:
		r, err := runLoad(ctx, *t.Load, in, lw)
		if err != nil {
			return nil, err
		}
		return json.Marshal(r)
	case KindKubelet:
		r, err := runKubelet(ctx, *t.Kubelet, procRoot, WorkDir, in, lw)
		return marshalBoth(r, err)
	case KindExport:
		r, err := runExport(ctx, *t.Export)
		if err != nil {
			return nil, err
		}
		return json.Marshal(r)
	}
	return nil, noTask(t.Kind)
}

// marshalBoth is a task's result and its error: a result that says what
// a failed task did goes with the error.
func marshalBoth(v any, err error) (json.RawMessage, error) {
	data, merr := json.Marshal(v)
	if merr != nil {
		return nil, errors.Join(err, merr)
	}
	return data, err
}

// runEtcd runs an etcd task and returns what it printed; a watch prints
// to lw as it goes.
func runEtcd(ctx context.Context, e EtcdTask, lw *lineWriter) (EtcdResult, error) {
	var out strings.Builder
	conn := etcdwatch.ConnOptions{Endpoints: e.Conn.Endpoints, CACert: e.Conn.CACert, Cert: e.Conn.Cert, Key: e.Conn.Key, Prefix: e.Conn.Prefix, Getenv: func(string) string { return "" }}
	q := etcdwatch.Query{Conn: conn, Target: e.Target, Namespace: e.Namespace, Format: e.Format, Out: &out}
	paths, err := etcdwatch.ParseFieldPaths(e.Ignore)
	if err != nil {
		return EtcdResult{}, err
	}
	q.Decode = etcdwatch.DecodeOptions{ShowSecrets: e.ShowSecrets, Ignore: paths}
	switch e.Verb {
	case EtcdLs:
		err = etcdwatch.Ls(ctx, etcdwatch.LsOptions{Query: q, Count: e.Count, Rev: e.Rev})
	case EtcdGet:
		err = etcdwatch.Get(ctx, etcdwatch.GetOptions{Query: q, Rev: e.Rev})
	case EtcdDiff:
		err = etcdwatch.Diff(ctx, etcdwatch.DiffOptions{Query: q, SinceRev: e.Rev, UntilRev: e.UntilRev, Exclude: e.Exclude})
	case EtcdWatch:
		q.Out, q.Log = lw, lw
		err = etcdwatch.Watch(ctx, etcdwatch.WatchOptions{Query: q, FromRev: e.Rev, Exclude: e.Exclude})
	}
	return EtcdResult{Output: out.String()}, err
}
