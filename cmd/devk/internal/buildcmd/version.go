package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// devVersion is the version of a build nothing stamped.
const devVersion = "dev"

// version is set with -ldflags "-X main.version=..." by `make build`.
var version = devVersion

type versionInfo struct {
	Version   string `json:"version"`
	Commit    string `json:"commit,omitempty"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

func newVersionCmd(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print devk's version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bi, _ := debug.ReadBuildInfo()
			v := versionOf(version, bi)
			if g.Structured() {
				return g.Result(v)
			}
			fmt.Fprintln(g.stdout, v)
			return nil
		},
	}
	resultHelp(cmd, versionInfo{}, false)
	return cmd
}

// versionOf is devk's version: the one `make build` stamps, else the
// module version `go install …/cmd/devk@vX.Y.Z` records in the binary,
// else "dev"; with the VCS revision when the build recorded one.
func versionOf(stamped string, bi *debug.BuildInfo) versionInfo {
	v := versionInfo{Version: stamped, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi == nil {
		return v
	}
	if stamped == devVersion && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
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
func (v versionInfo) String() string {
	return fmt.Sprintf("devk %s (%s, %s)", v.Version, v.GoVersion, v.Platform)
}
