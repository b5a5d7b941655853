// Package hostforward is the host's iptables FORWARD chain as devk's
// bridge meets it. Hosts that run Docker load br_netfilter, which passes
// frames bridged between two ports of a bridge through the host's
// iptables FORWARD chain, and set that chain's policy to DROP: traffic
// between devk's
// nodes on the cluster's bridge (a worker to the API server, etcd
// peers, pods on two nodes) is then dropped, and each times out.
// Preflight reads both (and changes nothing); `up --allow-bridge-forward`
// adds one rule that accepts the bridge's own traffic, recorded in
// cluster.json, and down removes it.
package hostforward

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/devk/devk/cluster/internal/preflight"
	"github.com/devk/devk/internal/execx"
)

// NFCallIPTables says whether bridged IPv4 frames pass iptables
// (present once br_netfilter is loaded).
const NFCallIPTables = "/proc/sys/net/bridge/bridge-nf-call-iptables"

// HostIPTables is the host's iptables, waiting for the xtables lock
// that kube-proxy or Docker may hold.
var HostIPTables = []string{"iptables", "-w"}

// AllowFlag is up's flag that adds the rule.
const AllowFlag = "--allow-bridge-forward"

// Verdict is what the host's FORWARD chain does with traffic
// between two ports of bridge: Drops's answer.
type Verdict struct {
	// Drops says the traffic is dropped; Why says by what.
	Drops bool
	Why   string
}

// Drops decides, from what was read on the host, whether it drops
// traffic between two ports of bridge: nfCall is the content of
// NFCallIPTables ("" when br_netfilter is not loaded), rules the
// output of `iptables -S FORWARD`. The first rule that decides for all
// such traffic wins (an unconditional ACCEPT, DROP or REJECT, or an
// ACCEPT matching only the bridge as in- and/or out-interface), else the
// policy. Rules that jump to other chains (Docker's) are taken as
// returning: they accept only their own interfaces' traffic.
func Drops(nfCall, rules, bridge string) Verdict {
	if strings.TrimSpace(nfCall) != "1" {
		return Verdict{}
	}
	policy := ""
	for line := range strings.SplitSeq(rules, "\n") {
		f := strings.Fields(ruleComment.ReplaceAllString(line, ""))
		if len(f) == 3 && f[0] == "-P" && f[1] == "FORWARD" {
			policy = f[2]
			continue
		}
		if len(f) < 4 || f[0] != "-A" || f[1] != "FORWARD" {
			continue
		}
		target, onBridge, other := ruleMatches(f[2:], bridge)
		switch {
		case other:
			continue
		case target == "ACCEPT":
			return Verdict{}
		case (target == "DROP" || target == "REJECT") && !onBridge:
			return Verdict{Drops: true, Why: "the host's FORWARD chain ends in `" + strings.TrimSpace(line) + "`"}
		case target == "DROP" || target == "REJECT":
			return Verdict{Drops: true, Why: "the host's FORWARD chain has `" + strings.TrimSpace(line) + "`"}
		}
	}
	if policy == "DROP" {
		return Verdict{Drops: true, Why: "the host's FORWARD policy is DROP (Docker sets it)"}
	}
	return Verdict{}
}

// ruleComment is a rule's comment as `iptables -S` prints it (quoted
// when it has spaces): no match, so left out before reading the rule.
var ruleComment = regexp.MustCompile(`\s-m comment --comment ("[^"]*"|\S+)`)

// ruleMatches reads a rule's arguments (after "-A FORWARD", its comment
// left out): its target, whether it matches on bridge as an interface,
// and whether it matches anything else (then it does not decide for all
// of the bridge's traffic).
func ruleMatches(args []string, bridge string) (target string, onBridge, other bool) {
	for i := 0; i < len(args) && target == ""; i++ {
		switch a := args[i]; {
		case (a == "-i" || a == "-o") && i+1 < len(args):
			i++
			if args[i] == bridge {
				onBridge = true
			} else {
				other = true
			}
		case a == "-j" && i+1 < len(args):
			// What follows are the target's options (--reject-with).
			target = args[i+1]
		default:
			other = true
		}
	}
	if target != "ACCEPT" && target != "DROP" && target != "REJECT" {
		other = true
	}
	return target, onBridge, other
}

