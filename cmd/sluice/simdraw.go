package main

import (
	"encoding/csv"
	"fmt"
	"html"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
)

// simLegend says what the glyphs of a row mean.
const simLegend = "'.' none admitted, 1-9 that many, '+' ten or more (--csv prints exact counts)"

// perColumn counts times by column of width.
func perColumn(times []time.Duration, width time.Duration, columns int) []int {
	out := make([]int, columns)
	for _, at := range times {
		out[at/width]++
	}
	return out
}

// writeSimDrawing draws the simulation for a terminal: per subject a line
// saying what it is and did, and its row indented by two, then the time
// scale; no line of rows and scale is wider than s.width.
func writeSimDrawing(w io.Writer, s *sim) {
	fmt.Fprint(w, wrap(fmt.Sprintf("traffic: %s: %d requests over %s", s.traffic, len(s.arrivals), sluice.FormatDuration(s.span)), s.width))
	fmt.Fprint(w, wrap(fmt.Sprintf("each column %s: %s", sluice.FormatDuration(s.slot), simLegend), s.width), "\n")
	fmt.Fprintf(w, "arrivals: %d\n  %s\n", len(s.arrivals), simRow(perColumn(s.arrivals, s.slot, s.columns)))
	for _, r := range s.runs {
		fmt.Fprintf(w, "%s  %s\n", wrap(r.label+": "+r.summary(), s.width), simRow(r.admitted))
	}
	ticks, labels := timeScale(s.slot, s.columns)
	fmt.Fprintf(w, "  %s\n  %s\n", ticks, labels)
}

// wrap breaks text into lines of at most width columns at spaces (a word
// longer than that stays whole), continued lines indented by four.
func wrap(text string, width int) string {
	var b strings.Builder
	line := 0
	for i, word := range strings.Split(text, " ") {
		switch {
		case i == 0:
		case line+1+len(word) > width:
			b.WriteString("\n    ")
			line = 4
		default:
			b.WriteByte(' ')
			line++
		}
		b.WriteString(word)
		line += len(word)
	}
	return b.String() + "\n"
}

// summary says what a run admitted.
func (r *simRun) summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d admitted", r.total)
	if r.period > 0 {
		fmt.Fprintf(&b, ", at most %d in any %s", r.most, sluice.FormatDuration(r.period))
	}
	if r.inFlight > 0 {
		fmt.Fprintf(&b, ", at most %d in flight", r.inFlight)
	}
	if r.delayed > 0 {
		fmt.Fprintf(&b, ", %d after a delay (up to %s)", r.delayed, sluice.FormatDuration(r.maxDelay.Round(time.Millisecond)))
	}
	return b.String()
}

// timeScale returns a row of tick marks ('|' every few columns) and a row
// of the times they stand for, in one unit (axisUnit), each label
// starting under its tick and left out where it would run into the next.
func timeScale(slot time.Duration, columns int) (ticks, labels string) {
	every := 10
	if columns < 30 {
		every = 5
	}
	unit := axisUnit(time.Duration(every) * slot)
	t := []byte(strings.Repeat(" ", columns))
	var l []byte
	for c := 0; c < columns; c += every {
		t[c] = '|'
		label := axisLabel(time.Duration(c)*slot, unit)
		if len(l) > c || c+len(label) > columns+8 {
			continue
		}
		l = append(l, strings.Repeat(" ", c-len(l))...)
		l = append(l, label...)
	}
	return strings.TrimRight(string(t), " "), string(l)
}

// axisUnits are the units an axis is labelled in, largest first.
var axisUnits = []struct {
	d    time.Duration
	name string
}{{24 * time.Hour, "d"}, {time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}, {time.Millisecond, "ms"}, {time.Microsecond, "us"}}

