package cluster

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// criClient talks to a CRI runtime over its unix socket.
type criClient struct {
	conn *grpc.ClientConn
	rt   runtimeapi.RuntimeServiceClient
	img  runtimeapi.ImageServiceClient
}

func dialCRI(_ context.Context, socket string) (*criClient, error) {
	target := socket
	if !strings.HasPrefix(target, "unix://") {
		target = "unix://" + target
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20)))
	if err != nil {
		return nil, fmt.Errorf("CRI socket %s: %w", socket, err)
	}
	return &criClient{conn: conn, rt: runtimeapi.NewRuntimeServiceClient(conn), img: runtimeapi.NewImageServiceClient(conn)}, nil
}

func (c *criClient) Close() error { return c.conn.Close() }

func (c *criClient) version(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	v, err := c.rt.Version(ctx, &runtimeapi.VersionRequest{})
	if err != nil {
		return "", err
	}
	return v.RuntimeName + " " + v.RuntimeVersion, nil
}

// ContainerInfo is what devk shows of a running container.
type ContainerInfo struct {
	ID       string
	Name     string
	PodName  string
	PodUID   string
	State    string
	ImageRef string
	Attempt  uint32
}

func (c *criClient) containers(ctx context.Context) ([]ContainerInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := c.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	var out []ContainerInfo
	for _, ct := range resp.Containers {
		ref := ct.ImageRef
		// ListContainers' imageRef is the image ID on containerd 1.6; the
		// status has the repo digest the kubelet reports as imageID.
		if st, err := c.rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: ct.Id}); err == nil && st.Status != nil && st.Status.ImageRef != "" {
			ref = st.Status.ImageRef
		}
		out = append(out, ContainerInfo{
			ID: ct.Id, Name: ct.GetMetadata().GetName(), Attempt: ct.GetMetadata().GetAttempt(),
			PodName: ct.Labels["io.kubernetes.pod.name"], PodUID: ct.Labels["io.kubernetes.pod.uid"],
			State: strings.TrimPrefix(ct.State.String(), "CONTAINER_"), ImageRef: ref,
		})
	}
	return out, nil
}

// removeAll stops and removes every pod sandbox (and container) for which
// own returns true; it returns how many sandboxes it removed.
func (c *criClient) removeAll(ctx context.Context, own func(podUID string) bool) (int, error) {
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	pods, err := c.rt.ListPodSandbox(lctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return 0, fmt.Errorf("list pod sandboxes: %w", err)
	}
	cts, err := c.rt.ListContainers(lctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return 0, fmt.Errorf("list containers: %w", err)
	}
	ownPod := map[string]bool{}
	n := 0
	for _, p := range pods.Items {
		if !own(p.GetMetadata().GetUid()) {
			continue
		}
		ownPod[p.Id] = true
	}
	// Containers first, with no grace: this is a throwaway cluster.
	errs := make(chan error, len(cts.Containers))
	pending := 0
	for _, ct := range cts.Containers {
		if !ownPod[ct.PodSandboxId] {
			continue
		}
		pending++
		go func(id string) {
			cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			if ct.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
				if _, err := c.rt.StopContainer(cctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 0}); err != nil {
					errs <- fmt.Errorf("stop container %s: %w", id[:12], err)
					return
				}
			}
			if _, err := c.rt.RemoveContainer(cctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
				errs <- fmt.Errorf("remove container %s: %w", id[:12], err)
				return
			}
			errs <- nil
		}(ct.Id)
	}
	var first error
	for ; pending > 0; pending-- {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	for id := range ownPod {
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if _, err := c.rt.StopPodSandbox(pctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil && first == nil {
			first = fmt.Errorf("stop pod sandbox %s: %w", id[:12], err)
		}
		if _, err := c.rt.RemovePodSandbox(pctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil && first == nil {
			first = fmt.Errorf("remove pod sandbox %s: %w", id[:12], err)
		} else if err == nil {
			n++
		}
		cancel()
	}
	return n, first
}

func lookPath(name string) (string, error) { return exec.LookPath(name) }
