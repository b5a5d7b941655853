package clustercmd

import (
	"slices"
	"strings"
	"testing"
)

// TestExecArgs: node exec's arguments split at -- into the node (none:
// node 0) and the command; anything else is refused saying how to call
// it.
func TestExecArgs(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		dash    int
		node    string
		command []string
		wantErr string
	}{
		{name: "node 0", args: []string{"ip", "-br", "addr"}, dash: 0, command: []string{"ip", "-br", "addr"}},
		{name: "a node", args: []string{"devk-worker", "iptables-save"}, dash: 1, node: "devk-worker", command: []string{"iptables-save"}},
		{name: "the command's own --", args: []string{"sh", "-c", "x", "--", "y"}, dash: 0, command: []string{"sh", "-c", "x", "--", "y"}},
		{name: "nothing", dash: -1, wantErr: "give the command to run after --: devk node exec [NODE] -- CMD [ARGS...]"},
		{name: "no --", args: []string{"ip", "addr"}, dash: -1, wantErr: "put the command after --: devk node exec -- ip addr"},
		{name: "no command", args: []string{"devk-worker"}, dash: 1, wantErr: "no command after --"},
		{name: "nothing after --", dash: 0, wantErr: "no command after --"},
		{name: "two nodes", args: []string{"a", "b", "true"}, dash: 2, wantErr: "one node before --, not 2 (a b)"},
		{name: "a bad node name", args: []string{"../etc", "true"}, dash: 1, wantErr: `node name "../etc"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node, command, err := execArgs(tc.args, tc.dash)
			switch {
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("err = %v, want %q", err, tc.wantErr)
				}
			case err != nil:
				t.Fatal(err)
			case node != tc.node || !slices.Equal(command, tc.command):
				t.Errorf("node %q, command %q; want %q, %q", node, command, tc.node, tc.command)
			}
		})
	}
}
