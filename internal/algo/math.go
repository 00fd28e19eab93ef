package algo

import "math/bits"

// ceilDiv returns ⌈a/b⌉ for a ≥ 0, b > 0.
func ceilDiv(a, b int64) int64 {
	return (a + b - 1) / b
}

// mulDiv returns ⌊a·b/d⌋ for non-negative a, b and positive d, exactly, with
// a 128-bit intermediate product. The quotient must fit in 63 bits.
func mulDiv(a, b, d int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	q, _ := bits.Div64(hi, lo, uint64(d))
	return int64(q)
}

// mulDivCeil returns ⌈a·b/d⌉ for non-negative a, b and positive d, exactly.
func mulDivCeil(a, b, d int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	q, r := bits.Div64(hi, lo, uint64(d))
	if r != 0 {
		q++
	}
	return int64(q)
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
