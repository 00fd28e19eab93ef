package simulate

import (
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/draw"
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

// WriteDrawing draws the simulation for a terminal: per subject a line
// saying what it is and did, and its row indented by two, then the time
// scale; no line of rows and scale is wider than s.width.
func (s *Sim) WriteDrawing(w io.Writer) {
	fmt.Fprint(w, draw.Wrap(fmt.Sprintf("traffic: %s: %d requests over %s", s.traffic, len(s.arrivals), sluice.FormatDuration(s.span)), s.width))
	fmt.Fprint(w, draw.Wrap(fmt.Sprintf("each column %s: %s", sluice.FormatDuration(s.slot), simLegend), s.width), "\n")
	fmt.Fprintf(w, "arrivals: %d\n  %s\n", len(s.arrivals), draw.Row(perColumn(s.arrivals, s.slot, s.columns)))
	for _, r := range s.runs {
		fmt.Fprintf(w, "%s  %s\n", draw.Wrap(r.label+": "+r.summary(), s.width), draw.Row(r.admitted))
	}
	ticks, labels := draw.TimeScale(s.slot, s.columns)
	fmt.Fprintf(w, "  %s\n  %s\n", ticks, labels)
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

// WriteCSV writes the admissions per slot as CSV: a column per row of
// the drawing.
func (s *Sim) WriteCSV(w io.Writer) {
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

// WriteSVG draws the simulation as an SVG chart.
func (s *Sim) WriteSVG(w io.Writer) {
	c := draw.Chart{
		Title:     "sluice simulate: " + s.traffic,
		Subtitle:  fmt.Sprintf("%d requests over %s; each bar is %s, its height the square root of its count (scale on the right)", len(s.arrivals), sluice.FormatDuration(s.span), sluice.FormatDuration(s.slot)),
		Slot:      s.slot,
		Columns:   s.columns,
		Back:      perColumn(s.arrivals, s.slot, s.columns),
		BackName:  "arrived",
		FrontName: "admitted",
	}
	for _, r := range s.runs {
		c.Panels = append(c.Panels, draw.Panel{Label: r.label + ": " + r.summary(), Front: r.admitted})
	}
	c.Write(w)
}
