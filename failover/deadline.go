package failover

import (
	"context"
	"sync"
	"time"
)

// lazyDeadline is a context that ends at a deadline or when its parent
// ends, whose timer is started only when something waits on it (Done). A
// call that a store answers without waiting, such as redisstore's near
// cache answering a known refusal, costs one small allocation instead of a
// runtime timer; every call that reaches Redis waits on Done (or reads
// Deadline and sets its own timer), so the deadline still bounds it.
type lazyDeadline struct {
	parent   context.Context
	deadline time.Time

	mu     sync.Mutex
	inner  context.Context // made by the first Done
	cancel context.CancelFunc
	err    error // set by stop before any Done: inner is never made
}

var _ context.Context = (*lazyDeadline)(nil)

func newLazyDeadline(parent context.Context, deadline time.Time) *lazyDeadline {
	return &lazyDeadline{parent: parent, deadline: deadline}
}

// Deadline returns the earlier of the deadline and the parent's.
func (c *lazyDeadline) Deadline() (time.Time, bool) {
	if d, ok := c.parent.Deadline(); ok && d.Before(c.deadline) {
		return d, true
	}
	return c.deadline, true
}

// Done starts the deadline's timer, once, and returns its channel.
func (c *lazyDeadline) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inner == nil {
		c.inner, c.cancel = context.WithDeadline(c.parent, c.deadline)
		if c.err != nil {
			c.cancel()
		}
	}
	return c.inner.Done()
}

// Err is the parent's error, context.DeadlineExceeded once the deadline
// has passed, or context.Canceled once stop was called, as for a context
// of context.WithDeadline.
func (c *lazyDeadline) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.inner != nil:
		return c.inner.Err()
	case c.err != nil:
		return c.err
	}
	return c.now()
}

// now is the error the context has at this moment, Done or not.
func (c *lazyDeadline) now() error {
	if err := c.parent.Err(); err != nil {
		return err
	}
	if !time.Now().Before(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// Value is the parent's.
func (c *lazyDeadline) Value(key any) any { return c.parent.Value(key) }

// stop ends the context and releases its timer, if one was started.
func (c *lazyDeadline) stop() {
	c.mu.Lock()
	if c.inner == nil && c.err == nil {
		if c.err = c.now(); c.err == nil {
			c.err = context.Canceled
		}
	}
	cancel := c.cancel
	c.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}
