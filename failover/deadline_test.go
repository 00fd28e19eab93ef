package failover

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// TestLazyDeadline: the context ends at its deadline when waited on,
// reports its deadline without being waited on, follows its parent, and
// keeps the error it ended with.
func TestLazyDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		c := newLazyDeadline(context.Background(), start.Add(50*time.Millisecond))
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
		c.stop()
		if !errors.Is(c.Err(), context.DeadlineExceeded) {
			t.Fatalf("Err() after stop = %v, want it kept", c.Err())
		}
	})
}

func TestLazyDeadlineNeverWaited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newLazyDeadline(context.Background(), time.Now().Add(50*time.Millisecond))
		time.Sleep(60 * time.Millisecond)
		if !errors.Is(c.Err(), context.DeadlineExceeded) {
			t.Fatalf("Err() past the deadline, never waited on = %v", c.Err())
		}
		c2 := newLazyDeadline(context.Background(), time.Now().Add(50*time.Millisecond))
		c2.stop()
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

func TestLazyDeadlineParent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		type key struct{}
		parent, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
		c := newLazyDeadline(parent, time.Now().Add(time.Hour))
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
		c3 := newLazyDeadline(early, time.Now().Add(time.Hour))
		if d, _ := c3.Deadline(); time.Until(d) > time.Millisecond {
			t.Fatalf("Deadline() %v is not the parent's earlier one", d)
		}
		c.stop()
		c3.stop()
	})
}
