package run

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/devk/devk/internal/launchjson"
)

func TestLaunchBindsTheHostsAddress(t *testing.T) {
	s := Spec{Argv: []string{binary, "--kubeconfig=/k.conf", "--bind-address=10.250.0.2", "--secure-port=10259"}, Env: []string{"A=1", "B=x=y"}, Dir: "/"}
	got := launch("scheduler", "/tree/cmd/kube-scheduler", "10.250.0.1", s)
	want := launchConfig{Name: "devk run scheduler", Type: "go", Request: "launch", Mode: "auto", Program: "/tree/cmd/kube-scheduler",
		Args: []string{"--kubeconfig=/k.conf", "--bind-address=10.250.0.1", "--secure-port=10259"},
		Env:  map[string]string{"A": "1", "B": "x=y"}, Cwd: "/"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("launch =\n %#v\nwant\n %#v", got, want)
	}
	if s.Argv[2] != "--bind-address=10.250.0.2" {
		t.Errorf("launch changed the Spec's argv: %v", s.Argv)
	}
}

// TestWriteLaunch: the configuration lands in the launch.json as
// launch made it.
func TestWriteLaunch(t *testing.T) {
	path := LaunchPath(filepath.Join(t.TempDir(), "_output", "devk"))
	cfg := launch("scheduler", "/tree/cmd/kube-scheduler", "", Spec{Argv: []string{binary, "--v=1"}, Env: []string{"A=1"}, Dir: "/"})
	if err := writeLaunch(path, cfg); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Version        string         `json:"version"`
		Configurations []launchConfig `json:"configurations"`
	}
	if err := json.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	if file.Version != launchjson.Version || len(file.Configurations) != 1 || !reflect.DeepEqual(file.Configurations[0], cfg) {
		t.Errorf("launch.json holds %+v, want version %s and %+v", file, launchjson.Version, cfg)
	}
}
