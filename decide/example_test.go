package decide_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/memstore"
)

// A front-end plans the checks of a request, a Decider runs them, and the
// front-end answers from the Result: here three calls of one user under a
// limit of two a minute, with the RateLimit header fields an HTTP front-end
// would send.
func ExampleDecider_Run() {
	store, _ := memstore.New(memstore.Config{})
	defer store.Close()
	dc, _ := decide.New(sluice.New(store), decide.Config{})
	key := string(decide.AppendKey(nil, "per-user", "user-42"))
	checks := []decide.Check{{Name: "per-user", Key: key, Limit: sluice.SlidingLog(2, time.Minute), Cost: 1}}
	var res decide.Result
	for range 3 {
		dc.Run(context.Background(), checks, &res)
		f := res.Fields()
		fmt.Printf("%s %s %s retry-after=%q\n", res.Outcome, f.Policy, f.RateLimit, f.RetryAfter)
		res.Release()
	}
	// Output:
	// admitted "per-user";q=2;w=60 "per-user";r=1;t=60 retry-after=""
	// admitted "per-user";q=2;w=60 "per-user";r=0;t=60 retry-after=""
	// refused "per-user";q=2;w=60 "per-user";r=0;t=60 retry-after="60"
}

// KeyValue bounds a value taken from a request before it becomes part of a
// key: short values are kept, long ones (and look-alikes of a digest) become
// a fixed-size SHA-256 digest.
func ExampleKeyValue() {
	fmt.Println(decide.KeyValue("ann"))
	fmt.Println(decide.KeyValue(strings.Repeat("a", 1000)))
	// Output:
	// ann
	// sha256:41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3
}

// AppendKey builds a store key from names and request values, each bounded
// and length-prefixed.
func ExampleAppendKey() {
	fmt.Println(string(decide.AppendKey(nil, "api", "per-ip", "203.0.113.7")))
	// Output:
	// 3:api6:per-ip11:203.0.113.7
}

// A check whose cost is known only after the work reserves an estimate
// (Check.Cost) and names where the response reports the actual cost
// (Check.Late); once the response is complete, Result.Settle charges the
// difference: here a query reserves 10 rows of a user's 100 a minute and
// returns 42, then one reserves 10 and returns 3.
func ExampleResult_Settle() {
	now := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	store, _ := memstore.New(memstore.Config{Now: func() time.Time { return now }})
	defer store.Close()
	dc, _ := decide.New(sluice.New(store), decide.Config{})
	rows := sluice.FixedWindow(100, time.Minute)
	key := string(decide.AppendKey(nil, "rows", "user-42"))
	checks := []decide.Check{{Name: "rows", Key: key, Limit: rows, Cost: 10,
		Late: &decide.LateCost{Header: "X-Rows", Max: 100}}}
	var res decide.Result
	for _, returned := range []string{"42", "3"} {
		dc.Run(context.Background(), checks, &res)
		fmt.Printf("%s, %d left with 10 reserved; ", res.Outcome, res.Decision.Remaining)
		response := map[string][]string{"X-Rows": {returned}}
		s := res.Settle(context.Background(), func(name string) []string { return response[name] }, nil)
		fmt.Printf("settled %d rows\n", s[0].Actual)
	}
	d, _ := sluice.New(store).AllowN(context.Background(), key, rows, 0)
	fmt.Println(d.Remaining, "left")
	// Output:
	// admitted, 90 left with 10 reserved; settled 42 rows
	// admitted, 48 left with 10 reserved; settled 3 rows
	// 55 left
}

// Five requests under a limit of five: the fourth and fifth leave 80% or
// more of it used, near the limit.
func ExampleNearLimit() {
	store, _ := memstore.New(memstore.Config{})
	defer store.Close()
	dc, _ := decide.New(sluice.New(store), decide.Config{})
	checks := []decide.Check{{Name: "per-user", Key: string(decide.AppendKey(nil, "per-user", "alice")),
		Limit: sluice.FixedWindow(5, time.Minute), Cost: 1}}
	var res decide.Result
	for i := 1; i <= 5; i++ {
		dc.Run(context.Background(), checks, &res)
		fmt.Println(i, res.Observed[0].Outcome, decide.NearLimit(res.Observed[0]))
	}
	// Output:
	// 1 admitted false
	// 2 admitted false
	// 3 admitted false
	// 4 admitted true
	// 5 admitted true
}
