package swap

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/devk/devk/digest"
	"github.com/devk/devk/internal/cri"
	"github.com/devk/devk/internal/failpoint"
	"github.com/devk/devk/internal/interrupt"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/internal/validname"
)

// Node is what a static-pod swap talks to: the kubelet's manifests dir,
// the API server (for the mirror pod) and the runtime (for the container).
type Node struct {
	ManifestsDir string
	// KubeletRootDir is the kubelet's --root-dir; when known, a swap waits
	// for the kubelet to drop the old pod before the new manifest appears.
	KubeletRootDir string
	// Relist, when set, restarts the node's kubelet (one devk supervises)
	// so that its pod watch lists at once; see settle.
	Relist   func(context.Context) error
	Client   kubernetes.Interface
	Runtime  *cri.Client
	Reporter progress.Reporter
	// Timeout bounds the wait for the new container to be healthy.
	Timeout time.Duration
	// LogLines is how much of a failed container's log to show.
	LogLines int
	// Command is the swap command for this node, flags included, for
	// messages that tell the user what to run ("devk swap --manifests-dir …").
	Command string
}

func (n *Node) command() string {
	if n.Command == "" {
		return "devk swap"
	}
	return n.Command
}

// Target is one static pod to point at a new image.
type Target struct {
	// Pod is the static pod's (and its manifest's and container's) name:
	// kube-apiserver, etcd.
	Pod string
	// Image is the new image, repo@sha256:….
	Image string
	// Version, when set, is the gitVersion /version must report after the
	// swap (the apiserver only).
	Version string
}

// Check is one verification and what it found.
type Check struct {
	Name string `json:"check"`
	Want string `json:"want"`
	Got  string `json:"got"`
	OK   bool   `json:"ok"`
}

// Result is the outcome of swapping one static pod.
type Result struct {
	Pod        string `json:"pod"`
	OldImage   string `json:"oldImage"`
	NewImage   string `json:"newImage"`
	Unchanged  bool   `json:"unchanged,omitempty"`
	RolledBack bool   `json:"rolledBack,omitempty"`
	// Restored is set by an explicit --rollback, and when an interrupted
	// swap was undone.
	Restored bool `json:"restored,omitempty"`
	// Resumed says this finished a swap that was interrupted.
	Resumed bool    `json:"resumed,omitempty"`
	Checks  []Check `json:"checks"`
	// Ready is when the new container ran the digest and was healthy;
	// Took includes the mirror pod catching up and the checks.
	Ready time.Duration `json:"ready"`
	// KubeletRestarted says devk restarted its kubelet to get the mirror
	// pod updated (see Node.settle).
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
}

