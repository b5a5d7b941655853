package trace

import (
	"slices"
	"testing"
)

// TestDiffPods: what a runtime's lists say changed between two reads
// (the unit tests cannot run containerd; e2e/trace_test.go reads real
// nodes).
func TestDiffPods(t *testing.T) {
	const sb1, sb2, c1, c2, c3 = "sb1aaaaaaaaaaaaaaaa", "sb2bbbbbbbbbbbbbbbb", "c1cccccccccccccccc", "c2dddddddddddddddd", "c3eeeeeeeeeeeeeeee"
	before := map[string]podThing{
		sb1: {Kind: "sandbox", Pod: "default/old", State: "ready"},
		c1:  {Kind: "container", Pod: "default/old", Container: "web", State: "running"},
		c3:  {Kind: "container", Pod: "kube-system/coredns-1", Container: "coredns", State: "running"},
	}
	after := map[string]podThing{
		sb1: {Kind: "sandbox", Pod: "default/old", State: "notready"},
		sb2: {Kind: "sandbox", Pod: "default/new", State: "ready"},
		c2:  {Kind: "container", Pod: "default/new", Container: "web", State: "running"},
		c3:  {Kind: "container", Pod: "kube-system/coredns-1", Container: "coredns", State: "running"},
	}
	got := diffPods(before, after)
	var words []string
	for _, c := range got {
		words = append(words, c.Kind+" "+c.Pod+" "+c.Container+" "+c.Change()+" "+c.ID)
	}
	want := []string{
		"container default/new web started c2dddddddddd",
		"container default/old web removed c1cccccccccc",
		"sandbox default/new  started sb2bbbbbbbbb",
		"sandbox default/old  stopped sb1aaaaaaaaa",
	}
	if !slices.Equal(words, want) {
		t.Errorf("changes\n%q\nwant\n%q", words, want)
	}
	if len(diffPods(after, after)) != 0 {
		t.Error("a read differs from itself")
	}
}
