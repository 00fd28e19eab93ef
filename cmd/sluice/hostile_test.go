package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/hostiletest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/server/rls"
)

// TestHostile runs the adversarial table against `sluice serve`'s
// front-ends, real processes on memstore and on a Redis server: the
// gateway (in front of an upstream that counts what reaches it) and the
// decision API under a policy with internal/hostiletest's HTTP cases, the
// decision API's explicit checks and the Envoy RLS with their own. For
// each, what got through (reached the upstream, or was answered allowed or
// OK) is exactly what the limits allow, and every other request is
// answered with a 4xx (INVALID_ARGUMENT or OVER_LIMIT for the RLS).
func TestHostile(t *testing.T) {
	for _, st := range []string{"memory", "redis"} {
		t.Run(st, func(t *testing.T) {
			t.Run("gateway", func(t *testing.T) {
				for _, c := range hostiletest.Cases() {
					t.Run(c.Name, func(t *testing.T) { hostileGateway(t, st, c) })
				}
			})
			t.Run("api", func(t *testing.T) {
				for _, c := range append(hostiletest.Cases(), apiPolicyCases()...) {
					if c.NoAPI != "" {
						continue
					}
					t.Run(c.Name, func(t *testing.T) { hostileAPI(t, st, c) })
				}
			})
			t.Run("api-explicit", func(t *testing.T) { hostileExplicit(t, st) })
			t.Run("rls", func(t *testing.T) { hostileRLS(t, st) })
			t.Run("rls-peer", func(t *testing.T) { hostileRLS(t, st, "--rls-counting", "peer") })
		})
	}
}

// storeArgs are the flags of a sluice on store st: memory, or the
// standalone Redis server under a prefix of t's own.
func storeArgs(t *testing.T, st string) []string {
	if st == "memory" {
		return nil
	}
	return []string{"--store", "redis", "--redis-addrs", redistest.Standalone(t).Options().Addr,
		"--redis-prefix", redistest.Prefix(t), "--redis-timeout", "5s"}
}

// hostilePolicy writes c's policy for a sluice to load; a policy that does
// not load (a field a fix on another branch adds) fails t with the case's
// hole.
func hostilePolicy[R any](t *testing.T, front string, c hostiletest.Case[R]) string {
	if _, err := policy.Parse("hostile.yaml", []byte(c.Policy), policy.Options{}); err != nil {
		note := ""
		if h := c.HoleOn(front); h != "" {
			note = " [" + h + "]"
		}
		t.Fatalf("%s: the policy does not load%s: %s", front, note, strings.ReplaceAll(err.Error(), "\n", " "))
	}
	path := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, path, c.Policy)
	return path
}

func hostileGateway(t *testing.T, st string, c hostiletest.Case[hostiletest.Request]) {
	path := hostilePolicy(t, "gateway", c)
	var reached atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached.Add(1) }))
	defer up.Close()
	p := start(t, nil, append(storeArgs(t, st), "--upstream", up.URL, "--policy", path)...)
	addr := p.addrs["gateway"]
	hostiletest.Run(t, "gateway", c, hostiletest.Sender[hostiletest.Request]{
		Send:     func(r hostiletest.Request) (int, error) { return hostiletest.Send(addr, r) },
		Pipeline: func(rs []hostiletest.Request) ([]int, error) { return hostiletest.Pipeline(addr, rs) },
		Through:  reached.Load,
	})
}

func hostileAPI(t *testing.T, st string, c hostiletest.Case[hostiletest.Request]) {
	path := hostilePolicy(t, "api", c)
	p := start(t, nil, append(storeArgs(t, st), "--policy", path)...)
	s := apiSender(p.url("api", "/v1/check"))
	hostiletest.Run(t, "api", c, hostiletest.Sender[hostiletest.Request]{
		Send: func(r hostiletest.Request) (int, error) {
			body, _ := hostiletest.APIBody(r, "127.0.0.1")
			return s.Send(body)
		},
		Through: s.Through,
	})
}