// Swap points one static pod at t.Image and waits until the kubelet runs it
// healthy and every digest check passes; on any failure it restores the
// previous manifest, waits for the old pod to be healthy again and returns
// an error wrapping ErrRolledBack with the new container's last log lines
// in the result. Run has checked that no swap of it was interrupted.
func (n *Node) Swap(ctx context.Context, t Target) (*Result, error) {
	t0 := time.Now()
	m := ManifestFor(n.ManifestsDir, t.Pod)
	res := &Result{Pod: t.Pod, NewImage: t.Image}
	pod, data, err := m.Read()
	if err != nil {
		return res, err
	}
	c, err := Container(pod, t.Pod)
	if err != nil {
		return res, err
	}
	res.OldImage = c.Image
	health := healthURL(c)
	if digest.Of(t.Image) == "" {
		return res, fmt.Errorf("%s is not a digest reference (repo@sha256:…): push it first (devk push)", t.Image)
	}
	before, err := n.observe(ctx, t.Pod, c.Name, health)
	if err != nil {
		return res, err
	}
	if c.Image == t.Image {
		res.Unchanged = true
		res.Checks = n.verify(ctx, t, before)
		res.Took = time.Since(t0)
		return res, checksError(res.Checks)
	}
	if _, _, err := WithImage(data, pod, c.Name, t.Image, time.Now()); err != nil {
		return res, err
	}

	n.Reporter.Infof("%s: %s -> %s", t.Pod, shortRef(c.Image), shortRef(t.Image))
	// Pull before the manifest changes: the old pod serves meanwhile, and
	// the kubelet then starts the new one from a local image.
	tp := time.Now()
	if _, err := n.Runtime.PullImage(ctx, t.Image); err != nil {
		return res, fmt.Errorf("%w; nothing was changed", err)
	}
	n.Reporter.Debugf("%s: pulled in %s", t.Pod, progress.Round(time.Since(tp)))
	failpoint.Hit("swap/after-pull")
	if _, err := m.SetImage(ctx, c.Name, t.Image, n.handover(ctx, m, t.Pod, before)); err != nil {
		if !errors.Is(err, ErrPutBack) {
			return res, err
		}
		// The old manifest is back: the swap ends when its pod runs again.
		res.RolledBack = true
		return res, n.awaitRestored(ctx, m, t.Pod, c, err)
	}
	after, mirrorErr, werr := n.settle(ctx, t.Pod, c.Name, health, before, digest.Of(t.Image), t0, res)
	if werr == nil {
		failpoint.Hit("swap/verify")
		res.Checks = n.verify(ctx, t, after)
		werr = checksError(nodeChecks(res.Checks))
	}
	if werr == nil {
		res.Took = time.Since(t0)
		if err := m.Finish(); err != nil {
			return res, err
		}
		if mirrorErr != nil {
			return res, fmt.Errorf("%s runs the pushed digest and is healthy, but %w (the kubelet updates mirror pods lazily; `devk digest verify %s` checks again)", t.Pod, mirrorErr, t.Pod)
		}
		return res, checksError(res.Checks)
	}

	// Roll back: log of the failed container first, then the old manifest.
	if after.crashed != nil && after.crashed.LogPath != "" {
		res.Log, _ = cri.TailLog(after.crashed.LogPath, max(n.LogLines, 20))
	}
	if len(res.Log) == 0 {
		res.Log = n.lastLog(ctx, t.Pod, c.Name, before.containerID)
	}
	res.RolledBack = true
	n.Reporter.Infof("%s: %v; rolling back to %s", t.Pod, werr, shortRef(c.Image))
	err = n.rollBack(ctx, m, t.Pod, c, werr)
	res.Took = time.Since(t0)
	return res, err
}

// rollBack undoes a swap whose new manifest is in place: the old one goes
// back at once, then the old pod must run healthy again, and only then is
// the journal discarded. A first Ctrl-C does not stop this (undoing is
// what it asks for); a second stops the waiting and leaves the journal,
// so the next `devk swap` finishes the job.
func (n *Node) rollBack(ctx context.Context, m Manifest, podName string, c *corev1.Container, why error) error {
	cctx := interrupt.Cleanup(ctx)
	cur, _ := n.observe(cctx, podName, c.Name, healthURL(c))
	if _, err := m.Restore(c.Name, n.handover(cctx, m, podName, cur)); err != nil {
		return fmt.Errorf("%s: %v; and the rollback failed: %w (the old manifest is at %s; `%s` tries again)", podName, why, err, m.PendingPath(), n.command())
	}
	return n.awaitRestored(ctx, m, podName, c, fmt.Errorf("%w: %w", ErrRolledBack, why))
}

// awaitRestored waits, on the cleanup context, for the old pod to run
// healthy on its image after its manifest was put back, then discards
// the journal; the result is why (what made the swap go back) or the
// reason the old pod is not back.
func (n *Node) awaitRestored(ctx context.Context, m Manifest, podName string, c *corev1.Container, why error) error {
	cctx := interrupt.Cleanup(ctx)
	if ctx.Err() != nil {
		n.Reporter.Infof("%s: the old manifest is back; waiting for the old pod (interrupt again to stop waiting)", podName)
	}
	if _, err := n.waitFor(cctx, podName, c.Name, healthURL(c), podState{containerID: "\x00"}, digest.Of(c.Image), false); err != nil {
		if cctx.Err() != nil {
			return fmt.Errorf("%s: %w; stopped waiting for the old pod: its manifest is in place and the journal stays (`%s` finishes the job)", podName, why, n.command())
		}
		return fmt.Errorf("%s: %w; and the old pod is not healthy again: %v", podName, why, err)
	}
	if err := m.Discard(); err != nil {
		return fmt.Errorf("%s: %w; the old pod runs again, but %v", podName, why, err)
	}
	return fmt.Errorf("%s: %w", podName, why)
}

