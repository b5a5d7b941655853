// Package export is `devk export logs`: what debugging a cluster needs,
// written into a directory or tarball by phases on the phase engine.
package export

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/devk/devk/internal/atomicfile"
	"github.com/devk/devk/internal/cri"
	"github.com/devk/devk/internal/kube"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/supervise"
	"github.com/devk/devk/phase"

	"github.com/devk/devk/cluster"
	"github.com/devk/devk/cluster/internal/kwok"
	"github.com/devk/devk/cluster/loadbalancer"
	"github.com/devk/devk/cluster/status"
	"github.com/devk/devk/registry"
)

// What `devk export logs` writes, in the spirit of `kind export logs`
// (per node: the kubelet's and the runtime's logs and the containers'):
//
//	README.txt errors.txt cluster.json timings.txt status.json devk-version.txt registry.log haproxy.log
//	<node>/kubelet.log containerd.log forward-<port>.log kubelet-config.yaml kubernetes-version.txt
//	<node>/kubeadm-flags.env (a cluster kubeadm bootstraps: the kubelet's flags kubeadm wrote)
//	<node>/manifests/ <node>/containers.txt
//	<node>/containers/<namespace>_<pod>_<container>_<attempt>.log
//	objects/<resource>[.<group>].yaml
//
// Every directory is 0700 and every file 0600: logs and objects say a lot
// about a machine even with the Secrets redacted.
const (
	// requestTimeout bounds each API request of export logs (a list of
	// one resource in all namespaces).
	requestTimeout = 10 * time.Second

	// kubeadmFlagsFile is a kubeadm node's kubeadm-flags.env in the export.
	kubeadmFlagsFile = "kubeadm-flags.env"

	// ErrorsFile lists what could not be collected, one line each.
	ErrorsFile = "errors.txt"
	// ObjectsDir holds the API objects, one file per resource.
	ObjectsDir = "objects"
	// ContainersDir, under a node's directory, holds the container logs.
	ContainersDir = "containers"
	// TarSuffix makes the destination a gzipped tarball.
	TarSuffix = ".tar.gz"
	// Redacted replaces the values of a Secret in the export.
	Redacted = "REDACTED"

	namePrefix = "devk-logs-"
	timeFormat = "20060102-150405"
)

// Options are what `devk export logs` is told.
type Options struct {
	// Options names the cluster (Name, Home) and the progress Reporter.
	cluster.Options
	// Dest is the directory to make (it may exist if it is empty), or
	// with Tar the tarball to write; empty means ./devk-logs-<name>-<time>
	// (with TarSuffix when Tar). A Dest ending in TarSuffix
	// or .tgz is a tarball.
	Dest string
	Tar  bool
	// DevkVersion is the exporting devk's version, for devk-version.txt.
	DevkVersion string
}

// Result is what an export wrote.
type Result struct {
	// Path is the directory or tarball, absolute.
	Path  string `json:"path"`
	Tar   bool   `json:"tar"`
	Files int    `json:"files"`
	Bytes int64  `json:"bytes"`
	// ContainerLogs are the container log files, Objects the API objects
	// in Resources resources.
	ContainerLogs int `json:"containerLogs"`
	Objects       int `json:"objects"`
	Resources     int `json:"resources"`
	// Missing is what could not be collected and why (errors.txt): the
	// export itself still succeeded.
	Missing []string `json:"missing,omitempty"`
}

// Dest is where an export goes, and whether as a tarball: dest as
// given (a tarball if it ends in TarSuffix or .tgz, or tar is
// set), else a new name under the working directory with the cluster's
// name and now.
func Dest(dest string, tar bool, name string, now time.Time) (string, bool) {
	if dest == "" {
		dest = namePrefix + name + "-" + now.Format(timeFormat)
		if tar {
			dest += TarSuffix
		}
	}
	return dest, tar || strings.HasSuffix(dest, TarSuffix) || strings.HasSuffix(dest, ".tgz")
}