// apiSender posts bodies to /v1/check: an answer that says allowed is a
// 200 and counts as through, one that does not is its status (429), and a
// request the API rejects is its HTTP status.
func apiSender(url string) hostiletest.Sender[[]byte] {
	var allowed atomic.Int64
	send := func(body []byte) (int, error) {
		resp, err := client.Post(url, "application/json", bytes.NewReader(body))
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			return resp.StatusCode, nil
		}
		var a struct {
			Allowed bool
			Status  int
		}
		if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
			return 0, fmt.Errorf("answer: %v", err)
		}
		if a.Allowed {
			allowed.Add(1)
			return 200, nil
		}
		return a.Status, nil
	}
	return hostiletest.Sender[[]byte]{Send: send, Through: allowed.Load}
}

// apiPolicyCases are cases of the decision API alone: its caller resolves
// the client's address (request.ip), so trusted_proxies do not apply to
// the forwarding headers it passes on (docs/api.md).
func apiPolicyCases() []hostiletest.Case[hostiletest.Request] {
	trusted := "trusted_proxies: [127.0.0.0/8]\nrules:\n  - name: api\n    match: {path: /api/}\n    limits:\n" +
		"      - {name: per-ip, key: ip, algorithm: token_bucket, rate: 1/h, burst: 5}\n"
	return []hostiletest.Case[hostiletest.Request]{{
		Name: "request.ip in trusted_proxies, X-Forwarded-For in request.headers", Policy: trusted,
		Hole: map[string]string{"api": "finding: docs/api.md says trusted_proxies do not apply to request.ip; planPolicy makes it the peer, so the X-Forwarded-For of request.headers is read when it is a trusted proxy"},
		Phases: []hostiletest.Phase[hostiletest.Request]{{
			What: "X-Forwarded-For: a new address each time",
			Reqs: hostileTimes(hostiletest.N, func(i int) hostiletest.Request {
				return hostiletest.Request{Header: []hostiletest.Field{{Name: "X-Forwarded-For", Value: fmt.Sprintf("198.51.100.%d", i+1)}}}
			}),
			Want: hostiletest.Burst,
		}},
	}}
}

func hostileTimes[R any](n int, f func(i int) R) []R {
	rs := make([]R, n)
	for i := range rs {
		rs[i] = f(i)
	}
	return rs
}

func hostileSame[R any](n int, r R) []R { return hostileTimes(n, func(int) R { return r }) }

// hostileExplicit runs the decision API's cases of its own on one sluice,
// each case under keys (and client addresses) of its own.
func hostileExplicit(t *testing.T, st string) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, path, hostileAPIPolicy)
	p := start(t, nil, append(storeArgs(t, st), "--policy", path)...)
	for i := range explicitCases(0) {
		c := explicitCases(i)[i]
		t.Run(c.Name, func(t *testing.T) {
			hostiletest.Run(t, "api", c, apiSender(p.url("api", "/v1/check")))
		})
	}
}

// explicitBody is a /v1/check body of explicit checks, each a key under a
// token bucket of hostiletest.Burst that refills one an hour, with extra
// fields written into the check.
func explicitBody(extra string, keys ...string) []byte {
	var cs []string
	for i, k := range keys {
		cs = append(cs, fmt.Sprintf(`{"name": "c%d", "key": %s, "limit": {"algorithm": "token_bucket", "rate": "1/h", "burst": %d}%s}`,
			i, hostiletest.JSONString(k), hostiletest.Burst, extra))
	}
	return []byte(`{"checks": [` + strings.Join(cs, ", ") + `]}`)
}

// hostileAPIPolicy is the policy of the API's own cases: a per-ip limit
// whose cost a header sets.
const hostileAPIPolicy = "rules:\n  - name: api\n    match: {path: /api/}\n    limits:\n" +
	`      - {name: per-ip, key: ip, algorithm: token_bucket, rate: 1/h, burst: 5, cost: "header:X-Cost"}` + "\n"

