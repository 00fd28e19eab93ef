package llmusage

import "testing"

func TestParsePrice(t *testing.T) {
	good := map[string]int64{"2.50": 2_500_000, "0.075": 75_000, "15": 15_000_000, "0.000001": 1, ".5": 500_000, "1000000": MaxPrice}
	for s, want := range good {
		if got, err := ParsePrice(s); err != nil || got != want {
			t.Errorf("ParsePrice(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", ".", "-1", "1e3", "0.0000001", "1000001", "99999999", "2,50", "+2", "NaN", " 2"} {
		if got, err := ParsePrice(s); err == nil {
			t.Errorf("ParsePrice(%q) = %d, want an error", s, got)
		}
	}
}

func TestPriceCost(t *testing.T) {
	p := Price{Input: 2_500_000, Output: 10_000_000} // 2.50 and 10 USD a million
	cases := []struct{ in, out, want int64 }{
		{0, 0, 0},
		{1, 0, 3}, // 2.5 micro-dollars, rounded up
		{1000, 500, 2500 + 5000},
		{1_000_000, 1_000_000, 12_500_000},
		{MaxCount, MaxCount, MaxCount},
		{-5, -5, 0},
	}
	for _, c := range cases {
		if got := p.Cost(c.in, c.out); got != c.want {
			t.Errorf("Cost(%d, %d) = %d, want %d", c.in, c.out, got, c.want)
		}
	}
	dear := Price{Input: MaxPrice, Output: MaxPrice}
	if got := dear.Cost(MaxCount, MaxCount); got != MaxCount {
		t.Errorf("the dearest price of the most tokens = %d, want MaxCount", got)
	}
}

func TestPricesOf(t *testing.T) {
	ps := &Prices{Models: map[string]Price{"gpt-4o": {1, 2}}}
	if _, ok := ps.Of("unknown"); ok {
		t.Error("a model missing from a table without a default has a price")
	}
	ps.Default = &Price{5, 6}
	if p, ok := ps.Of("unknown"); !ok || p != (Price{5, 6}) {
		t.Errorf("default: %v %v", p, ok)
	}
	if p, _ := ps.Of("gpt-4o"); p != (Price{1, 2}) {
		t.Errorf("gpt-4o: %v", p)
	}
}
