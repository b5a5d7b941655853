package binary

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/devk/devk/internal/atomicfile"
)

func fakeKubectl(t *testing.T, dir, version string) string {
	t.Helper()
	p := filepath.Join(dir, "kubectl-"+version)
	script := "#!/bin/sh\necho '{\"clientVersion\":{\"gitVersion\":\"" + version + "\"}}'\n"
	if version == "broken" {
		script = "#!/bin/sh\necho 'panic' >&2\nexit 2\n"
	}
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// The "binaries" here are shell scripts: real executables that answer
// `version --client -o json` like kubectl, without a Kubernetes build.
func TestInstall(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	dest := filepath.Join(dir, "bin", "kubectl")
	v1, v2, broken := fakeKubectl(t, dir, "v1.34.4"), fakeKubectl(t, dir, "v1.34.4-dirty"), fakeKubectl(t, dir, "broken")

	res, err := Install(ctx, v1, dest, KubectlVersion)
	if err != nil || !res.Changed || res.Version != "v1.34.4" || res.Prev != "" {
		t.Fatalf("first install = %+v, %v", res, err)
	}
	res, err = Install(ctx, v1, dest, KubectlVersion)
	if err != nil || res.Changed {
		t.Fatalf("identical install = %+v, %v; want a no-op", res, err)
	}
	res, err = Install(ctx, v2, dest, KubectlVersion)
	if err != nil || !res.Changed || res.Version != "v1.34.4-dirty" || res.Prev != dest+".prev" {
		t.Fatalf("second install = %+v, %v", res, err)
	}
	if same, _ := atomicfile.SameContent(v1, dest+".prev"); !same {
		t.Fatal(".prev does not hold the old bytes")
	}

	// A binary that fails its check is not left in place.
	res, err = Install(ctx, broken, dest, KubectlVersion)
	if err == nil || !strings.Contains(err.Error(), "the old one is back") {
		t.Fatalf("broken install: %+v, %v", res, err)
	}
	if same, _ := atomicfile.SameContent(v2, dest); !same {
		t.Fatal("the broken binary stayed installed")
	}

	// The failed install left .prev alone: rollback reaches v1.
	res, err = Rollback(ctx, dest, KubectlVersion)
	if err != nil || !res.Changed || res.Version != "v1.34.4" {
		t.Fatalf("rollback = %+v, %v", res, err)
	}
	if same, _ := atomicfile.SameContent(v1, dest); !same {
		t.Fatal("rollback did not restore the old bytes")
	}
	if _, err := Rollback(ctx, filepath.Join(dir, "none"), nil); !errors.Is(err, ErrNoPrev) {
		t.Fatalf("rollback without .prev: %v", err)
	}
	if _, err := Install(ctx, filepath.Join(dir, "missing"), dest, nil); err == nil || !strings.Contains(err.Error(), "build it first") {
		t.Fatalf("missing source: %v", err)
	}
}