// Logs writes what debugging the cluster needs into a directory or
// tarball: every container log the kubelet kept, the kubelet's and
// containerd's logs, the static-pod manifests, the API objects of every
// listable resource (Secrets redacted), and devk's own view (cluster.json,
// the last run's phase times, status). It changes nothing in the
// cluster. What cannot be read (the API server is down, containerd does
// not answer) is listed in Missing and errors.txt, and the rest is
// written anyway; an error means the export itself could not be written.
// Private keys, certificates and kubeconfigs are never exported. It runs
// phases; popts report and may ask for a plan.
func Logs(ctx context.Context, o Options, popts phase.Options) (*Result, error) {
	c, err := cluster.Open(o.Options)
	if err != nil {
		return nil, err
	}
	if !c.Exists() {
		return nil, c.NoCluster()
	}
	if popts.Reporter == nil {
		popts.Reporter = c.Reporter
	}
	return run(ctx, &exporter{c: c, name: c.Config.Name, devkVersion: o.DevkVersion}, o, popts)
}

// Through is a cluster devk reaches only through its kubeconfig (package
// remote): its objects are read with Kubeconfig, each node's files
// fetched, by devk's node agent there, as the tarball Node writes.
type Through struct {
	// Config reaches the cluster's API server (Server, for messages);
	// Name names the cluster (in the default destination and README.txt).
	Config       *rest.Config
	Server, Name string
	// Nodes are the cluster's nodes, by name.
	Nodes []string
	// Fetch gives node's files as Node's gzipped tarball, and what Node
	// could not collect there; closing the reader says whether all of it
	// arrived whole.
	Fetch func(ctx context.Context, node string) (io.ReadCloser, []string, error)
}

// LogsThrough is Logs of a cluster reached through its kubeconfig: the
// API objects, and each node's manifests, container logs and containers
// as its agent collected them (Node). devk's own view (cluster.json,
// phase times, its daemons' logs) is not there to export.
func LogsThrough(ctx context.Context, t Through, o Options, popts phase.Options) (*Result, error) {
	if popts.Reporter == nil {
		popts.Reporter = o.Reporter
	}
	return run(ctx, &exporter{through: &t, name: t.Name, devkVersion: o.DevkVersion}, o, popts)
}

// run writes export e to o's destination by its phases.
func run(ctx context.Context, e *exporter, o Options, popts phase.Options) (*Result, error) {
	dest, tar := Dest(o.Dest, o.Tar, e.name, time.Now())
	dest, err := filepath.Abs(dest)
	if err != nil {
		return nil, err
	}
	e.res, e.root = &Result{Path: dest, Tar: tar}, dest
	popts.Job = "export"
	if popts.DryRun {
		_, err := phase.Run(ctx, phases(tar), e, popts)
		return e.res, err
	}
	if tar {
		if _, err := os.Lstat(dest); err == nil {
			return nil, fmt.Errorf("%s exists: name a new file, or remove it", dest)
		}
		// Staged beside the tarball (same filesystem, no /tmp quota),
		// under the name the tarball's entries start with.
		if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
			return nil, err
		}
		staging, err := os.MkdirTemp(filepath.Dir(dest), "."+filepath.Base(dest)+".tmp-")
		if err != nil {
			return nil, fmt.Errorf("make a staging directory for %s: %w", dest, err)
		}
		defer os.RemoveAll(staging)
		e.root = filepath.Join(staging, tarTopDir(dest))
	}
	if e.dir, err = openExportDir(e.root); err != nil {
		return nil, err
	}
	defer e.dir.Close()
	if _, err := phase.Run(ctx, phases(tar), e, popts); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("export logs of %s interrupted; %s holds what was written: %w", e.name, e.root, err)
		}
		return nil, err
	}
	return e.res, nil
}

// phases are export logs' steps; a tarball's end with the tarball.
func phases(tar bool) []*phase.Phase[*exporter] {
	ps := []*phase.Phase[*exporter]{
		{Name: "logs", Short: "copy devk's view (cluster.json, phase times, status) and each node's logs, manifests, kubelet config and container logs",
			IO: func(e *exporter) ([]string, []string) {
				if e.through != nil {
					return []string{"each node's files, by devk's node agent there"}, []string{e.root}
				}
				return []string{e.c.Files.ConfigFile(), e.c.FirstNode().Files.Dir}, []string{e.root}
			},
			Run: phase.Method((*exporter).runLogs)},
		{Name: "objects", Short: "write every listable resource's objects in all namespaces, Secrets redacted",
			IO: func(e *exporter) ([]string, []string) {
				if e.through != nil {
					return []string{e.through.Server}, []string{filepath.Join(e.root, ObjectsDir)}
				}
				return []string{e.c.Config.APIServerURL()}, []string{filepath.Join(e.root, ObjectsDir)}
			},
			Run: phase.Method((*exporter).runObjects)},
		{Name: "readme", Short: "write README.txt (what is where) and errors.txt (what could not be collected)",
			IO: func(e *exporter) ([]string, []string) {
				return nil, []string{filepath.Join(e.root, "README.txt"), filepath.Join(e.root, ErrorsFile)}
			},
			Run: phase.Method((*exporter).runReadme)},
	}
	if tar {
		ps = append(ps, &phase.Phase[*exporter]{Name: "tarball", Short: "write the export as a gzipped tarball",
			IO:  func(e *exporter) ([]string, []string) { return []string{e.root}, []string{e.res.Path} },
			Run: phase.Method((*exporter).runTarball)})
	}
	return ps
}

