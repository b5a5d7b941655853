package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"

	"github.com/devk/devk/agent"
	"github.com/devk/devk/agent/loader"
	"github.com/devk/devk/image"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/progress"
)

// LoadNeeds are what `--load` takes besides the agents' pods: the nodes'
// images and architecture, the loader's ConfigMap, attaching to a load
// agent's stdin and forwarding a port to its registry.
var LoadNeeds = []Need{
	{Verb: "list", Resource: "nodes"},
	{Verb: "create", Resource: "configmaps", Namespace: Namespace},
	{Verb: "list", Resource: "configmaps", Namespace: Namespace},
	{Verb: "delete", Resource: "configmaps", Namespace: Namespace},
	{Verb: "create", Resource: "pods", Subresource: "attach", Namespace: Namespace},
	{Verb: "create", Resource: "pods", Subresource: "portforward", Namespace: Namespace},
}

// LoadDeadline bounds a load agent's pod: the client's pushes to it and
// the runtime's pulls.
const LoadDeadline = 10 * time.Minute

// The loader's ConfigMap: its key, and where a bootstrapping pod mounts
// it.
const (
	loaderKey = "load"
	loaderDir = "/devk-loader"
)

// loadState is a session's --load: the agent image every node gets from
// devk itself, and the nodes known to have it.
type loadState struct {
	self  string // the running devk, which a node without it is sent
	agent v1.Image
	// cred is the write credential of every load registry of the run.
	cred string
	mu   sync.Mutex
	// has are the nodes that have the agent image; loader says the
	// loader's ConfigMap was made (Close deletes it).
	has    map[string]bool
	loader bool
}

// LoadImage is one image a load puts on a node: Name is its repository
// there (kube-apiserver), Image is read from the client's registry.
type LoadImage struct {
	Name  string
	Image v1.Image
}

// LoadedRef is how a node's runtime names an image loaded as repository
// name with digest d.
func LoadedRef(name, d string) string { return agent.LoadRegistry + "/" + name + "@" + d }

// setLoad makes the session's agent image devk's own, loaded into each
// node's runtime as it is first needed there.
func (s *Session) setLoad(home, version string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	img, err := agent.Image(layout.HomeFiles(home).AgentCache(), self, version)
	if err != nil {
		return err
	}
	d, err := img.Digest()
	if err != nil {
		return err
	}
	s.loading = &loadState{self: self, agent: img, cred: image.NewSecret(), has: map[string]bool{}}
	s.image = LoadedRef(agent.Repo, d.String())
	return nil
}

// ensureAgent loads the agent image onto node unless the node has it.
func (s *Session) ensureAgent(ctx context.Context, node string) error {
	s.loading.mu.Lock()
	has := s.loading.has[node]
	s.loading.mu.Unlock()
	if has {
		return nil
	}
	n, err := s.node(ctx, node)
	if err != nil {
		return err
	}
	if nodeHas(n, s.image) {
		s.loading.mu.Lock()
		s.loading.has[node] = true
		s.loading.mu.Unlock()
		return nil
	}
	kf, err := s.kubelet(ctx, node)
	if err != nil {
		return err
	}
	_, err = s.Load(ctx, node, kf.CRISocket, nil)
	return err
}

// node is node's Node, by a list (LoadNeeds have no get).
func (s *Session) node(ctx context.Context, node string) (*corev1.Node, error) {
	n, err := s.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", node).String()})
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", node, err)
	}
	if len(n.Items) != 1 {
		return nil, fmt.Errorf("no node %s", node)
	}
	return &n.Items[0], nil
}

// nodeHas says node n's status lists image ref among its runtime's
// images (the kubelet reports them within seconds of a change).
func nodeHas(n *corev1.Node, ref string) bool {
	for _, img := range n.Status.Images {
		if slices.Contains(img.Names, ref) {
			return true
		}
	}
	return false
}

