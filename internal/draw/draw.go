// Package draw draws counts over time, for a terminal and as SVG: the
// rows of digits and the time scale of sluice simulate and sluice replay,
// and the bar charts of their --svg (each outcome in the status page's
// colour). It knows nothing of limits: it draws numbers.
package draw

import (
	"strconv"
	"strings"
	"time"
)

// Wrap breaks text into lines of at most width columns at spaces (a word
// longer than that stays whole), continued lines indented by four.
func Wrap(text string, width int) string {
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

// TimeScale returns a row of tick marks ('|' every few columns) and a row
// of the times they stand for, in one unit (axisUnit), each label
// starting under its tick and left out where it would run into the next.
func TimeScale(slot time.Duration, columns int) (ticks, labels string) {
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

// Row draws counts: '.' for none, 1-9, '+' for ten or more.
func Row(counts []int) string {
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

// Ninths draws counts as digits 1-9, ninths of most ('.' for none).
func Ninths(counts []int, most int) string {
	var b strings.Builder
	for _, n := range counts {
		if n == 0 {
			b.WriteByte('.')
			continue
		}
		b.WriteByte(byte('0' + (9*n+most-1)/most))
	}
	return b.String()
}

// Max is the largest of s, 0 for none.
func Max(s []int) int {
	m := 0
	for _, n := range s {
		m = max(m, n)
	}
	return m
}
