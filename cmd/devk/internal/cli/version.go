package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// DevVersion is the version of a build nothing stamped.
const DevVersion = "dev"

// VersionInfo is devk's version, as `devk version` prints it.
type VersionInfo struct {
	Version   string `json:"version"`
	Commit    string `json:"commit,omitempty"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// Version is this devk's version (VersionOf the stamp and the binary's
// build information).
func (g *Options) Version() VersionInfo {
	bi, _ := debug.ReadBuildInfo()
	return VersionOf(g.version, bi)
}

// VersionOf is devk's version: the one `make build` stamps, else the
// module version `go install …/cmd/devk@vX.Y.Z` records in the binary,
// else "dev"; with the VCS revision when the build recorded one.
func VersionOf(stamped string, bi *debug.BuildInfo) VersionInfo {
	if stamped == "" {
		stamped = DevVersion
	}
	v := VersionInfo{Version: stamped, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi == nil {
		return v
	}
	if stamped == DevVersion && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" {
			v.Commit = s.Value
		}
	}
	return v
}

// String is what `devk version` prints.
func (v VersionInfo) String() string {
	return fmt.Sprintf("devk %s (%s, %s)", v.Version, v.GoVersion, v.Platform)
}

// Line is what `devk version` prints, with the commit.
func (v VersionInfo) Line() string {
	s := v.String()
	if v.Commit != "" {
		s += " " + v.Commit
	}
	return s
}
