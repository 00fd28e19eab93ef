// Package shed is sluice's adaptive load shedding: a limit on the requests
// a service handles at once that follows the service's measured latency,
// so that an overloaded instance refuses the excess quickly (503 and
// Retry-After, or gRPC UNAVAILABLE with RetryInfo) instead of making every
// request slow.
//
// A Limiter admits a request while fewer than its limit are in flight and
// learns the limit from the latency of the requests it admitted, window by
// window, with an Algorithm: Vegas (the default) or Gradient2, the rules of
// Netflix's concurrency-limits, or BBR, the rule of Sentinel and Kratos,
// best with a CPU gate (Config.CPUThreshold). Requests carry a Priority: sheddable work
// may fill only a share of the limit and never waits, default work is
// admitted up to the limit, and critical work, when the limit is reached,
// waits a short time for the next free slot, which it gets before anyone
// else. Under overload sheddable requests are refused first and critical
// ones last.
//
// State is per process: every instance of a service learns its own limit.
// Middleware (HTTP) and interceptors (gRPC) apply a Limiter to a server;
// the priority of a request comes from a Go function, for example
// HeaderPriority, which honours a header only from trusted proxies.
package shed

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Priority is the class of a request. The zero value is Default.
type Priority uint8

// The priorities, from the last shed to the first.
const (
	// Default requests are admitted up to the limit and do not wait.
	Default Priority = iota
	// Critical requests wait a short time for a slot when the limit is
	// reached and get free slots first.
	Critical
	// Sheddable requests are admitted only while the in-flight count is
	// under a share of the limit (Config.SheddableShare).
	Sheddable
	nPriorities
)

// rank orders priorities for free slots: lower first.
func (p Priority) rank() int {
	switch p {
	case Critical:
		return 0
	case Sheddable:
		return 2
	}
	return 1
}

// String returns "critical", "default" or "sheddable".
func (p Priority) String() string {
	switch p {
	case Critical:
		return "critical"
	case Sheddable:
		return "sheddable"
	case Default:
		return "default"
	}
	return fmt.Sprintf("Priority(%d)", uint8(p))
}

// Priorities lists every priority, in the order of their values.
var Priorities = [nPriorities]Priority{Default, Critical, Sheddable}

// ParsePriority reads "critical", "default" or "sheddable" (any case).
func ParsePriority(s string) (Priority, error) {
	for _, p := range Priorities {
		if strings.EqualFold(s, p.String()) {
			return p, nil
		}
	}
	if len(s) > 32 {
		s = s[:32] + "..."
	}
	return Default, fmt.Errorf("shed: priority %q: want critical, default or sheddable", s)
}

// ErrShed is the error of a request the Limiter refused: too many in flight
// for its priority.
var ErrShed = errors.New("shed: overloaded")

// Config configures a Limiter. The zero value is usable: every field has a
// default.
type Config struct {
	// Algorithm learns the limit. Default a new Vegas, which keeps
	// latency under overload closest to the unloaded latency; Gradient2
	// lets it grow to its Tolerance (1.5×) first. A Limiter needs an
	// Algorithm of its own.
	Algorithm Algorithm
	// InitialLimit is the limit before any measurement. Default 20.
	InitialLimit int
	// MinLimit is the smallest limit. Default 4.
	MinLimit int
	// MaxLimit is the largest limit. Default 1000.
	MaxLimit int
	// Window is the shortest time one sample spans; a sample also needs
	// MinSamples completed requests. Default 100ms.
	Window time.Duration
	// MinSamples is the fewest completed requests one sample holds.
	// Default 10.
	MinSamples int
	// SheddableShare is the share of the limit that sheddable requests may
	// fill (0 < share ≤ 1). Default 0.75.
	SheddableShare float64
	// CriticalWait bounds how long a critical request waits for a slot
	// when the limit is reached. Default (zero): the smallest mean latency
	// measured, the service's latency without load; before any measurement
	// critical requests do not wait. Negative: they never wait.
	CriticalWait time.Duration
	// RetryAfter is what a refusal tells the client to wait. Default 1s.
	RetryAfter time.Duration
	// CPUThreshold, if above 0, gates shedding by CPU usage (a share of
	// the CPUs the process may use, at most 1): while usage is under it,
	// or not yet measured, requests beyond the limit are admitted anyway;
	// shedding starts once usage reaches it, and goes on while a request
	// was shed in the last second. For CPU-bound services, so that latency from
	// elsewhere does not shed work the CPU could do. Default 0: off.
	CPUThreshold float64
	// CPU reads CPU usage for CPUThreshold, at most every 250ms. Default
	// ReadCPU. Where usage cannot be read the gate is off: the limit alone
	// decides, and Stats.CPU is -1.
	CPU CPUReader
	// Now reads the clock. Default time.Now.
	Now func() time.Time
}

// withDefaults returns c with its defaults filled in, or an error naming a
// field that cannot work.
func (c Config) withDefaults() (Config, error) {
	if c.Algorithm == nil {
		c.Algorithm = &Vegas{}
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.InitialLimit, 20)
	def(&c.MinLimit, 4)
	def(&c.MaxLimit, 1000)
	def(&c.MinSamples, 10)
	if c.Window == 0 {
		c.Window = 100 * time.Millisecond
	}
	if c.SheddableShare == 0 {
		c.SheddableShare = 0.75
	}
	if c.RetryAfter == 0 {
		c.RetryAfter = time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.CPU == nil {
		c.CPU = ReadCPU
	}
	switch {
	case c.MinLimit < 1:
		return c, fmt.Errorf("shed: MinLimit %d: want at least 1", c.MinLimit)
	case c.MaxLimit < c.MinLimit:
		return c, fmt.Errorf("shed: MaxLimit %d: want at least MinLimit (%d)", c.MaxLimit, c.MinLimit)
	case c.InitialLimit < c.MinLimit || c.InitialLimit > c.MaxLimit:
		return c, fmt.Errorf("shed: InitialLimit %d: want between MinLimit (%d) and MaxLimit (%d)", c.InitialLimit, c.MinLimit, c.MaxLimit)
	case c.Window < 0 || c.MinSamples < 0 || c.RetryAfter < 0:
		return c, errors.New("shed: Window, MinSamples and RetryAfter must not be negative")
	case !(c.CPUThreshold >= 0 && c.CPUThreshold <= 1):
		return c, fmt.Errorf("shed: CPUThreshold %g: want 0 (off) to 1", c.CPUThreshold)
	case !(c.SheddableShare > 0 && c.SheddableShare <= 1):
		return c, fmt.Errorf("shed: SheddableShare %g: want more than 0, at most 1", c.SheddableShare)
	}
	return c, nil
}
