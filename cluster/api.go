package cluster

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/devk/devk/cluster/pki"
	"github.com/devk/devk/internal/fileutil"
	"github.com/devk/devk/internal/supervise"
)

// healthz GETs a health endpoint on loopback (self-signed serving
// certificates are not checked: the endpoint is this machine's).
func healthz(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	cl := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true}}
	resp, err := cl.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}

// Client is a clientset with the super-admin credential (system:masters),
// which works before any RBAC binding exists.
func (c *Cluster) Client() (*kubernetes.Clientset, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig("super-admin"))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w (run `devk up`)", c.Kubeconfig("super-admin"), err)
	}
	rc.Timeout = 10 * time.Second
	rc.QPS, rc.Burst = 50, 100
	return kubernetes.NewForConfig(rc)
}

// readiness is one check of wait-control-plane.
type readiness struct {
	Name string
	// Log is where to look when it fails.
	Log   func(c *Cluster) string
	Check func(ctx context.Context, c *Cluster, cs *kubernetes.Clientset) error
}

func port(p int) string { return strconv.Itoa(p) }

func checks() []readiness {
	podLog := func(name string) func(c *Cluster) string {
		return func(c *Cluster) string { return c.containerLog(name) }
	}
	return []readiness{
		{"etcd", podLog("etcd"), func(ctx context.Context, c *Cluster, _ *kubernetes.Clientset) error {
			return healthz(ctx, "http://"+c.Config.AdvertiseIP+":"+port(c.Config.Ports.EtcdMetrics)+"/health")
		}},
		{"kube-apiserver", podLog("kube-apiserver"), func(ctx context.Context, c *Cluster, cs *kubernetes.Clientset) error {
			_, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
			return err
		}},
		{"kube-controller-manager", podLog("kube-controller-manager"), func(ctx context.Context, c *Cluster, _ *kubernetes.Clientset) error {
			return healthz(ctx, "https://"+c.Config.AdvertiseIP+":"+port(c.Config.Ports.ControllerManager)+"/healthz")
		}},
		{"kube-scheduler", podLog("kube-scheduler"), func(ctx context.Context, c *Cluster, _ *kubernetes.Clientset) error {
			return healthz(ctx, "https://"+c.Config.AdvertiseIP+":"+port(c.Config.Ports.Scheduler)+"/healthz")
		}},
		{"node", func(c *Cluster) string { return c.LogFile("kubelet") }, func(ctx context.Context, c *Cluster, cs *kubernetes.Clientset) error {
			n, err := cs.CoreV1().Nodes().Get(ctx, c.Config.NodeName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady {
					if cond.Status != corev1.ConditionTrue {
						return fmt.Errorf("node %s not Ready: %s", c.Config.NodeName, cond.Message)
					}
					// A kubelet started by this run must have said so itself,
					// not left over from the one before.
					if !c.kubeletStarted.IsZero() && cond.LastHeartbeatTime.Time.Before(c.kubeletStarted.Truncate(time.Second)) {
						return fmt.Errorf("node %s: no heartbeat from the new kubelet yet", c.Config.NodeName)
					}
					return nil
				}
			}
			return fmt.Errorf("node %s has no Ready condition yet", c.Config.NodeName)
		}},
	}
}

// containerLog is the newest log file of a control-plane container, or
// the kubelet's log when the container never started.
func (c *Cluster) containerLog(name string) string {
	matches, _ := filepath.Glob(filepath.Join(c.PodLogs(), "kube-system_"+name+"-"+c.Config.NodeName+"_*", name, "*.log"))
	newest, newestT := "", time.Time{}
	for _, m := range matches {
		if fi, err := os.Stat(m); err == nil && fi.ModTime().After(newestT) {
			newest, newestT = m, fi.ModTime()
		}
	}
	if newest == "" {
		return c.LogFile("kubelet")
	}
	return newest
}

