package mountns

import (
	"slices"
	"testing"
)

// Lines from real /proc/<pid>/mountinfo files: this machine's (private
// mounts, no optional fields), a systemd host's (shared:N), a slave
// namespace's (master:N), a shared mount that is also a slave, an
// unbindable one, an overlay with its options, an escaped space.
func TestParse(t *testing.T) {
	for _, tc := range []struct {
		line           string
		point, fstype  string
		optional       []string
		shared         bool
		source, superO string
	}{
		{"27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard", "/", "ext4", []string{}, false, "/dev/vda", "rw,discard"},
		{"29 1 8:2 / / rw,relatime shared:1 - ext4 /dev/sda2 rw,errors=remount-ro", "/", "ext4", []string{"shared:1"}, true, "/dev/sda2", "rw,errors=remount-ro"},
		{"631 612 0:25 / /run rw,nosuid,nodev,noexec,relatime master:14 - tmpfs tmpfs rw,size=1631532k,mode=755", "/run", "tmpfs", []string{"master:14"}, false, "tmpfs", "rw,size=1631532k,mode=755"},
		{"812 640 254:0 /root/.devk/clusters/devk/kubelet /root/.devk/clusters/devk/kubelet rw,relatime shared:301 master:1 - ext4 /dev/vda rw", "/root/.devk/clusters/devk/kubelet", "ext4", []string{"shared:301", "master:1"}, true, "/dev/vda", "rw"},
		{"90 29 0:45 / /mnt/u rw,relatime unbindable - tmpfs none rw", "/mnt/u", "tmpfs", []string{"unbindable"}, false, "none", "rw"},
		{"700 640 0:60 / /var/lib rw,relatime - overlay devk-mntns rw,lowerdir=/var/lib,upperdir=/d/mntns/upper/0/upper,workdir=/d/mntns/upper/0/work", "/var/lib", "overlay", []string{}, false, "devk-mntns", "rw,lowerdir=/var/lib,upperdir=/d/mntns/upper/0/upper,workdir=/d/mntns/upper/0/work"},
		{"103 22 0:53 / /root/with\\040space rw - tmpfs tmpfs rw", "/root/with space", "tmpfs", []string{}, false, "tmpfs", "rw"},
		{"4026 27 0:4 net:[4026532301] /run/netns/devk-devk rw shared:5 - nsfs nsfs rw", "/run/netns/devk-devk", "nsfs", []string{"shared:5"}, true, "nsfs", "rw"},
	} {
		ms, err := parse(tc.line + "\n")
		if err != nil || len(ms) != 1 {
			t.Errorf("parse(%q) = %v, %v", tc.line, ms, err)
			continue
		}
		m := ms[0]
		if m.Point != tc.point || m.FSType != tc.fstype || !slices.Equal(m.Optional, tc.optional) || m.Shared() != tc.shared || m.Source != tc.source || m.SuperOptions != tc.superO {
			t.Errorf("parse(%q) = %+v (shared %v)", tc.line, m, m.Shared())
		}
	}
	for _, bad := range []string{"27 1 254:0 / / rw,relatime ext4 /dev/vda rw", "x 1 254:0 / / rw - ext4 /dev/vda rw", "27 1 254:0 / /"} {
		if _, err := parse(bad); err == nil {
			t.Errorf("parse(%q) took a malformed line", bad)
		}
	}
}

func TestUnderAndAt(t *testing.T) {
	ms, err := parse(`22 1 0:21 / / rw - ext4 /dev/vda rw
100 22 0:50 / /root/.devk/clusters/devk/containerd/state/io.containerd.runtime.v2.task/k8s.io/abc/rootfs rw - overlay overlay rw
101 22 0:51 / /root/.devk/clusters/devk/kubelet/pods/u1/volumes/kubernetes.io~projected/kube-api-access rw - tmpfs tmpfs rw
102 22 0:52 / /root/.devk/clusters/devk2/kubelet rw - tmpfs tmpfs rw
103 22 0:53 / /root/.devk/clusters/devk/with\040space rw - tmpfs tmpfs rw
104 22 254:0 /root/.devk/clusters/devk/kubelet /root/.devk/clusters/devk/kubelet rw - ext4 /dev/vda rw
105 104 254:0 /root/.devk/clusters/devk/kubelet /root/.devk/clusters/devk/kubelet rw shared:7 - ext4 /dev/vda rw
`)
	if err != nil {
		t.Fatal(err)
	}
	got := Under(ms, "/root/.devk/clusters/devk")
	want := []string{
		"/root/.devk/clusters/devk/containerd/state/io.containerd.runtime.v2.task/k8s.io/abc/rootfs",
		"/root/.devk/clusters/devk/kubelet/pods/u1/volumes/kubernetes.io~projected/kube-api-access",
		"/root/.devk/clusters/devk/with space",
		"/root/.devk/clusters/devk/kubelet",
	}
	if !slices.Equal(got, want) {
		t.Errorf("Under =\n%q\nwant\n%q", got, want)
	}
	// The mount on top decides: the second bind at the kubelet's root is shared.
	if m, ok := At(ms, "/root/.devk/clusters/devk/kubelet"); !ok || m.ID != 105 || !m.Shared() {
		t.Errorf("At = %+v, %v; want mount 105, shared", m, ok)
	}
	if _, ok := At(ms, "/root/.devk/clusters/devk"); ok {
		t.Error("At found a mount where there is none")
	}
}

func TestValidate(t *testing.T) {
	good := Spec{File: "/h/c/mntns/mnt", Covers: []string{"/var/lib", "/run"},
		Binds: []Bind{{Path: "/var/lib/cni", Dir: "/h/c/fs/var/lib/cni"}, {Path: "/run/containerd", Dir: "/h/c/fs/run/containerd"}}}
	if err := good.Validate(); err != nil {
		t.Errorf("Validate(good) = %v", err)
	}
	for name, s := range map[string]Spec{
		"bind outside the covers":   {File: "/h/mntns/mnt", Covers: []string{"/run"}, Binds: []Bind{{Path: "/var/lib/cni", Dir: "/h/cni"}}},
		"bind is a cover":           {File: "/h/mntns/mnt", Covers: []string{"/run"}, Binds: []Bind{{Path: "/run", Dir: "/h/run"}}},
		"home under a cover":        {File: "/var/lib/devk/mntns/mnt", Covers: []string{"/var/lib"}, Binds: []Bind{{Path: "/var/lib/cni", Dir: "/var/lib/devk/fs/cni"}}},
		"relative":                  {File: "h/mntns/mnt", Covers: []string{"/run"}},
		"comma":                     {File: "/h,x/mntns/mnt", Covers: []string{"/run"}},
		"unclean":                   {File: "/h/../mntns/mnt", Covers: []string{"/run"}},
		"file source under a cover": {File: "/h/mntns/mnt", Covers: []string{"/run"}, Files: []FileBind{{Path: "/usr/bin/systemctl", Source: "/run/devk/systemctl"}}},
		"relative file path":        {File: "/h/mntns/mnt", Covers: []string{"/run"}, Files: []FileBind{{Path: "usr/bin/systemctl", Source: "/h/bin/systemctl"}}},
	} {
		if err := s.Validate(); err == nil {
			t.Errorf("Validate(%s) took it", name)
		}
	}
}
