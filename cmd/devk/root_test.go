package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func runDevk(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := newRootCmd(&out, &errb)
	cmd.SetArgs(args)
	err = cmd.ExecuteContext(context.Background())
	return out.String(), errb.String(), err
}

func TestRootErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"bad output format", []string{"version", "-o", "yaml"}, `-o "yaml": use text or json`},
		{"verbose and quiet", []string{"version", "-v", "-q"}, "contradict"},
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
