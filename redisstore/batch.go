package redisstore

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice"
)

// call is one script invocation on its way through the batcher.
type call struct {
	ctx    context.Context // the caller's: a worker drops the call once it ends
	part   bool            // one part of a check across slots: never run on the caller's goroutine
	script *script
	keys   []string
	args   []any
	slot   uint16 // the Redis Cluster slot of keys (0 on a standalone server)
	n      int    // how many requests it decides
	limit  int64  // a lone request's limit (p.Cap), to read a reply packed into one integer (values)
	packed int64  // that reply, or -1: reply holds the values
	reply  []any
	err    error
	done   chan struct{} // closed when reply or err is set (made when queued; see deliver)

	keyBuf [2]string // keys and args of a lone request: its state and log keys
	argBuf [3]any    // the clock, a count, its limit
}

// maxMerge is the most checks one batch script decides. A script blocks the
// server while it runs: 64 single decisions take it a few hundred µs.
const maxMerge = 64

// unit is one command of a pipeline: one call, or several take calls of
// one slot merged into one batch script (see scripts/batch.lua).
type unit struct {
	script *script
	keys   []string
	args   []any
	calls  []*call
}

// merge turns a batch of calls into pipeline commands. Take calls of one
// slot and one clock argument (always, but for a test clock), up to
// maxMerge, become one batch script: their keys concatenated, and as
// arguments the clock, then each call's requests, a call of several
// requests preceded by their count (see scripts/batch.lua); others go
// alone. Order within a slot is kept, so a key's calls are decided in the
// order they were queued.
func merge(batch []*call) []*unit {
	units := make([]*unit, 0, len(batch))
	open := map[uint16]*unit{} // per slot, the unit still taking calls
	take := scripts().take
	for _, c := range batch {
		if c.script.batch == nil {
			units = append(units, &unit{script: c.script, keys: c.keys, args: c.args, calls: []*call{c}})
			continue
		}
		u := open[c.slot]
		if u == nil || len(u.calls) == maxMerge || u.calls[0].args[0] != c.args[0] {
			u = &unit{script: c.script, calls: make([]*call, 0, 8)}
			open[c.slot] = u
			units = append(units, u)
		} else if u.script != c.script && u.script != take {
			u.script = take // calls under different algorithms
		}
		u.calls = append(u.calls, c)
	}
	for _, u := range units {
		if len(u.calls) == 1 {
			c := u.calls[0]
			u.keys, u.args = c.keys, c.args
			continue
		}
		nk, na := 0, 0
		for _, c := range u.calls {
			nk += len(c.keys)
			na += len(c.args)
		}
		u.keys, u.args = make([]string, 0, nk), make([]any, 0, na)
		u.args = append(u.args, u.calls[0].args[0]) // the clock they share
		for _, c := range u.calls {
			u.keys = append(u.keys, c.keys...)
			u.args = append(u.args, c.args[1:]...) // its count if it has several requests, then its requests
		}
		u.script = u.script.batch
	}
	return units
}

// batcher sends calls in pipelines. Each worker takes one waiting call and
// every other call already queued (up to max), sends them in one pipeline
// and delivers the replies: a lone call goes out at once, in a pipeline of
// one, and under load many calls share each round trip. A go-redis cluster
// pipeline splits itself by node.
type batcher struct {
	client  Client
	process processor     // client, when it can send a command sluice builds (command)
	base    *redis.Client // client, when its round trips can go on lanes of their own (see lane)
	inline  inlineLane
	scripts atomic.Bool  // send scripts (EVALSHA) rather than call functions
	active  atomic.Int64 // calls submitted and not yet answered
	trips   atomic.Int64 // round trips the workers made (a pipeline, or a lone command)
	queue   chan *call
	turn    chan struct{} // held by the worker whose small batch is in flight (see work)
	max     int
	stop    chan struct{}
	wg      sync.WaitGroup
	once    sync.Once
}

func newBatcher(client Client, workers, max int) *batcher {
	p, _ := client.(processor)
	base, _ := client.(*redis.Client)
	if base != nil && !laneSafe(base.Options(), workers) {
		base = nil
	}
	b := &batcher{client: client, process: p, base: base, queue: make(chan *call, 4*max), turn: make(chan struct{}, 1), max: max, stop: make(chan struct{})}
	b.inline.base = base
	for range workers {
		b.wg.Go(b.work)
	}
	return b
}

