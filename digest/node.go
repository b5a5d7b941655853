package digest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/devk/devk/build"
	"github.com/devk/devk/internal/addon"
	"github.com/devk/devk/internal/cri"
	"github.com/devk/devk/internal/kube"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/staticpod"
	"github.com/devk/devk/source"
)

// Of returns the sha256:… part of an image reference or image ID
// (repo@sha256:…, docker-pullable://repo@sha256:…, sha256:…); empty when
// the reference names no digest (a tag).
func Of(ref string) string {
	ref = strings.TrimPrefix(ref, "docker-pullable://")
	if i := strings.LastIndex(ref, "@"); i >= 0 {
		return ref[i+1:]
	}
	if strings.HasPrefix(ref, "sha256:") {
		return ref
	}
	return ""
}

// TagOf is the tag an image reference names (repo:tag, repo:tag@sha256:…),
// "" when it names none.
func TagOf(ref string) string {
	if i := strings.LastIndex(ref, "@"); i >= 0 {
		ref = ref[:i]
	}
	t, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		return ""
	}
	return t.TagStr()
}

// TaggedLike is image (repo@sha256:…) written the way current is: when
// current names a tag (kubeadm's manifests do, and kubeadm reads the
// component's version from it), repo:tag@sha256:… with tag (else
// current's own), so the runtime still pulls by digest; otherwise image
// as it is.
func TaggedLike(current, image, tag string) string {
	d := Of(image)
	if TagOf(current) == "" || d == "" {
		return image
	}
	if tag == "" {
		tag = TagOf(current)
	}
	repo := image[:strings.LastIndex(image, "@")]
	if TagOf(repo) != "" {
		repo = repo[:strings.LastIndex(repo, ":")]
	}
	return repo + ":" + tag + "@" + d
}

// ShortRef is an image reference by digest cut short for messages:
// repo@sha256: and the digest's first 12 hex digits.
func ShortRef(ref string) string {
	if i := strings.LastIndex(ref, "@sha256:"); i >= 0 && len(ref) > i+20 {
		return ref[:i+20]
	}
	return ref
}

// ShortImage is an image reference by digest shorter still, for tables:
// the repository's last element @ the digest's first 12 hex digits.
func ShortImage(ref string) string {
	if i := strings.Index(ref, "@sha256:"); i >= 0 && len(ref) >= i+8+12 {
		return ref[strings.LastIndex(ref[:i], "/")+1:i] + "@" + ref[i+8:i+8+12]
	}
	return ref
}

// Runtime is what digest reads from a node's container runtime;
// internal/cri's Client is the real one.
type Runtime interface {
	Containers(ctx context.Context, f cri.Filter) ([]cri.Container, error)
	ContainerStatus(ctx context.Context, id string) (*cri.Status, error)
	Sandboxes(ctx context.Context, namespace string) ([]cri.Sandbox, error)
}

var _ Runtime = (*cri.Client)(nil)

// StaticPod is one static pod of one node.
type StaticPod struct {
	// Name is the manifest's pod name (kube-apiserver); Container the
	// container to look at (the same name for the control plane).
	Name, Container string
	// NodeName is the name the node's kubelet registered under.
	NodeName string
}

// FullName is the pod's name on its node: the kubelet names a static pod
// <name>-<node>, in the runtime and in the API server's mirror pod alike.
// Matching by the prefix <name>- instead would take another node's
// mirror pod when several control-plane nodes exist.
func (p StaticPod) FullName() string { return kube.MirrorPodName(p.Name, p.NodeName) }

// RunningContainer is the newest running container of the static pod on
// the node's runtime, with its status; nil when none runs.
func RunningContainer(ctx context.Context, rt Runtime, p StaticPod) (*cri.Status, error) {
	return RunningPodContainer(ctx, rt, metav1.NamespaceSystem, p.FullName(), p.Container)
}

