package rls

import (
	"strconv"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/sluicehq/sluice"
)

// quotaAndWindow returns the quota and window a limit advertises in
// RateLimit-Policy, as sluice's httplimit does: n per window for the window
// algorithms, the burst and the time the rate takes to refill it for the
// buckets.
func quotaAndWindow(r *rule) (q, w int64) {
	l := r.limit
	switch {
	case r.rpu == 0:
		return 0, seconds(r.period)
	case l.Algorithm == sluice.AlgorithmTokenBucket || l.Algorithm == sluice.AlgorithmGCRA:
		return l.Burst, seconds(time.Duration(l.Burst) * l.Period / time.Duration(l.Count))
	case l.Algorithm == sluice.AlgorithmLeakyBucket:
		return l.Burst + 1, seconds(time.Duration(l.Burst+1) * l.Period / time.Duration(l.Count))
	}
	return l.Count, seconds(l.Period)
}

// headers builds RateLimit-Policy and RateLimit
// (draft-ietf-httpapi-ratelimit-headers-11) for the enforced limits of a
// request, and Retry-After when it is over its limit. Each list member is
// named by the rate_limit's name, or else its descriptor path.
func headers(items []item) []*corepb.HeaderValue {
	var policy, state []byte
	var retry time.Duration
	over := false
	n := 0
	var seen []string
	for i := range items {
		it := &items[i]
		switch it.result {
		case ResultOK, ResultNotCharged, ResultOverLimit:
		default:
			continue
		}
		name := it.rule.name
		if name == "" {
			name = it.rule.path
		}
		name = headerName(name)
		base, k := name, 2
		for contains(seen, name) {
			name = base + "#" + strconv.Itoa(k)
			k++
		}
		seen = append(seen, name)
		q, w := quotaAndWindow(it.rule)
		policy = appendItem(policy, n, name, "q", q, "w", w)
		remaining := int64(0)
		if it.result != ResultOverLimit {
			remaining = max(0, it.d.Remaining)
		}
		state = appendItem(state, n, name, "r", remaining, "t", seconds(it.reset))
		n++
		if it.result == ResultOverLimit {
			over = true
			wait := it.d.RetryAfter
			if it.over {
				wait = it.reset
			}
			retry = max(retry, wait)
		}
	}
	if n == 0 {
		return nil
	}
	out := []*corepb.HeaderValue{
		{Key: "RateLimit-Policy", Value: string(policy)},
		{Key: "RateLimit", Value: string(state)},
	}
	if over {
		out = append(out, &corepb.HeaderValue{Key: "Retry-After", Value: strconv.FormatInt(max(1, seconds(retry)), 10)})
	}
	return out
}

// headerName keeps a list member name to printable ASCII, which a
// Structured Field string can hold; other bytes become '_'.
func headerName(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c < 0x20 || c > 0x7e {
			b[i] = '_'
		}
	}
	return string(b)
}

// appendItem appends member i of a Structured Field list: a quoted name
// followed by two integer parameters.
func appendItem(b []byte, i int, name, k1 string, v1 int64, k2 string, v2 int64) []byte {
	if i > 0 {
		b = append(b, ", "...)
	}
	b = append(b, '"')
	for j := 0; j < len(name); j++ {
		if name[j] == '"' || name[j] == '\\' {
			b = append(b, '\\')
		}
		b = append(b, name[j])
	}
	b = append(b, '"', ';')
	b = append(b, k1...)
	b = append(b, '=')
	b = strconv.AppendInt(b, v1, 10)
	b = append(b, ';')
	b = append(b, k2...)
	b = append(b, '=')
	return strconv.AppendInt(b, v2, 10)
}
