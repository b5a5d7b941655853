package node

import (
	"maps"
	"strings"
	"testing"

	"github.com/devk/devk/internal/layout"
)

// TestNodeMountNS: every path a node's components hard-code is the
// node's own directory under its dir, inside a cover; a DEVK_HOME under
// a cover is refused with what to do.
func TestNodeMountNS(t *testing.T) {
	p := layout.NodeFiles{Supervised: layout.Supervised{Dir: "/root/.devk/clusters/devk/nodes/w1"}}
	own := map[string]string{
		"/var/log/containers": p.Dir + "/fs/var/log/containers",
		"/var/lib/cni":        p.Dir + "/fs/var/lib/cni",
		"/run/containerd":     p.Dir + "/fs/run/containerd",
		"/run/netns":          p.Dir + "/fs/run/netns",
	}
	devk := maps.Clone(own)
	devk["/var/lib/kubelet/device-plugins"] = p.Dir + "/fs/var/lib/kubelet/device-plugins"
	kubeadm := maps.Clone(own)
	kubeadm["/etc/kubernetes"] = p.Dir               // kubeadm's pki/, manifests/, *.conf where devk keeps them
	kubeadm["/var/lib/kubelet"] = p.Dir + "/kubelet" // its root, device plugins' sockets included
	kubeadm["/var/lib/etcd"] = p.Dir + "/etcd"
	kubeadm["/var/log/pods"] = p.Dir + "/logs/pods"
	for _, tc := range []struct {
		name    string
		kubeadm bool
		want    map[string]string
	}{{"devk's node", false, devk}, {"kubeadm's node", true, kubeadm}} {
		t.Run(tc.name, func(t *testing.T) {
			s := mountNS(p, tc.kubeadm)
			if err := s.Validate(); err != nil {
				t.Fatal(err)
			}
			if s.File != p.Dir+"/mntns/mnt" {
				t.Errorf("namespace kept at %s", s.File)
			}
			want := maps.Clone(tc.want)
			for _, b := range s.Binds {
				if want[b.Path] != b.Dir {
					t.Errorf("%s is %s inside the node, want %s", b.Path, b.Dir, want[b.Path])
				}
				delete(want, b.Path)
			}
			if len(want) > 0 {
				t.Errorf("not the node's own: %v", want)
			}
		})
	}
	err := mountNS(layout.HomeFiles("/var/lib/devk").Cluster("devk").FirstNode(), false).Validate()
	if err == nil || !strings.Contains(err.Error(), "DEVK_HOME") {
		t.Errorf("a DEVK_HOME under /var/lib: %v", err)
	}
}
