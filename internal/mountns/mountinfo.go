package mountns

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Mount is one line of /proc/<pid>/mountinfo (proc(5)).
type Mount struct {
	ID, Parent int
	// Root is the path within its filesystem that is mounted; Point where.
	Root, Point string
	// Options are the mount's own options (rw, nosuid, …).
	Options string
	// Optional are the optional fields: shared:N, master:N,
	// propagate_from:N, unbindable.
	Optional []string
	FSType   string
	Source   string
	// SuperOptions are the filesystem's options (an overlay's upperdir=…).
	SuperOptions string
}

// Shared says whether the mount propagates to its peers (the optional
// field shared:N): what `mount --make-shared` makes it.
func (m Mount) Shared() bool {
	return slices.ContainsFunc(m.Optional, func(f string) bool { return strings.HasPrefix(f, "shared:") })
}

// parse reads mountinfo's lines, in their order (a later mount at a point
// is on top of an earlier one). A malformed line is an error naming it.
func parse(mountinfo string) ([]Mount, error) {
	var out []Mount
	sc := bufio.NewScanner(strings.NewReader(mountinfo))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		m, err := parseLine(sc.Text())
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, sc.Err()
}

// parseLine reads one mountinfo line:
// ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS
func parseLine(line string) (Mount, error) {
	f := strings.Fields(line)
	sep := slices.Index(f, "-")
	if len(f) < 7 || sep < 6 || len(f) < sep+3 {
		return Mount{}, fmt.Errorf("malformed mountinfo line %q", line)
	}
	id, err1 := strconv.Atoi(f[0])
	parent, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil {
		return Mount{}, fmt.Errorf("malformed mountinfo line %q", line)
	}
	m := Mount{ID: id, Parent: parent, Root: unescape(f[3]), Point: unescape(f[4]), Options: f[5],
		Optional: f[6:sep], FSType: f[sep+1], Source: unescape(f[sep+2])}
	if len(f) > sep+3 {
		m.SuperOptions = f[sep+3]
	}
	return m, nil
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Under lists the mount points at or below dir, deepest first, each once.
func Under(mounts []Mount, dir string) []string {
	var out []string
	for _, m := range mounts {
		if under(m.Point, dir) {
			out = append(out, m.Point)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return strings.Count(out[i], "/") > strings.Count(out[j], "/") })
	return slices.Compact(out)
}

// At is the mount on top at point (the last listed there), if any.
func At(mounts []Mount, point string) (Mount, bool) {
	for i := len(mounts) - 1; i >= 0; i-- {
		if mounts[i].Point == point {
			return mounts[i], true
		}
	}
	return Mount{}, false
}

// Host is devk's own (the host's) mount table.
func Host() ([]Mount, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	return parse(string(data))
}
