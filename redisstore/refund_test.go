package redisstore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
)

// TestRefundAfterAnotherCharge drives refund.lua's other path: a charge is
// refunded after another request has charged the same key, so the state
// cannot be restored and the refund must subtract its charge. (A check
// spanning slots reaches it when a request comes between its charge and its
// refund, which the sequential conformance suite never does.) Afterwards
// the key must stand as if only the other request had been charged:
// compared, with a peek, against memstore charged once.
func TestRefundAfterAnotherCharge(t *testing.T) {
	ctx := context.Background()
	at := time.UnixMicro(1_700_000_040_123_456)
	now := func() time.Time { return at }
	c := redistest.Standalone(t)
	s, err := New(c, Config{Prefix: redistest.Prefix(t), Now: now, NearCache: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	limits := []sluice.Limit{
		sluice.FixedWindow(10, time.Minute),
		sluice.SlidingWindow(10, time.Minute),
		sluice.TokenBucket(sluice.PerSecond(1), 10),
		sluice.GCRA(sluice.PerSecond(1), 10),
		sluice.LeakyBucket(sluice.PerSecond(1), 9),
		sluice.SlidingLog(10, time.Minute),
		sluice.Concurrency(10, time.Minute),
	}
	take := func(q request, undo string) (sluice.Decision, string) {
		t.Helper()
		var u []string
		if undo != "" {
			u = []string{undo}
		}
		reply, err := s.run(ctx, s.call(takeFor([]request{q}), []request{q}, u))
		if err != nil {
			t.Fatal(err)
		}
		var d [1]sluice.Decision
		tokens, err := decode(reply, d[:])
		if err != nil {
			t.Fatal(err)
		}
		if tokens == nil {
			return d[0], ""
		}
		return d[0], tokens[0]
	}
	for _, l := range limits {
		key := "refund:" + l.String()
		mk := func(cost int64) request {
			var q request
			err := s.prepare(sluice.Request{Key: key, Limit: l, Cost: cost}, &q)
			if err != nil {
				t.Fatal(err)
			}
			return q
		}
		first := mk(2)
		d1, token := take(first, "1")
		if !d1.Allowed || token == "" {
			t.Fatalf("%s: first charge %+v, token %q", l, d1, token)
		}
		if d2, _ := take(mk(1), ""); !d2.Allowed {
			t.Fatalf("%s: second charge refused: %+v", l, d2)
		}
		first.lease = strconv.FormatUint(d1.Lease, 10)
		if _, err := s.run(ctx, s.call(scripts().refund, []request{first}, []string{token})); err != nil {
			t.Fatalf("%s: refund: %v", l, err)
		}
		got, _ := take(mk(0), "")

		mem, err := memstore.New(memstore.Config{Now: now, SweepInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := mem.Take(ctx, sluice.Request{Key: key, Limit: l, Cost: 1}); err != nil {
			t.Fatal(err)
		}
		want, err := mem.Take(ctx, sluice.Request{Key: key, Limit: l, Cost: 0})
		mem.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got.Remaining != want.Remaining || got.Allowed != want.Allowed || got.ResetAfter != want.ResetAfter {
			t.Errorf("%s: after charge 2, charge 1, refund of the 2: %+v; charged 1 alone: %+v", l, got, want)
		}
	}
}