func (c *Cluster) runWait(ctx context.Context) error {
	cs, err := c.Client()
	if err != nil {
		return err
	}
	t0 := time.Now()
	deadline := t0.Add(c.WaitTimeout)
	pending := checks()
	var took []string
	lastErr := map[string]error{}
	for len(pending) > 0 {
		var still []readiness
		for _, ch := range pending {
			if err := ch.Check(ctx, c, cs); err != nil {
				lastErr[ch.Name] = err
				still = append(still, ch)
				continue
			}
			took = append(took, fmt.Sprintf("%s %.1fs", ch.Name, time.Since(t0).Seconds()))
		}
		pending = still
		if len(pending) == 0 {
			break
		}
		if time.Now().After(deadline) {
			var b strings.Builder
			for _, ch := range pending {
				log := ch.Log(c)
				fmt.Fprintf(&b, "\n%s: %v\n  last lines of %s:\n", ch.Name, lastErr[ch.Name], log)
				for _, l := range strings.Split(supervise.Tail(log, 12), "\n") {
					b.WriteString("    " + l + "\n")
				}
			}
			return fmt.Errorf("the control plane was not ready after %s (raise --wait, or read the logs under %s):%s",
				c.WaitTimeout, c.Logs(), strings.TrimRight(b.String(), "\n"))
		}
		if _, ok := c.Procs().Running("kubelet"); !ok {
			return fmt.Errorf("the kubelet is not running; its log ends:\n%s", supervise.Tail(c.LogFile("kubelet"), 20))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	c.setDetail("wait-control-plane", "%s", strings.Join(took, ", "))
	return nil
}

// apply creates obj, or updates it when it exists and differs.
func applyConfigMap(ctx context.Context, cs *kubernetes.Clientset, cm *corev1.ConfigMap) (bool, error) {
	api := cs.CoreV1().ConfigMaps(cm.Namespace)
	cur, err := api.Get(ctx, cm.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = api.Create(ctx, cm, metav1.CreateOptions{})
		return err == nil, err
	}
	if err != nil {
		return false, err
	}
	if fmt.Sprint(cur.Data) == fmt.Sprint(cm.Data) {
		return false, nil
	}
	cur.Data = cm.Data
	_, err = api.Update(ctx, cur, metav1.UpdateOptions{})
	return err == nil, err
}

func applyClusterRoleBinding(ctx context.Context, cs *kubernetes.Clientset, name, role string, subjects ...rbacv1.Subject) (bool, error) {
	api := cs.RbacV1().ClusterRoleBindings()
	want := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   subjects,
	}
	cur, err := api.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = api.Create(ctx, want, metav1.CreateOptions{})
		return err == nil, err
	}
	if err != nil {
		return false, err
	}
	if fmt.Sprint(cur.Subjects) == fmt.Sprint(subjects) && cur.RoleRef == want.RoleRef {
		return false, nil
	}
	if cur.RoleRef != want.RoleRef { // roleRef is immutable
		if err := api.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			return false, err
		}
		_, err = api.Create(ctx, want, metav1.CreateOptions{})
		return err == nil, err
	}
	cur.Subjects = subjects
	_, err = api.Update(ctx, cur, metav1.UpdateOptions{})
	return err == nil, err
}

func group(name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: name}
}

// ConfigMapName is the ConfigMap in kube-system holding cluster.json.
const ConfigMapName = "devk-config"

func (c *Cluster) runUploadConfig(ctx context.Context) error {
	cs, err := c.Client()
	if err != nil {
		return err
	}
	cfg := c.Config
	cfg.LastRun = nil
	data, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	n := 0
	changed, err := applyConfigMap(ctx, cs, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: ConfigMapName, Namespace: metav1.NamespaceSystem},
		Data:       map[string]string{"cluster.json": string(data)},
	})
	if err != nil {
		return fmt.Errorf("store the cluster config: %w", err)
	}
	if changed {
		n++
	}
	// admin.conf's group, as kubeadm: cluster-admin through RBAC.
	changed, err = applyClusterRoleBinding(ctx, cs, "kubeadm:cluster-admins", "cluster-admin", group("kubeadm:cluster-admins"))
	if err != nil {
		return fmt.Errorf("bind kubeadm:cluster-admins to cluster-admin: %w", err)
	}
	if changed {
		n++
	}
	c.changedIf(n > 0)
	c.setDetail("upload-config", "%d objects written", n)
	return nil
}

const (
	labelControlPlane = "node-role.kubernetes.io/control-plane"
	labelExcludeLB    = "node.kubernetes.io/exclude-from-external-load-balancers"
)

