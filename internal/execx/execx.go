// Package execx runs subprocesses so that a failure carries the command
// line and what it printed.
package execx

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"

	"github.com/devk/devk/internal/syncbuf"
)

// Cmd describes one subprocess.
type Cmd struct {
	Name string
	Args []string
	Dir  string
	// Env is added to the current environment (later entries win).
	Env []string
	// Stdout and Stderr, when set, also receive the output as it comes.
	Stdout io.Writer
	Stderr io.Writer
}

// Error is a failed command with its output.
type Error struct {
	Command string
	Dir     string
	Output  string
	Err     error
}

func (e *Error) Error() string {
	out := strings.TrimRight(e.Output, "\n")
	if out == "" {
		return fmt.Sprintf("%s: %v", e.Command, e.Err)
	}
	return fmt.Sprintf("%s: %v\n%s", e.Command, e.Err, out)
}

func (e *Error) Unwrap() error { return e.Err }

// String is the command line as a user could type it.
func (c Cmd) String() string {
	parts := make([]string, 0, len(c.Args)+1)
	for _, e := range c.Env {
		parts = append(parts, quote(e))
	}
	parts = append(parts, quote(c.Name))
	for _, a := range c.Args {
		parts = append(parts, quote(a))
	}
	return strings.Join(parts, " ")
}

func quote(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\n'\"\\$`*?[]{}()<>|&;") {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Output runs the command and returns its stdout. On failure the error is
// an *Error holding the command line and its combined output.
func Output(ctx context.Context, c Cmd) ([]byte, error) {
	cmd := exec.CommandContext(ctx, c.Name, c.Args...)
	cmd.Dir = c.Dir
	if len(c.Env) > 0 {
		cmd.Env = append(os.Environ(), c.Env...)
	}
	// The stdout and stderr copiers both write combined: it must be
	// safe for concurrent writes.
	var stdout bytes.Buffer
	var combined syncbuf.Buffer
	cmd.Stdout = multi(&stdout, &combined, c.Stdout)
	cmd.Stderr = multi(&combined, c.Stderr)
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return stdout.Bytes(), &Error{Command: c.String(), Dir: c.Dir, Output: combined.String(), Err: err}
	}
	return stdout.Bytes(), nil
}

// Run runs the command and discards stdout unless c.Stdout is set.
func Run(ctx context.Context, c Cmd) error {
	_, err := Output(ctx, c)
	return err
}

func multi(ws ...io.Writer) io.Writer {
	var out []io.Writer
	for _, w := range ws {
		if w != nil {
			out = append(out, w)
		}
	}
	return io.MultiWriter(out...)
}

// Getenv is the value of name in environ ("" when unset), the last entry
// winning as it does for os.Getenv and for Cmd.Env.
func Getenv(environ []string, name string) string {
	for i := len(environ) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(environ[i], name+"="); ok {
			return v
		}
	}
	return ""
}
