package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/devk/devk/internal/atomicfile"
)

// topErrors is how many distinct errors the summary lists, most frequent
// first (distinct_failures says how many there were).
const topErrors = 5

// summary is the JSON a run writes. Durations are in milliseconds, times
// RFC 3339.
type summary struct {
	Mode    string `json:"mode"`
	Server  string `json:"server"`
	Request string `json:"request"`
	Rate    int    `json:"rate"`
	Timeout string `json:"timeout"`

	Start time.Time `json:"start"`
	// Ready is the first success (when -ready was written); absent when
	// no request succeeded.
	Ready   *time.Time `json:"ready,omitempty"`
	End     time.Time  `json:"end"`
	Seconds float64    `json:"seconds"`

	// Sent is every request started; each one either succeeded or
	// failed. A request failed when client-go returned an error, its
	// retries included.
	Sent      int `json:"sent"`
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
	// FailedBeforeReady are the failures before the first success (a
	// cluster still coming up), counted in Failed too.
	FailedBeforeReady int `json:"failed_before_ready"`
	// Ticks is how many ticks of the schedule (one per 1/rate) this
	// client took: Sent + SkippedTicks. SkippedTicks found every
	// in-flight slot taken and sent nothing. MissedTicks are the ticks
	// the ticker dropped because this client was too busy to take them
	// (its own CPU, not the server): a rate below -rate that is the
	// client's doing.
	Ticks        int `json:"ticks"`
	SkippedTicks int `json:"skipped_ticks"`
	MissedTicks  int `json:"missed_ticks"`
	MaxInFlight  int `json:"max_in_flight"`

	// Attempts is how many times the transport sent a request: more than
	// Sent when client-go retried. RetriedRequests were sent more than
	// once, SucceededAfterRetry of them succeeded in the end.
	Attempts            int `json:"attempts"`
	RetriedRequests     int `json:"retried_requests"`
	SucceededAfterRetry int `json:"succeeded_after_retry"`
	// Connections is how many TCP connections were made to the server.
	Connections int64 `json:"connections"`
	// Protocols counts the responses by protocol (HTTP/2.0, HTTP/1.1).
	Protocols map[string]int `json:"protocols"`

	// Failures are the errors of the failed requests, by text (the
	// client's own port in it replaced by *). Retried are the outcomes
	// of the attempts client-go retried past, by text.
	Failures         []errorCount `json:"failures"`
	DistinctFailures int          `json:"distinct_failures"`
	Retried          []errorCount `json:"retried"`

	// LatencyMS is of the requests that succeeded, retries included.
	LatencyMS latency `json:"latency_ms"`
	// MaxSuccessGapMS is the longest time between two successful
	// responses, ending at MaxSuccessGapEnd.
	MaxSuccessGapMS  float64    `json:"max_success_gap_ms"`
	MaxSuccessGapEnd *time.Time `json:"max_success_gap_end,omitempty"`

	// PerSecond counts the requests by the second of the run they were
	// sent in.
	PerSecond []second `json:"per_second"`
}

// errorCount is one distinct error: how often, first and last seen.
type errorCount struct {
	Error string    `json:"error"`
	Count int       `json:"count"`
	First time.Time `json:"first"`
	Last  time.Time `json:"last"`
}

// latency is nearest-rank percentiles, in milliseconds.
type latency struct {
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// second is one second of the run.
type second struct {
	Second    int `json:"s"`
	Sent      int `json:"sent"`
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
}

// errorCounts are errors by their normalized text.
type errorCounts map[string]*errorCount

// add counts text seen at at, and reports whether it is a new kind.
func (c errorCounts) add(text string, at time.Time) bool {
	key := normalizeError(text)
	if e, ok := c[key]; ok {
		e.Count++
		e.Last = at
		return false
	}
	c[key] = &errorCount{Error: key, Count: 1, First: at, Last: at}
	return true
}

// top is the n most frequent, ties by first seen.
func (c errorCounts) top(n int) []errorCount {
	out := make([]errorCount, 0, len(c))
	for _, e := range c {
		out = append(out, *e)
	}
	slices.SortFunc(out, func(a, b errorCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), a.First.Compare(b.First))
	})
	return out[:min(n, len(out))]
}