// Resume completes a swap that a kill or a second Ctrl-C interrupted,
// from what its journal and the node show: a new manifest in place is
// waited for and kept if its pod runs healthy on the journal's digest
// (else rolled back, as the swap would have); a vacated manifest is put
// back; a manifest back on the old image has its pod waited for; a
// manifest that names neither image (rewritten since, by `devk up` or by
// hand) is left alone. The journal is gone afterwards.
func (n *Node) Resume(ctx context.Context, podName string, j *Journal) (*Result, error) {
	t0 := time.Now()
	m := ManifestFor(n.ManifestsDir, podName)
	backup, err := m.ReadBackup()
	if err != nil {
		return nil, fmt.Errorf("finish the interrupted swap of %s: %w", podName, err)
	}
	old, err := Container(backup, podName)
	if err != nil {
		return nil, err
	}
	current := ""
	if pod, _, err := m.Read(); err == nil {
		if c, err := Container(pod, podName); err == nil {
			current = c.Image
		}
	}
	res := &Result{Pod: podName, OldImage: j.OldImage, NewImage: j.NewImage, Resumed: true}
	n.Reporter.Infof("%s: a swap to %s was interrupted at %s; finishing it", podName, shortRef(j.NewImage), j.Started.Local().Format("15:04:05"))
	switch current {
	case j.NewImage:
		// As the swap would have: ready, then the mirror pod catching up
		// (restarting devk's kubelet if it lags after an API server swap).
		s, mirrorErr, err := n.settle(ctx, podName, old.Name, healthURL(old), podState{containerID: "\x00"}, digest.Of(j.NewImage), t0, res)
		if err == nil {
			res.Checks = n.verify(ctx, Target{Pod: podName, Image: j.NewImage}, s)
			if err := m.Finish(); err != nil {
				return res, err
			}
			res.Took = time.Since(t0)
			if mirrorErr != nil {
				return res, fmt.Errorf("%s runs the interrupted swap's digest and is healthy, but %w", podName, mirrorErr)
			}
			return res, checksError(res.Checks)
		}
		if ctx.Err() != nil {
			return res, err
		}
		res.RolledBack = true
		err = n.rollBack(ctx, m, podName, old, err)
		res.Took = time.Since(t0)
		return res, err
	case "":
		res.NewImage, res.Restored = j.OldImage, true
		if _, err := m.Restore(old.Name, n.handover(ctx, m, podName, podState{})); err != nil {
			return res, err
		}
	case j.OldImage:
		res.NewImage, res.Restored = j.OldImage, true
	default:
		n.Reporter.Infof("%s: its manifest names %s now, neither image of the interrupted swap: left as it is", podName, shortRef(current))
		res.NewImage, res.Unchanged = current, true
		res.Took = time.Since(t0)
		return res, m.Discard()
	}
	if _, err := n.waitFor(ctx, podName, old.Name, healthURL(old), podState{containerID: "\x00"}, digest.Of(j.OldImage), false); err != nil {
		return res, fmt.Errorf("%s: put back on %s after an interrupted swap, but %w", podName, shortRef(j.OldImage), err)
	}
	res.Took = time.Since(t0)
	return res, m.Discard()
}

// Rollback restores the manifest from before the last swap (or from
// before the swap in progress, if one was interrupted) and waits for the
// pod to be healthy on it.
func (n *Node) Rollback(ctx context.Context, podName string) (*Result, error) {
	t0 := time.Now()
	m := ManifestFor(n.ManifestsDir, podName)
	backup, err := m.ReadBackup()
	if err != nil {
		return nil, err
	}
	bc, err := Container(backup, podName)
	if err != nil {
		return nil, err
	}
	// What the dir names now: nothing after a swap killed while the
	// manifest was moved out.
	current := ""
	if pod, _, err := m.Read(); err == nil {
		c, err := Container(pod, podName)
		if err != nil {
			return nil, err
		}
		current = c.Image
	}
	img := bc.Image
	res := &Result{Pod: podName, OldImage: current, NewImage: img, Restored: true, Unchanged: img == current}
	health := healthURL(bc)
	before, err := n.observe(ctx, podName, bc.Name, health)
	if err != nil {
		return res, err
	}
	after := before
	var mirrorErr error
	if res.Unchanged {
		// Already on the backup's image: rewriting would restart the pod.
		if err := m.Discard(); err != nil {
			return res, err
		}
	} else {
		if _, err := m.Restore(bc.Name, n.handover(ctx, m, podName, before)); err != nil {
			return res, err
		}
		if after, mirrorErr, err = n.settle(ctx, podName, bc.Name, health, before, digest.Of(img), t0, res); err != nil {
			return res, err
		}
		if err := m.Discard(); err != nil {
			return res, err
		}
	}
	res.Checks = n.verify(ctx, Target{Pod: podName, Image: img}, after)
	res.Took = time.Since(t0)
	if mirrorErr != nil {
		return res, fmt.Errorf("%s runs the restored image and is healthy, but %w", podName, mirrorErr)
	}
	return res, checksError(res.Checks)
}