func (c *Cluster) runMarkControlPlane(ctx context.Context) error {
	cs, err := c.Client()
	if err != nil {
		return err
	}
	api := cs.CoreV1().Nodes()
	n, err := api.Get(ctx, c.Config.NodeName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("node %s: %w (is the kubelet running? see %s)", c.Config.NodeName, err, c.LogFile("kubelet"))
	}
	changed := false
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	for _, l := range []string{labelControlPlane, labelExcludeLB} {
		if _, ok := n.Labels[l]; !ok {
			n.Labels[l] = ""
			changed = true
		}
	}
	taint := corev1.Taint{Key: labelControlPlane, Effect: corev1.TaintEffectNoSchedule}
	has := false
	for _, t := range n.Spec.Taints {
		if t.Key == taint.Key && t.Effect == taint.Effect {
			has = true
		}
	}
	if !has {
		n.Spec.Taints = append(n.Spec.Taints, taint)
		changed = true
	}
	if !changed {
		c.setDetail("mark-control-plane", "already marked")
		return nil
	}
	if _, err := api.Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("label and taint node %s: %w", c.Config.NodeName, err)
	}
	c.did("mark-control-plane", "labelled and tainted %s", c.Config.NodeName)
	return nil
}

const (
	bootstrapGroup       = "system:bootstrappers:kubeadm:default-node-token"
	bootstrapDescription = "devk bootstrap token for joining nodes"
)

func randomString(n int) (string, error) {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	for i := range b {
		k, err := rand.Int(rand.Reader, big.NewInt(int64(len(alphabet))))
		if err != nil {
			return "", err
		}
		b[i] = alphabet[k.Int64()]
	}
	return string(b), nil
}

// runBootstrapToken makes what kubeadm's bootstrap-token phase makes: a
// token (kept while it has more than an hour left), the RBAC that lets
// its holders post node CSRs and get them approved, auto-approval of
// node certificate rotation, and the cluster-info ConfigMap in
// kube-public that joining nodes read anonymously.
func (c *Cluster) runBootstrapToken(ctx context.Context) error {
	cs, err := c.Client()
	if err != nil {
		return err
	}
	secrets := cs.CoreV1().Secrets(metav1.NamespaceSystem)
	list, err := secrets.List(ctx, metav1.ListOptions{FieldSelector: "type=bootstrap.kubernetes.io/token"})
	if err != nil {
		return fmt.Errorf("list bootstrap tokens: %w", err)
	}
	token := ""
	for _, s := range list.Items {
		if string(s.Data["description"]) != bootstrapDescription {
			continue
		}
		exp, err := time.Parse(time.RFC3339, string(s.Data["expiration"]))
		if err == nil && time.Until(exp) > time.Hour {
			token = string(s.Data["token-id"]) + "." + string(s.Data["token-secret"])
		}
	}
	n := 0
	if token == "" {
		id, err := randomString(6)
		if err != nil {
			return err
		}
		secret, err := randomString(16)
		if err != nil {
			return err
		}
		_, err = secrets.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-" + id, Namespace: metav1.NamespaceSystem},
			Type:       corev1.SecretTypeBootstrapToken,
			StringData: map[string]string{
				"description":                    bootstrapDescription,
				"token-id":                       id,
				"token-secret":                   secret,
				"expiration":                     time.Now().Add(24 * time.Hour).UTC().Format(time.RFC3339),
				"usage-bootstrap-authentication": "true",
				"usage-bootstrap-signing":        "true",
				"auth-extra-groups":              bootstrapGroup,
			},
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create the bootstrap token: %w", err)
		}
		token = id + "." + secret
		n++
	}
	bindings := []struct {
		name, role string
		subject    rbacv1.Subject
	}{
		{"kubeadm:kubelet-bootstrap", "system:node-bootstrapper", group(bootstrapGroup)},
		{"kubeadm:node-autoapprove-bootstrap", "system:certificates.k8s.io:certificatesigningrequests:nodeclient", group(bootstrapGroup)},
		{"kubeadm:node-autoapprove-certificate-rotation", "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", group("system:nodes")},
	}
	for _, b := range bindings {
		changed, err := applyClusterRoleBinding(ctx, cs, b.name, b.role, b.subject)
		if err != nil {
			return fmt.Errorf("RBAC %s: %w", b.name, err)
		}
		if changed {
			n++
		}
	}
	caPEM, err := os.ReadFile(pki.CertPath(c.PKI(), "ca"))
	if err != nil {
		return err
	}
	info := clientcmdapi.NewConfig()
	info.Clusters[""] = &clientcmdapi.Cluster{Server: c.Config.APIServerURL(), CertificateAuthorityData: caPEM}
	infoBytes, err := clientcmd.Write(*info)
	if err != nil {
		return err
	}
	cur, err := cs.CoreV1().ConfigMaps(metav1.NamespacePublic).Get(ctx, "cluster-info", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = cs.CoreV1().ConfigMaps(metav1.NamespacePublic).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "cluster-info", Namespace: metav1.NamespacePublic},
			Data:       map[string]string{"kubeconfig": string(infoBytes)},
		}, metav1.CreateOptions{})
		n++
	} else if err == nil && cur.Data["kubeconfig"] != string(infoBytes) {
		// Keep the jws-kubeconfig-* signatures the bootstrap signer adds.
		if cur.Data == nil {
			cur.Data = map[string]string{}
		}
		cur.Data["kubeconfig"] = string(infoBytes)
		_, err = cs.CoreV1().ConfigMaps(metav1.NamespacePublic).Update(ctx, cur, metav1.UpdateOptions{})
		n++
	}
	if err != nil {
		return fmt.Errorf("cluster-info ConfigMap: %w", err)
	}
	roles := cs.RbacV1().Roles(metav1.NamespacePublic)
	if _, err := roles.Get(ctx, "kubeadm:bootstrap-signer-clusterinfo", metav1.GetOptions{}); apierrors.IsNotFound(err) {
		_, err = roles.Create(ctx, &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: "kubeadm:bootstrap-signer-clusterinfo", Namespace: metav1.NamespacePublic},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"cluster-info"}, Verbs: []string{"get"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("cluster-info Role: %w", err)
		}
		n++
	} else if err != nil {
		return err
	}
	rbs := cs.RbacV1().RoleBindings(metav1.NamespacePublic)
	if _, err := rbs.Get(ctx, "kubeadm:bootstrap-signer-clusterinfo", metav1.GetOptions{}); apierrors.IsNotFound(err) {
		_, err = rbs.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "kubeadm:bootstrap-signer-clusterinfo", Namespace: metav1.NamespacePublic},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "kubeadm:bootstrap-signer-clusterinfo"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "system:anonymous"}},
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("cluster-info RoleBinding: %w", err)
		}
		n++
	} else if err != nil {
		return err
	}
	if err := writeIfChangedQuiet(filepath.Join(c.Dir, "bootstrap-token"), []byte(token+"\n"), 0o600); err != nil {
		return err
	}
	c.changedIf(n > 0)
	c.setDetail("bootstrap-token", "token %s.… (%d objects written)", token[:6], n)
	return nil
}