// Read reads what Drops decides on: the sysctl (absent:
// br_netfilter is not loaded) and, when it is 1, the FORWARD chain.
func Read(ctx context.Context, iptables []string) (nfCall, rules string, err error) {
	data, err := os.ReadFile(NFCallIPTables)
	if errors.Is(err, os.ErrNotExist) {
		return "", "", nil
	}
	if err != nil {
		return "", "", err
	}
	if strings.TrimSpace(string(data)) != "1" {
		return string(data), "", nil
	}
	out, err := execx.Output(ctx, execx.Cmd{Name: iptables[0], Args: append(slices.Clone(iptables[1:]), "-S", "FORWARD")})
	return string(data), string(out), err
}

// Rule is the one FORWARD rule --allow-bridge-forward adds: the
// cluster's bridge's own traffic is accepted, first in the chain.
type Rule struct {
	Bridge, Cluster string
	// IPTables is the command (HostIPTables; a test's runs in its own
	// network namespace).
	IPTables []string
}

func (r Rule) spec() []string {
	return []string{"FORWARD", "-i", r.Bridge, "-o", r.Bridge, "-m", "comment", "--comment", "devk: cluster " + r.Cluster + "'s nodes", "-j", "ACCEPT"}
}

// String is the rule as a command line, for messages.
func (r Rule) String() string {
	s := r.spec()
	s[len(s)-3] = "'" + s[len(s)-3] + "'"
	return "iptables -I " + strings.Join(s, " ")
}

func (r Rule) run(ctx context.Context, op string, spec []string) error {
	args := append(slices.Clone(r.IPTables[1:]), op)
	return execx.Run(ctx, execx.Cmd{Name: r.IPTables[0], Args: append(args, spec...)})
}

// Present says whether the rule is in the chain (`iptables -C`, which
// fails when it is not).
func (r Rule) Present(ctx context.Context) bool {
	return r.run(ctx, "-C", r.spec()) == nil
}

// Add puts the rule first in the chain unless it is there; it reports
// whether it added it.
func (r Rule) Add(ctx context.Context) (bool, error) {
	if r.Present(ctx) {
		return false, nil
	}
	spec := r.spec()
	// -I FORWARD 1 <rule>: first, before any DROP.
	if err := r.run(ctx, "-I", append([]string{spec[0], "1"}, spec[1:]...)); err != nil {
		return false, fmt.Errorf("add the rule that lets the cluster's nodes talk over %s: %w", r.Bridge, err)
	}
	return true, nil
}

// Remove deletes the rule (every copy) and reports whether there was one.
func (r Rule) Remove(ctx context.Context) (bool, error) {
	removed := false
	for r.Present(ctx) {
		if err := r.run(ctx, "-D", r.spec()); err != nil {
			return removed, fmt.Errorf("remove devk's FORWARD rule (by hand: %s): %w", strings.Replace(r.String(), " -I ", " -D ", 1), err)
		}
		removed = true
	}
	return removed, nil
}

// Preflight is preflight's look at the host's FORWARD chain (Drops)
// for the cluster's rule: a problem when the host drops the traffic
// between the cluster's nodes and up is to have more than one node
// (nodes) without the rule (allowed: AllowFlag, or cluster.json records
// it), a note otherwise. It changes nothing.
func Preflight(ctx context.Context, rule Rule, allowed bool, nodes int) (*preflight.Problem, string) {
	nfCall, rules, err := Read(ctx, HostIPTables)
	if err != nil {
		return nil, fmt.Sprintf("could not read the host's FORWARD chain (%v): if it drops forwarded traffic, nodes cannot reach each other; see %s", err, AllowFlag)
	}
	v := Drops(nfCall, rules, rule.Bridge)
	switch {
	case !v.Drops:
		return nil, ""
	case allowed:
		return nil, fmt.Sprintf("br_netfilter passes bridged traffic through iptables and %s: up adds one rule (%s), down removes it", v.Why, rule)
	case nodes <= 1:
		return nil, fmt.Sprintf("br_netfilter passes bridged traffic through iptables and %s: one node needs no forwarding, but before `devk node add`, run up again with %s", v.Why, AllowFlag)
	}
	return &preflight.Problem{Check: "network",
		What: "the host would drop the traffic between the cluster's nodes: br_netfilter passes bridged traffic through iptables (" + NFCallIPTables + " is 1) and " + v.Why,
		Fix:  "pass " + AllowFlag + " (up adds one rule, `" + rule.String() + "`, and down removes it), or add such a rule yourself"}, ""
}
