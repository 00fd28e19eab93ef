package failover_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/memstore"
)

// faultStore is a sluice.Store that works (a memstore) until told to fail:
// every call then returns err, or, with hang, blocks until its context
// ends, the way a store behind a dead or frozen server does.
type faultStore struct {
	inner *memstore.Store

	mu   sync.Mutex
	err  error
	hang bool

	takes, releases atomic.Int64 // calls received
	adjustDown      atomic.Bool  // Adjust alone fails, with errDown
}

func newFaultStore(t *testing.T) *faultStore {
	inner, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inner.Close() })
	return &faultStore{inner: inner}
}

func (f *faultStore) set(err error, hang bool) {
	f.mu.Lock()
	f.err, f.hang = err, hang
	f.mu.Unlock()
}

func (f *faultStore) fault(ctx context.Context) error {
	f.mu.Lock()
	err, hang := f.err, f.hang
	f.mu.Unlock()
	if hang {
		<-ctx.Done()
		return ctx.Err()
	}
	return err
}

func (f *faultStore) Take(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	f.takes.Add(1)
	if err := f.fault(ctx); err != nil {
		return sluice.Decision{}, err
	}
	return f.inner.Take(ctx, r)
}

func (f *faultStore) TakeAll(ctx context.Context, rs []sluice.Request, ds []sluice.Decision) error {
	f.takes.Add(1)
	if err := f.fault(ctx); err != nil {
		return err
	}
	return f.inner.TakeAll(ctx, rs, ds)
}

func (f *faultStore) Release(ctx context.Context, r sluice.Request, lease uint64) error {
	f.releases.Add(1)
	if err := f.fault(ctx); err != nil {
		return err
	}
	return f.inner.Release(ctx, r, lease)
}

// Adjust makes a faultStore a sluice.Adjuster, failing as its other calls.
func (f *faultStore) Adjust(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	f.takes.Add(1)
	if err := f.fault(ctx); err != nil {
		return sluice.Decision{}, err
	}
	if f.adjustDown.Load() {
		return sluice.Decision{}, errDown
	}
	return f.inner.Adjust(ctx, r)
}

var errDown = errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")

// transitions records OnStateChange calls.
type transitions struct {
	mu  sync.Mutex
	got []string
}

func (tr *transitions) hook(from, to failover.State) {
	tr.mu.Lock()
	tr.got = append(tr.got, from.String()+">"+to.String())
	tr.mu.Unlock()
}

func (tr *transitions) String() string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return strings.Join(tr.got, " ")
}

func newStore(t *testing.T, primary sluice.Store, cfg failover.Config) *failover.Store {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s, err := failover.New(primary, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func modeAll(m failover.Mode) func(sluice.Request) failover.Mode {
	return func(sluice.Request) failover.Mode { return m }
}

var (
	ctx  = context.Background()
	lim  = sluice.FixedWindow(10, time.Minute)
	unit = sluice.Request{Key: "k", Limit: lim, Cost: 1}
)

func TestOpensAfterConsecutiveFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFaultStore(t)
		var tr transitions
		s := newStore(t, p, failover.Config{ConsecutiveFailures: 3, Mode: modeAll(failover.FailClosed), OnStateChange: tr.hook})
		// Two failures, then a success: the run starts again.
		p.set(errDown, false)
		for range 2 {
			s.Take(ctx, unit)
		}
		p.set(nil, false)
		if _, err := s.Take(ctx, unit); err != nil {
			t.Fatal(err)
		}
		p.set(errDown, false)
		for i := range 3 {
			if s.State() != failover.StateClosed {
				t.Fatalf("open after %d consecutive failures, want 3", i)
			}
			_, err := s.Take(ctx, unit)
			if !errors.Is(err, failover.ErrUnavailable) || !errors.Is(err, errDown) {
				t.Fatalf("failure %d: %v, want ErrUnavailable wrapping the store's error", i, err)
			}
		}
		if s.State() != failover.StateOpen {
			t.Fatalf("state %v after 3 consecutive failures", s.State())
		}
		before := p.takes.Load()
		for range 10 {
			if _, err := s.Take(ctx, unit); !errors.Is(err, failover.ErrUnavailable) {
				t.Fatalf("while open: %v", err)
			}
		}
		if n := p.takes.Load() - before; n != 0 {
			t.Fatalf("%d calls reached the primary while the breaker was open", n)
		}
		st := s.Stats()
		want := failover.Stats{Calls: 6, Failures: 5, ShortCircuited: 10, Opens: 1, DegradedClosed: 15}
		if st != want {
			t.Fatalf("stats %+v, want %+v", st, want)
		}
		if tr.String() != "closed>open" {
			t.Fatalf("transitions %q", tr.String())
		}
	})
}

