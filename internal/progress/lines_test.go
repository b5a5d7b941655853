package progress

import (
	"slices"
	"testing"
)

func TestLines(t *testing.T) {
	var got []string
	l := LinesTo(func(s string) { got = append(got, s) })
	for _, w := range []string{"[init] Using", " Kubernetes version\n[preflight]", " Running\n\n", "last"} {
		if n, err := l.Write([]byte(w)); n != len(w) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", w, n, err)
		}
	}
	if want := []string{"[init] Using Kubernetes version", "[preflight] Running", ""}; !slices.Equal(got, want) {
		t.Fatalf("before Close: %q, want %q", got, want)
	}
	l.Close()
	if got[len(got)-1] != "last" {
		t.Errorf("Close handed over %q", got[len(got)-1])
	}
}
