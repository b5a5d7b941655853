package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/retry"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	bootstraputil "k8s.io/cluster-bootstrap/token/util"
	bootstrapsecrets "k8s.io/cluster-bootstrap/util/secrets"

	"github.com/devk/devk/internal/kube"
	"github.com/devk/devk/phase"
	"github.com/devk/devk/pki"
)

// Client is a clientset with the super-admin credential (system:masters),
// which works before any RBAC binding exists.
func (c *Cluster) Client() (*kubernetes.Clientset, error) {
	cs, err := kube.Client(c.Kubeconfig("super-admin"), kube.WithTimeout(apiRequestTimeout))
	if err != nil {
		return nil, fmt.Errorf("%w (run `devk up`)", err)
	}
	return cs, nil
}

// applyClusterRoleBinding binds role to subjects. roleRef is immutable: a
// binding of that name to another role is replaced.
func applyClusterRoleBinding(ctx context.Context, cs kubernetes.Interface, name, role string, subjects ...*rbacv1ac.SubjectApplyConfiguration) (bool, error) {
	api := cs.RbacV1().ClusterRoleBindings()
	ref := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}
	replaced := false
	cur, err := api.Get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil && cur.RoleRef != ref:
		if err := api.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return false, err
		}
		replaced = true
	case err != nil && !apierrors.IsNotFound(err):
		return false, err
	}
	changed, err := kube.Apply(ctx, api, name, rbacv1ac.ClusterRoleBinding(name).
		WithRoleRef(rbacv1ac.RoleRef().WithAPIGroup(ref.APIGroup).WithKind(ref.Kind).WithName(ref.Name)).
		WithSubjects(subjects...))
	return changed || replaced, err
}

func group(name string) *rbacv1ac.SubjectApplyConfiguration {
	return rbacv1ac.Subject().WithKind(rbacv1.GroupKind).WithAPIGroup(rbacv1.GroupName).WithName(name)
}

// ConfigMapName is the ConfigMap in kube-system holding cluster.json.
const ConfigMapName = "devk-config"

// adminsGroup is admin.conf's group, which kubeadm binds to cluster-admin.
const adminsGroup = "kubeadm:cluster-admins"

func (c *Cluster) runUploadConfig(ctx context.Context) (phase.Outcome, error) {
	cs, err := c.Client()
	if err != nil {
		return phase.Done, err
	}
	cfg := c.Config
	cfg.LastRun = nil
	data, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return phase.Done, err
	}
	n := 0
	changed, err := kube.Apply(ctx, cs.CoreV1().ConfigMaps(metav1.NamespaceSystem), ConfigMapName,
		corev1ac.ConfigMap(ConfigMapName, metav1.NamespaceSystem).WithData(map[string]string{"cluster.json": string(data)}))
	if err != nil {
		return phase.Done, fmt.Errorf("store the cluster config: %w", err)
	}
	if changed {
		n++
	}
	changed, err = applyClusterRoleBinding(ctx, cs, adminsGroup, "cluster-admin", group(adminsGroup))
	if err != nil {
		return phase.Done, fmt.Errorf("bind %s to cluster-admin: %w", adminsGroup, err)
	}
	if changed {
		n++
	}
	return phase.ChangedIf(n > 0, "%d objects written", n), nil
}

const (
	labelControlPlane = "node-role.kubernetes.io/control-plane"
	labelExcludeLB    = "node.kubernetes.io/exclude-from-external-load-balancers"
)

// controlPlanePatch is the strategic merge patch that labels node n
// control-plane and gives it the control-plane NoSchedule taint when
// taint is set, or takes that taint away when not (a single node that
// ran no workload would be no cluster to develop on; kind does the same);
// nil if n is so already. Taints are replaced as a whole list, so the
// patch carries n's resourceVersion: it fails with a conflict, rather
// than drop another taint, if the node changed since it was read.
func controlPlanePatch(n *corev1.Node, taint bool) ([]byte, error) {
	labels := map[string]string{}
	for _, l := range []string{labelControlPlane, labelExcludeLB} {
		if _, ok := n.Labels[l]; !ok {
			labels[l] = ""
		}
	}
	cp := corev1.Taint{Key: labelControlPlane, Effect: corev1.TaintEffectNoSchedule}
	isCP := func(t corev1.Taint) bool { return t.Key == cp.Key && t.Effect == cp.Effect }
	tainted := slices.ContainsFunc(n.Spec.Taints, isCP)
	if len(labels) == 0 && tainted == taint {
		return nil, nil
	}
	meta := map[string]any{"resourceVersion": n.ResourceVersion}
	if len(labels) > 0 {
		meta["labels"] = labels
	}
	patch := map[string]any{"metadata": meta}
	switch {
	case taint && !tainted:
		patch["spec"] = map[string]any{"taints": append(slices.Clone(n.Spec.Taints), cp)}
	case !taint && tainted:
		patch["spec"] = map[string]any{"taints": slices.DeleteFunc(slices.Clone(n.Spec.Taints), isCP)}
	}
	return json.Marshal(patch)
}

