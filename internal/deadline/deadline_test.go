package deadline

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// TestLazy: the context ends at its deadline when waited on,
// reports its deadline without being waited on, follows its parent, and
// keeps the error it ended with.
func TestLazy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		c := New(context.Background(), start.Add(50*time.Millisecond))
		if d, ok := c.Deadline(); !ok || !d.Equal(start.Add(50*time.Millisecond)) {
			t.Fatalf("Deadline() = %v, %v", d, ok)
		}
		if c.Err() != nil {
			t.Fatalf("Err() before the deadline = %v", c.Err())
		}
		<-c.Done()
		if took := time.Since(start); took != 50*time.Millisecond {
			t.Fatalf("Done after %v, want 50ms", took)
		}
		if !errors.Is(c.Err(), context.DeadlineExceeded) {
			t.Fatalf("Err() = %v, want DeadlineExceeded", c.Err())
		}
		c.Stop()
		if !errors.Is(c.Err(), context.DeadlineExceeded) {
			t.Fatalf("Err() after stop = %v, want it kept", c.Err())
		}
	})
}

func TestLazyNeverWaited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := New(context.Background(), time.Now().Add(50*time.Millisecond))
		time.Sleep(60 * time.Millisecond)
		if !errors.Is(c.Err(), context.DeadlineExceeded) {
			t.Fatalf("Err() past the deadline, never waited on = %v", c.Err())
		}
		c.Stop()
		if !errors.Is(c.Err(), context.DeadlineExceeded) {
			t.Fatalf("Err() after Stop = %v, want the DeadlineExceeded it reported, kept", c.Err())
		}
		select {
		case <-c.Done():
		default:
			t.Fatal("Done of a context past its deadline is open")
		}
		c2 := New(context.Background(), time.Now().Add(50*time.Millisecond))
		c2.Stop()
		time.Sleep(60 * time.Millisecond)
		if !errors.Is(c2.Err(), context.Canceled) {
			t.Fatalf("Err() of a stopped context = %v, want Canceled, kept", c2.Err())
		}
		select {
		case <-c2.Done():
		default:
			t.Fatal("Done of a stopped context is open")
		}
	})
}

func TestLazyParent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		type key struct{}
		parent, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
		c := New(parent, time.Now().Add(time.Hour))
		if c.Value(key{}) != "v" {
			t.Fatal("Value not the parent's")
		}
		done := c.Done()
		cancel()
		<-done
		if !errors.Is(c.Err(), context.Canceled) {
			t.Fatalf("Err() = %v, want the parent's Canceled", c.Err())
		}
		early, cancel2 := context.WithTimeout(context.Background(), time.Millisecond)
		defer cancel2()
		c3 := New(early, time.Now().Add(time.Hour))
		if d, _ := c3.Deadline(); time.Until(d) > time.Millisecond {
			t.Fatalf("Deadline() %v is not the parent's earlier one", d)
		}
		c.Stop()
		c3.Stop()
	})
}

// TestParentDone: for a Lazy context, the parent's Done, which starts no
// timer; for a stopped one or any other context, its own Done; and a
// caller woken by the parent finds Err set, whether or not Done was
// started.
func TestParentDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		parent, cancel := context.WithCancel(context.Background())
		c := New(parent, time.Now().Add(time.Hour))
		if ParentDone(c) != parent.Done() {
			t.Fatal("ParentDone of a Lazy context is not its parent's Done")
		}
		if c.inner != nil {
			t.Fatal("ParentDone started the deadline's timer")
		}
		c2 := New(parent, time.Now().Add(time.Hour))
		c2.Done()
		cancel()
		<-ParentDone(c)
		for _, c := range []*Lazy{c, c2} {
			if !errors.Is(c.Err(), context.Canceled) {
				t.Fatalf("Err() once the parent ended = %v, want Canceled", c.Err())
			}
		}
		other, cancel2 := context.WithCancel(context.Background())
		defer cancel2()
		if ParentDone(other) != other.Done() {
			t.Fatal("ParentDone of another context is not its Done")
		}
		c3 := New(other, time.Now().Add(time.Hour))
		c3.Stop()
		select {
		case <-ParentDone(c3):
		default:
			t.Fatal("ParentDone of a stopped Lazy context is open")
		}
	})
}

// TestSleep: Sleep waits the whole duration, ends early with the context
// and says why, and does not wait for a duration of zero or less.
func TestSleep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		if err := Sleep(context.Background(), time.Second); err != nil || time.Since(start) != time.Second {
			t.Fatalf("Sleep(1s) = %v after %v", err, time.Since(start))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		start = time.Now()
		if err := Sleep(ctx, time.Hour); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != 100*time.Millisecond {
			t.Fatalf("Sleep(1h) under a 100ms deadline = %v after %v", err, time.Since(start))
		}
		if err := Sleep(ctx, 0); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Sleep(0) on an ended context = %v", err)
		}
		if err := Sleep(context.Background(), -time.Second); err != nil || time.Since(start) != 100*time.Millisecond {
			t.Fatalf("Sleep(-1s) = %v, waited %v", err, time.Since(start)-100*time.Millisecond)
		}
	})
}