func writeIfChangedQuiet(path string, data []byte, perm os.FileMode) error {
	_, err := writeIfChanged(path, data, perm, "")
	return err
}

// runKubeletFinalize does what kubeadm's kubelet-finalize does after TLS
// bootstrap: it puts the kubelet's client credential in the kubelet's
// rotating certificate store (<root-dir>/pki/kubelet-client-current.pem)
// and points kubelet.conf at that file, so rotated certificates are used.
func (c *Cluster) runKubeletFinalize(ctx context.Context) error {
	path := c.Kubeconfig("kubelet")
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return fmt.Errorf("read %s: %w (run `devk up phase kubeconfig/kubelet`)", path, err)
	}
	kctx := cfg.Contexts[cfg.CurrentContext]
	if kctx == nil || cfg.AuthInfos[kctx.AuthInfo] == nil {
		return fmt.Errorf("%s has no current user: run `devk up phase kubeconfig/kubelet`", path)
	}
	ai := cfg.AuthInfos[kctx.AuthInfo]
	store := filepath.Join(c.KubeletRoot(), "pki")
	current := filepath.Join(store, "kubelet-client-current.pem")
	if ai.ClientCertificate == current && ai.ClientKey == current {
		if _, err := os.Stat(current); err == nil {
			c.setDetail("kubelet-finalize", "kubelet.conf uses %s already", current)
			return nil
		}
	}
	if len(ai.ClientCertificateData) == 0 || len(ai.ClientKeyData) == 0 {
		return fmt.Errorf("%s has no embedded client certificate to move: run `devk up phase kubeconfig/kubelet`", path)
	}
	if err := os.MkdirAll(store, 0o755); err != nil {
		return err
	}
	// The kubelet's file store: kubelet-client-<time>.pem holding the
	// certificate and key, and a kubelet-client-current.pem symlink.
	stamp := time.Now().UTC().Format("2006-01-02-15-04-05")
	pemFile := filepath.Join(store, "kubelet-client-"+stamp+".pem")
	pair := append(append([]byte{}, ai.ClientCertificateData...), ai.ClientKeyData...)
	if err := fileutil.WriteAtomic(pemFile, pair, 0o600, ""); err != nil {
		return err
	}
	tmpLink := current + ".tmp"
	_ = os.Remove(tmpLink)
	if err := os.Symlink(filepath.Base(pemFile), tmpLink); err != nil {
		return err
	}
	if err := os.Rename(tmpLink, current); err != nil {
		return err
	}
	ai.ClientCertificateData, ai.ClientKeyData = nil, nil
	ai.ClientCertificate, ai.ClientKey = current, current
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return err
	}
	if err := fileutil.WriteAtomic(path, data, 0o600, ""); err != nil {
		return err
	}
	c.did("kubelet-finalize", "kubelet.conf now uses %s", current)
	return nil
}

