package redistest_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func TestStandalone(t *testing.T) {
	t.Parallel()
	c := redistest.Standalone(t)
	ctx := context.Background()
	p := redistest.Prefix(t)
	other := redistest.Prefix(t)
	want := []string{p + "a", p + "b", p + "c"}
	for _, k := range append(slices.Clone(want), other+"a") {
		if err := c.Set(ctx, k, "1", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { c.Del(context.Background(), append(want, other+"a")...) })
	if got := redistest.Keys(t, c, p); !slices.Equal(got, want) {
		t.Errorf("Keys(%q) = %q, want %q", p, got, want)
	}
	if got := redistest.Keys(t, c, redistest.Prefix(t)); len(got) != 0 {
		t.Errorf("Keys of a fresh prefix = %q, want none", got)
	}
}

func TestCluster(t *testing.T) {
	t.Parallel()
	c := redistest.Cluster(t)
	ctx := context.Background()

	var mu sync.Mutex
	var masters []string
	err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		masters = append(masters, m.Options().Addr)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(masters) < redistest.ClusterMasters {
		t.Fatalf("cluster has %d masters %v, want at least %d", len(masters), masters, redistest.ClusterMasters)
	}

	p := redistest.Prefix(t)
	var want []string
	for i := range 60 {
		want = append(want, fmt.Sprintf("%sk%02d", p, i))
	}
	for _, k := range want {
		if err := c.Set(ctx, k, "1", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, k := range want {
			c.Del(context.Background(), k)
		}
	})

	// The keys spread over the masters, and Keys finds them on all of them.
	holders := map[string]bool{}
	err = c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		keys, _, err := m.Scan(ctx, 0, p+"*", 1000).Result()
		if err != nil {
			return err
		}
		if len(keys) > 0 {
			mu.Lock()
			holders[m.Options().Addr] = true
			mu.Unlock()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(holders) < 2 {
		t.Errorf("60 keys landed on %d master(s), want them spread over several", len(holders))
	}
	slices.Sort(want)
	if got := redistest.Keys(t, c, p); !slices.Equal(got, want) {
		t.Errorf("Keys(%q) returned %d keys, want %d:\n got %q\nwant %q", p, len(got), len(want), got, want)
	}

	// Keys sharing a hash tag can be used together in one command.
	tagged := []string{p + "{t}:a", p + "{t}:b"}
	if err := c.MSet(ctx, tagged[0], "1", tagged[1], "2").Err(); err != nil {
		t.Fatalf("MSET with a shared hash tag: %v", err)
	}
	t.Cleanup(func() { c.Del(context.Background(), tagged...) })
}

func TestPrefix(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 100 {
		p := redistest.Prefix(t)
		if seen[p] {
			t.Fatalf("Prefix returned %q twice", p)
		}
		seen[p] = true
		if !strings.HasPrefix(p, "sluicetest:TestPrefix:") || !strings.HasSuffix(p, ":") {
			t.Fatalf("Prefix = %q, want sluicetest:TestPrefix:<hex>:", p)
		}
	}
	t.Run("odd name/with *glob* [chars] {tag} ünïcode", func(t *testing.T) {
		p := redistest.Prefix(t)
		if strings.ContainsAny(p, " /*?[]{}\\") || strings.ContainsFunc(p, func(r rune) bool { return r > 127 }) {
			t.Errorf("Prefix = %q, want only safe characters", p)
		}
	})
}

// Keys matches its prefix literally, even when the prefix holds glob
// characters.
func TestKeysIsLiteral(t *testing.T) {
	t.Parallel()
	c := redistest.Standalone(t)
	ctx := context.Background()
	base := redistest.Prefix(t)
	p := base + "[ab]*?\\:"
	lookalike := base + "a" // matched by the prefix read as a glob
	keys := []string{p + "x", lookalike + "x"}
	for _, k := range keys {
		if err := c.Set(ctx, k, "1", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { c.Del(context.Background(), keys...) })
	if got := redistest.Keys(t, c, p); !slices.Equal(got, keys[:1]) {
		t.Errorf("Keys(%q) = %q, want %q", p, got, keys[:1])
	}
}

// Without the environment variables, Standalone and Cluster start private
// servers from the redis-server on PATH.
func TestPrivateServers(t *testing.T) {
	t.Setenv(redistest.EnvAddr, "")
	t.Setenv(redistest.EnvCluster, "")
	ctx := context.Background()

	s := redistest.Standalone(t)
	p := redistest.Prefix(t)
	if err := s.Set(ctx, p+"k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got := redistest.Keys(t, s, p); !slices.Equal(got, []string{p + "k"}) {
		t.Errorf("private standalone: Keys = %q", got)
	}

	c := redistest.Cluster(t)
	masters := 0
	var mu sync.Mutex
	if err := c.ForEachMaster(ctx, func(context.Context, *redis.Client) error {
		mu.Lock()
		masters++
		mu.Unlock()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if masters != redistest.ClusterMasters {
		t.Errorf("private cluster has %d masters, want %d", masters, redistest.ClusterMasters)
	}
	var want []string
	for i := range 30 {
		k := fmt.Sprintf("%sk%02d", p, i)
		want = append(want, k)
		if err := c.Set(ctx, k, i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if got := redistest.Keys(t, c, p); !slices.Equal(got, want) {
		t.Errorf("private cluster: Keys = %q, want %q", got, want)
	}

	// A second call shares the same private servers.
	if a, b := s.Options().Addr, redistest.Standalone(t).Options().Addr; a != b {
		t.Errorf("second Standalone connected to %s, first to %s", b, a)
	}
}

// recorder is a testing.TB that records Fatal and Skip instead of acting on
// the real test, and ends its goroutine as they would.
type recorder struct {
	testing.TB
	mu      sync.Mutex
	fatal   string
	skipped bool
}

func (r *recorder) Helper() {}

func (r *recorder) Fatal(args ...any) { r.fail(fmt.Sprint(args...)) }

func (r *recorder) Fatalf(format string, args ...any) { r.fail(fmt.Sprintf(format, args...)) }

func (r *recorder) FailNow() { r.fail("FailNow") }

func (r *recorder) Skip(...any) { r.skip() }

func (r *recorder) Skipf(string, ...any) { r.skip() }

func (r *recorder) SkipNow() { r.skip() }

func (r *recorder) fail(msg string) {
	r.mu.Lock()
	r.fatal = msg
	r.mu.Unlock()
	runtime.Goexit()
}

func (r *recorder) skip() {
	r.mu.Lock()
	r.skipped = true
	r.mu.Unlock()
	runtime.Goexit()
}

// With neither the environment variables nor redis-server, a Redis test fails
// with a message saying what to do; it never skips.
func TestNoServerFailsLoudly(t *testing.T) {
	t.Setenv(redistest.EnvAddr, "")
	t.Setenv(redistest.EnvCluster, "")
	t.Setenv("PATH", t.TempDir())
	for name, f := range map[string]func(testing.TB){
		"Standalone": func(tb testing.TB) { redistest.Standalone(tb) },
		"Cluster":    func(tb testing.TB) { redistest.Cluster(tb) },
	} {
		r := &recorder{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			f(r)
		}()
		<-done
		if r.skipped {
			t.Errorf("%s skipped; a Redis test must fail, not skip", name)
		}
		if r.fatal != redistest.NoServerMessage {
			t.Errorf("%s failed with %q, want %q", name, r.fatal, redistest.NoServerMessage)
		}
	}
}
