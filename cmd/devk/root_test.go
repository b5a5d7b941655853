package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/devk/devk/cmd/devk/internal/cli"
)

func runDevk(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := newRootCmd(&out, &errb, args)
	err = cmd.ExecuteContext(context.Background())
	return out.String(), errb.String(), err
}

func TestRootErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"bad output format", []string{"version", "-o", "wide"}, `-o "wide": use one of text, json, yaml`},
		{"verbose and quiet", []string{"version", "-v", "-q"}, "contradict"},
		{"negative verbosity", []string{"version", "-v=-1"}, "0 (the default) or more"},
		{"unknown component", []string{"build", "apiservr", "--tree", "."}, "use one of apiserver"},
		{"build outside a tree", []string{"build", "apiserver", "--tree", "/"}, "devk source get"},
		{"info outside a tree", []string{"source", "info", "--tree", "/"}, "devk source get"},
		{"bad release", []string{"source", "get", "1.34"}, "not a Kubernetes release tag"},
		{"phases outside a tree", []string{"build", "apiserver", "--tree", "/", "--skip-phases", "nope"}, "devk source get"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := runDevk(t, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestVersionJSON(t *testing.T) {
	out, _, err := runDevk(t, "version", "-o", "json")
	if err != nil || !strings.Contains(out, `"goVersion"`) {
		t.Fatalf("version -o json = %q, %v", out, err)
	}
}

func TestHelpListsPhases(t *testing.T) {
	out, _, err := runDevk(t, "build", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Phases (run in this order", "resolve", "compile", "record", "--skip-phases", "--dry-run"} {
		if !strings.Contains(out, want) {
			t.Errorf("build --help lacks %q", want)
		}
	}
}

func TestCompletion(t *testing.T) {
	out, _, err := runDevk(t, "completion", "bash")
	if err != nil || !strings.Contains(out, "__start_devk") {
		t.Fatalf("completion bash: %v", err)
	}
}

func TestVerbositySpellings(t *testing.T) {
	for _, args := range [][]string{
		{"version", "-v"}, {"version", "-v", "2"}, {"version", "-v=1"}, {"version", "--verbosity", "2"}, {"version", "--verbose"},
	} {
		if _, stderr, err := runDevk(t, args...); err != nil {
			t.Errorf("devk %s: %v\n%s", strings.Join(args, " "), err, stderr)
		}
	}
	_, stderr, _ := runDevk(t, "version", "--verbose")
	if !strings.Contains(stderr, "use -v 1") {
		t.Errorf("--verbose does not say it is deprecated: %q", stderr)
	}
}

func TestEveryCommandIsGrouped(t *testing.T) {
	root := newRootCmd(io.Discard, io.Discard, nil)
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	groups := map[string]bool{}
	for _, g := range root.Groups() {
		groups[g.ID] = true
	}
	for _, c := range root.Commands() {
		if !groups[c.GroupID] {
			t.Errorf("devk %s is in no help group: add it to groupOf", c.Name())
		}
	}
	out, _, err := runDevk(t, "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range commandGroups {
		if !strings.Contains(out, g.Title) {
			t.Errorf("root help lacks group %q:\n%s", g.Title, out)
		}
	}
	for _, code := range []string{"130", "Exit status"} {
		if !strings.Contains(out, code) {
			t.Errorf("root help does not document exit status (%s)", code)
		}
	}
}

// TestStructuredResults checks -o yaml and -o json print the same
// documented result, and that each command printing one documents it.
func TestStructuredResults(t *testing.T) {
	var fromJSON, fromYAML cli.VersionInfo
	for format, v := range map[string]*cli.VersionInfo{"json": &fromJSON, "yaml": &fromYAML} {
		out, _, err := runDevk(t, "version", "-o", format)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal([]byte(out), v); err != nil {
			t.Fatalf("-o %s: %v\n%s", format, err, out)
		}
	}
	if fromJSON.Version == "" || fromJSON != fromYAML {
		t.Errorf("-o json gave %+v, -o yaml %+v", fromJSON, fromYAML)
	}
	t.Setenv("DEVK_HOME", t.TempDir())
	out, _, err := runDevk(t, "down", "--name", "none", "-o", "yaml")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Name    string `json:"name"`
		Existed bool   `json:"existed"`
	}
	if err := yaml.Unmarshal([]byte(out), &d); err != nil || d.Name != "none" || d.Existed {
		t.Errorf("down -o yaml: %+v, %v\n%s", d, err, out)
	}
	for _, args := range [][]string{
		{"version"}, {"source", "get"}, {"source", "info"}, {"build"}, {"push"}, {"registry", "ls"},
		{"up"}, {"down"}, {"status"}, {"swap"}, {"digest"}, {"digest", "verify"},
		{"etcd", "ls"}, {"etcd", "get"}, {"etcd", "watch"}, {"etcd", "diff"},
		{"certs", "check-expiration"}, {"certs", "renew"}, {"export", "logs"},
	} {
		out, _, err := runDevk(t, append(args, "--help")...)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, "With -o json or -o yaml the result") {
			t.Errorf("devk %s --help does not document its -o json|yaml result", strings.Join(args, " "))
		}
	}
}

func TestOldFlagSpellingsStillWork(t *testing.T) {
	t.Setenv("DEVK_HOME", t.TempDir())
	kc := filepath.Join(t.TempDir(), "config")
	for _, args := range [][]string{
		{"down", "--name", "none", "--kubeconfig", kc},
		{"down", "--name", "none", "--write-kubeconfig", kc},
	} {
		out, stderr, err := runDevk(t, args...)
		if err != nil || !strings.Contains(out, "does not exist") {
			t.Errorf("devk %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr)
		}
	}
	// etcd's --cluster is --name: both name the same missing cluster
	for _, flag := range []string{"--name", "--cluster"} {
		_, _, err := runDevk(t, "etcd", "ls", flag, "none")
		if err == nil || !strings.Contains(err.Error(), `"none"`) {
			t.Errorf("etcd ls %s none: %v, want the missing cluster named", flag, err)
		}
	}
}

func TestCompletionOfNames(t *testing.T) {
	home := t.TempDir()
	for _, c := range []string{"dev1", "dev2"} {
		if err := os.MkdirAll(filepath.Join(home, "clusters", c), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(home, "clusters", c, "cluster.json"), []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("DEVK_HOME", home)
	tests := []struct {
		args      []string
		want, not []string
	}{
		{[]string{"up", "--name", ""}, []string{"dev1", "dev2"}, nil},
		{[]string{"etcd", "ls", "--name", ""}, []string{"dev1", "dev2"}, nil},
		{[]string{"certs", "check-expiration", "--name", ""}, []string{"dev1"}, nil},
		{[]string{"swap", "apiserver", ""}, []string{"scheduler", "kube-proxy", "coredns", "kubelet"}, []string{"apiserver"}},
		{[]string{"digest", "verify", ""}, []string{"apiserver", "etcd", "coredns"}, []string{"kubectl"}},
		{[]string{"watch", ""}, []string{"apiserver", "kubelet"}, []string{"etcd", "coredns"}},
		{[]string{"build", ""}, []string{"apiserver", "all"}, nil},
	}
	for _, tc := range tests {
		out, _, err := runDevk(t, append([]string{"__complete"}, tc.args...)...)
		if err != nil {
			t.Fatal(err)
		}
		offered := strings.Split(out, "\n")
		for _, w := range tc.want {
			if !slices.Contains(offered, w) {
				t.Errorf("devk %s<TAB> lacks %s:\n%s", strings.Join(tc.args, " "), w, out)
			}
		}
		for _, n := range tc.not {
			if slices.Contains(offered, n) {
				t.Errorf("devk %s<TAB> offers %s:\n%s", strings.Join(tc.args, " "), n, out)
			}
		}
	}
}