// TestSuccessesWithoutTheLock: the successes of a slot after its first are
// counted without the breaker's lock, and still end a run of failures and
// count as calls of the window.
func TestSuccessesWithoutTheLock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) { // one slot: the clock stands still
		p := newFaultStore(t)
		s := newStore(t, p, failover.Config{ConsecutiveFailures: 3, FailureRatio: 0.5, MinCalls: 10, Mode: modeAll(failover.FailOpen)})
		call := func(fail bool) {
			p.set(nil, false)
			if fail {
				p.set(errDown, false)
			}
			s.Take(ctx, unit)
		}
		call(false) // recorded under the lock: the slot's next ones are not
		for range 3 {
			call(true)
			call(true)
			call(false) // ends the run, without the lock
		}
		if s.State() != failover.StateClosed {
			t.Fatalf("%v after runs of 2 failures, each ended by a success", s.State())
		}
		// A 7th failure in 11 calls: the ratio, counting the successes
		// made without the lock, opens it (without them, 8 calls are too
		// few to judge).
		call(true)
		if s.State() != failover.StateOpen {
			t.Fatalf("still %v at 7 failures in 11 calls, ratio 0.5", s.State())
		}
	})
}

func TestOpensOnFailureRatio(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFaultStore(t)
		s := newStore(t, p, failover.Config{ConsecutiveFailures: -1, FailureRatio: 0.5, MinCalls: 10, Window: 10 * time.Second})
		call := func(fail bool) {
			if fail {
				p.set(errDown, false)
			} else {
				p.set(nil, false)
			}
			if _, err := s.Take(ctx, unit); err != nil {
				t.Fatal(err) // FailOpen: never an error
			}
		}
		// 4 failures in 8 calls: too few calls to judge.
		for i := range 8 {
			call(i%2 == 1)
		}
		// They leave the window.
		time.Sleep(11 * time.Second)
		for i := range 9 {
			call(i%3 == 0) // 3 failures in 9
		}
		if s.State() != failover.StateClosed {
			t.Fatal("opened on failures that had left the window")
		}
		call(true) // 4 in 10: below the ratio
		if s.State() != failover.StateClosed {
			t.Fatal("opened at 4 failures in 10 calls")
		}
		call(true) // 5 in 11
		if s.State() != failover.StateClosed {
			t.Fatal("opened at 5 failures in 11 calls")
		}
		call(true) // 6 in 12
		if s.State() != failover.StateOpen {
			t.Fatalf("still %v at 6 failures in 12 calls, ratio 0.5", s.State())
		}
	})
}

func TestHalfOpenProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFaultStore(t)
		var tr transitions
		s := newStore(t, p, failover.Config{ConsecutiveFailures: 1, ProbeInterval: time.Second, Timeout: 50 * time.Millisecond, OnStateChange: tr.hook})
		p.set(errDown, false)
		s.Take(ctx, unit)
		if s.State() != failover.StateOpen {
			t.Fatal("not open after one failure")
		}
		time.Sleep(999 * time.Millisecond)
		before := p.takes.Load()
		s.Take(ctx, unit)
		if p.takes.Load() != before {
			t.Fatal("a call reached the primary before the probe interval passed")
		}
		time.Sleep(time.Millisecond)

		// The probe hangs; every other call meanwhile is kept off the primary.
		p.set(nil, true)
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.Take(ctx, unit)
		}()
		synctest.Wait() // the probe is blocked in the primary
		if s.State() != failover.StateHalfOpen {
			t.Fatalf("state %v during the probe", s.State())
		}
		for range 5 {
			d, err := s.Take(ctx, unit)
			if err != nil || !d.Degraded {
				t.Fatalf("during the probe: %+v, %v", d, err)
			}
		}
		if n := p.takes.Load() - before; n != 1 {
			t.Fatalf("%d calls reached the primary in half-open, want the one probe", n)
		}
		<-done // the probe's deadline passed: a failure
		if s.State() != failover.StateOpen {
			t.Fatalf("state %v after a failed probe", s.State())
		}

		// Healed: the next probe, a second later, closes the breaker.
		p.set(nil, false)
		time.Sleep(time.Second)
		d, err := s.Take(ctx, unit)
		if err != nil || d.Degraded || !d.Allowed {
			t.Fatalf("probe on a healed store: %+v, %v", d, err)
		}
		if s.State() != failover.StateClosed {
			t.Fatalf("state %v after a successful probe", s.State())
		}
		want := "closed>open open>half-open half-open>open open>half-open half-open>closed"
		if tr.String() != want {
			t.Fatalf("transitions\n got %s\nwant %s", tr.String(), want)
		}
	})
}

func TestDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFaultStore(t)
		s := newStore(t, p, failover.Config{Timeout: 30 * time.Millisecond, Mode: modeAll(failover.FailClosed)})
		p.set(nil, true)
		start := time.Now()
		_, err := s.Take(ctx, unit)
		if took := time.Since(start); took != 30*time.Millisecond {
			t.Fatalf("a hung call returned after %v, want the 30ms deadline", took)
		}
		if !errors.Is(err, failover.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "within 30ms") {
			t.Fatalf("err = %v", err)
		}
		start = time.Now()
		err = s.TakeAll(ctx, []sluice.Request{unit, {Key: "other", Limit: lim, Cost: 1}}, make([]sluice.Decision, 2))
		if time.Since(start) != 30*time.Millisecond || !errors.Is(err, failover.ErrUnavailable) {
			t.Fatalf("TakeAll: %v after %v", err, time.Since(start))
		}
		start = time.Now()
		err = s.Release(ctx, sluice.Request{Key: "c", Limit: sluice.Concurrency(1, time.Minute)}, 7)
		if time.Since(start) != 30*time.Millisecond || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Release: %v after %v", err, time.Since(start))
		}
		if st := s.Stats(); st.Failures != 3 {
			t.Fatalf("%d failures counted, want 3", st.Failures)
		}
	})
}

func TestNotFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFaultStore(t)
		s := newStore(t, p, failover.Config{ConsecutiveFailures: 1, Timeout: 50 * time.Millisecond, Mode: modeAll(failover.Fallback)})
		cases := []struct {
			name string
			call func() error
			want error
		}{
			{"invalid limit", func() error {
				_, err := s.Take(ctx, sluice.Request{Key: "k", Limit: sluice.FixedWindow(0, time.Second), Cost: 1})
				return err
			}, sluice.ErrInvalidLimit},
			{"cost above capacity", func() error {
				_, err := s.Take(ctx, sluice.Request{Key: "k", Limit: lim, Cost: 11})
				return err
			}, sluice.ErrCostExceedsCapacity},
			{"negative cost", func() error {
				_, err := s.Take(ctx, sluice.Request{Key: "k", Limit: lim, Cost: -1})
				return err
			}, sluice.ErrNegativeCost},
			{"duplicate request", func() error {
				return s.TakeAll(ctx, []sluice.Request{unit, unit}, make([]sluice.Decision, 2))
			}, sluice.ErrDuplicateRequest},
			{"caller cancelled", func() error {
				p.set(nil, true)
				defer p.set(nil, false)
				c, cancel := context.WithCancel(ctx)
				go func() { time.Sleep(10 * time.Millisecond); cancel() }()
				_, err := s.Take(c, unit)
				return err
			}, context.Canceled},
			{"caller's own deadline", func() error {
				p.set(nil, true)
				defer p.set(nil, false)
				c, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
				defer cancel()
				_, err := s.Take(c, unit)
				return err
			}, context.DeadlineExceeded},
		}
		for _, c := range cases {
			for range 3 {
				err := c.call()
				if !errors.Is(err, c.want) {
					t.Fatalf("%s: err = %v, want %v", c.name, err, c.want)
				}
				if errors.Is(err, failover.ErrUnavailable) {
					t.Fatalf("%s: %v was handled as a store failure", c.name, err)
				}
			}
			if s.State() != failover.StateClosed || s.Stats().Failures != 0 {
				t.Fatalf("%s: counted as a failure: state %v, stats %+v", c.name, s.State(), s.Stats())
			}
		}
		if st := s.Stats(); st.DegradedFallback != 0 {
			t.Fatalf("%d requests went to the fallback", st.DegradedFallback)
		}
	})
}

