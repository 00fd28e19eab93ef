package redisstore_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"pgregory.net/rapid"
)

// calendarStarts are the moments calendar traces start near: both daylight
// saving changes in Europe/Berlin and America/New_York, month ends, the
// leap day of 2028 and a year's end.
var calendarStarts = []string{
	"2026-03-28T20:00:00Z", "2026-10-24T20:00:00Z", // Berlin
	"2026-03-07T22:00:00Z", "2026-10-31T22:00:00Z", // New York
	"2026-01-30T20:00:00Z", "2026-04-29T20:00:00Z", "2028-02-27T20:00:00Z", "2028-02-29T20:00:00Z",
	"2026-12-30T20:00:00Z",
}

// calendar traces: calendar windows of every period in three zones, steps
// up to 3 hours apart, so that a trace crosses days and the boundary it
// starts near.
var calendarTraces = traces{
	limit: func(t *rapid.T) sluice.Limit {
		unit := sluice.Calendar(rapid.IntRange(int(sluice.Day), int(sluice.Year)).Draw(t, "calendar"))
		zone := rapid.SampledFrom([]string{"Europe/Berlin", "America/New_York", ""}).Draw(t, "zone")
		return sluice.CalendarWindow(rapid.Int64Range(1, 8).Draw(t, "n"), unit, zone)
	},
	start: func(t *rapid.T) int64 {
		at, err := time.Parse(time.RFC3339, rapid.SampledFrom(calendarStarts).Draw(t, "start"))
		if err != nil {
			t.Fatal(err)
		}
		return at.UnixMicro() + rapid.Int64Range(0, 4*3600_000_000).Draw(t, "offset")
	},
	gap: func(t *rapid.T) int64 { return rapid.Int64Range(0, 3*3600_000_000).Draw(t, "gap_us") },
}

// TestConformanceCalendar: calendar windows decide identically on memstore,
// whose Go code reads the time zone, and on Redis, whose Lua is given the
// period bounds, across daylight saving changes, month ends and leap days.
func TestConformanceCalendar(t *testing.T) {
	conformanceOf(t, redistest.Standalone(t), false, calendarTraces)
}

func TestConformanceCalendarCluster(t *testing.T) {
	conformanceOf(t, redistest.Cluster(t), true, calendarTraces)
}
