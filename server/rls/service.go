package rls

import (
	"context"
	"log/slog"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sluicehq/sluice"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Bounds on one ShouldRateLimit request. A request beyond them is refused
// with InvalidArgument, so nothing a client sends can make the service
// allocate or store without bound.
const (
	MaxDescriptors = 64   // descriptors per request
	MaxEntries     = 16   // entries per descriptor
	MaxLength      = 1024 // bytes of a domain, an entry key or an entry value
)

// Options configures a Service. The zero value is ready to use; each field
// documents its default.
type Options struct {
	// Logger receives the configuration snapshot on New and Swap and the
	// aggregated lines about shadow-mode refusals, unknown domains and
	// store errors. Default slog.Default().
	Logger *slog.Logger

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
	// ResultOverLimit: the limit refused the request; nothing of the
	// request was charged anywhere.
	ResultOverLimit
	// ResultShadowOverLimit: a shadow_mode limit was over; the descriptor
	// reports OK.
	ResultShadowOverLimit
	// ResultNotCharged: the limit would have admitted the request, but
	// another descriptor refused it, so nothing was charged (all-or-nothing).
	ResultNotCharged
)

var resultNames = [...]string{"", "no_limit", "unlimited", "replaced", "ok", "over_limit", "shadow_over_limit", "not_charged"}

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
}

// Service is the Envoy rate limit service (envoy.service.ratelimit.v3)
// over a sluice Limiter: it matches each descriptor of a request against
// the configuration, charges every matched limit all-or-nothing in one
// sluice Check, and answers with a status per descriptor.
//
// It is safe for concurrent use. Swap replaces the configuration atomically;
// requests in flight finish under the configuration they started with.
type Service struct {
	limiter *sluice.Limiter
	cfg     atomic.Pointer[Config]
	opts    Options
	logs    *aggregator
}

// New returns a Service that decides with limiter under cfg (nil serves no
// domains: every request is OK). It logs a snapshot of cfg.
func New(limiter *sluice.Limiter, cfg *Config, opts Options) *Service {
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
	s := &Service{limiter: limiter, opts: opts, logs: newAggregator(opts.Logger, opts.LogInterval)}
	s.cfg.Store(cfg)
	opts.Logger.Info("rls: configuration loaded", "domains", cfg.String())
	return s
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
// envoy.service.ratelimit.v3.RateLimitService.
func (s *Service) Register(r grpc.ServiceRegistrar) {
	rlspb.RegisterRateLimitServiceServer(r, server{s: s})
}

type server struct {
	rlspb.UnimplementedRateLimitServiceServer
	s *Service
}

func (g server) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	return g.s.ShouldRateLimit(ctx, req)
}

// item is the plan and the answer for one descriptor.
type item struct {
	rule   *rule
	key    string
	cost   uint64
	result Result
	check  int // index into the checked requests, or -1
	d      sluice.Decision
	over   bool          // refused without asking the store
	value  string        // detailed_metric value
	reset  time.Duration // duration_until_reset
}