// runLogs is the logs phase: devk's view, then every node's.
func (e *exporter) runLogs(ctx context.Context) (phase.Outcome, error) {
	if e.through != nil {
		if e.devkVersion != "" {
			e.write("devk-version.txt", []byte(e.devkVersion+"\n"))
		}
		e.throughNodes(ctx)
		return phase.Changed("%d container logs", e.res.ContainerLogs), e.err
	}
	e.devkView(ctx, e.devkVersion)
	if ns, err := e.c.AllNodes(); err != nil {
		e.miss("nodes", err)
	} else {
		for _, n := range ns {
			e.node(ctx, n)
		}
	}
	return phase.Changed("%d container logs", e.res.ContainerLogs), e.err
}

// runObjects is the objects phase; an API server that answers nothing is
// missed, not an error.
func (e *exporter) runObjects(ctx context.Context) (phase.Outcome, error) {
	if err := e.objects(ctx); err != nil {
		e.miss(ObjectsDir, err)
		return phase.Unchanged("none: %v", err), e.err
	}
	return phase.Changed("%d objects of %d resources", e.res.Objects, e.res.Resources), e.err
}

// runReadme is the readme phase, once everything else was collected.
func (e *exporter) runReadme(context.Context) (phase.Outcome, error) {
	node := "<node>"
	if e.c != nil {
		node = e.c.Config.FirstNode().Name
	}
	e.write("README.txt", []byte(exportReadme(e.name, node, e.through != nil)))
	if len(e.res.Missing) > 0 {
		e.write(ErrorsFile, []byte(strings.Join(e.res.Missing, "\n")+"\n"))
	}
	return phase.Changed("%d files, %d missing", e.res.Files, len(e.res.Missing)), e.err
}

// runTarball is the tarball phase: the staging directory as the
// destination's gzipped tarball.
func (e *exporter) runTarball(context.Context) (phase.Outcome, error) {
	if err := writeTarball(e.res.Path, e.root); err != nil {
		return phase.Done, err
	}
	fi, err := os.Stat(e.res.Path)
	if err != nil {
		return phase.Done, err
	}
	return phase.Changed("%d files, %d bytes compressed", e.res.Files, fi.Size()), nil
}

// openExportDir makes dir (0700) and opens it as the root every file
// of the export is written beneath. dir may exist if it is an empty
// directory (not a symlink to one) that belongs to devk's user and that
// no other user may write to: the destination's name is predictable, and
// another user of the machine could make it first and plant symlinks in
// it once the export starts; devk, as root, would then write the pods'
// log lines wherever they point. The checks are made on the directory
// devk holds open (the same inode it looked at), and every write goes
// through the os.Root, so no symlink inside leads out.
func openExportDir(dir string) (*os.Root, error) {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, err
	}
	made := true
	if err := os.Mkdir(dir, 0o700); err != nil {
		if !errors.Is(err, fs.ErrExist) {
			return nil, err
		}
		made = false
	}
	looked, err := os.Lstat(dir)
	if err != nil {
		return nil, err
	}
	if !looked.IsDir() {
		return nil, fmt.Errorf("%s exists and is not a directory (a symlink is not taken either): name a new directory", dir)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	if err := exportDirSafe(root, dir, looked, made); err != nil {
		root.Close()
		return nil, err
	}
	return root, nil
}

