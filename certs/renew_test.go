package certs

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/devk/devk/cluster/pki"
	"github.com/devk/devk/phase"
)

// TestRenewRefusesBeforeWriting: names renew cannot take, a CA without
// its key, and a node whose runtime does not answer are errors that
// change no file.
func TestRenewRefusesBeforeWriting(t *testing.T) {
	f := fixturePKI(t, time.Now())
	if err := os.Remove(pki.KeyPath(f.PKIDir, "front-proxy-ca")); err != nil {
		t.Fatal(err)
	}
	snapshot := func() map[string]string {
		out := map[string]string{}
		filepath.WalkDir(filepath.Dir(f.PKIDir), func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				data, _ := os.ReadFile(p)
				out[p] = string(data)
			}
			return nil
		})
		return out
	}
	before := snapshot()
	socket := filepath.Join(t.TempDir(), "none.sock")
	for _, tc := range []struct {
		names []string
		want  string
	}{
		{[]string{"apiservr"}, `no certificate "apiservr": use one of admin.conf, apiserver,`},
		{[]string{"ca"}, `no certificate "ca"`},
		{[]string{"all", "apiserver"}, `"all" renews every certificate: name no others beside it`},
		{[]string{"front-proxy-client"}, "front-proxy-client cannot be renewed here: its CA front-proxy-ca is external"},
		{[]string{"apiserver"}, "renew needs the cluster running"},
		{[]string{"all"}, "renew needs the cluster running"},
	} {
		_, err := Renew(context.Background(), RenewOptions{Files: f, Names: tc.names, CRISocket: socket, Timeout: time.Second}, phase.Options{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("renew %v: %v, want %q", tc.names, err, tc.want)
		}
	}
	after := snapshot()
	if len(after) != len(before) {
		t.Fatalf("files: %d before, %d after", len(before), len(after))
	}
	for p, data := range before {
		if after[p] != data {
			t.Errorf("%s changed", p)
		}
	}
}
