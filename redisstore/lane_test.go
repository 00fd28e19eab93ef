package redisstore

import (
	"context"
	"net"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
)

// faultyConn is a connection whose next write or next read, when armed,
// fails: a write that sends nothing, or a read after the command went out
// whole (Redis ran it; its reply is lost).
type faultyConn struct {
	net.Conn
	failWrite, failRead *atomic.Int32
}

func (c faultyConn) Write(b []byte) (int, error) {
	if c.failWrite.Add(-1) >= 0 {
		return 0, &net.OpError{Op: "write", Net: "tcp", Err: syscall.EPIPE}
	}
	return c.Conn.Write(b)
}

func (c faultyConn) Read(b []byte) (int, error) {
	if c.failRead.Add(-1) >= 0 {
		_, _ = c.Conn.Read(b) // the reply came: Redis ran the command
		_ = c.Conn.Close()    // and it is lost with the connection
		return 0, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	}
	return c.Conn.Read(b)
}

// laneOptions are options of a client that may have lanes (laneSafe).
func laneOptions() *redis.Options {
	return &redis.Options{MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}}
}

// faultyClient is a client of p with go-redis's default retries, whose
// connections fail as armed; it may have lanes if lanes is set.
func faultyClient(p *redistest.Process, lanes bool) (c *redis.Client, failWrite, failRead *atomic.Int32) {
	failWrite, failRead = new(atomic.Int32), new(atomic.Int32)
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return faultyConn{Conn: nc, failWrite: failWrite, failRead: failRead}, nil
	}
	o := &redis.Options{}
	if lanes {
		o = laneOptions()
	}
	o.Dialer = dial
	return p.Client(o), failWrite, failRead
}

// used returns how much of key's limit Redis holds as used, by a peek.
func used(t *testing.T, s *Store, key string, lim sluice.Limit) int64 {
	t.Helper()
	d, err := s.Take(context.Background(), sluice.Request{Key: key, Limit: lim, Cost: 0})
	if err != nil {
		t.Fatal(err)
	}
	return lim.Capacity() - d.Remaining
}

// A decision is charged once, or not at all, whatever happens to its
// connection: go-redis (MaxRetries 3 by default) does not send a script
// again after its reply was lost, on a lane or through the pool, and
// what failed to be written is sent once more.
func TestLaneChargesOnce(t *testing.T) {
	p := redistest.StartProcess(t)
	lim := sluice.TokenBucket(sluice.PerHour(100), 100)
	for i, lanes := range []bool{true, false} {
		rdb, failWrite, failRead := faultyClient(p, lanes)
		s, err := New(rdb, Config{Prefix: redistest.Prefix(t), NearCache: -1})
		if err != nil {
			t.Fatal(err)
		}
		if (s.batch.base != nil) != lanes {
			t.Fatalf("lanes %v, want %v", s.batch.base != nil, lanes)
		}
		ctx := context.Background()
		key := "k" + strconv.Itoa(i)
		if _, err := s.Take(ctx, sluice.Request{Key: key, Limit: lim, Cost: 1}); err != nil {
			t.Fatal(err) // the library loaded, a lane taken
		}
		failRead.Store(1)
		if _, err := s.Take(ctx, sluice.Request{Key: key, Limit: lim, Cost: 1}); err == nil {
			t.Fatal("a decision whose reply was lost was answered")
		}
		if n := used(t, s, key, lim); n != 2 {
			t.Fatalf("after a lost reply: %d used, want 2 (the lost one charged once, not again)", n)
		}
		failWrite.Store(1)
		d, err := s.Take(ctx, sluice.Request{Key: key, Limit: lim, Cost: 1})
		if err != nil || !d.Allowed {
			t.Fatalf("a decision whose write failed: %+v, %v; want it sent again and admitted", d, err)
		}
		if n := used(t, s, key, lim); n != 3 {
			t.Fatalf("after a failed write: %d used, want 3", n)
		}
		s.Close()
	}
}

