// Package deadline holds sluice's waits on a context: Sleep, the one sleep
// that a context cuts short, and Lazy, the context failover.Store bounds
// each call to its primary store with: a deadline whose timer starts only
// when something waits on it, and which a store that keeps its own timer
// for the deadline can wait on without starting one (ParentDone).
package deadline

import (
	"context"
	"sync"
	"time"
)

// Lazy is a context that ends at a deadline or when its parent ends, whose
// timer is started only when something waits on it (Done). A call that a
// store answers without waiting, such as redisstore's near cache answering
// a known refusal, costs one small allocation instead of a runtime timer;
// every call that reaches Redis waits on Done, or on ParentDone and a
// timer of its own at Deadline, so the deadline still bounds it.
type Lazy struct {
	parent   context.Context
	deadline time.Time

	mu     sync.Mutex
	inner  context.Context // made by the first Done
	cancel context.CancelFunc
	err    error // without inner: the error it ended with (Err, Stop); inner is then never made
}

var _ context.Context = (*Lazy)(nil)

// New returns a Lazy context of parent that ends at deadline.
func New(parent context.Context, deadline time.Time) *Lazy {
	return &Lazy{parent: parent, deadline: deadline}
}

// Deadline returns the earlier of the deadline and the parent's.
func (c *Lazy) Deadline() (time.Time, bool) {
	if d, ok := c.parent.Deadline(); ok && d.Before(c.deadline) {
		return d, true
	}
	return c.deadline, true
}

// Done starts the deadline's timer, once, and returns its channel: a
// closed one if the context has already ended without it.
func (c *Lazy) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inner == nil {
		if c.err != nil {
			return closed
		}
		c.inner, c.cancel = context.WithDeadline(c.parent, c.deadline)
	}
	return c.inner.Done()
}

// closed is the Done of a context that ended before anything waited on it.
var closed = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// Err is the parent's error, context.DeadlineExceeded once the deadline
// has passed, or context.Canceled once Stop was called, as for a context
// of context.WithDeadline; once it has returned an error it returns that
// one. It is the parent's error as soon as the parent's Done is closed (a
// context's children learn of its end after its Done closes), so that a
// caller woken by ParentDone finds it set.
func (c *Lazy) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inner != nil {
		if err := c.inner.Err(); err != nil {
			return err
		}
		return c.now() // the parent ended, and inner has yet to learn of it
	}
	if c.err == nil {
		c.err = c.now()
	}
	return c.err
}

// now is the error the context has at this moment, Done or not.
func (c *Lazy) now() error {
	if err := c.parent.Err(); err != nil {
		return err
	}
	if !time.Now().Before(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// Value is the parent's.
func (c *Lazy) Value(key any) any { return c.parent.Value(key) }

// Stop ends the context and releases its timer, if one was started. It
// reads no clock: a context that ended by Stop before anything waited on
// it or read its error reports context.Canceled, even past its deadline,
// as a context of context.WithDeadline cancelled before its timer fired
// does.
func (c *Lazy) Stop() {
	c.mu.Lock()
	if c.inner == nil && c.err == nil {
		c.err = context.Canceled
	}
	cancel := c.cancel
	c.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// ParentDone is what a caller that waits on ctx alongside a timer of its
// own at ctx's deadline needs to watch besides that timer: for a Lazy
// context, its parent's Done, which starts no second timer and registers
// no context with the parent (a third of the deadline's cost to a call
// that reaches Redis); for any other, ctx.Done. Without such a timer, wait
// on ctx.Done: a Lazy context's parent need not end at its deadline.
func ParentDone(ctx context.Context) <-chan struct{} {
	if c, ok := ctx.(*Lazy); ok {
		c.mu.Lock()
		stopped := c.err != nil
		c.mu.Unlock()
		if !stopped {
			return c.parent.Done()
		}
	}
	return ctx.Done()
}

// Sleep waits for d or until ctx is done, and returns nil or ctx.Err(). A
// d of zero or less does not wait: it returns ctx.Err().
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
