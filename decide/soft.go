package decide

import (
	"github.com/sluicehq/sluice"
)

// A soft limit warns before its limit refuses: Check.Soft is the share of
// the limit's capacity, in thousandths, past which an admitted request is
// told so (Result.PastSoft, a response header) and the key's passing it is
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

// PastSoft appends to dst the names of the enforced checks of an admitted
// request that left their key at or past their soft share (Check.Soft).
func (r *Result) PastSoft(dst []string) []string {
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

// soft counts and logs the keys an admitted request took past a soft share.
func (dc *Decider) soft(res *Result) {
	if res.Outcome != Admitted && res.Outcome != Delayed {
		return
	}
	for i := range res.Enforced {
		c := &res.Enforced[i]
		if _, crossed := softUsed(c, res.Each[i], c.Cost); crossed && res.Each[i].Allowed {
			dc.passedSoft(c, res.Each[i])
		}
	}
}

// softSettled counts and logs a key a settle of delta took past a soft
// share; d is the key's state after it.
func (dc *Decider) softSettled(c *Check, d sluice.Decision, delta int64) {
	if delta <= 0 {
		return
	}
	if _, crossed := softUsed(c, d, delta); crossed {
		dc.passedSoft(c, d)
	}
}

func (dc *Decider) passedSoft(c *Check, d sluice.Decision) {
	if dc.cfg.OnSoft != nil {
		dc.cfg.OnSoft(c)
	}
	dc.cfg.Logger.Info(dc.cfg.Component+": a key passed a soft limit",
		"limit", c.Name, "key", dc.refused.show(c.Key), "used", d.Limit-max(d.Remaining, 0), "of", d.Limit, "soft", float64(c.Soft)/1000)
}