// exportDirSafe checks the directory root holds: the one looked at
// (looked, by Lstat), devk's user's, written by no one else, and empty
// unless devk just made it.
func exportDirSafe(root *os.Root, dir string, looked fs.FileInfo, made bool) error {
	held, err := root.Stat(".")
	if err != nil {
		return err
	}
	if !os.SameFile(looked, held) {
		return fmt.Errorf("%s was replaced while devk opened it: name a new directory that only you can write to", dir)
	}
	st, ok := held.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%s: no owner to check", dir)
	}
	if uid := os.Geteuid(); int(st.Uid) != uid {
		return fmt.Errorf("%s belongs to uid %d, not to devk's user (uid %d), who could plant links in it for devk to write through: name a new directory, or remove this one (rmdir %s) and export again", dir, st.Uid, uid, dir)
	}
	if held.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%s may be written by other users (mode %v), who could plant links in it for devk to write through: name a new directory, or `chmod go-w %s`", dir, held.Mode().Perm(), dir)
	}
	if made {
		return nil
	}
	f, err := root.Open(".")
	if err != nil {
		return err
	}
	defer f.Close()
	if names, _ := f.Readdirnames(1); len(names) > 0 {
		return fmt.Errorf("%s is not empty: name a new directory, or none for ./%s<cluster>-<time>", dir, namePrefix)
	}
	return nil
}

// tarTopDir is the directory a tarball's entries are under: its name
// without the suffix, as kind's and most tarballs do.
func tarTopDir(tarball string) string {
	base := filepath.Base(tarball)
	for _, s := range []string{TarSuffix, ".tgz"} {
		base = strings.TrimSuffix(base, s)
	}
	return base
}

// exporter writes one export beneath dir: export logs' job, which its
// phases share.
type exporter struct {
	// c is the devk cluster exported, or through the one reached through
	// its kubeconfig; name is its name.
	c       *cluster.Cluster
	through *Through
	name    string
	dir     *os.Root
	res     *Result
	// root is dir's path: the destination, or for a tarball the staging
	// directory the tarball is made from.
	root        string
	devkVersion string
	// err is the first failure to write the export itself; once set,
	// nothing more is written.
	err error
}

// miss records what could not be collected.
func (e *exporter) miss(what string, err error) {
	e.res.Missing = append(e.res.Missing, what+": "+err.Error())
}

