// Package version holds what the linker stamps, as in Kubernetes.
package version

// Set with -ldflags "-X ...", as hack/lib/version.sh does.
var (
	gitVersion   = "v0.0.0-master+$Format:%H$"
	gitMajor     = ""
	gitMinor     = ""
	gitCommit    = "$Format:%H$"
	gitTreeState = ""
	buildDate    = "1970-01-01T00:00:00Z"
)

// Info is the stamped version.
type Info struct {
	GitVersion   string `json:"gitVersion"`
	Major        string `json:"major"`
	Minor        string `json:"minor"`
	GitCommit    string `json:"gitCommit"`
	GitTreeState string `json:"gitTreeState"`
	BuildDate    string `json:"buildDate"`
}

// Get returns the stamped version.
func Get() Info {
	return Info{gitVersion, gitMajor, gitMinor, gitCommit, gitTreeState, buildDate}
}
