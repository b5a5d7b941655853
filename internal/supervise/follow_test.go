package supervise

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/devk/devk/internal/syncbuf"
	"k8s.io/apimachinery/pkg/util/wait"
)

func TestFollowShowsNewLinesOnly(t *testing.T) {
	dir := t.TempDir()
	kubelet := filepath.Join(dir, "kubelet.log")
	if err := os.WriteFile(kubelet, []byte("old line, before the command\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out syncbuf.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { Follow(ctx, dir, &out); close(done) }()
	// let the first scan note the sizes
	time.Sleep(2 * FollowInterval)

	appendTo := func(path, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
	}
	appendTo(kubelet, "I1201 started\npartial")
	container := filepath.Join(dir, "pods", "kube-system_etcd-devk_0123", "etcd", "0.log")
	appendTo(container, "2026-12-01T00:00:00.1Z stderr F etcd is ready\n")
	want := []string{"kubelet | I1201 started\n", "etcd-devk/etcd | etcd is ready\n"}
	err := wait.PollUntilContextTimeout(ctx, FollowInterval, 10*time.Second, true, func(context.Context) (bool, error) {
		for _, w := range want {
			if !strings.Contains(out.String(), w) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("followed output lacks %q: %q", want, out.String())
	}
	appendTo(kubelet, " line\n")
	time.Sleep(2 * FollowInterval)
	cancel()
	<-done
	got := out.String()
	if strings.Contains(got, "old line") {
		t.Errorf("a line written before Follow started was shown: %q", got)
	}
	if !strings.Contains(got, "kubelet | partial line\n") {
		t.Errorf("a line written in two parts was not shown whole: %q", got)
	}
}
