package policy

import (
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/yamlload"
)

// countWhen reads a limit's count_when: {status: [401, 403, "500-599"]}:
// every request is checked against the limit, but only those whose
// response has one of the statuses stay charged (decide.LateCost.When).
// It needs the limit's cost first (a cost the response reports gets When
// added).
func (l *loader) countWhen(v *yaml.Node, w where, lim *Limit) {
	f := l.Fields(v, w, "count_when", "status")
	n := f["status"]
	if n == nil {
		l.Fail(v, w, "count_when", "missing status: a list of HTTP status codes or ranges, such as [401, 403, \"500-599\"]")
		return
	}
	if algo.Leases(lim.Limit.Algorithm) {
		l.Fail(v, w, "count_when", "%s counts requests in flight, not what happened to them", lim.Limit.Algorithm)
		return
	}
	set := l.statusSet(n, w)
	if len(set) == 0 {
		return
	}
	late := decide.LateCost{When: &set}
	if lim.late != nil {
		late = *lim.late
		late.When = &set
	}
	lim.late = &late
}

// statusSet reads a list of HTTP status codes (100 to 599) and ranges
// ("500-599").
func (l *loader) statusSet(n *yaml.Node, w where) decide.StatusSet {
	const field = "count_when.status"
	items := l.Strings(n, w, field)
	if len(items) == 0 {
		l.Fail(n, w, field, "want a list of at least one status code or range")
		return nil
	}
	var set decide.StatusSet
	for _, s := range items {
		from, to, isRange := strings.Cut(strings.TrimSpace(s), "-")
		if !isRange {
			to = from
		}
		a, errA := strconv.Atoi(strings.TrimSpace(from))
		b, errB := strconv.Atoi(strings.TrimSpace(to))
		if errA != nil || errB != nil || a < 100 || b > 599 || a > b {
			l.Fail(yamlload.Resolve(n), w, field, "%q: want a status code from 100 to 599, or a range such as \"500-599\"", s)
			return nil
		}
		set = append(set, decide.StatusRange{From: a, To: b})
	}
	return set
}

// CountWhen is the set of statuses whose responses a limit counts
// (count_when), nil when it counts every request.
func (l *Limit) CountWhen() *decide.StatusSet {
	if l.late == nil {
		return nil
	}
	return l.late.When
}
