package loop

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/devk/devk/conformance"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/internal/testtree"
)

func TestDepDirs(t *testing.T) {
	root := testtree.Copy(t)
	dirs, err := DepDirs(context.Background(), root, []string{"./cmd/kube-apiserver"}, []string{"CGO_ENABLED=0"})
	if err != nil {
		t.Fatal(err)
	}
	var rel []string
	for _, d := range dirs {
		r, _ := filepath.Rel(root, d)
		rel = append(rel, r)
	}
	want := []string{".", "cmd/kube-apiserver", "staging/src/k8s.io/component-base", "staging/src/k8s.io/component-base/version"}
	if !slices.Equal(rel, want) {
		t.Fatalf("dirs = %v, want %v (client-go is kubectl's, not the apiserver's)", rel, want)
	}
	if _, err := DepDirs(context.Background(), root, []string{"./cmd/nope"}, nil); err == nil {
		t.Fatal("a missing package listed without error")
	}
}

func TestIgnored(t *testing.T) {
	root := "/src/kubernetes"
	tests := []struct {
		path string
		want bool
	}{
		{"staging/src/k8s.io/apiserver/pkg/server/config.go", false},
		{"go.mod", false},
		{"pkg/api/zz_generated.deepcopy.go", true},
		{"pkg/server/config_test.go", true},
		{"_output/devk/bin/linux_amd64/kube-apiserver", true},
		{".git/index.lock", true},
		{"pkg/server/testdata/x.json", true},
		{"pkg/server/config.go~", true},
		{"pkg/server/.config.go.swp", true},
		{"pkg/server/4913", true},
		{"pkg/server/#config.go#", true},
		{"pkg/server/.#config.go", true},
		{"pkg/server/config.go___jb_tmp___", true},
		{"pkg/server/.goutputstream-ABC123", true},
		{"pkg/server/config.go.orig", true},
		{"pkg/server/openapi.json", false},
	}
	for _, tc := range tests {
		if got := Ignored(root, filepath.Join(root, tc.path)); got != tc.want {
			t.Errorf("Ignored(%s) = %v, want %v", tc.path, got, tc.want)
		}
	}
}

// watchDir feeds a real fsnotify watcher on dir into a channel, as Run does.
func watchDir(t *testing.T, dir string) <-chan string {
	t.Helper()
	w, err := fsnotify.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	if err := w.Add(dir); err != nil {
		t.Fatal(err)
	}
	events := make(chan string, 64)
	go func() {
		for ev := range w.Events {
			if ev.Op != fsnotify.Chmod && !Ignored(dir, ev.Name) {
				events <- filepath.Base(ev.Name)
			}
		}
		close(events)
	}()
	return events
}

func TestDebounceCoalesces(t *testing.T) {
	dir := t.TempDir()
	events := watchDir(t, dir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var mu sync.Mutex
	var batches [][]string
	firstRunning := make(chan struct{})
	release := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		Debounce(ctx, events, 100*time.Millisecond, 2*time.Second, func(_ context.Context, batch []string) bool {
			mu.Lock()
			batches = append(batches, batch)
			n := len(batches)
			mu.Unlock()
			if n == 1 {
				close(firstRunning)
				<-release // a long build: saves keep coming meanwhile
			}
			return n == 2
		})
		close(finished)
	}()

	write := func(name string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A burst of saves, with an editor's temp file: one batch.
	write("a.go")
	write(".a.go.swp")
	write("b.go")
	write("a.go")
	<-firstRunning
	// Saves during the running cycle: exactly one more batch, after it.
	write("c.go")
	write("d.go")
	write("c.go")
	time.Sleep(300 * time.Millisecond) // longer than quiet: still no new cycle while one runs
	mu.Lock()
	if len(batches) != 1 {
		t.Fatalf("a cycle started while one was running: %v", batches)
	}
	mu.Unlock()
	close(release)
	select {
	case <-finished:
	case <-time.After(10 * time.Second):
		t.Fatal("the coalesced cycle never ran")
	}
	want := fmt.Sprint([][]string{{"a.go", "b.go"}, {"c.go", "d.go"}})
	if got := fmt.Sprint(batches); got != want {
		t.Fatalf("batches = %s, want %s", got, want)
	}
}

func TestDebounceMaxWait(t *testing.T) {
	events := make(chan string)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan []string, 1)
	go Debounce(ctx, events, 200*time.Millisecond, 500*time.Millisecond, func(_ context.Context, b []string) bool {
		got <- b
		return true
	})
	// Saves every 50 ms never leave a quiet gap; maxWait still starts a cycle.
	deadline := time.After(5 * time.Second)
	for i := 0; ; i++ {
		select {
		case b := <-got:
			if len(b) < 2 {
				t.Fatalf("batch = %v", b)
			}
			return
		case events <- fmt.Sprintf("f%d.go", i%5):
		case <-deadline:
			t.Fatal("a steady stream of saves starved the cycle")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestDebounceStopsOnCancel(t *testing.T) {
	events := make(chan string)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		Debounce(ctx, events, time.Second, time.Second, func(context.Context, []string) bool { return false })
		close(done)
	}()
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Debounce did not return after cancel")
	}
}

func TestInotifyError(t *testing.T) {
	err := inotifyError(fmt.Errorf("add: %w", syscall.ENOSPC), 1234)
	if !strings.Contains(err.Error(), "fs.inotify.max_user_watches") || !strings.Contains(err.Error(), "1234 directories") {
		t.Fatalf("err = %v", err)
	}
}

// TestReportE2E checks the cycle's line with --e2e-focus: the specs'
// counts after a verified swap, and each failure's first lines.
func TestReportE2E(t *testing.T) {
	var out strings.Builder
	l := &watcher{o: Options{Out: &out, Reporter: progress.Discard()}}
	saved := time.Now().Add(-time.Minute)
	passed := &cycle{e2eStart: saved.Add(50 * time.Second), e2e: &conformance.Result{Seconds: 9.54, Summary: &conformance.Summary{Passed: 1}}}
	l.report(context.Background(), passed, nil, 61*time.Second, saved)
	if want := "verified in 50.0s from save; e2e 1 passed, 0 failed, 0 skipped in 9.5s (61.0s from save)\n"; out.String() != want {
		t.Fatalf("passed: %q, want %q", out.String(), want)
	}
	out.Reset()
	failed := &cycle{e2e: &conformance.Result{Log: "/t/e2e.log", Summary: &conformance.Summary{
		Failed: []conformance.Spec{{Name: "[sig-node] Pods should get a host IP", Message: "Expected\n    <string>: \"\"\nnot to be empty"}}}}}
	err := fmt.Errorf("phase e2e: %w: 0 passed, 1 failed", conformance.ErrFailed)
	l.report(context.Background(), failed, err, 70*time.Second, time.Now())
	want := "verified, then e2e FAILED after 70.0s from save: 0 passed, 1 failed, 0 skipped (log /t/e2e.log)\n" +
		"  ✗ [sig-node] Pods should get a host IP\n      Expected\n          <string>: \"\"\n      not to be empty\n"
	if out.String() != want {
		t.Fatalf("failed:\n%s\nwant:\n%s", out.String(), want)
	}
}