// ContextName is the user's kubeconfig context for a cluster.
func ContextName(name string) string { return "devk-" + name }

// runKubeconfigMerge adds cluster, user and context devk-<name> to the
// user's kubeconfig (see userkubeconfig.go) and makes it the current
// context when it was added or changed.
func (c *Cluster) runKubeconfigMerge(ctx context.Context) error {
	admin, err := clientcmd.LoadFromFile(c.Kubeconfig("admin"))
	if err != nil {
		return fmt.Errorf("read %s: %w (run `devk up phase kubeconfig/admin`)", c.Kubeconfig("admin"), err)
	}
	actx := admin.Contexts[admin.CurrentContext]
	if actx == nil || admin.Clusters[actx.Cluster] == nil || admin.AuthInfos[actx.AuthInfo] == nil {
		return fmt.Errorf("%s has no current context: run `devk up phase kubeconfig/admin`", c.Kubeconfig("admin"))
	}
	name := ContextName(c.Config.Name)
	cl, ai := admin.Clusters[actx.Cluster].DeepCopy(), admin.AuthInfos[actx.AuthInfo].DeepCopy()
	cl.LocationOfOrigin, ai.LocationOfOrigin = "", ""
	changed, err := c.editUserKubeconfig(func(cfg *clientcmdapi.Config) bool {
		same := cfg.Clusters[name] != nil && cfg.AuthInfos[name] != nil && cfg.Contexts[name] != nil &&
			cfg.Clusters[name].Server == cl.Server && string(cfg.Clusters[name].CertificateAuthorityData) == string(cl.CertificateAuthorityData) &&
			string(cfg.AuthInfos[name].ClientCertificateData) == string(ai.ClientCertificateData) &&
			cfg.Contexts[name].Cluster == name && cfg.Contexts[name].AuthInfo == name
		if same {
			return false
		}
		cfg.Clusters[name] = cl
		cfg.AuthInfos[name] = ai
		cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
		cfg.CurrentContext = name
		return true
	})
	file := c.UserKubeconfigFile()
	if err != nil {
		return fmt.Errorf("write context %s to %s: %w", name, file, err)
	}
	if !changed {
		c.setDetail("kubeconfig-merge", "context %s in %s unchanged", name, file)
		return nil
	}
	c.did("kubeconfig-merge", "context %s in %s (current; the previous file is %s)", name, file, userKubeconfigBackup(file))
	return nil
}

// removeUserContext takes devk-<name> out of the user's kubeconfig.
func (c *Cluster) removeUserContext() (bool, error) {
	name := ContextName(c.Config.Name)
	if _, err := os.Stat(c.UserKubeconfigFile()); errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	removed, err := c.editUserKubeconfig(func(cfg *clientcmdapi.Config) bool {
		if cfg.Contexts[name] == nil && cfg.Clusters[name] == nil && cfg.AuthInfos[name] == nil {
			return false
		}
		delete(cfg.Contexts, name)
		delete(cfg.Clusters, name)
		delete(cfg.AuthInfos, name)
		if cfg.CurrentContext == name {
			cfg.CurrentContext = ""
		}
		return true
	})
	if err != nil {
		return false, fmt.Errorf("remove context %s from %s: %w", name, c.UserKubeconfigFile(), err)
	}
	return removed, nil
}
