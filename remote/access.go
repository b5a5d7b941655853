package remote

import (
	"context"
	"fmt"
	"strings"
	"sync"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Need is one permission a command through the cluster uses.
type Need struct {
	Verb, Group, Resource, Subresource, Namespace string
}

func (n Need) String() string {
	res := n.Resource
	if n.Group != "" {
		res += "." + n.Group
	}
	if n.Subresource != "" {
		res += "/" + n.Subresource
	}
	if n.Namespace != "" {
		return n.Verb + " " + res + " in namespace " + n.Namespace
	}
	return n.Verb + " " + res
}

// AgentNeeds are what running agent pods takes: devk's namespace (made
// if missing), pods in it made, watched, read, patched (a streaming
// pod's heartbeat) and deleted, their logs and events.
var AgentNeeds = []Need{
	{Verb: "get", Resource: "namespaces"},
	{Verb: "create", Resource: "namespaces"},
	{Verb: "create", Resource: "pods", Namespace: Namespace},
	{Verb: "get", Resource: "pods", Namespace: Namespace},
	{Verb: "list", Resource: "pods", Namespace: Namespace},
	{Verb: "delete", Resource: "pods", Namespace: Namespace},
	{Verb: "patch", Resource: "pods", Namespace: Namespace},
	{Verb: "get", Resource: "pods", Subresource: "log", Namespace: Namespace},
	{Verb: "list", Resource: "events", Namespace: Namespace},
}

// ControlPlaneNeeds are what finding the control-plane nodes and their
// files takes: the nodes, kube-system's mirror pods, the kubelets'
// /configz through the node proxy.
var ControlPlaneNeeds = []Need{
	{Verb: "list", Resource: "nodes"},
	{Verb: "list", Resource: "pods", Namespace: "kube-system"},
	{Verb: "get", Resource: "nodes", Subresource: "proxy"},
}

// DigestNeeds are what `devk digest verify` reads through the API besides
// the control plane's nodes: the mirror pods, the addons' workloads.
var DigestNeeds = []Need{
	{Verb: "get", Resource: "pods", Namespace: "kube-system"},
	{Verb: "get", Group: "apps", Resource: "deployments", Namespace: "kube-system"},
	{Verb: "get", Group: "apps", Resource: "daemonsets", Namespace: "kube-system"},
}

// Check asks the API server, before anything is made, whether the
// session's credentials may do each of needs (one SelfSubjectAccessReview
// each), and lists every one they may not in one error.
func (s *Session) Check(ctx context.Context, needs []Need) error {
	denied := make([]string, len(needs))
	errs := make([]error, len(needs))
	var wg sync.WaitGroup
	for i, n := range needs {
		wg.Go(func() {
			r, err := s.cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
				ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: n.Namespace, Verb: n.Verb, Group: n.Group, Resource: n.Resource, Subresource: n.Subresource},
			}}, metav1.CreateOptions{})
			switch {
			case err != nil:
				errs[i] = fmt.Errorf("ask whether the credentials may %s: %w", n, err)
			case !r.Status.Allowed:
				denied[i] = n.String()
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	var no []string
	for _, d := range denied {
		if d != "" {
			no = append(no, d)
		}
	}
	if len(no) == 0 {
		return nil
	}
	return fmt.Errorf("your credentials%s may not: %s — devk's node agent needs them (it runs a pod on each node with the node's files mounted); ask for cluster-admin, or run devk on the node", s.whoami(ctx), strings.Join(no, "; "))
}

// whoami is " (USER)" as the API server knows the credentials, or "".
func (s *Session) whoami(ctx context.Context) string {
	r, err := s.cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil || r.Status.UserInfo.Username == "" {
		return ""
	}
	return " (" + r.Status.UserInfo.Username + ")"
}