// create makes the file rel (0600) and its directories (0700) beneath
// the export's root, which nothing in rel leads out of.
func (e *exporter) create(rel string) (*os.File, error) {
	if err := e.dir.MkdirAll(filepath.Dir(rel), 0o700); err != nil {
		return nil, err
	}
	return e.dir.OpenFile(rel, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
}

// fill writes rel from fill, unless the export already failed.
func (e *exporter) fill(rel string, fill func(io.Writer) error) error {
	if e.err != nil {
		return nil
	}
	f, err := e.create(rel)
	if err != nil {
		e.err = fmt.Errorf("write the export: %w", err)
		return nil
	}
	cw := &countingWriter{w: f}
	ferr := fill(cw)
	if cerr := f.Close(); cw.err == nil {
		cw.err = cerr
	}
	if cw.err != nil {
		e.err = fmt.Errorf("write the export: %s: %w", f.Name(), cw.err)
		return nil
	}
	e.res.Files++
	e.res.Bytes += cw.n
	return ferr
}

// write writes data to rel.
func (e *exporter) write(rel string, data []byte) {
	_ = e.fill(rel, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// copy copies the file src to rel; a src that cannot be read is missed.
func (e *exporter) copy(rel, src string) bool {
	return e.copyFrom(rel, src, func(src string) (io.ReadCloser, error) { return os.Open(src) })
}

// copyLog copies a supervised process's log to rel: its rotated
// generations and the log, oldest line first, as one file.
func (e *exporter) copyLog(rel, src string) bool {
	return e.copyFrom(rel, src, supervise.OpenLog)
}

// copyFrom copies what open gives for src to rel; a src that cannot be
// opened or read is missed.
func (e *exporter) copyFrom(rel, src string, open func(string) (io.ReadCloser, error)) bool {
	in, err := open(src)
	if err != nil {
		e.miss(rel, err)
		return false
	}
	defer in.Close()
	if err := e.fill(rel, func(w io.Writer) error {
		_, err := io.Copy(w, in)
		return err
	}); err != nil {
		e.miss(rel, fmt.Errorf("read %s: %w", src, err))
		return false
	}
	return e.err == nil
}

// countingWriter counts what reaches w and keeps w's own error apart
// from the reader's in an io.Copy.
type countingWriter struct {
	w   io.Writer
	n   int64
	err error
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	if err != nil && c.err == nil {
		c.err = err
	}
	return n, err
}

// devkView is devk's own view: cluster.json as on disk, the last run's
// phase times, status and versions.
func (e *exporter) devkView(ctx context.Context, devkVersion string) {
	c := e.c
	e.copy("cluster.json", c.Files.ConfigFile())
	e.write("timings.txt", []byte(formatTimings(c.Config)))
	if devkVersion != "" {
		e.write("devk-version.txt", []byte(devkVersion+"\n"))
	}
	if err := nodeReachable(c); err != nil {
		e.miss("status.json", err)
	} else if st, err := status.Get(ctx, c.Options); err != nil {
		e.miss("status.json", err)
	} else if data, err := json.MarshalIndent(st, "", "  "); err == nil {
		e.write("status.json", append(data, '\n'))
	}
	if c.Config.OwnRegistry {
		e.copyLog("registry.log", c.RegistryPaths().LogFile(registry.ProcessName))
	}
	if c.Config.HA() {
		e.copyLog("haproxy.log", c.LoadBalancer().Procs.LogFile(loadbalancer.ProcessName))
	}
}

// formatTimings is cluster.json's lastRun, readable.
func formatTimings(cfg layout.Config) string {
	if len(cfg.LastRun) == 0 {
		return "no phase times recorded (cluster.json has no lastRun)\n"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "phase times of the last `devk up` or `devk down` of cluster %s (cluster.json lastRun):\n\n", cfg.Name)
	status.WriteTimings(&b, cfg.LastRun, "")
	return b.String()
}

// node exports node n's logs, kubelet config, manifests, container
// logs and the runtime's container list under <node>/.
func (e *exporter) node(ctx context.Context, n cluster.Node) {
	c := e.c
	dir := n.Name()
	logs, _ := filepath.Glob(filepath.Join(n.Files.Logs(), "*.log"))
	wants := []string{"kubelet", "containerd"}
	if n.Name() == c.Config.FirstNode().Name && c.Config.Spec.FakeNodes.Total() > 0 {
		wants = append(wants, kwok.ProcessName) // kwok runs on node 0
	}
	for _, want := range wants {
		if want == "containerd" && !c.Config.OwnRuntime {
			continue
		}
		if !slices.Contains(logs, n.Files.LogFile(want)) {
			e.miss(filepath.Join(dir, want+".log"), fmt.Errorf("%s has no log at %s", want, n.Files.LogFile(want)))
		}
	}
	for _, l := range logs {
		e.copyLog(filepath.Join(dir, filepath.Base(l)), l)
	}
	if c.Config.KubeVersion != "" {
		e.write(filepath.Join(dir, "kubernetes-version.txt"), []byte(c.Config.KubeVersion+"\n"))
	}
	e.copy(filepath.Join(dir, "kubelet-config.yaml"), n.KubeletConfigFile())
	if c.Config.Spec.Kubeadm() {
		e.copy(filepath.Join(dir, kubeadmFlagsFile), n.KubeadmFlagsFile())
	}
	manifests := n.Files.Manifests()
	if !n.Net.IsControlPlane() {
		if _, err := os.Stat(manifests); err != nil {
			manifests = "" // a worker may have none
		}
	}
	e.nodeFiles(ctx, dir, NodeFiles{ManifestsDir: manifests, PodLogsDir: n.Files.PodLogs(), CRISocket: c.Config.NodeCRISocket(n.Net, n.Files)})
}

// NodeFiles are where a node keeps what export logs reads there: its
// kubelet's static pod manifests (none: a node without), the pods' log
// files and the runtime's socket.
type NodeFiles struct {
	ManifestsDir string `json:"manifestsDir,omitempty"`
	PodLogsDir   string `json:"podLogsDir"`
	CRISocket    string `json:"criSocket"`
}

// nodeFiles exports f's manifests, container logs and the runtime's
// container list under dir.
func (e *exporter) nodeFiles(ctx context.Context, dir string, f NodeFiles) {
	if f.ManifestsDir != "" {
		manifests, err := os.ReadDir(f.ManifestsDir)
		if err != nil {
			e.miss(filepath.Join(dir, "manifests"), err)
		}
		for _, m := range manifests {
			if m.Type().IsRegular() {
				e.copy(filepath.Join(dir, "manifests", m.Name()), filepath.Join(f.ManifestsDir, m.Name()))
			}
		}
	}
	e.containerLogs(dir, f.PodLogsDir)
	e.containers(ctx, filepath.Join(dir, "containers.txt"), f.CRISocket)
}

// NodeResult is what Node collected: the tarball's size and sha256, how
// many container logs, and what it could not collect.
type NodeResult struct {
	Files         int      `json:"files"`
	ContainerLogs int      `json:"containerLogs"`
	Size          int64    `json:"size"`
	SHA256        string   `json:"sha256"`
	Missing       []string `json:"missing,omitempty"`
}

// Node is export logs' part of one node, run on the node (by devk's node
// agent): f's manifests, container logs and containers, written under the
// new directory dir and then as the gzipped tarball tarball, whose
// entries are under dir's base name.
func Node(ctx context.Context, dir, tarball string, f NodeFiles) (*NodeResult, error) {
	root, err := openExportDir(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	e := &exporter{dir: root, root: dir, res: &Result{}}
	e.nodeFiles(ctx, ".", f)
	if e.err != nil {
		return nil, e.err
	}
	if err := writeTarball(tarball, dir); err != nil {
		return nil, err
	}
	data, err := os.Open(tarball)
	if err != nil {
		return nil, err
	}
	defer data.Close()
	h := sha256.New()
	n, err := io.Copy(h, data)
	if err != nil {
		return nil, err
	}
	return &NodeResult{Files: e.res.Files, ContainerLogs: e.res.ContainerLogs, Size: n, SHA256: hex.EncodeToString(h.Sum(nil)), Missing: e.res.Missing}, nil
}

// throughNodes writes each node's files, fetched as Node's tarball, under
// <node>/.
func (e *exporter) throughNodes(ctx context.Context) {
	for _, node := range e.through.Nodes {
		rc, missing, err := e.through.Fetch(ctx, node)
		for _, m := range missing {
			e.res.Missing = append(e.res.Missing, filepath.Join(node, m))
		}
		if err != nil {
			e.miss(node, err)
			continue
		}
		err = e.untar(node, rc)
		if cerr := rc.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			e.miss(node, err)
		}
		if e.err != nil {
			return
		}
	}
}

// untar writes the regular files of gzipped tarball r (Node's: its
// entries under one top directory) under dir, beneath the export's root
// (a name that would lead out is refused by it); container logs are
// counted.
func (e *exporter) untar(dir string, r io.Reader) error {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return err
	}
	tr := tar.NewReader(zr)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		_, name, ok := strings.Cut(hdr.Name, "/")
		if hdr.Typeflag != tar.TypeReg || !ok || name == "" {
			continue
		}
		rel := filepath.Join(dir, filepath.FromSlash(name))
		if !filepath.IsLocal(filepath.FromSlash(name)) {
			return fmt.Errorf("the node's tarball names %q, outside its directory", hdr.Name)
		}
		if err := e.fill(rel, func(w io.Writer) error {
			_, err := io.Copy(w, tr)
			return err
		}); err != nil {
			return err
		}
		if strings.HasPrefix(name, ContainersDir+"/") {
			e.res.ContainerLogs++
		}
		if e.err != nil {
			return nil
		}
	}
}

// containerLogs copies the kubelet's pod logs dir
// (<namespace>_<pod>_<uid>/<container>/<attempt>.log, rotated ones beside
// with a suffix) flat into containers/<namespace>_<pod>_<container>_<attempt>.log…
// (<namespace>_<pod>_<uid>_<container>_<attempt>.log for a second
// instance of the same pod).
// It reads the files, not the runtime, so it works with containerd down.
func (e *exporter) containerLogs(nodeDir, root string) {
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			e.miss(filepath.Join(nodeDir, ContainersDir), err)
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		inRoot, _ := filepath.Rel(root, path)
		parts := strings.Split(inRoot, string(filepath.Separator))
		if len(parts) != 3 {
			return nil
		}
		pod := strings.SplitN(parts[0], "_", 3) // namespace, pod, uid: names have no '_'
		if len(pod) != 3 {
			return nil
		}
		name := pod[0] + "_" + pod[1] + "_" + parts[1] + "_" + parts[2]
		rel := filepath.Join(nodeDir, ContainersDir, name)
		if _, err := e.dir.Lstat(rel); err == nil {
			// The same pod under another UID (a static pod whose
			// manifest changed, its old instance not yet cleaned up).
			rel = filepath.Join(nodeDir, ContainersDir, pod[0]+"_"+pod[1]+"_"+pod[2]+"_"+parts[1]+"_"+parts[2])
		}
		if e.copy(rel, path) {
			e.res.ContainerLogs++
		}
		return nil
	})
	if err != nil {
		e.miss(filepath.Join(nodeDir, ContainersDir), err)
	}
}

