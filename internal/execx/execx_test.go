package execx

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
)

func TestOutputErrorCarriesCommandAndOutput(t *testing.T) {
	_, err := Output(context.Background(), Cmd{Name: "sh", Args: []string{"-c", "echo to-stdout; echo to-stderr >&2; exit 3"}, Env: []string{"A=b c"}})
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("err = %v, want *Error", err)
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Fatalf("exit status lost: %v", err)
	}
	for _, want := range []string{"'A=b c' sh -c 'echo to-stdout;", "to-stdout", "to-stderr"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	out, err := Output(context.Background(), Cmd{Name: "sh", Args: []string{"-c", "echo ok; echo noise >&2"}})
	if err != nil || string(out) != "ok\n" {
		t.Fatalf("Output = %q, %v; want stdout only", out, err)
	}
}

func TestGetenv(t *testing.T) {
	environ := []string{"A=1", "AB=x", "A=2", "EMPTY="}
	for name, want := range map[string]string{"A": "2", "AB": "x", "EMPTY": "", "NONE": "", "": ""} {
		if got := Getenv(environ, name); got != want {
			t.Errorf("Getenv(%q) = %q, want %q (the last entry wins)", name, got, want)
		}
	}
}
