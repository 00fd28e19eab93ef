package sluice_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// inBubble runs f with a fresh memstore inside a synctest bubble, where
// time is virtual: sleeps end instantly and exactly.
func inBubble(t *testing.T, f func(t *testing.T, l *sluice.Limiter)) {
	synctest.Test(t, func(t *testing.T) {
		s, err := memstore.New(memstore.Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		f(t, sluice.New(s))
	})
}

func TestWaitSleepsUntilAdmitted(t *testing.T) {
	inBubble(t, func(t *testing.T, l *sluice.Limiter) {
		ctx := context.Background()
		lim := sluice.TokenBucket(sluice.PerSecond(10), 1)
		start := time.Now()
		for i := range 5 {
			d, err := l.Wait(ctx, "k", lim)
			if err != nil || !d.Allowed {
				t.Fatalf("wait %d: %+v %v", i, d, err)
			}
			if got, want := time.Since(start), time.Duration(i)*100*time.Millisecond; got != want {
				t.Fatalf("wait %d returned after %s, want %s", i, got, want)
			}
		}
	})
}

func TestWaitRefusesAtOnceBeyondDeadline(t *testing.T) {
	inBubble(t, func(t *testing.T, l *sluice.Limiter) {
		lim := sluice.TokenBucket(sluice.PerSecond(1), 1)
		l.Allow(context.Background(), "k", lim)
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		start := time.Now()
		d, err := l.Wait(ctx, "k", lim)
		if !errors.Is(err, sluice.ErrWouldExceedDeadline) || d.Allowed || d.RetryAfter != time.Second {
			t.Fatalf("got %+v, %v; want a refusal with RetryAfter 1s and ErrWouldExceedDeadline", d, err)
		}
		if waited := time.Since(start); waited != 0 {
			t.Fatalf("slept %s before refusing", waited)
		}
		// A deadline long enough is honoured.
		ctx2, cancel2 := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel2()
		if d, err := l.Wait(ctx2, "k", lim); err != nil || !d.Allowed || time.Since(start) != time.Second {
			t.Fatalf("within deadline: %+v %v after %s", d, err, time.Since(start))
		}
	})
}

func TestWaitHonoursShapingDelay(t *testing.T) {
	inBubble(t, func(t *testing.T, l *sluice.Limiter) {
		ctx := context.Background()
		lim := sluice.LeakyBucket(sluice.PerSecond(4), 10)
		start := time.Now()
		for i := range 4 {
			if _, err := l.Wait(ctx, "k", lim); err != nil {
				t.Fatal(err)
			}
			if got, want := time.Since(start), time.Duration(i)*250*time.Millisecond; got != want {
				t.Fatalf("request %d started after %s, want %s", i, got, want)
			}
		}
	})
}

func TestWaitCancelled(t *testing.T) {
	inBubble(t, func(t *testing.T, l *sluice.Limiter) {
		lim := sluice.TokenBucket(sluice.PerHour(1), 1)
		l.Allow(context.Background(), "k", lim)
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			time.Sleep(time.Minute)
			cancel()
		}()
		if _, err := l.Wait(ctx, "k", lim); !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want context.Canceled", err)
		}
	})
}

// remaining peeks at what key has left under lim.
func remaining(t *testing.T, l *sluice.Limiter, lim sluice.Limit) int64 {
	t.Helper()
	d, err := l.AllowN(context.Background(), "k", lim, 0)
	if err != nil {
		t.Fatal(err)
	}
	return d.Remaining
}

// TestWaitPastDeadlineChargesNothing: a context already past its deadline
// gets its error, and the store is not asked, so nothing is charged.
func TestWaitPastDeadlineChargesNothing(t *testing.T) {
	inBubble(t, func(t *testing.T, l *sluice.Limiter) {
		for _, lim := range []sluice.Limit{sluice.TokenBucket(sluice.PerSecond(1), 3), sluice.LeakyBucket(sluice.PerSecond(2), 3)} {
			ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
			before := remaining(t, l, lim)
			if _, err := l.Wait(ctx, "k", lim); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("%s: got %v, want context.DeadlineExceeded", lim, err)
			}
			cancel()
			if after := remaining(t, l, lim); after != before {
				t.Fatalf("%s: a wait past its deadline charged the key: remaining %d, then %d", lim, before, after)
			}
		}
	})
}

// TestWaitShapedBeyondDeadline: a shaped request whose delay would outlast
// the deadline is refused at once and not charged; one whose delay ends at
// the deadline or before is admitted and waited for.
func TestWaitShapedBeyondDeadline(t *testing.T) {
	inBubble(t, func(t *testing.T, l *sluice.Limiter) {
		lim := sluice.LeakyBucket(sluice.PerSecond(2), 3) // delays 0, 0.5s, 1s, 1.5s
		for range 3 {
			l.Allow(context.Background(), "k", lim)
		}
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
		defer cancel()
		d, err := l.Wait(ctx, "k", lim)
		if !errors.Is(err, sluice.ErrWouldExceedDeadline) || d.Allowed || d.RetryAfter != 800*time.Millisecond {
			t.Fatalf("got %+v, %v; want a refusal with RetryAfter 800ms and ErrWouldExceedDeadline", d, err)
		}
		if waited := time.Since(start); waited != 0 {
			t.Fatalf("slept %s before refusing", waited)
		}
		if r := remaining(t, l, lim); r != 1 {
			t.Fatalf("the refused wait took a place in the queue: %d left, want 1", r)
		}
		// The same delay, 1.5s, with a deadline exactly 1.5s away: admitted,
		// and the deadline firing as the delay ends does not turn it into an
		// error.
		ctx2, cancel2 := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		defer cancel2()
		if d, err := l.Wait(ctx2, "k", lim); err != nil || !d.Allowed || time.Since(start) != 1500*time.Millisecond {
			t.Fatalf("delay within the deadline: %+v %v after %s", d, err, time.Since(start))
		}
	})
}

