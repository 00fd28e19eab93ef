package rls

import (
	"math"

	"github.com/sluicehq/sluice/decide"
)

// runtime applies the runtime overrides (Options.Runtime) to the matched
// items: the override of a limit named by its rate_limit's name, for the
// value of the descriptor's last entry (bounded as the key bounds it:
// decide.KeyValue), through the one step every front-end takes
// (decide.ApplyRuntime). An item under one gets a copy of its rule with
// the limit the override makes, or the result Unlimited. A descriptor's
// own limit (limit_override), and a last entry counted under a
// share_threshold pattern (one counter for many values), are left alone.
func (s *Service) runtime(r *request) {
	rt := s.opts.Runtime
	if rt == nil {
		return
	}
	for i := range r.items {
		it := &r.items[i]
		ru := it.rule
		entries := r.req.Descriptors[i].Entries
		if it.result != 0 || ru == nil || ru.name == "" || ru.path == overridePath || ru.rpu == 0 || len(entries) == 0 ||
			it.shared != nil && it.shared[len(entries)-1] != "" || !rt.Names(ru.name) {
			continue
		}
		c := decide.Check{Limit: ru.limit}
		applied, unlimited := decide.ApplyRuntime(rt, &c, ru.name, decide.KeyValue(entries[len(entries)-1].Value), ru.limit)
		switch {
		case unlimited:
			it.result = ResultUnlimited
		case applied:
			it.rule = ru.under(c)
		}
	}
}

// under returns a copy of r whose limit is c's (a runtime override's), and
// whose requests_per_unit, reported to Envoy, scales with its capacity.
func (r *rule) under(c decide.Check) *rule {
	cp := *r
	cp.limit = c.Limit
	rpu := math.Round(float64(r.rpu) * float64(c.Limit.Capacity()) / float64(r.limit.Capacity()))
	cp.rpu = uint32(min(max(rpu, 1), math.MaxUint32))
	cp.peer = peerLimit(cp.limit, cp.rpu, cp.period)
	cp.policy = "" // of the configured limit: headers builds this one's
	return &cp
}
