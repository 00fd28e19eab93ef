package policy

import (
	"net/http"
	"strconv"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/httpname"
)

// maxLateCost bounds the cost a response may report: costs add up in
// Redis's Lua as doubles, exact to 2^53.
const maxLateCost = 1 << 50

// lateCostFields are the fields of a cost known after the response.
var lateCostFields = []string{"reserve", "response_header", "max", "on_missing", "strip", "tokens", "answer", "default_max_tokens", "chars_per_token", "max_request_bytes", "prices", "default_price", "prices_file"}

// lateCost reads a cost known after the response (the mapping v):
//
//	cost: {reserve: 100, response_header: X-Tokens-Used, max: 50000, on_missing: reserve}
//
// The request reserves reserve when it is decided; the response's header
// or trailer settles the actual cost.
func (l *loader) lateCost(v *yaml.Node, w where, lim *Limit) {
	f := l.Fields(v, w, "cost", lateCostFields...)
	if f["tokens"] != nil || f["prices"] != nil || f["prices_file"] != nil {
		l.tokenCost(f, w, lim)
		return
	}
	for _, k := range tokenFields {
		if f[k] != nil {
			l.Fail(f[k], w, "cost."+k, "applies only with tokens or prices (a cost read from an LLM answer)")
		}
	}
	lc := &decide.LateCost{}
	capacity := max(1, lim.Limit.Capacity())
	if algo.Leases(lim.Limit.Algorithm) {
		l.Fail(v, w, "cost", "%s cannot settle a cost after the response (it counts requests in flight, not what they cost): use a number or header:NAME", lim.Limit.Algorithm)
	}
	lim.cost = 1
	if r := f["reserve"]; r != nil {
		lim.cost, _ = l.Int(r, w, "cost.reserve", 0, capacity)
	}
	if h := f["response_header"]; h == nil {
		l.Fail(v, w, "cost.response_header", "missing: the response header or trailer that reports the cost (X-Tokens-Used)")
	} else if s, ok := l.Str(h, w, "cost.response_header"); ok {
		if !httpname.Valid(s) {
			l.Fail(h, w, "cost.response_header", "%q is not a header name", s)
		}
		lc.Header = http.CanonicalHeaderKey(s)
	}
	lc.Max = capacity
	if m := f["max"]; m != nil {
		if n, ok := l.Int(m, w, "cost.max", max(1, lim.cost), mostLateCost(lim)); ok {
			lc.Max = n
		}
	}
	if m := f["on_missing"]; m != nil {
		l.lateMissing(m, w, lc)
	}
	if s := f["strip"]; s != nil {
		lc.Strip = l.Bool(s, w, "cost.strip")
	}
	lim.late = lc
}

// lateMissing reads what a late cost charges when the response reports
// none: reserve (the default), max, or a number from 0 to max.
func (l *loader) lateMissing(v *yaml.Node, w where, lc *decide.LateCost) {
	s, ok := l.Str(v, w, "cost.on_missing")
	switch {
	case !ok:
	case s == "reserve":
		lc.Missing = decide.MissingReserve
	case s == "max":
		lc.Missing = decide.MissingMax
	default:
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 || n > lc.Max {
			l.Fail(v, w, "cost.on_missing", "%q: want reserve (charge the reservation), max, or a number from 0 to max (%d)", s, lc.Max)
			return
		}
		lc.Missing, lc.MissingCost = decide.MissingFixed, n
	}
}

// mostLateCost is the largest max a late cost may have: what one settle
// can charge past the reservation (sluice.Limit.MaxAdjust, the deepest debt
// a key may owe) on top of it, and at most maxLateCost.
func mostLateCost(lim *Limit) int64 {
	if lim.Limit.Validate() != nil {
		return maxLateCost // the limit's own error is reported
	}
	return min(maxLateCost, lim.cost+lim.Limit.MaxAdjust())
}
