package swap

import (
	"context"
	"errors"
	"time"

	"k8s.io/client-go/kubernetes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devk/devk/digest"
	"github.com/devk/devk/internal/cri"
	"github.com/devk/devk/internal/crilog"
	"github.com/devk/devk/internal/kube"
	"github.com/devk/devk/internal/progress"
)

// Runtime is what a swap asks of the node's container runtime: list
// sandboxes and containers, inspect and stop a container, pull an image.
// internal/cri's Client is the real one; tests use a fake, because the
// real one needs root, containerd and a kubelet.
type Runtime interface {
	digest.Runtime
	Version(ctx context.Context) (string, error)
	StopContainer(ctx context.Context, id string, grace time.Duration) error
	PullImage(ctx context.Context, ref string) (string, error)
	ImageDigest(ctx context.Context, ref string) (string, error)
	PodCgroup(ctx context.Context, containerID, podUID string) (string, error)
}

var _ Runtime = (*cri.Client)(nil)

// Target is what a static-pod swap talks to: the kubelet's manifests dir,
// the API server (for the mirror pod) and the runtime (for the container).
type Target struct {
	ManifestsDir string
	// KubeletRootDir is the kubelet's --root-dir; when known, a swap waits
	// for the kubelet to drop the old pod before the new manifest appears.
	KubeletRootDir string
	// NodeName is the kubelet's node name: the static pod X runs as pod
	// X-<NodeName>, in the runtime and as the mirror pod.
	NodeName string
	// NetNS is the node's network namespace (layout.Node.NetNS), where
	// a probe on its loopback goes.
	NetNS string
	// Relist, when set, restarts the node's kubelet (one devk supervises)
	// so that its pod watch lists at once; see settle.
	Relist  func(context.Context) error
	Client  kubernetes.Interface
	Runtime Runtime
	// Others are the runtimes of the cluster's other nodes, by node
	// name: an addon's pods there are verified through them too.
	Others   digest.NodeRuntimes
	Reporter progress.Reporter
	// Timeout bounds the wait for the new container to be healthy.
	Timeout time.Duration
	// LogLines is how much of a failed container's log to show.
	LogLines int
	// Command is the swap command for this node, flags included, for
	// messages that tell the user what to run ("devk swap --manifests-dir …").
	Command string
	// StopGrace is the old container's grace in the hand-over (Options).
	StopGrace time.Duration
}

// timeout is Timeout, DefaultTimeout when zero.
func (n *Target) timeout() time.Duration {
	if n.Timeout == 0 {
		return DefaultTimeout
	}
	return n.Timeout
}

func (n *Target) command() string {
	if n.Command == "" {
		return "devk swap"
	}
	return n.Command
}

// pod is the static pod named podName (its container, container) on
// this node.
func (n *Target) pod(podName, container string) digest.StaticPod {
	return digest.StaticPod{Name: podName, Container: container, NodeName: n.NodeName}
}

// podImage is one static pod to point at a new image.
type podImage struct {
	// Pod is the static pod's (and its manifest's and container's) name:
	// kube-apiserver, etcd.
	Pod string
	// Image is the new image, repo@sha256:… (repo:tag@sha256:… where
	// the manifest names its image by tag: digest.TaggedLike).
	Image string
	// Tag is the tag the image was pushed under, for TaggedLike.
	Tag string
	// Digest is what Image runs when Image names a tag alone (kubeadm's
	// manifest, put back by --rollback): the runtime's digest for it.
	Digest string
	// Version, when set, is the gitVersion /version must report after the
	// swap (the apiserver only).
	Version string
}

// digest is the digest the pod must run: Image's own, else Digest.
func (t podImage) digest() string {
	if d := digest.Of(t.Image); d != "" {
		return d
	}
	return t.Digest
}

// digestOf is the digest image runs: its own, or for a reference by tag
// alone the one the node's runtime has for it ("" when it has none).
func (n *Target) digestOf(ctx context.Context, image string) string {
	if d := digest.Of(image); d != "" {
		return d
	}
	d, _ := n.Runtime.ImageDigest(ctx, image)
	return d
}

// Check is one verification and what it found.
type Check = digest.Check

// ImageChange is what the swap of a static pod and of an addon both
// report: the image before and after, and what became of the change.
type ImageChange struct {
	OldImage   string `json:"oldImage"`
	NewImage   string `json:"newImage"`
	Unchanged  bool   `json:"unchanged,omitempty"`
	RolledBack bool   `json:"rolledBack,omitempty"`
	// Restored is set by an explicit --rollback, and for a static pod
	// when an interrupted swap was undone.
	Restored bool `json:"restored,omitempty"`
}

// Result is the outcome of swapping one static pod.
type Result struct {
	Pod string `json:"pod"`
	// Node is the control-plane node it ran on, in a rolling swap.
	Node string `json:"node,omitempty"`
	ImageChange
	// Resumed says this finished a swap that was interrupted.
	Resumed bool `json:"resumed,omitempty"`
	// Run says the pod was put back after `devk run` ran a process in
	// its place (Restored is set too).
	Run    bool    `json:"run,omitempty"`
	Checks []Check `json:"checks"`
	// Ready is when the new container ran the digest and was healthy;
	// Took includes the mirror pod catching up and the checks.
	Ready time.Duration `json:"ready"`
	// Started is when the runtime started the new container (CRI): what
	// the swap took before the component's own start-up (Ready - Started).
	Started time.Duration `json:"started,omitempty"`
	// KubeletRestarted says devk restarted its kubelet to get the mirror
	// pod updated (see Target.settle).
	KubeletRestarted bool          `json:"kubeletRestarted,omitempty"`
	Took             time.Duration `json:"took"`
	// Log is the tail of the failed container's log, when the swap failed.
	Log []string `json:"log,omitempty"`
}