// policyBody is a /v1/check body under the policy, for GET /api/x from ip
// with extra fields in the request (request) and the body (top).
func policyBody(ip, request, top string) []byte {
	return []byte(fmt.Sprintf(`{"request": {"path": "/api/x", "ip": %q%s}%s}`, ip, request, top))
}

// explicitCases are the bodies a hostile caller of the decision API sends:
// explicit checks, every key of case i starting with its own prefix, and
// requests under the policy, from an address of case i's own.
func explicitCases(i int) []hostiletest.Case[[]byte] {
	type phase = hostiletest.Phase[[]byte]
	n, burst := hostiletest.N, hostiletest.Burst
	pfx, ip := fmt.Sprintf("case%02d-", i), fmt.Sprintf("10.1.0.%d", i+1)
	k := pfx + "k"
	plainPolicy := phase{What: "then plain requests", Reqs: hostileSame(n, policyBody(ip, "", "")), Want: burst}
	badPolicy := func(what, request, top string) hostiletest.Case[[]byte] {
		return hostiletest.Case[[]byte]{Name: "policy: " + what, Phases: []phase{
			{What: what, Reqs: hostileSame(n, policyBody(ip, request, top)), Want: 0}, plainPolicy}}
	}
	plain := phase{What: "then plain checks", Reqs: hostileSame(n, explicitBody("", k)), Want: burst}
	bad := func(what string, body []byte) hostiletest.Case[[]byte] {
		return hostiletest.Case[[]byte]{Name: what, Phases: []phase{{What: what, Reqs: hostileSame(n, body), Want: 0}, plain}}
	}
	long := pfx + strings.Repeat("d", 300)
	return []hostiletest.Case[[]byte]{
		badPolicy("hits -1", "", `, "hits": -1`),
		badPolicy("hits 6, above the capacity", "", `, "hits": 6`),
		badPolicy("hits 2, X-Cost 3", `, "headers": {"X-Cost": "3"}`, `, "hits": 2`),
		badPolicy("hits 2^62, X-Cost 4", `, "headers": {"X-Cost": "4"}`, `, "hits": 4611686018427387904`),
		badPolicy("X-Cost 0", `, "headers": {"X-Cost": "0"}`, ""),
		badPolicy("X-Cost -1", `, "headers": {"x-cost": "-1"}`, ""),
		badPolicy("an unknown request field", `, "peer": "203.0.113.7"`, ""),
		badPolicy("request and checks", "", `, "checks": [{"key": "k", "limit": {"algorithm": "token_bucket", "rate": "1/h", "burst": 5}}]`),
		{Name: "policy: hits 0 peeks", Phases: []phase{
			{What: "hits 0", Reqs: hostileSame(n, policyBody(ip, "", `, "hits": 0`)), Want: n},
			plainPolicy,
		}},
		{Name: "policy: request.ip not an address", Phases: []phase{
			{What: `"ip": "10.1.0.x"`, Reqs: hostileSame(n, []byte(`{"request": {"path": "/api/x", "ip": "10.1.0.x"}}`)), Want: 0},
		}},
		{Name: "policy: request.ip missing", Phases: []phase{
			{What: "no ip", Reqs: hostileSame(n, []byte(`{"request": {"path": "/api/x"}}`)), Want: 0},
		}},
		bad("the same key twice", explicitBody("", k, k)),
		bad("hits -1", explicitBody(`, "hits": -1`, k)),
		bad("hits 6, above the capacity", explicitBody(`, "hits": 6`, k)),
		bad("hits 2^62", explicitBody(`, "hits": 4611686018427387904`, k)),
		bad("hits 2^63", explicitBody(`, "hits": 9223372036854775808`, k)),
		bad("hits 1.5", explicitBody(`, "hits": 1.5`, k)),
		bad(`hits "1"`, explicitBody(`, "hits": "1"`, k)),
		bad("request hits -1", append(bytes.TrimSuffix(explicitBody("", k), []byte("}")), `, "hits": -1}`...)),
		bad("an unknown field", explicitBody(`, "cost": 0`, k)),
		bad("a body over 64 KiB", append(bytes.Repeat([]byte(" "), 64<<10), explicitBody("", k)...)),
		bad("two JSON values", append(explicitBody("", k), explicitBody("", k)...)),
		bad("a key of 513 bytes", explicitBody("", pfx+strings.Repeat("k", 513-len(pfx)))),
		bad("33 checks", explicitBody("", hostileTimes(33, func(i int) string { return fmt.Sprint(k, i) })...)),
		{Name: "all at once", Phases: []phase{
			{What: "12 checks racing", Reqs: hostileSame(n, explicitBody("", k)), Want: burst, Parallel: true},
		}},
		{Name: "hits 0 peeks", Phases: []phase{
			{What: "hits 0", Reqs: hostileSame(n, explicitBody(`, "hits": 0`, k)), Want: n},
			plain,
		}},
		{Name: "a key of 512 bytes", Phases: []phase{
			{What: "512 bytes", Reqs: hostileSame(n, explicitBody("", pfx+strings.Repeat("k", 512-len(pfx)))), Want: burst},
		}},
		{Name: "keys differing only in invalid UTF-8", Hole: hostiletest.Pending(8), Phases: []phase{
			{What: `"k\xff" and "k\xfe" in turn`, Reqs: hostileTimes(n, func(i int) []byte {
				return explicitBody("", k+string([]byte{0xff - byte(i%2)}))
			}), Want: 2 * burst, Or4xx: true},
			{What: `"k\uFFFD", which neither is`, Reqs: hostileSame(n, explicitBody("", k+"\uFFFD")), Want: burst},
		}},
		{Name: "a key spelling a long key's digest", Phases: []phase{
			{What: "a 300-byte key", Reqs: hostileSame(n, explicitBody("", long)), Want: burst},
			{What: "its digest as the key", Reqs: hostileSame(n, explicitBody("", hostiletest.Digest(long))), Want: burst},
		}},
	}
}

