package etcdwatch

import (
	"io"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/devk/devk/etcdwatch/etcdtest"
	"github.com/devk/devk/internal/output"
)

// BenchmarkModifiedEvent is the work `devk etcd watch` does per MODIFIED
// event of a pod: decode, render, diff, print. Cached is the watch's
// steady state, where the previous value was rendered as the last event's
// "after"; uncached decodes both sides.
func BenchmarkModifiedEvent(b *testing.B) {
	pod := etcdtest.Pod("default", "web", 1)
	other := pod.DeepCopy()
	other.Labels["round"] = "2"
	values := [2][]byte{etcdtest.MustEncode(pod), etcdtest.MustEncode(other)}
	key := []byte("/registry/pods/default/web")
	for _, cached := range []bool{false, true} {
		name := "uncached"
		cb := changeBuilder{prefix: DefaultPrefix, decode: DecodeOptions{Ignore: mustPaths(b, "metadata.managedFields")}, format: YAML}
		if cached {
			name = "cached"
			cb.cache = newRenderCache(watchCacheSize)
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			rev := int64(1)
			for b.Loop() {
				prev := &mvccpb.KeyValue{Key: key, Value: values[rev%2], ModRevision: rev}
				cur := &mvccpb.KeyValue{Key: key, Value: values[(rev+1)%2], ModRevision: rev + 1}
				rev++
				c := cb.build(string(key), prev, cur, nil, cur.ModRevision, 1)
				if c.Diff == "" {
					b.Fatal("no diff")
				}
				if err := writeChange(io.Discard, c, output.Text); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
