package clustercmd

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/devk/devk/cmd/devk/internal/clitest"
	"github.com/devk/devk/internal/layout"
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

// TestCompleteNodeNames: node exec's and node remove's first argument
// completes to the nodes of the cluster --name names, and to nothing
// after it.
func TestCompleteNodeNames(t *testing.T) {
	home := t.TempDir()
	t.Setenv("DEVK_HOME", home)
	cfg := layout.NewConfig("dev2")
	if err := cfg.PlaceAmong(nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := cfg.AddNode("dev2-worker", layout.RoleWorker, nil); err != nil {
		t.Fatal(err)
	}
	data, err := layout.EncodeConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	files := layout.HomeFiles(home).Cluster("dev2")
	if err := os.MkdirAll(filepath.Dir(files.ConfigFile()), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(files.ConfigFile(), data, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"node", "exec", "--name", "dev2", ""}, []string{"dev2-control-plane", "dev2-worker"}},
		{[]string{"node", "remove", "--name", "dev2", ""}, []string{"dev2-control-plane", "dev2-worker"}},
		{[]string{"node", "exec", "--name", "dev2", "dev2-worker", ""}, nil},
		{[]string{"node", "exec", ""}, nil}, // no cluster devk
	} {
		stdout, _, err := clitest.Run(t, NewNodeCmd, append([]string{"__complete"}, tc.args...)...)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(stdout), "\n") {
			if !strings.HasPrefix(l, ":") {
				got = append(got, l)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("devk %s: %q, want %q", strings.Join(tc.args, " "), got, tc.want)
		}
	}
}
