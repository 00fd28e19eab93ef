package rls

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/internal/algo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The default bounds on one ShouldRateLimit request (Bounds). A request
// beyond them is refused with InvalidArgument, so nothing a client sends can
// make the service allocate or store without bound.
const (
	MaxDescriptors = 64   // descriptors per request
	MaxEntries     = 16   // entries per descriptor
	MaxLength      = 1024 // bytes of a domain, an entry key or an entry value
)

// Bounds limit what one ShouldRateLimit request may hold; a request beyond
// them is refused with InvalidArgument (ServerCodec refuses it having
// decoded no more descriptors and entries than they allow). A zero field
// means its default: MaxDescriptors, MaxEntries, MaxLength. The largest
// accepted are 1,024 descriptors of 64 entries, strings of 64 KiB (a
// descriptor nested deeper than 64 levels in a config is ignored).
type Bounds struct {
	Descriptors int // descriptors per request
	Entries     int // entries per descriptor
	Length      int // bytes of a domain, an entry key or an entry value
}

// ceiling is the largest Bounds a Service accepts.
var ceiling = Bounds{Descriptors: 1024, Entries: 64, Length: 64 << 10}

// withDefaults returns b with its zero fields set to their defaults.
func (b Bounds) withDefaults() Bounds {
	if b.Descriptors == 0 {
		b.Descriptors = MaxDescriptors
	}
	if b.Entries == 0 {
		b.Entries = MaxEntries
	}
	if b.Length == 0 {
		b.Length = MaxLength
	}
	return b
}

// Check reports a field of b below 0 or above the largest accepted.
func (b Bounds) Check() error {
	for _, f := range []struct {
		name     string
		v, limit int
	}{{"descriptors", b.Descriptors, ceiling.Descriptors}, {"entries", b.Entries, ceiling.Entries}, {"length", b.Length, ceiling.Length}} {
		if f.v < 0 || f.v > f.limit {
			return fmt.Errorf("rls: request bounds: %s %d: want 1 to %d, or 0 for the default", f.name, f.v, f.limit)
		}
	}
	return nil
}

// Options configures a Service. The zero value is ready to use; each field
// documents its default.
type Options struct {
	// Logger receives the configuration snapshot on New and Swap and the
	// aggregated lines about shadow-mode refusals, unknown domains and
	// store errors. Default slog.Default().
	Logger *slog.Logger

	// KeyText, if set, renders a store key in the refusal logs (see
	// decide.Config.KeyText). Default the key's values after its domain,
	// masked: decide.StoreKeyText(key, 3, false).
	KeyText func(key string) string

	// Runtime, if set, is the table of overrides set while sluice runs
	// (sluice serve's PUT /admin/overrides/{limit}/{key}): {limit} is a
	// rate_limit's name, {key} the value of a descriptor's last entry.
	// Default none.
	Runtime decide.Runtime

	// LogInterval is how often the aggregated lines are written: counts
	// since the previous line, one line per kind, never one per request.
	// Default 1m.
	LogInterval time.Duration

	// Observe, if set, is called once per descriptor of every answered
	// request, after the decision, so that a server can export metrics
	// (Outcome.Rule has bounded cardinality: it is a configured descriptor
	// path, never a value a client sent). It must be fast and safe for
	// concurrent use.
	Observe func(domain string, o Outcome)

	// ResponseHeaders adds the RateLimit-Policy and RateLimit header
	// fields of draft-ietf-httpapi-ratelimit-headers-11 (the form sluice's
	// httplimit sends) to response_headers_to_add, and Retry-After when the
	// request is over its limit. Envoy adds them to the response it sends
	// downstream. Default false, as in envoyproxy/ratelimit.
	ResponseHeaders bool

	// Counting is how the limits of a request are charged in a domain
	// whose file does not say (its top-level sluice.counting):
	// CountAllOrNothing (the default, also for 0) or CountPeer,
	// envoyproxy/ratelimit's way.
	Counting Counting

	// StopIncrementWhenOverLimit, under CountPeer, reads the counters of a
	// request first and, if any descriptor would be over its limit,
	// charges only those that would be, as envoyproxy/ratelimit's
	// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true (one more store round
	// trip per descriptor). Default false.
	StopIncrementWhenOverLimit bool

	// ShadowMode answers every request OK overall while its descriptors
	// keep their statuses (OVER_LIMIT included) and counters keep counting,
	// as envoyproxy/ratelimit's SHADOW_MODE=true: a way to run a new
	// service beside the one in charge and compare before it enforces.
	// Default false.
	ShadowMode bool

	// QuotaMode makes every limit a quota_mode one, as
	// envoyproxy/ratelimit's QUOTA_MODE=true: each descriptor is decided
	// on its own, and the request is over only when every descriptor but
	// the unlimited ones is OVER_LIMIT (one that no limit matched counts
	// as within). Default false.
	QuotaMode bool

	// Bounds limit the size of one request. Default MaxDescriptors
	// descriptors of MaxEntries entries, strings of MaxLength bytes. New
	// returns the error of Bounds that fail Bounds.Check.
	Bounds Bounds

	// Now replaces the clock used for limits that refuse everything
	// (requests_per_unit: 0), which never reach the store, to compute
	// their duration_until_reset. For tests. Default time.Now.
	Now func() time.Time
}

