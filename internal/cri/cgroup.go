package cri

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// cgroupMount is where the machine's cgroup hierarchies are mounted.
const cgroupMount = "/sys/fs/cgroup"

// PodCgroup is the directory of the pod cgroup a running container is in
// (the parent of the container's own cgroup, as its process shows it in
// /proc/PID/cgroup): the kubelet removes it as the last step of the pod's
// termination, right before its pod worker lets the pod's name go, so its
// removal is the moment a static pod of the same name may start. An error
// when the runtime does not name the container's process, the process is
// not visible here (another PID namespace), or its cgroup is not the pod's
// (podUID).
func (c *Client) PodCgroup(ctx context.Context, containerID, podUID string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	resp, err := c.RT.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: containerID, Verbose: true})
	if err != nil {
		return "", fmt.Errorf("status of container %s: %w", ShortID(containerID), err)
	}
	var info struct {
		PID int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(resp.Info["info"]), &info); err != nil || info.PID <= 0 {
		return "", fmt.Errorf("the runtime does not say the process of container %s", ShortID(containerID))
	}
	data, err := os.ReadFile(filepath.Join("/proc", fmt.Sprint(info.PID), "cgroup"))
	if err != nil {
		return "", err
	}
	dir, err := podCgroupDir(string(data), podUID)
	if err != nil {
		return "", fmt.Errorf("container %s: %w", ShortID(containerID), err)
	}
	if _, err := os.Stat(dir); err != nil {
		return "", err
	}
	return dir, nil
}

// podCgroupDir is the pod cgroup's directory given a process's
// /proc/PID/cgroup: the parent of its group in the unified hierarchy, or
// in the pids controller's on cgroup v1 (the kubelet makes a pod's cgroup
// in each), checked to be the pod's: pod<UID> (cgroupfs driver) or
// …-pod<UID with underscores>.slice (systemd driver).
func podCgroupDir(procCgroup, podUID string) (string, error) {
	var hier, group string
	for _, line := range strings.Split(strings.TrimSpace(procCgroup), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			hier, group = "", parts[2]
		case parts[1] == "pids" && group == "":
			hier, group = "pids", parts[2]
		}
	}
	if group == "" {
		return "", fmt.Errorf("no unified or pids cgroup in %q", procCgroup)
	}
	pod := filepath.Dir(filepath.Clean(group))
	base := filepath.Base(pod)
	if podUID == "" || !(base == "pod"+podUID || strings.HasSuffix(base, "pod"+strings.ReplaceAll(podUID, "-", "_")+".slice")) {
		return "", fmt.Errorf("cgroup %s is not pod %s's", pod, podUID)
	}
	return filepath.Join(cgroupMount, hier, pod), nil
}
