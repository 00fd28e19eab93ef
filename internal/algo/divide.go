package algo

import "math/bits"

// divisor divides by a fixed d with a multiplication and a shift instead of
// a hardware division, which costs tens of cycles and dominated a decision.
// It is exact for every numerator below 2^53, the range all of sluice's
// arithmetic stays in (Granlund and Montgomery, "Division by invariant
// integers using multiplication", 1994, theorem 4.2: with l = ⌈log2 d⌉ and
// m = ⌈2^(53+l) / d⌉, ⌊n/d⌋ = ⌊n·m / 2^(53+l)⌋ for 0 ≤ n < 2^53).
type divisor struct {
	d     int64
	m     uint64 // < 2^54
	shift uint   // 53 + l
}

const numeratorBits = 53

func newDivisor(d int64) divisor {
	if d < 1 {
		panic("algo: divisor below 1") // Compile only builds divisors of validated limits
	}
	l := uint(bits.Len64(uint64(d - 1)))
	shift := numeratorBits + l
	// m = ⌈2^shift / d⌉, with 2^shift as the 128-bit number (hi, lo).
	var hi, lo uint64
	if shift >= 64 {
		hi = 1 << (shift - 64)
	} else {
		lo = 1 << shift
	}
	q, r := bits.Div64(hi, lo, uint64(d))
	if r != 0 {
		q++
	}
	return divisor{d: d, m: q, shift: shift}
}

// div returns ⌊n/d⌋ for 0 ≤ n < 2^53.
func (v divisor) div(n int64) int64 {
	hi, lo := bits.Mul64(uint64(n), v.m)
	// shift is 53 to 117: the masks change no amount, and spare the
	// compiler's guard for amounts of 64 and more.
	if v.shift >= 64 {
		return int64(hi >> ((v.shift - 64) & 63))
	}
	return int64(hi<<((64-v.shift)&63) | lo>>(v.shift&63))
}

// ceil returns ⌈n/d⌉ for 0 ≤ n < 2^53 - d.
func (v divisor) ceil(n int64) int64 {
	return v.div(n + v.d - 1)
}