const hostileRLSConfig = `domain: hostile
descriptors:
  - key: user
    rate_limit:
      unit: hour
      requests_per_unit: 1
      sluice: {algorithm: token_bucket, burst: 5}
`

// hostileRLS runs the RLS cases on one sluice started with args, over
// gRPC and over /json (envoyproxy/ratelimit's HTTP endpoint), each case
// under descriptor values of its own.
func hostileRLS(t *testing.T, st string, args ...string) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "hostile.yaml"), hostileRLSConfig)
	p := start(t, nil, append(append(storeArgs(t, st), "--rls", dir, "--rls-http", "127.0.0.1:0"), args...)...)
	c := rlsClient(t, p.addrs["grpc"])
	for i := range rlsCases("") {
		rc := rlsCases(fmt.Sprintf("case%02d-", i))[i]
		t.Run(rc.Name, func(t *testing.T) { hostiletest.Run(t, "rls", rc, rlsSender(c)) })
		if jc := rlsCases(fmt.Sprintf("json%02d-", i))[i]; jc.Name != "an empty value" { // its value has no prefix: gRPC spent it
			t.Run(jc.Name+" (json)", func(t *testing.T) { hostiletest.Run(t, "rls", jc, rlsJSONSender(t, p.addrs["envoy-http"])) })
		}
	}
	t.Run("a value with invalid UTF-8", func(t *testing.T) { hostileRLSInvalidUTF8(t, p.addrs["grpc"], c) })
}

