package shed

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

func newLimiter(t *testing.T, cfg Config) *Limiter {
	t.Helper()
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestLimiterClasses(t *testing.T) {
	ctx := context.Background()
	l := newLimiter(t, Config{InitialLimit: 4, CriticalWait: -1})
	var toks []Token
	for i := range 3 { // sheddable may fill ceil(0.75×4) = 3
		tok, err := l.Acquire(ctx, Sheddable)
		if err != nil {
			t.Fatalf("sheddable %d: %v", i+1, err)
		}
		toks = append(toks, tok)
	}
	if _, err := l.Acquire(ctx, Sheddable); !errors.Is(err, ErrShed) {
		t.Fatalf("4th sheddable: %v, want ErrShed", err)
	}
	tok, err := l.Acquire(ctx, Default)
	if err != nil {
		t.Fatalf("default at 3 of 4: %v", err)
	}
	toks = append(toks, tok)
	for _, p := range Priorities {
		if _, err := l.Acquire(ctx, p); !errors.Is(err, ErrShed) {
			t.Fatalf("%v at 4 of 4: %v, want ErrShed", p, err)
		}
	}
	for _, tok := range toks {
		tok.Ignore()
	}
	st := l.Stats()
	want := [nPriorities]ClassStats{
		{Priority: "default", Admitted: 1, Shed: 1},
		{Priority: "critical", Shed: 1},
		{Priority: "sheddable", Admitted: 3, Shed: 2},
	}
	if st.Classes != want || st.InFlight != 0 || st.Limit != 4 {
		t.Fatalf("stats %+v, want classes %+v, nothing in flight, limit 4", st, want)
	}
}

func TestCriticalWaitsAndGoesFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		l := newLimiter(t, Config{InitialLimit: 4, CriticalWait: 50 * time.Millisecond})
		var toks []Token
		for range 4 {
			tok, _ := l.Acquire(ctx, Default)
			toks = append(toks, tok)
		}
		got := make(chan error, 1)
		go func() {
			tok, err := l.Acquire(ctx, Critical)
			toks = append(toks, tok) // read after <-got
			got <- err
		}()
		synctest.Wait() // the critical request waits
		if st := l.Stats(); st.Waiting != 1 {
			t.Fatalf("waiting %d, want 1", st.Waiting)
		}
		if _, err := l.Acquire(ctx, Default); !errors.Is(err, ErrShed) {
			t.Fatalf("default while a critical request waits: %v, want ErrShed", err)
		}
		time.Sleep(20 * time.Millisecond)
		toks[1].Ignore() // its slot goes to the critical request
		if err := <-got; err != nil {
			t.Fatalf("critical: %v", err)
		}
		if st := l.Stats(); st.Classes[1].Waited != 1 || st.InFlight != 4 {
			t.Fatalf("stats %+v: want 1 critical admitted after waiting, 4 in flight", st)
		}
		// Another waits its 50ms and is shed.
		start := time.Now()
		if _, err := l.Acquire(ctx, Critical); !errors.Is(err, ErrShed) || time.Since(start) != 50*time.Millisecond {
			t.Fatalf("critical with no slot: %v after %v, want ErrShed after 50ms", err, time.Since(start))
		}
		// A canceled context ends the wait with its error.
		cctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
		defer cancel()
		if _, err := l.Acquire(cctx, Critical); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("critical with a deadline: %v", err)
		}
		if st := l.Stats(); st.Waiting != 0 || st.Classes[1].Shed != 2 {
			t.Fatalf("stats %+v: want no waiter left, 2 critical shed", st)
		}
		for i, tok := range toks {
			if i != 1 {
				tok.Ignore()
			}
		}
		if st := l.Stats(); st.InFlight != 0 {
			t.Fatalf("%d in flight after all ended", st.InFlight)
		}
	})
}

func TestLimiterLearns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, Config{InitialLimit: 10, MinSamples: 2, Window: 100 * time.Millisecond, Algorithm: &Vegas{}})
		// One window of 10 requests of 10ms each, all at once: the first
		// sample only sets Vegas's baseline.
		serve := func(n int, d time.Duration) {
			toks := make([]Token, n)
			for i := range toks {
				toks[i], _ = l.Acquire(context.Background(), Default)
			}
			time.Sleep(d)
			for _, tok := range toks {
				tok.Done()
			}
		}
		for range 10 {
			serve(10, 10*time.Millisecond)
		}
		// 100ms: one sample closed (rtt 10ms, 10 in flight): baseline.
		if st := l.Stats(); st.Limit != 10 || st.NoLoad != 10*time.Millisecond {
			t.Fatalf("after the first window: %+v", st)
		}
		for range 10 {
			serve(10, 10*time.Millisecond)
		}
		// The second: no queue, grow by 6.
		if st := l.Stats(); st.Limit != 16 || st.RTT != 10*time.Millisecond {
			t.Fatalf("after the second window: %+v", st)
		}
	})
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []Config{
		{MinLimit: -1}, {MinLimit: 10, MaxLimit: 5}, {InitialLimit: 2000}, {SheddableShare: 1.5},
		{SheddableShare: -0.1}, {Window: -1},
	} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v) accepted", c)
		}
	}
	if _, err := ParsePriority("CRITICAL"); err != nil {
		t.Error(err)
	}
	if p, err := ParsePriority("urgent"); err == nil || p != Default {
		t.Errorf("ParsePriority(urgent) = %v, %v", p, err)
	}
}
