package etcdwatch

import (
	"fmt"
	"strings"
	"testing"
)

func lines(from, to int, change map[int]string) string {
	var b strings.Builder
	for i := from; i <= to; i++ {
		if s, ok := change[i]; ok {
			if s != "" {
				b.WriteString(s + "\n")
			}
			continue
		}
		fmt.Fprintf(&b, "line %d\n", i)
	}
	return b.String()
}

func TestUnifiedDiff(t *testing.T) {
	tests := []struct {
		name     string
		from, to string
		want     string
	}{
		{"equal", "a\nb\n", "a\nb\n", ""},
		{
			name: "one line changed in the middle",
			from: lines(1, 10, nil), to: lines(1, 10, map[int]string{5: "line five"}),
			want: "--- a\n+++ b\n@@ -2,7 +2,7 @@\n line 2\n line 3\n line 4\n-line 5\n+line five\n line 6\n line 7\n line 8\n",
		},
		{
			name: "added from nothing",
			from: "", to: "x: 1\ny: 2\n",
			want: "--- a\n+++ b\n@@ -0,0 +1,2 @@\n+x: 1\n+y: 2\n",
		},
		{
			name: "deleted to nothing",
			from: "x: 1\n", to: "",
			want: "--- a\n+++ b\n@@ -1 +0,0 @@\n-x: 1\n",
		},
		{
			name: "two far changes make two hunks",
			from: lines(1, 20, nil), to: lines(1, 20, map[int]string{2: "two", 18: "eighteen"}),
			want: "--- a\n+++ b\n" +
				"@@ -1,5 +1,5 @@\n line 1\n-line 2\n+two\n line 3\n line 4\n line 5\n" +
				"@@ -15,6 +15,6 @@\n line 15\n line 16\n line 17\n-line 18\n+eighteen\n line 19\n line 20\n",
		},
		{
			name: "near changes share a hunk",
			from: lines(1, 12, nil), to: lines(1, 12, map[int]string{3: "three", 8: "eight"}),
			want: "--- a\n+++ b\n@@ -1,11 +1,11 @@\n line 1\n line 2\n-line 3\n+three\n line 4\n line 5\n line 6\n line 7\n-line 8\n+eight\n line 9\n line 10\n line 11\n",
		},
		{
			name: "line inserted",
			from: lines(1, 4, nil), to: "line 1\nline 2\nnew\nline 3\nline 4\n",
			want: "--- a\n+++ b\n@@ -1,4 +1,5 @@\n line 1\n line 2\n+new\n line 3\n line 4\n",
		},
		{
			name: "line removed",
			from: lines(1, 8, nil), to: lines(1, 8, map[int]string{1: ""}),
			want: "--- a\n+++ b\n@@ -1,4 +1,3 @@\n-line 1\n line 2\n line 3\n line 4\n",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := UnifiedDiff("a", "b", tc.from, tc.to)
			if got != tc.want {
				t.Errorf("diff:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}
