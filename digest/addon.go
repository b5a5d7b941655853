package digest

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"k8s.io/client-go/kubernetes"

	"github.com/devk/devk/internal/addon"
	"github.com/devk/devk/internal/cri"
)

// AddonPod is one pod of an addon's workload as the API server (and, on
// the node whose runtime was asked, the runtime) shows it.
type AddonPod struct {
	Name, Node string
	// Image is what the pod's spec names; ImageID what the kubelet
	// reports the container runs.
	Image, ImageID string
	// Ready says the addon's container runs and is ready.
	Ready bool
	// Local says the pod runs on the node whose runtime was asked;
	// CRIImageRef is then its running container's imageRef.
	Local       bool
	CRIImageRef string
}

// AddonView is what one look at the cluster shows of an addon.
type AddonView struct {
	addon.Workload
	// Present says the cluster has the workload; the rest is empty when
	// it does not.
	Present bool
	// Image is what the workload's pod template names.
	Image string
	Pods  []AddonPod
}

// ObserveAddon looks once at the addon's workload and its pods, and
// through rt (nil: not at all) at the running containers of the pods on
// node nodeName.
func ObserveAddon(ctx context.Context, cs kubernetes.Interface, runtimes NodeRuntimes, w addon.Workload) (AddonView, error) {
	v := AddonView{Workload: w}
	s, err := addon.Get(ctx, cs, w)
	if err != nil || s == nil {
		return v, err
	}
	v.Present, v.Image = true, s.Image()
	pods, err := s.Pods(ctx, cs)
	if err != nil {
		return v, err
	}
	for i := range pods {
		p := &pods[i]
		ap := AddonPod{Name: p.Name, Node: p.Spec.NodeName, Image: w.PodImage(p), Ready: w.ContainerReady(p)}
		if st := w.ContainerStatus(p); st != nil {
			ap.ImageID = st.ImageID
		}
		if rt := runtimes[p.Spec.NodeName]; rt != nil && p.Spec.NodeName != "" {
			ap.Local = true
			run, err := RunningPodContainer(ctx, rt, p.Namespace, p.Name, w.Container)
			if err != nil {
				return v, err
			}
			if run != nil {
				ap.CRIImageRef = run.ImageRef
			}
		}
		v.Pods = append(v.Pods, ap)
	}
	sort.Slice(v.Pods, func(i, k int) bool { return v.Pods[i].Name < v.Pods[k].Name })
	return v, nil
}

// The checks AddonChecks makes; each pod's are named "pod <name> <check>".
const (
	CheckWorkload   = "workload image"
	CheckPods       = "pods"
	CheckPodImageID = "imageID"
	CheckPodReady   = "ready"
	CheckPodCRI     = "CRI imageRef"
)

// AddonChecks compares every view of an addon with the digest want: the
// workload's image, and for each pod its imageID, its readiness and, on
// the local node, the running container's imageRef. A workload without
// pods fails: nothing runs the digest.
func AddonChecks(want string, v AddonView) []Check {
	eq := func(name, got string) Check {
		return Check{Name: name, Want: want, Got: Of(got), OK: Of(got) == want}
	}
	checks := []Check{eq(CheckWorkload, v.Image)}
	if len(v.Pods) == 0 {
		checks = append(checks, Check{Name: CheckPods, Want: "at least one", Got: "none", OK: false})
	}
	for _, p := range v.Pods {
		pre := "pod " + p.Name + " "
		checks = append(checks, eq(pre+CheckPodImageID, p.ImageID),
			Check{Name: pre + CheckPodReady, Want: "true", Got: fmt.Sprint(p.Ready), OK: p.Ready})
		if p.Local {
			c := eq(pre+CheckPodCRI, p.CRIImageRef)
			if p.CRIImageRef == "" {
				c.Got = "no running container"
			}
			checks = append(checks, c)
		}
	}
	return checks
}

// RunningPodContainer is the newest running container named container
// of the pod namespace/name on the node's runtime, with its status; nil
// when none runs.
func RunningPodContainer(ctx context.Context, rt Runtime, namespace, pod, container string) (*cri.Status, error) {
	cts, err := rt.Containers(ctx, cri.Filter{PodNamespace: namespace, PodName: pod, Container: container, RunningOnly: true})
	if err != nil {
		return nil, err
	}
	for _, ct := range cts {
		if ct.PodName != pod || !ct.Running() {
			continue
		}
		return rt.ContainerStatus(ctx, ct.ID)
	}
	return nil, nil
}

