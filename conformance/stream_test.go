package conformance

import (
	"bufio"
	"os"
	"strings"
	"testing"
	"time"
)

// The testdata logs are real: e2e.test run alone (a spec failed after
// its 5-minute pod wait) and the ginkgo CLI with --procs=2, both -v.
func TestStreamParser(t *testing.T) {
	for _, tc := range []struct {
		file string
		want []string
	}{
		{"testdata/stream-serial.log", []string{
			"✓ [sig-api-machinery] AggregatedDiscovery should support raw aggregated discovery endpoint Accept headers [Conformance] [passed] (440ms)",
			"✓ [sig-api-machinery] AggregatedDiscovery should support aggregated discovery interface for CRDs [Conformance] [passed] (3.18s)",
			"✗ [sig-node] Pods should get a host IP [NodeConformance] [Conformance] [failed] (5m0.31s)",
			"✓ [sig-api-machinery] AggregatedDiscovery should support aggregated discovery interface [Conformance] [passed] (60ms)",
			"✓ [sig-api-machinery] AggregatedDiscovery should support raw aggregated discovery request for CRDs [Conformance] [passed] (3.13s)",
			"✓ [sig-api-machinery] Discovery should validate PreferredVersion for each APIGroup [Conformance] [passed] (210ms)",
			"✓ [sig-api-machinery] Discovery should locate the groupVersion and a resource within each APIGroup [Conformance] [passed] (250ms)",
			"✓ [sig-api-machinery] ResourceQuota should create a ResourceQuota and ensure its status is promptly calculated. [Conformance] [passed] (7.1s)",
		}},
		{"testdata/stream-parallel.log", []string{
			"✓ [sig-api-machinery] Discovery should locate the groupVersion and a resource within each APIGroup [Conformance] [passed] (520ms)",
		}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			f, err := os.Open(tc.file)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			var p StreamParser
			var got []string
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				if l, ok := p.Feed(sc.Text()); ok {
					got = append(got, l.String())
				}
			}
			if tc.file == "testdata/stream-parallel.log" {
				if len(got) != 6 {
					t.Fatalf("got %d spec lines, want 6:\n%s", len(got), strings.Join(got, "\n"))
				}
				got = got[:1]
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestStreamParserStates(t *testing.T) {
	var p StreamParser
	lines := []string{
		specSeparator, "[BeforeSuite] ", "k8s.io/x.go:1", "[BeforeSuite] PASSED [0.1 seconds]",
		specSeparator, "S [SKIPPED] [0.002 seconds]", "[sig-network] LoadBalancers [It] should work [sig-network]", "x.go:2",
		specSeparator, "[sig-apps] Job should run [Conformance] [sig-apps, Conformance]", "x.go:3", "• [TIMEDOUT] [60.000 seconds]",
		specSeparator, "• [FAILED] [300.100 seconds]", "[sig-node] Hook when create [BeforeEach] should run [NodeConformance] [sig-node, NodeConformance]",
		"• [1.000 seconds]", // output, not after a spec's text
	}
	var got []SpecLine
	for _, l := range lines {
		if sl, ok := p.Feed(l); ok {
			got = append(got, sl)
		}
	}
	want := []SpecLine{
		{Name: "[sig-network] LoadBalancers should work [sig-network]", State: "skipped", Took: 2 * time.Millisecond},
		{Name: "[sig-apps] Job should run [Conformance]", State: "timedout", Took: time.Minute},
		{Name: "[sig-node] Hook when create should run [NodeConformance]", State: "failed", Took: 300100 * time.Millisecond},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}