// Result is what happened to one descriptor of a request.
type Result uint8

const (
	// ResultNoLimit: no configured descriptor matched (or the domain is
	// unknown); the descriptor is OK with no limit.
	ResultNoLimit Result = iota + 1
	// ResultUnlimited: the matched descriptor is unlimited: true.
	ResultUnlimited
	// ResultReplaced: the matched limit was replaced by another limit of
	// the same request (replaces); it was neither checked nor charged.
	ResultReplaced
	// ResultOK: the limit admitted the request and was charged.
	ResultOK
	// ResultOverLimit: the limit refused the request. Under
	// CountAllOrNothing its hits were charged to it all the same, into a
	// bounded debt (see the package documentation); nothing of the request
	// was charged to its other limits.
	ResultOverLimit
	// ResultShadowOverLimit: a shadow_mode limit was over; the descriptor
	// reports OK.
	ResultShadowOverLimit
	// ResultNotCharged: the limit would have admitted the request, but
	// another descriptor refused it, so nothing was charged (all-or-nothing).
	ResultNotCharged
	// ResultRefunded: the descriptor gave its hits back (is_negative_hits):
	// its counter was lowered by them, never below empty. It is OK.
	ResultRefunded
)

var resultNames = [...]string{"", "no_limit", "unlimited", "replaced", "ok", "over_limit", "shadow_over_limit", "not_charged", "refunded"}

// String returns the snake_case name of r, for metric labels.
func (r Result) String() string {
	if int(r) < len(resultNames) && r != 0 {
		return resultNames[r]
	}
	return "result(" + strconv.Itoa(int(r)) + ")"
}

// Outcome describes the decision for one descriptor of a request.
type Outcome struct {
	// Rule is the configured descriptor path that matched, such as
	// "remote_address" or "path=/api*/user"; "limit_override" for a
	// descriptor that carried its own limit; "" when nothing matched.
	Rule string
	// Name is the matched rate_limit's name, if it has one.
	Name string
	// Value is, when the matched descriptor sets detailed_metric: true, the
	// value the request gave for its last entry (unbounded cardinality:
	// that is what detailed_metric asks for). Empty otherwise.
	Value string
	// Result is what happened.
	Result Result
	// Shadow reports that the matched limit is in shadow_mode.
	Shadow bool
	// Hits is the cost charged or asked for: hits_addend.
	Hits uint64
	// Limit is the sluice limit checked (zero when none was, and for a
	// requests_per_unit of 0, which refuses without a store).
	Limit sluice.Limit
	// Degraded is the decision's Degraded flag (see the failover package).
	Degraded bool
	// Within, Near and Over split Hits as envoyproxy/ratelimit's
	// within_limit, near_limit and over_limit statistics do, for a fixed
	// window counted under CountPeer (zero otherwise): Within the hits of
	// an admitted descriptor, Near those that took its count past 80% of
	// the limit (NEAR_LIMIT_RATIO) without passing the limit, Over those
	// past the limit (all of them once the count was at the limit).
	Within, Near, Over uint64
}