// What varies from one occurrence of an error to the next and would
// split one kind into many: the client's ephemeral port
// ("read tcp 10.250.0.1:41234->10.250.0.1:6443"), HTTP/2 stream IDs.
var (
	localPortRE = regexp.MustCompile(`(\d{1,3}(?:\.\d{1,3}){3}|\[[0-9a-fA-F:.]+\]):\d+->`)
	streamIDRE  = regexp.MustCompile(`(stream ID|LastStreamID=)\s?\d+`)
)

// normalizeError is an error's text with what varies replaced by *.
func normalizeError(text string) string {
	text = localPortRE.ReplaceAllString(text, "$1:*->")
	return streamIDRE.ReplaceAllStringFunc(text, func(m string) string {
		return strings.TrimRight(m, "0123456789") + "*"
	})
}

// summary is the run so far, ended at end.
func (r *recorder) summary(end time.Time, o options, c *client) *summary {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := &summary{
		Mode:                o.mode,
		Server:              c.server,
		Request:             c.request,
		Rate:                o.rate,
		Timeout:             o.timeout.String(),
		Start:               r.start,
		End:                 end,
		Seconds:             end.Sub(r.start).Seconds(),
		Sent:                r.sent,
		Succeeded:           r.succeeded,
		Failed:              r.failed,
		FailedBeforeReady:   r.failedBeforeReady,
		SkippedTicks:        r.skipped,
		MaxInFlight:         r.maxInFlight,
		Attempts:            r.attempts,
		RetriedRequests:     r.retriedRequests,
		SucceededAfterRetry: r.succeededAfterRetry,
		Connections:         c.dialer.n.Load(),
		Protocols:           r.protocols,
		Failures:            r.failures.top(topErrors),
		DistinctFailures:    len(r.failures),
		Retried:             r.retried.top(topErrors),
		LatencyMS:           percentiles(r.latencies),
		MaxSuccessGapMS:     ms(r.maxGap),
		PerSecond:           r.perSecond,
	}
	if !r.ready.IsZero() {
		s.Ready = &r.ready
	}
	if !r.maxGapEnd.IsZero() {
		s.MaxSuccessGapEnd = &r.maxGapEnd
	}
	return s
}

// percentiles are d's nearest-rank p50, p95, p99 and max; zero when d is
// empty.
func percentiles(d []time.Duration) latency {
	if len(d) == 0 {
		return latency{}
	}
	s := slices.Clone(d)
	slices.Sort(s)
	rank := func(p float64) float64 {
		i := int(math.Ceil(p/100*float64(len(s)))) - 1
		return ms(s[max(i, 0)])
	}
	return latency{P50: rank(50), P95: rank(95), P99: rank(99), Max: ms(s[len(s)-1])}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// line is the summary in one line, for stderr.
func (s *summary) line() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s mode, %d/s for %.1fs: %d sent, %d succeeded, %d failed (%d before the first success)",
		s.Mode, s.Rate, s.Seconds, s.Sent, s.Succeeded, s.Failed, s.FailedBeforeReady)
	fmt.Fprintf(&b, "; %d attempts, %d requests retried (%d of them then succeeded)", s.Attempts, s.RetriedRequests, s.SucceededAfterRetry)
	l := s.LatencyMS
	fmt.Fprintf(&b, "; latency p50 %.1fms p95 %.1fms p99 %.1fms max %.1fms; longest without a success %.0fms",
		l.P50, l.P95, l.P99, l.Max, s.MaxSuccessGapMS)
	fmt.Fprintf(&b, "; %d connections; %d ticks skipped (all in flight), %d missed (client too busy)", s.Connections, s.SkippedTicks, s.MissedTicks)
	if len(s.Failures) > 0 {
		fmt.Fprintf(&b, "; most frequent failure (%d): %s", s.Failures[0].Count, s.Failures[0].Error)
	}
	return b.String()
}

// writeSummary writes s as indented JSON to path, atomically, or to
// stdout when path is empty.
func writeSummary(s *summary, path string) error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	data = append(data, '\n')
	if path == "" {
		_, err = os.Stdout.Write(data)
		return err
	}
	if err := atomicfile.Write(path, data, 0o644, ""); err != nil {
		return fmt.Errorf("-out: %w (give a file in a writable directory)", err)
	}
	return nil
}