// Load puts images, and devk's agent image, into node's runtime (socket)
// with no registry the node reaches: a load agent there (started from
// devk's agent image if the node has it, else by the loader with devk's
// binary on its stdin) serves a registry on the node's loopback, devk
// pushes to it through a port-forward, and the agent pulls each through
// the runtime by digest. It returns each image's name on the node
// (LoadedRef), in order.
func (s *Session) Load(ctx context.Context, node, socket string, imgs []LoadImage) ([]string, error) {
	if s.loading == nil || s.cfg == nil {
		return nil, errors.New("--load needs a session through a kubeconfig")
	}
	start, step := time.Now(), node+"/load"
	s.rep.Start(step)
	refs, sent, size, err := s.loadOnto(ctx, node, socket, imgs)
	if err != nil {
		s.rep.Fail(step, time.Since(start), err)
		return nil, err
	}
	s.loading.mu.Lock()
	s.loading.has[node] = true
	s.loading.mu.Unlock()
	detail := fmt.Sprintf("%d images (%s) sent to its runtime, as %s/…", sent, progress.Size(size), agent.LoadRegistry)
	if present := len(imgs) + 1 - sent; present > 0 {
		detail += fmt.Sprintf("; %d it had", present)
	}
	s.rep.Done(step, time.Since(start), detail)
	return refs, nil
}

// loadOnto is Load's work: the names of imgs on the node, how many
// images it sent (the agent's among them when the node lacked it) and
// their size.
func (s *Session) loadOnto(ctx context.Context, node, socket string, imgs []LoadImage) ([]string, int, int64, error) {
	n, err := s.node(ctx, node)
	if err != nil {
		return nil, 0, 0, err
	}
	// What the node lacks: its status lists what its runtime has.
	var all []LoadImage
	var refs []string
	for _, li := range imgs {
		d, err := li.Image.Digest()
		if err != nil {
			return nil, 0, 0, err
		}
		ref := LoadedRef(li.Name, d.String())
		refs = append(refs, ref)
		if !nodeHas(n, ref) {
			all = append(all, li)
		}
	}
	boot := ""
	if !nodeHas(n, s.image) {
		all = append(all, LoadImage{Name: agent.Repo, Image: s.loading.agent})
		if boot, err = bootImage(n); err != nil {
			return nil, 0, 0, err
		}
	}
	if len(all) == 0 {
		return refs, 0, 0, nil
	}
	t := agent.Task{Kind: agent.KindLoad, Load: &agent.LoadTask{CRISocket: socket}}
	pod, err := s.PodFor(node, t)
	if err != nil {
		return nil, 0, 0, err
	}
	if boot != "" {
		if err := s.ensureLoader(ctx); err != nil {
			return nil, 0, 0, err
		}
		bootstrap(pod, boot, s.loaderName())
	}
	pods := s.cs.CoreV1().Pods(Namespace)
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return nil, 0, 0, fmt.Errorf("node %s: make the load agent's pod %s/%s: %w", node, Namespace, pod.Name, err)
	}
	defer func() { _ = pods.Delete(context.WithoutCancel(ctx), pod.Name, metav1.DeleteOptions{}) }()
	if _, err := s.waitPod(ctx, node, pod.Name, func(p *corev1.Pod) bool { return p.Status.Phase != corev1.PodPending }); err != nil {
		return nil, 0, 0, err
	}
	// The agent's stdin: devk itself for the loader, then the
	// credential; the references to pull once pushed.
	pr, pw := io.Pipe()
	attached := make(chan error, 1)
	go func() { attached <- s.attach(ctx, pod.Name, pr) }()
	fail := func(err error) ([]string, int, int64, error) {
		pw.CloseWithError(err)
		return nil, 0, 0, fmt.Errorf("node %s: %w", node, err)
	}
	if boot != "" {
		if err := s.sendSelf(pw); err != nil {
			return fail(fmt.Errorf("send devk to the loader: %w", err))
		}
	}
	enc := json.NewEncoder(pw)
	if err := enc.Encode(agent.LoadInput{Credential: s.loading.cred}); err != nil {
		return fail(err)
	}
	if err := s.waitServing(ctx, node, pod.Name); err != nil {
		return fail(err)
	}
	pushed, size, err := s.pushThrough(ctx, pod.Name, all)
	if err != nil {
		return fail(err)
	}
	if err := enc.Encode(agent.LoadInput{Pull: pushed}); err != nil {
		return fail(err)
	}
	pw.Close()
	if err := <-attached; err != nil {
		return nil, 0, 0, fmt.Errorf("node %s: %w", node, err)
	}
	ended, err := s.waitPod(ctx, node, pod.Name, podEnded)
	if err != nil {
		return nil, 0, 0, err
	}
	logs, err := pods.GetLogs(pod.Name, &corev1.PodLogOptions{Container: "agent"}).DoRaw(ctx)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("node %s: read the load agent's log: %w", node, err)
	}
	if _, err := result(node, ended, logs); err != nil {
		return nil, 0, 0, err
	}
	return refs, len(all), size, nil
}

