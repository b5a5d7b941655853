package cli

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/devk/devk/remote"
)

// TestAccessDecide: the access flags as a command parses them decide its
// mode; --registry on this machine is refused; with nothing named and no
// cluster anywhere the error says what to pass.
func TestAccessDecide(t *testing.T) {
	home := t.TempDir()
	t.Setenv("DEVK_HOME", home)
	t.Setenv("KUBECONFIG", filepath.Join(home, "none"))
	run := func(args ...string) (remote.Decision, string, error) {
		var a Access
		var name string
		var errOut bytes.Buffer
		g := NewOptions(&bytes.Buffer{}, &errOut, "")
		var d remote.Decision
		var err error
		cmd := &cobra.Command{Use: "x", RunE: func(cmd *cobra.Command, _ []string) error {
			d, err = a.Decide(cmd, g, name, "", "pki-dir")
			return nil
		}}
		cmd.Flags().StringVar(&name, "name", "devk", "")
		cmd.Flags().String("pki-dir", "", "")
		a.Add(cmd.Flags())
		cmd.SetArgs(args)
		if xerr := cmd.Execute(); xerr != nil {
			t.Fatal(xerr)
		}
		return d, errOut.String(), err
	}
	if d, _, err := run("--pki-dir", "/etc/kubernetes/pki"); err != nil || d.Mode != remote.NodeFiles {
		t.Errorf("--pki-dir: %+v, %v", d, err)
	}
	if _, _, err := run("--pki-dir", "/p", "--registry", "r:5000"); err == nil || !strings.Contains(err.Error(), "--registry is for a cluster reached through its API") {
		t.Errorf("--registry on this machine: %v", err)
	}
	if d, _, err := run("--name", "other"); err != nil || d.Mode != remote.DevkCluster || d.Name != "other" {
		t.Errorf("--name: %+v, %v", d, err)
	}
	_, _, err := run()
	if err == nil || !strings.Contains(err.Error(), `no devk cluster "devk"`) || !strings.Contains(err.Error(), "--kubeconfig") {
		t.Errorf("nothing anywhere: %v", err)
	}
}
