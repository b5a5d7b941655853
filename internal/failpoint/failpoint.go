//go:build !failpoints

// Package failpoint marks the steps of devk's mutations (swap, up, down)
// where a test build can kill or interrupt the process, to prove that a
// kill at any step loses nothing. Normal builds compile Hit to nothing;
// `go build -tags failpoints` makes DEVK_FAILPOINT act (failpoint_on.go).
package failpoint

// Enabled says whether this build acts on DEVK_FAILPOINT.
const Enabled = false

// Hit marks the point name; see failpoint_on.go.
func Hit(name string) {}
