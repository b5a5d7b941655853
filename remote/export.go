package remote

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/devk/devk/agent"
	"github.com/devk/devk/cluster/export"
)

// ExportNeeds are what `devk export logs` through the cluster takes
// besides the agents' pods: every node's kubelet's files (/configz), and
// exec into its agent to read the tarball. Listing every resource is
// the export's own, missed one by one where refused.
var ExportNeeds = []Need{
	{Verb: "list", Resource: "nodes"},
	{Verb: "get", Resource: "nodes", Subresource: "proxy"},
	{Verb: "create", Resource: "pods", Subresource: "exec", Namespace: Namespace},
}

// Export is `devk export logs` of the session's cluster (t: its
// kubeconfig's target): the objects through the API, each node's files
// by its agent (export.Node), read by exec as a tarball whose sha256 the
// agent said.
func (s *Session) Export(ctx context.Context, t *Target) (export.Through, error) {
	if s.cfg == nil {
		return export.Through{}, fmt.Errorf("export through the cluster needs the session's connection (Open)")
	}
	nodes, err := s.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return export.Through{}, fmt.Errorf("list the nodes: %w", err)
	}
	th := export.Through{Config: s.cfg, Server: t.Server, Name: t.Context, Fetch: s.fetchNode}
	for _, n := range nodes.Items {
		th.Nodes = append(th.Nodes, n.Name)
	}
	slices.Sort(th.Nodes)
	return th, nil
}

// fetchNode runs node's export agent and returns a reader of its tarball,
// read by exec; the reader's Close checks the tarball's size and sha256
// against what the agent said and deletes the agent's pod.
func (s *Session) fetchNode(ctx context.Context, node string) (io.ReadCloser, []string, error) {
	kf, err := s.kubelet(ctx, node)
	if err != nil {
		return nil, nil, err
	}
	t := agent.Task{Kind: agent.KindExport, Export: &export.NodeFiles{ManifestsDir: kf.StaticPodPath, PodLogsDir: kf.PodLogsDir, CRISocket: kf.CRISocket}}
	pod, remove, err := s.start(ctx, node, t)
	if err != nil {
		return nil, nil, err
	}
	step, start := node+"/collect", time.Now()
	s.rep.Start(step)
	hctx, stop := context.WithCancel(ctx)
	go s.heartbeat(hctx, s.stampPod(pod.Name))
	// Done with the pod: stop stamping it, delete it.
	done := func() { stop(); remove() }
	last, err := s.followPod(ctx, node, pod.Name, io.Discard)
	var r export.NodeResult
	if err == nil && last.Error != "" {
		err = fmt.Errorf("node %s: %s", node, last.Error)
	}
	if err == nil {
		err = json.Unmarshal(last.Result, &r)
	}
	if err != nil {
		done()
		s.rep.Fail(step, time.Since(start), err)
		return nil, nil, err
	}
	s.rep.Done(step, time.Since(start), fmt.Sprintf("%d files, %d container logs, %d bytes compressed", r.Files, r.ContainerLogs, r.Size))
	pr, pw := io.Pipe()
	sum := sha256.New()
	go func() {
		pw.CloseWithError(s.cat(ctx, pod.Name, io.MultiWriter(pw, sum)))
	}()
	return &fetched{Reader: pr, pr: pr, sum: sum, want: r, remove: done, node: node}, r.Missing, nil
}

// fetched is a node's tarball as it is read from its agent.
type fetched struct {
	io.Reader
	pr     *io.PipeReader
	sum    hash.Hash
	n      int64
	want   export.NodeResult
	remove func()
	node   string
}

func (f *fetched) Read(p []byte) (int, error) {
	n, err := f.Reader.Read(p)
	f.n += int64(n)
	return n, err
}

// Close reads what is left, checks the tarball whole and deletes the pod.
func (f *fetched) Close() error {
	_, err := io.Copy(io.Discard, f)
	f.pr.Close()
	f.remove()
	switch got := hex.EncodeToString(f.sum.Sum(nil)); {
	case err != nil:
		return fmt.Errorf("node %s: read its agent's tarball: %w", f.node, err)
	case f.n != f.want.Size || got != f.want.SHA256:
		return fmt.Errorf("node %s: its agent's tarball arrived as %d bytes, sha256 %s; the agent wrote %d bytes, sha256 %s", f.node, f.n, got, f.want.Size, f.want.SHA256)
	}
	return nil
}

// cat writes the export tarball of agent pod name to w, by exec of `devk
// agent cat` in it.
func (s *Session) cat(ctx context.Context, name string, w io.Writer) error {
	req := s.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(Namespace).Name(name).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: "agent", Command: []string{agent.BinaryPath, "agent", "cat", agent.ExportTarball}, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	cfg := rest.CopyConfig(s.cfg)
	cfg.Timeout = 0 // a stream, bounded by ctx and the pod's deadline
	exec, err := remotecommand.NewSPDYExecutor(cfg, "POST", req.URL())
	if err != nil {
		return err
	}
	var stderr bytes.Buffer
	if err := exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: w, Stderr: &stderr}); err != nil {
		return fmt.Errorf("exec devk agent cat in pod %s/%s: %w %s", Namespace, name, err, strings.TrimSpace(stderr.String()))
	}
	return nil
}
