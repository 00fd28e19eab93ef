package rls_test

import (
	"testing"

	"github.com/sluicehq/sluice/server/rls"
)

// TestEnvoyReservationRefusedStaysCharged: why Envoy reserves LLM tokens
// with hits_addend 0 (its token pattern) and not with a call's maximum.
// A reservation at the start (hits_addend 300) settled at the end (the
// 300 given back with is_negative_hits, the usage charged, in one
// request) charges admitted calls exactly what they used; but the RLS
// counts a refused descriptor's hits, so that the usage Envoy sends when
// a stream ends counts whatever the answer, and it cannot tell that
// charge from a reservation refused at the start: a refused call's
// reservation stays charged (docs/llm.md).
func TestEnvoyReservationRefusedStaysCharged(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		h := start(t, b, tokenBudget, rls.Options{}) // 1,000 an hour, all-or-nothing
		steps := []struct {
			reserve, give, use uint64
			want               string
		}{
			{reserve: 300, want: "OK [OK 700/1000h 59m45s]"},
			{reserve: 300, want: "OK [OK 400/1000h 59m45s]"},
			{reserve: 300, want: "OK [OK 100/1000h 59m45s]"},
			{reserve: 300, want: "OVER_LIMIT [OVER_LIMIT 0/1000h 59m45s]"}, // refused, and charged: 1,200
			{give: 300, use: 250, want: "OVER_LIMIT [OK 100/1000h 59m45s, OVER_LIMIT 0/1000h 59m45s]"},
			{give: 300, use: 100, want: "OK [OK 150/1000h 59m45s, OK 50/1000h 59m45s]"}, // 950: 250 and 100 used, 300 reserved by the third call, and the refused call's 300
		}
		for i, s := range steps {
			var got string
			if s.reserve != 0 {
				got = brief(h.ask(t, "ai", 0, hitsDesc(s.reserve, "user=u1")))
			} else {
				back := hitsDesc(s.give, "user=u1")
				back.IsNegativeHits = true
				got = brief(h.ask(t, "ai", 0, back, hitsDesc(s.use, "user=u1")))
			}
			if got != s.want {
				t.Fatalf("step %d: %s, want %s", i, got, s.want)
			}
		}
	})
}
