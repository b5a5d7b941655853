package supervise

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/devk/devk/internal/cri"
)

// FollowInterval is how often Follow looks for new log lines.
const FollowInterval = 250 * time.Millisecond

// Follow copies the lines appended to every *.log file under dir (the
// supervised processes' logs and the containers' CRI logs) to w, each
// prefixed with its file's name, until ctx is done: what `-v 2` shows
// while a command changes a cluster. Files present at the start are
// followed from their end, files that appear later from their start; a
// CRI log line loses its timestamp and stream prefix.
func Follow(ctx context.Context, dir string, w io.Writer) {
	f := follower{dir: dir, w: w, offsets: map[string]int64{}}
	f.scan(true)
	t := time.NewTicker(FollowInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			f.scan(false) // what was written up to the end
			return
		case <-t.C:
			f.scan(false)
		}
	}
}

type follower struct {
	dir     string
	w       io.Writer
	offsets map[string]int64
}

// scan reads what each log gained; at the start it only notes the sizes.
func (f *follower) scan(start bool) {
	_ = filepath.WalkDir(f.dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".log") {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		off, seen := f.offsets[path]
		switch {
		case start:
			f.offsets[path] = info.Size()
			return nil
		case !seen:
			off = 0
		case info.Size() < off: // truncated or replaced
			off = 0
		}
		if info.Size() > off {
			f.offsets[path] = off + f.copyLines(path, off)
		}
		return nil
	})
}

// copyLines writes the whole lines of path from offset off and returns
// how many bytes they took (a partial last line waits for the next scan).
func (f *follower) copyLines(path string, off int64) int64 {
	file, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer file.Close()
	data, err := io.ReadAll(io.NewSectionReader(file, off, 1<<62))
	if err != nil {
		return 0
	}
	end := bytes.LastIndexByte(data, '\n')
	if end < 0 {
		return 0
	}
	name := f.label(path)
	var out bytes.Buffer
	for line := range strings.SplitSeq(string(data[:end]), "\n") {
		fmt.Fprintf(&out, "%s | %s\n", name, cri.StripLogPrefix(line))
	}
	_, _ = f.w.Write(out.Bytes())
	return int64(end + 1)
}

// label names a log: kubelet for logs/kubelet.log, the pod's directory
// and container for a container's log (kube-system_etcd-devk_<uid>/etcd/0.log
// → etcd-devk/etcd).
func (f *follower) label(path string) string {
	rel, err := filepath.Rel(f.dir, path)
	if err != nil {
		return path
	}
	parts := strings.Split(rel, string(filepath.Separator))
	if len(parts) >= 3 {
		pod := parts[len(parts)-3]
		if fields := strings.Split(pod, "_"); len(fields) == 3 {
			pod = fields[1]
		}
		return pod + "/" + parts[len(parts)-2]
	}
	return strings.TrimSuffix(rel, ".log")
}
