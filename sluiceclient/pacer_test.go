package sluiceclient

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
)

// A Pacer with a rate spaces attempts one interval apart, on sluice's
// leaky bucket; Burst lets the first ones through at once.
func TestPacerSpacesToARate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var h hits
		tr := serve(t, h.wrap(ok200))
		p, err := NewPacer(PacerConfig{Rate: sluice.PerSecond(10), Burst: 2, IgnoreServer: true})
		if err != nil {
			t.Fatal(err)
		}
		c := newClient(t, tr, Config{Pacer: p})
		start := time.Now()
		for range 12 {
			if code, _, err := get(t, t.Context(), c); code != 200 || err != nil {
				t.Fatalf("%d %v", code, err)
			}
		}
		var offsets []time.Duration
		for _, at := range h.all() {
			offsets = append(offsets, at.Sub(start))
		}
		for i, d := range offsets {
			want := time.Duration(max(0, i-2)) * 100 * time.Millisecond
			if i >= 2 && d != want+100*time.Millisecond || i < 2 && d != 0 {
				t.Fatalf("attempt offsets %v, want two at once then one every 100ms", offsets)
			}
		}
	})
}

// A Pacer that follows the server holds every attempt until the reset of an
// exhausted quota, spreads what remains of a quota over its reset time,
// and refuses at once a turn that would come after the deadline.
func TestPacerFollowsServerRateLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var h hits
		field := `"global";r=0;t=5`
		tr := serve(t, h.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("RateLimit", field)
			ok200(w, r)
		})))
		p, err := NewPacer(PacerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		c := newClient(t, tr, Config{Pacer: p})
		start := time.Now()
		get(t, t.Context(), c) // learns r=0;t=5
		ctx, cancel := context.WithTimeout(t.Context(), 4*time.Second)
		defer cancel()
		if _, _, err := get(t, ctx, c); !errors.Is(err, sluice.ErrWouldExceedDeadline) || time.Since(start) != 0 {
			t.Fatalf("with a 4 s deadline: %v after %s, want ErrWouldExceedDeadline at once", err, time.Since(start))
		}
		field = `"global";r=4;t=2`
		get(t, t.Context(), c) // waits out the 5 s, learns 4 left in 2 s
		get(t, t.Context(), c)
		get(t, t.Context(), c)
		at := h.all()
		got := []time.Duration{at[1].Sub(start), at[2].Sub(at[1]), at[3].Sub(at[2])}
		want := []time.Duration{5 * time.Second, 0, 500 * time.Millisecond}
		if got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
			t.Fatalf("gaps %v, want %v", got, want)
		}
	})
}

func TestPacerConfigErrors(t *testing.T) {
	for _, cfg := range []PacerConfig{
		{Rate: sluice.PerSecond(-1)},
		{Rate: sluice.PerSecond(1), Burst: -1},
	} {
		_, err := NewPacer(cfg)
		var ce *ConfigError
		if !errors.As(err, &ce) {
			t.Errorf("NewPacer(%+v) = %v, want a *ConfigError", cfg, err)
		}
	}
}