// notAddon is the observation addon sources give for other components.
func notAddon(t Target) (addon.Workload, Observation, bool) {
	w, ok := addon.Lookup(t.Component.Name)
	if !ok {
		return w, Observation{Note: t.Component.Name + " is not an addon", NotApplicable: true}, true
	}
	return w, Observation{}, false
}

// absent is the observation of an addon the cluster does not run.
func absent(w addon.Workload) Observation {
	return Observation{Note: "not on the cluster (no " + w.String() + ")", NotApplicable: true, Absent: true}
}

// Workload is the image an addon's workload names in its pod template.
type Workload struct {
	Client kubernetes.Interface
}

func (Workload) Name() string { return "workload" }

func (s Workload) Observe(ctx context.Context, t Target) (Observation, error) {
	w, ob, skip := notAddon(t)
	if skip {
		return ob, nil
	}
	st, err := addon.Get(ctx, s.Client, w)
	if err != nil {
		return Observation{Note: "API not reachable: " + err.Error()}, nil
	}
	if st == nil {
		return absent(w), nil
	}
	img := st.Image()
	ob = Observation{Ref: w.String(), Digest: Of(img)}
	if img == "" {
		ob.Note = "no container " + w.Container
	} else if ob.Digest == "" {
		ob.Note = "names " + img + " by tag, not by digest"
	}
	return ob, nil
}

// Debugging says the addon's workload runs its container under a
// debugger (`devk debug`): its debug image is the one to compare with.
func (s Workload) Debugging(t Target) bool {
	w, _, skip := notAddon(t)
	if skip {
		return false
	}
	st, err := addon.Get(context.Background(), s.Client, w)
	return err == nil && st != nil && st.Debugging()
}

// Pods is the digest every pod of an addon runs: each pod's imageID and,
// for the pods on this node, the running container's CRI imageRef. Pods
// that disagree, or do not run, give no digest and a note naming them.
type Pods struct {
	Client   kubernetes.Interface
	Runtime  Runtime
	NodeName string
	// Others are the runtimes of the cluster's other nodes, by node
	// name: their pods' CRI imageRefs are checked too.
	Others NodeRuntimes
}

// NodeRuntimes are CRI runtimes by the name of the node they serve.
type NodeRuntimes map[string]Runtime

// runtimes are every node runtime s can ask.
func (s Pods) runtimes() NodeRuntimes {
	out := NodeRuntimes{}
	for n, rt := range s.Others {
		out[n] = rt
	}
	if s.Runtime != nil && s.NodeName != "" {
		out[s.NodeName] = s.Runtime
	}
	return out
}

func (Pods) Name() string { return "pods" }

func (s Pods) Observe(ctx context.Context, t Target) (Observation, error) {
	w, ob, skip := notAddon(t)
	if skip {
		return ob, nil
	}
	v, err := ObserveAddon(ctx, s.Client, s.runtimes(), w)
	if err != nil {
		return Observation{Note: "API not reachable: " + err.Error()}, nil
	}
	if !v.Present {
		return absent(w), nil
	}
	if len(v.Pods) == 0 {
		return Observation{Ref: w.String(), Note: "no pods"}, nil
	}
	seen := map[string][]string{} // digest -> where
	local := 0
	for _, p := range v.Pods {
		seen[Of(p.ImageID)] = append(seen[Of(p.ImageID)], "pod "+p.Name)
		if p.Local {
			local++
			seen[Of(p.CRIImageRef)] = append(seen[Of(p.CRIImageRef)], "CRI of "+p.Name)
		}
	}
	ob = Observation{Ref: fmt.Sprintf("%d pods, %d on nodes whose runtime was asked (CRI checked)", len(v.Pods), local)}
	if _, none := seen[""]; len(seen) == 1 && !none {
		for d := range seen {
			ob.Digest = d
		}
		return ob, nil
	}
	var parts []string
	for d, where := range seen {
		if d == "" {
			d = "nothing running"
		}
		parts = append(parts, strings.Join(where, ", ")+": "+d)
	}
	sort.Strings(parts)
	ob.Note = "pods disagree: " + strings.Join(parts, "; ")
	return ob, nil
}
