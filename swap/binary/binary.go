// Package binary replaces a binary in place, as `devk swap kubectl` and
// `devk swap kubelet` do: atomically, keeping the one it replaces as
// PATH.prev, running the new one's version check and putting the old one
// back when it fails; and the rollback to PATH.prev.
package binary

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/devk/devk/internal/atomicfile"
	"github.com/devk/devk/internal/execx"
)

// ErrNoPrev is returned by a rollback with no PATH.prev to restore.
var ErrNoPrev = errors.New("no previous binary to roll back to")

// Result says what Install or Rollback did.
type Result struct {
	Dest    string `json:"dest"`
	Prev    string `json:"prev,omitempty"`
	Changed bool   `json:"changed"`
	// Version is what the check reported for the installed binary.
	Version string `json:"version,omitempty"`
}

// Check runs an installed binary and says what version it is.
type Check func(ctx context.Context, path string) (string, error)

// PrevPath is where the binary replaced by the last install is kept.
func PrevPath(dest string) string { return dest + ".prev" }

// Install puts src at dest: nothing happens when the bytes are equal;
// otherwise the new binary is written beside dest, fsynced and renamed over
// it, the old one is kept as dest.prev, and check runs the result. A failed
// check puts the old binary back and returns the check's error.
func Install(ctx context.Context, src, dest string, check Check) (res Result, err error) {
	res = Result{Dest: dest}
	in, err := os.Open(src)
	if err != nil {
		return res, fmt.Errorf("new binary: %w (build it first)", err)
	}
	defer in.Close()
	same, err := atomicfile.SameContent(src, dest)
	if err != nil {
		return res, err
	}
	if same {
		if check != nil {
			res.Version, err = check(ctx, dest)
		}
		return res, err
	}
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		return res, err
	}
	hadOld := false
	// The .prev of an earlier swap is kept aside until the new binary
	// passes its check, so a failed install leaves both files as they were.
	keep := PrevPath(dest) + ".keep"
	os.Remove(keep)
	if _, statErr := os.Stat(PrevPath(dest)); statErr == nil {
		if err := os.Rename(PrevPath(dest), keep); err != nil {
			return res, err
		}
		defer func() {
			if err != nil {
				os.Rename(keep, PrevPath(dest))
			} else {
				os.Remove(keep)
			}
		}()
	}
	if _, err := os.Stat(dest); err == nil {
		hadOld = true
		res.Prev = PrevPath(dest)
		if err := linkOrCopy(dest, res.Prev); err != nil {
			return res, fmt.Errorf("keep %s: %w", res.Prev, err)
		}
	}
	if err := atomicfile.WriteFrom(dest, func(w io.Writer) error {
		_, err := io.Copy(w, in)
		return err
	}, 0o755, ""); err != nil {
		return res, err
	}
	res.Changed = true
	if check == nil {
		return res, nil
	}
	if res.Version, err = check(ctx, dest); err != nil {
		if hadOld {
			if rerr := linkOrCopy(res.Prev, dest); rerr != nil {
				return res, fmt.Errorf("%w; and restoring %s from %s failed: %v", err, dest, res.Prev, rerr)
			}
			return res, fmt.Errorf("the new %s failed its check, the old one is back: %w", filepath.Base(dest), err)
		}
		return res, fmt.Errorf("the new %s failed its check: %w", filepath.Base(dest), err)
	}
	return res, nil
}

// Rollback puts dest.prev back at dest (atomically; .prev is kept).
func Rollback(ctx context.Context, dest string, check Check) (Result, error) {
	res := Result{Dest: dest, Prev: PrevPath(dest)}
	if _, err := os.Stat(res.Prev); errors.Is(err, fs.ErrNotExist) {
		return res, fmt.Errorf("%w: there is no %s", ErrNoPrev, res.Prev)
	}
	same, err := atomicfile.SameContent(res.Prev, dest)
	if err != nil {
		return res, err
	}
	if !same {
		if err := linkOrCopy(res.Prev, dest); err != nil {
			return res, err
		}
		res.Changed = true
	}
	if check != nil {
		res.Version, err = check(ctx, dest)
	}
	return res, err
}

// linkOrCopy makes to a copy of from, atomically: a hard link renamed into
// place when possible (no bytes copied), a full copy otherwise.
func linkOrCopy(from, to string) error {
	tmp := to + ".devk-tmp"
	os.Remove(tmp)
	if err := os.Link(from, tmp); err == nil {
		if err := os.Rename(tmp, to); err != nil {
			os.Remove(tmp)
			return err
		}
		return atomicfile.SyncDir(filepath.Dir(to))
	}
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	return atomicfile.WriteFrom(to, func(w io.Writer) error {
		_, err := io.Copy(w, in)
		return err
	}, 0o755, "")
}

// KubectlVersion runs `kubectl version --client -o json` and returns the
// client's gitVersion.
func KubectlVersion(ctx context.Context, path string) (string, error) {
	out, err := execx.Output(ctx, execx.Cmd{Name: path, Args: []string{"version", "--client", "-o", "json"}})
	if err != nil {
		return "", err
	}
	var v struct {
		ClientVersion struct {
			GitVersion string `json:"gitVersion"`
		} `json:"clientVersion"`
	}
	if err := json.Unmarshal(out, &v); err != nil || v.ClientVersion.GitVersion == "" {
		return "", fmt.Errorf("%s version --client -o json printed %q, not a version", path, out)
	}
	return v.ClientVersion.GitVersion, nil
}

// VersionFlag is the check of a binary that prints its version for flag
// (the kubelet's --version): what it printed, without "Kubernetes ".
func VersionFlag(flag string) Check {
	return func(ctx context.Context, path string) (string, error) {
		out, err := execx.Output(ctx, execx.Cmd{Name: path, Args: []string{flag}})
		if err != nil {
			return "", err
		}
		v := strings.TrimSpace(string(out))
		return strings.TrimPrefix(v, "Kubernetes "), nil
	}
}