// submit sends c. When no other call is in flight it runs c at once, on
// the caller's goroutine, saving two goroutine switches; otherwise, and
// always for a part of a check across slots (whose outcome must be known
// even if its caller leaves: it may need a refund), it queues c for the
// workers. It fails only if the store is closed or ctx ends first.
func (b *batcher) submit(ctx context.Context, c *call) error {
	select {
	case <-b.stop:
		return sluice.ErrClosed
	default:
	}
	c.ctx = ctx
	if b.active.Add(1) == 1 && !c.part {
		if b.inline.mu.TryLock() {
			b.exec(ctx, []*call{c}, &b.inline.lane)
			b.inline.mu.Unlock()
		} else { // the last inline call has yet to give its lane back
			b.exec(ctx, []*call{c}, nil)
		}
		return nil
	}
	c.done = make(chan struct{})
	select { // the queue has room but when Redis falls behind: ctx.Done (a timer for failover's deadline) only then
	case b.queue <- c:
		return nil
	default:
	}
	select {
	case b.queue <- c:
		return nil
	case <-b.stop:
		b.active.Add(-1)
		return sluice.ErrClosed
	case <-ctx.Done():
		b.active.Add(-1)
		return ctx.Err()
	}
}

func (b *batcher) close() {
	b.once.Do(func() { close(b.stop) })
	b.wg.Wait()
	b.inline.mu.Lock()
	b.inline.close()
	b.inline.mu.Unlock()
	// Fail whatever is still queued.
	for {
		select {
		case c := <-b.queue:
			c.err = sluice.ErrClosed
			b.active.Add(-1)
			close(c.done)
		default:
			return
		}
	}
}

// work sends the calls queued. One worker at a time, the one holding the
// turn, takes calls from the queue: a waiting call and every other call
// already queued (up to max). A batch of several calls keeps the turn
// through its round trip, so that the calls coming meanwhile go together in
// the next: calls are coming faster than the workers take them one by one,
// and a round trip costs sluice and Redis far more CPU than a call merged
// into one (idle workers each taking the first call to come sent most
// calls alone). A lone call lets the next worker take the next call at
// once, as does a backlog (maxMerge calls or more: a batch script's worth),
// so that light traffic waits for no other call's round trip.
func (b *batcher) work() {
	batch := make([]*call, 0, b.max)
	ln := lane{base: b.base}
	defer ln.close()
	for {
		select {
		case b.turn <- struct{}{}:
		case <-b.stop:
			return
		}
		select {
		case c := <-b.queue:
			batch = b.fill(b.add(batch[:0], c))
		case <-b.stop:
			<-b.turn
			return
		}
		if len(batch) < 2 || len(batch) >= maxMerge {
			<-b.turn
			if len(batch) > 0 {
				b.exec(context.Background(), batch, &ln)
			}
			continue
		}
		b.exec(context.Background(), batch, &ln)
		<-b.turn
	}
}

// fill adds the calls already queued to batch, up to max.
func (b *batcher) fill(batch []*call) []*call {
	for len(batch) < b.max {
		select {
		case c := <-b.queue:
			batch = b.add(batch, c)
		default:
			return batch
		}
	}
	return batch
}

// add appends c to batch unless its caller has given up on it (its context
// ended while it waited in the queue): such a call is answered with the
// context's error and never sent, so a queue that filled while Redis did
// not answer drains at once instead of charging Redis for decisions nobody
// waits for.
func (b *batcher) add(batch []*call, c *call) []*call {
	if err := c.ctx.Err(); err != nil {
		b.deliver(c, nil, err)
		return batch
	}
	return append(batch, c)
}

// exec runs a batch: one call alone, several in a pipeline. A call run on
// its caller's goroutine gets the caller's context (its deadline bounds the
// round trip); a worker's pipeline is bounded by the client's own timeouts,
// so that its replies are read and the outcome of every call it sent is
// known, which the refunds of a check across slots need. Either way the
// callers wait no longer than their own contexts allow (Store.run and
// Store.wait select on them). ln is the lane of the goroutine running it,
// nil if it has none.
func (b *batcher) exec(ctx context.Context, batch []*call, ln *lane) {
	b.trips.Add(1)
	if len(batch) == 1 { // no pipeline for one call: less work per round trip
		c := batch[0]
		reply, err := c.values(b.one(ctx, ln, c.script, c.keys, c.args))
		b.deliver(c, reply, err)
		return
	}
	b.send(ctx, ln, merge(batch), true)
}

