package redisstore

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// A lane is a connection the batcher keeps for its own round trips, taken
// from a plain go-redis Client's pool (Client.Conn): the round trips of a
// busy store then skip the pool's health check, a recvfrom(MSG_PEEK) that
// go-redis makes on every command it takes a connection for (2-3 µs of
// a 50 µs round trip on loopback, and a system call's CPU). Each worker
// has a lane, and so does the caller's goroutine running a lone call
// (batcher.inline); a Cluster client, whose commands go to many nodes, a
// Client that is not a *redis.Client, or one whose options do not suit
// them (see laneSafe), has none and uses its pool.
//
// The check is skipped only while the lane is fresh: used within
// laneFresh. A lane idle longer goes back to the pool, whose health check
// vets it again before its next use, so a connection a server or a proxy
// closed for idleness (Redis's timeout is 1 s at the least) is never sent
// a decision. A lane whose round trip fails otherwise than with a Redis
// reply is dropped; when the failure was the write itself, nothing reached
// Redis, and the call is sent once more through the pool (resend).
// A server that goes away less than laneFresh after a lane's last use
// (a restart, a CLIENT KILL) fails one call on that lane, as it fails the
// calls in flight at that moment; a call is never sent twice where it may
// have run (see once). A lane also goes back to the pool every laneLife,
// busy or not: a connection takes the client's hooks when it is taken, so
// a hook added to the client later reaches the lanes within laneLife.
type lane struct {
	base   *redis.Client // nil: no lanes for this client
	conn   *redis.Conn
	born   time.Time // when conn was taken from the pool
	used   time.Time // when conn last carried a round trip that succeeded
	closed bool      // the store is closed: no new connection
}

const (
	// laneFresh is how long a lane may sit idle and still skip the
	// pool's health check.
	laneFresh = 100 * time.Millisecond
	// laneLife is how long a lane keeps one connection.
	laneLife = time.Second
)

// laneSafe reports whether a client with options o may have lanes, for a
// batcher of workers:
//
//   - its pool has room for them twice over (a lane is a pooled connection
//     kept between round trips: with fewer, the client's other users could
//     wait for one);
//   - its connections never negotiate go-redis's maintenance notifications
//     (RESP2, or MaintNotificationsConfig's Mode disabled, as sluice serve
//     sets it). Otherwise a new connection's setup may change the client's
//     options (it turns the notifications off when the server refuses them)
//     under a lock a Conn does not share: go-redis v9.23 races there.
func laneSafe(o *redis.Options, workers int) bool {
	if o.PoolSize < 2*(workers+1) {
		return false
	}
	return o.Protocol == 2 || o.MaintNotificationsConfig != nil && o.MaintNotificationsConfig.Mode == maintnotifications.ModeDisabled
}

// inlineLane is the lane of the calls run on their callers' goroutines:
// one such call runs at a time (batcher.submit), and one that finds the
// lane busy goes through the pool.
type inlineLane struct {
	mu sync.Mutex
	lane
}

// take returns the lane's connection for a round trip starting now, and
// now; nil if the lane has none to give (no lane, the client has no lanes,
// or the store is closed).
func (l *lane) take() (*redis.Conn, time.Time) {
	if l == nil || l.base == nil || l.closed {
		return nil, time.Time{}
	}
	now := time.Now()
	if l.conn != nil && (now.Sub(l.used) >= laneFresh || now.Sub(l.born) >= laneLife) {
		_ = l.conn.Close() // back to the pool, which vets it before its next use
		l.conn = nil
	}
	if l.conn == nil {
		l.conn, l.born, l.used = l.base.Conn(), now, now
	}
	return l.conn, now
}

// settle records how the round trip started at now on the lane ended: a
// lane whose connection failed is dropped.
func (l *lane) settle(now time.Time, err error) {
	if l == nil || l.conn == nil {
		return
	}
	if err != nil && !isReply(err) {
		_ = l.conn.Close()
		l.conn = nil
		return
	}
	l.used = now
}

// close gives the lane's connection back and takes no other.
func (l *lane) close() {
	if l.conn != nil {
		_ = l.conn.Close()
		l.conn = nil
	}
	l.closed = true
}

// isReply reports whether err is a reply from Redis (the connection
// carried it, and carries the next), not a failure of the connection.
func isReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

// unsent reports whether err says a command was never written whole: the
// write to the connection failed, so Redis cannot have run it.
func unsent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "write"
}

// once is a command of sluice's scripts as go-redis sends it: at most
// once. go-redis sends a command again after a timeout or a broken
// connection (Options.MaxRetries, 3 by default; a Cluster client also
// within MaxRedirects), when the script may already have run: a decision
// would be charged twice, or more. Redirections (MOVED, ASK) are still
// followed; what sluice knows was not run it sends again itself (see
// batcher.one, batcher.send).
type once struct{ *redis.Cmd }

// NoRetry tells go-redis not to send the command again once written.
func (once) NoRetry() bool { return true }

// command builds the command that runs sc's job: its function of the
// library (FCALL), the script by its SHA (EVALSHA) when scripts is set, or
// by its source (EVAL), with the function's name boxed once, when the
// script was assembled (go-redis's FCall boxes it on every call).
func command(ctx context.Context, sc *script, verb string, keys []string, args []any) *redis.Cmd {
	buf := make([]any, 0, 3+len(keys)+len(args))
	switch verb {
	case "fcall":
		buf = append(buf, "fcall", sc.fnArg, len(keys))
	case "evalsha":
		buf = append(buf, "evalsha", sc.sha, len(keys))
	default:
		buf = append(buf, "eval", sc.src, len(keys))
	}
	for _, k := range keys {
		buf = append(buf, k)
	}
	buf = append(buf, args...)
	cmd := redis.NewCmd(ctx, buf...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3) // where a Cluster client finds the key's slot, as FCall sets it
	}
	return cmd
}
