package httplimit

import (
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
)

// Header fields of draft-ietf-httpapi-ratelimit-headers-11: RateLimit-Policy
// describes each limit (its quota q and window w in seconds), RateLimit
// reports what remains of each (r) and when it is restored (t, seconds),
// both as Structured Field lists keyed by the policy's name.
const (
	headerPolicy     = "RateLimit-Policy"
	headerRateLimit  = "RateLimit"
	headerRetryAfter = "Retry-After"
)

// quotaAndWindow returns the quota and window a limit advertises: for the
// window algorithms, n per window; for the buckets, the burst and the time
// the rate takes to refill it; for concurrency, n and no window.
func quotaAndWindow(l sluice.Limit) (q int64, w int64) {
	switch l.Algorithm {
	case sluice.AlgorithmTokenBucket, sluice.AlgorithmGCRA:
		return l.Burst, seconds(time.Duration(l.Burst) * l.Period / time.Duration(l.Count))
	case sluice.AlgorithmLeakyBucket:
		return l.Burst + 1, seconds(time.Duration(l.Burst+1) * l.Period / time.Duration(l.Count))
	case sluice.AlgorithmConcurrency:
		return l.Count, 0
	}
	return l.Count, seconds(l.Period)
}

// seconds rounds d up to whole seconds: a client told to wait less than it
// must would come back too early.
func seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// appendItem appends one member of a Structured Field list: a quoted name
// followed by integer parameters.
func appendItem(b []byte, name string, params ...any) []byte {
	if len(b) > 0 {
		b = append(b, ", "...)
	}
	b = append(b, '"')
	for i := 0; i < len(name); i++ { // names are printable ASCII (see checkName)
		if name[i] == '"' || name[i] == '\\' {
			b = append(b, '\\')
		}
		b = append(b, name[i])
	}
	b = append(b, '"')
	for i := 0; i+1 < len(params); i += 2 {
		b = append(b, ';')
		b = append(b, params[i].(string)...)
		b = append(b, '=')
		b = strconv.AppendInt(b, params[i+1].(int64), 10)
	}
	return b
}

// setHeaders writes RateLimit-Policy and RateLimit for the limits checked,
// and Retry-After when the request was refused.
func setHeaders(h http.Header, limits []Planned, ds []sluice.Decision, binding sluice.Decision, legacy bool) {
	var policy, state []byte
	for i, l := range limits {
		q, w := quotaAndWindow(l.Limit)
		if w > 0 {
			policy = appendItem(policy, l.Name, "q", q, "w", w)
		} else {
			policy = appendItem(policy, l.Name, "q", q)
		}
		state = appendItem(state, l.Name, "r", max(0, ds[i].Remaining), "t", seconds(ds[i].ResetAfter))
	}
	h.Set(headerPolicy, string(policy))
	h.Set(headerRateLimit, string(state))
	if !binding.Allowed {
		h.Set(headerRetryAfter, strconv.FormatInt(max(1, seconds(binding.RetryAfter)), 10))
	}
	if legacy {
		h.Set("X-RateLimit-Limit", strconv.FormatInt(binding.Limit, 10))
		h.Set("X-RateLimit-Remaining", strconv.FormatInt(max(0, binding.Remaining), 10))
		h.Set("X-RateLimit-Reset", strconv.FormatInt(seconds(binding.ResetAfter), 10))
	}
}