// Service is the Envoy rate limit service (envoy.service.ratelimit.v3)
// over a sluice Limiter: it matches each descriptor of a request against
// the configuration, charges every matched limit all-or-nothing in one
// sluice Check, and answers with a status per descriptor.
//
// It is safe for concurrent use. Swap replaces the configuration atomically;
// requests in flight finish under the configuration they started with.
type Service struct {
	dc   *decide.Decider // every charge goes through it, in both countings
	cfg  atomic.Pointer[Config]
	opts Options
	logs *aggregator
	adj  *adjuster    // the charges outside the checks: refunds, debits
	peer *peerCounter // the domains counted under CountPeer
}

// New returns a Service that decides with limiter under cfg (nil serves no
// domains: every request is OK). It logs a snapshot of cfg. It fails on a
// nil limiter and on Bounds that fail Bounds.Check.
func New(limiter *sluice.Limiter, cfg *Config, opts Options) (*Service, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.LogInterval <= 0 {
		opts.LogInterval = time.Minute
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if cfg == nil {
		cfg = &Config{}
	}
	if err := opts.Bounds.Check(); err != nil {
		return nil, err
	}
	opts.Bounds = opts.Bounds.withDefaults()
	// A store error is answered UNAVAILABLE (on_error closed), so that
	// Envoy's own failure_mode_deny decides, as with envoyproxy/ratelimit.
	if opts.KeyText == nil {
		opts.KeyText = func(key string) string { return decide.StoreKeyText(key, 3, false) }
	}
	dc, err := decide.New(limiter, decide.Config{OnError: sluice.FailClosed, Component: "rls", Logger: opts.Logger, KeyText: opts.KeyText})
	if err != nil {
		return nil, fmt.Errorf("rls: %w", err)
	}
	s := &Service{dc: dc, opts: opts, logs: newAggregator(opts.Logger, opts.LogInterval)}
	s.adj = &adjuster{dc: dc, logs: s.logs}
	s.peer = &peerCounter{dc: dc, adj: s.adj, stopWhenOver: opts.StopIncrementWhenOverLimit}
	s.cfg.Store(cfg)
	opts.Logger.Info("rls: configuration loaded", "domains", cfg.String())
	return s, nil
}

// Swap makes cfg the configuration of every request that starts after it
// returns, and logs its snapshot. Counters carry over for limits that did
// not change (state is kept per key and limit). A nil cfg is ignored.
func (s *Service) Swap(cfg *Config) {
	if cfg == nil {
		return
	}
	s.cfg.Store(cfg)
	s.opts.Logger.Info("rls: configuration swapped", "domains", cfg.String())
}

// Config returns the configuration in use.
func (s *Service) Config() *Config { return s.cfg.Load() }

// Close writes the aggregated log lines still pending. The Service keeps
// answering after Close; it only stops logging later aggregates promptly.
func (s *Service) Close() { s.logs.close() }

// Register registers the service on a gRPC server as
// envoy.service.ratelimit.v3.RateLimitService. Give the server
// ServerCodec, for the service's own codec.
func (s *Service) Register(r grpc.ServiceRegistrar) {
	r.RegisterService(&serviceDesc, s)
}

var wireRequests = sync.Pool{New: func() any { return new(wireRequest) }}

// serviceDesc is rlspb.RateLimitService_ServiceDesc with a handler that
// decodes the request into a wireRequest (see ServerCodec).
var serviceDesc = grpc.ServiceDesc{
	ServiceName: rlspb.RateLimitService_ServiceDesc.ServiceName,
	HandlerType: (*rlspb.RateLimitServiceServer)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "ShouldRateLimit", Handler: shouldRateLimitHandler}},
	Metadata:    rlspb.RateLimitService_ServiceDesc.Metadata,
}