// MirrorPod is the static pod's mirror pod, got by its exact name; nil
// when the API server has none.
func MirrorPod(ctx context.Context, cs kubernetes.Interface, p StaticPod) (*corev1.Pod, error) {
	mp, err := cs.CoreV1().Pods(metav1.NamespaceSystem).Get(ctx, p.FullName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get mirror pod %s: %w", p.FullName(), err)
	}
	if _, mirror := mp.Annotations[corev1.MirrorPodAnnotationKey]; !mirror {
		return nil, nil // a pod of that name, but not the kubelet's mirror
	}
	return mp, nil
}

// MirrorImageID is the imageID the mirror pod reports for its running
// container; empty when that container does not run.
func MirrorImageID(mp *corev1.Pod, container string) string {
	for _, cs := range mp.Status.ContainerStatuses {
		if cs.Name == container && cs.State.Running != nil {
			return cs.ImageID
		}
	}
	return ""
}

// ConfigHashAnnotation is the kubelet's hash of a static pod's manifest,
// on the mirror pod; the static pod's UID is that hash.
const ConfigHashAnnotation = "kubernetes.io/config.hash"

// NodeName is the name the kubelet of the node whose runtime is rt
// registered under. The kubelet names a static pod's sandbox
// <pod>-<node>, so the newest static-pod sandbox of one of pods gives it
// (the runtime is the node's own; the API server, which holds every
// node's mirror pods, cannot tell). When none of them has a sandbox it is
// the host name, lowercased, as the kubelet and kubeadm default it.
func NodeName(ctx context.Context, rt Runtime, pods []string) string {
	if sbs, err := rt.Sandboxes(ctx, metav1.NamespaceSystem); err == nil {
		for _, sb := range sbs {
			if !sb.Static {
				continue
			}
			for _, p := range pods {
				if node, ok := strings.CutPrefix(sb.PodName, p+"-"); ok && node != "" {
					return node
				}
			}
		}
	}
	host, _ := os.Hostname()
	return strings.ToLower(strings.TrimSpace(host))
}

// StaticPodNames are the pod names of the catalog's static pods.
func StaticPodNames() []string {
	var out []string
	for _, c := range build.Catalog {
		if c.StaticPod {
			out = append(out, c.Binary)
		}
	}
	return out
}

// PodView is what one look at a node shows of a static pod.
type PodView struct {
	// ManifestImage is what the manifest on disk names.
	ManifestImage string
	// ImageRef is the running container's CRI imageRef; PodUID is its
	// pod's UID (for a static pod, its config hash).
	ImageRef, PodUID string
	// MirrorImageID and ConfigHash are the mirror pod's report.
	MirrorImageID, ConfigHash string
}

// Check is one comparison and what it found.
type Check struct {
	Name string `json:"check"`
	Want string `json:"want"`
	Got  string `json:"got"`
	OK   bool   `json:"ok"`
}

// The checks PodChecks makes.
const (
	CheckManifest   = "manifest image"
	CheckCRI        = "CRI imageRef"
	CheckMirror     = "mirror pod imageID"
	CheckConfigHash = "mirror pod config.hash"
)

// Mirror says the check is about the mirror pod: the kubelet's (possibly
// lagging) report of what runs, not what the node runs.
func (c Check) Mirror() bool { return c.Name == CheckMirror || c.Name == CheckConfigHash }

// PodChecks compares every view of a static pod with the digest want:
// the manifest, the running container, and the mirror pod, whose config
// hash must be the running pod's UID (else it reports an older pod).
func PodChecks(want string, v PodView) []Check {
	eq := func(name, got string) Check {
		return Check{Name: name, Want: want, Got: Of(got), OK: Of(got) == want}
	}
	return []Check{
		eq(CheckManifest, v.ManifestImage),
		eq(CheckCRI, v.ImageRef),
		eq(CheckMirror, v.MirrorImageID),
		{Name: CheckConfigHash, Want: v.PodUID, Got: v.ConfigHash, OK: v.PodUID != "" && v.ConfigHash == v.PodUID},
	}
}