// caller is what sends a command: the client, or a pipeline.
type caller interface {
	EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd
	FCall(ctx context.Context, function string, keys []string, args ...any) *redis.Cmd
}

// processor sends a command built by its caller. go-redis's clients and
// pipelines are processors; a Client that is not has its commands built by
// FCall.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// issue sends sc's job through c, a client or a pipeline, as built by
// command: at most once (see once). p is c as a processor, nil if it is
// none: a Client that is not has its commands built by FCall and EvalSha.
func (b *batcher) issue(ctx context.Context, c caller, p processor, sc *script, keys []string, args []any) *redis.Cmd {
	if p == nil {
		if b.scripts.Load() {
			return c.EvalSha(ctx, sc.sha, keys, args...)
		}
		return c.FCall(ctx, sc.fn, keys, args...)
	}
	verb := "fcall"
	if b.scripts.Load() {
		verb = "evalsha"
	}
	cmd := command(ctx, sc, verb, keys, args)
	_ = p.Process(ctx, once{cmd}) // its error is cmd's
	return cmd
}

// one sends sc's job alone and, when the server lacks sluice's code, makes
// up for it and sends it again: for NOSCRIPT (a script cache emptied by a
// restart or SCRIPT FLUSH) the script itself with EVAL, which loads it as it
// runs; for a missing function (a restart without persistence, FUNCTION
// FLUSH, a new node) it loads the library first; and on a server without
// functions it turns to scripts for good. A TRYAGAIN (its keys on both
// sides of a Cluster slot being moved: not run) is sent again after a
// pause. The first send goes on ln's connection if it has one (see lane).
func (b *batcher) one(ctx context.Context, ln *lane, sc *script, keys []string, args []any) *redis.Cmd {
	sc, args = alone(sc, args)
	cmd := b.first(ctx, ln, sc, keys, args)
	for range 2 {
		err := cmd.Err()
		switch {
		case err == nil:
			return cmd
		case strings.HasPrefix(err.Error(), "NOSCRIPT"):
			return b.eval(ctx, sc, keys, args)
		case strings.HasPrefix(err.Error(), "TRYAGAIN"):
			if !pause(ctx, tryAgainPause) {
				return cmd
			}
		case noFunctions(err):
			b.scripts.Store(true)
		case strings.Contains(err.Error(), "Function not found"):
			if lerr := b.load(ctx); lerr != nil {
				if !noFunctions(lerr) {
					cmd.SetErr(lerr) // why it is missing (READONLY on a replica, say)
					return cmd
				}
				b.scripts.Store(true)
			}
		default:
			return cmd
		}
		cmd = b.issue(ctx, b.client, b.process, sc, keys, args)
	}
	return cmd
}

// first sends sc's job on ln's connection if it has one, else through
// the client's pool. A command whose write failed never reached Redis: it
// is sent once more, through the pool (go-redis does not, see once).
func (b *batcher) first(ctx context.Context, ln *lane, sc *script, keys []string, args []any) *redis.Cmd {
	conn, now := ln.take()
	var cmd *redis.Cmd
	if conn == nil {
		cmd = b.issue(ctx, b.client, b.process, sc, keys, args)
	} else {
		cmd = b.issue(ctx, conn, conn, sc, keys, args)
		ln.settle(now, cmd.Err())
	}
	if err := cmd.Err(); err != nil && unsent(err) && ctx.Err() == nil {
		return b.issue(ctx, b.client, b.process, sc, keys, args)
	}
	return cmd
}

// eval sends sc's source (EVAL, after NOSCRIPT), at most once as issue
// sends.
func (b *batcher) eval(ctx context.Context, sc *script, keys []string, args []any) *redis.Cmd {
	if b.process == nil {
		return b.client.Eval(ctx, sc.src, keys, args...)
	}
	cmd := command(ctx, sc, "eval", keys, args)
	_ = b.process.Process(ctx, once{cmd})
	return cmd
}