func (c *Cluster) runMarkControlPlane(ctx context.Context) (phase.Outcome, error) {
	return c.markControlPlane(ctx, c.firstNode())
}

// markControlPlane labels control-plane node n, and taints it when the
// cluster keeps the taint.
func (c *Cluster) markControlPlane(ctx context.Context, cp node) (phase.Outcome, error) {
	cs, err := c.Client()
	if err != nil {
		return phase.Done, err
	}
	nodes := cs.CoreV1().Nodes()
	name := cp.Name()
	taint := c.Config.KeepTaint
	out := phase.Unchanged("already marked")
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := nodes.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("node %s: %w (is the kubelet running? see %s)", name, err, cp.LogFile("kubelet"))
		}
		patch, err := controlPlanePatch(n, taint)
		if err != nil || patch == nil {
			return err
		}
		if _, err := nodes.Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{FieldManager: kube.FieldManager}); err != nil {
			return err
		}
		if taint {
			out = phase.Changed("labelled and tainted %s (--keep-taint)", name)
		} else {
			out = phase.Changed("labelled %s, no control-plane taint", name)
		}
		return nil
	})
	if err != nil {
		return phase.Done, fmt.Errorf("label node %s: %w", name, err)
	}
	return out, nil
}

const (
	bootstrapGroup       = "system:bootstrappers:kubeadm:default-node-token"
	bootstrapDescription = "devk bootstrap token for joining nodes"
	// clusterInfoRole is the Role (and RoleBinding) that lets anyone read
	// the cluster-info ConfigMap, as kubeadm names it.
	clusterInfoRole = "kubeadm:bootstrap-signer-clusterinfo"
)

// bootstrapToken is a bootstrap token and when it expires.
type bootstrapToken struct {
	ID, Secret string
	Expires    time.Time
}

// reusableToken finds devk's bootstrap token among the Secrets, if one has
// more than bootstrapTokenMinLeft left.
func reusableToken(secrets []corev1.Secret, now time.Time) (bootstrapToken, bool) {
	for _, s := range secrets {
		if bootstrapsecrets.GetData(&s, bootstrapapi.BootstrapTokenDescriptionKey) != bootstrapDescription {
			continue
		}
		id := bootstrapsecrets.GetData(&s, bootstrapapi.BootstrapTokenIDKey)
		secret := bootstrapsecrets.GetData(&s, bootstrapapi.BootstrapTokenSecretKey)
		left, expired := bootstrapsecrets.GetExpiration(&s, now)
		if expired || left <= bootstrapTokenMinLeft || !bootstraputil.IsValidBootstrapToken(bootstraputil.TokenFromIDAndSecret(id, secret)) {
			continue
		}
		return bootstrapToken{ID: id, Secret: secret, Expires: now.Add(left)}, true
	}
	return bootstrapToken{}, false
}

// newBootstrapToken makes a token that expires bootstrapTokenTTL from now.
func newBootstrapToken(now time.Time) (bootstrapToken, error) {
	tok, err := bootstraputil.GenerateBootstrapToken()
	if err != nil {
		return bootstrapToken{}, err
	}
	m := bootstraputil.BootstrapTokenRegexp.FindStringSubmatch(tok)
	if m == nil {
		return bootstrapToken{}, fmt.Errorf("generated bootstrap token has an unexpected form")
	}
	return bootstrapToken{ID: m[1], Secret: m[2], Expires: now.Add(bootstrapTokenTTL)}, nil
}

// secret is the token's Secret as kubeadm makes it, for authentication
// (joining nodes) and signing (cluster-info).
func (t bootstrapToken) secret() *corev1ac.SecretApplyConfiguration {
	return t.secretFor(bootstrapDescription, map[string][]byte{
		bootstrapapi.BootstrapTokenUsageAuthentication: []byte("true"),
		bootstrapapi.BootstrapTokenUsageSigningKey:     []byte("true"),
		bootstrapapi.BootstrapTokenExtraGroupsKey:      []byte(bootstrapGroup),
	})
}

// secretFor is the token's Secret with its description and usages.
func (t bootstrapToken) secretFor(description string, usages map[string][]byte) *corev1ac.SecretApplyConfiguration {
	data := map[string][]byte{
		bootstrapapi.BootstrapTokenDescriptionKey: []byte(description),
		bootstrapapi.BootstrapTokenIDKey:          []byte(t.ID),
		bootstrapapi.BootstrapTokenSecretKey:      []byte(t.Secret),
		bootstrapapi.BootstrapTokenExpirationKey:  []byte(t.Expires.UTC().Format(time.RFC3339)),
	}
	maps.Copy(data, usages)
	return corev1ac.Secret(bootstraputil.BootstrapTokenSecretName(t.ID), metav1.NamespaceSystem).
		WithType(bootstrapapi.SecretTypeBootstrapToken).WithData(data)
}

