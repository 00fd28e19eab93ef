package bans

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// TestIndex: both indexes list the bans not ended, soonest ending first,
// and forget a lifted one.
func TestIndex(t *testing.T) {
	for name, x := range map[string]Index{"memory": NewMemory(), "redis": NewRedis(redistest.Standalone(t), redistest.Prefix(t))} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			now := time.Now().Truncate(time.Millisecond)
			for key, d := range map[string]time.Duration{"a": time.Minute, "b": time.Second, "ended": -time.Second, "c": time.Hour} {
				if err := x.Record(ctx, key, now.Add(d)); err != nil {
					t.Fatal(err)
				}
			}
			if err := x.Lift(ctx, "c"); err != nil {
				t.Fatal(err)
			}
			es, err := x.List(ctx, now)
			if err != nil {
				t.Fatal(err)
			}
			if len(es) != 2 || es[0].Key != "b" || es[1].Key != "a" || !es[1].Until.Equal(now.Add(time.Minute)) {
				t.Errorf("listed %+v, want b then a (ended and lifted ones left out)", es)
			}
		})
	}
}
