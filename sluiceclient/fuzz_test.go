package sluiceclient

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// Whatever a server sends in Retry-After and RateLimit, reading it never
// panics and gives a wait between zero and maxHeaderSeconds.
func FuzzServerFields(f *testing.F) {
	for _, seed := range [][2]string{
		{"2", `"name";r=0;t=5`},
		{"Wed, 02 Dec 2026 05:00:07 GMT", `"global";r=120;t=1, "per-ip";r=3;t=60`},
		{"Fri, 31 Dec 9999 23:59:59 GMT", `"x, y";r=1;t=4`},
		{"-1", `"q\";r=0;t=99";r=2;t=4`},
		{"99999999999999999999", `"a";r=1, "b";t=99999999999999999999`},
		{"", `,,;;==""\`},
	} {
		f.Add(seed[0], seed[1])
	}
	now := time.Date(2026, 12, 2, 5, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, retry, ratelimit string) {
		h := http.Header{"Retry-After": {retry}, "Ratelimit": {ratelimit}}
		if d, _ := retryAfter(h, now); d < 0 || d > maxHeaderSeconds*time.Second {
			t.Fatalf("Retry-After %q: %s", retry, d)
		}
		if q, _ := rateLimit(h); q.remaining < 0 || q.reset < 0 || q.reset > maxHeaderSeconds*time.Second {
			t.Fatalf("RateLimit %q: %+v", ratelimit, q)
		}
		if d := serverWait(h, now); d < 0 || d > maxHeaderSeconds*time.Second {
			t.Fatalf("serverWait %q %q: %s", retry, ratelimit, d)
		}
		if joined := strings.Join(splitList(ratelimit), ","); joined != ratelimit {
			t.Fatalf("splitList(%q) rejoined is %q", ratelimit, joined)
		}
	})
}
