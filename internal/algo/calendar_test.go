package algo

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// calTick is one request at a wall-clock time (RFC 3339, with the zone's
// offset at that instant) and the decision it must get.
type calTick struct {
	at   string
	cost int64
	want sluice.Decision
}

// runCalendar plays steps against a fresh state of l, as runSteps does.
func runCalendar(t *testing.T, l sluice.Limit, steps []calTick) {
	t.Helper()
	p := compile(t, l)
	var st State
	for i, sp := range steps {
		at, err := time.Parse(time.RFC3339, sp.at)
		if err != nil {
			t.Fatal(err)
		}
		got := Step(&p, &st, at.UnixMicro(), sp.cost, NoMaxDelay, 0, true)
		want := sp.want
		want.Limit = p.Cap
		if got != want {
			t.Errorf("%s step %d (%s cost %d):\n got %+v\nwant %+v", l, i, sp.at, sp.cost, got, want)
		}
	}
}

const (
	h = time.Hour
	d = 24 * h
)

// TestCalendarDST: a calendar day is 23 hours on the day clocks go forward
// and 25 on the day they go back, in Europe/Berlin and America/New_York.
func TestCalendarDST(t *testing.T) {
	berlin := sluice.CalendarWindow(2, sluice.Day, "Europe/Berlin")
	runCalendar(t, berlin, []calTick{
		{"2026-03-28T23:30:00+01:00", 1, yes(1, 30*time.Minute)},
		{"2026-03-29T00:00:00+01:00", 1, yes(1, 23*h)}, // spring forward: 23 hours
		{"2026-03-29T01:59:59+01:00", 1, yes(0, 21*h+time.Second)},
		{"2026-03-29T03:00:00+02:00", 1, no(0, 21*h, 21*h)}, // 02:00 never happened
		{"2026-03-30T00:00:00+02:00", 2, yes(0, 24*h)},
		{"2026-10-25T00:00:00+02:00", 1, yes(1, 25*h)}, // fall back: 25 hours
		{"2026-10-25T02:30:00+02:00", 1, yes(0, 22*h+30*time.Minute)},
		{"2026-10-25T02:30:00+01:00", 1, no(0, 21*h+30*time.Minute, 21*h+30*time.Minute)}, // the second 02:30
		{"2026-10-25T23:59:59+01:00", 1, no(0, time.Second, time.Second)},
		{"2026-10-26T00:00:00+01:00", 1, yes(1, 24*h)},
	})
	newYork := sluice.CalendarWindow(1, sluice.Day, "America/New_York")
	runCalendar(t, newYork, []calTick{
		{"2026-03-08T00:00:00-05:00", 1, yes(0, 23*h)},
		{"2026-03-08T12:00:00-04:00", 1, no(0, 12*h, 12*h)},
		{"2026-03-09T00:00:00-04:00", 1, yes(0, 24*h)},
		{"2026-11-01T00:00:00-04:00", 1, yes(0, 25*h)},
		{"2026-11-01T01:30:00-05:00", 1, no(0, 22*h+30*time.Minute, 22*h+30*time.Minute)}, // the second 01:30
		{"2026-11-02T00:00:00-05:00", 1, yes(0, 24*h)},
	})
}

