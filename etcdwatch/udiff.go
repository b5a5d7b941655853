package etcdwatch

import (
	"fmt"
	"strings"

	"github.com/sergi/go-diff/diffmatchpatch"
)

// diffContext is how many unchanged lines surround each change, as in
// `diff -u`.
const diffContext = 3

type lineOp struct {
	op   diffmatchpatch.Operation
	text string // without the trailing newline
}

// UnifiedDiff returns a unified diff of two texts (YAML renderings of an
// object), with the given file labels; "" when they are equal.
func UnifiedDiff(fromLabel, toLabel, from, to string) string {
	if from == to {
		return ""
	}
	ops := lineDiff(from, to)
	var b strings.Builder
	fmt.Fprintf(&b, "--- %s\n+++ %s\n", fromLabel, toLabel)
	writeHunks(&b, ops)
	return b.String()
}

// lineDiff diffs two texts line by line: each distinct line becomes one
// rune, so go-diff's character diff works on whole lines.
func lineDiff(from, to string) []lineOp {
	dmp := diffmatchpatch.New()
	dmp.DiffTimeout = 0 // an exact diff; objects are small
	a, b, lines := dmp.DiffLinesToChars(from, to)
	diffs := dmp.DiffCharsToLines(dmp.DiffMain(a, b, false), lines)
	var ops []lineOp
	for _, d := range diffs {
		text := strings.TrimSuffix(d.Text, "\n")
		if d.Text == "" {
			continue
		}
		for _, l := range strings.Split(text, "\n") {
			ops = append(ops, lineOp{d.Type, l})
		}
	}
	return ops
}

// writeHunks groups changed lines, with diffContext lines around them,
// into @@ hunks.
func writeHunks(b *strings.Builder, ops []lineOp) {
	// aLine/bLine are the 1-based line numbers of ops[i] in each text.
	aLine := make([]int, len(ops)+1)
	bLine := make([]int, len(ops)+1)
	a, bb := 1, 1
	for i, o := range ops {
		aLine[i], bLine[i] = a, bb
		if o.op != diffmatchpatch.DiffInsert {
			a++
		}
		if o.op != diffmatchpatch.DiffDelete {
			bb++
		}
	}
	aLine[len(ops)], bLine[len(ops)] = a, bb

	i := 0
	for i < len(ops) {
		// find the next change
		for i < len(ops) && ops[i].op == diffmatchpatch.DiffEqual {
			i++
		}
		if i == len(ops) {
			return
		}
		start := max(0, i-diffContext)
		// extend while the gap of equal lines to the next change is
		// small enough to share context
		end := i
		for end < len(ops) {
			if ops[end].op != diffmatchpatch.DiffEqual {
				end++
				continue
			}
			run := end
			for run < len(ops) && ops[run].op == diffmatchpatch.DiffEqual {
				run++
			}
			if run == len(ops) || run-end > 2*diffContext {
				end = min(end+diffContext, len(ops))
				break
			}
			end = run
		}
		var aCount, bCount int
		for _, o := range ops[start:end] {
			if o.op != diffmatchpatch.DiffInsert {
				aCount++
			}
			if o.op != diffmatchpatch.DiffDelete {
				bCount++
			}
		}
		fmt.Fprintf(b, "@@ -%s +%s @@\n", hunkRange(aLine[start], aCount), hunkRange(bLine[start], bCount))
		for _, o := range ops[start:end] {
			switch o.op {
			case diffmatchpatch.DiffInsert:
				b.WriteString("+")
			case diffmatchpatch.DiffDelete:
				b.WriteString("-")
			default:
				b.WriteString(" ")
			}
			b.WriteString(o.text)
			b.WriteString("\n")
		}
		i = end
	}
}

// hunkRange is "start,count" as diff -u writes it: an empty range starts
// at the line before.
func hunkRange(start, count int) string {
	if count == 0 {
		return fmt.Sprintf("%d,0", start-1)
	}
	if count == 1 {
		return fmt.Sprintf("%d", start)
	}
	return fmt.Sprintf("%d,%d", start, count)
}