func TestModes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFaultStore(t)
		p.set(errDown, false)
		const probe = 2 * time.Second
		mode := func(r sluice.Request) failover.Mode {
			m, _ := failover.ParseMode(strings.SplitN(r.Key, ":", 2)[0])
			return m
		}
		s := newStore(t, p, failover.Config{ConsecutiveFailures: 1, ProbeInterval: probe, Mode: mode, FallbackScale: 0.5})

		// open: admitted, nothing counted anywhere.
		for range 30 {
			d, err := s.Take(ctx, sluice.Request{Key: "open:a", Limit: lim, Cost: 1})
			if err != nil || !d.Allowed || !d.Degraded || d.Limit != 10 || d.Remaining != 9 {
				t.Fatalf("open: %+v, %v", d, err)
			}
		}
		// closed: ErrUnavailable, Retry-After is the time to the next probe.
		time.Sleep(500 * time.Millisecond)
		_, err := s.Take(ctx, sluice.Request{Key: "closed:a", Limit: lim, Cost: 1})
		var ra interface{ RetryAfter() time.Duration }
		if !errors.Is(err, failover.ErrUnavailable) || !errors.As(err, &ra) || ra.RetryAfter() != probe-500*time.Millisecond {
			t.Fatalf("closed: %v", err)
		}
		// fallback: the limit halved, 10 per minute → 5.
		admitted := 0
		for range 20 {
			d, err := s.Take(ctx, sluice.Request{Key: "fallback:a", Limit: lim, Cost: 1})
			if err != nil || !d.Degraded || d.Limit != 5 {
				t.Fatalf("fallback: %+v, %v", d, err)
			}
			if d.Allowed {
				admitted++
			}
		}
		if admitted != 5 {
			t.Fatalf("fallback admitted %d of 20 under a 10/min limit scaled by 0.5, want 5", admitted)
		}
		// A cost above the scaled capacity is charged as that capacity.
		d, err := s.Take(ctx, sluice.Request{Key: "fallback:b", Limit: lim, Cost: 8})
		if err != nil || !d.Allowed || d.Remaining != 0 {
			t.Fatalf("cost 8 under a scaled capacity of 5: %+v, %v", d, err)
		}
		st := s.Stats()
		if st.DegradedOpen != 30 || st.DegradedClosed != 1 || st.DegradedFallback != 21 {
			t.Fatalf("stats %+v", st)
		}
		// Nothing reached the primary's state: after recovery the open key
		// is fresh.
		p.set(nil, false)
		time.Sleep(probe)
		d, err = s.Take(ctx, sluice.Request{Key: "open:a", Limit: lim, Cost: 0})
		if err != nil || d.Degraded || d.Remaining != 10 {
			t.Fatalf("after recovery: %+v, %v", d, err)
		}
	})
}