// runBootstrapToken makes what kubeadm's bootstrap-token phase makes: a
// token (kept while it has more than bootstrapTokenMinLeft left), the
// RBAC that lets its holders post node CSRs and get them approved,
// auto-approval of node certificate rotation, and the cluster-info
// ConfigMap in kube-public that joining nodes read anonymously (the
// controller-manager's bootstrapsigner adds its signatures).
func (c *Cluster) runBootstrapToken(ctx context.Context) (phase.Outcome, error) {
	cs, err := c.Client()
	if err != nil {
		return phase.Done, err
	}
	list, err := cs.CoreV1().Secrets(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{FieldSelector: "type=" + string(bootstrapapi.SecretTypeBootstrapToken)})
	if err != nil {
		return phase.Done, fmt.Errorf("list bootstrap tokens: %w", err)
	}
	now := time.Now()
	tok, ok := reusableToken(list.Items, now)
	if !ok {
		if tok, err = newBootstrapToken(now); err != nil {
			return phase.Done, err
		}
	}
	n := 0
	count := func(changed bool, err error) error {
		if err != nil {
			return err
		}
		if changed {
			n++
		}
		return nil
	}
	name := bootstraputil.BootstrapTokenSecretName(tok.ID)
	if err := count(kube.Apply(ctx, cs.CoreV1().Secrets(metav1.NamespaceSystem), name, tok.secret())); err != nil {
		return phase.Done, fmt.Errorf("the bootstrap token: %w", err)
	}
	bindings := []struct {
		name, role string
		subject    *rbacv1ac.SubjectApplyConfiguration
	}{
		{"kubeadm:kubelet-bootstrap", "system:node-bootstrapper", group(bootstrapGroup)},
		{"kubeadm:node-autoapprove-bootstrap", "system:certificates.k8s.io:certificatesigningrequests:nodeclient", group(bootstrapGroup)},
		{"kubeadm:node-autoapprove-certificate-rotation", "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", group("system:nodes")},
	}
	for _, b := range bindings {
		if err := count(applyClusterRoleBinding(ctx, cs, b.name, b.role, b.subject)); err != nil {
			return phase.Done, fmt.Errorf("RBAC %s: %w", b.name, err)
		}
	}
	info, err := c.clusterInfo()
	if err != nil {
		return phase.Done, err
	}
	// Only the kubeconfig key is devk's: the jws-kubeconfig-* keys the
	// bootstrapsigner adds stay.
	cm := corev1ac.ConfigMap(bootstrapapi.ConfigMapClusterInfo, metav1.NamespacePublic).WithData(map[string]string{bootstrapapi.KubeConfigKey: string(info)})
	if err := count(kube.Apply(ctx, cs.CoreV1().ConfigMaps(metav1.NamespacePublic), bootstrapapi.ConfigMapClusterInfo, cm)); err != nil {
		return phase.Done, fmt.Errorf("cluster-info ConfigMap: %w", err)
	}
	role := rbacv1ac.Role(clusterInfoRole, metav1.NamespacePublic).WithRules(rbacv1ac.PolicyRule().
		WithAPIGroups("").WithResources("configmaps").WithResourceNames(bootstrapapi.ConfigMapClusterInfo).WithVerbs("get"))
	if err := count(kube.Apply(ctx, cs.RbacV1().Roles(metav1.NamespacePublic), clusterInfoRole, role)); err != nil {
		return phase.Done, fmt.Errorf("cluster-info Role: %w", err)
	}
	binding := rbacv1ac.RoleBinding(clusterInfoRole, metav1.NamespacePublic).
		WithRoleRef(rbacv1ac.RoleRef().WithAPIGroup(rbacv1.GroupName).WithKind("Role").WithName(clusterInfoRole)).
		WithSubjects(rbacv1ac.Subject().WithKind(rbacv1.UserKind).WithAPIGroup(rbacv1.GroupName).WithName("system:anonymous"))
	if err := count(kube.Apply(ctx, cs.RbacV1().RoleBindings(metav1.NamespacePublic), clusterInfoRole, binding)); err != nil {
		return phase.Done, fmt.Errorf("cluster-info RoleBinding: %w", err)
	}
	token := bootstraputil.TokenFromIDAndSecret(tok.ID, tok.Secret)
	if _, err := writeIfChanged(c.BootstrapToken(), []byte(token+"\n"), 0o600, ""); err != nil {
		return phase.Done, err
	}
	return phase.ChangedIf(n > 0, "token %s.… (%d objects written)", tok.ID, n), nil
}

// clusterInfo is the kubeconfig of cluster-info: the API server's URL and
// the cluster CA, no user.
func (c *Cluster) clusterInfo() ([]byte, error) {
	caPEM, err := os.ReadFile(pki.CertPath(c.PKI(), pki.CAName))
	if err != nil {
		return nil, err
	}
	info := clientcmdapi.NewConfig()
	info.Clusters[""] = &clientcmdapi.Cluster{Server: c.Config.APIServerURL(), CertificateAuthorityData: caPEM}
	return clientcmd.Write(*info)
}
