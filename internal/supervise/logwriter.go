package supervise

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/devk/devk/internal/atomicfile"
)

// A daemon's output goes through a pipe to a log writer, a small process
// of its own (devk re-executed) that appends it to the daemon's log and
// rotates that log by size: kubelet.log, then kubelet.log.1 (the newest
// rotated) … kubelet.log.3, the oldest of which is dropped.
//
// Why a process, and not the components' own options or devk: the
// daemons outlive the devk command that started them, so nothing in
// devk's process can rotate what they write; the components have no
// rotation worth the name (the kubelet's klog lost --log-file and
// --log-file-max-size in 1.26 and truncated without generations before;
// containerd has none; HAProxy writes to stderr or syslog). Not the
// tree's kube-log-runner either: it is the daemon's parent (the pid file
// would name it, not the daemon), prunes by age rather than count, and
// is one more binary to build before containerd can start. And not
// copy-and-truncate from time to time: lines written between the copy
// and the truncation are lost, and a log grows without limit between two
// devk commands. One writer per daemon start: it reads the pipe until
// every holder of its write end (the daemon, and anything it started
// with its output) is gone, writes what it read, and exits. It ignores
// SIGINT, SIGTERM and SIGHUP, so the daemon never loses its output (Go
// daemons die of SIGPIPE on a broken stdout) while it runs; Stop waits
// for it after the daemon, and kills it if something the daemon left
// keeps the pipe open.
const (
	// LogMaxBytes is the size at which a daemon's log is rotated (at a
	// line's end, so no line is split between two files).
	LogMaxBytes int64 = 10 << 20
	// LogGenerations is how many rotated logs are kept beside the current
	// one (<name>.log.1 … <name>.log.N, .1 the newest).
	LogGenerations = 3
	// LogFileMode is a daemon log's mode, set on old logs too: what the
	// components log (node and pod names, requests, paths, errors with
	// their arguments) is for root alone.
	LogFileMode fs.FileMode = 0o600
	// LogDrainTimeout bounds the wait for a log writer to write what its
	// daemon left in the pipe and exit, after the daemon is gone.
	LogDrainTimeout = 2 * time.Second

	// logWriterArg as the first argument makes a binary that links this
	// package a log writer (see init).
	logWriterArg = "__devk-log-writer"
	// logWriterPrefix names a writer's pid file: run/log-writer-<daemon>.pid
	// (a prefix, so that globs of daemon names, forward-*, never match it).
	logWriterPrefix = "log-writer-"
	// logReadSize is how much the writer reads from the pipe at once.
	logReadSize = 64 << 10
)

