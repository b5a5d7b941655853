package node

import (
	"strings"
	"testing"

	"github.com/devk/devk/internal/layout"
)

// TestNodeMountNS: every path a node's components hard-code is the
// node's own directory under its dir, inside a cover; a DEVK_HOME under
// a cover is refused with what to do.
func TestNodeMountNS(t *testing.T) {
	p := layout.NodeFiles{Supervised: layout.Supervised{Dir: "/root/.devk/clusters/devk/nodes/w1"}}
	s := mountNS(p)
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if s.File != p.Dir+"/mntns/mnt" {
		t.Errorf("namespace kept at %s", s.File)
	}
	want := map[string]string{
		"/var/lib/kubelet/device-plugins": p.Dir + "/fs/var/lib/kubelet/device-plugins",
		"/var/log/containers":             p.Dir + "/fs/var/log/containers",
		"/var/lib/cni":                    p.Dir + "/fs/var/lib/cni",
		"/run/containerd":                 p.Dir + "/fs/run/containerd",
		"/run/netns":                      p.Dir + "/fs/run/netns",
	}
	for _, b := range s.Binds {
		if want[b.Path] != b.Dir {
			t.Errorf("%s is %s inside the node, want %s", b.Path, b.Dir, want[b.Path])
		}
		delete(want, b.Path)
	}
	if len(want) > 0 {
		t.Errorf("not the node's own: %v", want)
	}
	err := mountNS(layout.HomeFiles("/var/lib/devk").Cluster("devk").FirstNode()).Validate()
	if err == nil || !strings.Contains(err.Error(), "DEVK_HOME") {
		t.Errorf("a DEVK_HOME under /var/lib: %v", err)
	}
}
