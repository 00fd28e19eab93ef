// Package rls is the Envoy rate limit service
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) over a sluice
// Limiter, so Envoy, Istio, Contour or Gloo gateways can ask sluice for their
// global rate limits, with the state in memstore or in Redis (redisstore).
//
// It reads envoyproxy/ratelimit's configuration format unchanged, so that
// service can be replaced without rewriting its files, and adds an optional
// sluice: block per limit to choose another algorithm.
//
// # Configuration
//
// One file per domain; LoadConfig reads files and directories (every file
// in them, nested ones too, whatever its extension: .yaml, .json, none; not
// those whose name starts with a dot, nor directories reached through a
// link), as envoyproxy/ratelimit reads its runtime directory
// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config. The same domain in two files is
// an error unless LoadOptions.MergeDomains (that service's
// MERGE_DOMAIN_CONFIG) merges them; a directory without files configures no
// domain, with a warning:
//
//	domain: edge
//	descriptors:
//	  # 100 requests per minute per client address...
//	  - key: remote_address
//	    rate_limit:
//	      unit: minute
//	      requests_per_unit: 100
//	  # ...none at all for this one...
//	  - key: remote_address
//	    value: 192.0.2.66
//	    rate_limit:
//	      unit: minute
//	      requests_per_unit: 0
//	  # ...and no limit for the office.
//	  - key: remote_address
//	    value: 198.51.100.10
//	    rate_limit:
//	      unlimited: true
//
//	  # Per path prefix (a '*' matches any run of characters), then per user.
//	  - key: path
//	    value: /api/*
//	    rate_limit:
//	      name: api
//	      unit: second
//	      requests_per_unit: 50
//	    descriptors:
//	      - key: user
//	        rate_limit:
//	          unit: hour
//	          unit_multiplier: 6
//	          requests_per_unit: 5000
//
//	  # A token bucket instead of the fixed window: 10/s, bursts of 40.
//	  - key: plan
//	    value: free
//	    rate_limit:
//	      unit: second
//	      requests_per_unit: 10
//	      sluice:
//	        algorithm: token_bucket
//	        burst: 40
//
//	  # Trying a limit out: counted and logged, never refused.
//	  - key: partner
//	    shadow_mode: true
//	    rate_limit:
//	      unit: minute
//	      requests_per_unit: 600
//
//	  # A bigger quota for one partner's bulk endpoint replaces the
//	  # per-partner limit named here when both match one request.
//	  - key: bulk
//	    value: "true"
//	    descriptors:
//	      - key: partner
//	        value: acme
//	        rate_limit:
//	          replaces:
//	            - name: per_partner
//	          unit: minute
//	          requests_per_unit: 6000
//	  - key: partner_total
//	    rate_limit:
//	      name: per_partner
//	      unit: minute
//	      requests_per_unit: 1000
//
// The fields are envoyproxy/ratelimit's: key, value (absent: any value, each
// distinct value its own counter; with a '*' anywhere: the values it matches,
// each '*' standing for any run of characters, each value its own counter
// unless share_threshold: true makes them share one), descriptors (nested),
// shadow_mode, quota_mode, detailed_metric, value_to_metric, share_threshold,
// metadata, and in rate_limit:
// unit (second, minute, hour, day, week, month, year, in any letter case;
// week, month and year are 7, 30 and 365 days as there), requests_per_unit,
// unlimited, name, replaces and unit_multiplier (the window is unit ×
// unit_multiplier; the field is in the RLS protocol but not yet in
// envoyproxy/ratelimit's README). detailed_metric only fills Outcome.Value
// for the Observe hook; value_to_metric (a metrics name in that service) and
// metadata (its dynamic metadata, which this service does not send) are
// read and checked but change no answer.
//
// The sluice: block takes algorithm (fixed_window, the default and what
// envoyproxy/ratelimit does; sliding_window, sliding_log, token_bucket,
// gcra, leaky_bucket, warm_up) and that algorithm's parameters: burst
// (token_bucket, gcra; default requests_per_unit), queue and nodelay
// (leaky_bucket), warmup (warm_up), and for fixed_window calendar: true or
// timezone (an IANA name such as Europe/Berlin, default UTC), which make the
// units day, week, month and year calendar periods of that zone (a month
// from the 1st at local midnight, a week from Monday) instead of 1, 7, 30
// and 365 days from the epoch. Every algorithm also takes version (a whole
// number from 0, the default, to 4294967295; sluice.Limit.Version): a
// configuration that changes a limit's rate, unit or parameters keeps
// each counter's usage, carried over as for a policy's limit, and one that
// changes version starts every counter of that limit afresh. The rate is
// requests_per_unit per unit × unit_multiplier. concurrency is refused: it needs a release when each
// request ends, which this protocol cannot carry.
//
// Every file envoyproxy/ratelimit loads loads here with the same meaning,
// and every file it refuses is refused: unknown fields (at any level),
// values that are not strings, whole numbers or booleans, lists of anything
// but mappings, bad units, negative or oversized numbers, duplicate
// descriptors in one list, an empty domain or key, an empty or self-naming
// replaces, an unlimited limit with a unit of time, share_threshold without
// a '*'. What that service accepts but a strict reading refuses loads with a
// warning (Config.Warnings; sluice check --strict refuses it): a repeated
// field (the last counts), a field at a level that does not read it
// (ignored), a missing requests_per_unit (0: every request refused),
// replaces naming no limit, shadow_mode, quota_mode or detailed_metric
// without a rate_limit, an empty rate_limit or name, a second YAML document
// (ignored), nesting deeper than MaxEntries (unreachable). sluice's own
// fields, unit_multiplier and sluice:, are read strictly. Every error names
// the file, line, domain, descriptor path and field:
//
//	edge.yaml:12: domain "edge": descriptor remote_address/path=/api: rate_limit.unit: unknown unit "sec" (want second, minute, hour, day, week, month or year)
//
// # Matching
//
// As envoyproxy/ratelimit: each descriptor of a request is matched level by
// level, each entry against the most specific configured entry (key and
// value, else the first wildcard value in file order that matches, else
// the key alone), without backtracking; the limit applies only when the
// request has exactly as many entries as the matched path is deep. A
// descriptor that matches nothing is OK with no limit; an unlimited one is OK
// with limit_remaining 4294967295. A matched limit named in the replaces of
// another limit matched by the same request is dropped (OK, no limit).
// Wildcards work at every nesting level. A descriptor's own limit (the
// protocol's limit override) is a fixed window of its requests_per_unit per
// unit (× unit_multiplier) on the same entries, separate from the configured
// limit's counter (under CountPeer it shares that counter when both are
// fixed windows of the same period, as the peer's counter key is the
// entries and the window's start). A domain with no configuration limits nothing (OK), as
// there, also for overrides; those requests are counted in an aggregated
// warning.
//
// Where envoyproxy/ratelimit joins key and value with '_' to look them up
// (so its key "a_b" with value "c" also matches "a" with "b_c"), this
// service compares them apart; a wildcard whose key holds a '*' is matched
// against "key_value", as there.
//
// Counters are sluice keys built from the domain and every entry's key and
// value, each length-prefixed, so no two descriptors of different domains,
// paths or values can share one; an entry matched by a share_threshold
// wildcard counts under the pattern instead of its value.
//
// # Hits
//
// The cost of a descriptor is its own hits_addend when set (0 then checks
// without charging), else the request's hits_addend, where 0 means 1 as the
// protocol says. A check (0) is OVER_LIMIT when one more hit would not fit,
// so a counter at its limit is over; envoyproxy/ratelimit says OVER_LIMIT
// only once the count is past the limit, and so does CountPeer (with
// Envoy's check-then-charge pattern, a hits_addend 0 descriptor on the
// request and 1 when the stream is done, the peer lets one more request
// in). A cost above what the limit can ever admit is OVER_LIMIT,
// not an error.
//
// A descriptor with is_negative_hits gives its hits back: its counter is
// lowered by them before the request's checks, never below empty (giving
// back more than was used makes no room beyond the limit), in both
// countings; it answers OK with what is left (Result ResultRefunded).
// envoyproxy/ratelimit, which predates the field, counts them as hits.
// Hits and refunds are the caller's word, as the protocol has it: the
// service's callers are Envoy proxies, not the clients they limit.
//
// # All or nothing
//
// envoyproxy/ratelimit increments every descriptor's counter independently,
// and increments it even for a refused request. This service charges the
// enforced limits of a request in one sluice Check: if any refuses, the
// others are not charged, so a client refused on one dimension does not
// also use up its other quotas. The descriptor that refused is OVER_LIMIT
// and is charged its hits all the same, as envoyproxy/ratelimit charges
// them: hits reported once the work is done (Envoy's token limiting sends a
// hits_addend 0 check when a call starts and the tokens used when its
// stream ends, ignoring that answer) must count, or the budget never
// fills. The charge goes into a bounded debt (sluice.Limiter.Adjust: at
// most sluice.AdjustCapacities capacities past the limit, the rest
// dropped), which a fixed window forgets when it ends and a bucket pays
// back as it refills; a refused look (hits 0) charges nothing, and neither
// does a refusal by a fixed window with nothing left (it refuses
// everything until it ends, so a key hammered once spent costs no store
// round trip; a refund then gives room back from the limit, not from what
// it would have owed). The others
// are OK with what they have left (redisstore may report 0 left when it
// answered from its near cache without reading them). overall_code is
// OVER_LIMIT if any enforced descriptor is. For one descriptor per request
// under fixed windows the decisions are those of envoyproxy/ratelimit
// (same aligned windows, same remaining, same duration_until_reset in
// whole seconds; a test replays a timeline through both), but for a look at
// a counter exactly at its limit (above).
//
// # Counting as envoyproxy/ratelimit
//
// Options.Counting = CountPeer (sluice serve --rls-counting peer), or a
// file's top-level
//
//	sluice:
//	  counting: peer   # or all-or-nothing; envoyproxy/ratelimit refuses a file with this block
//
// counts a domain as envoyproxy/ratelimit does: each descriptor on its own,
// in request order, refused hits included, so a key over its limit stays
// over until its window ends; a descriptor that appears twice in a request
// is counted twice, the second seeing the first's hits; shadow_mode and
// quota_mode limits are counted like the others. A fixed window of n
// requests is kept as a fixed window of n+1 whose last unit marks "over"
// (a refused charge fills the counter to it), so every code,
// limit_remaining and duration_until_reset is the peer's: a test replays
// upstream's integration scenarios and a random timeline of multi-descriptor
// requests with hits from 0 to above the limit against a model of its
// counting. Options.StopIncrementWhenOverLimit adds its
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: the counters are read first and,
// when any descriptor would be over, only those that would be are
// charged. A limit with a sluice: algorithm block is charged on its own
// under its algorithm, its refused hits into the bounded debt all-or-nothing
// charges them to. Each charge goes through package decide, the decision path
// of every sluice front-end (refusal logs, failure modes), one descriptor at
// a time. Each descriptor is one
// store round trip (two with StopIncrementWhenOverLimit) where
// all-or-nothing needs one for the whole request.
//
// shadow_mode limits are checked after the enforced ones, each on its own
// (the decision path every sluice front-end shares, package decide):
// over, they report OK (with limit_remaining 0) and are counted in one
// aggregated log line per interval and in Observe. They count only requests
// the enforced limits admitted.
//
// quota_mode limits are checked the same way, after the enforced ones; over,
// their descriptor is OVER_LIMIT (and charged its hits into the bounded
// debt, as an enforced limit that refuses), but overall_code is OVER_LIMIT only when
// every quota_mode limit of the request is over (or an enforced one is), as
// in envoyproxy/ratelimit. The enforced limits of such a request are
// charged: the quota limits are decided after them. Options.QuotaMode (its
// QUOTA_MODE) makes every limit a quota_mode one: the request is then over
// only when every descriptor but the unlimited ones is OVER_LIMIT (one no
// limit matched counts as within, as there).
//
// # Bad requests
//
// An empty domain, no descriptors, more descriptors than Options.Bounds
// allows (default MaxDescriptors, 64), more entries in one (MaxEntries,
// 16), a domain, key or value longer (MaxLength, 1,024 bytes), or a limit
// override with an unknown unit is refused with
// InvalidArgument; on a server with ServerCodec, so is a message that is not
// a RateLimitRequest in protobuf wire format, or has a string that is not
// UTF-8 (grpc's own codec answers those Internal). A store failure is
// Unavailable, so Envoy applies its failure_mode_deny setting.
//
// # Response headers
//
// With Options.ResponseHeaders, response_headers_to_add carries
// RateLimit-Policy and RateLimit in the form of
// draft-ietf-httpapi-ratelimit-headers-11, as sluice's httplimit sends them
// (one list member per enforced limit, named by its rate_limit name or
// descriptor path), and Retry-After when over the limit. envoyproxy/ratelimit
// offers the older RateLimit-Limit/-Remaining/-Reset fields instead.
//
// # Serving
//
//	cfg, err := rls.LoadConfig("/etc/sluice/ratelimit")
//	svc, err := rls.New(sluice.New(store), cfg, rls.Options{Observe: metrics})
//	grpcServer := grpc.NewServer(rls.ServerCodec()) // the service's own protobuf codec
//	svc.Register(grpcServer)
//	...
//	svc.Swap(newCfg) // on reload; a config that fails to load keeps the old one
package rls
