package clustercmd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestJoinTokenFlags: node add takes the bootstrap token from --token or
// from --token-file (a file, or stdin for -), trimmed and checked before
// anything is done; never both, never an empty or oversized file, and no
// error repeats the token.
func TestJoinTokenFlags(t *testing.T) {
	const tok = "abcdef.0123456789abcdef"
	dir := t.TempDir()
	file := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := file("good", tok+"\n")
	for _, tc := range []struct {
		name, token, file, stdin string
		want, wantErr            string
	}{
		{name: "neither: the cluster's own"},
		{name: "--token", token: tok, want: tok},
		{name: "a file", file: good, want: tok},
		{name: "a file with spaces", file: file("spaces", "  "+tok+"  \r\n"), want: tok},
		{name: "stdin", file: "-", stdin: tok + "\n", want: tok},
		{name: "both", token: tok, file: good, wantErr: "give the bootstrap token by --token or by --token-file, not both"},
		{name: "a bad --token", token: "abcdef.short", wantErr: "--token: bad bootstrap token"},
		{name: "no such file", file: filepath.Join(dir, "none"), wantErr: "--token-file: open " + filepath.Join(dir, "none") + ": no such file or directory"},
		{name: "an empty file", file: file("empty", "\n"), wantErr: "holds no bootstrap token"},
		{name: "empty stdin", file: "-", wantErr: "--token-file: stdin holds no bootstrap token"},
		{name: "a bad token in the file", file: file("bad", "ABCDEF.0123456789abcdef\n"), wantErr: "--token-file: " + filepath.Join(dir, "bad") + ": bad bootstrap token"},
		{name: "two tokens", file: file("two", tok+"\n"+tok+"\n"), wantErr: "bad bootstrap token"},
		{name: "a big file", file: file("big", strings.Repeat("x", maxTokenFile+1)), wantErr: "holds more than a bootstrap token"},
		{name: "a directory", file: dir, wantErr: "--token-file: read " + dir},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := joinTokenFlags(tc.token, tc.file, strings.NewReader(tc.stdin))
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatal(err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			case err != nil && strings.Contains(err.Error(), "0123456789abcdef"):
				t.Fatalf("the error shows the token's secret: %v", err)
			case got != tc.want:
				t.Fatalf("token %q, want %q", got, tc.want)
			}
		})
	}
}