// containers is the runtime's list of the node's containers, as
// `crictl ps -a` shows it, with each exited container's exit code.
func (e *exporter) containers(ctx context.Context, rel, socket string) {
	if socket == "" {
		e.miss(rel, errors.New("cluster.json names no CRI socket"))
		return
	}
	rt, err := cri.Dial(socket)
	if err != nil {
		e.miss(rel, err)
		return
	}
	defer rt.Close()
	if _, err := rt.Version(ctx); err != nil {
		e.miss(rel, err)
		return
	}
	cts, err := rt.Containers(ctx, cri.Filter{})
	if err != nil {
		e.miss(rel, err)
		return
	}
	_ = e.fill(rel, func(w io.Writer) error {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "CONTAINER\tNAMESPACE\tPOD\tNAME\tATTEMPT\tSTATE\tEXIT\tCREATED\tIMAGE")
		for _, ct := range cts {
			exit := "-"
			if !ct.Running() {
				if s, err := rt.ContainerStatus(ctx, ct.ID); err == nil {
					exit = fmt.Sprint(s.ExitCode)
					if s.Reason != "" {
						exit += " " + s.Reason
					}
				}
			}
			id := ct.ID
			if len(id) > 13 {
				id = id[:13]
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", id, ct.PodNamespace, ct.PodName, ct.Name, ct.Attempt,
				ct.StateName(), exit, ct.CreatedAt.UTC().Format(time.RFC3339), ct.ImageRef)
		}
		return tw.Flush()
	})
}

