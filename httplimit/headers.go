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

// appendItem appends member i of a Structured Field list: a quoted name
// followed by one or two integer parameters (the second is left out when
// its name is empty).
func appendItem(b []byte, i int, name, k1 string, v1 int64, k2 string, v2 int64) []byte {
	if i > 0 {
		b = append(b, ", "...)
	}
	b = append(b, '"')
	for j := 0; j < len(name); j++ { // names are printable ASCII (see checkName)
		if name[j] == '"' || name[j] == '\\' {
			b = append(b, '\\')
		}
		b = append(b, name[j])
	}
	b = append(b, '"', ';')
	b = append(b, k1...)
	b = append(b, '=')
	b = strconv.AppendInt(b, v1, 10)
	if k2 != "" {
		b = append(b, ';')
		b = append(b, k2...)
		b = append(b, '=')
		b = strconv.AppendInt(b, v2, 10)
	}
	return b
}

// setHeaders writes RateLimit-Policy and RateLimit for the limits checked,
// and Retry-After when the request was refused. buf is scratch space,
// returned grown for the next request. The header keys are set in their
// canonical form directly, skipping Header.Set's canonicalisation.
func setHeaders(h http.Header, limits []Planned, ds []sluice.Decision, binding sluice.Decision, legacy bool, buf []byte) []byte {
	b := buf[:0]
	for i, l := range limits {
		q, w := quotaAndWindow(l.Limit)
		if w > 0 {
			b = appendItem(b, i, l.Name, "q", q, "w", w)
		} else {
			b = appendItem(b, i, l.Name, "q", q, "", 0)
		}
	}
	split := len(b)
	for i, l := range limits {
		b = appendItem(b, i, l.Name, "r", max(0, ds[i].Remaining), "t", seconds(ds[i].ResetAfter))
	}
	h[canonicalPolicy] = []string{string(b[:split])}
	h[canonicalRateLimit] = []string{string(b[split:])}
	if !binding.Allowed {
		h[canonicalRetryAfter] = []string{strconv.FormatInt(max(1, seconds(binding.RetryAfter)), 10)}
	}
	if legacy {
		h.Set("X-RateLimit-Limit", strconv.FormatInt(binding.Limit, 10))
		h.Set("X-RateLimit-Remaining", strconv.FormatInt(max(0, binding.Remaining), 10))
		h.Set("X-RateLimit-Reset", strconv.FormatInt(seconds(binding.ResetAfter), 10))
	}
	return b
}

// SetHeaders writes to h the header fields the middleware sends for a
// check of limits whose decisions are ds and whose binding decision is d:
// RateLimit-Policy, RateLimit, and Retry-After when d refused. It is for
// services that decide elsewhere (sluice serve's decision API) and answer
// with the same fields.
func SetHeaders(h http.Header, limits []Planned, ds []sluice.Decision, d sluice.Decision) {
	setHeaders(h, limits, ds, d, false, nil)
}

var (
	canonicalPolicy     = http.CanonicalHeaderKey(headerPolicy)
	canonicalRateLimit  = http.CanonicalHeaderKey(headerRateLimit)
	canonicalRetryAfter = http.CanonicalHeaderKey(headerRetryAfter)
)