// A lane idle for laneFresh goes back to the pool, whose health check
// finds a connection the server closed meanwhile (its timeout, a proxy's,
// a CLIENT KILL): no decision is sent on it and none fails.
func TestLaneIdleIsVetted(t *testing.T) {
	p := redistest.StartProcess(t)
	rdb := p.Client(laneOptions())
	admin := p.Client(&redis.Options{MaxRetries: -1})
	s, err := New(rdb, Config{Prefix: redistest.Prefix(t), NearCache: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.batch.base == nil {
		t.Fatal("no lanes")
	}
	ctx := context.Background()
	lim := sluice.TokenBucket(sluice.PerHour(100), 100)
	for i := range 3 {
		if _, err := s.Take(ctx, sluice.Request{Key: "idle", Limit: lim, Cost: 1}); err != nil {
			t.Fatal(err)
		}
		// every normal client but admin itself (the default of CLIENT KILL with a filter)
		if err := admin.Do(ctx, "client", "kill", "type", "normal").Err(); err != nil {
			t.Fatal(err)
		}
		// every connection of rdb is closed; the lane has been idle for
		// laneFresh when the next decision starts
		time.Sleep(laneFresh + 10*time.Millisecond)
		if _, err := s.Take(ctx, sluice.Request{Key: "idle", Limit: lim, Cost: 1}); err != nil {
			t.Fatalf("round %d: a decision after the lane's connection was closed while idle: %v", i, err)
		}
	}
	if n := used(t, s, "idle", lim); n != 6 {
		t.Fatalf("%d used, want 6", n)
	}
}

// A lane goes to one connection at a time, and a Cluster client has none:
// every decision of many goroutines is counted once on either.
func TestLanesUnderConcurrency(t *testing.T) {
	o := laneOptions()
	o.Addr = redistest.Standalone(t).Options().Addr
	lanes := redis.NewClient(o)
	defer lanes.Close()
	clients := map[string]Client{"standalone": lanes, "cluster": redistest.Cluster(t)}
	for name, c := range clients {
		t.Run(name, func(t *testing.T) {
			s, err := New(c, Config{Prefix: redistest.Prefix(t), Workers: 2, NearCache: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			const goroutines, each = 16, 50
			lim := sluice.FixedWindow(goroutines*each*2, time.Hour)
			var admitted atomic.Int64
			done := make(chan struct{})
			for g := range goroutines {
				go func() {
					defer func() { done <- struct{}{} }()
					for range each {
						d, err := s.Take(context.Background(), sluice.Request{Key: "shared", Limit: lim, Cost: 1})
						if err != nil {
							t.Error(g, err)
							return
						}
						if d.Allowed {
							admitted.Add(1)
						}
					}
				}()
			}
			for range goroutines {
				<-done
			}
			if n, a := used(t, s, "shared", lim), admitted.Load(); n != goroutines*each || a != n {
				t.Fatalf("%d used, %d admitted; want %d each", n, a, goroutines*each)
			}
		})
	}
}

// Lanes go only to clients whose options suit them (laneSafe): a pool
// with room for them, and no maintenance notifications to negotiate.
func TestLaneSafe(t *testing.T) {
	off := &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	auto := &maintnotifications.Config{Mode: maintnotifications.ModeAuto}
	for _, c := range []struct {
		o    redis.Options
		want bool
	}{
		{redis.Options{PoolSize: 10, MaintNotificationsConfig: off}, true},
		{redis.Options{PoolSize: 10, Protocol: 2}, true},
		{redis.Options{PoolSize: 9, MaintNotificationsConfig: off}, false}, // 4 workers and the callers' lane, twice over
		{redis.Options{PoolSize: 10}, false},
		{redis.Options{PoolSize: 10, Protocol: 3, MaintNotificationsConfig: auto}, false},
	} {
		if got := laneSafe(&c.o, 4); got != c.want {
			t.Errorf("laneSafe(pool %d, protocol %d, notifications %v) = %v, want %v", c.o.PoolSize, c.o.Protocol, c.o.MaintNotificationsConfig, got, c.want)
		}
	}
	rdb := redis.NewClient(laneOptions()) // the pool's default size: 10 a CPU
	defer rdb.Close()
	s, err := New(rdb, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.batch.base == nil {
		t.Error("no lanes for a client with default options but notifications off")
	}
}

// A lane whose connection the server closes while it is fresh (a restart,
// a CLIENT KILL) fails the next call on it, uncharged, and no other: the
// call after goes on a connection the pool vetted.
func TestLaneKilledWhileFresh(t *testing.T) {
	p := redistest.StartProcess(t)
	rdb := p.Client(laneOptions())
	admin := p.Client(&redis.Options{MaxRetries: -1})
	s, err := New(rdb, Config{Prefix: redistest.Prefix(t), NearCache: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	lim := sluice.TokenBucket(sluice.PerHour(100), 100)
	admitted := int64(0)
	for i := range 5 {
		if _, err := s.Take(ctx, sluice.Request{Key: "fresh", Limit: lim, Cost: 1}); err != nil {
			t.Fatal(err)
		}
		admitted++
		// every normal client but admin itself (the default of CLIENT KILL with a filter)
		if err := admin.Do(ctx, "client", "kill", "type", "normal").Err(); err != nil {
			t.Fatal(err)
		}
		d, err := s.Take(ctx, sluice.Request{Key: "fresh", Limit: lim, Cost: 1})
		if err == nil && d.Allowed {
			admitted++
		}
		if d, err := s.Take(ctx, sluice.Request{Key: "fresh", Limit: lim, Cost: 1}); err != nil || !d.Allowed {
			t.Fatalf("round %d: the call after a killed lane's: %+v, %v", i, d, err)
		}
		admitted++
	}
	if n := used(t, s, "fresh", lim); n != admitted {
		t.Fatalf("%d used, %d admitted: a failed call was charged, or an admitted one not", n, admitted)
	}
}