// nodeReachable refuses to talk to the node when its network is gone:
// without the cluster's bridge, the node's address would be routed out
// of the machine.
func nodeReachable(c *cluster.Cluster) error {
	if _, err := net.InterfaceByName(c.Config.Network.HostBridge); err != nil {
		return fmt.Errorf("the cluster's bridge %s is gone, so its node %s is not reachable: `devk up` makes it again", c.Config.Network.HostBridge, c.Config.FirstNode().IP)
	}
	return nil
}

// objects writes every listable resource's objects in all namespaces, as
// `kubectl get -A -o yaml` of each api-resource would: a v1 List per
// resource, managedFields dropped (as kubectl does), Secrets redacted.
// Resources with no objects get no file. An error means none could be
// read (the API server does not answer); a resource that fails alone is
// missed.
func (e *exporter) objects(ctx context.Context) error {
	opts := []kube.Option{kube.WithTimeout(requestTimeout), kube.WithoutWarnings()}
	var cs *kubernetes.Clientset
	var dyn *dynamic.DynamicClient
	var err error
	var server string
	if e.through != nil {
		server = "the API server at " + e.through.Server
		if cs, err = kube.ClientForConfig(e.through.Config, opts...); err == nil {
			dyn, err = kube.DynamicForConfig(e.through.Config, opts...)
		}
	} else {
		if err := nodeReachable(e.c); err != nil {
			return err
		}
		kubeconfig := e.c.FirstNode().Files.Kubeconfig("super-admin")
		server = "the API server at " + e.c.Config.APIServerURL()
		if cs, err = kube.Client(kubeconfig, opts...); err == nil {
			dyn, err = kube.Dynamic(kubeconfig, opts...)
		}
	}
	if err != nil {
		return err
	}
	lists, err := cs.Discovery().ServerPreferredResources()
	if len(lists) == 0 {
		if err == nil {
			err = errors.New("it lists no resources")
		}
		return fmt.Errorf("%s: %w (is it running? `devk status` says)", server, err)
	}
	if err != nil {
		e.miss(ObjectsDir+" of some API groups", err)
	}
	for _, list := range lists {
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil {
			continue
		}
		for _, r := range list.APIResources {
			if strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "list") {
				continue
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			gvr := gv.WithResource(r.Name)
			rel := filepath.Join(ObjectsDir, objectsFile(gvr))
			ul, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{})
			if err != nil {
				e.miss(rel, err)
				continue
			}
			if len(ul.Items) == 0 {
				continue
			}
			items := make([]any, 0, len(ul.Items))
			for i := range ul.Items {
				items = append(items, Object(gvr, &ul.Items[i]).Object)
			}
			data, err := yaml.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
			if err != nil {
				e.miss(rel, err)
				continue
			}
			e.write(rel, data)
			e.res.Resources++
			e.res.Objects += len(items)
		}
	}
	return nil
}

