package skew

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/version"
)

// Compatibility versions (KEP-4330): the API server, the
// controller-manager and the scheduler of one version may emulate an
// older one (--emulated-version), within these limits (component-base's
// and the API server's floors as of Kubernetes 1.34).
const (
	// EmulationBehind is how many minor versions before its own a
	// component may emulate.
	EmulationBehind = 3
	// EmulationFloor is the oldest version any component emulates, and
	// the first that takes --emulated-version.
	EmulationFloor = "1.31"
)

// EmulationRange is the versions (MAJOR.MINOR) a component of version
// binary may emulate, oldest first; an error for one older than
// EmulationFloor, which has no compatibility versions.
func EmulationRange(binary string) (oldest, newest string, err error) {
	b, err := minor(binary)
	if err != nil {
		return "", "", err
	}
	floor := version.MustParseGeneric(EmulationFloor)
	if b.LessThan(floor) {
		return "", "", fmt.Errorf("%s has no compatibility versions (--emulated-version came in %s)", binary, EmulationFloor)
	}
	lo := b.SubtractMinor(EmulationBehind)
	if lo.LessThan(floor) {
		lo = floor
	}
	return lo.String(), b.String(), nil
}

// CheckEmulated says whether components of version binary can emulate
// version emulated ("1.33"); the error says which they can.
func CheckEmulated(emulated, binary string) error {
	lo, hi, err := EmulationRange(binary)
	if err != nil {
		return fmt.Errorf("emulatedVersion %s: %w: leave emulatedVersion out", emulated, err)
	}
	e, err := minor(emulated)
	if err != nil {
		return fmt.Errorf("emulatedVersion: %w", err)
	}
	if e.LessThan(version.MustParseGeneric(lo)) || e.GreaterThan(version.MustParseGeneric(hi)) {
		return fmt.Errorf("emulatedVersion %s: components of %s emulate %s to %s (at most %d minor versions back, none before %s): give one of those", emulated, binary, lo, hi, EmulationBehind, EmulationFloor)
	}
	return nil
}
