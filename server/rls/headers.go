package rls

import (
	"strconv"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/sluicehq/sluice/decide"
)

// quotaAndWindow returns the quota and window a limit advertises in
// RateLimit-Policy, as sluice's httplimit does: n per window for the window
// algorithms, the burst and the time the rate takes to refill it for the
// buckets.
func quotaAndWindow(r *rule) (q, w int64) {
	l := r.limit
	if r.rpu == 0 {
		return 0, seconds(r.period)
	}
	return decide.QuotaAndWindow(l)
}

// headers builds RateLimit-Policy and RateLimit
// (draft-ietf-httpapi-ratelimit-headers-11) for the enforced limits of a
// request, and Retry-After when it is over its limit, in hm. Each list
// member is named by the rate_limit's name, or else its descriptor path. It
// is on every answer's path: the fields are built in stack buffers, the
// policy of a lone configured limit is the one its rule prebuilt, and the
// RateLimit value is the one allocation besides hm.
func headers(items []item, hm *headerMem) []*corepb.HeaderValue {
	var pbuf, sbuf [192]byte
	policy, state := pbuf[:0], sbuf[:0]
	lone := "" // the policy so far, when it is one rule's prebuilt member
	var retry time.Duration
	over := false
	n := 0
	var seenBuf [4]string
	seen := seenBuf[:0]
	for i := range items {
		it := &items[i]
		switch it.result {
		case ResultOK, ResultNotCharged, ResultOverLimit:
		default:
			continue
		}
		name := memberName(it.rule, seen)
		seen = append(seen, name)
		switch {
		case n == 0 && it.rule.policy != "":
			lone = it.rule.policy
		default:
			policy = append(policy, lone...)
			lone = ""
			q, w := quotaAndWindow(it.rule)
			policy = decide.AppendItem(policy, n, name, "q", q, "w", w)
		}
		remaining := int64(0)
		if it.result != ResultOverLimit {
			remaining = max(0, it.d.Remaining)
		}
		state = decide.AppendItem(state, n, name, "r", remaining, "t", seconds(it.reset))
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
	if lone == "" {
		lone = string(policy)
	}
	vals := &hm.vals
	vals[0].Key, vals[0].Value = "RateLimit-Policy", lone
	vals[1].Key, vals[1].Value = "RateLimit", string(state)
	hm.ptrs = [3]*corepb.HeaderValue{&vals[0], &vals[1], &vals[2]}
	if !over {
		return hm.ptrs[:2]
	}
	vals[2].Key, vals[2].Value = "Retry-After", strconv.FormatInt(max(1, seconds(retry)), 10)
	return hm.ptrs[:]
}

// headerMem is the RateLimit header fields of an answer, allocated with it
// (see answerMem).
type headerMem struct {
	vals [3]corepb.HeaderValue
	ptrs [3]*corepb.HeaderValue
}

// prebuild sets the parts of r's RateLimit header fields that do not change
// from answer to answer: its member name, and its RateLimit-Policy member
// when it is the first of the list.
func (r *rule) prebuild() {
	r.member = memberName(r, nil)
	if r.unlimited {
		return
	}
	q, w := quotaAndWindow(r)
	r.policy = string(decide.AppendItem(nil, 0, r.member, "q", q, "w", w))
}

// memberName is the list member name of r's limit: its name, else its
// descriptor path, made printable, with "#2", "#3"... when one of seen
// has it already.
func memberName(r *rule, seen []string) string {
	name := r.member
	if name == "" {
		name = r.name
		if name == "" {
			name = r.path
		}
		name = headerName(name)
	}
	base, k := name, 2
	for contains(seen, name) {
		name = base + "#" + strconv.Itoa(k)
		k++
	}
	return name
}

// headerName keeps a list member name to printable ASCII, which a
// Structured Field string can hold; other bytes become '_'.
func headerName(s string) string {
	printable := true
	for i := 0; i < len(s) && printable; i++ {
		printable = s[i] >= 0x20 && s[i] <= 0x7e
	}
	if printable {
		return s
	}
	b := []byte(s)
	for i, c := range b {
		if c < 0x20 || c > 0x7e {
			b[i] = '_'
		}
	}
	return string(b)
}
