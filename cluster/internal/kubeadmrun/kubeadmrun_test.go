package kubeadmrun

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeKubeadm writes a script that stands in for the tree's kubeadm:
// building kubeadm takes minutes, and the e2e suite runs the real one
// (TestKubeadmBootstrapper's bad input). It checks it was asked to
// validate a file, then prints what and exits as told.
func fakeKubeadm(t *testing.T, output string, exit int) string {
	t.Helper()
	dir := t.TempDir()
	bin, said := filepath.Join(dir, "kubeadm"), filepath.Join(dir, "output")
	script := fmt.Sprintf("#!/bin/sh\n"+
		`[ "$1 $2 $3" = "config validate --config" ] && [ -f "$4" ] || { echo "unexpected: $*" >&2; exit 9; }`+"\n"+
		"cat %s >&2\nexit %d\n", said, exit)
	if err := os.WriteFile(said, []byte(output+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

func TestValidate(t *testing.T) {
	config := []byte("apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nnetworking:\n  serviceSubnet: not-a-cidr\n")
	ctx := context.Background()
	if err := Validate(ctx, fakeKubeadm(t, "ok", 0), config); err != nil {
		t.Errorf("a config kubeadm accepts: %v", err)
	}
	err := Validate(ctx, fakeKubeadm(t, `networking.serviceSubnet: Invalid value: "not-a-cidr": couldn't parse subnet`, 1), config)
	if err == nil {
		t.Fatal("a config kubeadm rejects is no error")
	}
	for _, want := range []string{
		"the tree's kubeadm rejects the config devk made for it (`kubeadm config validate`: exit status 1)",
		`  networking.serviceSubnet: Invalid value: "not-a-cidr"`, // kubeadm's message
		"   4    serviceSubnet: not-a-cidr",                       // the document, by line
		"fix the kubeadmConfigPatches entry",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q:\n%v", want, err)
		}
	}
	if err := Validate(ctx, filepath.Join(t.TempDir(), "none"), config); err == nil || strings.Contains(err.Error(), "rejects") {
		t.Errorf("no kubeadm to run: %v, want the failure to run it, not a rejection", err)
	}
}

func TestNumbered(t *testing.T) {
	if got, want := numbered([]byte("a\nb\n")), "   1  a\n   2  b"; got != want {
		t.Errorf("numbered: %q, want %q", got, want)
	}
}
