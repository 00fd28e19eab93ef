package redisstore

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice"
)

// call is one script invocation on its way through the batcher.
type call struct {
	script *script
	keys   []string
	args   []any
	reply  []any
	err    error
	done   chan struct{} // closed when reply or err is set
}

// batcher sends calls in pipelines. Each worker takes one waiting call and
// every other call already queued (up to max), sends them in one pipeline
// and delivers the replies: a lone call goes out at once, in a pipeline of
// one, and under load many calls share each round trip. A go-redis cluster
// pipeline splits itself by node.
type batcher struct {
	client Client
	active atomic.Int64 // calls submitted and not yet answered
	queue  chan *call
	max    int
	stop   chan struct{}
	wg     sync.WaitGroup
	once   sync.Once
}

func newBatcher(client Client, workers, max int) *batcher {
	b := &batcher{client: client, queue: make(chan *call, 4*max), max: max, stop: make(chan struct{})}
	for range workers {
		b.wg.Go(b.work)
	}
	return b
}

// submit sends c. When no other call is in flight it runs c at once, on
// the caller's goroutine, saving two goroutine switches; otherwise it queues
// c for the workers. It fails only if the store is closed or ctx ends first.
func (b *batcher) submit(ctx context.Context, c *call) error {
	select {
	case <-b.stop:
		return sluice.ErrClosed
	default:
	}
	if b.active.Add(1) == 1 {
		b.exec(ctx, []*call{c})
		return nil
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

func (b *batcher) work() {
	batch := make([]*call, 0, b.max)
	for {
		select {
		case <-b.stop:
			return
		case c := <-b.queue:
			batch = append(batch[:0], c)
		}
	fill:
		for len(batch) < b.max {
			select {
			case c := <-b.queue:
				batch = append(batch, c)
			default:
				break fill
			}
		}
		b.exec(context.Background(), batch)
	}
}

// exec runs a batch with EVALSHA and, for calls the server answered with
// NOSCRIPT (after a restart or SCRIPT FLUSH), again with EVAL, which loads
// the script as it runs. A call run on its caller's goroutine gets the
// caller's context (its deadline bounds the round trip); a shared pipeline
// is bounded by the client's own timeouts.
func (b *batcher) exec(ctx context.Context, batch []*call) {
	if len(batch) == 1 { // no pipeline for one call: less work per round trip
		c := batch[0]
		cmd := b.client.EvalSha(ctx, c.script.sha, c.keys, c.args...)
		if err := cmd.Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			cmd = b.client.Eval(ctx, c.script.src, c.keys, c.args...)
		}
		b.deliver(c, cmd)
		return
	}
	cmds := make([]*redis.Cmd, len(batch))
	pipe := b.client.Pipeline()
	for i, c := range batch {
		cmds[i] = pipe.EvalSha(ctx, c.script.sha, c.keys, c.args...)
	}
	pipe.Exec(ctx) // per-command errors are read below
	var retry []int
	for i, cmd := range cmds {
		if err := cmd.Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			retry = append(retry, i)
			continue
		}
		b.deliver(batch[i], cmd)
	}
	if len(retry) == 0 {
		return
	}
	pipe = b.client.Pipeline()
	for _, i := range retry {
		c := batch[i]
		cmds[i] = pipe.Eval(ctx, c.script.src, c.keys, c.args...)
	}
	pipe.Exec(ctx)
	for _, i := range retry {
		b.deliver(batch[i], cmds[i])
	}
}

func (b *batcher) deliver(c *call, cmd *redis.Cmd) {
	c.reply, c.err = cmd.Slice()
	b.active.Add(-1)
	close(c.done)
}
