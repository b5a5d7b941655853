// Package cri is a small client of a container runtime's CRI socket
// (containerd here): list, inspect, stop and remove pods and containers
// (internal/crilog reads their logs). The kubelet's own labels tie
// containers to pods.
package cri

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Labels the kubelet puts on every container.
const (
	LabelPodName      = "io.kubernetes.pod.name"
	LabelPodNamespace = "io.kubernetes.pod.namespace"
	LabelPodUID       = "io.kubernetes.pod.uid"
	LabelContainer    = "io.kubernetes.container.name"
)

// Client talks to a CRI runtime over its unix socket.
type Client struct {
	Endpoint string
	conn     *grpc.ClientConn
	RT       runtimeapi.RuntimeServiceClient
	Images   runtimeapi.ImageServiceClient
}

// Dial connects to endpoint (a socket path or unix:// URL). gRPC connects
// lazily; Version checks that something answers.
func Dial(endpoint string) (*Client, error) {
	target := endpoint
	if !strings.HasPrefix(target, "unix://") {
		target = "unix://" + target
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20)))
	if err != nil {
		return nil, fmt.Errorf("CRI socket %s: %w", endpoint, err)
	}
	return &Client{Endpoint: endpoint, conn: conn, RT: runtimeapi.NewRuntimeServiceClient(conn), Images: runtimeapi.NewImageServiceClient(conn)}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Version returns "name version" of the runtime.
func (c *Client) Version(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, versionTimeout)
	defer cancel()
	v, err := c.RT.Version(ctx, &runtimeapi.VersionRequest{})
	if err != nil {
		return "", fmt.Errorf("CRI runtime at %s does not answer: %w (is containerd running? pass --cri-socket)", c.Endpoint, err)
	}
	return v.RuntimeName + " " + v.RuntimeVersion, nil
}

// Answers is nil when a CRI runtime answers on endpoint, else why not.
func Answers(ctx context.Context, endpoint string) error {
	rt, err := Dial(endpoint)
	if err != nil {
		return err
	}
	defer rt.Close()
	_, err = rt.Version(ctx)
	return err
}

// Container is what devk needs of one container.
type Container struct {
	ID           string
	Name         string
	PodName      string
	PodNamespace string
	PodUID       string
	PodSandboxID string
	State        runtimeapi.ContainerState
	// ImageRef is the digest reference of the image the container runs.
	ImageRef  string
	Attempt   uint32
	CreatedAt time.Time
}

// Running reports whether the container is running.
func (c Container) Running() bool { return c.State == runtimeapi.ContainerState_CONTAINER_RUNNING }

// StateRunning is the StateName of a running container.
const StateRunning = "running"

// StateName is "running" (StateRunning), "exited", ….
func (c Container) StateName() string {
	return strings.ToLower(strings.TrimPrefix(c.State.String(), "CONTAINER_"))
}

// Filter selects containers; empty fields match anything.
type Filter struct {
	PodName      string
	PodNamespace string
	Container    string
	RunningOnly  bool
}

// Containers lists containers matching f, newest first.
func (c *Client) Containers(ctx context.Context, f Filter) ([]Container, error) {
	ctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	req := &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{LabelSelector: map[string]string{}}}
	if f.PodName != "" {
		req.Filter.LabelSelector[LabelPodName] = f.PodName
	}
	if f.PodNamespace != "" {
		req.Filter.LabelSelector[LabelPodNamespace] = f.PodNamespace
	}
	if f.Container != "" {
		req.Filter.LabelSelector[LabelContainer] = f.Container
	}
	if f.RunningOnly {
		req.Filter.State = &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}
	}
	resp, err := c.RT.ListContainers(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("list containers on %s: %w", c.Endpoint, err)
	}
	out := make([]Container, 0, len(resp.Containers))
	for _, ct := range resp.Containers {
		out = append(out, Container{
			ID: ct.Id, Name: ct.GetMetadata().GetName(), Attempt: ct.GetMetadata().GetAttempt(),
			PodName: ct.Labels[LabelPodName], PodNamespace: ct.Labels[LabelPodNamespace], PodUID: ct.Labels[LabelPodUID],
			PodSandboxID: ct.PodSandboxId, State: ct.State, ImageRef: ct.ImageRef,
			CreatedAt: time.Unix(0, ct.CreatedAt),
		})
	}
	// Newest first, so callers asking for "the" container get the current one.
	for i := 1; i < len(out); i++ {
		for k := i; k > 0 && out[k].CreatedAt.After(out[k-1].CreatedAt); k-- {
			out[k], out[k-1] = out[k-1], out[k]
		}
	}
	return out, nil
}

