package sluiceclient

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxHeaderSeconds bounds the seconds read from a header (68 years), so
// that a hostile value cannot overflow a time.Duration.
const maxHeaderSeconds = 1 << 31

// retryAfter reads the Retry-After field of h (RFC 9110 §10.2.3): delay
// seconds or an HTTP-date, as of now. It reports false when the field is
// absent or malformed; a date in the past is a zero wait.
func retryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s < 0 {
			return 0, false
		}
		return time.Duration(min(s, maxHeaderSeconds)) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return min(max(0, t.Sub(now)), maxHeaderSeconds*time.Second), true
}

// quota is one member of a RateLimit field: what remains of a limit (r) and
// the seconds until it is restored (t).
type quota struct {
	remaining int64
	reset     time.Duration
}

// rateLimit reads the RateLimit field of h
// (draft-ietf-httpapi-ratelimit-headers-11), a Structured Field list such as
// `"per-ip";r=0;t=5, "global";r=120;t=1`, and returns the binding member:
// the exhausted one restored last if any is exhausted, else the one that
// allows the slowest pace (reset/remaining). Members without r or t, and
// malformed ones, are skipped; ok is false when none is usable.
func rateLimit(h http.Header) (q quota, ok bool) {
	for _, line := range h.Values("RateLimit") {
		for _, member := range splitList(line) {
			m, good := parseMember(member)
			if !good {
				continue
			}
			if !ok || binds(m, q) {
				q, ok = m, true
			}
		}
	}
	return q, ok
}

// binds reports whether a constrains the client more than b.
func binds(a, b quota) bool {
	switch {
	case a.remaining == 0 && b.remaining == 0:
		return a.reset > b.reset
	case a.remaining == 0 || b.remaining == 0:
		return a.remaining == 0
	}
	// a.reset/a.remaining > b.reset/b.remaining, without division.
	return float64(a.reset)*float64(b.remaining) > float64(b.reset)*float64(a.remaining)
}

// splitList splits a Structured Field list on the commas outside quoted
// strings.
func splitList(s string) []string {
	var out []string
	quoted, escaped, start := false, false, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case escaped:
			escaped = false
		case quoted && c == '\\':
			escaped = true
		case c == '"':
			quoted = !quoted
		case c == ',' && !quoted:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

// parseMember reads the r and t parameters of one list member; the item
// (the limit's name) is not needed. A parameter is `;key=integer`.
func parseMember(m string) (quota, bool) {
	params := m
	if i := strings.LastIndexByte(m, '"'); i >= 0 {
		params = m[i+1:]
	}
	var q quota
	var haveR, haveT bool
	for _, p := range strings.Split(params, ";")[1:] {
		k, v, found := strings.Cut(strings.TrimSpace(p), "=")
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if !found || err != nil || n < 0 {
			continue
		}
		switch k {
		case "r":
			q.remaining, haveR = n, true
		case "t":
			q.reset, haveT = time.Duration(min(n, maxHeaderSeconds))*time.Second, true
		}
	}
	return q, haveR && haveT
}