// axisUnit is the unit of an axis whose ticks are step apart: the largest
// in which every tick is a whole number or has one decimal (500ms ticks
// are 0.5s, 1s, 1.5s; 100s ticks stay seconds, never 5m beside 400s).
func axisUnit(step time.Duration) int {
	for i, u := range axisUnits {
		if step >= u.d/10 && (10*step)%u.d == 0 {
			return i
		}
	}
	return len(axisUnits) - 1
}

// axisLabel writes d in the axis unit: "1.5s", "400s".
func axisLabel(d time.Duration, unit int) string {
	u := axisUnits[unit]
	return strconv.FormatFloat(float64(d)/float64(u.d), 'f', -1, 64) + u.name
}

// simRow draws counts: '.' for none, 1-9, '+' for ten or more.
func simRow(counts []int) string {
	var b strings.Builder
	for _, n := range counts {
		switch {
		case n == 0:
			b.WriteByte('.')
		case n >= 10:
			b.WriteByte('+')
		default:
			b.WriteByte(byte('0' + n))
		}
	}
	return b.String()
}

func writeSimCSV(w io.Writer, s *sim) {
	arrived := perColumn(s.arrivals, s.slot, s.columns)
	cw := csv.NewWriter(w)
	row := []string{"slot_start_ms", "arrivals"}
	for _, r := range s.runs {
		row = append(row, r.label)
	}
	cw.Write(row)
	for c := range s.columns {
		row = append(row[:0], strconv.FormatFloat(float64(time.Duration(c)*s.slot)/float64(time.Millisecond), 'f', -1, 64), strconv.Itoa(arrived[c]))
		for _, r := range s.runs {
			row = append(row, strconv.Itoa(r.admitted[c]))
		}
		cw.Write(row)
	}
	cw.Flush()
}

// svgChart is a bar chart of counts per column over time, one panel per
// series, written by hand as SVG (no dependency): each panel's bars are
// what arrived (grey) and, over them, what was admitted or refused.
type svgChart struct {
	title, subtitle string
	origin          time.Time // when set, the scale shows times of day (UTC) from it
	slot            time.Duration
	columns         int
	back            []int // drawn behind every panel, grey
	backName        string
	frontName       string // "admitted" or "refused": its colour is the outcome's (outcomeColours)
	panels          []svgPanel
}

type svgPanel struct {
	label string
	back  []int // instead of the chart's back, if set
	front []int
}

// outcomeColours are the colours of the outcomes every chart of sluice
// draws, the status page's (server/admin/status.html): admitted green, refused
// red, whichever the chart shows.
var outcomeColours = map[string]string{"admitted": "#12805c", "refused": "#d92d20"}

const (
	svgLeft, svgRight = 12, 80 // margins; the right one holds the scale
	svgPanelH         = 44     // bar area of a panel
	svgPanelGap       = 26     // room for a panel's label
	svgChartW         = 720    // bar area width
)

