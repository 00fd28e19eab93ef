package algo

import (
	"testing"

	"pgregory.net/rapid"
)

func TestDivisorExact(t *testing.T) {
	edge := []int64{0, 1, 2, 3, 1<<53 - 1, 1<<53 - 2, 1 << 52, 999_999, 1_000_000, 1_000_001}
	for _, d := range []int64{1, 2, 3, 7, 10, 1000, 1 << 20, 1<<20 + 1, 333_333, 1_000_000, 86_400_000_000, 1<<53 - 1} {
		v := newDivisor(d)
		for _, n := range edge {
			if got, want := v.div(n), n/d; got != want {
				t.Fatalf("%d/%d = %d, want %d", n, d, got, want)
			}
		}
	}
	rapid.Check(t, func(t *rapid.T) {
		d := rapid.Int64Range(1, 1<<53-1).Draw(t, "d")
		n := rapid.Int64Range(0, 1<<53-1).Draw(t, "n")
		v := newDivisor(d)
		if got, want := v.div(n), n/d; got != want {
			t.Fatalf("%d/%d = %d, want %d", n, d, got, want)
		}
		// Near multiples of d, where a rounding error would show.
		k := rapid.Int64Range(0, (1<<53-1)/d).Draw(t, "k")
		for _, m := range []int64{k*d - 1, k * d, k*d + 1} {
			if m >= 0 && m < 1<<53 && v.div(m) != m/d {
				t.Fatalf("%d/%d = %d, want %d", m, d, v.div(m), m/d)
			}
		}
	})
}

var benchDivisor int64 = 333_333 // a variable: the compiler must not fold it

// BenchmarkDivide compares a dependent chain of hardware divisions with the
// same chain through a divisor.
func BenchmarkDivide(b *testing.B) {
	v := newDivisor(benchDivisor)
	b.Run("hardware", func(b *testing.B) {
		x := int64(1 << 52)
		for range b.N {
			x = x/benchDivisor + 1<<52
		}
		sinkDiv = x
	})
	b.Run("divisor", func(b *testing.B) {
		x := int64(1 << 52)
		for range b.N {
			x = v.div(x) + 1<<52
		}
		sinkDiv = x
	})
}

var sinkDiv int64
