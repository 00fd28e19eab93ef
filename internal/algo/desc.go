package algo

import "github.com/sluicehq/sluice"

// Desc describes one algorithm to the stores: its steps, the parameters
// its state depends on (the wire vector the Lua port is sent), the form of
// its state, and what it means to the layers above (leases, shaping,
// aligned windows). Every store operation reads it instead of switching on
// the algorithm: a new algorithm is one new row of descs (beside its row of
// sluice's own table, algorithm.go, and its Lua step), and
// TestDescriptionsComplete fails while a row misses a part. The Lua
// constants (redisstore/scripts/algorithms.lua) are generated from this
// table by `go generate ./internal/algo` (lua.go).
type Desc struct {
	// Wire is the parameters sent to the Lua port, in order, and those
	// Same compares. A calendar fixed window sends its periods instead of
	// P (redisstore).
	Wire []Wire
	// LuaFile is the file of redisstore/scripts holding the algorithm's
	// Lua step, LuaStep the name of that Lua function.
	LuaFile, LuaStep string

	// State is what the state uses besides X, Y and Idle.
	State StateForm
	// Leases: every admitted request holds a lease until it is released
	// (concurrency). It has no rate: no adjustment, debt, fallback or
	// refusal cache applies to it.
	Leases bool
	// Aligned: the count resets at the end of aligned windows (fixed
	// window), so a window with nothing left refuses until it ends.
	Aligned bool
	// Windowed: the limit is a count per window (the window algorithms).
	Windowed bool
	// Shapes: an admission may come with a Delay (leaky bucket), bounded
	// by the request's MaxDelay.
	Shapes bool
	// Paced: Adjust moves the time of the next admission at the stable
	// rate (warm_up); its idle time is that of its state.
	Paced bool
	// QuotaLeases: a store may hand out local quota from a lease on it
	// (redisstore's quota leases).
	QuotaLeases bool

	// Bucket is the form of the bucket fast path and the closed form
	// (BucketTo, Closed), or noBucket.
	Bucket BucketForm

	// The step itself is chosen by step (step.go), a switch: called
	// through a func value, its state and result would escape, an
	// allocation on every decision.
	adjust func(p *Params, s *State, now, delta int64) // nil: not adjustable (Leases)
	adopt  func(old, p *Params, s *State, now int64)   // nil: the state is kept as it is
	idle   func(p *Params, s *State) int64             // AdoptedIdle
}

// Wire names one parameter of Params as the Lua port is sent it.
type Wire uint8

// The parameters of the wire vector.
const (
	WireN Wire = iota + 1
	WireP
	WireA
	WireB
	WireCap
	WireFull
	WireNoDelay
	WireWarm
	WireTTL
)

// Of returns the value of w in p.
func (w Wire) Of(p *Params) int64 {
	switch w {
	case WireN:
		return p.N
	case WireP:
		return p.P
	case WireA:
		return p.A
	case WireB:
		return p.B
	case WireCap:
		return p.Cap
	case WireFull:
		return p.Full
	case WireNoDelay:
		return p.NoDelay
	case WireWarm:
		return p.Warm
	case WireTTL:
		return p.TTL
	}
	panic("algo: unknown wire parameter") // a defect in descs, caught by TestDescriptionsComplete
}

// StateForm is what a state uses besides X, Y and Idle.
type StateForm uint8

const (
	StateXY  StateForm = iota // X, Y and Idle alone
	StateXYZ                  // Z too (sliding window)
	StateLog                  // a log of entries (a sorted set in Redis)
)

// BucketForm is the form of a bucket's state for the fast path.
type BucketForm uint8

const (
	noBucket      BucketForm = iota
	bucketTokens             // X the credit used at time Y
	bucketArrival            // X the theoretical arrival time, less Y/A
)

var (
	twoWire    = []Wire{WireN, WireP}
	bucketWire = []Wire{WireA, WireB, WireCap, WireFull}
)

