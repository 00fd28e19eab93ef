// Package shedding applies the policy's shed: section (package shed) to
// sluice serve's listeners: each listener that sheds has a shed.Limiter
// of its own, made anew when a reload changes the section.
package shedding

import (
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/shed"
)

// shedding is the adaptive load shedding of one listener (the gateway, the
// decision API): the policy's shed: section applied with a shed.Limiter of
// its own. The Limiter is made when a policy with the section is first
// seen and made anew when a reload changes the section (its estimate and
// counters start over); without the section requests pass untouched.
type shedding struct {
	name     string
	priority shed.HTTPPriority
	next     http.Handler

	mu  sync.Mutex // serialises making a Limiter
	cur atomic.Pointer[shedLimiter]
}

// shedLimiter is a Limiter and the section it was made from.
type shedLimiter struct {
	cfg policy.Shed
	lim *shed.Limiter
	h   http.Handler // lim's middleware around next
}

// Set is the load shedding of each listener that has it. It is safe for
// concurrent use.
type Set struct {
	current func() *policy.Policy // the policy in force
	mu      sync.Mutex            // guards sheds
	sheds   []*shedding
}

// NewSet returns an empty Set; current returns the policy in force.
func NewSet(current func() *policy.Policy) *Set { return &Set{current: current} }

// Wrap wraps next, the handler of listener name, in the load shedding of
// each request's policy (policyOf), with requests' priorities from
// priority.
func (s *Set) Wrap(name string, policyOf func(*http.Request) *policy.Policy, priority shed.HTTPPriority, next http.Handler) http.Handler {
	sh := &shedding{name: name, priority: priority, next: next}
	s.mu.Lock()
	s.sheds = append(s.sheds, sh)
	s.mu.Unlock()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sh.handler(policyOf(r).Shed).ServeHTTP(w, r)
	})
}

// handler returns the handler for the section cfg (nil: none).
func (sh *shedding) handler(cfg *policy.Shed) http.Handler {
	if cfg == nil {
		return sh.next
	}
	if cur := sh.cur.Load(); cur != nil && cur.cfg == *cfg {
		return cur.h
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if cur := sh.cur.Load(); cur != nil && cur.cfg == *cfg {
		return cur.h
	}
	lim, err := shed.New(cfg.Config())
	if err != nil { // the policy validated the section: a defect
		return sh.next
	}
	cur := &shedLimiter{cfg: *cfg, lim: lim, h: lim.Middleware(sh.priority)(sh.next)}
	sh.cur.Store(cur)
	return cur.h
}

// stats returns the Limiter's stats, ok false while there is none.
func (sh *shedding) stats() (st shed.Stats, ok bool) {
	cur := sh.cur.Load()
	if cur == nil {
		return st, false
	}
	return cur.lim.Stats(), true
}

// Stats returns the stats of each listener's load shedding in force, by
// listener, for the status page and the metrics.
func (s *Set) Stats() map[string]shed.Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out map[string]shed.Stats
	for _, sh := range s.sheds {
		if st, ok := sh.stats(); ok && s.current().Shed != nil {
			if out == nil {
				out = map[string]shed.Stats{}
			}
			out[sh.name] = st
		}
	}
	return out
}