// shouldRateLimitHandler decodes and decides a request. Without an
// interceptor, which might keep the request, the wireRequest goes back to
// its pool once decided: nothing of a request outlives its answer but its
// strings, which are a copy of the message of their own.
func shouldRateLimitHandler(srv any, ctx context.Context, dec func(any) error, intercept grpc.UnaryServerInterceptor) (any, error) {
	s := srv.(*Service)
	in := wireRequests.Get().(*wireRequest)
	*in = wireRequest{bounds: &s.opts.Bounds}
	if err := dec(in); err != nil {
		return nil, err
	}
	if in.err != nil {
		return nil, status.Error(codes.InvalidArgument, in.err.Error())
	}
	if intercept == nil {
		defer wireRequests.Put(in)
		return s.ShouldRateLimit(ctx, &in.RateLimitRequest)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: rlspb.RateLimitService_ShouldRateLimit_FullMethodName}
	return intercept(ctx, &in.RateLimitRequest, info, func(ctx context.Context, req any) (any, error) {
		return s.ShouldRateLimit(ctx, req.(*rlspb.RateLimitRequest))
	})
}

// item is the plan and the answer for one descriptor.
type item struct {
	rule   *rule
	shared []string // share_threshold patterns of its entries (see domain.match)
	key    string
	cost   uint64
	result Result
	check  int // index of its check among the enforced or the shadow ones, or -1
	d      sluice.Decision
	over   bool          // refused without asking the store
	value  string        // detailed_metric value
	refund bool          // is_negative_hits: the hits are given back
	shares bool          // its own limit counts on the configured one's counter under CountPeer (see peerKey)
	held   bool          // under StopIncrementWhenOverLimit, not charged (see peerCounter.peek)
	counts bool          // under CountPeer, before and after are the peer's counts
	peek   uint64        // under StopIncrementWhenOverLimit, the count read first
	before uint64        // the peer's count before the hits (wrapping, as there)
	after  uint64        // and after them
	reset  time.Duration // duration_until_reset
}

// request is one ShouldRateLimit call as it is decided: its items, the
// checks planned from them, and the result.
type request struct {
	req      *rlspb.RateLimitRequest
	items    []item
	enforced []decide.Check
	shadow   []decide.Check
	refused  bool // an enforced limit refuses without asking the store
	quotas   bool // Options.QuotaMode: every limit is a quota_mode one
	res      decide.Result
}

// requests keeps the requests decided, with their slices and decide.Result,
// for the next ones: nothing of a request outlives its answer.
var requests = sync.Pool{New: func() any { return new(request) }}

// newRequest returns a request for req from the pool, reset.
func newRequest(req *rlspb.RateLimitRequest, quotas bool) *request {
	r := requests.Get().(*request)
	r.req, r.refused, r.quotas = req, false, quotas
	r.items = slices.Grow(r.items[:0], len(req.Descriptors))[:len(req.Descriptors)]
	clear(r.items)
	r.enforced, r.shadow = r.enforced[:0], r.shadow[:0]
	return r
}

// ShouldRateLimit decides one request (see the package documentation for
// the semantics). Errors are gRPC status errors: InvalidArgument for a
// request outside the protocol or the bounds, Unavailable when the store
// fails, and the context's error when it ends.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	if err := validate(req, &s.opts.Bounds); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	dom := s.cfg.Load().domains[req.Domain]
	if dom == nil {
		return s.unknownDomain(req), nil
	}
	r := newRequest(req, s.opts.QuotaMode)
	defer requests.Put(r)
	if err := r.match(dom); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	s.runtime(r)
	if s.peerCounting(dom) {
		if err := s.peer.run(ctx, r); err != nil {
			return nil, err
		}
		return s.answer(r), nil
	}
	r.plan()
	if err := s.adj.refunds(ctx, r); err != nil {
		return nil, err
	}
	if err := s.run(ctx, r); err != nil {
		return nil, err
	}
	s.adj.debit(ctx, r)
	return s.answer(r), nil
}

// unknownDomain answers a request for a domain without configuration: as
// envoyproxy/ratelimit, it limits nothing, even descriptors carrying their
// own limit.
func (s *Service) unknownDomain(req *rlspb.RateLimitRequest) *rlspb.RateLimitResponse {
	s.logs.unknownDomain(req.Domain)
	resp := &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK, Statuses: make([]*rlspb.RateLimitResponse_DescriptorStatus, len(req.Descriptors))}
	for i := range resp.Statuses {
		resp.Statuses[i] = &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK}
		if s.opts.Observe != nil {
			s.opts.Observe(req.Domain, Outcome{Result: ResultNoLimit, Hits: hits(req, req.Descriptors[i])})
		}
	}
	return resp
}

