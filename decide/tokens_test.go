package decide_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/llmusage"
	"github.com/sluicehq/sluice/memstore"
)

// A front-end that has an LLM call's request body reserves what it asks
// for (Reserve) between planning and Run, and settles what the answer
// reported (SettleResponse, the usage read by an llmusage.Meter).
func ExampleReserve() {
	store, _ := memstore.New(memstore.Config{})
	defer store.Close()
	dc, _ := decide.New(sluice.New(store), decide.Config{})
	late := &decide.LateCost{Tokens: &decide.TokenCost{}} // total tokens
	checks := []decide.Check{{Name: "tokens", Key: string(decide.AppendKey(nil, "tokens", "acme")),
		Limit: sluice.CalendarWindow(10000, sluice.Day, "UTC"), Late: late}}
	body := `{"model":"m","max_tokens":500,"messages":[{"role":"user","content":"` + strings.Repeat("word", 100) + `"}]}`
	if err := decide.Reserve(checks, []byte(body)); err != nil {
		fmt.Println(err)
		return
	}
	var res decide.Result
	dc.Run(context.Background(), checks, &res)
	fmt.Println(res.Outcome, "reserved", checks[0].Cost)

	m := llmusage.NewMeter(nil, "application/json")
	m.Write([]byte(`{"usage":{"prompt_tokens":104,"completion_tokens":230,"total_tokens":334}}`))
	u := m.Usage()
	s := res.SettleResponse(context.Background(), decide.Response{Usage: func(*llmusage.Format) *llmusage.Usage { return &u }}, nil)
	fmt.Println("charged", s[0].Actual)
	// Output:
	// admitted reserved 600
	// charged 334
}

// A front-end that settles a check it no longer holds (the decision API,
// from a settle token) reckons the charge with Charge, as Result.Settle
// does, then charges the difference itself. Reports says whether the
// usage a client sent has what the limit counts.
func ExampleCharge() {
	prices := &llmusage.Prices{Models: map[string]llmusage.Price{"gpt-4o": {Input: 2_500_000, Output: 10_000_000}}} // micro-dollars a million tokens
	tc := &decide.TokenCost{Prices: prices}
	lim := sluice.CalendarWindow(50_000_000, sluice.Month, "UTC")
	c := decide.Check{Name: "usd", Limit: lim, Late: &decide.LateCost{Tokens: tc},
		LLM: &llmusage.Request{Model: "gpt-4o", MaxOutput: 500, PromptBytes: 4000}} // the model the check reserved for
	u := llmusage.Usage{Input: 1200, Output: 300, HasInput: true, HasOutput: true}
	s := decide.Charge(&c, 7500, lim, decide.Response{Usage: func(*llmusage.Format) *llmusage.Usage { return &u }})
	fmt.Println(tc.Reports(u), s.Reserved, s.Actual)
	fmt.Println(tc.Reports(llmusage.Usage{Input: 1200, HasInput: true})) // no output: nothing to price it with
	// Output:
	// true 7500 6000
	// false
}

func TestTokenReservation(t *testing.T) {
	lim := sluice.FixedWindow(10000, time.Hour)
	prices := &llmusage.Prices{Models: map[string]llmusage.Price{"m": {Input: 1_000_000, Output: 4_000_000}}}
	cases := []struct {
		name string
		tc   decide.TokenCost
		body string
		want int64
	}{
		{"total", decide.TokenCost{}, `{"max_tokens":50,"messages":[{"content":"abcdefgh"}]}`, 52},
		{"input", decide.TokenCost{Measure: llmusage.Input}, `{"max_tokens":50,"messages":[{"content":"abcdefgh"}]}`, 2},
		{"output", decide.TokenCost{Measure: llmusage.Output}, `{"max_tokens":50,"messages":[{"content":"abcdefgh"}]}`, 50},
		{"default max", decide.TokenCost{}, `{"messages":[]}`, 1024},
		{"own default max", decide.TokenCost{DefaultMaxOutput: 10}, `{}`, 10},
		{"chars per token", decide.TokenCost{CharsPerToken: 2, Measure: llmusage.Input}, `{"input":"abcdefgh"}`, 4},
		{"at least 1", decide.TokenCost{Measure: llmusage.Input}, `{}`, 1},
		{"at most the capacity", decide.TokenCost{}, `{"max_tokens":1000000}`, 10000},
		{"price", decide.TokenCost{Prices: prices}, `{"model":"m","max_tokens":1000,"input":"` + strings.Repeat("x", 4000) + `"}`, 1000 + 4000},
	}
	for _, c := range cases {
		checks := []decide.Check{{Name: "t", Key: "k", Limit: lim, Late: &decide.LateCost{Tokens: &c.tc}}}
		if err := decide.Reserve(checks, []byte(c.body)); err != nil || checks[0].Cost != c.want {
			t.Errorf("%s: reserved %d, %v; want %d", c.name, checks[0].Cost, err, c.want)
		}
	}
	checks := []decide.Check{{Name: "t", Key: "k", Limit: lim, Late: &decide.LateCost{Tokens: &decide.TokenCost{Prices: prices}}}}
	err := decide.Reserve(checks, []byte(`{"model":"other"}`))
	if ce, ok := decide.AsClientError(err); !ok || ce.HTTPStatus() != 400 {
		t.Errorf("an unpriced model: %v, want a 400", err)
	}
	if err := decide.Reserve(checks, []byte(`nope`)); err == nil {
		t.Error("a body that is not JSON reserved")
	}
}

// TestChargeModelWithoutPrice: a check settled under a price table that no
// longer prices its model (a reload between the check and the settle) is
// charged its reservation, never nothing.
func TestChargeModelWithoutPrice(t *testing.T) {
	lim := sluice.FixedWindow(1_000_000, time.Hour)
	tc := &decide.TokenCost{Prices: &llmusage.Prices{Models: map[string]llmusage.Price{"other": {Input: 1, Output: 1}}}}
	c := decide.Check{Name: "usd", Limit: lim, Late: &decide.LateCost{Tokens: tc}, LLM: &llmusage.Request{Model: "gone", MaxOutput: 10}}
	u := llmusage.Usage{Input: 1000, Output: 1000, HasInput: true, HasOutput: true}
	s := decide.Charge(&c, 4200, lim, decide.Response{Usage: func(*llmusage.Format) *llmusage.Usage { return &u }})
	if s.Actual != 4200 || !s.Estimated {
		t.Errorf("settled %+v, want the reservation 4200, estimated", s)
	}
}
