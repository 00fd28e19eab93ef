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
