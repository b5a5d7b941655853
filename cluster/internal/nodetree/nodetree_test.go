package nodetree

import (
	"context"
	"strings"
	"testing"

	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/internal/testtree"
)

// TestKubeletSkew: a tree whose kubelet the policy does not allow beside
// the control plane is refused before anything is built, naming the
// rule; a directory that is no tree is refused too. (The build itself
// is the e2e suite's: the fixture tree has no kubelet.)
func TestKubeletSkew(t *testing.T) {
	tree := testtree.New(t) // v1.34.0
	for _, tc := range []struct {
		controlPlane, want string
	}{
		{"v1.33.2", "newer than"},
		{"v1.38.0", "4 minor versions behind"},
	} {
		_, err := Build(context.Background(), Options{Tree: tree, Node: "dev-old", ControlPlane: tc.controlPlane, KubeProxy: true, Reporter: progress.Discard()})
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "nodes[].tree") {
			t.Errorf("a v1.34.0 kubelet beside a %s control plane: %v, want an error with %q", tc.controlPlane, err, tc.want)
		}
	}
	if _, err := Build(context.Background(), Options{Tree: t.TempDir(), Node: "dev-old", ControlPlane: "v1.34.4", Reporter: progress.Discard()}); err == nil || !strings.Contains(err.Error(), "node dev-old's tree") {
		t.Errorf("an empty directory as a tree: %v", err)
	}
}
