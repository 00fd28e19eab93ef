package decide

import (
	"log/slog"

	"github.com/sluicehq/sluice"
)

// A soft limit warns before its limit refuses: Check.Soft is the share of
// the limit's capacity, in thousandths, past which an admitted request is
// told so (PastSoft, a response header) and the key's passing it is
// counted (Config.OnSoft) and logged once, when a charge takes the key's
// usage from below the share to it or above (a check, or a settle).

// softUsed reports whether the decision d of check c leaves the key at or
// past c's soft share, and whether it was below it before cost was
// charged.
func softUsed(c *Check, d sluice.Decision, cost int64) (past, crossed bool) {
	if c.Soft <= 0 || d.Limit <= 0 {
		return false, false
	}
	used := d.Limit - max(d.Remaining, 0)
	at := (d.Limit*c.Soft + 999) / 1000 // the share, rounded up
	past = used >= at
	return past, past && used-cost < at
}

// PastSoft appends to dst the names of the enforced checks of r, an
// admitted request, that left their key at or past their soft share
// (Check.Soft).
func PastSoft(r *Result, dst []string) []string {
	if r.Outcome != Admitted && r.Outcome != Delayed {
		return dst
	}
	for i := range r.Enforced {
		if past, _ := softUsed(&r.Enforced[i], r.Each[i], r.Enforced[i].Cost); past && r.Each[i].Allowed {
			dst = append(dst, r.Enforced[i].Name)
		}
	}
	return dst
}

// softLimits counts and logs the keys that pass a soft share.
type softLimits struct {
	on     func(*Check) // Config.OnSoft
	logger *slog.Logger
	msg    string
	show   func(key string) string
}

// request counts and logs the keys an admitted request took past a soft
// share.
func (s *softLimits) request(res *Result) {
	if res.Outcome != Admitted && res.Outcome != Delayed {
		return
	}
	for i := range res.Enforced {
		c := &res.Enforced[i]
		if _, crossed := softUsed(c, res.Each[i], c.Cost); crossed && res.Each[i].Allowed {
			s.passed(c, res.Each[i])
		}
	}
}

// settled counts and logs a key a settle of delta took past a soft share;
// d is the key's state after it.
func (s *softLimits) settled(c *Check, d sluice.Decision, delta int64) {
	if delta <= 0 {
		return
	}
	if _, crossed := softUsed(c, d, delta); crossed {
		s.passed(c, d)
	}
}

func (s *softLimits) passed(c *Check, d sluice.Decision) {
	if s.on != nil {
		s.on(c)
	}
	s.logger.Info(s.msg, "limit", c.Name, "key", s.show(c.Key), "used", d.Limit-max(d.Remaining, 0), "of", d.Limit, "soft", float64(c.Soft)/1000)
}