// write draws the chart. Bars share one vertical scale, the square root
// of the count (so that a burst does not flatten the rest), topped by the
// most that arrived in a column.
func (c *svgChart) write(w io.Writer) {
	bar := float64(svgChartW) / float64(c.columns)
	top := max(1, slicesMax(c.back))
	for _, p := range c.panels {
		top = max(top, slicesMax(p.back))
	}
	width := svgLeft + svgChartW + svgRight
	height := 70 + len(c.panels)*(svgPanelH+svgPanelGap) + 30
	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(w, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", width, height)
	fmt.Fprintf(w, `<text x="%d" y="18" font-size="14" font-weight="bold">%s</text>`+"\n", svgLeft, html.EscapeString(c.title))
	fmt.Fprintf(w, `<text x="%d" y="36" fill="#444">%s</text>`+"\n", svgLeft, html.EscapeString(c.subtitle))
	fmt.Fprintf(w, `<rect x="%d" y="46" width="10" height="10" fill="#c8c8c8"/><text x="%d" y="55">%s</text>`+"\n", svgLeft, svgLeft+14, html.EscapeString(c.backName))
	fmt.Fprintf(w, `<rect x="%d" y="46" width="10" height="10" fill="%s"/><text x="%d" y="55">%s</text>`+"\n", svgLeft+150, outcomeColours[c.frontName], svgLeft+164, html.EscapeString(c.frontName))
	y := 70
	for _, p := range c.panels {
		fmt.Fprintf(w, `<text x="%d" y="%d">%s</text>`+"\n", svgLeft, y+14, html.EscapeString(p.label))
		base := y + svgPanelGap - 6 + svgPanelH
		back := c.back
		if p.back != nil {
			back = p.back
		}
		c.bars(w, back, "#c8c8c8", bar, base, top)
		c.bars(w, p.front, outcomeColours[c.frontName], bar, base, top)
		fmt.Fprintf(w, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#888"/>`+"\n", svgLeft, base, svgLeft+svgChartW, base)
		fmt.Fprintf(w, `<text x="%d" y="%d" fill="#444">%d</text>`+"\n", svgLeft+svgChartW+6, base-svgPanelH+10, top)
		fmt.Fprintf(w, `<text x="%d" y="%d" fill="#444">%d</text>`+"\n", svgLeft+svgChartW+6, base-svgPanelH/2+4, top/4)
		fmt.Fprintf(w, `<text x="%d" y="%d" fill="#444">0</text>`+"\n", svgLeft+svgChartW+6, base)
		y += svgPanelH + svgPanelGap
	}
	c.axis(w, y+4, bar)
	fmt.Fprintln(w, "</svg>")
}

// bars draws counts as bars standing on base, top being full height.
func (c *svgChart) bars(w io.Writer, counts []int, fill string, bar float64, base, top int) {
	for i, n := range counts {
		if n == 0 {
			continue
		}
		h := float64(svgPanelH) * math.Sqrt(float64(n)/float64(top))
		fmt.Fprintf(w, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n", svgLeft+float64(i)*bar, float64(base)-h, max(bar-0.5, 0.5), h, fill)
	}
}

// axis draws the time scale: a tick and its time about every 80 pixels.
func (c *svgChart) axis(w io.Writer, y int, bar float64) {
	every := 1
	for _, n := range []int{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000} {
		if every = n; float64(n)*bar >= 70 {
			break
		}
	}
	for i := 0; i <= c.columns; i += every {
		x := svgLeft + float64(i)*bar
		fmt.Fprintf(w, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#888"/>`+"\n", x, y-4, x, y+2)
		label := axisLabel(time.Duration(i)*c.slot, axisUnit(time.Duration(every)*c.slot))
		if !c.origin.IsZero() {
			label = c.origin.Add(time.Duration(i) * c.slot).UTC().Format("15:04")
			if time.Duration(c.columns)*c.slot > 24*time.Hour {
				label = c.origin.Add(time.Duration(i) * c.slot).UTC().Format("01-02 15:04")
			}
		}
		fmt.Fprintf(w, `<text x="%.1f" y="%d" fill="#444" text-anchor="middle">%s</text>`+"\n", x, y+16, label)
	}
}

// writeSimSVG draws the simulation as an SVG chart.
func writeSimSVG(w io.Writer, s *sim) {
	c := svgChart{
		title:     "sluice simulate: " + s.traffic,
		subtitle:  fmt.Sprintf("%d requests over %s; each bar is %s, its height the square root of its count (scale on the right)", len(s.arrivals), sluice.FormatDuration(s.span), sluice.FormatDuration(s.slot)),
		slot:      s.slot,
		columns:   s.columns,
		back:      perColumn(s.arrivals, s.slot, s.columns),
		backName:  "arrived",
		frontName: "admitted",
	}
	for _, r := range s.runs {
		c.panels = append(c.panels, svgPanel{label: r.label + ": " + r.summary(), front: r.admitted})
	}
	c.write(w)
}