// bootImage is the image a pod starts devk's loader from on node n,
// which lacks devk's agent image: one the node has (its status lists
// them), by digest, the smallest (its content is not used: the loader
// replaces its command).
func bootImage(n *corev1.Node) (string, error) {
	if arch := n.Status.NodeInfo.Architecture; arch != "" {
		if _, err := loader.ELF(arch); err != nil {
			return "", fmt.Errorf("node %s: %w", n.Name, err)
		}
	}
	best, size := "", int64(-1)
	for _, img := range n.Status.Images {
		for _, name := range img.Names {
			if strings.Contains(name, "@sha256:") && (size < 0 || img.SizeBytes < size) {
				best, size = name, img.SizeBytes
			}
		}
	}
	if best == "" {
		return "", fmt.Errorf("node %s lists no image by digest that devk's loader could start from (its status.images): --load needs one image on the node; or give --registry", n.Name)
	}
	return best, nil
}

// bootstrap makes pod start the agent without its image: from image, an
// image the node has (never pulled), with the loader (from ConfigMap cm)
// as its command, reading devk from its stdin.
func bootstrap(pod *corev1.Pod, image, cm string) {
	mode := int32(0o555)
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "loader", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: cm}, DefaultMode: &mode}}})
	c := &pod.Spec.Containers[0]
	c.Image, c.ImagePullPolicy = image, corev1.PullNever
	c.Command = []string{path.Join(loaderDir, loaderKey), "agent"}
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "loader", MountPath: loaderDir, ReadOnly: true})
}

// loaderName is the run's loader ConfigMap.
func (s *Session) loaderName() string { return "devk-loader-" + s.run }

// ensureLoader makes the run's loader ConfigMap, once.
func (s *Session) ensureLoader(ctx context.Context) error {
	s.loading.mu.Lock()
	defer s.loading.mu.Unlock()
	if s.loading.loader {
		return nil
	}
	elf, err := loader.ELF("amd64")
	if err != nil {
		return err
	}
	cm := &corev1.ConfigMap{ObjectMeta: s.runMeta(Namespace), BinaryData: map[string][]byte{loaderKey: elf}}
	cm.Name = s.loaderName()
	if _, err := s.cs.CoreV1().ConfigMaps(Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("make the loader's ConfigMap %s/%s: %w", Namespace, cm.Name, err)
	}
	s.loading.loader = true
	return nil
}

// closeLoad deletes the run's loader ConfigMap.
func (s *Session) closeLoad(ctx context.Context) error {
	if s.loading == nil || !s.loading.loader {
		return nil
	}
	s.loading.loader = false
	return ignoreNotFound(s.cs.CoreV1().ConfigMaps(Namespace).Delete(ctx, s.loaderName(), metav1.DeleteOptions{}))
}

// deleteLostLoaders deletes loader ConfigMaps of earlier runs older than
// a load's deadline: no pod of theirs can still be starting from them.
func (s *Session) deleteLostLoaders(ctx context.Context) (int, error) {
	cms, err := s.cs.CoreV1().ConfigMaps(Namespace).List(ctx, metav1.ListOptions{LabelSelector: labels.Set{LabelManagedBy: ManagedBy}.String()})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, cm := range cms.Items {
		if cm.Labels[LabelRun] == s.run || time.Since(cm.CreationTimestamp.Time) < LoadDeadline+time.Minute {
			continue
		}
		if err := ignoreNotFound(s.cs.CoreV1().ConfigMaps(Namespace).Delete(ctx, cm.Name, metav1.DeleteOptions{})); err != nil {
			return n, fmt.Errorf("delete the loader ConfigMap %s/%s an earlier devk left: %w", Namespace, cm.Name, err)
		}
		n++
	}
	return n, nil
}

// sendSelf writes the running devk to w as the loader reads it.
func (s *Session) sendSelf(w io.Writer) error {
	f, err := os.Open(s.loading.self)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	return loader.Send(w, f, fi.Size())
}

// streamConfig is the session's config for a stream (attach, exec, a
// port-forward): bounded by its context and the pod's deadline, not by a
// request timeout.
func (s *Session) streamConfig() *rest.Config {
	cfg := rest.CopyConfig(s.cfg)
	cfg.Timeout = 0
	return cfg
}

