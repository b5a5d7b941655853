//go:build e2e

package e2e

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

type buildOutput struct {
	Version  string `json:"version"`
	Binaries []struct {
		Component string `json:"component"`
		Path      string `json:"path"`
		SHA256    string `json:"sha256"`
		Changed   bool   `json:"changed"`
	} `json:"binaries"`
}

// TestSourceAndBuild gets the real v1.34.4 tree, builds the apiserver and
// kubectl from it, and checks both report the tree's version.
func TestSourceAndBuild(t *testing.T) {
	tree := Tree(t)

	// A second get is a no-op.
	r := MustDevk(t, workDir, "source", "get", KubeVersion, tree)
	if !strings.Contains(r.Stdout, "already holds Kubernetes "+KubeVersion) {
		t.Fatalf("second get: %s", r.Stdout)
	}

	var info struct {
		Root    string `json:"root"`
		Version struct {
			GitVersion   string `json:"gitVersion"`
			GitTreeState string `json:"gitTreeState"`
		} `json:"version"`
		GoMinimum string `json:"goMinimum"`
	}
	r = MustDevk(t, filepath.Join(tree, "staging", "src", "k8s.io", "apiserver"), "source", "info", "-o", "json")
	if err := json.Unmarshal([]byte(r.Stdout), &info); err != nil {
		t.Fatalf("source info -o json: %v\n%s", err, r.Stdout)
	}
	if info.Root != tree || !strings.HasPrefix(info.Version.GitVersion, KubeVersion) || info.GoMinimum == "" {
		t.Fatalf("source info = %+v", info)
	}
	version := info.Version.GitVersion

	var out buildOutput
	r = MustDevk(t, tree, "build", "apiserver", "kubectl", "-o", "json")
	if err := json.Unmarshal([]byte(r.Stdout), &out); err != nil {
		t.Fatalf("build -o json: %v\n%s", err, r.Stdout)
	}
	if out.Version != version || len(out.Binaries) != 2 {
		t.Fatalf("build output = %+v", out)
	}
	paths := map[string]string{}
	for _, b := range out.Binaries {
		paths[b.Component] = b.Path
	}

	kubectl, err := exec.Command(paths["kubectl"], "version", "--client", "-o", "json").Output()
	if err != nil {
		t.Fatalf("kubectl version --client: %v", err)
	}
	var kv struct {
		ClientVersion struct {
			GitVersion string `json:"gitVersion"`
			Major      string `json:"major"`
			Minor      string `json:"minor"`
		} `json:"clientVersion"`
	}
	if err := json.Unmarshal(kubectl, &kv); err != nil {
		t.Fatalf("kubectl version output does not parse: %v\n%s", err, kubectl)
	}
	if kv.ClientVersion.GitVersion != version || kv.ClientVersion.Major != "1" || !strings.HasPrefix(kv.ClientVersion.Minor, "34") {
		t.Fatalf("kubectl reports %+v, want %s", kv.ClientVersion, version)
	}

	apiserver, err := exec.Command(paths["apiserver"], "--version").Output()
	if err != nil {
		t.Fatalf("kube-apiserver --version: %v", err)
	}
	if got := strings.TrimSpace(string(apiserver)); got != "Kubernetes "+version {
		t.Fatalf("kube-apiserver --version = %q, want %q", got, "Kubernetes "+version)
	}

	// Nothing changed: both binaries are reported unchanged.
	r = MustDevk(t, tree, "build", "apiserver", "kubectl", "-o", "json")
	out = buildOutput{}
	if err := json.Unmarshal([]byte(r.Stdout), &out); err != nil {
		t.Fatal(err)
	}
	for _, b := range out.Binaries {
		if b.Changed {
			t.Errorf("no-op rebuild reported %s changed", b.Component)
		}
	}
}
