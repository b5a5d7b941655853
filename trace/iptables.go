package trace

import (
	"bufio"
	"bytes"
	"context"
	"maps"
	"slices"
	"strings"

	"github.com/devk/devk/internal/execx"
)

// Tables are the iptables tables trace reads: kube-proxy's and the
// kubelet's rules are in these.
var Tables = []string{"filter", "nat", "mangle"}

// Rules are a network namespace's rules as iptables-save prints them:
// table, then chain, then the chain's rule lines (-A CHAIN …), in order.
// A chain declared without rules has an empty slice; its policy is kept
// as the line ":CHAIN POLICY".
type Rules map[string]map[string][]string

// ParseSave reads iptables-save's output, keeping Tables only and
// leaving out comments and counters (which change with every packet).
func ParseSave(out []byte) Rules {
	rules := Rules{}
	var table map[string][]string
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || line == "COMMIT":
		case strings.HasPrefix(line, "*"):
			table = nil
			if name := line[1:]; slices.Contains(Tables, name) {
				table = map[string][]string{}
				rules[name] = table
			}
		case table == nil:
		case strings.HasPrefix(line, ":"):
			f := strings.Fields(line[1:])
			if len(f) == 0 {
				continue
			}
			if _, ok := table[f[0]]; !ok {
				table[f[0]] = nil
			}
			if len(f) > 1 && f[1] != "-" {
				// a built-in chain's policy
				table[f[0]] = append(table[f[0]], ":"+f[0]+" "+f[1])
			}
		case strings.HasPrefix(line, "-A "):
			chain, _, _ := strings.Cut(line[3:], " ")
			table[chain] = append(table[chain], line)
		}
	}
	return rules
}

// Rule is one line added to or removed from a chain.
type Rule struct {
	Table string `json:"table"`
	Chain string `json:"chain"`
	// Rule is the line as iptables-save prints it (-A KUBE-NODEPORTS …),
	// or ":CHAIN" for a chain made or deleted (with its policy for a
	// built-in one).
	Rule string `json:"rule"`
}

// RulesDiff are the lines added and removed between two snapshots,
// grouped by table and chain (Tables' order, then chains by name).
type RulesDiff struct {
	Added   []Rule `json:"added"`
	Removed []Rule `json:"removed"`
}

// Empty says nothing changed.
func (d RulesDiff) Empty() bool { return len(d.Added) == 0 && len(d.Removed) == 0 }

// DiffRules compares two snapshots line by line within each chain, as
// multisets: a rule moved within its chain is no change, a user chain
// declared or gone is a ":CHAIN" line, a built-in chain's changed
// policy a ":CHAIN POLICY" line.
func DiffRules(before, after Rules) RulesDiff {
	d := RulesDiff{Added: []Rule{}, Removed: []Rule{}}
	for _, table := range Tables {
		b, a := before[table], after[table]
		chains := map[string]bool{}
		for c := range b {
			chains[c] = true
		}
		for c := range a {
			chains[c] = true
		}
		for _, chain := range slices.Sorted(maps.Keys(chains)) {
			bl, inB := b[chain]
			al, inA := a[chain]
			// A chain on one side only: a user chain's declaration is a
			// change; a built-in chain (one with a policy) comes and
			// goes with its table, which nf_tables makes on first use.
			switch {
			case inA && !inB:
				al = withoutPolicy(al)
				if len(al) == len(a[chain]) {
					d.Added = append(d.Added, Rule{table, chain, ":" + chain})
				}
			case inB && !inA:
				bl = withoutPolicy(bl)
				if len(bl) == len(b[chain]) {
					d.Removed = append(d.Removed, Rule{table, chain, ":" + chain})
				}
			}
			for _, l := range minus(al, bl) {
				d.Added = append(d.Added, Rule{table, chain, l})
			}
			for _, l := range minus(bl, al) {
				d.Removed = append(d.Removed, Rule{table, chain, l})
			}
		}
	}
	return d
}

// withoutPolicy is a chain's lines without its policy line.
func withoutPolicy(lines []string) []string {
	return slices.DeleteFunc(slices.Clone(lines), func(l string) bool { return strings.HasPrefix(l, ":") })
}

// minus is the lines of a not in b, counting repeats, in a's order.
func minus(a, b []string) []string {
	left := map[string]int{}
	for _, l := range b {
		left[l]++
	}
	var out []string
	for _, l := range a {
		if left[l] > 0 {
			left[l]--
			continue
		}
		out = append(out, l)
	}
	return out
}

// SaveRules reads the rules of the network namespace at netns (this
// process's own when netns is empty) with iptables-save run inside it
// through nsenter, as devk enters a node's namespace everywhere. It only
// reads: iptables-save changes no rule.
func SaveRules(ctx context.Context, netns string) ([]byte, error) {
	c := execx.Cmd{Name: "iptables-save"}
	if netns != "" {
		c = execx.Cmd{Name: "nsenter", Args: []string{"--net=" + netns, "--", "iptables-save"}}
	}
	return execx.Output(ctx, c)
}