// match finds the rule of each descriptor, and settles the descriptors
// that need no check: no limit, unlimited, replaced.
func (r *request) match(dom *domain) error {
	var replaced []string
	for i, desc := range r.req.Descriptors {
		it := &r.items[i]
		it.check = -1
		it.cost, it.refund = hits(r.req, desc), desc.IsNegativeHits
		if ov := desc.GetLimit(); ov != nil {
			ru, err := override(ov)
			if err != nil {
				return fmt.Errorf("rls: descriptor %d: limit: %v", i, err)
			}
			it.rule = ru
			it.shares = dom.sameWindow(desc.Entries, ru)
		} else {
			it.rule, it.shared = dom.match(desc.Entries)
		}
		switch {
		case it.rule == nil:
			it.result = ResultNoLimit
			continue
		case it.rule.unlimited:
			it.result = ResultUnlimited
		}
		replaced = append(replaced, it.rule.replaces...)
		if it.rule.detailed && len(desc.Entries) > 0 {
			it.value = desc.Entries[len(desc.Entries)-1].Value
		}
	}
	// A matched limit named in another matched limit's replaces is dropped.
	for i := range r.items {
		if ru := r.items[i].rule; ru != nil && ru.name != "" && r.items[i].result == 0 && contains(replaced, ru.name) {
			r.items[i].result = ResultReplaced
		}
	}
	return nil
}

// plan turns the items still to decide into checks: enforced limits
// together (all-or-nothing), shadow limits after them. Two descriptors
// that name the same counter are charged once with the summed cost. A
// limit that refuses every charge (requests_per_unit: 0), or a cost above
// the capacity, refuses the request without asking the store
// (envoyproxy/ratelimit answers OVER_LIMIT for both); the store is then
// only peeked, to report what is left.
func (r *request) plan() {
	for i := range r.items {
		it := &r.items[i]
		if it.result != 0 {
			continue
		}
		ru := it.rule
		it.key = r.key(i)
		if it.refund { // given back before the checks (see adjuster.refunds)
			continue
		}
		if ru.rpu == 0 && it.cost == 0 { // a peek of a limit that refuses all is within it
			it.result = ResultOK
			continue
		}
		if ru.rpu == 0 || it.cost > uint64(ru.limit.Capacity()) {
			it.over = true
			r.refused = r.refused || !r.apart(ru)
			if ru.rpu == 0 {
				continue
			}
		}
		cost := int64(it.cost)
		if it.over {
			cost = 0
		}
		r.add(it, cost)
	}
	for j := range r.enforced {
		if r.enforced[j].Cost > r.enforced[j].Limit.Capacity() { // the sum of duplicates
			r.refused = true
			for i := range r.items {
				if it := &r.items[i]; it.check == j && !r.apart(it.rule) {
					it.over = true
				}
			}
		}
	}
	if r.refused { // the check charges nothing (shadow limits included); debit charges the refusing ones
		for j := range r.enforced {
			r.enforced[j].Cost = 0
		}
		for j := range r.shadow {
			r.shadow[j].Cost = 0
		}
	}
}

// key is the counter of item i: its descriptor's key, and for a
// descriptor's own limit, the key of that limit's window.
func (r *request) key(i int) string {
	it := &r.items[i]
	k := key(r.req.Domain, r.req.Descriptors[i].Entries, it.shared)
	if it.rule.path == overridePath {
		k = overrideKey(k, it.rule.period)
	}
	return k
}

// add plans the check of one item, merging it with an enforced check of
// the same counter.
func (r *request) add(it *item, cost int64) {
	c := decide.Check{Name: it.rule.path, Key: it.key, Limit: it.rule.limit, Cost: cost, Shadow: r.apart(it.rule)}
	if c.Shadow {
		it.check, r.shadow = len(r.shadow), append(r.shadow, c)
		return
	}
	for j, q := range r.enforced {
		// One counter: the same key under limits that share its state
		// (two descriptors' own limits of one window but different
		// requests_per_unit are judged by the first).
		if q.Key == c.Key && q.Limit.Shares(c.Limit) {
			it.check = j
			r.enforced[j].Cost = min(q.Cost+cost, math.MaxInt64/2)
			return
		}
	}
	it.check, r.enforced = len(r.enforced), append(r.enforced, c)
}

