package image

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"golang.org/x/sys/unix"

	"github.com/devk/devk/build"
	"github.com/devk/devk/image/debbase"
	"github.com/devk/devk/internal/testtree"
	"github.com/devk/devk/internal/testutil"
	"github.com/devk/devk/phase"
)

// testBaseCache is the Debian bases' cache the tests share between runs
// (and, under debs/, with image/debbase's tests), so that only the first
// run on a machine downloads packages.
var testBaseCache = filepath.Join(os.TempDir(), "devk-debian-test")

// kubeProxyMain is a stand-in for kube-proxy: it runs what the iptables
// mode runs, through PATH as the real one does.
const kubeProxyMain = `// A stand-in for kube-proxy: it runs the commands its iptables mode runs.
package main

import (
	"fmt"
	"os"
	"os/exec"
)

func main() {
	for _, c := range []string{"iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save", "ip6tables-restore", "conntrack"} {
		out, err := exec.Command(c, "--version").CombinedOutput()
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v: %s\n", c, err, out)
			os.Exit(1)
		}
		os.Stdout.Write(out)
	}
}
`

// kubeProxyTree is the fixture tree with a cmd/kube-proxy.
func kubeProxyTree(t *testing.T) string {
	t.Helper()
	root := testtree.Copy(t)
	if err := os.MkdirAll(filepath.Join(root, "cmd", "kube-proxy"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "cmd", "kube-proxy", "main.go"), []byte(kubeProxyMain), 0o644); err != nil {
		t.Fatal(err)
	}
	testtree.Git(t, root, "init", "-q")
	testtree.Git(t, root, "add", "-A")
	testtree.Git(t, root, "commit", "-q", "-m", "fixture")
	testtree.Git(t, root, "tag", testtree.Tag)
	return root
}

// TestKubeProxyOnIptablesBase runs `devk build kube-proxy --push`: the
// iptables base is made from Debian's packages and pushed, kube-proxy
// goes on it at /usr/local/bin/kube-proxy, and, run in the unpacked
// image, it finds and runs iptables and conntrack. A second push changes
// nothing and uploads nothing; a fresh cache gives the same digests.
func TestKubeProxyOnIptablesBase(t *testing.T) {
	testutil.NeedDebian(t)
	t.Setenv("SOURCE_DATE_EPOCH", "")
	ctx := context.Background()
	reg, addr := newTestRegistry(t)
	root := kubeProxyTree(t)
	o := opts(addr)
	o.Push = true
	o.BaseCache = testBaseCache
	platform := "linux/" + runtime.GOARCH
	bo := build.Options{TreeDir: root, Components: []string{"kube-proxy"}, Platform: platform}
	j, err := Run(ctx, bo, o, phase.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(j.Bases) != 1 || len(j.Images) != 1 {
		t.Fatalf("bases %+v, images %+v", j.Bases, j.Images)
	}
	b, r := j.Bases[0], j.Images[0]
	if b.Kind != build.BaseIptables || b.Ref != addr+"/devk-iptables-base@"+b.Digest || r.Base != b.Ref {
		t.Fatalf("base %+v, image %+v", b, r)
	}
	if !slices.ContainsFunc(b.Packages, func(p debbase.Package) bool { return p.Name == "conntrack" }) {
		t.Fatalf("packages %v", b.Packages)
	}

	// The base is in the registry under its tag, by its digest.
	baseRef, _ := name.ParseReference(addr + "/devk-iptables-base:" + b.Tag)
	if d, err := remote.Head(baseRef); err != nil || d.Digest.String() != b.Digest {
		t.Fatalf("the registry's %s: %v, %v", baseRef, d, err)
	}
	ref, _ := name.ParseReference(r.Ref)
	img, err := remote.Image(ref)
	if err != nil {
		t.Fatal(err)
	}
	ls, _ := img.Layers()
	if len(ls) != 2 {
		t.Fatalf("%d layers, want the base's and the binary's", len(ls))
	}
	if d, _ := ls[0].Digest(); d.String() != b.Layer {
		t.Fatalf("first layer %s, the base's is %s", d, b.Layer)
	}
	cf, _ := img.ConfigFile()
	if !slices.Equal(cf.Config.Entrypoint, []string{"/usr/local/bin/kube-proxy"}) || !strings.Contains(cf.Config.Labels[LabelPackages], "iptables=") ||
		cf.Config.Labels[LabelRevision] != j.Version.GitCommit || len(cf.Config.Env) != 1 || cf.OS+"/"+cf.Architecture != platform {
		t.Fatalf("config %+v", cf.Config)
	}

	if os.Geteuid() == 0 {
		dir := t.TempDir()
		unpack(t, img, dir)
		// A container runtime gives the container /dev; exec needs
		// /dev/null.
		if err := os.Mkdir(filepath.Join(dir, "dev"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mknod(filepath.Join(dir, "dev", "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("chroot", dir, "/usr/local/bin/kube-proxy")
		cmd.Env = cf.Config.Env
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "nf_tables") || !strings.Contains(string(out), "conntrack v") {
			t.Fatalf("kube-proxy in the image: %v\n%s", err, out)
		}
	} else {
		t.Log("not root: the image is not run with chroot")
	}

	// Again: the same digests, nothing compressed, nothing uploaded.
	uploads := reg.blobUploads
	j2, err := RunPush(ctx, bo, o, phase.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if b2, r2 := j2.Bases[0], j2.Images[0]; !b2.LayerCached || b2.Digest != b.Digest || !r2.LayerCached || r2.Digest != r.Digest {
		t.Fatalf("second push: base %+v, image %+v", b2, r2)
	}
	if reg.blobUploads != uploads {
		t.Fatalf("an unchanged push uploaded %d blobs", reg.blobUploads-uploads)
	}

	// A fresh layer cache (the debs kept) compresses the same layer.
	fresh := t.TempDir()
	if err := os.Symlink(filepath.Join(testBaseCache, "debs"), filepath.Join(fresh, "debs")); err != nil {
		t.Fatal(err)
	}
	b3, err := MakeDebianBase(ctx, build.BaseIptables, platform, fresh, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b3.LayerCached || b3.Layer != b.Layer || b3.Digest != b.Digest {
		t.Fatalf("fresh cache: %+v, first %+v", b3, b)
	}
}

// unpack writes the image's filesystem into dir.
func unpack(t *testing.T, img v1.Image, dir string) {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	testutil.Untar(t, rc, dir)
}

func TestUnknownBaseKind(t *testing.T) {
	_, err := MakeDebianBase(context.Background(), "nosuch", "linux/amd64", t.TempDir(), nil)
	if err == nil || !strings.Contains(err.Error(), "iptables") {
		t.Fatalf("err = %v, want it to name the known kinds", err)
	}
}
