package policy

import (
	"fmt"
	"math/big"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/internal/algo"
	"go.yaml.in/yaml/v3"
)

// defaultMaxDelay is the front-end's bound on a shaping delay when
// Options.MaxDelay is not set: httplimit.Config.MaxDelay's default.
const defaultMaxDelay = time.Second

// delayBound is the longest shaping delay a rule's requests may wait: its
// action's max_delay under refuse: delay, otherwise the front-end's.
type delayBound struct {
	d      time.Duration
	action bool // d is the rule's action.max_delay
}

func (l *loader) delayBound(a decide.Action) delayBound {
	if a.Wait {
		return delayBound{d: a.MaxDelay, action: true}
	}
	d := l.opts.MaxDelay
	if d <= 0 {
		d = defaultMaxDelay
	}
	return delayBound{d: d}
}

// servable reports, at n, a leaky_bucket limit whose last queue place waits
// longer than b: a request given that place would be refused for its delay
// every time, so the place is never served. field names what to fix: queue,
// or overrides.scale for an override's scaled limit.
func (l *loader) servable(n *yaml.Node, w where, field string, lim sluice.Limit, b delayBound) {
	if !algo.Shapes(lim.Algorithm) || b.d <= 0 || lim.Validate() != nil {
		return
	}
	p, err := algo.Compile(lim)
	if err != nil {
		return
	}
	longest, bound := p.LongestDelay(), algo.MaxDelay(b.d)
	if longest <= bound {
		return
	}
	what, raise := "the front-end's max_delay", "max_delay"
	if b.action {
		what, raise = "the rule's action.max_delay", "action.max_delay"
	}
	shape := fmt.Sprintf("queue %d", lim.Burst)
	if lim.NoDelay > 0 {
		shape += fmt.Sprintf(", nodelay %d", lim.NoDelay)
	}
	maxDelay := sluice.FormatDuration(time.Duration(ceilDiv(big.NewInt(longest), big.NewInt(1000)).Int64()) * time.Millisecond)
	fix := fmt.Sprintf("lower queue to %d, %sor raise %s to %s", maxQueue(lim, bound), fasterRate(lim, bound), raise, maxDelay)
	if field == "overrides.scale" { // the scaled limit is not written anywhere to change
		fix = fmt.Sprintf("change the scale, lower the queue, raise nodelay, or raise %s to %s", raise, maxDelay)
	}
	if !b.action {
		fix += " (sluice serve: max_delay in its config file, --max-delay or SLUICE_MAX_DELAY; sluice check --max-delay; httplimit.Config.MaxDelay)"
	}
	l.Fail(n, w, field, "the last queued request would wait %s (%s at %s), longer than %s of %s, so that place could never be served: %s",
		sluice.FormatDuration(time.Duration(longest)*time.Microsecond), shape, sluice.Rate{Count: lim.Count, Period: lim.Period}, what, sluice.FormatDuration(b.d), fix)
}

// maxQueue returns the longest queue of lim whose last place waits at most
// bound µs: nodelay + ⌊bound·Count/Period⌋.
func maxQueue(lim sluice.Limit, bound int64) int64 {
	q := new(big.Int).Mul(big.NewInt(bound), big.NewInt(lim.Count))
	q.Quo(q, big.NewInt(int64(lim.Period/time.Microsecond)))
	return lim.NoDelay + q.Int64()
}

// fasterRate suggests the slowest rate, per the same period, at which the
// last place of lim's queue waits at most bound µs, followed by ", ", or
// nothing if bound is below a µs.
func fasterRate(lim sluice.Limit, bound int64) string {
	if bound <= 0 {
		return ""
	}
	n := new(big.Int).Mul(big.NewInt(lim.Burst-lim.NoDelay), big.NewInt(int64(lim.Period/time.Microsecond)))
	n = ceilDiv(n, big.NewInt(bound))
	if !n.IsInt64() {
		return ""
	}
	return fmt.Sprintf("raise rate to %s, ", sluice.Rate{Count: n.Int64(), Period: lim.Period})
}

func ceilDiv(a, b *big.Int) *big.Int {
	q := new(big.Int).Add(a, new(big.Int).Sub(b, big.NewInt(1)))
	return q.Quo(q, b)
}