// run decides the planned checks and sets each item's result.
func (s *Service) run(ctx context.Context, r *request) error {
	checks := append(r.enforced, r.shadow...)
	if len(checks) > 0 {
		s.dc.Run(ctx, checks, &r.res)
	}
	switch r.res.Outcome {
	case decide.Failed:
		return storeError(ctx, s.logs, r.req.Domain, r.res.Err)
	case decide.Invalid:
		return status.Error(codes.InvalidArgument, r.res.Err.Error())
	}
	admitted := !r.refused && (len(r.enforced) == 0 || r.res.Decision.Allowed)
	for i := range r.items {
		it := &r.items[i]
		if it.result != 0 {
			continue
		}
		if r.apart(it.rule) {
			it.result = shadowResult(it, &r.res, admitted)
			if r.quota(it.rule) && !it.rule.shadow && it.result == ResultShadowOverLimit {
				it.result = ResultOverLimit
			}
			continue
		}
		if it.check >= 0 {
			it.d = r.res.Each[it.check]
		}
		switch {
		case it.over:
			it.result = ResultOverLimit
		case admitted:
			it.result = ResultOK
		case !it.d.Allowed && it.d.RetryAfter > 0 && !r.refused: // the one that refused
			it.result = ResultOverLimit
		default:
			it.result = ResultNotCharged
		}
	}
	return nil
}

// shadowResult is the result of a shadow limit's descriptor. Shadow limits
// count only requests the enforced limits admitted (a request refused
// upstream never reaches the backend), each on its own.
func shadowResult(it *item, res *decide.Result, admitted bool) Result {
	if it.over {
		return ResultShadowOverLimit
	}
	if !admitted || it.check < 0 || it.check >= len(res.ShadowEach) {
		return ResultNotCharged
	}
	it.d = res.ShadowEach[it.check]
	switch {
	case it.d.Allowed:
		return ResultOK
	case it.d.Limit == 0: // the store failed: no decision
		return ResultNotCharged
	}
	return ResultShadowOverLimit
}

// answer builds the response: a status per descriptor, the overall code,
// and the RateLimit header fields when asked for.
func (s *Service) answer(r *request) *rlspb.RateLimitResponse {
	resp, mem, hm := newResponse(len(r.items))
	var now time.Time
	for i := range r.items {
		it := &r.items[i]
		if it.result == ResultShadowOverLimit {
			s.logs.shadow(r.req.Domain, it.rule.path)
		}
		m := &mem[i]
		st := &m.st
		st.Code = rlspb.RateLimitResponse_OK
		switch it.result {
		case ResultUnlimited:
			st.LimitRemaining = math.MaxUint32
		case ResultOK, ResultNotCharged, ResultOverLimit, ResultShadowOverLimit, ResultRefunded:
			st.CurrentLimit = it.rule.currentIn(&m.cur)
			it.reset = s.reset(it, &now)
			m.dur.Seconds = seconds(it.reset)
			st.DurationUntilReset = &m.dur
			if it.result == ResultOverLimit {
				st.Code = rlspb.RateLimitResponse_OVER_LIMIT
				if !r.quota(it.rule) {
					resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT
				}
			}
			if it.result == ResultOK || it.result == ResultNotCharged || it.result == ResultRefunded {
				st.LimitRemaining = uint32(min(max(it.d.Remaining, 0), math.MaxUint32))
			}
		}
		s.observe(r.req.Domain, it)
	}
	if quotasSpent(r) {
		resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT
	}
	if s.opts.ShadowMode && resp.OverallCode == rlspb.RateLimitResponse_OVER_LIMIT {
		resp.OverallCode = rlspb.RateLimitResponse_OK
		s.logs.shadow(r.req.Domain, "(shadow mode)")
	}
	if s.opts.ResponseHeaders {
		if hm == nil {
			hm = new(headerMem)
		}
		resp.ResponseHeadersToAdd = headers(r.items, hm)
	}
	return resp
}