// attach writes in to agent pod name's stdin until in ends.
func (s *Session) attach(ctx context.Context, name string, in io.Reader) error {
	req := s.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(Namespace).Name(name).SubResource("attach").
		VersionedParams(&corev1.PodAttachOptions{Container: "agent", Stdin: true}, scheme.ParameterCodec)
	exec, err := remotecommand.NewSPDYExecutor(s.streamConfig(), "POST", req.URL())
	if err != nil {
		return err
	}
	if err := exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: in}); err != nil {
		return fmt.Errorf("attach to the load agent %s/%s: %w", Namespace, name, err)
	}
	return nil
}

// registryWait is how long devk waits for a load agent's registry to
// serve.
const registryWait = time.Minute

// waitServing waits until load agent pod name says its registry serves
// (a Line whose Info says so), or ends (its result the error).
func (s *Session) waitServing(ctx context.Context, node, name string) error {
	pods := s.cs.CoreV1().Pods(Namespace)
	var ended *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, podPoll/5, registryWait, true, func(ctx context.Context) (bool, error) {
		logs, err := pods.GetLogs(name, &corev1.PodLogOptions{Container: "agent"}).DoRaw(ctx)
		if err == nil && bytes.Contains(logs, []byte(agent.LoadServing)) {
			return true, nil
		}
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err == nil && podEnded(p) {
			ended = p
			return true, nil
		}
		return false, nil
	})
	if ended != nil {
		logs, _ := pods.GetLogs(name, &corev1.PodLogOptions{Container: "agent"}).DoRaw(ctx)
		_, err = result(node, ended, logs)
		if err == nil {
			err = errors.New("the load agent ended before it served")
		}
		return err
	}
	if err != nil {
		return fmt.Errorf("the load agent %s/%s did not serve its registry within %s: %w", Namespace, name, registryWait, err)
	}
	return nil
}

// pushThrough pushes imgs to load agent pod name's registry through a
// port-forward to it and returns their names on the node and their size.
func (s *Session) pushThrough(ctx context.Context, name string, imgs []LoadImage) ([]string, int64, error) {
	transport, upgrader, err := spdy.RoundTripperFor(s.streamConfig())
	if err != nil {
		return nil, 0, err
	}
	url := s.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(Namespace).Name(name).SubResource("portforward").URL()
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, "POST", url)
	stop, ready := make(chan struct{}), make(chan struct{})
	defer close(stop)
	var errs bytes.Buffer
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", agent.LoadPort)}, stop, ready, io.Discard, &errs)
	if err != nil {
		return nil, 0, err
	}
	forwarded := make(chan error, 1)
	go func() { forwarded <- fw.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-forwarded:
		return nil, 0, fmt.Errorf("forward a port to the load agent %s/%s: %v %s", Namespace, name, err, strings.TrimSpace(errs.String()))
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	}
	ports, err := fw.GetPorts()
	if err != nil || len(ports) != 1 {
		return nil, 0, fmt.Errorf("the port-forward to the load agent %s/%s: %v", Namespace, name, err)
	}
	local := fmt.Sprintf("127.0.0.1:%d", ports[0].Local)
	r, err := image.NewRemote(local, image.RemoteOptions{Keychain: loadKeychain{cred: s.loading.cred}})
	if err != nil {
		return nil, 0, err
	}
	var refs []string
	var size int64
	for _, li := range imgs {
		d, err := li.Image.Digest()
		if err != nil {
			return nil, 0, err
		}
		repo, err := r.Repository(li.Name)
		if err != nil {
			return nil, 0, err
		}
		if err := r.Push(ctx, repo.Digest(d.String()), li.Image); err != nil {
			return nil, 0, fmt.Errorf("push %s to the node's load registry: %w", li.Name, err)
		}
		n, err := imageSize(li.Image)
		if err != nil {
			return nil, 0, err
		}
		size += n
		refs = append(refs, LoadedRef(li.Name, d.String()))
	}
	return refs, size, nil
}

// imageSize is what img's manifest, config and layers take.
func imageSize(img v1.Image) (int64, error) {
	m, err := img.Manifest()
	if err != nil {
		return 0, err
	}
	n := m.Config.Size
	for _, l := range m.Layers {
		n += l.Size
	}
	return n, nil
}

// loadKeychain gives a load registry's write credential.
type loadKeychain struct{ cred string }

func (k loadKeychain) Resolve(authn.Resource) (authn.Authenticator, error) {
	return &authn.Basic{Username: image.RegistryUser, Password: k.cred}, nil
}
