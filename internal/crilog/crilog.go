// Package crilog reads log files in the CRI's container log format
// ("<time> <stream> <tag> <message>", as containerd writes a container's
// log and devk's log writer a supervised daemon's): the tail of a file,
// a line's message. It is apart from internal/cri, the gRPC client, so
// that what reads logs (supervise, and through it layout and image)
// does not link that client.
package crilog

import (
	"bufio"
	"os"
	"strings"
)

// tailWindow is how much of a log's end Tail reads at most: logs of a
// crashing control-plane component are short, and a bounded window
// never reads a huge file whole.
const tailWindow = 256 << 10

// Tail returns the last n lines of a CRI container log file, without
// the timestamp/stream/tag prefix the runtime writes.
func Tail(path string, n int) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > tailWindow {
		f.Seek(fi.Size()-tailWindow, 0)
	}
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, StripPrefix(sc.Text()))
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return lines, sc.Err()
}

// StripPrefix turns a CRI container log line "2026-11-29T18:00:00.1Z stderr F message" into "message".
func StripPrefix(line string) string {
	parts := strings.SplitN(line, " ", 4)
	if len(parts) == 4 && (parts[1] == "stdout" || parts[1] == "stderr") {
		return parts[3]
	}
	return line
}
