// Package sluiceclient is the client half of rate limiting: it makes the
// clients of a rate limited service back off instead of amplifying the
// overload the limiter is refusing.
//
// A limiter is half of a contract. When a service answers 429, clients that
// retry at once, or all at the same moment, turn the limiter into an
// amplifier. A Client retries politely:
//
//   - it retries only 429 Too Many Requests and 503 Service Unavailable
//     (RESOURCE_EXHAUSTED and UNAVAILABLE for gRPC), and only requests that
//     are safe to send twice: idempotent methods, or requests carrying an
//     idempotency key, with a body that can be replayed;
//   - it waits what the server asked for (Retry-After in seconds or as an
//     HTTP-date, the reset of an exhausted RateLimit member, gRPC RetryInfo)
//     plus an exponential backoff with full jitter, so that clients refused
//     together come back spread out;
//   - it never starts a wait that would outlast the request's context
//     deadline: it returns the server's answer at once instead;
//   - it spends a retry budget (at most Config.BudgetRatio of recent
//     requests, plus a small floor, as Finagle's RetryBudget and gRPC's
//     retry throttling do), so that a server refusing everything sees at
//     most 1 + BudgetRatio times the load plus the floor, not 1 + MaxRetries
//     times.
//
// Two more tools are off by default. Adaptive throttling (Config.ThrottleK,
// from the Google SRE book's "Handling Overload") rejects requests locally
// when the server has refused most recent ones, so a dead or saturated
// server stops receiving traffic it would only refuse. A Pacer
// (Config.Pacer) spaces requests to a configured rate, on sluice's own
// limiter, and to the pace the server's RateLimit header fields say remains
// (draft-ietf-httpapi-ratelimit-headers-11, the fields sluice's httplimit
// sends).
//
// Use a Client as an http.Client's Transport, or its interceptors on a gRPC
// connection:
//
//	c, err := sluiceclient.New(sluiceclient.Config{})
//	httpClient := &http.Client{Transport: c}
//	conn, err := grpc.NewClient(target,
//		grpc.WithUnaryInterceptor(c.UnaryClientInterceptor()),
//		grpc.WithStreamInterceptor(c.StreamClientInterceptor()))
//
// docs/client.md shows a retry storm with and without it.
package sluiceclient