func TestTakeAllMixedModes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFaultStore(t)
		p.set(errDown, false)
		mode := func(r sluice.Request) failover.Mode {
			m, _ := failover.ParseMode(strings.SplitN(r.Key, ":", 2)[0])
			return m
		}
		s := newStore(t, p, failover.Config{ConsecutiveFailures: 1, Mode: mode})
		one := sluice.FixedWindow(1, time.Minute)
		req := func(key string) sluice.Request { return sluice.Request{Key: key, Limit: one, Cost: 1} }
		ds := make([]sluice.Decision, 3)

		// A FailClosed request refuses the whole check, and charges nothing.
		err := s.TakeAll(ctx, []sluice.Request{req("fallback:x"), req("open:y"), req("closed:z")}, ds)
		if !errors.Is(err, failover.ErrUnavailable) {
			t.Fatalf("with a closed request: %v", err)
		}
		// Open and fallback: admitted while the fallback admits ...
		err = s.TakeAll(ctx, []sluice.Request{req("fallback:x"), req("open:y"), req("fallback:w")}, ds)
		if err != nil || !ds[0].Allowed || !ds[1].Allowed || !ds[2].Allowed || !ds[0].Degraded || !ds[1].Degraded || !ds[2].Degraded {
			t.Fatalf("first check: %+v, %v", ds, err)
		}
		// ... and refused, all of it, once it refuses one of its part:
		// fallback:x is spent, so fallback:v must not be charged.
		err = s.TakeAll(ctx, []sluice.Request{req("fallback:x"), req("open:y"), req("fallback:v")}, ds)
		d := sluice.New(s)
		if err != nil || ds[0].Allowed {
			t.Fatalf("second check: %+v, %v", ds, err)
		}
		if dv, _ := d.AllowN(ctx, "fallback:v", one, 0); !dv.Allowed {
			t.Fatal("a refused all-or-nothing check charged fallback:v")
		}
	})
}

func TestLeasesReturnToTheirStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFaultStore(t)
		s := newStore(t, p, failover.Config{ConsecutiveFailures: 1, ProbeInterval: time.Second, Mode: modeAll(failover.Fallback)})
		l := sluice.New(s)
		conc := sluice.Concurrency(1, time.Hour)

		primaryLease, err := l.Allow(ctx, "job", conc)
		if err != nil || !primaryLease.Allowed || primaryLease.Degraded {
			t.Fatalf("primary: %+v, %v", primaryLease, err)
		}
		p.set(errDown, false)
		fb, err := l.Allow(ctx, "job", conc)
		if err != nil || !fb.Allowed || !fb.Degraded || fb.Lease == 0 {
			t.Fatalf("fallback: %+v, %v", fb, err)
		}
		if d, _ := l.Allow(ctx, "job", conc); d.Allowed {
			t.Fatal("the fallback admitted a second lease under a limit of 1")
		}
		p.set(nil, false)
		time.Sleep(time.Second)

		// Recovered. The fallback lease goes back to the fallback, not to
		// the primary, whose slot stays held by its own lease.
		releases := p.releases.Load()
		if err := l.Release(ctx, sluice.Request{Key: "job", Limit: conc}, fb.Lease); err != nil {
			t.Fatal(err)
		}
		if p.releases.Load() != releases {
			t.Fatal("a fallback lease was released to the primary")
		}
		if d, _ := l.Allow(ctx, "job", conc); d.Allowed {
			t.Fatalf("the primary's lease was freed by releasing the fallback's: %+v", d)
		}
		if err := l.Release(ctx, sluice.Request{Key: "job", Limit: conc}, primaryLease.Lease); err != nil || p.releases.Load() != releases+1 {
			t.Fatalf("primary release: %v", err)
		}
		if d, _ := l.Allow(ctx, "job", conc); !d.Allowed || d.Degraded {
			t.Fatalf("after the primary lease's release: %+v", d)
		}
		// The fallback's slot is free again too.
		p.set(errDown, false)
		time.Sleep(time.Second)
		if d, _ := l.Allow(ctx, "job", conc); !d.Allowed || !d.Degraded {
			t.Fatalf("fallback after its lease was released: %+v", d)
		}
		// While open, a primary lease is not released (it ends by its TTL).
		if err := s.Release(ctx, sluice.Request{Key: "job", Limit: conc}, primaryLease.Lease); !errors.Is(err, failover.ErrUnavailable) {
			t.Fatalf("release while open: %v", err)
		}
	})
}

