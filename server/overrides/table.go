package overrides

import (
	"time"

	"github.com/sluicehq/sluice/policy"
)

// table is a snapshot of the overrides, by limit and key value. It is
// never changed once built: a change builds a new one.
type table struct {
	by      map[string]map[string]row
	entries []Entry
	n       int
	next    time.Time // the earliest expiry; zero when none expires
}

type row struct {
	o       policy.RuntimeOverride
	expires time.Time
}

// newTable builds the table of entries; bad are those that cannot be
// read (a limit that does not parse), left out.
func newTable(entries []Entry) (t *table, bad []Entry) {
	t = &table{by: map[string]map[string]row{}}
	for _, e := range entries {
		o, err := e.override()
		if err != nil {
			bad = append(bad, e)
			continue
		}
		m := t.by[e.Limit]
		if m == nil {
			m = map[string]row{}
			t.by[e.Limit] = m
		}
		m[e.Key] = row{o: o, expires: e.ExpiresAt}
		t.entries = append(t.entries, e)
		t.n++
		if !e.ExpiresAt.IsZero() && (t.next.IsZero() || e.ExpiresAt.Before(t.next)) {
			t.next = e.ExpiresAt
		}
	}
	return t, bad
}

func (t *table) names(limit string) bool { return len(t.by[limit]) > 0 }

// lookup returns the override of limit for value, unless it expired by
// now.
func (t *table) lookup(limit, value string, now time.Time) (policy.RuntimeOverride, bool) {
	r, ok := t.by[limit][value]
	if !ok || !r.expires.IsZero() && !now.Before(r.expires) {
		return policy.RuntimeOverride{}, false
	}
	return r.o, true
}