// Status is a container's detailed status.
type Status struct {
	Container
	// StartedAt is when the runtime started the container (zero if it
	// has not).
	StartedAt time.Time
	LogPath   string
	ExitCode  int32
	Reason    string
	Message   string
}

// unixNano is a CRI timestamp as a time, zero for 0 (not yet).
func unixNano(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// ContainerStatus inspects one container.
func (c *Client) ContainerStatus(ctx context.Context, id string) (*Status, error) {
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	resp, err := c.RT.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		return nil, fmt.Errorf("status of container %s: %w", ShortID(id), err)
	}
	s := resp.Status
	return &Status{
		Container: Container{
			ID: s.Id, Name: s.GetMetadata().GetName(), Attempt: s.GetMetadata().GetAttempt(),
			PodName: s.Labels[LabelPodName], PodNamespace: s.Labels[LabelPodNamespace], PodUID: s.Labels[LabelPodUID],
			State: s.State, ImageRef: s.ImageRef, CreatedAt: time.Unix(0, s.CreatedAt),
		},
		StartedAt: unixNano(s.StartedAt),
		LogPath:   s.LogPath, ExitCode: s.ExitCode, Reason: s.Reason, Message: s.Message,
	}, nil
}

// StopContainer stops a container with the given grace period (0: now).
func (c *Client) StopContainer(ctx context.Context, id string, grace time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, grace+stopMargin)
	defer cancel()
	if _, err := c.RT.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: int64(grace.Seconds())}); err != nil {
		return fmt.Errorf("stop container %s: %w", ShortID(id), err)
	}
	return nil
}

// RemoveSandbox stops and removes one pod sandbox and its containers,
// without grace (the kubelet makes a static pod's again). containerd
// refuses to remove a container it is still starting (one the kubelet is
// starting or restarting right then), so a failed attempt is repeated
// for up to removeRetryTimeout.
func (c *Client) RemoveSandbox(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, removeRetryTimeout+removeMargin)
	defer cancel()
	var last error
	err := wait.PollUntilContextTimeout(ctx, removeRetryInterval, removeRetryTimeout, true, func(ctx context.Context) (bool, error) {
		if _, err := c.RT.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
			last = fmt.Errorf("stop pod sandbox %s: %w", ShortID(id), err)
			return false, nil
		}
		if _, err := c.RT.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
			last = fmt.Errorf("remove pod sandbox %s: %w", ShortID(id), err)
			return false, nil
		}
		return true, nil
	})
	if err != nil && last != nil {
		return last
	}
	return err
}

// How long each CRI call may take: the runtime is local, so a call that
// takes longer is a runtime that is stuck, and devk must not hang on it.
const (
	versionTimeout = 3 * time.Second
	listTimeout    = 10 * time.Second
	statusTimeout  = 5 * time.Second
	// stopMargin is added to a stop's grace period.
	stopMargin = 20 * time.Second
	// removeMargin is added to RemoveSandbox's retries: a stop runs the
	// CNI plugins' DEL.
	removeMargin = 30 * time.Second
	pullTimeout  = 5 * time.Minute
	// How long RemoveSandbox tries, and how often.
	removeRetryTimeout  = 15 * time.Second
	removeRetryInterval = 200 * time.Millisecond
)

// RemoveAll stops and removes every pod sandbox (and its containers) for
// which own returns true, without grace; it returns how many sandboxes it
// removed. The sandboxes go at once, each in one stop and one remove: the
// CRI's StopPodSandbox kills the sandbox's containers itself and
// RemovePodSandbox removes them, so stopping the containers first would
// only wait for each process to die twice. Each stop also runs the CNI
// plugins' DEL (iptables and all), which is most of a down's time.
func (c *Client) RemoveAll(ctx context.Context, own func(podUID string) bool) (int, error) {
	lctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	pods, err := c.RT.ListPodSandbox(lctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return 0, fmt.Errorf("list pod sandboxes: %w", err)
	}
	var ids []string
	for _, p := range pods.Items {
		if own(p.GetMetadata().GetUid()) {
			ids = append(ids, p.Id)
		}
	}
	errs := make(chan error, len(ids))
	for _, id := range ids {
		go func() {
			errs <- c.RemoveSandbox(ctx, id)
		}()
	}
	n := 0
	var first error
	for range ids {
		if err := <-errs; err != nil {
			if first == nil {
				first = err
			}
		} else {
			n++
		}
	}
	return n, first
}

