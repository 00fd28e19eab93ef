package algo

import (
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
)

// calendar is a calendar window's period and zone, and the period last
// computed: a decision inside it reads one pointer, not the zone's rules.
// It is shared by every copy of its Params and safe for concurrent use.
type calendar struct {
	unit sluice.Calendar
	loc  *time.Location
	last atomic.Pointer[[2]int64]
}

// period returns the calendar period holding now (µs): its start and end.
func (c *calendar) period(now int64) (start, end int64) {
	if b := c.last.Load(); b != nil && b[0] <= now && now < b[1] {
		return b[0], b[1]
	}
	start, end = c.compute(now)
	c.last.Store(&[2]int64{start, end})
	return start, end
}

func (c *calendar) compute(now int64) (start, end int64) {
	s, e := sluice.PeriodAt(c.unit, c.loc, time.UnixMicro(now))
	return s.UnixMicro(), e.UnixMicro()
}

// window returns the window a calendar fixed window decides in at now:
// the period holding now, or, if the clock has gone back before the
// newest window the state has seen (starting at seen), that one.
func (c *calendar) window(now, seen int64) (start, end int64) {
	start, end = c.period(now)
	if start < seen {
		return c.compute(seen)
	}
	return start, end
}

// Calendar reports whether p is a calendar window.
func (p *Params) Calendar() bool { return p.cal != nil }

// Periods returns, for a calendar window, the starts of the period before
// the one holding now, of that one and of the next, and the end of the
// next: what the Lua port, which has no time zones, is given to decide
// with a clock up to a period away from now.
func (p *Params) Periods(now int64) [4]int64 {
	start, end := p.cal.compute(now)
	before, _ := p.cal.compute(start - 1)
	_, after := p.cal.compute(end)
	return [4]int64{before, start, end, after}
}