// objectsFile is a resource's file: pods.yaml, deployments.apps.yaml.
func objectsFile(gvr schema.GroupVersionResource) string {
	if gvr.Group == "" {
		return gvr.Resource + ".yaml"
	}
	return gvr.Resource + "." + gvr.Group + ".yaml"
}

// Object is obj as the export shows it: without managedFields and,
// for a Secret, with every value of data and stringData and the
// last-applied annotation (which holds them too) replaced by Redacted.
// obj is changed in place and returned.
func Object(gvr schema.GroupVersionResource, obj *unstructured.Unstructured) *unstructured.Unstructured {
	unstructured.RemoveNestedField(obj.Object, "metadata", "managedFields")
	if gvr.Group != "" || gvr.Resource != "secrets" {
		return obj
	}
	for _, field := range []string{"data", "stringData"} {
		m, ok := obj.Object[field].(map[string]any)
		if !ok {
			continue
		}
		for k := range m {
			m[k] = Redacted
		}
	}
	if ann := obj.GetAnnotations(); ann != nil {
		if _, ok := ann[lastAppliedAnnotation]; ok {
			ann[lastAppliedAnnotation] = Redacted
			obj.SetAnnotations(ann)
		}
	}
	return obj
}

// lastAppliedAnnotation is kubectl apply's annotation: the applied object,
// a Secret's data included.
const lastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

// writeTarball writes dir (its base name the entries' top directory) as
// a gzipped tarball at path, 0600, atomically.
func writeTarball(path, dir string) error {
	return atomicfile.WriteFrom(path, func(w io.Writer) error {
		zw := gzip.NewWriter(w)
		tw := tar.NewWriter(zw)
		base := filepath.Dir(dir)
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			hdr, err := tar.FileInfoHeader(fi, "")
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(base, p)
			hdr.Name = filepath.ToSlash(rel)
			if d.IsDir() {
				hdr.Name += "/"
			}
			hdr.Uname, hdr.Gname = "", ""
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			if !d.Type().IsRegular() {
				return nil
			}
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = io.CopyN(tw, f, hdr.Size)
			return err
		})
		if err != nil {
			return err
		}
		if err := tw.Close(); err != nil {
			return err
		}
		return zw.Close()
	}, 0o600, "")
}

// exportReadme says what an export holds and what it leaves out.
func exportReadme(name, node string, through bool) string {
	var b strings.Builder
	line := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	if through {
		line("devk export logs of cluster %s, through the cluster (its kubeconfig alone:\ndevk's node agent collected each node's files there)\n", name)
	} else {
		line("devk export logs of cluster %s\n", name)
		line("cluster.json          the cluster's devk config as on disk")
		line("timings.txt           the phase times of the last devk up or down (cluster.json lastRun)")
		line("status.json           what devk status -o json showed at export time")
	}
	line("devk-version.txt      the devk that exported this")
	if !through {
		line("registry.log          the embedded registry's log (shared by the clusters)")
		line("haproxy.log           the load balancer's log (a cluster with several control planes)")
	}
	line("errors.txt            what could not be collected, and why (only when something could not)")
	if !through {
		line("%s/kubelet.log     the kubelet's output", node)
		line("%s/containerd.log  the cluster's containerd's output", node)
		line("%s/forward-*.log   the registry forwarder's output", node)
		line("                      (each log holds its rotated generations too, oldest line first)")
		line("%s/kubelet-config.yaml, kubernetes-version.txt", node)
		line("                      (and kubeadm-flags.env on a cluster kubeadm bootstraps)")
	}
	line("%s/manifests/      the static-pod manifests (and a swap's backups)", node)
	line("%s/containers/     every container log the kubelet kept: <namespace>_<pod>_<container>_<attempt>.log", node)
	line("%s/containers.txt  the runtime's containers, as crictl ps -a", node)
	line("objects/              every listable resource's objects in all namespaces, as kubectl get -A -o yaml:")
	line("                      one List per resource (<resource>[.<group>].yaml), managedFields dropped\n")
	line("Secrets are redacted: every value of data and stringData, and the\n%s annotation, read %s; the keys stay.", lastAppliedAnnotation, Redacted)
	if through {
		line("Not exported: private keys, certificates and kubeconfigs, etcd's data, and the\nkubelet's and the runtime's own logs (on a node devk did not make they are the\nhost's, in its journal).")
	} else {
		line("Not exported: private keys, certificates and kubeconfigs (pki/, *.conf) and etcd's data.")
	}
	return b.String()
}