// rawCodec sends and receives messages as the bytes they are, so that a
// test can send what the protobuf library refuses to marshal.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return v.([]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// hostileRLSInvalidUTF8 sends a descriptor value that is not UTF-8 (a
// protobuf string must be): the call is refused, and charges nothing.
func hostileRLSInvalidUTF8(t *testing.T, addr string, c rlspb.RateLimitServiceClient) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	wire, err := proto.Marshal(rlsReq("utf8-kZZ"))
	if err != nil {
		t.Fatal(err)
	}
	wire = bytes.Replace(wire, []byte("kZZ"), []byte("k\xff\xfe"), 1)
	codes := map[string]int{}
	for range hostiletest.N {
		var out []byte
		err := conn.Invoke(context.Background(), "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", wire, &out, grpc.ForceCodec(rawCodec{}))
		codes[status.Code(err).String()]++
	}
	if codes["OK"] != 0 || codes["Internal"]+codes["InvalidArgument"] != hostiletest.N {
		t.Errorf("rls: descriptor value k\\xff\\xfe: answers %v, want every one refused (Internal or InvalidArgument)", codes)
	}
	hostiletest.Run(t, "rls", hostiletest.Case[*rlspb.RateLimitRequest]{Phases: []hostiletest.Phase[*rlspb.RateLimitRequest]{
		{What: "then the value it would be if made valid", Reqs: hostileSame(hostiletest.N, rlsReq("utf8-k\uFFFD\uFFFD")), Want: hostiletest.Burst},
	}}, rlsSender(c))
}

// rlsSender asks the RLS: OK is a 200 and counts as through, OVER_LIMIT a
// 429, INVALID_ARGUMENT a 400; any other error is reported.
func rlsSender(c rlspb.RateLimitServiceClient) hostiletest.Sender[*rlspb.RateLimitRequest] {
	var ok atomic.Int64
	send := func(r *rlspb.RateLimitRequest) (int, error) {
		resp, err := c.ShouldRateLimit(context.Background(), r)
		switch {
		case status.Code(err) == codes.InvalidArgument:
			return 400, nil
		case err != nil:
			return 0, err
		case resp.OverallCode == rlspb.RateLimitResponse_OK:
			ok.Add(1)
			return 200, nil
		case resp.OverallCode == rlspb.RateLimitResponse_OVER_LIMIT:
			return 429, nil
		}
		return 0, fmt.Errorf("overall code %v", resp.OverallCode)
	}
	return hostiletest.Sender[*rlspb.RateLimitRequest]{Send: send, Through: ok.Load}
}

// rlsJSONSender asks the RLS through POST /json: 200 (OK) counts as
// through, 429 is OVER_LIMIT, 400 a request refused.
func rlsJSONSender(t *testing.T, addr string) hostiletest.Sender[*rlspb.RateLimitRequest] {
	var ok atomic.Int64
	send := func(r *rlspb.RateLimitRequest) (int, error) {
		body, err := protojson.Marshal(r)
		if err != nil {
			return 0, err
		}
		resp := do(t, "POST", "http://"+addr+"/json", string(body))
		if resp.status == 200 {
			ok.Add(1)
		}
		return resp.status, nil
	}
	return hostiletest.Sender[*rlspb.RateLimitRequest]{Send: send, Through: ok.Load}
}

// rlsReq is a request of the hostile domain with one descriptor per value,
// each {user: value}.
func rlsReq(values ...string) *rlspb.RateLimitRequest {
	r := &rlspb.RateLimitRequest{Domain: "hostile"}
	for _, v := range values {
		r.Descriptors = append(r.Descriptors, descriptor("user", v))
	}
	return r
}

