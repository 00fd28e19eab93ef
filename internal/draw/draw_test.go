package draw

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestRow: none is '.', one to nine their digit, ten or more '+'.
func TestRow(t *testing.T) {
	if got := Row([]int{0, 1, 9, 10, 250}); got != ".19++" {
		t.Errorf("Row: %q", got)
	}
	// Ninths of the most: 1 of 9 is 1, anything above none at least 1.
	if got := Ninths([]int{0, 1, 5, 9, 18}, 18); got != ".1359" {
		t.Errorf("Ninths: %q", got)
	}
	if Max(nil) != 0 || Max([]int{3, 7, 2}) != 7 {
		t.Error("Max")
	}
}

// TestWrap: lines break at spaces within the width, continued lines
// indented by four; a word longer than the width stays whole.
func TestWrap(t *testing.T) {
	got := Wrap("aaa bbb ccc ddd "+strings.Repeat("x", 30), 10)
	if want := "aaa bbb\n    ccc\n    ddd\n    " + strings.Repeat("x", 30) + "\n"; got != want {
		t.Errorf("Wrap: %q, want %q", got, want)
	}
}

// TestTimeScale: a tick every ten columns (five under 30), every label
// in one unit: ten minutes in 10 s columns are 0s 100s ... 500s, never
// 5m beside 400s; 500 ms ticks are 0.5s, 1s, 1.5s.
func TestTimeScale(t *testing.T) {
	ticks, labels := TimeScale(10*time.Second, 60)
	if want := "0s        100s      200s      300s      400s      500s"; labels != want {
		t.Errorf("labels %q, want %q", labels, want)
	}
	if strings.Count(ticks, "|") != 6 || ticks[0] != '|' || ticks[10] != '|' {
		t.Errorf("ticks %q", ticks)
	}
	if _, labels := TimeScale(100*time.Millisecond, 20); labels != "0s   0.5s 1s   1.5s" {
		t.Errorf("labels %q", labels)
	}
}

// TestChartWrite: a panel per series, the front bars and the legend in
// the outcome's colour, the scale in times of day when the chart has an
// origin.
func TestChartWrite(t *testing.T) {
	c := Chart{
		Title: "a <chart>", Subtitle: "s", Origin: time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC),
		Slot: time.Minute, Columns: 3, Back: []int{4, 0, 1}, BackName: "checked", FrontName: "refused",
		Panels: []Panel{{Label: "one", Front: []int{1, 0, 0}}, {Label: "two", Back: []int{9, 9, 9}, Front: []int{0, 2, 0}}},
	}
	var b bytes.Buffer
	c.Write(&b)
	svg := b.String()
	for _, want := range []string{
		"<svg ", "a &lt;chart&gt;", `fill="#d92d20"/><text x="176" y="55">refused</text>`, ">one</text>", ">two</text>",
		`text-anchor="middle">10:00</text>`, `text-anchor="middle">10:03</text>`, "</svg>\n",
	} {
		if !strings.Contains(svg, want) {
			t.Errorf("no %q in:\n%s", want, svg)
		}
	}
	if n := strings.Count(svg, `fill="#d92d20"`); n != 1+2 { // the legend, a bar in each panel
		t.Errorf("%d red shapes, want 3", n)
	}
}