// descs is the table, indexed by algorithm.
var descs = [...]Desc{
	sluice.AlgorithmFixedWindow: {
		Wire: twoWire, LuaFile: "fixed_window.lua", LuaStep: "fixed_window",
		Aligned: true, Windowed: true, QuotaLeases: true,
		adjust: func(p *Params, s *State, _, delta int64) { s.Y = adjustCount(s.Y, delta, debtCeiling*p.N) },
		adopt:  func(old, p *Params, s *State, now int64) { adoptWindow(old, p, s, now, false) },
		idle:   idleFixedWindow,
	},
	sluice.AlgorithmSlidingLog: {
		Wire: twoWire, LuaFile: "sliding_log.lua", LuaStep: "sliding_log",
		State: StateLog, Windowed: true,
		adjust: func(p *Params, s *State, _, delta int64) { adjustLog(p, s, delta) },
		idle: func(p *Params, s *State) int64 {
			if n := s.newest(); n >= 0 {
				return n + p.P // the Lua port keeps no parameters for a log: its TTL is the last charge's
			}
			return 0
		},
	},
	sluice.AlgorithmSlidingWindow: {
		Wire: twoWire, LuaFile: "sliding_window.lua", LuaStep: "sliding_window",
		State: StateXYZ, Windowed: true,
		adjust: func(p *Params, s *State, _, delta int64) {
			// at most 2^37, so that the weighted count stays exact
			s.Y, s.Z = adjustTwo(s.Y, s.Z, delta, min(debtCeiling*p.N, 1<<37))
		},
		adopt: func(old, p *Params, s *State, now int64) {
			if old.P != p.P {
				adoptWindow(old, p, s, now, true)
			}
		},
		idle: func(p *Params, s *State) int64 {
			if s.Y == 0 && s.Z == 0 {
				return 0
			}
			return s.X + 2*p.P
		},
	},
	sluice.AlgorithmTokenBucket: {
		Wire: bucketWire, LuaFile: "bucket.lua", LuaStep: "token_bucket",
		QuotaLeases: true, Bucket: bucketTokens,
		adjust: func(p *Params, s *State, now, delta int64) {
			at, used := tokenUsed(p, s, now)
			s.X, s.Y = adjustDebt(p, used, at-now, delta), at
		},
		// X is the credit used at time Y: as whole requests, in new units.
		adopt: func(old, p *Params, s *State, _ int64) { s.X = requests(old, p, s.X) },
		idle:  func(p *Params, s *State) int64 { return s.Y + p.byA.ceil(s.X) },
	},
	sluice.AlgorithmGCRA: {
		Wire: bucketWire, LuaFile: "bucket.lua", LuaStep: "gcra",
		QuotaLeases: true, Bucket: bucketArrival,
		adjust: adjustGCRA, adopt: adoptGCRA, idle: idleArrival,
	},
	sluice.AlgorithmLeakyBucket: {
		Wire: append(bucketWire[:len(bucketWire):len(bucketWire)], WireNoDelay), LuaFile: "bucket.lua", LuaStep: "gcra",
		Shapes: true,
		adjust: adjustGCRA, adopt: adoptGCRA, idle: idleArrival,
	},
	sluice.AlgorithmWarmUp: {
		Wire: []Wire{WireN, WireP, WireWarm}, LuaFile: "warm_up.lua", LuaStep: "warm_up",
		Paced:  true,
		adjust: adjustWarmUp,
		adopt:  func(_, p *Params, s *State, _ int64) { s.Y = min(s.Y, p.Warm) },
		idle:   func(p *Params, s *State) int64 { return s.X + s.Y },
	},
	sluice.AlgorithmConcurrency: {
		Wire: []Wire{WireN, WireTTL}, LuaFile: "concurrency.lua", LuaStep: "concurrency",
		State: StateLog, Leases: true,
		idle: func(*Params, *State) int64 { return 0 },
	},
}

// Of returns the description of a, or nil for an unknown algorithm.
func Of(a sluice.Algorithm) *Desc {
	if a == 0 || int(a) >= len(descs) || descs[a].idle == nil {
		return nil
	}
	return &descs[a]
}

// Desc returns the description of p's algorithm.
func (p *Params) Desc() *Desc { return &descs[p.Alg] }

// Leases reports whether a's admitted requests hold leases until released
// (Desc.Leases): false for an unknown algorithm.
func Leases(a sluice.Algorithm) bool { d := Of(a); return d != nil && d.Leases }

// Aligned reports Desc.Aligned of a: false for an unknown algorithm.
func Aligned(a sluice.Algorithm) bool { d := Of(a); return d != nil && d.Aligned }

// Shapes reports Desc.Shapes of a: false for an unknown algorithm.
func Shapes(a sluice.Algorithm) bool { d := Of(a); return d != nil && d.Shapes }

// WireValues appends p's wire vector to dst: the parameters Desc.Wire
// names, without P for a calendar window (whose periods are sent instead).
func (p *Params) WireValues(dst []int64) []int64 {
	for _, w := range p.Desc().Wire {
		if w == WireP && p.cal != nil {
			continue
		}
		dst = append(dst, w.Of(p))
	}
	return dst
}

func idleFixedWindow(p *Params, s *State) int64 {
	if s.Y == 0 {
		return 0
	}
	if p.cal != nil {
		_, end := p.cal.compute(s.X)
		return end
	}
	return s.X + p.P
}

func idleArrival(_ *Params, s *State) int64 { return s.X }
