package cluster

import (
	"strings"
	"testing"

	"github.com/devk/devk/internal/layout"
)

// TestTakenOutMessage: status says what to run for a server taken out,
// by why it may be out.
func TestTakenOutMessage(t *testing.T) {
	c := &Cluster{Config: layout.Config{Name: "ha", Network: layout.Network{Nodes: []layout.NodeNet{
		{Name: "ha-control-plane", Role: layout.RoleControlPlane},
		{Name: "ha-control-plane2", Role: layout.RoleControlPlane},
		{Name: "ha-control-plane3", Role: layout.RoleControlPlane, Leaving: true},
	}}}}
	for _, tc := range []struct{ node, status, want string }{
		{"ha-control-plane", "UP", ""},
		{"ha-control-plane", "DOWN", ""},
		{"ha-control-plane2", "DRAIN", "`devk up --name ha` (or the next `devk swap`) puts it back"},
		{"ha-control-plane2", "MAINT", "`devk up --name ha` (or the next `devk swap`) puts it back"},
		{"ha-control-plane3", "MAINT", "node ha-control-plane3 is being removed; `devk node remove --name ha ha-control-plane3` finishes it"},
	} {
		got := c.takenOutMessage(tc.node, tc.status)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s %s: %q, want %q", tc.node, tc.status, got, tc.want)
		}
	}
}
