package skew

import (
	"strings"
	"testing"
)

func TestCheckEmulated(t *testing.T) {
	for _, tc := range []struct {
		emulated, binary string
		want             string // part of the error; "" for none
	}{
		{"1.34", "v1.34.4", ""},
		{"1.33", "v1.34.4", ""},
		{"1.31", "v1.34.4-dirty", ""},
		{"1.30", "v1.34.4", "components of v1.34.4 emulate 1.31 to 1.34"},
		{"1.35", "v1.34.4", "components of v1.34.4 emulate 1.31 to 1.34"},
		{"1.32", "v1.35.0", ""},
		{"1.31", "v1.35.0", "emulate 1.32 to 1.35"},
		{"1.31", "v1.32.1", ""},
		{"1.32", "v1.31.0", "emulate 1.31 to 1.31"},
		{"1.29", "v1.30.2", "v1.30.2 has no compatibility versions"},
		{"one", "v1.34.4", `version "one"`},
	} {
		err := CheckEmulated(tc.emulated, tc.binary)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s on %s: %v", tc.emulated, tc.binary, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s on %s: %v, want an error with %q", tc.emulated, tc.binary, err, tc.want)
		}
	}
}
