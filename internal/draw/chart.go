package draw

import (
	"fmt"
	"html"
	"io"
	"math"
	"time"
)

// Chart is a bar chart of counts per column over time, one panel per
// series, written by hand as SVG (no dependency): each panel's bars are
// what arrived (grey) and, over them, what was admitted or refused.
type Chart struct {
	Title, Subtitle string
	Origin          time.Time // when set, the scale shows times of day (UTC) from it
	Slot            time.Duration
	Columns         int
	Back            []int // drawn behind every panel, grey
	BackName        string
	FrontName       string // "admitted" or "refused": its colour is the outcome's (outcomeColours)
	Panels          []Panel
}

// Panel is one series of a chart, drawn over the chart's Back (or its own).
type Panel struct {
	Label string
	Back  []int // instead of the chart's Back, if set
	Front []int
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

// Write draws the chart. Bars share one vertical scale, the square root
// of the count (so that a burst does not flatten the rest), topped by the
// most that arrived in a column.
func (c *Chart) Write(w io.Writer) {
	bar := float64(svgChartW) / float64(c.Columns)
	top := max(1, Max(c.Back))
	for _, p := range c.Panels {
		top = max(top, Max(p.Back))
	}
	width := svgLeft + svgChartW + svgRight
	height := 70 + len(c.Panels)*(svgPanelH+svgPanelGap) + 30
	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(w, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", width, height)
	fmt.Fprintf(w, `<text x="%d" y="18" font-size="14" font-weight="bold">%s</text>`+"\n", svgLeft, html.EscapeString(c.Title))
	fmt.Fprintf(w, `<text x="%d" y="36" fill="#444">%s</text>`+"\n", svgLeft, html.EscapeString(c.Subtitle))
	fmt.Fprintf(w, `<rect x="%d" y="46" width="10" height="10" fill="#c8c8c8"/><text x="%d" y="55">%s</text>`+"\n", svgLeft, svgLeft+14, html.EscapeString(c.BackName))
	fmt.Fprintf(w, `<rect x="%d" y="46" width="10" height="10" fill="%s"/><text x="%d" y="55">%s</text>`+"\n", svgLeft+150, outcomeColours[c.FrontName], svgLeft+164, html.EscapeString(c.FrontName))
	y := 70
	for _, p := range c.Panels {
		fmt.Fprintf(w, `<text x="%d" y="%d">%s</text>`+"\n", svgLeft, y+14, html.EscapeString(p.Label))
		base := y + svgPanelGap - 6 + svgPanelH
		back := c.Back
		if p.Back != nil {
			back = p.Back
		}
		c.bars(w, back, "#c8c8c8", bar, base, top)
		c.bars(w, p.Front, outcomeColours[c.FrontName], bar, base, top)
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
func (c *Chart) bars(w io.Writer, counts []int, fill string, bar float64, base, top int) {
	for i, n := range counts {
		if n == 0 {
			continue
		}
		h := float64(svgPanelH) * math.Sqrt(float64(n)/float64(top))
		fmt.Fprintf(w, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n", svgLeft+float64(i)*bar, float64(base)-h, max(bar-0.5, 0.5), h, fill)
	}
}

// axis draws the time scale: a tick and its time about every 80 pixels.
func (c *Chart) axis(w io.Writer, y int, bar float64) {
	every := 1
	for _, n := range []int{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000} {
		if every = n; float64(n)*bar >= 70 {
			break
		}
	}
	for i := 0; i <= c.Columns; i += every {
		x := svgLeft + float64(i)*bar
		fmt.Fprintf(w, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#888"/>`+"\n", x, y-4, x, y+2)
		label := axisLabel(time.Duration(i)*c.Slot, axisUnit(time.Duration(every)*c.Slot))
		if !c.Origin.IsZero() {
			label = c.Origin.Add(time.Duration(i) * c.Slot).UTC().Format("15:04")
			if time.Duration(c.Columns)*c.Slot > 24*time.Hour {
				label = c.Origin.Add(time.Duration(i) * c.Slot).UTC().Format("01-02 15:04")
			}
		}
		fmt.Fprintf(w, `<text x="%.1f" y="%d" fill="#444" text-anchor="middle">%s</text>`+"\n", x, y+16, label)
	}
}
