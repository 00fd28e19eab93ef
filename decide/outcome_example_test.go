package decide_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/memstore"
)

// A limit that counts only failed logins (a policy's count_when: {status:
// [401]}) reserves each login's unit when it is checked and settles with
// the response's status: a 401 keeps it, anything else gives it back. Here
// two logins a minute may fail: successes never use the limit, the third
// failure is refused.
func ExampleResult_SettleResponse() {
	store, _ := memstore.New(memstore.Config{})
	defer store.Close()
	dc, _ := decide.New(sluice.New(store), decide.Config{})
	failures := &decide.LateCost{When: &decide.StatusSet{{From: 401, To: 401}}}
	checks := []decide.Check{{Name: "login-failures", Key: "198.51.100.7", Limit: sluice.FixedWindow(2, time.Minute), Cost: 1, Late: failures}}
	var res decide.Result
	for _, status := range []int{200, 200, 401, 200, 401, 401} {
		dc.Run(context.Background(), checks, &res)
		if res.Outcome == decide.Refused {
			fmt.Println("refused")
			continue
		}
		res.SettleResponse(context.Background(), decide.Response{Status: status, HasStatus: true}, nil)
		fmt.Println(status)
	}
	// Output:
	// 200
	// 200
	// 401
	// 200
	// 401
	// refused
}

// A check with a Ban plans its ban's check beside it (a policy does so for
// a limit with ban: 30s): the refusal that exhausts the limit starts the
// ban, which refuses the key with the ban's Retry-After (here 15 minutes,
// where the limit alone would refuse for a minute).
func ExampleBan() {
	store, _ := memstore.New(memstore.Config{})
	defer store.Close()
	dc, _ := decide.New(sluice.New(store), decide.Config{})
	c := decide.Check{Name: "per-ip", Key: "198.51.100.7", Limit: sluice.SlidingLog(1, time.Minute), Cost: 1,
		Ban: &decide.Ban{Key: "ban:198.51.100.7", Limit: decide.BanLimit(15 * time.Minute)}}
	checks := []decide.Check{c, decide.BanCheck(&c, "per-ip.ban")}
	var res decide.Result
	for range 3 {
		dc.Run(context.Background(), checks, &res)
		fmt.Println(res.Outcome, res.DecidedBy().Name, res.Decision.RetryAfter.Round(time.Second))
	}
	// Output:
	// admitted per-ip 0s
	// refused per-ip 15m0s
	// refused per-ip.ban 15m0s
}