// init makes this binary a log writer when it was started as one: devk,
// and equally the test binaries of the packages that start daemons. A
// cobra subcommand would do for devk alone, and a test binary started as
// a writer would run its tests again instead.
func init() {
	if len(os.Args) > 1 && os.Args[1] == logWriterArg {
		if err := runLogWriter(os.Stdin, os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "devk log writer:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// logWriterArgv is the command line of the writer of the log at path.
func logWriterArgv(exe, path string, maxBytes int64, generations int) []string {
	return []string{exe, logWriterArg, path, strconv.FormatInt(maxBytes, 10), strconv.Itoa(generations)}
}

// runLogWriter appends what it reads from in to a rotating log until in
// ends; args are the log's path, its size cap in bytes and the number of
// generations to keep. It is what the log writer process runs.
func runLogWriter(in io.Reader, args []string) error {
	if len(args) != 3 {
		return fmt.Errorf("want LOG MAX-BYTES GENERATIONS, got %q", args)
	}
	maxBytes, err1 := strconv.ParseInt(args[1], 10, 64)
	keep, err2 := strconv.Atoi(args[2])
	if err1 != nil || err2 != nil || maxBytes <= 0 || keep < 1 {
		return fmt.Errorf("want LOG MAX-BYTES GENERATIONS (a size and a count above 0), got %q", args)
	}
	// Only the end of the pipe ends the writer (see the package's note).
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	w := &rotatingLog{path: args[0], maxBytes: maxBytes, keep: keep}
	w.open()
	buf := make([]byte, logReadSize)
	for {
		n, err := in.Read(buf)
		if n > 0 {
			w.write(buf[:n])
		}
		if errors.Is(err, io.EOF) {
			return w.close()
		}
		if err != nil {
			w.close()
			return err
		}
	}
}

// rotatingLog is a log file rotated at maxBytes, keeping keep
// generations. A failure to write (a full disk) drops what cannot be
// written, never blocks the daemon, and is noted in the log once writing
// works again.
type rotatingLog struct {
	path     string
	maxBytes int64
	keep     int
	f        *os.File
	size     int64
	// atLineStart is false while the file ends in the middle of a line.
	atLineStart bool
	// lost counts the bytes dropped since lostErr.
	lost    int64
	lostErr error
}

// open opens the log for appending, 0600 whatever mode it had.
func (r *rotatingLog) open() {
	f, err := os.OpenFile(r.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, LogFileMode)
	if err == nil {
		err = f.Chmod(LogFileMode)
	}
	var fi os.FileInfo
	if err == nil {
		fi, err = f.Stat()
	}
	if err != nil {
		if f != nil {
			f.Close()
		}
		r.f, r.lostErr = nil, err
		return
	}
	r.f, r.size, r.atLineStart = f, fi.Size(), true
	// Generations an older devk or a 0644 past left.
	for i := 1; i <= r.keep; i++ {
		_ = os.Chmod(Generation(r.path, i), LogFileMode)
	}
}

// Generation is the path of the i-th newest rotated generation of the
// log at path (0: the log itself).
func Generation(path string, i int) string {
	if i == 0 {
		return path
	}
	return path + "." + strconv.Itoa(i)
}

// write appends p. The log is rotated at the last line end before the
// cap; a line that passes the cap anyway (one begun before it, or one
// longer than the cap) is finished in the same file, up to twice the
// cap, where it is cut.
func (r *rotatingLog) write(p []byte) {
	for len(p) > 0 {
		room := r.maxBytes - r.size
		if room > 0 && int64(len(p)) < room {
			r.append(p)
			return
		}
		cut := 0
		if room > 0 {
			cut = bytes.LastIndexByte(p[:room], '\n') + 1
		}
		switch {
		case cut > 0: // whole lines up to the cap
		case r.atLineStart && r.size > 0:
			r.rotate() // the next line starts the next file
			continue
		default:
			cut = bytes.IndexByte(p, '\n') + 1
			if hard := max(2*r.maxBytes-r.size, 1); cut == 0 || int64(cut) > hard {
				cut = int(min(int64(len(p)), hard))
			}
		}
		r.append(p[:cut])
		p = p[cut:]
		if r.atLineStart || r.size >= 2*r.maxBytes {
			r.rotate()
		}
	}
}

func (r *rotatingLog) append(p []byte) {
	if len(p) == 0 {
		return
	}
	if r.f == nil {
		r.open()
	}
	if r.f != nil && r.lost > 0 {
		note := fmt.Sprintf("---- %s devk log writer: %d bytes lost: %v\n", time.Now().UTC().Format(time.RFC3339), r.lost, r.lostErr)
		if n, err := r.f.WriteString(note); err == nil {
			r.size += int64(n)
			r.lost, r.lostErr = 0, nil
		}
	}
	if r.f == nil {
		r.lost += int64(len(p))
		return
	}
	n, err := r.f.Write(p)
	r.size += int64(n)
	r.atLineStart = p[len(p)-1] == '\n'
	if err != nil {
		r.lost += int64(len(p) - n)
		r.lostErr = err
		r.f.Close()
		r.f = nil
	}
}

// rotate shifts the generations (the oldest is replaced) and starts a
// new log. Renames keep the files whole for readers that hold them open
// (Follow, OpenLog).
func (r *rotatingLog) rotate() {
	if r.f != nil {
		r.f.Close()
		r.f = nil
	}
	for i := r.keep; i >= 1; i-- {
		if err := os.Rename(Generation(r.path, i-1), Generation(r.path, i)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			r.lostErr = err
		}
	}
	r.size = 0
	r.open()
}

func (r *rotatingLog) close() error {
	if r.f == nil {
		return r.lostErr
	}
	err := r.f.Close()
	r.f = nil
	return err
}

// logWriterName is the supervised name of name's log writer.
func logWriterName(name string) string { return logWriterPrefix + name }

// LogWriterRunning returns the pid of the named process's log writer if
// it runs.
func (p Dir) LogWriterRunning(name string) (int, bool) { return p.Running(logWriterName(name)) }

// startLogWriter starts the writer of name's log and returns the write
// end of its pipe, for the daemon's stdout and stderr. A writer of an
// earlier start still running (its daemon is gone, something it started
// still holds its pipe) is stopped first: two writers never rotate one
// log.
func (p Dir) startLogWriter(name string) (*os.File, error) {
	if err := p.stopLogWriter(context.Background(), name); err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find devk's own binary to run %s's log writer: %w", name, err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("make %s's log pipe: %w", name, err)
	}
	defer r.Close()
	maxBytes, keep := p.LogMaxBytes, p.LogGenerations
	if maxBytes <= 0 {
		maxBytes = LogMaxBytes
	}
	if keep <= 0 {
		keep = LogGenerations
	}
	// /proc/self/exe: this very binary, even once a rebuild replaced the
	// file; argv[0] names the file for ps.
	cmd := &exec.Cmd{Path: "/proc/self/exe", Args: logWriterArgv(exe, p.LogFile(name), maxBytes, keep), Stdin: r, Dir: "/"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, fmt.Errorf("start %s's log writer: %w", name, err)
	}
	start, _, err := procStat(cmd.Process.Pid)
	if err == nil {
		err = atomicfile.Write(p.PIDFile(logWriterName(name)), fmt.Appendf(nil, "%d %d\n", cmd.Process.Pid, start), 0o644, "")
	}
	if err != nil {
		w.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("start %s's log writer: %w", name, err)
	}
	go func() { _ = cmd.Wait() }()
	return w, nil
}

// stopLogWriter waits up to LogDrainTimeout for name's log writer to
// finish (it does once its daemon is gone), then kills it.
func (p Dir) stopLogWriter(ctx context.Context, name string) error {
	wname := logWriterName(name)
	pid, ok := p.Running(wname)
	if !ok {
		if err := os.Remove(p.PIDFile(wname)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	// No SIGTERM: a writer that has not yet set itself to ignore it
	// would die of it with what it has to write.
	if err := waitGone(ctx, pid, LogDrainTimeout); err != nil && !wait.Interrupted(err) {
		return fmt.Errorf("stop %s's log writer (pid %d): %w", name, pid, err)
	}
	if err := KillWait(ctx, pid, 0); err != nil {
		return fmt.Errorf("stop %s's log writer (pid %d): %w", name, pid, err)
	}
	if err := os.Remove(p.PIDFile(wname)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// ExitedTail is the last n lines of the log of name, a process that has
// exited, once its log writer has written what the process left (it ends
// when its pipe does; waited for up to LogDrainTimeout): read at once,
// the tail would miss the lines that say why it exited.
func (p Dir) ExitedTail(ctx context.Context, name string, n int) string {
	if pid, ok := p.LogWriterRunning(name); ok {
		_ = waitGone(ctx, pid, LogDrainTimeout)
	}
	return Tail(p.LogFile(name), n)
}

// OpenLog reads a daemon's log with its rotated generations before it,
// oldest first: the whole log devk kept. The files are opened newest
// first and read through the descriptors, so a rotation while it reads
// loses or repeats nothing that was there when it opened them.
func OpenLog(path string) (io.ReadCloser, error) {
	return (&LogMark{path: path}).Since()
}

// LogMark is a place in a daemon's log: what the log got after it can
// be read whatever rotations came in between. It holds the file marked
// open until Close.
type LogMark struct {
	path string
	// file is the file that was the log (nil: there was none), off its
	// size then.
	file *os.File
	info os.FileInfo
	off  int64
}

// MarkLog marks the end of the log at path now.
func MarkLog(path string) *LogMark {
	m := &LogMark{path: path}
	f, err := os.Open(path)
	if err != nil {
		return m
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return m
	}
	m.file, m.info, m.off = f, fi, fi.Size()
	return m
}

// Close closes the file marked.
func (m *LogMark) Close() error {
	if m.file == nil {
		return nil
	}
	return m.file.Close()
}

// Since reads what the log got after the mark, oldest first: the rest
// of the file marked, and every file made after it that is still kept,
// rotated or not.
func (m *LogMark) Since() (io.ReadCloser, error) {
	var files []*os.File // newest first
	var infos []os.FileInfo
	var firstErr error
	for _, name := range append([]string{m.path}, generations(m.path)...) {
		f, err := os.Open(name)
		if err != nil {
			if name == m.path {
				firstErr = err // it may be between two names: its generations still count
			}
			continue
		}
		fi, err := f.Stat()
		if err == nil && m.info != nil && os.SameFile(fi, m.info) {
			f.Close()
			break // it and the older ones were read up to the mark
		}
		if err != nil || slices.ContainsFunc(infos, func(seen os.FileInfo) bool { return os.SameFile(seen, fi) }) {
			f.Close() // renamed while the newer ones were opened: read once
			continue
		}
		files, infos = append(files, f), append(infos, fi)
	}
	readers := make([]io.Reader, 0, len(files)+1)
	if m.file != nil {
		readers = append(readers, io.NewSectionReader(m.file, m.off, 1<<62))
	}
	for i := len(files) - 1; i >= 0; i-- {
		readers = append(readers, files[i])
	}
	if len(readers) == 0 {
		return nil, firstErr
	}
	return &multiFile{Reader: io.MultiReader(readers...), files: files}, nil
}

// generations lists the rotated generations of the log at path, newest
// first (path.1, path.2, …), whatever their number.
func generations(path string) []string {
	matches, _ := filepath.Glob(path + ".*")
	var nums []int
	for _, m := range matches {
		if n, err := strconv.Atoi(strings.TrimPrefix(m, path+".")); err == nil && n > 0 {
			nums = append(nums, n)
		}
	}
	slices.Sort(nums)
	out := make([]string, 0, len(nums))
	for _, n := range nums {
		out = append(out, Generation(path, n))
	}
	return out
}

type multiFile struct {
	io.Reader
	files []*os.File
}

func (m *multiFile) Close() error {
	var errs []error
	for _, f := range m.files {
		errs = append(errs, f.Close())
	}
	return errors.Join(errs...)
}
