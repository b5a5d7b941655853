package launchjson

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestWriteKeepsOtherConfigurations: a configuration written again
// replaces its namesake (now last); another of devk's, and one the user
// added (with fields devk does not know), stay.
func TestWriteKeepsOtherConfigurations(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run", "launch.json")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	user := `{"version": "0.2.0", "configurations": [{"name": "mine", "type": "go", "request": "attach", "port": 2345}]}`
	if err := os.WriteFile(path, []byte(user), 0o644); err != nil {
		t.Fatal(err)
	}
	type launch struct {
		Args []string `json:"args"`
	}
	for _, w := range []struct {
		name string
		cfg  any
	}{
		{"devk run scheduler", launch{Args: []string{"--v=1"}}},
		{"devk debug apiserver", map[string]any{"request": "attach"}},
		{"devk run scheduler", launch{Args: []string{"--v=4"}}},
	} {
		if err := Write(path, w.name, w.cfg); err != nil {
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
	if want := []string{"mine", "devk debug apiserver", "devk run scheduler"}; !reflect.DeepEqual(names, want) || file.Version != Version {
		t.Fatalf("configurations %v (version %q), want %v", names, file.Version, want)
	}
	if port := file.Configurations[0]["port"]; port != float64(2345) {
		t.Errorf("the user's configuration lost its port: %v", file.Configurations[0])
	}
	if args := file.Configurations[2]["args"]; !reflect.DeepEqual(args, []any{"--v=4"}) {
		t.Errorf("the scheduler's configuration has args %v, want the last one's", args)
	}
}

func TestWriteRefusesWhatItCannotRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "launch.json")
	if err := os.WriteFile(path, []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, "x", map[string]any{}); err == nil || !strings.Contains(err.Error(), "move it away") {
		t.Errorf("err = %v, want a refusal", err)
	}
	if data, _ := os.ReadFile(path); string(data) != "{not json" {
		t.Errorf("the file was overwritten: %q", data)
	}
	if err := Write(path, "x", []string{"not an object"}); err == nil {
		t.Error("a configuration that is not a JSON object was written")
	}
}