// notStaticPod is the note node sources give for kubectl and friends.
func notStaticPod(t Target) (Observation, bool) {
	if t.Component.StaticPod {
		return Observation{}, false
	}
	return Observation{Note: t.Component.Name + " is not a static pod", NotApplicable: true}, true
}

// Manifest is the image a static pod's manifest names, in the kubelet's
// manifests dir. One it names by tag alone (kubeadm's) is, with Tags, the
// digest the node's runtime has for that tag: what the kubelet started
// the pod from, unless the tag has moved since.
type Manifest struct {
	Dir  string
	Tags TagDigests
}

// TagDigests gives the digest a runtime has for an image named by tag
// ("" when it has none): cri.Client.ImageDigest.
type TagDigests interface {
	ImageDigest(ctx context.Context, ref string) (string, error)
}

var _ TagDigests = (*cri.Client)(nil)

func (Manifest) Name() string { return "manifest" }

func (s Manifest) Observe(ctx context.Context, t Target) (Observation, error) {
	if ob, skip := notStaticPod(t); skip {
		return ob, nil
	}
	path := filepath.Join(s.Dir, t.Component.Binary+".yaml")
	img, err := staticpod.Image(path, t.Component.Binary)
	if errors.Is(err, fs.ErrNotExist) {
		return Observation{Ref: path, Note: "no manifest: is the cluster up?"}, nil
	}
	if errors.Is(err, staticpod.ErrNoContainer) {
		return Observation{Ref: path, Note: "no container " + t.Component.Binary}, nil
	}
	if err != nil {
		return Observation{}, err
	}
	ob := Observation{Ref: path, Digest: Of(img)}
	if ob.Digest != "" {
		return ob, nil
	}
	ob.Note = "names " + img + " by tag, not by digest"
	if s.Tags != nil {
		d, err := s.Tags.ImageDigest(ctx, img)
		if err != nil {
			return Observation{}, err
		}
		if d != "" {
			ob.Digest, ob.Note = d, "names "+img+" by tag: the node's runtime has it as this digest"
		}
	}
	return ob, nil
}

// Debugging says the manifest runs the component under a debugger (`devk
// debug` wrote it): the digests to compare are the debug image's.
func (s Manifest) Debugging(t Target) bool {
	if !t.Component.StaticPod {
		return false
	}
	data, err := os.ReadFile(filepath.Join(s.Dir, t.Component.Binary+".yaml"))
	if err != nil {
		return false
	}
	pod, err := staticpod.Parse(data)
	if err != nil {
		return false
	}
	_, debugging, _ := staticpod.DebugOriginal(pod)
	return debugging
}

// CRI is the imageRef of the running container, as the runtime reports it.
type CRI struct {
	Runtime  Runtime
	NodeName string
}

func (CRI) Name() string { return "cri" }

func (s CRI) Observe(ctx context.Context, t Target) (Observation, error) {
	if ob, skip := notStaticPod(t); skip {
		return ob, nil
	}
	st, err := RunningContainer(ctx, s.Runtime, StaticPod{Name: t.Component.Binary, Container: t.Component.Binary, NodeName: s.NodeName})
	if err != nil {
		return Observation{}, err
	}
	if st == nil {
		return Observation{Note: "no running container"}, nil
	}
	return Observation{Ref: "container " + cri.ShortID(st.ID), Digest: Of(st.ImageRef)}, nil
}

// Mirror is the imageID the kubelet reports in the mirror pod's status.
type Mirror struct {
	Client   kubernetes.Interface
	NodeName string
}

func (Mirror) Name() string { return "mirror-pod" }