// tryAgainPause is how long a call Redis answered TRYAGAIN waits before
// it is sent again: a slot's keys move in milliseconds.
const tryAgainPause = 10 * time.Millisecond

// pause waits d, or until ctx ends (false).
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// alone returns what to send for a call of sc with args: for a take call
// of one request on the server's clock (args: the clock "", then the
// request's argument), sc's one.lua and the request's argument alone.
func alone(sc *script, args []any) (*script, []any) {
	if sc.one != nil && len(args) == 2 && args[0] == "" {
		return sc.one, args[1:]
	}
	return sc, args
}

// missing reports whether err says the server lacks sluice's code (see
// one).
func missing(err error) bool {
	return err != nil && (strings.HasPrefix(err.Error(), "NOSCRIPT") ||
		strings.Contains(err.Error(), "Function not found") || noFunctions(err))
}

// noFunctions reports whether err says the server cannot run or load
// functions: one without them answers "unknown command", an ACL that
// denies FCALL or FUNCTION answers NOPERM naming the command.
func noFunctions(err error) bool {
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "unknown command") ||
		strings.HasPrefix(msg, "noperm") && (strings.Contains(msg, "fcall") || strings.Contains(msg, "function"))
}

// load loads the function library: on every master of a Cluster, else on
// the server.
func (b *batcher) load(ctx context.Context) error {
	if cc, ok := b.client.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			return c.FunctionLoadReplace(ctx, scripts().lib.src).Err()
		})
	}
	return b.client.FunctionLoadReplace(ctx, scripts().lib.src).Err()
}

// send runs units in one pipeline. If again is set, the units Redis
// refused before running them are sent once more, a batch script's calls
// one by one: TRYAGAIN (its keys are on both sides of a migrating Cluster
// slot) and CROSSSLOT, which merging caused, and MOVED or ASK, which
// go-redis returns once its redirections run out (while a slot moves, a
// batch can spend them on TRYAGAIN). So merging never fails a call that
// would succeed alone. Other errors are not retried: after a timeout or a
// broken connection the script may have run. The pipeline goes on ln's
// connection if it has one (see lane).
func (b *batcher) send(ctx context.Context, ln *lane, units []*unit, again bool) {
	cmds := make([]*redis.Cmd, len(units))
	conn, now := ln.take()
	var pipe redis.Pipeliner
	if conn != nil {
		pipe = conn.Pipeline()
	} else {
		pipe = b.client.Pipeline()
	}
	for i, u := range units {
		sc, args := alone(u.script, u.args)
		cmds[i] = b.issue(ctx, pipe, pipe, sc, u.keys, args)
	}
	_, err := pipe.Exec(ctx) // per-command errors are read below
	if conn != nil {
		ln.settle(now, err)
	}
	var later []*unit
	for i, cmd := range cmds {
		err := cmd.Err()
		switch {
		case missing(err):
			// rare (after a restart or a flush): sent again one by one
			b.answer(units[i], b.one(ctx, nil, units[i].script, units[i].keys, units[i].args))
		case err != nil && again && notRun(err):
			for _, c := range units[i].calls {
				later = append(later, &unit{script: c.script, keys: c.keys, args: c.args, calls: []*call{c}})
			}
		default:
			b.answer(units[i], cmd)
		}
	}
	if len(later) > 0 {
		b.send(ctx, nil, later, false)
	}
}

