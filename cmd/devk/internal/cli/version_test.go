package cli

import (
	"runtime/debug"
	"testing"
)

func TestVersionOf(t *testing.T) {
	installed := &debug.BuildInfo{Main: debug.Module{Path: "github.com/devk/devk", Version: "v0.3.0"}}
	local := &debug.BuildInfo{Main: debug.Module{Path: "github.com/devk/devk", Version: "(devel)"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}}}
	for _, tc := range []struct {
		name, stamped string
		bi            *debug.BuildInfo
		want, commit  string
	}{
		{"go install @version", DevVersion, installed, "v0.3.0", ""},
		{"make build stamps git describe", "v0.3.0-2-gabc123", installed, "v0.3.0-2-gabc123", ""},
		{"go build in a checkout", DevVersion, local, DevVersion, "abc123"},
		{"no build info", DevVersion, nil, DevVersion, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := VersionOf(tc.stamped, tc.bi)
			if v.Version != tc.want || v.Commit != tc.commit {
				t.Fatalf("VersionOf = %+v, want version %q commit %q", v, tc.want, tc.commit)
			}
		})
	}
}
