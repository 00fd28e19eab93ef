package decide_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/memstore"
)

// A reads check that applies only while the client's writes use more than
// 80% of their budget: the front-end plans the related limit's key for the
// request (When), and Run peeks at it. While writes are idle, the check is
// in Result.Idle, neither checked nor charged; once they pass 8 of 10, it
// is enforced.
func ExampleRelation() {
	store, _ := memstore.New(memstore.Config{})
	defer store.Close()
	limiter := sluice.New(store)
	dc, _ := decide.New(limiter, decide.Config{RelateFor: -1}) // peek every time, for the output
	writes := sluice.FixedWindow(10, time.Hour)
	writesKey := string(decide.AppendKey(nil, "writes", "203.0.113.7"))
	reads := decide.Check{
		Name: "reads", Key: string(decide.AppendKey(nil, "reads", "203.0.113.7")),
		Limit: sluice.FixedWindow(2, time.Hour), Cost: 1,
		When: &decide.Relation{Name: "writes", Key: writesKey, Limit: writes, Above: 800},
	}
	var res decide.Result
	for _, used := range []int64{0, 8, 9} {
		if used > 0 { // the client's writes, charged up to used
			limiter.Adjust(context.Background(), sluice.Request{Key: writesKey, Limit: writes, Cost: used - writesUsed(limiter, writesKey, writes)})
		}
		dc.Run(context.Background(), []decide.Check{reads}, &res)
		fmt.Printf("writes at %d of 10: %d idle, %d enforced, %q\n", used, len(res.Idle), len(res.Enforced), res.Fields().Policy)
	}
	// Output:
	// writes at 0 of 10: 1 idle, 0 enforced, ""
	// writes at 8 of 10: 1 idle, 0 enforced, ""
	// writes at 9 of 10: 0 idle, 1 enforced, "\"reads\";q=2;w=3600"
}

// writesUsed is how much of the writes limit key has used.
func writesUsed(limiter *sluice.Limiter, key string, l sluice.Limit) int64 {
	d, _ := limiter.AllowN(context.Background(), key, l, 0)
	return d.Limit - d.Remaining
}