// rlsCases are the descriptors a hostile client of the RLS sends; every
// value starts with pfx.
func rlsCases(pfx string) []hostiletest.Case[*rlspb.RateLimitRequest] {
	type phase = hostiletest.Phase[*rlspb.RateLimitRequest]
	n, burst := hostiletest.N, hostiletest.Burst
	k := pfx + "k"
	plain := func(want int) phase {
		return phase{What: "then plain requests", Reqs: hostileSame(n, rlsReq(k)), Want: want}
	}
	bad := func(what string, r *rlspb.RateLimitRequest) hostiletest.Case[*rlspb.RateLimitRequest] {
		return hostiletest.Case[*rlspb.RateLimitRequest]{Name: what, Phases: []phase{{What: what, Reqs: hostileSame(n, r), Want: 0}, plain(burst)}}
	}
	// counted: refused, and its hits charged all the same, into a bounded
	// debt that refuses the plain requests after it
	counted := func(what string, r *rlspb.RateLimitRequest) hostiletest.Case[*rlspb.RateLimitRequest] {
		return hostiletest.Case[*rlspb.RateLimitRequest]{Name: what, Phases: []phase{{What: what, Reqs: hostileSame(n, r), Want: 0}, plain(0)}}
	}
	giveBack := func(h uint64, v string) *rlspb.RateLimitRequest {
		r := rlsReq(v)
		r.Descriptors[0].HitsAddend = wrapperspb.UInt64(h)
		r.Descriptors[0].IsNegativeHits = true
		return r
	}
	kb := pfx + strings.Repeat("v", 1024-len(pfx))
	withHits := func(h uint64) *rlspb.RateLimitRequest {
		r := rlsReq(k)
		r.Descriptors[0].HitsAddend = wrapperspb.UInt64(h)
		return r
	}
	deep := rlsReq(k)
	for i := range 16 {
		deep.Descriptors[0].Entries = append(deep.Descriptors[0].Entries, descriptor("user", fmt.Sprint(i)).Entries...)
	}
	noDomain := rlsReq(k)
	noDomain.Domain = ""
	huge := rlsReq(k)
	huge.HitsAddend = math.MaxUint32
	long := pfx + strings.Repeat("d", 300)
	return []hostiletest.Case[*rlspb.RateLimitRequest]{
		{Name: "a 1 KB value", Phases: []phase{{What: "1024 bytes", Reqs: hostileSame(n, rlsReq(kb)), Want: burst}}},
		{Name: "1 KB values differing in the last byte", Phases: []phase{{What: "two values in turn", Reqs: hostileTimes(n, func(i int) *rlspb.RateLimitRequest {
			return rlsReq(kb[:1023] + fmt.Sprint(i%2))
		}), Want: 2 * burst}}},
		bad("a value of 1025 bytes", rlsReq(kb+"v")),
		bad("a value of 100 KB", rlsReq(pfx+strings.Repeat("v", 100<<10))),
		bad("65 descriptors", rlsReq(hostileTimes(65, func(i int) string { return fmt.Sprint(k, i) })...)),
		bad("17 entries", deep),
		bad("an empty domain", noDomain),
		counted("64 copies of one descriptor", rlsReq(hostileSame(64, k)...)),
		counted("request hits_addend 2^32-1", huge),
		counted("descriptor hits_addend 2^64-1", withHits(math.MaxUint64)),
		counted("descriptor hits_addend 6, above the capacity", withHits(6)),
		{Name: "is_negative_hits of 2^64-1 on a fresh counter", Phases: []phase{
			{What: "giving back what was never used", Reqs: hostileSame(n, giveBack(math.MaxUint64, k)), Want: n},
			plain(burst), // never below empty: no room beyond the limit
		}},
		{Name: "is_negative_hits on a spent counter", Phases: []phase{
			{What: "plain requests", Reqs: hostileSame(n, rlsReq(k)), Want: burst},
			{What: "giving back 2^64-1", Reqs: hostileSame(1, giveBack(math.MaxUint64, k)), Want: 1},
			plain(burst), // back to empty, not below
		}},
		{Name: "is_negative_hits against another value's counter", Phases: []phase{
			{What: "giving back on a neighbour's value", Reqs: hostileSame(n, giveBack(math.MaxUint64, k+"-other")), Want: n},
			plain(burst),
		}},
		{Name: "all at once", Phases: []phase{
			{What: "12 requests racing", Reqs: hostileSame(n, rlsReq(k)), Want: burst, Parallel: true},
			{What: "12 more with the descriptor twice, racing", Reqs: hostileSame(n, rlsReq(k, k)), Want: 0, Parallel: true},
		}},
		{Name: "64 descriptors", Phases: []phase{
			{What: "64 values", Reqs: hostileSame(n, rlsReq(hostileTimes(64, func(i int) string { return fmt.Sprint(k, i) })...)), Want: burst},
			plain(burst),
		}},
		{Name: "the same descriptor twice", Phases: []phase{
			{What: "twice in each request", Reqs: hostileSame(n, rlsReq(k, k)), Want: burst / 2},
			plain(0), // the refused pairs were counted
		}},
		{Name: "descriptor hits_addend 0 peeks", Phases: []phase{
			{What: "hits_addend 0", Reqs: hostileSame(n, withHits(0)), Want: n},
			plain(burst),
		}},
		{Name: "an empty value", Phases: []phase{{What: `""`, Reqs: hostileSame(n, rlsReq("")), Want: burst}}},
		{Name: "a value with control bytes", Phases: []phase{{What: `"\x00\n"`, Reqs: hostileSame(n, rlsReq(k+"\x00\n")), Want: burst}}},
		{Name: "a value spelling a long value's digest", Phases: []phase{
			{What: "a 300-byte value", Reqs: hostileSame(n, rlsReq(long)), Want: burst},
			{What: "its digest as the value", Reqs: hostileSame(n, rlsReq(hostiletest.Digest(long))), Want: burst},
		}},
	}
}

