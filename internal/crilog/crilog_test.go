package crilog

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	var b strings.Builder
	for _, l := range []string{
		"2026-11-29T18:00:00.000000001Z stderr F I1129 starting",
		"2026-11-29T18:00:00.000000002Z stdout F listening",
		"2026-11-29T18:00:00.000000003Z stderr P partial ",
		"2026-11-29T18:00:00.000000004Z stderr F E1129 failed: bind: address in use",
		"a line without the CRI prefix",
	} {
		b.WriteString(l + "\n")
	}
	os.WriteFile(path, []byte(b.String()), 0o644)
	got, err := Tail(path, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"partial ", "E1129 failed: bind: address in use", "a line without the CRI prefix"}
	if !slices.Equal(got, want) {
		t.Fatalf("Tail = %q, want %q", got, want)
	}
	if _, err := Tail(filepath.Join(t.TempDir(), "none"), 3); err == nil {
		t.Fatal("a missing log read without error")
	}
}
