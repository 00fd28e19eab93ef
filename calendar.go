package sluice

import (
	"fmt"
	"strings"
	"sync"
	"time"
)

// Calendar is a calendar period a fixed window can be aligned to: a day, an
// ISO week (from Monday), a month or a year, in a time zone. Its zero value
// means no calendar: the window is a fixed duration aligned to the Unix
// epoch.
type Calendar uint8

// The calendar periods of CalendarWindow.
const (
	Day   Calendar = iota + 1 // from midnight to midnight: 23, 24 or 25 hours
	Week                      // an ISO week, from Monday midnight
	Month                     // from the first of the month, midnight
	Year                      // from January 1st, midnight
)

var calendarNames = [...]string{Day: "day", Week: "week", Month: "month", Year: "year"}

// String returns "day", "week", "month" or "year".
func (c Calendar) String() string {
	if c == 0 || int(c) >= len(calendarNames) {
		return fmt.Sprintf("calendar(%d)", uint8(c))
	}
	return calendarNames[c]
}

// nominal is the length of a period the way a RateLimit-Policy header
// advertises it: the usual length, not that of a particular period.
func (c Calendar) nominal() time.Duration {
	switch c {
	case Day:
		return 24 * time.Hour
	case Week:
		return 7 * 24 * time.Hour
	case Month:
		return 30 * 24 * time.Hour
	case Year:
		return 365 * 24 * time.Hour
	}
	return 0
}

// CalendarWindow allows n requests in each calendar period unit (Day,
// Week, Month or Year) of the IANA time zone zone ("Europe/Berlin"; "" or
// "UTC" for UTC). Periods start at local midnight, so a day is 23 or 25
// hours long across a daylight saving change, a week starts on Monday, a
// month on the 1st. RetryAfter and ResetAfter count to the real end of the
// period.
//
// The zone is kept by name, so the Limit stays a small comparable value;
// Validate (and every store) loads it from the system's time zone database
// (or the one embedded with time/tzdata) and reports an unknown zone. The
// guarantee is FixedWindow's: at most n in each period, up to 2n across a
// boundary. State: two integers.
func CalendarWindow(n int64, unit Calendar, zone string) Limit {
	return Limit{Algorithm: AlgorithmFixedWindow, Count: n, Calendar: unit, Zone: zone}
}

// zones caches the locations of zone names already loaded: loading reads a
// file of the time zone database. Only names that load are kept, so it
// holds at most the database's few hundred zones.
var zones sync.Map // string -> *time.Location

// LoadZone returns the location of an IANA time zone name as calendar
// windows use it: "" and "UTC" are UTC; "Local", which would differ from
// one instance to the next, is refused. Locations are cached, so calling
// it again costs a map lookup.
func LoadZone(name string) (*time.Location, error) {
	if name == "" {
		return time.UTC, nil
	}
	if l, ok := zones.Load(name); ok {
		return l.(*time.Location), nil
	}
	if name == "Local" || strings.ContainsAny(name, "\\\x00") || len(name) > 64 {
		return nil, fmt.Errorf("%q is not an IANA time zone name (such as Europe/Berlin or UTC)", name)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("%q is not a known IANA time zone (such as Europe/Berlin or UTC)", name)
	}
	zones.Store(name, loc)
	return loc, nil
}

// PeriodAt returns the calendar period of unit in loc holding t: its start
// and its end (the next one's start).
func PeriodAt(unit Calendar, loc *time.Location, t time.Time) (start, end time.Time) {
	t = t.In(loc)
	y, m, d := t.Date()
	switch unit {
	case Week:
		d -= (int(t.Weekday()) + 6) % 7 // back to Monday
		start, end = midnight(y, m, d, loc), midnight(y, m, d+7, loc)
	case Month:
		start, end = midnight(y, m, 1, loc), midnight(y, m+1, 1, loc)
	case Year:
		start, end = midnight(y, 1, 1, loc), midnight(y+1, 1, 1, loc)
	default:
		start, end = midnight(y, m, d, loc), midnight(y, m, d+1, loc)
	}
	return start, end
}

// midnight is the start of the day y-m-d in loc. Where a zone skips
// midnight (a daylight saving change at 00:00, as São Paulo had), the day
// starts when the clocks jump to 01:00; time.Date may give the skipped
// midnight as 23:00 the evening before, which is corrected here.
func midnight(y int, m time.Month, d int, loc *time.Location) time.Time {
	t := time.Date(y, m, d, 0, 0, 0, 0, loc)
	if t.Hour() >= 12 {
		t = time.Date(y, m, d, 1, 0, 0, 0, loc)
	}
	return t
}
