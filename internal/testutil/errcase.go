package testutil

import (
	"strings"
	"testing"
)

// WantErr checks a table case's error: with want set, err must say it,
// and WantErr returns true (the case ends there); with want empty, any
// error fails t.
func WantErr(t testing.TB, err error, want string) bool {
	t.Helper()
	if want != "" {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("err = %v, want one saying %q", err, want)
		}
		return true
	}
	if err != nil {
		t.Fatal(err)
	}
	return false
}
