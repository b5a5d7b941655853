package remote

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/devk/devk/agent"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/pki"
)

// home makes a devk home with cluster name placed, its CA's certificate
// ca, and returns the home and the cluster's config.
func home(t *testing.T, name string, ca []byte) (string, layout.Config) {
	t.Helper()
	h := t.TempDir()
	cfg := layout.NewConfig(name)
	if err := cfg.PlaceAmong(nil, nil); err != nil {
		t.Fatal(err)
	}
	files := layout.HomeFiles(h).Cluster(name)
	if err := os.MkdirAll(files.FirstNode().PKI(), 0o700); err != nil {
		t.Fatal(err)
	}
	data, err := layout.EncodeConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(files.ConfigFile(), data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pki.CertPath(files.FirstNode().PKI(), pki.CAName), ca, 0o644); err != nil {
		t.Fatal(err)
	}
	return h, cfg
}

// kubeconfig writes a kubeconfig of one context for server with CA ca.
func kubeconfig(t *testing.T, server string, ca []byte) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "t"}
	cfg.Contexts["ctx"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	cfg.CurrentContext = "ctx"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestDecide(t *testing.T) {
	ca := []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
	other := []byte("-----BEGIN CERTIFICATE-----\nMIIC\n-----END CERTIFICATE-----\n")
	withDevk, cfg := home(t, layout.DefaultName, ca)
	withDev2, cfg2 := home(t, "dev2", ca)
	empty := t.TempDir()
	own := kubeconfig(t, cfg.APIServerURL(), ca)
	own2 := kubeconfig(t, cfg2.APIServerURL(), ca)
	sameServerOtherCA := kubeconfig(t, cfg.APIServerURL(), other)
	work := kubeconfig(t, "https://work.example:6443", other)
	t.Setenv("KUBECONFIG", work)
	for _, tc := range []struct {
		name     string
		in       Input
		mode     Mode
		cluster  string
		why, err string
	}{
		{name: "node files", in: Input{Home: withDevk, NodeFlags: []string{"--pki-dir"}}, mode: NodeFiles, why: "the node files --pki-dir name"},
		{name: "node files and via", in: Input{Home: withDevk, NodeFlags: []string{"--pki-dir"}, ViaCluster: true}, err: "--via-cluster and --pki-dir"},
		{name: "name and via", in: Input{Home: withDevk, Name: "x", NameSet: true, ViaCluster: true}, err: "--name and --via-cluster"},
		{name: "name", in: Input{Home: withDevk, Name: "other", NameSet: true}, mode: DevkCluster, cluster: "other"},
		{name: "nothing, default cluster", in: Input{Home: withDevk}, mode: DevkCluster, cluster: layout.DefaultName, why: `devk cluster "devk"`},
		{name: "nothing, no default cluster: $KUBECONFIG", in: Input{Home: empty}, mode: ThroughCluster, why: "server https://work.example:6443 (it is no devk cluster of " + empty},
		{name: "its own kubeconfig", in: Input{Home: withDev2, Kubeconfig: own2}, mode: DevkCluster, cluster: "dev2"},
		{name: "its own kubeconfig, via", in: Input{Home: withDevk, Kubeconfig: own, ViaCluster: true}, mode: ThroughCluster, why: "(--via-cluster)"},
		{name: "a copy in another home", in: Input{Home: empty, Kubeconfig: own}, mode: ThroughCluster},
		{name: "same server, another CA", in: Input{Home: withDevk, Kubeconfig: sameServerOtherCA}, mode: ThroughCluster},
		{name: "nothing, no default cluster, a kubeadm node", in: Input{Home: empty, Local: "a kubeadm node's files (/etc/kubernetes)"}, mode: NodeFiles, why: "on this machine: a kubeadm node's files"},
		{name: "kubeconfig on a kubeadm node", in: Input{Home: empty, Local: "x", Kubeconfig: own}, mode: ThroughCluster},
		{name: "no such kubeconfig", in: Input{Home: empty, Kubeconfig: filepath.Join(empty, "nope")}, err: "nope"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Decide(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.Mode != tc.mode || d.Name != tc.cluster || !strings.Contains(d.Why, tc.why) {
				t.Fatalf("decided %d %q (%s), want %d %q with %q", d.Mode, d.Name, d.Why, tc.mode, tc.cluster, tc.why)
			}
			if (d.Mode == ThroughCluster) != (d.Target != nil) {
				t.Fatalf("mode %d with target %v", d.Mode, d.Target)
			}
		})
	}
	t.Run("nothing anywhere", func(t *testing.T) {
		t.Setenv("KUBECONFIG", filepath.Join(empty, "none"))
		t.Setenv("HOME", empty)
		_, err := Decide(Input{Home: empty})
		if err == nil || !strings.Contains(err.Error(), `no devk cluster "devk"`) || !strings.Contains(err.Error(), "--kubeconfig") {
			t.Fatalf("error %v", err)
		}
	})
}

func session(t *testing.T, objs ...runtime.Object) (*Session, *fake.Clientset) {
	t.Helper()
	cs := fake.NewClientset(objs...)
	s, err := NewSession(cs, progress.Discard())
	if err != nil {
		t.Fatal(err)
	}
	s.SetImage("reg.example/devk-agent@sha256:" + strings.Repeat("a", 64))
	return s, cs
}

// TestPodFor: an agent pod is pinned, tolerates everything, never
// restarts, has no token, is bounded, mounts only its task's paths
// read-only at their own paths and carries its task and labels.
func TestPodFor(t *testing.T) {
	s, _ := session(t)
	// A streaming task: bounded by StreamDeadline, stamped by its client.
	watch := agent.Task{Kind: agent.KindEtcd, Etcd: &agent.EtcdTask{Verb: agent.EtcdWatch, Conn: layout.Etcd{Endpoints: []string{"https://127.0.0.1:2379"}, CACert: "/etc/kubernetes/pki/etcd/ca.crt", Cert: "/etc/kubernetes/pki/apiserver-etcd-client.crt", Key: "/etc/kubernetes/pki/apiserver-etcd-client.key"}}}
	if p, err := s.PodFor("cp1", watch); err != nil || *p.Spec.ActiveDeadlineSeconds != int64(StreamDeadline/time.Second) || p.Annotations[AnnotationHeartbeat] == "" || lostClient(p.Annotations) {
		t.Errorf("a watch's pod: %v; want the stream's deadline and a fresh heartbeat", err)
	}
	task := agent.Task{Kind: agent.KindCerts, Certs: &agent.CertsTask{PKIDir: "/etc/kubernetes/pki", KubeconfigDir: "/etc/kubernetes", ManifestsDir: "/etc/kubernetes/manifests"}}
	node := "a-very-long-node-name-" + strings.Repeat("x", 250)
	p, err := s.PodFor(node, task)
	if err != nil {
		t.Fatal(err)
	}
	if errs := validation.IsDNS1123Subdomain(p.Name); len(errs) > 0 || !strings.HasSuffix(p.Name, "-"+s.run) {
		t.Errorf("pod name %q: %v", p.Name, errs)
	}
	if errs := validation.IsValidLabelValue(p.Labels[LabelNode]); len(errs) > 0 {
		t.Errorf("node label %q: %v", p.Labels[LabelNode], errs)
	}
	spec := p.Spec
	c := spec.Containers[0]
	switch {
	case spec.NodeName != node, p.Namespace != Namespace:
		t.Errorf("pod %s/%s on %q", p.Namespace, p.Name, spec.NodeName)
	case len(spec.Tolerations) != 1 || spec.Tolerations[0].Operator != corev1.TolerationOpExists || spec.Tolerations[0].Key != "":
		t.Errorf("tolerations %+v", spec.Tolerations)
	case spec.RestartPolicy != corev1.RestartPolicyNever, *spec.AutomountServiceAccountToken, spec.ActiveDeadlineSeconds == nil:
		t.Errorf("restart %s, token %v, deadline %v", spec.RestartPolicy, *spec.AutomountServiceAccountToken, spec.ActiveDeadlineSeconds)
	case c.SecurityContext.Privileged != nil, spec.HostNetwork, spec.HostPID:
		t.Errorf("privileged %v, hostNetwork %v, hostPID %v: the certs task needs none", c.SecurityContext.Privileged, spec.HostNetwork, spec.HostPID)
	case c.Image != s.image, !slices.Equal(c.Command, []string{agent.BinaryPath, "agent"}):
		t.Errorf("image %s, command %v", c.Image, c.Command)
	case len(spec.Volumes) != 1 || spec.Volumes[0].HostPath.Path != "/etc/kubernetes" || c.VolumeMounts[0].MountPath != "/etc/kubernetes" || !c.VolumeMounts[0].ReadOnly:
		t.Errorf("volumes %+v, mounts %+v", spec.Volumes, c.VolumeMounts)
	}
	var got agent.Task
	if err := json.Unmarshal([]byte(c.Env[0].Value), &got); err != nil || c.Env[0].Name != agent.EnvTask || *got.Certs != *task.Certs {
		t.Errorf("env %+v: %v", c.Env, err)
	}
	if _, err := s.PodFor("n", agent.Task{Kind: "shell"}); err == nil {
		t.Error("a pod for an unknown task")
	}
}

// TestResult: the result is the last agent line; its error, a non-zero
// exit without one, or no line at all are errors naming the node.
func TestResult(t *testing.T) {
	ended := func(code int32) *corev1.Pod {
		return &corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: "Completed"}}}}}}
	}
	r, err := result("cp1", ended(0), []byte("devk: a warning\n{\"result\":{\"a\":1}}\n"))
	if err != nil || string(r) != `{"a":1}` {
		t.Errorf("result %s, %v", r, err)
	}
	for _, tc := range []struct {
		logs string
		code int32
		want string
	}{
		{`{"error":"no ca.crt"}` + "\n", 1, "node cp1: no ca.crt"},
		{"panic: boom\n", 2, "node cp1: devk's agent ended with no result (exit code 2, Completed):\npanic: boom"},
		{`{"result":{}}` + "\n", 1, "exit code 1"},
	} {
		if _, err := result("cp1", ended(tc.code), []byte(tc.logs)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("logs %q: %v, want %q", tc.logs, err, tc.want)
		}
	}
}

