package loader

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// loaderFile writes the amd64 loader as an executable.
func loaderFile(t *testing.T) string {
	t.Helper()
	elf, err := ELF("amd64")
	if err != nil {
		t.Fatal(err)
	}
	if len(elf) > 512 {
		t.Fatalf("the loader is %d bytes; it was to be a few hundred", len(elf))
	}
	path := filepath.Join(t.TempDir(), "load")
	if err := os.WriteFile(path, elf, 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestRun runs the loader with a real program (the machine's sh) on its
// stdin: the program gets the loader's arguments and environment, and
// reads the bytes that follow it.
func TestRun(t *testing.T) {
	sh, err := os.ReadFile("/bin/sh")
	if err != nil {
		t.Skipf("no /bin/sh to load: %v", err)
	}
	var in bytes.Buffer
	if err := Send(&in, bytes.NewReader(sh), int64(len(sh))); err != nil {
		t.Fatal(err)
	}
	in.WriteString("after the program\n")
	cmd := exec.Command(loaderFile(t), "-c", `echo "args: $1 $2, env: $LOADED"; cat`, "sh", "one", "two")
	cmd.Env = []string{"LOADED=yes"}
	cmd.Stdin = &in
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if want := "args: one two, env: yes\nafter the program\n"; string(out) != want {
		t.Fatalf("got %q, want %q", out, want)
	}
}

// TestShortInput: a stream that ends before the program does, or a
// header cut short, fails with ExitFailed and runs nothing.
func TestShortInput(t *testing.T) {
	for name, in := range map[string][]byte{
		"no header":     nil,
		"short header":  {1, 2, 3},
		"short program": append(Header(1000), "#!/bin/sh\necho ran\n"...),
	} {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(loaderFile(t))
			cmd.Stdin = bytes.NewReader(in)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != ExitFailed {
				t.Fatalf("got %v (%q), want exit %d", err, out, ExitFailed)
			}
			if len(out) != 0 {
				t.Fatalf("printed %q", out)
			}
		})
	}
}

// TestListing assembles testdata/loader_amd64.s with the machine's GNU
// as and compares the code with loader.go's bytes.
func TestListing(t *testing.T) {
	if _, err := exec.LookPath("as"); err != nil {
		t.Skip("no GNU as here")
	}
	dir := t.TempDir()
	obj, bin := filepath.Join(dir, "l.o"), filepath.Join(dir, "l.bin")
	for _, args := range [][]string{{"as", "-o", obj, "testdata/loader_amd64.s"}, {"objcopy", "-O", "binary", "-j", ".text", obj, bin}} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	got, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, amd64) {
		t.Fatalf("the listing assembles to %x\nloader.go has            %x", got, amd64)
	}
}

func TestOtherArch(t *testing.T) {
	if _, err := ELF("arm64"); err == nil || !strings.Contains(err.Error(), "--registry") {
		t.Fatalf("arm64: %v", err)
	}
}
