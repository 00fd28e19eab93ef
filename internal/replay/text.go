package replay

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/internal/accesslog"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/draw"
)

// logTime formats a time of the log for the report.
func logTime(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") }

// commas writes n with thousands separators.
func commas(n int) string {
	s := strconv.Itoa(n)
	if n < 0 {
		return "-" + commas(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// percent is part of whole in percent, one decimal.
func percent(part, whole int) string {
	if whole == 0 {
		return "0%"
	}
	return strconv.FormatFloat(100*float64(part)/float64(whole), 'f', 1, 64) + "%"
}

// span is how long the replayed log lasts.
func (rep *Report) span() time.Duration { return rep.last.Sub(rep.first) }

// WriteText writes the report for people: the log's span and outcomes,
// then per limit its counts, peaks, refusals over time in rows of width
// columns, and its top keys refused most.
func (rep *Report) WriteText(w io.Writer, top, width int) {
	fmt.Fprintf(w, "replay of %s through %s\n", rep.file, rep.PolicyFile)
	if rep.requests == 0 {
		fmt.Fprintln(w, "no request could be read from the log")
	} else {
		fmt.Fprintf(w, "%s requests from %s to %s (%s)\n", commas(rep.requests), logTime(rep.first), logTime(rep.last), rep.span().Round(time.Second))
		b := rep.busiest
		fmt.Fprintf(w, "busiest second %s (%s requests), minute %s (%s), hour %s (%s)\n",
			b[0].mostAt.UTC().Format("15:04:05"), commas(b[0].most), b[1].mostAt.UTC().Format("15:04"), commas(b[1].most), b[2].mostAt.UTC().Format("15:04"), commas(b[2].most))
		var parts []string
		for o := decide.Admitted; o <= decide.Invalid; o++ {
			if n := rep.outcomes[o]; n > 0 || o == decide.Admitted || o == decide.Refused {
				parts = append(parts, commas(n)+" "+strings.ReplaceAll(o.String(), "_", "-"))
			}
		}
		fmt.Fprintf(w, "outcomes: %s\n", strings.Join(parts, ", "))
	}
	writeMalformed(w, "invalid requests (sluice serve answers them 4xx)", &rep.invalidReasons)
	writeMalformed(w, "unreadable lines (skipped)", &rep.bad)
	if rep.outOfOrder > 0 {
		fmt.Fprintf(w, "%s requests were logged before an earlier line's time, and decided at that time\n", commas(rep.outOfOrder))
	}
	for _, ls := range rep.limits {
		fmt.Fprintln(w)
		rep.writeLimit(w, ls, top, width)
	}
}

// writeMalformed lists the reasons of m, if any.
func writeMalformed(w io.Writer, what string, m *accesslog.Malformed) {
	if m.Total == 0 {
		return
	}
	fmt.Fprintf(w, "%s: %s\n", what, commas(m.Total))
	for _, reason := range m.Order {
		r := m.Reasons[reason]
		lines := make([]string, len(r.Lines))
		for i, n := range r.Lines {
			lines[i] = strconv.Itoa(n)
		}
		fmt.Fprintf(w, "  %s × %s (line %s", commas(r.Count), reason, strings.Join(lines, ", "))
		if r.Count > len(r.Lines) {
			fmt.Fprint(w, ", ...")
		}
		fmt.Fprintln(w, ")")
	}
}

// writeLimit reports one limit: counts, peaks, refusals over time, and
// the keys refused most.
func (rep *Report) writeLimit(w io.Writer, ls *limitStats, top, width int) {
	fmt.Fprintln(w, ls.label())
	refusedKeys := 0
	for _, ks := range ls.keys.m {
		if ks.refused > 0 {
			refusedKeys++
		}
	}
	fmt.Fprintf(w, "  %s checked, %s refused (%s), %s of %s keys refused", commas(ls.checked), commas(ls.refused), percent(ls.refused, ls.checked), commas(refusedKeys), ls.keys.countText())
	if ls.delayed > 0 {
		fmt.Fprintf(w, ", %s delayed", commas(ls.delayed))
	}
	fmt.Fprintln(w)
	if peaks := ls.keys.peakList(); len(peaks) > 0 && ls.limit.Period > 0 {
		fmt.Fprintf(w, "  peak per key, the most in any %s (%s): p50 %d, p90 %d, p99 %d, max %d\n", sluice.FormatDuration(ls.limit.Period), peakHow(ls.limit),
			quantile(peaks, 50), quantile(peaks, 90), quantile(peaks, 99), peaks[len(peaks)-1])
	}
	if ls.keys.forgotten > 0 {
		fmt.Fprintf(w, "  past --max-keys, keys used least were forgotten %s times: per-key counts and peaks are approximate\n", commas(ls.keys.forgotten))
	}
	if ls.refused == 0 {
		return
	}
	slot, cols := rep.columns(width-4, ls.checks.width, ls.refusals.width)
	counts := ls.refusals.resampled(slot, rep.span())[:cols]
	most := draw.Max(counts)
	fmt.Fprintf(w, "  refused over time, each column %s from %s:\n  1-9 ninths of the busiest column (%s refused), '.' none\n", sluice.FormatDuration(slot), logTime(rep.first), commas(most))
	ticks, labels := draw.TimeScale(slot, cols)
	fmt.Fprintf(w, "    %s\n    %s\n    %s\n", draw.Ninths(counts, most), ticks, labels)
	fmt.Fprintln(w, "  keys refused most:")
	for i, k := range ls.keys.sortedKeys(func(a, b *keyStats) int { return b.refused - a.refused }) {
		ks := ls.keys.m[k]
		if i >= top || ks.refused == 0 {
			break
		}
		fmt.Fprintf(w, "    %s: %s refused of %s; from %s to %s", showKey(k), commas(ks.refused), commas(ks.requests),
			ks.firstRefused.UTC().Format("15:04:05"), ks.lastRefused.UTC().Format("15:04:05"))
		if ls.limit.Period > 0 {
			fmt.Fprintf(w, "; peak %d in %s", ks.peak, sluice.FormatDuration(ls.limit.Period))
		}
		fmt.Fprintln(w)
	}
}

// countText is how many keys were seen, "about N" when estimated.
func (kt *keyTable) countText() string {
	n, exact := kt.count()
	if exact {
		return commas(n)
	}
	return "about " + commas(n)
}

// peakHow says how a limit's peaks are counted (measureLimit).
func peakHow(l sluice.Limit) string {
	if algo.Aligned(l.Algorithm) {
		return "aligned windows"
	}
	return "as a sliding_window counts"
}

// columns picks the slot of a time row: the narrowest of seriesWidths,
// no narrower than the series' own buckets, whose columns fit room.
func (rep *Report) columns(room int, widths ...time.Duration) (time.Duration, int) {
	slot := seriesWidths[0]
	for _, w := range widths {
		slot = max(slot, w)
	}
	for int(rep.span()/slot)+1 > room {
		slot = nextWidth(slot)
	}
	return slot, int(rep.span()/slot) + 1
}

// quantile is the q-th percentile of sorted values: the least value that
// at least q% of them do not exceed.
func quantile(sorted []int64, q float64) int64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*q/100+0.999999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// writeSVG draws, per limit, the requests checked and refused over time.
func (rep *Report) WriteSVG(w io.Writer) {
	var slot time.Duration
	cols := 0
	for _, ls := range rep.limits {
		s, c := rep.columns(240, ls.checks.width, ls.refusals.width, rep.traffic.width)
		if s > slot {
			slot, cols = s, c
		}
	}
	if slot == 0 {
		slot, cols = seriesWidths[0], 1
	}
	c := draw.Chart{
		Title:     "sluice replay: " + rep.file + " through " + rep.PolicyFile,
		Subtitle:  fmt.Sprintf("%s requests from %s; each bar is %s, its height the square root of its count; times in UTC", commas(rep.requests), logTime(rep.first), sluice.FormatDuration(slot)),
		Origin:    rep.first,
		Slot:      slot,
		Columns:   cols,
		BackName:  "checked",
		FrontName: "refused",
	}
	for _, ls := range rep.limits {
		c.Panels = append(c.Panels, draw.Panel{
			Label: fmt.Sprintf("%s: %s refused of %s", ls.label(), commas(ls.refused), commas(ls.checked)),
			Back:  ls.checks.resampled(slot, rep.span())[:cols],
			Front: ls.refusals.resampled(slot, rep.span())[:cols],
		})
	}
	c.Write(w)
}