// ShouldRateLimit decides one request (see the package documentation for
// the semantics). Errors are gRPC status errors: InvalidArgument for a
// request outside the protocol or the bounds, Unavailable when the store
// fails, and the context's error when it ends.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	if err := validate(req); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	cfg := s.cfg.Load()
	resp := &rlspb.RateLimitResponse{
		OverallCode: rlspb.RateLimitResponse_OK,
		Statuses:    make([]*rlspb.RateLimitResponse_DescriptorStatus, len(req.Descriptors)),
	}
	dom := cfg.domains[req.Domain]
	if dom == nil {
		// As envoyproxy/ratelimit: a domain without configuration limits
		// nothing, even descriptors carrying their own limit.
		s.logs.unknownDomain(req.Domain)
		for i := range resp.Statuses {
			resp.Statuses[i] = &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK}
			if s.opts.Observe != nil {
				s.opts.Observe(req.Domain, Outcome{Result: ResultNoLimit, Hits: hits(req, req.Descriptors[i])})
			}
		}
		return resp, nil
	}

	items := make([]item, len(req.Descriptors))
	var replaced []string
	for i, desc := range req.Descriptors {
		it := &items[i]
		it.check = -1
		it.cost = hits(req, desc)
		if ov := desc.GetLimit(); ov != nil {
			r, err := override(ov)
			if err != nil {
				return nil, status.Errorf(codes.InvalidArgument, "rls: descriptor %d: limit: %v", i, err)
			}
			it.rule = r
		} else {
			it.rule = dom.match(desc.Entries)
		}
		if it.rule == nil {
			it.result = ResultNoLimit
			continue
		}
		replaced = append(replaced, it.rule.replaces...)
		if it.rule.detailed && len(desc.Entries) > 0 {
			it.value = desc.Entries[len(desc.Entries)-1].Value
		}
		if it.rule.unlimited {
			it.result = ResultUnlimited
		}
	}
	// A matched limit named in another matched limit's replaces is dropped.
	if len(replaced) > 0 {
		for i := range items {
			if r := items[i].rule; r != nil && r.name != "" && items[i].result == 0 && contains(replaced, r.name) {
				items[i].result = ResultReplaced
			}
		}
	}

	// Plan the checks: enforced limits together (all-or-nothing), shadow
	// limits after them, each on its own.
	var enforced, shadow []sluice.Request
	var shadowIdx []int
	refused := false // an enforced limit refuses without asking the store
	for i := range items {
		it := &items[i]
		if it.result != 0 {
			continue
		}
		r := it.rule
		it.key = key(req.Domain, req.Descriptors[i].Entries)
		if r.rpu == 0 || it.cost > uint64(r.limit.Capacity()) {
			// requests_per_unit 0 refuses every charge; a cost above the
			// capacity could never be admitted (envoyproxy/ratelimit
			// answers OVER_LIMIT for both). A peek (cost 0) of an
			// all-refusing limit is within it.
			if r.rpu == 0 && it.cost == 0 {
				it.result = ResultOK
				continue
			}
			it.over = true
			if !r.shadow {
				refused = true
			}
			if r.rpu == 0 {
				continue
			}
		}
		cost := int64(it.cost)
		if it.over {
			cost = 0 // only peeked, to report what is left
		}
		if r.shadow {
			it.check = len(shadow)
			shadow = append(shadow, sluice.Request{Key: it.key, Limit: r.limit, Cost: cost})
			shadowIdx = append(shadowIdx, i)
			continue
		}
		// Two descriptors may name the same counter: charge it once with
		// the summed cost.
		merged := false
		for j, q := range enforced {
			if q.Key == it.key && q.Limit == r.limit {
				it.check, merged = j, true
				if !it.over {
					enforced[j].Cost = min(q.Cost+cost, math.MaxInt64/2)
				}
				break
			}
		}
		if !merged {
			it.check = len(enforced)
			enforced = append(enforced, sluice.Request{Key: it.key, Limit: r.limit, Cost: cost})
		}
	}
	for j := range enforced {
		if c := enforced[j].Cost; c > enforced[j].Limit.Capacity() {
			enforced[j].Cost = 0 // the sum of duplicates exceeds the capacity
			refused = true
			for i := range items {
				if items[i].check == j && !items[i].rule.shadow {
					items[i].over = true
				}
			}
		}
	}
	if refused {
		for j := range enforced {
			enforced[j].Cost = 0 // peek: a refused request charges nothing
		}
	}

	each := make([]sluice.Decision, len(enforced))
	admitted := !refused
	if len(enforced) > 0 {
		binding, err := s.limiter.CheckEach(ctx, enforced, each)
		if err != nil {
			return nil, s.storeError(ctx, req.Domain, err)
		}
		if !refused && !binding.Allowed {
			admitted = false
		}
	}
	for i := range items {
		it := &items[i]
		if it.result != 0 || it.rule.shadow {
			continue
		}
		if it.check >= 0 {
			it.d = each[it.check]
		}
		switch {
		case it.over:
			it.result = ResultOverLimit
		case admitted:
			it.result = ResultOK
		case !it.d.Allowed && it.d.RetryAfter > 0 && !refused:
			it.result = ResultOverLimit
		default:
			it.result = ResultNotCharged
		}
	}
	// Shadow limits count only requests the enforced limits admitted: a
	// request refused upstream never reaches the backend.
	for k, i := range shadowIdx {
		it := &items[i]
		q := shadow[k]
		if !admitted {
			q.Cost = 0
		}
		d, err := s.limiter.AllowN(ctx, q.Key, q.Limit, q.Cost)
		if err != nil {
			return nil, s.storeError(ctx, req.Domain, err)
		}
		it.d = d
		switch {
		case it.over || (!d.Allowed && q.Cost > 0):
			it.result = ResultShadowOverLimit
		case admitted:
			it.result = ResultOK
		default:
			it.result = ResultNotCharged
		}
	}
	for i := range items {
		if items[i].result == ResultShadowOverLimit {
			s.logs.shadow(req.Domain, items[i].rule.path)
		}
	}

	now := time.Time{}
	for i := range items {
		it := &items[i]
		st := &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK}
		switch it.result {
		case ResultUnlimited:
			st.LimitRemaining = math.MaxUint32
		case ResultOK, ResultNotCharged, ResultOverLimit, ResultShadowOverLimit:
			st.CurrentLimit = it.rule.current()
			reset := it.d.ResetAfter
			if it.rule.rpu == 0 || reset <= 0 && it.rule.limit.Algorithm == sluice.AlgorithmFixedWindow {
				// No store answer to go by (a limit that refuses all, or
				// a window nothing was charged to yet): the time left in
				// the aligned window, by this process's clock.
				if now.IsZero() {
					now = s.opts.Now()
				}
				p := it.rule.period.Microseconds()
				reset = time.Duration(p-now.UnixMicro()%p) * time.Microsecond
			}
			it.reset = reset
			st.DurationUntilReset = durationpb.New(ceilSecond(reset))
			if it.result == ResultOverLimit {
				st.Code = rlspb.RateLimitResponse_OVER_LIMIT
				resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT
			}
			if it.result == ResultOK || it.result == ResultNotCharged {
				st.LimitRemaining = uint32(min(max(it.d.Remaining, 0), math.MaxUint32))
			}
		}
		resp.Statuses[i] = st
		if s.opts.Observe != nil {
			o := Outcome{Result: it.result, Hits: it.cost, Degraded: it.d.Degraded, Value: it.value}
			if it.rule != nil {
				o.Rule, o.Name, o.Shadow = it.rule.path, it.rule.name, it.rule.shadow
				o.Limit = it.rule.limit
			}
			s.opts.Observe(req.Domain, o)
		}
	}
	if s.opts.ResponseHeaders {
		resp.ResponseHeadersToAdd = headers(items)
	}
	return resp, nil
}
