package failover

import (
	"maps"
	"sync"
	"sync/atomic"

	"github.com/sluicehq/sluice"
)

// maxScaled bounds how many limits a scale remembers scaled: a policy has
// a few dozen, but limits can come with requests (an RLS descriptor's
// own), and memory must not grow with them. A limit past the bound is
// scaled on each call, as every limit was before it was remembered.
const maxScaled = 1024

// scaled is the fallback scale with the limits scaled under it: each
// limit is scaled and validated (sluice.Limit.Scale) once per scale, not
// on every request the fallback is shown. SetFallbackScale replaces it
// whole, so a limit is never read scaled under another scale.
//
// The map is copied on write (a new limit, at most maxScaled times), so
// that a read takes no lock.
type scaled struct {
	f    float64
	mu   sync.Mutex // serialises writers of seen
	seen atomic.Pointer[map[sluice.Limit]sluice.Limit]
}

// limit is l under the scale: sluice's one rule (sluice.Limit.Scale), or l
// itself when the scaled limit is not valid or the scale is 1 (a lone
// instance's share).
func (c *scaled) limit(l sluice.Limit) sluice.Limit {
	if c.f == 1 {
		return l
	}
	m := c.seen.Load()
	if m != nil {
		if out, ok := (*m)[l]; ok {
			return out
		}
	}
	if m != nil && len(*m) >= maxScaled {
		return scaleOrKeep(l, c.f)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.seen.Load()
	if old != nil {
		if out, ok := (*old)[l]; ok {
			return out
		}
	}
	out := scaleOrKeep(l, c.f)
	if old == nil || len(*old) < maxScaled {
		next := make(map[sluice.Limit]sluice.Limit, 1+len(mapOrNil(old)))
		maps.Copy(next, mapOrNil(old))
		next[l] = out
		c.seen.Store(&next)
	}
	return out
}

// scaleOrKeep is l scaled by f, or l itself when the scaled limit is not
// valid.
func scaleOrKeep(l sluice.Limit, f float64) sluice.Limit {
	if out, err := l.Scale(f); err == nil {
		return out
	}
	return l
}

func mapOrNil(m *map[sluice.Limit]sluice.Limit) map[sluice.Limit]sluice.Limit {
	if m == nil {
		return nil
	}
	return *m
}