func TestLogsOneLinePerTransition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFaultStore(t)
		var buf bytes.Buffer
		var mu sync.Mutex
		logger := slog.New(slog.NewTextHandler(&lockedWriter{w: &buf, mu: &mu}, &slog.HandlerOptions{Level: slog.LevelDebug}))
		s := newStore(t, p, failover.Config{ConsecutiveFailures: 2, ProbeInterval: time.Second, Logger: logger, Mode: modeAll(failover.Fallback)})
		p.set(errDown, false)
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 100 {
					s.Take(ctx, unit)
				}
			})
		}
		wg.Wait()
		time.Sleep(time.Second)
		p.set(nil, false)
		s.Take(ctx, unit)
		synctest.Wait() // the fallback's admissions are charged to the primary
		mu.Lock()
		defer mu.Unlock()
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		if len(lines) != 4 || !strings.Contains(lines[0], "opened") || !strings.Contains(lines[0], "2 consecutive failures") ||
			!strings.Contains(lines[1], "half-open") || !strings.Contains(lines[2], "closed") || !strings.Contains(lines[3], "charged the primary store") {
			t.Fatalf("%d log lines for 801 requests, 3 transitions and one charge:\n%s", len(lines), buf.String())
		}
	})
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func TestConfigErrors(t *testing.T) {
	p := newFaultStore(t)
	for _, c := range []struct {
		cfg  failover.Config
		want string
	}{
		{failover.Config{FailureRatio: 1.5}, "FailureRatio must be at most 1"},
		{failover.Config{FallbackScale: -1}, "FallbackScale must be above 0"},
		{failover.Config{ProbeInterval: -time.Second}, "ProbeInterval must not be negative"},
		{failover.Config{Window: time.Nanosecond}, "Window 1ns is too short"},
		{failover.Config{MinCalls: -1}, "MinCalls must not be negative"},
	} {
		_, err := failover.New(p, c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err = %v, want %q", c.cfg, err, c.want)
		}
	}
	if _, err := failover.New(nil, failover.Config{}); err == nil {
		t.Error("a nil primary was accepted")
	}
	if _, err := failover.ParseMode("half"); err == nil {
		t.Error(`ParseMode("half") succeeded`)
	}
}

// TestScaledLimitsValidate: every limit, scaled by any factor, is still a
// valid limit the fallback store accepts, with counts of at least 1.
func TestScaledLimitsValidate(t *testing.T) {
	limits := []sluice.Limit{
		sluice.FixedWindow(1, time.Second), sluice.FixedWindow(1000, time.Hour),
		sluice.SlidingLog(3, time.Second), sluice.SlidingLog(1_000_000, time.Minute),
		sluice.SlidingWindow(7, time.Minute), sluice.TokenBucket(sluice.PerSecond(1), 1),
		sluice.TokenBucket(sluice.PerSecond(100), 20), sluice.GCRA(sluice.PerMinute(5), 2),
		sluice.LeakyBucket(sluice.PerSecond(10), 0), sluice.LeakyBucket(sluice.PerSecond(10), 5).WithNoDelay(5),
		sluice.WarmUp(sluice.PerSecond(10), 10*time.Second), sluice.WarmUp(sluice.Per(2501999, time.Hour), time.Minute),
		sluice.Concurrency(1, time.Minute), sluice.Concurrency(64, time.Minute),
	}
	for _, l := range limits {
		if err := l.Validate(); err != nil {
			t.Fatalf("%v: %v", l, err)
		}
		for _, f := range []float64{1e-9, 0.01, 1.0 / 3, 0.5, 1, 2, 1000, 1e6} {
			synctest.Test(t, func(t *testing.T) {
				p := newFaultStore(t)
				p.set(errDown, false)
				s := newStore(t, p, failover.Config{FallbackScale: f, Mode: modeAll(failover.Fallback)})
				for _, cost := range []int64{0, 1, l.Capacity()} {
					d, err := s.Take(ctx, sluice.Request{Key: fmt.Sprint(cost), Limit: l, Cost: cost})
					if err != nil || !d.Degraded || d.Limit < 1 {
						t.Fatalf("%v scaled by %v, cost %d: %+v, %v", l, f, cost, d, err)
					}
				}
			})
		}
	}
}
