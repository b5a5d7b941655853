package progress

import (
	"bytes"
	"sync"
)

// Lines is a writer that hands each line written to it, without its
// newline, to a function: a command's output shown line by line as it
// comes (Close hands over a last line without a newline).
type Lines struct {
	mu   sync.Mutex
	each func(line string)
	buf  []byte
}

// LinesTo is a Lines writer calling each.
func LinesTo(each func(line string)) *Lines { return &Lines{each: each} }

func (l *Lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		l.each(string(l.buf[:i]))
		l.buf = l.buf[i+1:]
	}
}

// Close hands over what is left after the last newline.
func (l *Lines) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf) > 0 {
		l.each(string(l.buf))
		l.buf = nil
	}
	return nil
}
