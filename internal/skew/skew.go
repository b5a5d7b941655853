// Package skew is Kubernetes' version skew policy
// (kubernetes.io/releases/version-skew-policy) as checks of a cluster's
// running versions: which component may be how many minor versions from
// the API server, and which upgrades keep every step within that. devk
// upgrade checks its plan with it before anything changes.
package skew

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/version"
)

// The components the policy names.
const (
	APIServer         = "kube-apiserver"
	ControllerManager = "kube-controller-manager"
	Scheduler         = "kube-scheduler"
	Kubelet           = "kubelet"
	KubeProxy         = "kube-proxy"
	Kubectl           = "kubectl"
)

// The policy's limits, in minor versions.
const (
	// APIServerSpread is how far apart the newest and oldest API servers
	// of an HA control plane may be.
	APIServerSpread = 1
	// ControllersBehind is how far the controller-manager and the
	// scheduler may be behind the oldest API server (never ahead).
	ControllersBehind = 1
	// NodeBehind is how far a kubelet or kube-proxy may be behind the
	// oldest API server (never ahead).
	NodeBehind = 3
	// KubectlAround is how far kubectl may be from the API servers,
	// either way.
	KubectlAround = 1
)

// Running is one component's version where it runs.
type Running struct {
	Component string `json:"component"`
	// Node is where it runs ("" for kubectl, which runs here).
	Node    string `json:"node,omitempty"`
	Version string `json:"version"`
}

func (r Running) String() string {
	if r.Node == "" {
		return r.Component + " " + r.Version
	}
	return r.Component + " " + r.Version + " on " + r.Node
}

// Violation is one pair of components outside the policy.
type Violation struct {
	Running Running
	Rule    string
}

func (v Violation) Error() string { return v.Running.String() + ": " + v.Rule }

// Error is every violation of a check.
type Error struct {
	// What says what was checked ("the cluster as it runs", "after
	// kube-apiserver is v1.36.0").
	What       string
	Violations []Violation
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s is outside Kubernetes' version skew policy:", e.What)
	for _, v := range e.Violations {
		b.WriteString("\n  " + v.Error())
	}
	return b.String()
}

// minor parses v ("v1.35.4", "v1.35.4-dirty", "1.35") as major.minor.
func minor(v string) (*version.Version, error) {
	p, err := version.ParseGeneric(v)
	if err != nil {
		return nil, fmt.Errorf("version %q: %w", v, err)
	}
	return version.MajorMinor(p.Major(), p.Minor()), nil
}

// distance is a's minor version minus b's (same major assumed; a
// different major counts as far apart).
func distance(a, b *version.Version) int {
	if a.Major() != b.Major() {
		return 1000 * (int(a.Major()) - int(b.Major()))
	}
	return int(a.Minor()) - int(b.Minor())
}

// Check says whether the components rs run within the policy; what names
// the state in the error.
func Check(what string, rs []Running) error {
	var apis []*version.Version
	parsed := make([]*version.Version, len(rs))
	for i, r := range rs {
		v, err := minor(r.Version)
		if err != nil {
			return fmt.Errorf("%s: %w", r, err)
		}
		parsed[i] = v
		if r.Component == APIServer {
			apis = append(apis, v)
		}
	}
	if len(apis) == 0 {
		return fmt.Errorf("%s: no %s among the versions: the policy is relative to it", what, APIServer)
	}
	oldest := slices.MinFunc(apis, func(a, b *version.Version) int { return distance(a, b) })
	newest := slices.MaxFunc(apis, func(a, b *version.Version) int { return distance(a, b) })
	var vs []Violation
	for i, r := range rs {
		v := parsed[i]
		rule := ""
		switch r.Component {
		case APIServer:
			if d := distance(newest, oldest); d > APIServerSpread && distance(v, oldest) == 0 {
				rule = fmt.Sprintf("%d minor versions behind the newest %s (%s); at most %d", d, APIServer, newest, APIServerSpread)
			}
		case ControllerManager, Scheduler:
			rule = behind(v, oldest, ControllersBehind)
		case Kubelet, KubeProxy:
			rule = behind(v, oldest, NodeBehind)
		case Kubectl:
			if d := distance(v, newest); d > KubectlAround {
				rule = fmt.Sprintf("%d minor versions newer than %s %s; at most %d", d, APIServer, newest, KubectlAround)
			} else if d := distance(oldest, v); d > KubectlAround {
				rule = fmt.Sprintf("%d minor versions older than %s %s; at most %d", d, APIServer, oldest, KubectlAround)
			}
		default:
			return fmt.Errorf("%s: unknown component %q", what, r.Component)
		}
		if rule != "" {
			vs = append(vs, Violation{Running: r, Rule: rule})
		}
	}
	if len(vs) > 0 {
		return &Error{What: what, Violations: vs}
	}
	return nil
}

// behind is the rule v breaks against the oldest API server, when it is
// newer than it or more than limit minor versions older ("" if none).
func behind(v, api *version.Version, limit int) string {
	switch d := distance(api, v); {
	case d < 0:
		return fmt.Sprintf("newer than %s %s: never newer", APIServer, api)
	case d > limit:
		return fmt.Sprintf("%d minor versions behind %s %s; at most %d", d, APIServer, api, limit)
	}
	return ""
}

// Order is the order an upgrade moves components in (kubeadm's): the API
// servers first, then the controllers, then each node's kube-proxy and
// kubelet, kubectl last. A downgrade goes the other way.
var Order = []string{APIServer, ControllerManager, Scheduler, KubeProxy, Kubelet, Kubectl}

// Upgrade checks an upgrade of the components rs to version to in Order,
// one component on one node at a time: the cluster as it runs, and the
// cluster after every step, are within the policy, and to is at most one
// minor version past the oldest API server (no minor version skipped)
// and not older than any component (an upgrade goes forward).
func Upgrade(rs []Running, to string) error {
	if err := Check("the cluster as it runs", rs); err != nil {
		return err
	}
	target, err := minor(to)
	if err != nil {
		return err
	}
	var vs []Violation
	for _, r := range rs {
		v, _ := minor(r.Version) // Check parsed it
		if d := distance(target, v); d > 1 && r.Component == APIServer {
			vs = append(vs, Violation{Running: r, Rule: fmt.Sprintf("%s is %d minor versions past it: upgrade one minor version at a time (to v%s first)", to, d, version.MajorMinor(v.Major(), v.Minor()+1))})
		} else if d < 0 {
			vs = append(vs, Violation{Running: r, Rule: fmt.Sprintf("%s is older: an upgrade goes forward (`devk upgrade --rollback` goes back)", to)})
		}
	}
	if len(vs) > 0 {
		return &Error{What: "the upgrade to " + to, Violations: vs}
	}
	state := slices.Clone(rs)
	for _, comp := range Order {
		for i := range state {
			if state[i].Component != comp {
				continue
			}
			state[i].Version = to
			if err := Check("after "+state[i].String(), state); err != nil {
				return err
			}
		}
	}
	return nil
}

// Minor is v's major.minor ("v1.35"), for messages and comparisons.
func Minor(v string) (string, error) {
	m, err := minor(v)
	if err != nil {
		return "", err
	}
	return "v" + m.String(), nil
}
