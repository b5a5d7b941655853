package main

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/devk/devk/internal/testtree"
)

// TestNamesAreNotPaths: versions, platforms and components that would
// climb out of the directory they name are refused by the commands, with
// what is accepted, and nothing is written: the tree and a victim
// directory beside it are unchanged.
func TestNamesAreNotPaths(t *testing.T) {
	root := testtree.New(t)
	victim := filepath.Join(filepath.Dir(root), "victim")
	if err := os.MkdirAll(victim, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(victim, "go.mod"), []byte("module victim\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	getDir := filepath.Join(t.TempDir(), "k")

	tests := []struct {
		name string
		args []string
		want string
	}{
		{"source get, climbing release", []string{"source", "get", "../../x", getDir}, `"../../x" is not a Kubernetes release tag: use v1.MINOR.PATCH`},
		{"source get, release then path", []string{"source", "get", "v1.34.4/../../x", getDir}, "is not a Kubernetes release tag"},
		{"source get, absolute", []string{"source", "get", "/etc", getDir}, "is not a Kubernetes release tag"},
		{"source get, NUL", []string{"source", "get", "v1.34.4\x00", getDir}, `"v1.34.4\x00" is not a Kubernetes release tag`},
		{"source get, lookalike slash", []string{"source", "get", "v1.34.4\u2215..", getDir}, "is not a Kubernetes release tag"},
		{"build, climbing platform", []string{"build", "kubectl", "--tree", root, "--platform", "linux/../../x"}, `platform "linux/../../x": use os/arch, one of linux/amd64`},
		{"build, platform of one part", []string{"build", "kubectl", "--tree", root, "--platform", "../x"}, "use os/arch"},
		{"build, climbing etcd version", []string{"build", "etcd", "--tree", root, "--etcd-version", "v1/../../../../victim"}, "--etcd-version: etcd version \"v1/../../../../victim\": use v3.MINOR.PATCH"},
		{"build, etcd version beside the tree", []string{"build", "etcd", "--tree", root, "--etcd-version", "v3.6.5/../../../../../victim"}, "e.g. v3.6.5"},
		{"build, climbing CoreDNS version", []string{"build", "coredns", "--tree", root, "--coredns-version", "v1.12.1/../../../../victim"}, "--coredns-version: CoreDNS version \"v1.12.1/../../../../victim\": use v1.MINOR.PATCH"},
		{"build, climbing package path", []string{"build", "../kubectl", "--tree", root}, "is not inside the tree at " + root},
		{"build, package path to the victim", []string{"build", "../victim", "--tree", root}, "is not inside the tree at " + root},
		{"push, climbing package path", []string{"push", "../../kubectl", "--tree", root}, "is not inside the tree at " + root},
		{"swap, package path", []string{"swap", "./cmd/kubectl", "--tree", root}, "a package path, which only `devk build` and `devk push` take; here use one of apiserver"},
	}
	treeBefore, victimBefore := testtree.HashDir(t, root), testtree.HashDir(t, victim)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := runDevk(t, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	if testtree.HashDir(t, root) != treeBefore {
		t.Error("the tree changed")
	}
	if testtree.HashDir(t, victim) != victimBefore {
		t.Error("the victim directory changed")
	}
	if _, err := os.Stat(getDir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("source get made %s", getDir)
	}
}