// TestWaitQueueFullThenShaped: a request refused because the queue is full
// sleeps until there is room, then is admitted with the delay that is left;
// if that delay would outlast the deadline it is refused uncharged.
func TestWaitQueueFullThenShaped(t *testing.T) {
	for _, tc := range []struct {
		timeout time.Duration
		ok      bool
		after   time.Duration
		left    int64 // remaining then: the queue has drained meanwhile
	}{
		{2500 * time.Millisecond, true, 2 * time.Second, 3},         // room after 0.5s, then a 1.5s delay
		{1900 * time.Millisecond, false, 500 * time.Millisecond, 1}, // room after 0.5s, but starts at 2s
	} {
		inBubble(t, func(t *testing.T, l *sluice.Limiter) {
			lim := sluice.LeakyBucket(sluice.PerSecond(2), 3)
			for range 4 {
				l.Allow(context.Background(), "k", lim)
			}
			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), tc.timeout)
			defer cancel()
			d, err := l.Wait(ctx, "k", lim)
			if (err == nil) != tc.ok || d.Allowed != tc.ok || time.Since(start) != tc.after {
				t.Fatalf("timeout %s: %+v %v after %s", tc.timeout, d, err, time.Since(start))
			}
			if !tc.ok && !errors.Is(err, sluice.ErrWouldExceedDeadline) {
				t.Fatalf("timeout %s: %v, want ErrWouldExceedDeadline", tc.timeout, err)
			}
			if r := remaining(t, l, lim); r != tc.left {
				t.Fatalf("timeout %s: %d left, want %d", tc.timeout, r, tc.left)
			}
		})
	}
}

func TestCheckBindingAndAllOrNothing(t *testing.T) {
	inBubble(t, func(t *testing.T, l *sluice.Limiter) {
		ctx := context.Background()
		global := sluice.TokenBucket(sluice.PerSecond(100), 100)
		perUser := sluice.FixedWindow(2, time.Minute)
		check := func(user string) (sluice.Decision, error) {
			return l.Check(ctx,
				sluice.Request{Key: "global", Limit: global, Cost: 1},
				sluice.Request{Key: "user:" + user, Limit: perUser, Cost: 1})
		}
		for i := range 2 {
			d, err := check("ann")
			if err != nil || !d.Allowed || d.Remaining != int64(1-i) || d.Limit != 2 {
				t.Fatalf("check %d: %+v %v (want the per-user decision, the tighter one)", i, d, err)
			}
		}
		d, _ := check("ann")
		if d.Allowed || d.RetryAfter != time.Minute {
			t.Fatalf("third check for ann: %+v, want refused for a minute", d)
		}
		// The refusal charged nothing globally: 98 left, not 97.
		g, _ := l.AllowN(ctx, "global", global, 0)
		if g.Remaining != 98 {
			t.Fatalf("global remaining %d after a refused check, want 98", g.Remaining)
		}
		each := make([]sluice.Decision, 2)
		reqs := []sluice.Request{{Key: "global", Limit: global, Cost: 1}, {Key: "user:bob", Limit: perUser, Cost: 1}}
		// CheckEach reports which request decided: the tighter per-user
		// limit while both admit, the per-user refusal after.
		if d, i, err := l.CheckEach(ctx, reqs, each); err != nil || !d.Allowed || i != 1 || each[0].Remaining != 97 || each[1].Remaining != 1 {
			t.Fatalf("CheckEach: %+v (by %d) %+v %v", d, i, each, err)
		}
		l.CheckEach(ctx, reqs, each)
		if d, i, err := l.CheckEach(ctx, reqs, each); err != nil || d.Allowed || i != 1 || d != each[1] {
			t.Fatalf("CheckEach, bob's third: %+v (by %d) %+v %v", d, i, each, err)
		}
		reqs[0], reqs[1] = reqs[1], reqs[0]
		if d, i, err := l.CheckEach(ctx, reqs, each); err != nil || d.Allowed || i != 0 {
			t.Fatalf("CheckEach, swapped: %+v (by %d) %v", d, i, err)
		}
		if _, _, err := l.CheckEach(ctx, reqs, each[:1]); err == nil {
			t.Fatal("CheckEach accepted a short decision slice")
		}
	})
}

func TestRelease(t *testing.T) {
	inBubble(t, func(t *testing.T, l *sluice.Limiter) {
		ctx := context.Background()
		lim := sluice.Concurrency(1, time.Minute)
		d, _ := l.Allow(ctx, "report", lim)
		if d2, _ := l.Allow(ctx, "report", lim); d2.Allowed {
			t.Fatal("two in flight under concurrency(1)")
		}
		if err := l.Release(ctx, sluice.Request{Key: "report", Limit: lim}, d.Lease); err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx, sluice.Request{Key: "report", Limit: lim}, 0); err != nil {
			t.Fatal("releasing lease 0 (no lease) must be a no-op")
		}
		if d3, _ := l.Allow(ctx, "report", lim); !d3.Allowed {
			t.Fatal("slot not freed by Release")
		}
	})
}
