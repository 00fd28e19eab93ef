package sluiceclient

import (
	"context"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/deadline"
)

// UnaryClientInterceptor returns an interceptor that retries unary calls
// refused with RESOURCE_EXHAUSTED or UNAVAILABLE, when that is safe: the
// refusal carries a RetryInfo detail (a server, such as sluice's grpclimit,
// that refused before doing the work and says when to come back) or the
// call's outgoing metadata carries the idempotency key
// (Config.IdempotencyKeyHeader, in lower case).
//
// Each retry waits RetryInfo's delay plus a full-jitter exponential
// backoff, within the same retry budget, MaxRetryAfter and deadline rules
// as RoundTrip; when no retry is possible the last status is returned at
// once.
func (c *Client) UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		c.budget.request(time.Now())
		var last error
		for n := 0; ; n++ {
			if err := c.admit(ctx); err != nil {
				if last != nil && ctx.Err() == nil {
					return last
				}
				return err
			}
			err := invoker(ctx, method, req, reply, cc, opts...)
			wait, refused, safe := c.grpcRefusal(ctx, err)
			if !refused || !safe {
				return err
			}
			if wait, ok := c.retryWait(ctx, n, wait); !ok || !c.budget.withdraw(time.Now()) {
				return err
			} else if serr := deadline.Sleep(ctx, wait); serr != nil {
				return status.FromContextError(serr).Err()
			}
			last = err
		}
	}
}

// StreamClientInterceptor returns an interceptor for streaming calls. A
// stream's messages belong to the application, so a refused stream is not
// replayed: its error reaches the caller. What the interceptor does is keep
// the next streams from making things worse: each new stream passes the
// Pacer and adaptive throttling, a stream that fails to open is retried
// like a unary call, and a stream that ends RESOURCE_EXHAUSTED or
// UNAVAILABLE with a RetryInfo holds new streams of this Client until the
// delay has passed (through the Pacer when there is one; else a hold of its
// own). Close the stream (read to io.EOF or cancel its context) for its
// status to be seen.
func (c *Client) StreamClientInterceptor() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		c.budget.request(time.Now())
		for n := 0; ; n++ {
			if err := c.admitStream(ctx); err != nil {
				return nil, err
			}
			cs, err := streamer(ctx, desc, cc, method, opts...)
			if err == nil {
				return &observedStream{ClientStream: cs, c: c}, nil
			}
			wait, refused, safe := c.grpcRefusal(ctx, err)
			if !refused || !safe {
				return nil, err
			}
			if wait, ok := c.retryWait(ctx, n, wait); !ok || !c.budget.withdraw(time.Now()) {
				return nil, err
			} else if serr := deadline.Sleep(ctx, wait); serr != nil {
				return nil, status.FromContextError(serr).Err()
			}
		}
	}
}

// grpcRefusal reads a call's error: whether the server refused it
// (RESOURCE_EXHAUSTED or UNAVAILABLE), the wait its RetryInfo asks for,
// and whether the call is safe to retry. It counts accepted attempts for
// adaptive throttling and tells the Pacer about the wait.
func (c *Client) grpcRefusal(ctx context.Context, err error) (wait time.Duration, refused, safe bool) {
	now := time.Now()
	st, _ := status.FromError(err)
	if code := st.Code(); code != codes.ResourceExhausted && code != codes.Unavailable {
		if c.throttle != nil {
			c.throttle.accepted(now)
		}
		return 0, false, false
	}
	wait, hasInfo := retryInfo(st)
	if hasInfo {
		c.s.Pacer.hold(now.Add(wait))
	}
	md, _ := metadata.FromOutgoingContext(ctx)
	keyed := len(md.Get(strings.ToLower(c.s.IdempotencyKeyHeader))) > 0
	return wait, true, hasInfo || keyed
}

// retryInfo returns the delay of st's RetryInfo detail, if it has one.
func retryInfo(st *status.Status) (time.Duration, bool) {
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			return max(0, ri.GetRetryDelay().AsDuration()), true
		}
	}
	return 0, false
}

// observedStream watches a stream's end for a refusal with RetryInfo.
type observedStream struct {
	grpc.ClientStream
	c *Client
}

// RecvMsg passes to the stream and reads the status it ends with.
func (s *observedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil {
		s.c.streamEnded(err)
	}
	return err
}

// streamEnded learns from the final status of a stream.
func (c *Client) streamEnded(err error) {
	st, ok := status.FromError(err)
	if !ok || err == nil {
		if c.throttle != nil {
			c.throttle.accepted(time.Now()) // io.EOF: a clean end
		}
		return
	}
	if code := st.Code(); code != codes.ResourceExhausted && code != codes.Unavailable {
		if c.throttle != nil {
			c.throttle.accepted(time.Now())
		}
		return
	}
	if wait, ok := retryInfo(st); ok {
		c.holdStreams(time.Now().Add(wait))
	}
}

// holdStreams keeps new streams from starting before t.
func (c *Client) holdStreams(t time.Time) {
	c.streams.hold(t)
}

// admitStream applies the Pacer, adaptive throttling and the hold of
// refused streams to a new stream.
func (c *Client) admitStream(ctx context.Context) error {
	if c.streams != c.s.Pacer {
		if err := c.streams.Wait(ctx); err != nil {
			return err
		}
	}
	return c.admit(ctx)
}