// TestCalendarMonthsAndYears: months end on their last day (28, 29, 30 or
// 31 days), 2028 is a leap year, weeks start on Monday, and the zone's
// midnight, not UTC's, is the boundary.
func TestCalendarMonthsAndYears(t *testing.T) {
	runCalendar(t, sluice.CalendarWindow(2, sluice.Month, "Europe/Berlin"), []calTick{
		{"2026-01-31T23:59:58+01:00", 2, yes(0, 2*time.Second)},
		{"2026-01-31T23:59:59+01:00", 1, no(0, time.Second, time.Second)},
		{"2026-01-31T23:00:00Z", 1, yes(1, 28*d)}, // midnight in Berlin
		{"2026-03-31T22:00:00Z", 1, yes(1, 30*d)}, // April, after the change to summer time
		{"2026-04-15T12:00:00+02:00", 1, yes(0, 15*d+12*h)},
		{"2026-04-30T23:59:59+02:00", 1, no(0, time.Second, time.Second)},
	})
	runCalendar(t, sluice.CalendarWindow(1, sluice.Month, "UTC"), []calTick{
		{"2028-02-01T00:00:00Z", 1, yes(0, 29*d)}, // a leap February
		{"2028-02-29T12:00:00Z", 1, no(0, 12*h, 12*h)},
		{"2028-03-01T00:00:00Z", 1, yes(0, 31*d)},
	})
	runCalendar(t, sluice.CalendarWindow(1, sluice.Day, ""), []calTick{
		{"2028-02-28T23:59:59Z", 1, yes(0, time.Second)},
		{"2028-02-29T00:00:00Z", 1, yes(0, d)}, // the leap day is a day of its own
		{"2028-03-01T00:00:00Z", 1, yes(0, d)},
	})
	runCalendar(t, sluice.CalendarWindow(1, sluice.Year, "America/New_York"), []calTick{
		{"2028-01-01T00:00:00-05:00", 1, yes(0, 366*d)},
		{"2028-12-31T23:59:59-05:00", 1, no(0, time.Second, time.Second)},
		{"2029-01-01T00:00:00-05:00", 1, yes(0, 365*d)},
	})
	runCalendar(t, sluice.CalendarWindow(1, sluice.Week, "Europe/Berlin"), []calTick{
		{"2026-12-02T12:00:00+01:00", 1, yes(0, 4*d+12*h)}, // a Wednesday
		{"2026-12-06T23:59:59+01:00", 1, no(0, time.Second, time.Second)},
		{"2026-12-07T00:00:00+01:00", 1, yes(0, 7*d)},      // Monday
		{"2026-12-31T12:00:00+01:00", 1, yes(0, 3*d+12*h)}, // the week of Monday 28 December
		{"2027-01-03T23:00:00+01:00", 1, no(0, h, h)},
		{"2027-01-04T00:00:00+01:00", 1, yes(0, 7*d)},
	})
}

// TestCalendarClockBack: a clock that goes back across a boundary keeps
// counting in the newest period, which ends when that period ends.
func TestCalendarClockBack(t *testing.T) {
	runCalendar(t, sluice.CalendarWindow(2, sluice.Day, "Europe/Berlin"), []calTick{
		{"2026-06-01T00:00:01+02:00", 1, yes(1, d-time.Second)},
		{"2026-05-31T23:59:59+02:00", 1, yes(0, d+time.Second)},
		{"2026-05-31T23:59:59+02:00", 1, no(0, d+time.Second, d+time.Second)},
	})
}

// TestCalendarSkippedMidnight: where daylight saving time started at
// midnight (São Paulo, 4 November 2018), the day starts at 01:00.
func TestCalendarSkippedMidnight(t *testing.T) {
	runCalendar(t, sluice.CalendarWindow(1, sluice.Day, "America/Sao_Paulo"), []calTick{
		{"2018-11-03T23:59:59-03:00", 1, yes(0, time.Second)},
		{"2018-11-04T01:00:00-02:00", 1, yes(0, 23*h)},
	})
}

// TestCalendarPeriods: the bounds given to the Lua port surround the
// period holding now.
func TestCalendarPeriods(t *testing.T) {
	p := compile(t, sluice.CalendarWindow(1, sluice.Month, "Europe/Berlin"))
	now := time.Date(2028, 3, 15, 0, 0, 0, 0, time.UTC).UnixMicro()
	got := p.Periods(now)
	loc, _ := sluice.LoadZone("Europe/Berlin")
	want := [4]int64{}
	for i, m := range []time.Month{2, 3, 4, 5} {
		want[i] = time.Date(2028, m, 1, 0, 0, 0, 0, loc).UnixMicro()
	}
	if got != want {
		t.Errorf("Periods = %v, want %v", got, want)
	}
}