// ErrRolledBack wraps a swap that failed and was undone.
var ErrRolledBack = errors.New("swap failed and was rolled back")

// podState is what one observation of the node shows for a static pod.
type podState struct {
	configHash  string
	containerID string // running container, per CRI
	podUID      string // its pod's UID (the static pod's config hash)
	imageRef    string // its CRI imageRef
	mirrorImage string // mirror pod's containerStatuses imageID
	healthy     bool
	healthErr   error
	// crashed is an exited container of the pod, newest first: a new
	// image that cannot start shows up here long before any timeout.
	crashed *cri.Status
	// restarts, in a podState to wait from, says a crash of the awaited
	// container is not the end of the wait: the image was put back and
	// ran before, and its first container may exit while the one being
	// stopped still holds its ports; the kubelet starts it again.
	restarts bool
}

// hadCrashed says whether cr is the exited container s saw already: one
// that exited before a wait began (stopped by an interrupted swap's
// hand-over) is not the awaited container failing.
func (s podState) hadCrashed(cr *cri.Status) bool {
	return s.crashed != nil && cr != nil && s.crashed.ID == cr.ID
}

// anyContainer is the podState to wait from when any running container
// of the right digest will do (not only one other than a known one).
var anyContainer = podState{containerID: "\x00"}

// putBackContainer is anyContainer for an image put back (restarts).
var putBackContainer = podState{containerID: "\x00", restarts: true}

// observe looks once at the static pod: its mirror pod, its running (or
// crashed) container through CRI, its newest sandbox, and its health
// endpoint.
func (n *Target) observe(ctx context.Context, podName, container, health string, mirror bool) (podState, error) {
	var s podState
	p := n.pod(podName, container)
	// The mirror pod only when asked for: while an API server starts, a
	// GET can take as long as its start.
	if mirror {
		if mp, err := digest.MirrorPod(ctx, n.Client, p); err != nil {
			s.healthErr = err // the API may be down during an apiserver swap
		} else if mp != nil {
			s.configHash = mp.Annotations[digest.ConfigHashAnnotation]
			s.mirrorImage = digest.MirrorImageID(mp, container)
		}
	}
	run, err := digest.RunningContainer(ctx, n.Runtime, p)
	if err != nil {
		return s, err
	}
	if run != nil {
		s.containerID, s.podUID, s.imageRef = run.ID, run.PodUID, run.ImageRef
	}
	s.crashed = n.crashed(ctx, p)
	if s.podUID == "" {
		// No running container (it is starting, or crashed): the newest
		// sandbox still names the pod the kubelet has to drop.
		if sbs, err := n.Runtime.Sandboxes(ctx, metav1.NamespaceSystem); err == nil {
			for _, sb := range sbs {
				if sb.PodName == p.FullName() {
					s.podUID = sb.PodUID
					break
				}
			}
		}
	}
	if health == "" {
		s.healthy = s.containerID != ""
	} else if err := kube.ProbeIn(ctx, n.NetNS, health); err != nil {
		s.healthErr = err
	} else {
		s.healthy = s.containerID != ""
	}
	return s, nil
}

// crashed is the newest container of the pod that exited with an error
// (waitFor tells a new one from the old one the swap stopped).
func (n *Target) crashed(ctx context.Context, p digest.StaticPod) *cri.Status {
	cts, err := n.Runtime.Containers(ctx, cri.Filter{PodNamespace: metav1.NamespaceSystem, PodName: p.FullName(), Container: p.Container})
	if err != nil {
		return nil
	}
	for _, ct := range cts {
		if ct.PodName != p.FullName() || ct.State != runtimeapi.ContainerState_CONTAINER_EXITED {
			continue
		}
		if st, err := n.Runtime.ContainerStatus(ctx, ct.ID); err == nil && st.ExitCode != 0 {
			return st
		}
	}
	return nil
}

// lastLog is the tail of the newest container of the pod that is not the
// old one: the one that failed.
func (n *Target) lastLog(ctx context.Context, podName, container, oldID string) []string {
	p := n.pod(podName, container)
	cts, err := n.Runtime.Containers(ctx, cri.Filter{PodNamespace: metav1.NamespaceSystem, PodName: p.FullName(), Container: container})
	if err != nil {
		return nil
	}
	for _, ct := range cts {
		if ct.PodName != p.FullName() || ct.ID == oldID {
			continue
		}
		st, err := n.Runtime.ContainerStatus(ctx, ct.ID)
		if err != nil || st.LogPath == "" {
			continue
		}
		// A container the kubelet just restarted has no log yet: the
		// one before it has the reason.
		if lines, _ := crilog.Tail(st.LogPath, max(n.LogLines, DefaultLogLines)); len(lines) > 0 {
			return lines
		}
	}
	return nil
}

// DefaultLogLines is how many of a failed container's log lines a swap
// shows at least.
const DefaultLogLines = 20

func shortDigest(d string) string {
	if len(d) > 19 {
		return d[:19]
	}
	return d
}