func (s Mirror) Observe(ctx context.Context, t Target) (Observation, error) {
	if ob, skip := notStaticPod(t); skip {
		return ob, nil
	}
	p := StaticPod{Name: t.Component.Binary, Container: t.Component.Binary, NodeName: s.NodeName}
	mp, err := MirrorPod(ctx, s.Client, p)
	if err != nil {
		return Observation{Note: "API not reachable: " + err.Error()}, nil
	}
	if mp == nil {
		return Observation{Note: "no mirror pod " + p.FullName()}, nil
	}
	if id := MirrorImageID(mp, p.Container); id != "" {
		return Observation{Ref: "pod " + mp.Name, Digest: Of(id)}, nil
	}
	return Observation{Ref: "pod " + mp.Name, Note: "container not running"}, nil
}

// Conn is a connection to a node's API server and container runtime,
// with the kubelet's node name.
type Conn struct {
	Client   kubernetes.Interface
	Runtime  *cri.Client
	NodeName string
}

// Connect connects to the node's API server and runtime (gRPC dials
// lazily: a runtime that does not answer shows in the first call).
// nodeName is the kubelet's node name; empty finds
// it (NodeName). Close releases the runtime connection.
func Connect(ctx context.Context, node layout.Node, nodeName string) (*Conn, error) {
	var client kubernetes.Interface
	var err error
	if node.InCluster && node.Kubeconfig == "" {
		client, err = kube.InCluster()
	} else {
		client, err = kube.Client(node.Kubeconfig)
	}
	if err != nil {
		return nil, err
	}
	rt, err := cri.Dial(node.CRISocket)
	if err != nil {
		return nil, err
	}
	if nodeName == "" {
		nodeName = NodeName(ctx, rt, StaticPodNames())
	}
	return &Conn{Client: client, Runtime: rt, NodeName: nodeName}, nil
}

// Close releases the runtime connection.
func (c *Conn) Close() { c.Runtime.Close() }

// NodeSources are the node's views of what runs: the manifest, the CRI
// runtime and the mirror pod of a static pod; the workload and its pods
// of an addon. nodeName is the kubelet's node name; empty
// finds it (NodeName). others are the CRI sockets of the cluster's other
// nodes, by node name: the addon pods there are checked through their
// runtime too. close releases the CRI connections.
func NodeSources(ctx context.Context, node layout.Node, nodeName string, others map[string]string) (sources []Source, close func(), err error) {
	c, err := Connect(ctx, node, nodeName)
	if err != nil {
		return nil, nil, err
	}
	closers := []func(){c.Close}
	closeAll := func() {
		for _, f := range closers {
			f()
		}
	}
	more := NodeRuntimes{}
	for name, socket := range others {
		rt, err := cri.Dial(socket)
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("node %s's runtime: %w", name, err)
		}
		closers = append(closers, func() { rt.Close() })
		more[name] = rt
	}
	return []Source{Manifest{Dir: node.ManifestsDir, Tags: c.Runtime}, CRI{Runtime: c.Runtime, NodeName: c.NodeName}, Mirror{Client: c.Client, NodeName: c.NodeName},
			Workload{Client: c.Client}, Pods{Client: c.Client, Runtime: c.Runtime, NodeName: c.NodeName, Others: more}},
		closeAll, nil
}

