package kubeadmupgrade

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/devk/devk/cluster"
	"github.com/devk/devk/internal/kube"
	"github.com/devk/devk/internal/staticpod"
)

// While kubeadm upgrades a node's static pods it waits for each one's
// mirror pod to show the new manifest (its config hash) and to run. The
// kubelet learns of mirror pods through its pod watch, which backs off on
// every failure while the API server or etcd restarts (up to two
// minutes, see swap's awaitMirror): it recreates a mirror pod, or posts
// its status, tens of seconds late, and kubeadm's waits last that long
// for each component. devk's kubelet is restarted instead, as devk swap
// does on its own clusters: it lists pods at once, and its pods keep
// running. kubeadm's own steps are untouched.
const (
	// mirrorCheckEvery is how often the mirror pods are read.
	mirrorCheckEvery = time.Second
	// mirrorStale is how long, from the first read that saw it, a mirror
	// pod may name another image than its manifest does: the old
	// container's stop, the new one's start and the API server's own
	// restart, when it is the one upgraded.
	mirrorStale = 10 * time.Second
	// mirrorPending is how long a mirror pod of the manifest's image may
	// stay without any container status (the kubelet posts none for a
	// pod its watch has not seen).
	mirrorPending = 5 * time.Second
	// mirrorReadTimeout bounds each read of a mirror pod.
	mirrorReadTimeout = 2 * time.Second
)

// mindMirrors restarts node n's kubelet when a mirror pod of its static
// pods lags behind the manifest kubeadm wrote (mirrorStale, mirrorPending),
// once per manifest image, until ctx ends.
func (u Upgrade) mindMirrors(ctx context.Context, cs kubernetes.Interface, n cluster.Node) {
	behind := map[string]time.Time{} // pod → the first read that saw it lag
	restarted := map[string]bool{}   // pod@image → its kubelet restarted for it
	tick := time.NewTicker(mirrorCheckEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, sp := range cluster.StaticPods {
			want, err := staticpod.Image(n.Files.ManifestPath(sp.Name), sp.Name)
			if err != nil || restarted[sp.Name+"@"+want] {
				continue // moved to kubeadm's backup for an instant, or done
			}
			rctx, cancel := context.WithTimeout(ctx, mirrorReadTimeout)
			p, err := cs.CoreV1().Pods(metav1.NamespaceSystem).Get(rctx, kube.MirrorPodName(sp.Name, n.Name()), metav1.GetOptions{})
			cancel()
			if err != nil {
				continue // the API server restarts
			}
			limit, lags := mirrorLag(p, sp.Name, want)
			if !lags {
				delete(behind, sp.Name)
				continue
			}
			if behind[sp.Name].IsZero() {
				behind[sp.Name] = time.Now()
			}
			if time.Since(behind[sp.Name]) < limit {
				continue
			}
			u.Reporter.Infof("%s on %s: the kubelet has not caught up with the manifest kubeadm wrote in %s (its pod watch backs off after the API server's restart); restarting devk's kubelet so that it lists pods again", sp.Name, n.Name(), limit)
			// Not cut short when kubeadm ends: a kubelet stopped is started again.
			if err := u.Cluster.RelistNodeKubelet(context.WithoutCancel(ctx), n.Name()); err != nil {
				u.Reporter.Infof("%s on %s: restart the kubelet: %v", sp.Name, n.Name(), err)
			}
			restarted[sp.Name+"@"+want] = true
			delete(behind, sp.Name)
		}
	}
}

// mirrorLag says whether mirror pod p lags behind its manifest's image
// want, and how long it may: another image (the kubelet has not
// recreated it), or that image without any container status (the kubelet
// has not posted its status).
func mirrorLag(p *corev1.Pod, container, want string) (time.Duration, bool) {
	for _, c := range p.Spec.Containers {
		if c.Name != container {
			continue
		}
		if c.Image != want {
			return mirrorStale, true
		}
		return mirrorPending, len(p.Status.ContainerStatuses) == 0
	}
	return 0, false
}