// ShortID is a container's or sandbox's ID as devk prints it: its first
// 12 characters.
func ShortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// ImageDigest is the digest (sha256:…) the runtime has for image ref as
// pulled from ref's repository (its RepoDigests), "" when it has none:
// what a reference by tag (repo:tag) runs.
func (c *Client) ImageDigest(ctx context.Context, ref string) (string, error) {
	resp, err := c.Images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
	if err != nil {
		return "", fmt.Errorf("status of image %s: %w", ref, err)
	}
	if resp.Image == nil {
		return "", nil
	}
	repo := ref
	if i := strings.LastIndex(repo, "@"); i >= 0 {
		repo = repo[:i]
	}
	if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
		repo = repo[:i]
	}
	for _, rd := range resp.Image.RepoDigests {
		if name, d, ok := strings.Cut(rd, "@"); ok && name == repo {
			return d, nil
		}
	}
	return "", nil
}

// HasImage says whether the runtime has image ref.
func (c *Client) HasImage(ctx context.Context, ref string) (bool, error) {
	resp, err := c.Images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
	if err != nil {
		return false, fmt.Errorf("status of image %s: %w", ref, err)
	}
	return resp.Image != nil, nil
}

// PullImage pulls ref into the runtime and returns the image ID. A ref by
// digest the runtime has is not asked of its registry at all (its
// content cannot differ): an image devk loaded (`--load`) is named from a
// registry that served only the load.
func (c *Client) PullImage(ctx context.Context, ref string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, pullTimeout)
	defer cancel()
	if strings.Contains(ref, "@sha256:") {
		st, err := c.Images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
		if err == nil && st.Image != nil {
			return st.Image.Id, nil
		}
	}
	resp, err := c.Images.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
	if err != nil {
		return "", fmt.Errorf("pull %s through CRI: %w", ref, err)
	}
	return resp.ImageRef, nil
}

// Sandbox is what devk needs of one pod sandbox.
type Sandbox struct {
	ID           string
	PodName      string
	PodNamespace string
	PodUID       string
	Ready        bool
	CreatedAt    time.Time
	// Static says the kubelet made it for a static pod (a manifest in its
	// staticPodPath): the pod's kubernetes.io/config.source is "file".
	Static bool
}

// configSourceAnnotation is where the kubelet records where a pod came
// from; it passes a pod's annotations on to its sandbox.
const configSourceAnnotation = "kubernetes.io/config.source"

// Sandboxes lists the pod sandboxes in namespace (every namespace's
// when it is ""), newest first.
func (c *Client) Sandboxes(ctx context.Context, namespace string) ([]Sandbox, error) {
	ctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	f := &runtimeapi.PodSandboxFilter{}
	if namespace != "" {
		f.LabelSelector = map[string]string{LabelPodNamespace: namespace}
	}
	resp, err := c.RT.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: f})
	if err != nil {
		return nil, fmt.Errorf("list pod sandboxes on %s: %w", c.Endpoint, err)
	}
	out := make([]Sandbox, 0, len(resp.Items))
	for _, p := range resp.Items {
		out = append(out, Sandbox{
			ID: p.Id, PodName: p.GetMetadata().GetName(), PodNamespace: p.GetMetadata().GetNamespace(), PodUID: p.GetMetadata().GetUid(),
			Ready: p.State == runtimeapi.PodSandboxState_SANDBOX_READY, CreatedAt: time.Unix(0, p.CreatedAt),
			Static: p.Annotations[configSourceAnnotation] == "file",
		})
	}
	for i := 1; i < len(out); i++ {
		for k := i; k > 0 && out[k].CreatedAt.After(out[k-1].CreatedAt); k-- {
			out[k], out[k-1] = out[k-1], out[k]
		}
	}
	return out, nil
}