// notRun reports whether err is a reply Redis sends instead of running a
// script: a redirection, or keys it cannot serve together.
func notRun(err error) bool {
	msg := err.Error()
	for _, p := range []string{"TRYAGAIN", "CROSSSLOT", "MOVED ", "ASK "} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// answer delivers a command's reply to the calls of its unit: the whole
// reply to a lone call; to each call of a batch script its part of the
// flat reply, which is, per call in order, a stride (6 or 8 values per
// request) and that many values for each of the call's requests.
func (b *batcher) answer(u *unit, cmd *redis.Cmd) {
	if len(u.calls) == 1 {
		reply, err := u.calls[0].values(cmd)
		b.deliver(u.calls[0], reply, err)
		return
	}
	reply, err := cmd.Slice()
	parts := make([][]any, len(u.calls))
	pos := 0
	for i, c := range u.calls {
		if err != nil {
			break
		}
		if parts[i], err = splitReply(reply, &pos, c.n); err != nil {
			err = fmt.Errorf("%w (check %d of a batch of %d)", err, i+1, len(u.calls))
		}
	}
	if err == nil && pos != len(reply) {
		err = fmt.Errorf("%w: batch reply has %d values, its %d checks %d", errBadReply, len(reply), len(u.calls), pos)
	}
	for i, c := range u.calls {
		if err != nil {
			b.deliver(c, nil, err)
		} else {
			b.deliver(c, parts[i], nil)
		}
	}
}

// values returns the reply of c's command as a list of values. A take
// call of one request that a token bucket, GCRA or a fixed or sliding
// window admits is answered with one integer, reset x (limit + 1) +
// remaining, the limit being the request's capacity (see packed in
// scripts/reply.lua): kept in c.packed, with no values (see decode).
func (c *call) values(cmd *redis.Cmd) ([]any, error) {
	v, err := cmd.Result()
	if err != nil {
		return nil, err
	}
	switch v := v.(type) {
	case []any:
		return v, nil
	case int64:
		if c.script.batch == nil || c.n != 1 || c.limit <= 0 || v < 0 { // not a take call of one request
			return nil, fmt.Errorf("%w: %d for a call of %d requests", errBadReply, v, c.n)
		}
		c.packed = v
		return nil, nil
	}
	return nil, fmt.Errorf("%w: %T", errBadReply, v)
}

// unpacked returns the decision of a reply packed into one integer
// (values), and whether c's reply was one: an admission with no retry and
// no delay.
func (c *call) unpacked() (sluice.Decision, bool) {
	if c.packed < 0 {
		return sluice.Decision{}, false
	}
	base := c.limit + 1
	return sluice.Decision{
		Allowed:    true,
		Limit:      c.limit,
		Remaining:  c.packed % base,
		ResetAfter: time.Duration(c.packed/base) * time.Microsecond,
	}, true
}

// result returns c's reply as a list of values, a packed one spelled out
// as the six values of its decision.
func (c *call) result() []any {
	if c.packed < 0 {
		return c.reply
	}
	base := c.limit + 1
	return []any{int64(1), c.limit, c.packed % base, int64(0), c.packed / base, int64(0)}
}

// decode writes c's reply into into, as decode does with a list of values,
// a packed reply (unpacked) included.
func (c *call) decode(into any) ([]string, error) {
	d, ok := c.unpacked()
	if !ok {
		return decode(c.reply, into)
	}
	switch v := into.(type) {
	case []sluice.Decision:
		if len(v) == 1 {
			v[0] = d
			return nil, nil
		}
	case decisionView:
		if len(v.idx) == 1 {
			v.ds[v.idx[0]] = d
			return nil, nil
		}
	}
	return nil, fmt.Errorf("%w: one decision packed for a call of %d requests", errBadReply, c.n)
}

// splitReply returns the n requests' part of a batch reply at *pos and
// moves *pos past it.
func splitReply(reply []any, pos *int, n int) ([]any, error) {
	if *pos >= len(reply) {
		return nil, fmt.Errorf("%w: batch reply ends at %d values", errBadReply, len(reply))
	}
	stride, ok := reply[*pos].(int64)
	if !ok || (stride != 6 && stride != 8) {
		return nil, fmt.Errorf("%w: batch reply value %d is %v, want a stride of 6 or 8", errBadReply, *pos, reply[*pos])
	}
	end := *pos + 1 + int(stride)*n
	if end > len(reply) {
		return nil, fmt.Errorf("%w: batch reply ends at %d values, want %d", errBadReply, len(reply), end)
	}
	part := reply[*pos+1 : end]
	*pos = end
	return part, nil
}

// deliver answers c. A call never queued (run on its caller's goroutine,
// which alone has it) has no channel of its own until then: it gets the
// one closed channel all share, one allocation less per lone decision.
func (b *batcher) deliver(c *call, reply []any, err error) {
	c.reply, c.err = reply, err
	b.active.Add(-1)
	if c.done == nil {
		c.done = delivered
		return
	}
	close(c.done)
}

// delivered is the closed channel of the calls answered where they were
// made (see deliver).
var delivered = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()