// TestHostileRLSMemory measures what 50,000 distinct 1 KB descriptor values
// cost the memory store, against 50,000 distinct 1 KB values of a gateway
// key header: both are bounded by decide.KeyValue, so they cost about the
// same (before RLS values were bounded: 71.7 MB against 16.4 MB).
func TestHostileRLSMemory(t *testing.T) {
	const keys = 50_000
	value := func(i int) string {
		v := fmt.Sprintf("%08d", i)
		return v + strings.Repeat("v", 1024-len(v))
	}
	cfg, err := rls.ParseConfig("hostile.yaml", []byte(hostileRLSConfig))
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.DiscardHandler)
	rlsBytes := heapGrowth(t, func(lim *sluice.Limiter) {
		svc, err := rls.New(lim, cfg, rls.Options{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		defer svc.Close()
		for i := range keys {
			r, err := svc.ShouldRateLimit(context.Background(), rlsReq(value(i)))
			if err != nil || r.OverallCode != rlspb.RateLimitResponse_OK {
				t.Fatalf("descriptor %d: %v %v", i, r, err)
			}
		}
	})
	gatewayBytes := heapGrowth(t, func(lim *sluice.Limiter) {
		pol, err := policy.Parse("hostile.yaml", []byte("rules:\n  - name: api\n    limits:\n      - "+
			`{name: per-user, key: "header:X-User-ID", algorithm: token_bucket, rate: 1/h, burst: 5}`+"\n"), policy.Options{})
		if err != nil {
			t.Fatal(err)
		}
		mw, err := httplimit.New(lim, httplimit.Config{Source: pol, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		for i := range keys {
			r := httptest.NewRequest("GET", "/api/x", nil)
			r.Header.Set("X-User-ID", value(i))
			w := httptest.NewRecorder()
			if h.ServeHTTP(w, r); w.Code != 200 {
				t.Fatalf("request %d: %d", i, w.Code)
			}
		}
	})
	t.Logf("%d distinct 1 KB values on memstore: RLS descriptors %.1f MB, gateway key headers %.1f MB",
		keys, float64(rlsBytes)/1e6, float64(gatewayBytes)/1e6)
	if rlsBytes > gatewayBytes*3/2 {
		t.Errorf("RLS descriptor values take %.1f MB, more than 1.5 times the gateway's %.1f MB: not bounded like gateway key values",
			float64(rlsBytes)/1e6, float64(gatewayBytes)/1e6)
	}
}

// heapGrowth returns how much the live heap grew while run charged a
// limiter on a fresh memory store, with the store still holding its keys.
func heapGrowth(t *testing.T, run func(*sluice.Limiter)) int64 {
	store, err := memstore.New(memstore.Config{MaxKeys: 200_000})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	run(sluice.New(store))
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(store)
	return int64(after.HeapAlloc) - int64(before.HeapAlloc)
}
