package trace

import (
	"slices"
	"testing"
)

// FuzzParseAuditLine: any line parses or is refused without a panic; a
// read never carries a body, and what it keeps is a stage trace shows.
func FuzzParseAuditLine(f *testing.F) {
	for _, l := range fixtureLines(f) {
		f.Add(l)
	}
	f.Add([]byte(`{"kind":"Event","stage":"ResponseComplete","verb":"get","requestObject":{"a":1}}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		r, ok, err := ParseAuditLine(line)
		if err != nil && ok {
			t.Fatalf("an error and a request: %v", err)
		}
		if ok && r.Read() && r.Body != nil {
			t.Errorf("a read with a body: %+v", r)
		}
	})
}

// FuzzDiffRules: any iptables-save output parses; a snapshot does not
// differ from itself, and every rule of a diff is in a table trace reads.
func FuzzDiffRules(f *testing.F) {
	f.Add([]byte(saveFixture), []byte("*nat\n:KUBE-NODEPORTS - [0:0]\n-A KUBE-NODEPORTS -j ACCEPT\nCOMMIT\n"))
	f.Add([]byte("*filter\n-A\n:\n*mangle\n:X ACCEPT [1:2]\n"), []byte(""))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		ra, rb := ParseSave(a), ParseSave(b)
		if !DiffRules(ra, ra).Empty() {
			t.Fatal("a snapshot differs from itself")
		}
		d := DiffRules(ra, rb)
		for _, r := range slices.Concat(d.Added, d.Removed) {
			if !slices.Contains(Tables, r.Table) {
				t.Errorf("rule %+v of another table", r)
			}
		}
		back := DiffRules(rb, ra)
		if len(back.Added) != len(d.Removed) || len(back.Removed) != len(d.Added) {
			t.Errorf("the diff one way (%d added, %d removed) is not the other way's reverse (%d, %d)", len(d.Added), len(d.Removed), len(back.Added), len(back.Removed))
		}
	})
}