// PushedOnCluster names the components the tree has pushed that run on
// a cluster: the static pods and the addons (addon.Workloads).
func PushedOnCluster(treeDir string) ([]string, error) {
	tree, err := source.Open(treeDir)
	if err != nil {
		return nil, err
	}
	st, err := build.LoadState(tree.Root)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, c := range build.Catalog {
		if cs := st.Components[c.Name]; c.StaticPod && cs != nil && cs.Pushed != nil {
			out = append(out, c.Name)
		}
	}
	for _, w := range addon.Workloads {
		if cs := st.Components[w.Component]; cs != nil && cs.Pushed != nil {
			out = append(out, w.Component)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("nothing pushed from %s yet: run `devk build apiserver --push`", tree.Root)
	}
	return out, nil
}

// OnNode is a static pod's view on one of several control-plane nodes:
// Source's observation, labelled with the node (manifest@cp2).
type OnNode struct {
	Node string
	Source
}

// Name is the source's name at the node.
func (s OnNode) Name() string { return s.Source.Name() + "@" + s.Node }

// Observe is the source's observation, under this name.
func (s OnNode) Observe(ctx context.Context, t Target) (Observation, error) {
	o, err := s.Source.Observe(ctx, t)
	o.Source = s.Name()
	return o, err
}

// Debugging is the source's Debugging, if it has one.
func (s OnNode) Debugging(t Target) bool { return debugging(s.Source, t) }

// StaticPodSources are the static-pod views of control-plane node n
// (manifest, CRI, mirror pod), each labelled with its name; close
// releases its runtime.
func StaticPodSources(ctx context.Context, n layout.Node, nodeName string) (sources []Source, close func(), err error) {
	c, err := Connect(ctx, n, nodeName)
	if err != nil {
		return nil, nil, fmt.Errorf("node %s: %w", nodeName, err)
	}
	return []Source{OnNode{nodeName, Manifest{Dir: n.ManifestsDir, Tags: c.Runtime}}, OnNode{nodeName, CRI{Runtime: c.Runtime, NodeName: c.NodeName}},
		OnNode{nodeName, Mirror{Client: c.Client, NodeName: c.NodeName}}}, c.Close, nil
}

// Recorded is one view of a node that another process observed there
// (devk's node agent, through the cluster): its observations and whether
// the manifest runs the component under a debugger, by the static pod's
// binary. Labelled by node with OnNode, as a view read here is.
type Recorded struct {
	Source string
	Views  map[string]Observation
	Debug  map[string]bool
}

// Name is the view's (manifest, cri).
func (s Recorded) Name() string { return s.Source }

// Observe is the recorded observation of t's static pod.
func (s Recorded) Observe(_ context.Context, t Target) (Observation, error) {
	if ob, skip := notStaticPod(t); skip {
		return ob, nil
	}
	if ob, ok := s.Views[t.Component.Binary]; ok {
		return ob, nil
	}
	return Observation{Note: "not observed on the node"}, nil
}

// Debugging is what the node's manifest said.
func (s Recorded) Debugging(t Target) bool { return s.Debug[t.Component.Binary] }

// ObserveNode is what a node's manifest and runtime say of each static
// pod (by binary, whose container has its name): the views Manifest and
// CRI give, and whether the manifest runs it under a debugger. A node's
// agent runs it there; Recorded gives its answer back.
func ObserveNode(ctx context.Context, manifests string, rt Runtime, nodeName string, binaries []string) (NodeViews, error) {
	v := NodeViews{Manifest: map[string]Observation{}, CRI: map[string]Observation{}, Debug: map[string]bool{}}
	for _, b := range binaries {
		t := Target{Component: build.Component{Name: b, Binary: b, StaticPod: true}}
		m := Manifest{Dir: manifests}
		if tags, ok := rt.(TagDigests); ok {
			m.Tags = tags
		}
		ob, err := m.Observe(ctx, t)
		if err != nil {
			return v, fmt.Errorf("%s: manifest: %w", b, err)
		}
		v.Manifest[b], v.Debug[b] = ob, m.Debugging(t)
		if ob, err = (CRI{Runtime: rt, NodeName: nodeName}).Observe(ctx, t); err != nil {
			return v, fmt.Errorf("%s: cri: %w", b, err)
		}
		v.CRI[b] = ob
	}
	return v, nil
}

// NodeViews are ObserveNode's answer.
type NodeViews struct {
	Manifest map[string]Observation `json:"manifest"`
	CRI      map[string]Observation `json:"cri"`
	Debug    map[string]bool        `json:"debug"`
}

// Sources are v as node's sources (manifest@node, cri@node).
func (v NodeViews) Sources(node string) []Source {
	return []Source{OnNode{node, Recorded{Source: "manifest", Views: v.Manifest, Debug: v.Debug}}, OnNode{node, Recorded{Source: "cri", Views: v.CRI}}}
}
