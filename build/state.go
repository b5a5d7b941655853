package build

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/devk/devk/internal/atomicfile"
)

// StateFile is the tree's record of what devk built and pushed, at
// <tree>/_output/devk/state.json.
type StateFile struct {
	Components map[string]*ComponentState `json:"components"`
}

// ComponentState is what devk knows of one component.
type ComponentState struct {
	Binary *BinaryRecord `json:"binary,omitempty"`
	// Debug is the last debug build's binary (Options.Debug), kept
	// apart from the normal one so that going back to it builds nothing.
	Debug  *BinaryRecord `json:"debug,omitempty"`
	Pushed *PushRecord   `json:"pushed,omitempty"`
	// DebugPushed is the last pushed debug image (one with the debugger
	// in it, `devk debug`'s), kept apart from Pushed so that `devk swap`
	// and `devk digest verify` of the normal build never pick it.
	DebugPushed *PushRecord `json:"debugPushed,omitempty"`
}

// PushedOf is the record of the last pushed debug image when debug is
// set, else of the last normal one (nil when none).
func (c *ComponentState) PushedOf(debug bool) *PushRecord {
	if debug {
		return c.DebugPushed
	}
	return c.Pushed
}

// SetPushed records rec as the last pushed debug image when debug is
// set, else as the last normal one.
func (c *ComponentState) SetPushed(debug bool, rec *PushRecord) {
	if debug {
		c.DebugPushed = rec
	} else {
		c.Pushed = rec
	}
}

// BinaryOf is the record of the last debug build when debug is set,
// else of the last normal one (nil when none).
func (c *ComponentState) BinaryOf(debug bool) *BinaryRecord {
	if debug {
		return c.Debug
	}
	return c.Binary
}

func (c *ComponentState) setBinary(debug bool, rec *BinaryRecord) {
	if debug {
		c.Debug = rec
	} else {
		c.Binary = rec
	}
}

// BinaryRecord describes the last built binary.
type BinaryRecord struct {
	Path    string    `json:"path"`
	SHA256  string    `json:"sha256"`
	Size    int64     `json:"size"`
	ModTime time.Time `json:"modTime"`
	// BuildID is the Go build ID written into the binary ("" if none).
	BuildID string `json:"buildID,omitempty"`
	// Inputs hashes what an external component (etcd, coredns) was built
	// from; the same inputs make the same binary (see moduleInputs).
	Inputs   string    `json:"inputs,omitempty"`
	Platform string    `json:"platform"` // linux/amd64
	Version  string    `json:"version"`  // the stamped gitVersion
	BuiltAt  time.Time `json:"builtAt"`
	// CompiledAt is when the go build that made it began to read the
	// tree: a file of the tree changed later may not be in the binary.
	// A debug build's default packages are those changed since the
	// normal build's (ChangedPackages).
	CompiledAt time.Time `json:"compiledAt,omitzero"`
	// DebugPackages are the package patterns a debug build compiled
	// with -N -l (none: symbols kept, optimised everywhere).
	DebugPackages []string `json:"debugPackages,omitempty"`
}

// PushRecord describes the last pushed image.
type PushRecord struct {
	// Ref is repo@sha256:… as pushed.
	Ref string `json:"ref"`
	// Repository is registry/name without tag or digest.
	Repository string `json:"repository"`
	Tag        string `json:"tag"`
	Digest     string `json:"digest"`
	// BinarySHA256 is the binary the image holds; Debug says it is
	// the debug build's (ComponentState.Debug).
	BinarySHA256 string    `json:"binarySHA256"`
	Debug        bool      `json:"debug,omitempty"`
	PushedAt     time.Time `json:"pushedAt"`
}

// StatePath is where a tree's state file lives.
func StatePath(treeRoot string) string {
	return filepath.Join(treeRoot, "_output", "devk", "state.json")
}

// LoadState reads the tree's state; a missing file is an empty state.
func LoadState(treeRoot string) (*StateFile, error) {
	st := &StateFile{Components: map[string]*ComponentState{}}
	data, err := os.ReadFile(StatePath(treeRoot))
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(data, st); err != nil {
		return nil, fmt.Errorf("read %s: %w (delete it to start over; devk rebuilds what it needs)", StatePath(treeRoot), err)
	}
	if st.Components == nil {
		st.Components = map[string]*ComponentState{}
	}
	return st, nil
}

// Component returns the state of one component, creating it if absent.
func (s *StateFile) Component(name string) *ComponentState {
	c := s.Components[name]
	if c == nil {
		c = &ComponentState{}
		s.Components[name] = c
	}
	return c
}

// UpdateState loads the state under an exclusive lock, lets change modify
// it, and writes it back atomically; concurrent devk processes (a build
// and a push) do not lose each other's records.
func UpdateState(treeRoot string, change func(*StateFile) error) error {
	path := StatePath(treeRoot)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	lock, err := os.OpenFile(path+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("lock %s: %w", path, err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	st, err := LoadState(treeRoot)
	if err != nil {
		return err
	}
	if err := change(st); err != nil {
		return err
	}
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(path, append(data, '\n'), 0o644, "")
}
