package upgrade

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devk/devk/internal/kube"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/skew"
)

// versionTimeout bounds each component's /version read.
const versionTimeout = 10 * time.Second

// running reads what every component of the cluster runs: each
// control-plane node's API server (its /version), controller-manager and
// scheduler (their secure ports' /version with the admin credentials),
// each Node's kubelet (as its status reports it; kwok's fake nodes left
// out) and devk's kubectl (`kubectl version --client`).
func (j *Job) running(ctx context.Context) ([]skew.Running, error) {
	cfg := j.c.Config
	admin := j.c.FirstNode().Files.Kubeconfig("admin")
	var out []skew.Running
	for _, n := range cfg.ControlPlanes() {
		if n.Leaving {
			continue
		}
		base := func(port int) string { return "https://" + n.IP + ":" + strconv.Itoa(port) }
		v, err := kube.EndpointVersion(ctx, base(cfg.Ports.APIServer))
		if err != nil {
			return nil, fmt.Errorf("the version of %s on %s: %w (is the cluster up? `devk status`)", skew.APIServer, n.Name, err)
		}
		out = append(out, skew.Running{Component: skew.APIServer, Node: n.Name, Version: v})
		for _, c := range []struct {
			name string
			port int
		}{{skew.ControllerManager, cfg.Ports.ControllerManager}, {skew.Scheduler, cfg.Ports.Scheduler}} {
			base, netns := cfg.Controller(n, c.port)
			v, err := kube.MetricsVersion(ctx, admin, base, netns, versionTimeout)
			if err != nil {
				return nil, fmt.Errorf("the version of %s on %s: %w", c.name, n.Name, err)
			}
			out = append(out, skew.Running{Component: c.name, Node: n.Name, Version: v})
		}
	}
	cs, err := j.client()
	if err != nil {
		return nil, err
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "!" + layout.FakeNodeKey})
	if err != nil {
		return nil, fmt.Errorf("list the nodes: %w", err)
	}
	for _, n := range nodes.Items {
		out = append(out, skew.Running{Component: skew.Kubelet, Node: n.Name, Version: n.Status.NodeInfo.KubeletVersion})
	}
	if v, err := kubectlVersion(ctx, j.Swap.KubectlDest); err != nil {
		return nil, err
	} else if v != "" {
		out = append(out, skew.Running{Component: skew.Kubectl, Version: v})
	}
	return out, nil
}

// kubectlVersion is the client version of the kubectl at path, or ""
// when there is none.
func kubectlVersion(ctx context.Context, path string) (string, error) {
	if _, err := os.Stat(path); os.IsNotExist(err) {
		return "", nil
	}
	out, err := exec.CommandContext(ctx, path, "version", "--client", "-o", "json").Output()
	if err != nil {
		return "", fmt.Errorf("%s version --client: %w", path, err)
	}
	var v struct {
		ClientVersion struct {
			GitVersion string `json:"gitVersion"`
		} `json:"clientVersion"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		return "", fmt.Errorf("%s version --client -o json: %w", path, err)
	}
	return v.ClientVersion.GitVersion, nil
}
