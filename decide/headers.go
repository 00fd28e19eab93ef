package decide

import (
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
)

// QuotaAndWindow returns the quota and window (whole seconds, rounded up;
// 0 for none) a limit advertises in RateLimit-Policy: sluice.Limit.Quota.
func QuotaAndWindow(l sluice.Limit) (q int64, w int64) {
	q, d := l.Quota()
	return q, Seconds(d)
}

// Seconds rounds d up to whole seconds: a client told to wait less than it
// must would come back too early.
func Seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// AppendItem appends member i of a Structured Field list: a quoted name
// followed by one or two integer parameters (the second is left out when
// its name is empty).
func AppendItem(b []byte, i int, name, k1 string, v1 int64, k2 string, v2 int64) []byte {
	if i > 0 {
		b = append(b, ", "...)
	}
	b = append(b, '"')
	for j := 0; j < len(name); j++ { // names are printable ASCII
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

// Fields are the RateLimit header fields of a decided request, as
// draft-ietf-httpapi-ratelimit-headers-11 spells them: RateLimit-Policy
// describes each enforced limit (its quota q and window w in seconds),
// RateLimit reports what remains of each (r) and when it is restored (t,
// seconds), both as Structured Field lists keyed by the limit's name; and
// Retry-After in whole seconds when the
// request was refused ("" otherwise).
type Fields struct {
	Policy, RateLimit, RetryAfter string
}

// Fields returns the header fields of r's enforced checks; none when no
// check decided (all of them empty).
func (r *Result) Fields() Fields {
	if r.Decided < 0 || len(r.Each) != len(r.Enforced) {
		return Fields{}
	}
	var buf [256]byte
	b := buf[:0]
	for i, c := range r.Enforced {
		q, w := QuotaAndWindow(c.Limit)
		if w > 0 {
			b = AppendItem(b, i, c.Name, "q", q, "w", w)
		} else {
			b = AppendItem(b, i, c.Name, "q", q, "", 0)
		}
	}
	split := len(b)
	for i, c := range r.Enforced {
		b = AppendItem(b, i, c.Name, "r", max(0, r.Each[i].Remaining), "t", Seconds(r.Each[i].ResetAfter))
	}
	f := Fields{Policy: string(b[:split]), RateLimit: string(b[split:])}
	switch d := r.Decision; {
	case !d.Allowed:
		f.RetryAfter = strconv.FormatInt(max(1, Seconds(d.RetryAfter)), 10)
	case r.Outcome == Refused: // admitted with a delay it could not be given
		f.RetryAfter = strconv.FormatInt(max(1, Seconds(d.Delay)), 10)
	}
	return f
}

// RetryAfter is the time a refused request should wait before it retries:
// the binding decision's RetryAfter, or, for a request refused because its
// shaping delay could not be given, that delay. Zero for other outcomes.
func (r *Result) RetryAfter() time.Duration {
	if r.Outcome != Refused {
		return 0
	}
	if r.Decision.Allowed {
		return r.Decision.Delay
	}
	return r.Decision.RetryAfter
}