// TestStuck: a pod that cannot pull the agent image is an error that
// says to give a registry the nodes pull from; a pending one is not.
func TestStuck(t *testing.T) {
	waiting := func(reason string) *corev1.Pod {
		return &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{Image: "r/devk-agent@sha256:x", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: "m"}}}}}}
	}
	if err := stuck(waiting("ImagePullBackOff")); err == nil || !strings.Contains(err.Error(), "give --registry a registry the nodes pull from") {
		t.Errorf("ImagePullBackOff: %v", err)
	}
	if err := stuck(waiting("ContainerCreating")); err != nil {
		t.Errorf("ContainerCreating: %v", err)
	}
}

// TestPrepare: devk's namespace is made with Pod Security's privileged
// level; ended agent pods are deleted, running ones, ones another client
// may still be reading and other pods kept;
// a namespace an administrator set to another level is refused with the
// label that would allow it.
func TestPrepare(t *testing.T) {
	old := metav1.NewTime(time.Now().Add(-clientWait - time.Second))
	pod := func(name string, phase corev1.PodPhase, managed bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace, CreationTimestamp: old}, Status: corev1.PodStatus{Phase: phase}}
		if managed {
			p.Labels = map[string]string{LabelManagedBy: ManagedBy}
		}
		return p
	}
	recent := pod("recent", corev1.PodSucceeded, true)
	recent.CreationTimestamp = metav1.Now()
	// Streaming pods: one whose client stamps it, one whose client
	// stopped a while ago (killed).
	watched, orphan := pod("watched", corev1.PodRunning, true), pod("orphan", corev1.PodRunning, true)
	watched.Annotations = map[string]string{AnnotationHeartbeat: time.Now().UTC().Format(time.RFC3339)}
	orphan.Annotations = map[string]string{AnnotationHeartbeat: time.Now().Add(-heartbeatStale - time.Second).UTC().Format(time.RFC3339)}
	s, cs := session(t, pod("done", corev1.PodSucceeded, true), pod("failed", corev1.PodFailed, true), pod("running", corev1.PodRunning, true), pod("theirs", corev1.PodSucceeded, false), recent, watched, orphan)
	ctx := context.Background()
	if err := s.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	ns, err := cs.CoreV1().Namespaces().Get(ctx, Namespace, metav1.GetOptions{})
	if err != nil || ns.Labels[psaEnforce] != "privileged" || ns.Labels[LabelManagedBy] != ManagedBy {
		t.Fatalf("namespace %+v: %v", ns, err)
	}
	pods, _ := cs.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{})
	var left []string
	for _, p := range pods.Items {
		left = append(left, p.Name)
	}
	slices.Sort(left)
	if !slices.Equal(left, []string{"recent", "running", "theirs", "watched"}) {
		t.Errorf("pods left %v, want recent, running, theirs and watched", left)
	}

	s, _ = session(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace, Labels: map[string]string{psaEnforce: "baseline"}}})
	if err := s.Prepare(ctx); err == nil || !strings.Contains(err.Error(), "kubectl label namespace devk-system pod-security.kubernetes.io/enforce=privileged --overwrite") {
		t.Errorf("a baseline namespace: %v", err)
	}
}

