package llmusage

import (
	"fmt"
	"math/bits"
	"strings"
)

// Price is what a model's tokens cost, in millionths of a currency unit
// (micro-dollars for USD) per million tokens: 2.50 USD a million input
// tokens is Input 2_500_000.
type Price struct {
	Input, Output int64
}

// MaxPrice bounds a Price's fields: a million units a million tokens.
const MaxPrice = 1_000_000_000_000

// Cost is the price of in input and out output tokens, in millionths of
// the unit, rounded up (a call is never cheaper than its share of a
// millionth); at most MaxCount.
func (p Price) Cost(in, out int64) int64 {
	a, b := mulDiv(in, p.Input), mulDiv(out, p.Output)
	return min(a+b, MaxCount) // each is at most MaxCount: no overflow
}

// mulDiv returns n*price/1e6 rounded up, at most MaxCount, for n and
// price from 0 (negative ones count as 0).
func mulDiv(n, price int64) int64 {
	if n <= 0 || price <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(n), uint64(price))
	lo, carry := bits.Add64(lo, 999_999, 0)
	hi += carry
	if hi >= 1_000_000 {
		return MaxCount
	}
	q, _ := bits.Div64(hi, lo, 1_000_000)
	return int64(min(q, MaxCount))
}

// ParsePrice parses a price per million tokens written as a decimal
// number of currency units with at most six decimals ("2.50", "0.075",
// "15"), exactly, into millionths.
func ParsePrice(s string) (int64, error) {
	whole, frac, _ := strings.Cut(s, ".")
	if whole == "" && frac == "" || len(frac) > 6 || len(whole) > 7 {
		return 0, fmt.Errorf("%q: want a number of units with at most 6 decimals, at most %d", s, MaxPrice/1_000_000)
	}
	var n int64
	for _, c := range whole + frac + strings.Repeat("0", 6-len(frac)) {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%q: want a number of units with at most 6 decimals, at most %d", s, MaxPrice/1_000_000)
		}
		n = n*10 + int64(c-'0')
	}
	if n > MaxPrice {
		return 0, fmt.Errorf("%q: at most %d units a million tokens", s, MaxPrice/1_000_000)
	}
	return n, nil
}

// Prices is a price table: each model's Price, and what a model not in
// it costs. It is immutable once built and safe for concurrent use.
type Prices struct {
	// Models maps a model name, as requests send it, to its price.
	Models map[string]Price
	// Default, if set, prices the models not in Models; nil refuses them
	// (a model missing from the table is never free).
	Default *Price
}

// Of returns the price of model; ok is false when the table has none.
func (ps *Prices) Of(model string) (p Price, ok bool) {
	if p, ok := ps.Models[model]; ok {
		return p, true
	}
	if ps.Default != nil {
		return *ps.Default, true
	}
	return Price{}, false
}
