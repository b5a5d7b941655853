package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/devk/devk/cluster"
	"github.com/devk/devk/cmd/devk/internal/cli"
	"github.com/devk/devk/digest"
	"github.com/devk/devk/internal/interrupt"
	"github.com/devk/devk/pki"
)

// TestExitStatus runs devk as main does and checks the status scripts
// see, as `devk --help` and docs/usage.md document them.
func TestExitStatus(t *testing.T) {
	t.Setenv("DEVK_HOME", t.TempDir()) // node exec looks for its cluster there
	pkiDir, confDir := t.TempDir(), t.TempDir()
	cfg := pki.Config{NodeName: "node-1", ServiceIP: net.ParseIP("10.96.0.1"), AdvertiseIP: net.ParseIP("10.250.0.2"), DNSDomain: "cluster.local"}
	for _, s := range pki.Specs(cfg) {
		if _, err := pki.Ensure(pkiDir, s, time.Now(), true); err != nil {
			t.Fatal(err)
		}
	}
	caPEM, err := os.ReadFile(pki.CertPath(pkiDir, pki.CAName))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range pki.KubeconfigSpecs("node-1") {
		crt, key, err := pki.ClientCert(pkiDir, pki.CAName, k.CommonName, k.Organization, time.Now(), 0)
		if err != nil {
			t.Fatal(err)
		}
		data, err := cluster.KubeconfigBytes("kubernetes", "https://10.250.0.2:6443", caPEM, k.CommonName, crt, key)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(confDir, k.Name+".conf"), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	expiration := []string{"certs", "check-expiration", "--pki-dir", pkiDir, "--kubeconfig-dir", confDir, "--manifests-dir", confDir}
	interrupted, cancel := context.WithCancelCause(context.Background())
	cancel(interrupt.ErrInterrupted)

	tests := []struct {
		name   string
		ctx    context.Context
		args   []string
		want   int
		stderr string
	}{
		{"success", context.Background(), []string{"version"}, 0, ""},
		{"unknown command", context.Background(), []string{"bogus"}, cli.ExitFailure, `devk: unknown command "bogus"`},
		{"bad flag", context.Background(), []string{"version", "--bogus"}, cli.ExitFailure, "unknown flag"},
		{"nothing expires within a day", context.Background(), append(expiration, "--fail-within", "1d"), 0, ""},
		{"a certificate expires within 100 years", context.Background(), append(expiration, "--fail-within", "36500d"), cli.ExitExpiring, "expire"},
		{"node exec, devk's own failure", context.Background(), []string{"node", "exec", "--name", "nosuch", "--", "true"}, cli.ExitExecFailed, `devk: no devk cluster "nosuch"`},
		{"interrupted", interrupted, []string{"etcd", "ls", "--endpoints", "http://127.0.0.1:1", "--dial-timeout", "1s"}, cli.ExitInterrupted, "devk: interrupted"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if got := run(tc.ctx, tc.args, &out, &errb); got != tc.want {
				t.Errorf("devk %s exited %d, want %d\nstderr: %s", strings.Join(tc.args, " "), got, tc.want, errb.String())
			}
			if !strings.Contains(errb.String(), tc.stderr) {
				t.Errorf("stderr %q lacks %q", errb.String(), tc.stderr)
			}
		})
	}
	// digest verify's mismatch is 2 as well; "could not read" is any
	// other error, so 1.
	var ec cli.ExitCoder = &digest.MismatchError{}
	if ec.ExitCode() != 2 || cli.ExitExpiring != 2 {
		t.Errorf("a check's finding exits %d (digest) and %d (certs); the help says 2", ec.ExitCode(), cli.ExitExpiring)
	}
}