// TestCheck: every permission refused is named in one error; all
// allowed is no error.
func TestCheck(t *testing.T) {
	s, cs := session(t)
	cs.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		r := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview)
		ra := r.Spec.ResourceAttributes
		r.Status.Allowed = !(ra.Verb == "create" && (ra.Resource == "namespaces" || ra.Resource == "pods"))
		return true, r, nil
	})
	err := s.Check(context.Background(), append(slices.Clone(AgentNeeds), ControlPlaneNeeds...))
	if err == nil || !strings.Contains(err.Error(), "may not: create namespaces; create pods in namespace devk-system — ") {
		t.Fatalf("error %v", err)
	}
	s, cs = session(t)
	cs.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		r := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview)
		r.Status.Allowed = true
		return true, r, nil
	})
	if err := s.Check(context.Background(), AgentNeeds); err != nil {
		t.Fatal(err)
	}
}

// TestParseConfigz: a kubelet's static pod path and runtime socket from
// its /configz; a kubelet without static pods, or with a runtime that is
// no unix socket, is an error naming the node.
func TestParseConfigz(t *testing.T) {
	kf, err := parseConfigz("cp1", []byte(`{"kubeletconfig":{"staticPodPath":"/etc/kubernetes/manifests/","containerRuntimeEndpoint":"unix:///run/containerd/containerd.sock","cgroupDriver":"systemd"}}`))
	if err != nil || kf.StaticPodPath != "/etc/kubernetes/manifests" || kf.CRISocket != "/run/containerd/containerd.sock" || kf.PodLogsDir != defaultPodLogsDir || kf.Healthz != "http://127.0.0.1:10248/healthz" {
		t.Fatalf("%+v, %v", kf, err)
	}
	// A worker: no static pods, its pods' logs elsewhere, its health on
	// another address.
	kf, err = parseConfigz("w1", []byte(`{"kubeletconfig":{"containerRuntimeEndpoint":"unix:///run/c.sock","podLogsDir":"/srv/pod-logs","healthzBindAddress":"10.250.0.2","healthzPort":10258}}`))
	if err != nil || kf.StaticPodPath != "" || kf.PodLogsDir != "/srv/pod-logs" || kf.Healthz != "http://10.250.0.2:10258/healthz" {
		t.Fatalf("a worker: %+v, %v", kf, err)
	}
	// Health off.
	if kf, err = parseConfigz("w1", []byte(`{"kubeletconfig":{"containerRuntimeEndpoint":"unix:///run/c.sock","healthzPort":0}}`)); err != nil || kf.Healthz != "" {
		t.Fatalf("healthzPort 0: %+v, %v", kf, err)
	}
	for data, want := range map[string]string{
		`{"kubeletconfig":{"staticPodPath":"/m","containerRuntimeEndpoint":"npipe:////./pipe/x"}}`: `node cp1: its kubelet's runtime "npipe:////./pipe/x" is not a unix socket`,
		`not json`: "node cp1: its kubelet's /configz",
	} {
		if _, err := parseConfigz("cp1", []byte(data)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", data, err, want)
		}
	}
}

