package trace

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/devk/devk/internal/progress"
)

// timeFormat is the timeline's clock: to the millisecond.
const timeFormat = "15:04:05.000"

// WriteText prints a trace as one timeline, oldest first: each request
// with the etcd writes it made beneath it (the decoded diff indented),
// the writes no request was found for at their own time, then the reads'
// counts, each node's rule and container changes grouped by table and
// chain, and the Events.
func WriteText(w io.Writer, r *Result) error {
	var b strings.Builder
	exit := fmt.Sprintf("exit %d", r.ExitCode)
	how := fmt.Sprintf("settled %s after the exit", progress.Round(r.End.Sub(r.Exit)))
	if !r.Settled {
		how = fmt.Sprintf("still busy %s after the exit", progress.Round(r.End.Sub(r.Exit)))
	}
	fmt.Fprintf(&b, "# devk trace -- %s (%s): %s to %s, %s\n", strings.Join(r.Command, " "), exit,
		r.Start.Format(timeFormat), r.End.Format(timeFormat), how)
	byRev := map[int64]EtcdWrite{}
	for _, e := range r.Etcd {
		byRev[e.Revision] = e
	}
	shown := map[int64]bool{}
	ei := 0
	orphans := func(before time.Time) {
		for ; ei < len(r.Etcd); ei++ {
			e := r.Etcd[ei]
			if !before.IsZero() && e.Time.After(before) {
				return
			}
			if e.Request == "" {
				fmt.Fprintf(&b, "%s  %s\n", e.Time.Format(timeFormat), etcdLine(e))
				writeDiff(&b, e.Diff, "    ")
			}
		}
	}
	for _, q := range r.Requests {
		orphans(q.Time)
		writeRequest(&b, q)
		for _, rev := range q.Etcd {
			if e, ok := byRev[rev]; ok && !shown[rev] {
				shown[rev] = true
				fmt.Fprintf(&b, "    %s\n", etcdLine(e))
				writeDiff(&b, e.Diff, "      ")
			}
		}
	}
	orphans(time.Time{})
	if len(r.Reads) > 0 {
		var parts []string
		total := 0
		for _, v := range slices.Sorted(maps.Keys(r.Reads)) {
			parts = append(parts, fmt.Sprintf("%s %d", v, r.Reads[v]))
			total += r.Reads[v]
		}
		fmt.Fprintf(&b, "# %d reads (%s)", total, strings.Join(parts, ", "))
		if len(r.Requests) == 0 || !r.Requests[0].Read() {
			b.WriteString(": --reads lists them")
		}
		b.WriteString("\n")
	}
	for _, n := range r.Nodes {
		writeNode(&b, n)
	}
	if len(r.Events) > 0 {
		b.WriteString("# events\n")
		for _, e := range r.Events {
			fmt.Fprintf(&b, "%s  %s %s %s %s: %s", e.Time.Format("15:04:05"), e.Type, e.Namespace, e.Object, e.Reason, e.Message)
			if e.Source != "" {
				fmt.Fprintf(&b, " (%s)", e.Source)
			}
			b.WriteString("\n")
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "# note: %s\n", n)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeRequest is one request's line: time, client, verb, resource,
// object, code, latency, and (command) for the command's own.
func writeRequest(b *strings.Builder, q Request) {
	what := q.Resource
	if what == "" {
		what = q.URI
	}
	obj := q.Name
	if q.Namespace != "" {
		obj = q.Namespace + "/" + q.Name
	}
	fmt.Fprintf(b, "%s  %s %s %s %s → %d (%.0fms)", q.Time.Format(timeFormat), q.Client, strings.ToUpper(q.Verb), what, obj, q.Code, q.LatencyMS)
	if q.FromCommand {
		b.WriteString("  [command]")
	}
	if q.User != "" && !strings.Contains(q.UserAgent, "kube-controller-manager") {
		fmt.Fprintf(b, "  as %s", q.User)
	}
	b.WriteString("\n")
}

func etcdLine(e EtcdWrite) string {
	rev := fmt.Sprintf("revision %d", e.Revision)
	if e.FromRevision != 0 {
		rev = fmt.Sprintf("revision %d -> %d", e.FromRevision, e.Revision)
	}
	s := fmt.Sprintf("etcd %s %s (%s)", e.Type, e.Key, rev)
	if e.Note != "" {
		s += ": " + e.Note
	}
	return s
}

// writeDiff indents a unified diff, leaving out its two header lines
// (the key and revisions are on the line above).
func writeDiff(b *strings.Builder, diff, indent string) {
	for _, l := range strings.Split(strings.TrimRight(diff, "\n"), "\n") {
		if l == "" || strings.HasPrefix(l, "--- ") || strings.HasPrefix(l, "+++ ") {
			continue
		}
		b.WriteString(indent + l + "\n")
	}
}

// writeNode prints a node's rule changes grouped by table and chain,
// then its runtime's changes.
func writeNode(b *strings.Builder, n NodeTrace) {
	if n.IPTables.Empty() && len(n.Containers) == 0 && n.Error == "" {
		fmt.Fprintf(b, "# node %s: no rule or container changed\n", n.Node)
		return
	}
	fmt.Fprintf(b, "# node %s\n", n.Node)
	if n.Error != "" {
		fmt.Fprintf(b, "  (%s)\n", n.Error)
	}
	type group struct{ table, chain string }
	lines := map[group][]string{}
	var order []group
	add := func(r Rule, sign string) {
		g := group{r.Table, r.Chain}
		if _, ok := lines[g]; !ok {
			order = append(order, g)
		}
		lines[g] = append(lines[g], sign+" "+r.Rule)
	}
	for _, r := range n.IPTables.Removed {
		add(r, "-")
	}
	for _, r := range n.IPTables.Added {
		add(r, "+")
	}
	slices.SortStableFunc(order, func(x, y group) int {
		if c := slices.Index(Tables, x.table) - slices.Index(Tables, y.table); c != 0 {
			return c
		}
		return strings.Compare(x.chain, y.chain)
	})
	for _, g := range order {
		fmt.Fprintf(b, "  iptables -t %s %s\n", g.table, g.chain)
		for _, l := range lines[g] {
			fmt.Fprintf(b, "    %s\n", l)
		}
	}
	for _, c := range n.Containers {
		what := c.Pod
		if c.Container != "" {
			what += " " + c.Container
		}
		fmt.Fprintf(b, "  %s %s %s %s\n", c.Kind, c.Change(), what, c.ID)
	}
}
