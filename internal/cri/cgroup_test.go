package cri

import (
	"strings"
	"testing"
)

func TestPodCgroupDir(t *testing.T) {
	const uid = "0f7c3a2e-1b2c-4d5e-8f90-123456789abc"
	cases := []struct {
		name, cgroup, want, err string
	}{
		{"v1 cgroupfs", "12:pids:/devk/n0/kubepods/burstable/pod" + uid + "/abc123\n11:memory:/devk/n0/kubepods/burstable/pod" + uid + "/abc123\n1:name=systemd:/user.slice",
			"/sys/fs/cgroup/pids/devk/n0/kubepods/burstable/pod" + uid, ""},
		{"v2 systemd", "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + strings.ReplaceAll(uid, "-", "_") + ".slice/cri-containerd-abc123.scope",
			"/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + strings.ReplaceAll(uid, "-", "_") + ".slice", ""},
		{"guaranteed", "0::/kubepods/pod" + uid + "/abc123", "/sys/fs/cgroup/kubepods/pod" + uid, ""},
		{"another pod", "0::/kubepods/pod11111111-2222-3333-4444-555555555555/abc123", "", "is not pod " + uid},
		{"not in a pod", "0::/system.slice/containerd.service", "", "is not pod"},
		{"no hierarchy", "3:cpu:/x/y", "", "no unified or pids cgroup"},
	}
	for _, c := range cases {
		got, err := podCgroupDir(c.cgroup, uid)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: err %v, want %q", c.name, err, c.err)
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("%s: %q, %v; want %q", c.name, got, err, c.want)
		}
	}
}