// TestDoFailedMount: an agent pod whose host path is not on the node is
// reported with the kubelet's event, not after the deadline.
func TestDoFailedMount(t *testing.T) {
	s, cs := session(t)
	cs.PrependReactor("get", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: a.(k8stesting.GetAction).GetName(), Namespace: Namespace}, Status: corev1.PodStatus{Phase: corev1.PodPending}}, nil
	})
	cs.PrependReactor("list", "events", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, &corev1.EventList{Items: []corev1.Event{{Type: corev1.EventTypeWarning, Reason: "FailedMount", Message: `MountVolume.SetUp failed for volume "host-0" : hostPath type check failed: /etc/kubernetes is not a directory`}}}, nil
	})
	task := agent.Task{Kind: agent.KindCerts, Certs: &agent.CertsTask{PKIDir: "/etc/kubernetes/pki", KubeconfigDir: "/etc/kubernetes", ManifestsDir: "/etc/kubernetes/manifests"}}
	_, err := s.Do(context.Background(), "cp1", task)
	if err == nil || !strings.Contains(err.Error(), "FailedMount: MountVolume.SetUp failed") || !strings.Contains(err.Error(), "node cp1") {
		t.Fatalf("error %v", err)
	}
	if pods, _ := cs.Tracker().List(corev1.SchemeGroupVersion.WithResource("pods"), corev1.SchemeGroupVersion.WithKind("Pod"), Namespace); len(pods.(*corev1.PodList).Items) != 0 {
		t.Errorf("the pod was left: %v", pods)
	}
}