// handover runs between writing the backup and writing the new manifest:
// it vacates the manifest, stops the running container without grace (the
// kubelet would wait out the pod's termination grace period, 30 s for the
// apiserver), and waits, at most 10 s, until the kubelet has released
// every pod of that name (see release.go), so the new pod starts at once
// instead of after the kubelet's 10 s back-off. "Every pod": after a swap
// killed midway, the kubelet may still be starting the pod it was handed.
func (n *Node) handover(ctx context.Context, m Manifest, podName string, old podState) func() {
	return func() {
		ours := func(name string) bool { return strings.HasPrefix(name, podName+"-") }
		uids := map[string]bool{}
		if old.podUID != "" {
			uids[old.podUID] = true
		}
		// A manifest written moments ago (by a swap killed right after
		// writing it) names a pod the kubelet is starting: let its
		// sandbox appear, so that the wait below knows that pod too.
		if fi, err := os.Stat(m.Path); err == nil && time.Since(fi.ModTime()) < startWait {
			for time.Since(fi.ModTime()) < startWait && ctx.Err() == nil {
				if uid := n.sandboxSince(ctx, ours, fi.ModTime()); uid != "" {
					uids[uid] = true
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
		if err := m.Vacate(); err != nil {
			n.Reporter.Debugf("vacate %s: %v", m.Path, err)
			return
		}
		failpoint.Hit("swap/after-vacate")
		if old.containerID != "" {
			if err := n.Runtime.StopContainer(ctx, old.containerID, 0); err != nil {
				n.Reporter.Debugf("stop old container: %v", err)
			}
		}
		n.waitReleased(ctx, podName, ours, uids)
	}
}

// waitReleased waits, at most 10 s, until the kubelet has let go of every
// pod of the name (uids are those known so far; more may show up).
func (n *Node) waitReleased(ctx context.Context, podName string, ours func(string) bool, uids map[string]bool) {
	rc := releaseClock{checkDir: n.KubeletRootDir != ""}
	t0 := time.Now()
	failpoint.Hit("swap/handover")
	for time.Since(t0) < 10*time.Second && ctx.Err() == nil {
		n.stopRestarted(ctx, podName, ours, uids)
		ready := false
		if sbs, err := n.Runtime.Sandboxes(ctx, metav1.NamespaceSystem); err == nil {
			for _, sb := range sbs {
				if ours(sb.PodName) && sb.Ready {
					ready = true
					uids[sb.PodUID] = true
				}
			}
		}
		dirs := false
		for uid := range uids {
			if dir, err := validname.PathIn(n.KubeletRootDir, "pods", uid); err == nil {
				dirs = dirs || (rc.checkDir && exists(dir))
			}
		}
		if len(uids) > 0 && rc.released(time.Now(), ready, dirs) {
			n.Reporter.Debugf("the kubelet released the old pod in %s", progress.Round(time.Since(t0)))
			return
		}
		if len(uids) == 0 && time.Since(t0) > relistWait {
			return // no pod of that name ran
		}
		time.Sleep(50 * time.Millisecond)
	}
	if ctx.Err() == nil {
		n.Reporter.Infof("%s: the kubelet has not let go of the old pod after %s; the new one may wait out the kubelet's 10 s back-off", podName, progress.Round(time.Since(t0)))
	}
}

// stopRestarted stops every running container of the pod's name: a sync
// the kubelet's pod worker had queued before it saw the manifest go can
// restart the container just stopped, which it would then kill with the
// pod's grace period (30 s for the apiserver).
func (n *Node) stopRestarted(ctx context.Context, podName string, ours func(string) bool, uids map[string]bool) {
	cts, err := n.Runtime.Containers(ctx, cri.Filter{PodNamespace: metav1.NamespaceSystem, RunningOnly: true})
	if err != nil {
		return
	}
	for _, ct := range cts {
		if !ours(ct.PodName) {
			continue
		}
		uids[ct.PodUID] = true
		n.Reporter.Debugf("a container of %s still runs (%s); stopping it", podName, shortID(ct.ID))
		if err := n.Runtime.StopContainer(ctx, ct.ID, 0); err != nil {
			n.Reporter.Debugf("stop %s: %v", shortID(ct.ID), err)
		}
	}
}

// startWait is how long after a manifest was written the kubelet surely
// has a sandbox for its pod.
const startWait = 5 * time.Second

// sandboxSince is the UID of a sandbox of the pod made after t, if any.
func (n *Node) sandboxSince(ctx context.Context, ours func(string) bool, t time.Time) string {
	sbs, err := n.Runtime.Sandboxes(ctx, metav1.NamespaceSystem)
	if err != nil {
		return ""
	}
	for _, sb := range sbs {
		if ours(sb.PodName) && !sb.CreatedAt.Before(t) {
			return sb.PodUID
		}
	}
	return ""
}

// healthURL is the HTTP(S) endpoint of the container's readiness probe
// (or startup, or liveness probe), as the kubelet would call it.
func healthURL(c *corev1.Container) string {
	for _, p := range []*corev1.Probe{c.ReadinessProbe, c.StartupProbe, c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil {
			continue
		}
		g := p.HTTPGet
		host := g.Host
		if host == "" {
			host = "127.0.0.1"
		}
		scheme := strings.ToLower(string(g.Scheme))
		if scheme == "" {
			scheme = "http"
		}
		port := g.Port.String()
		if g.Port.IntValue() == 0 {
			for _, cp := range c.Ports {
				if cp.Name == g.Port.StrVal {
					port = strconv.Itoa(int(cp.ContainerPort))
				}
			}
		}
		return scheme + "://" + net.JoinHostPort(host, port) + g.Path
	}
	return ""
}

var insecureLoopback = &http.Client{
	Timeout: 3 * time.Second,
	// Probes go to the node's own loopback endpoints, as the kubelet's do,
	// without verifying the serving certificate.
	Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}},
}

func probe(ctx context.Context, url string) error {
	if url == "" {
		return nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := insecureLoopback.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

func (n *Node) mirrorPod(ctx context.Context, podName string) (*corev1.Pod, error) {
	pods, err := n.Client.CoreV1().Pods(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list kube-system pods: %w", err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror && strings.HasPrefix(p.Name, podName+"-") {
			return p, nil
		}
	}
	return nil, nil
}

func (n *Node) observe(ctx context.Context, podName, container, health string) (podState, error) {
	var s podState
	if mp, err := n.mirrorPod(ctx, podName); err == nil && mp != nil {
		s.configHash = mp.Annotations["kubernetes.io/config.hash"]
		for _, cs := range mp.Status.ContainerStatuses {
			if cs.Name == container && cs.State.Running != nil {
				s.mirrorImage = cs.ImageID
			}
		}
	} else if err != nil && !apierrors.IsNotFound(err) {
		s.healthErr = err // the API may be down during an apiserver swap
	}
	cts, err := n.Runtime.Containers(ctx, cri.Filter{PodNamespace: metav1.NamespaceSystem, Container: container})
	if err != nil {
		return s, err
	}
	for _, ct := range cts {
		if !strings.HasPrefix(ct.PodName, podName+"-") {
			continue
		}
		if ct.Running() && s.containerID == "" {
			s.containerID, s.podUID = ct.ID, ct.PodUID
			if st, err := n.Runtime.ContainerStatus(ctx, ct.ID); err == nil {
				s.imageRef = st.ImageRef
			}
		}
		if ct.State == runtimeapi.ContainerState_CONTAINER_EXITED && s.crashed == nil {
			if st, err := n.Runtime.ContainerStatus(ctx, ct.ID); err == nil && st.ExitCode != 0 {
				s.crashed = st
			}
		}
	}
	if s.podUID == "" {
		// No running container (it is starting, or crashed): the newest
		// sandbox still names the pod the kubelet has to drop.
		if sbs, err := n.Runtime.Sandboxes(ctx, metav1.NamespaceSystem); err == nil {
			for _, sb := range sbs {
				if strings.HasPrefix(sb.PodName, podName+"-") {
					s.podUID = sb.PodUID
					break
				}
			}
		}
	}
	if err := probe(ctx, health); err != nil {
		s.healthErr = err
	} else {
		s.healthy = s.containerID != ""
	}
	return s, nil
}

// waitFor polls until a container other than before's runs digest, is
// healthy, and the mirror pod shows a new config hash and the digest.
func (n *Node) waitFor(ctx context.Context, podName, container, health string, before podState, want string, mirror bool) (podState, error) {
	since := time.Now()
	timeout := n.Timeout
	if timeout == 0 {
		timeout = 3 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last podState
	stage := "the kubelet to start the new container"
	for {
		s, err := n.observe(ctx, podName, container, health)
		if err == nil {
			last = s
			if cr := s.crashed; cr != nil && digest.Of(cr.ImageRef) == want && cr.CreatedAt.After(since.Add(-time.Second)) {
				return s, fmt.Errorf("the new container exited with code %d (%s)", cr.ExitCode, cr.Reason)
			}
			switch {
			case s.containerID == "" || s.containerID == before.containerID || digest.Of(s.imageRef) != want:
				stage = "the kubelet to start a container of " + shortDigest(want)
			case !s.healthy:
				stage = fmt.Sprintf("%s to be healthy (%v)", health, s.healthErr)
			case !mirror:
				return s, nil
			case s.configHash != s.podUID:
				// A static pod's UID is its config hash: the mirror pod
				// shows the new pod once its hash is the running pod's
				// UID. (Comparing with the hash before the swap is wrong
				// when the mirror pod still lags behind an earlier edit.)
				stage = "the mirror pod's kubernetes.io/config.hash to become " + s.podUID
			case digest.Of(s.mirrorImage) != want:
				stage = "the mirror pod to report the new imageID"
			default:
				return s, nil
			}
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return last, fmt.Errorf("timed out after %s waiting for %s", timeout, stage)
			}
			return last, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// mirrorGrace is how long after ready the mirror pod gets before devk
// says why it waits (and, on its own cluster, restarts the kubelet).
const mirrorGrace = 2 * time.Second

// settle waits for the new container to run want and be healthy (then
// the pod is ready, recorded in res.Ready), and then for the mirror pod
// to show it. Only the first wait can fail the swap: a mirror pod that
// lags is returned as mirrorErr.
//
// The mirror pod lags when the API server itself was restarted: the
// kubelet learns of mirror pods through its pod watch, whose reflector
// backs off on every failed attempt while the API server is down
// (client-go: 0.8 s doubling to 30 s, jittered up to twice that, reset
// only after two quiet minutes; a watch resumed on the new API server
// with an old resourceVersion fails once more), and until that watch sees
// the new mirror pod the kubelet's status manager drops the pod's status
// ("Pod was deleted and then recreated, skipping status update"). API
// server swaps less than two minutes apart thus wait longer each time,
// up to two minutes. A kubelet devk supervises is restarted instead
// (n.Relist): it lists at once, and its pods keep running.
func (n *Node) settle(ctx context.Context, podName, container, health string, before podState, want string, t0 time.Time, res *Result) (podState, error, error) {
	failpoint.Hit("swap/wait-ready")
	s, err := n.waitFor(ctx, podName, container, health, before, want, false)
	if err != nil {
		return s, nil, err
	}
	res.Ready = time.Since(t0)
	n.Reporter.Infof("%s: ready in %s, running %s", podName, progress.Round(res.Ready), shortDigest(want))
	gctx, cancel := context.WithTimeout(ctx, mirrorGrace)
	ms, err := n.waitFor(gctx, podName, container, health, before, want, true)
	cancel()
	if err == nil {
		return ms, nil, nil
	}
	if ctx.Err() != nil {
		return s, ctx.Err(), nil
	}
	if n.Relist != nil {
		n.Reporter.Infof("%s: the kubelet has not reported the new pod in its mirror pod (its pod watch backs off after an API server restart); restarting devk's kubelet so that it lists pods again", podName)
		if err := n.Relist(ctx); err != nil {
			n.Reporter.Infof("%s: restart the kubelet: %v", podName, err)
		} else {
			res.KubeletRestarted = true
		}
	} else {
		n.Reporter.Infof("%s: waiting for the kubelet to report the new pod in its mirror pod (after an API server restart the kubelet's pod watch backs off, up to two minutes)", podName)
	}
	ms, mirrorErr := n.waitFor(ctx, podName, container, health, before, want, true)
	if mirrorErr != nil {
		return s, mirrorErr, nil
	}
	return ms, nil, nil
}

// nodeChecks are the checks a rollback is decided on: the ones about what
// the node runs, not the mirror pod's (lagging) report of it.
func nodeChecks(checks []Check) []Check {
	var out []Check
	for _, c := range checks {
		if !strings.HasPrefix(c.Name, "mirror pod") {
			out = append(out, c)
		}
	}
	return out
}

// verify compares every view of what runs with the pushed digest.
func (n *Node) verify(ctx context.Context, t Target, s podState) []Check {
	want := digest.Of(t.Image)
	// What the manifest on disk names now, not what was meant to be written.
	named := ""
	if pod, _, err := ManifestFor(n.ManifestsDir, t.Pod).Read(); err == nil {
		if c, err := Container(pod, t.Pod); err == nil {
			named = c.Image
		}
	}
	checks := []Check{
		{Name: "manifest image", Want: want, Got: digest.Of(named), OK: digest.Of(named) == want},
		{Name: "CRI imageRef", Want: want, Got: digest.Of(s.imageRef), OK: digest.Of(s.imageRef) == want},
		{Name: "mirror pod imageID", Want: want, Got: digest.Of(s.mirrorImage), OK: digest.Of(s.mirrorImage) == want},
		{Name: "mirror pod config.hash", Want: s.podUID, Got: s.configHash, OK: s.podUID != "" && s.configHash == s.podUID},
		{Name: "healthy", Want: "200 OK", Got: healthGot(s), OK: s.healthy},
	}
	if t.Version != "" {
		got, err := apiVersion(ctx, n.Client)
		if err != nil {
			got = err.Error()
		}
		checks = append(checks, Check{Name: "/version gitVersion", Want: t.Version, Got: got, OK: got == t.Version})
	}
	return checks
}

func healthGot(s podState) string {
	if s.healthy {
		return "200 OK"
	}
	if s.healthErr != nil {
		return s.healthErr.Error()
	}
	return "no running container"
}

func apiVersion(ctx context.Context, c kubernetes.Interface) (string, error) {
	body, err := c.Discovery().RESTClient().Get().AbsPath("/version").Do(ctx).Raw()
	if err != nil {
		return "", err
	}
	var v struct {
		GitVersion string `json:"gitVersion"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return "", err
	}
	return v.GitVersion, nil
}

func checksError(checks []Check) error {
	var failed []string
	for _, c := range checks {
		if !c.OK {
			failed = append(failed, fmt.Sprintf("%s: want %s, got %s", c.Name, c.Want, c.Got))
		}
	}
	if len(failed) == 0 {
		return nil
	}
	return fmt.Errorf("verification failed: %s", strings.Join(failed, "; "))
}

// lastLog is the tail of the newest container of the pod that is not the
// old one: the one that failed.
func (n *Node) lastLog(ctx context.Context, podName, container, oldID string) []string {
	cts, err := n.Runtime.Containers(ctx, cri.Filter{PodNamespace: metav1.NamespaceSystem, Container: container})
	if err != nil {
		return nil
	}
	for _, ct := range cts {
		if !strings.HasPrefix(ct.PodName, podName+"-") || ct.ID == oldID {
			continue
		}
		st, err := n.Runtime.ContainerStatus(ctx, ct.ID)
		if err != nil || st.LogPath == "" {
			continue
		}
		// A container the kubelet just restarted has no log yet: the
		// one before it has the reason.
		if lines, _ := cri.TailLog(st.LogPath, max(n.LogLines, 20)); len(lines) > 0 {
			return lines
		}
	}
	return nil
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

func shortDigest(d string) string {
	if len(d) > 19 {
		return d[:19]
	}
	return d
}

func shortRef(ref string) string {
	if i := strings.LastIndex(ref, "@sha256:"); i >= 0 && len(ref) > i+20 {
		return ref[:i+20]
	}
	return ref
}