// statusMem is one descriptor's status and the messages it points to,
// allocated together.
type statusMem struct {
	st  rlspb.RateLimitResponse_DescriptorStatus
	cur rlspb.RateLimitResponse_RateLimit
	dur durationpb.Duration
}

// answerMem is a response to a request of one descriptor, the usual
// kind, with its header fields, in one allocation.
type answerMem struct {
	resp rlspb.RateLimitResponse
	sts  [1]*rlspb.RateLimitResponse_DescriptorStatus
	mem  [1]statusMem
	hdr  headerMem
}

// newResponse returns an OK response with room for n statuses, each
// already pointing to its statusMem, and for one descriptor room for its
// header fields (nil for more): one allocation for one descriptor, three
// for more.
func newResponse(n int) (*rlspb.RateLimitResponse, []statusMem, *headerMem) {
	var resp *rlspb.RateLimitResponse
	var mem []statusMem
	var hm *headerMem
	if n == 1 {
		a := new(answerMem)
		resp, mem, hm = &a.resp, a.mem[:], &a.hdr
		resp.Statuses = a.sts[:]
	} else {
		resp, mem = new(rlspb.RateLimitResponse), make([]statusMem, n)
		resp.Statuses = make([]*rlspb.RateLimitResponse_DescriptorStatus, n)
	}
	for i := range mem {
		resp.Statuses[i] = &mem[i].st
	}
	resp.OverallCode = rlspb.RateLimitResponse_OK
	return resp, mem, hm
}

// quotasSpent reports whether the request has quota_mode limits and every
// one of them is over: then the request is refused, as in
// envoyproxy/ratelimit.
func quotasSpent(r *request) bool {
	if r.quotas {
		return allSpent(r)
	}
	quotas := 0
	for i := range r.items {
		it := &r.items[i]
		if it.rule == nil || !it.rule.quota || it.rule.shadow || it.rule.unlimited || it.result == ResultReplaced || it.result == ResultRefunded {
			continue
		}
		if it.result != ResultOverLimit {
			return false
		}
		quotas++
	}
	return quotas > 0
}

// allSpent is quotasSpent under Options.QuotaMode, as
// envoyproxy/ratelimit's QUOTA_MODE=true decides: every descriptor but the
// unlimited ones is a quota descriptor, one that no limit matched or whose
// limit was replaced included (OK, as a shadow_mode limit's is); the
// request is over when it has one and every one is OVER_LIMIT.
func allSpent(r *request) bool {
	quotas := 0
	for i := range r.items {
		switch r.items[i].result {
		case ResultUnlimited, ResultRefunded:
			continue
		case ResultOverLimit:
			quotas++
		default:
			return false
		}
	}
	return quotas > 0
}

// quota reports whether ru counts as a quota_mode limit in r.
func (r *request) quota(ru *rule) bool { return ru.quota || r.quotas }

// apart reports whether ru is checked apart from the enforced limits of r
// (see rule.apart).
func (r *request) apart(ru *rule) bool { return ru.apart() || r.quotas }

// reset is an item's duration_until_reset: the store's answer, or, with
// none to go by (a limit that refuses all, or a window nothing was charged
// to yet), the time left in the aligned window by this process's clock.
func (s *Service) reset(it *item, now *time.Time) time.Duration {
	reset := it.d.ResetAfter
	if it.rule.rpu == 0 || reset <= 0 && algo.Aligned(it.rule.limit.Algorithm) {
		if now.IsZero() {
			*now = s.opts.Now()
		}
		p := it.rule.period.Microseconds()
		reset = time.Duration(p-now.UnixMicro()%p) * time.Microsecond
	}
	return reset
}

func (s *Service) observe(domain string, it *item) {
	if s.opts.Observe == nil {
		return
	}
	o := Outcome{Result: it.result, Hits: it.cost, Degraded: it.d.Degraded, Value: it.value}
	if it.rule != nil {
		o.Rule, o.Name, o.Shadow, o.Limit = it.rule.path, it.rule.name, it.rule.shadow, it.rule.limit
	}
	if it.counts {
		o.Within, o.Near, o.Over = peerStats(uint64(it.rule.rpu), it.before, it.after, it.cost)
	}
	s.opts.Observe(domain, o)
}