// TestCloseAwaitsDeleted: an ended agent's pod, deleted gracefully, is
// still there a moment (the kubelet finishes the deletion); the command
// does not wait for it pod by pod, but Close does, so that nothing of
// the command is still being deleted when it returns. Each of two nodes'
// pods stays for three reads after its deletion.
func TestCloseAwaitsDeleted(t *testing.T) {
	s, cs := session(t)
	terminating := map[string]int{}
	cs.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		terminating[a.(k8stesting.DeleteAction).GetName()] = 3
		return true, nil, nil // graceful: the object stays
	})
	cs.PrependReactor("get", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		name := a.(k8stesting.GetAction).GetName()
		if terminating[name] == 0 {
			return true, nil, apierrors.NewNotFound(corev1.Resource("pods"), name)
		}
		terminating[name]--
		return true, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace}}, nil
	})
	task := agent.Task{Kind: agent.KindCerts, Certs: &agent.CertsTask{PKIDir: "/etc/kubernetes/pki", KubeconfigDir: "/etc/kubernetes", ManifestsDir: "/etc/kubernetes/manifests"}}
	for _, node := range []string{"cp1", "cp2"} {
		_, remove, err := s.start(context.Background(), node, task)
		if err != nil {
			t.Fatal(err)
		}
		remove()
	}
	if len(terminating) != 2 || terminating[podName(string(task.Kind), "cp1", s.run)] != 3 {
		t.Fatalf("after the deletions: %v, want both pods deleted and not waited for yet", terminating)
	}
	s.Close()
	for name, left := range terminating {
		if left != 0 {
			t.Errorf("pod %s: Close returned while it was still there (%d reads left)", name, left)
		}
	}
}
