package stacks

import (
	"strings"
	"testing"
)

// FuzzParse checks what any dump Parse accepts gives: goroutines whose
// frames each name a function and a file, which GroupStacks groups
// without losing or counting one twice.
func FuzzParse(f *testing.F) {
	f.Add([]byte(sample))
	f.Add([]byte("goroutine 1 [running]:\nmain.main()\n\tmain.go:3 +0x1\n"))
	f.Add([]byte("goroutine 2 gp=0x1 m=nil [select, 3 minutes, locked to thread]:\ncreated by x.y in goroutine 1\n\tx/y.go:9\n"))
	f.Fuzz(func(t *testing.T, dump []byte) {
		gs, err := Parse(dump)
		if err != nil {
			return
		}
		if len(gs) == 0 {
			t.Fatal("Parse gave no goroutine and no error")
		}
		check := func(fr Frame) {
			if fr.Function == "" || fr.Reported == "" || strings.ContainsAny(fr.Reported, "\n") {
				t.Fatalf("frame %+v from %q", fr, dump)
			}
		}
		for _, g := range gs {
			for _, fr := range g.Frames {
				check(fr)
			}
			if g.CreatedBy != nil {
				check(*g.CreatedBy)
			}
		}
		n, ids := 0, map[int]int{}
		for _, grp := range GroupStacks(gs) {
			if grp.Count != len(grp.IDs) || grp.Count == 0 {
				t.Fatalf("group %+v counts %d of %d IDs", grp, grp.Count, len(grp.IDs))
			}
			n += grp.Count
			for _, id := range grp.IDs {
				ids[id]++
			}
		}
		want := map[int]int{}
		for _, g := range gs {
			want[g.ID]++
		}
		if n != len(gs) || len(ids) != len(want) {
			t.Fatalf("GroupStacks holds %d goroutines (%d IDs), Parse found %d (%d IDs)", n, len(ids), len(gs), len(want))
		}
	})
}
