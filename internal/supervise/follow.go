package supervise

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/devk/devk/internal/crilog"
)

// FollowInterval is how often Follow looks for new log lines.
const FollowInterval = 250 * time.Millisecond

// Follow copies the lines appended to every *.log file under dir (the
// supervised processes' logs and the containers' CRI logs) to w, each
// prefixed with its file's name, until ctx is done: what `-v 2` shows
// while a command changes a cluster. Files present at the start are
// followed from their end, files that appear later from their start; a
// CRI log line loses its timestamp and stream prefix. A log that is
// rotated (renamed away and made anew, as the log writer and the
// kubelet's container log rotation do) is read to its end through the
// descriptor held open, then followed under its name from the start
// (with any generation made and rotated away between two looks shown
// whole in between); a log truncated in place is followed from its
// start again. Every line is shown once.
func Follow(ctx context.Context, dir string, w io.Writer) {
	f := follower{dir: dir, w: w, logs: map[string]*followed{}, rotated: map[string]*followed{}, began: time.Now()}
	defer f.closeAll()
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
	dir  string
	w    io.Writer
	logs map[string]*followed
	// rotated is the file each rotated log was last followed as, until
	// the log is followed again; held open, so that its inode is not
	// reused by a new generation.
	rotated map[string]*followed
	// began is when Follow began: generations last written before are
	// not shown.
	began time.Time
}

// followed is a log being followed: the file it was opened as, and how
// far it was shown.
type followed struct {
	file *os.File
	info os.FileInfo
	off  int64
}

// scan shows what each log gained; at the start it only opens them at
// their ends.
func (f *follower) scan(start bool) {
	seen := map[string]bool{}
	_ = filepath.WalkDir(f.dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".log") {
			return nil
		}
		seen[path] = true
		info, err := os.Stat(path)
		if err != nil {
			return nil
		}
		l := f.logs[path]
		if l != nil && !os.SameFile(l.info, info) {
			// Rotated: what the old file got before it was renamed, then
			// the new one from its start.
			f.drain(path, l)
			f.rotated[path] = l
			l = nil
		}
		if l == nil {
			if l = f.open(path); l == nil {
				return nil
			}
			if start {
				l.off = l.size()
			} else if old := f.rotated[path]; old != nil {
				f.wholeGenerations(path, old.info, l.info)
				old.file.Close()
				delete(f.rotated, path)
			} else {
				f.wholeGenerations(path, nil, l.info)
			}
			f.logs[path] = l
		}
		if size := l.size(); size < l.off {
			l.off = 0 // truncated in place
		}
		l.off += f.copyLines(path, l.file, l.off, false)
		return nil
	})
	for path, l := range f.logs {
		if !seen[path] {
			f.drain(path, l) // renamed away, none made anew yet
			f.rotated[path] = l
			delete(f.logs, path)
		}
	}
}

// wholeGenerations shows, oldest first, the rotated generations of path
// that are newer than old (the file followed last under its name, nil
// for none), older than cur (the file now followed under it, which may
// have been rotated already since it was opened) and written since
// Follow began: those made and rotated away between two looks.
func (f *follower) wholeGenerations(path string, old, cur os.FileInfo) {
	// Each generation is opened once and known by the file opened: the
	// names shift when the writer rotates again meanwhile, the files do
	// not (a name stat'ed, then opened, may be two files).
	type generation struct {
		file *os.File
		info os.FileInfo
	}
	same := func(a, b os.FileInfo) bool { return a != nil && b != nil && os.SameFile(a, b) }
	var gens []generation // newest first
	defer func() {
		for _, g := range gens {
			g.file.Close()
		}
	}()
	for _, name := range generations(path) {
		file, err := os.Open(name)
		if err != nil {
			continue
		}
		info, err := file.Stat()
		if err != nil || slices.ContainsFunc(gens, func(g generation) bool { return same(g.info, info) }) {
			file.Close() // shifted under the next name while the names were opened
			continue
		}
		gens = append(gens, generation{file, info})
	}
	from := slices.IndexFunc(gens, func(g generation) bool { return same(g.info, old) })
	if from < 0 {
		from = len(gens) // the old one is gone too, or there was none
	}
	for i := from - 1; i >= 0 && !same(gens[i].info, cur); i-- {
		if !gens[i].info.ModTime().Before(f.began) {
			f.copyLines(path, gens[i].file, 0, true)
		}
	}
}

// open opens path and notes the file it is.
func (f *follower) open(path string) *followed {
	file, err := os.Open(path)
	if err != nil {
		return nil
	}
	info, err := file.Stat()
	if err != nil {
		file.Close()
		return nil
	}
	return &followed{file: file, info: info}
}

// size is the followed file's size now (0 if it cannot be read).
func (l *followed) size() int64 {
	fi, err := l.file.Stat()
	if err != nil {
		return 0
	}
	return fi.Size()
}

// drain shows the rest of a log that was renamed away, a last line
// without its end included.
func (f *follower) drain(path string, l *followed) {
	f.copyLines(path, l.file, l.off, true)
}

func (f *follower) closeAll() {
	for _, l := range f.logs {
		l.file.Close()
	}
	for _, l := range f.rotated {
		l.file.Close()
	}
}

// copyLines writes the whole lines of file from offset off, shown as
// path's, and returns how many bytes they took (a partial last line
// waits for the next scan unless all is set).
func (f *follower) copyLines(path string, file *os.File, off int64, all bool) int64 {
	data, err := io.ReadAll(io.NewSectionReader(file, off, 1<<62))
	if err != nil || len(data) == 0 {
		return 0
	}
	end := bytes.LastIndexByte(data, '\n')
	if all && end < len(data)-1 {
		data, end = append(data, '\n'), len(data)
	}
	if end < 0 {
		return 0
	}
	name := f.label(path)
	var out bytes.Buffer
	for line := range strings.SplitSeq(string(data[:end]), "\n") {
		fmt.Fprintf(&out, "%s | %s\n", name, crilog.StripPrefix(line))
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
