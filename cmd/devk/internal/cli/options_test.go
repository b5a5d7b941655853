package cli

import (
	"strings"
	"testing"
)

func TestVerbosityArgs(t *testing.T) {
	tests := []struct{ in, want string }{
		{"swap -v", "swap -v"},
		{"swap -v 2", "swap -v=2"},
		{"-v 0 up", "-v=0 up"},
		{"build --verbosity 3 apiserver", "build --verbosity=3 apiserver"},
		{"swap -v apiserver", "swap -v apiserver"},
		{"-v=2 up", "-v=2 up"},
		// after --, the arguments are a command devk runs: kubectl's -v
		{"etcd diff -v -- kubectl -v 6 get pods", "etcd diff -v -- kubectl -v 6 get pods"},
	}
	for _, tc := range tests {
		if got := strings.Join(VerbosityArgs(strings.Fields(tc.in)), " "); got != tc.want {
			t.Errorf("VerbosityArgs(%s) = %s, want %s", tc.in, got, tc.want)
		}
	}
}
