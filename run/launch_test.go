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

// TestWriteLaunchKeepsOtherConfigurations: a second run of the same
// component replaces its configuration (now last); another component's,
// and one the user added (with fields devk does not know), stay.
func TestWriteLaunchKeepsOtherConfigurations(t *testing.T) {
	path := LaunchPath(filepath.Join(t.TempDir(), "_output", "devk"))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	user := `{"version": "0.2.0", "configurations": [{"name": "mine", "type": "go", "request": "attach", "port": 2345}]}`
	if err := os.WriteFile(path, []byte(user), 0o644); err != nil {
		t.Fatal(err)
	}
	s := Spec{Argv: []string{binary, "--v=1"}, Dir: "/"}
	for _, cfg := range []launchConfig{
		launch("scheduler", "/tree/cmd/kube-scheduler", "", s),
		launch("apiserver", "/tree/cmd/kube-apiserver", "", s),
		launch("scheduler", "/tree/cmd/kube-scheduler", "", Spec{Argv: []string{binary, "--v=4"}, Dir: "/"}),
	} {
		if err := writeLaunch(path, cfg); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Version        string           `json:"version"`
		Configurations []map[string]any `json:"configurations"`
	}
	if err := json.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range file.Configurations {
		names = append(names, c["name"].(string))
	}
	if want := []string{"mine", "devk run apiserver", "devk run scheduler"}; !reflect.DeepEqual(names, want) || file.Version != launchjson.Version {
		t.Fatalf("configurations %v (version %q), want %v", names, file.Version, want)
	}
	if port := file.Configurations[0]["port"]; port != float64(2345) {
		t.Errorf("the user's configuration lost its port: %v", file.Configurations[0])
	}
	if args := file.Configurations[2]["args"]; !reflect.DeepEqual(args, []any{"--v=4"}) {
		t.Errorf("the scheduler's configuration has args %v, want the last run's", args)
	}

	if err := os.WriteFile(path, []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeLaunch(path, launch("scheduler", "/p", "", s)); err == nil {
		t.Error("a launch.json devk cannot read was overwritten")
	}
}
