package hostiletest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// The policies of the table. Every limit is a token bucket that refills one
// request an hour, so its bound over a test is exactly its burst.
const (
	limitIP   = `{name: per-ip, key: ip, algorithm: token_bucket, rate: 1/h, burst: 5}`
	limitUser = `{name: per-user, key: "header:X-User-ID", algorithm: token_bucket, rate: 1/h, burst: 5}`
	// ip8 is a looser per-ip limit beside a per-user one.
	limitIP8 = `{name: per-ip, key: ip, algorithm: token_bucket, rate: 1/h, burst: 8}`
)

func rules(top string, limits ...string) string {
	s := top + "rules:\n  - name: api\n    match: {path: /api/}\n    limits:\n"
	for _, l := range limits {
		s += "      - " + l + "\n"
	}
	return s
}

var (
	// PolicyIP limits each client address; PolicyUser each X-User-ID
	// (requests without it are not limited). Front-ends configured in Go
	// rather than by a policy (httplimit.Config.Limits) run the cases of
	// these two with limits of their own that mean the same.
	PolicyIP        = rules("", limitIP)
	PolicyUser      = rules("", limitUser)
	policyIPCost    = rules("", `{name: per-ip, key: ip, algorithm: token_bucket, rate: 1/h, burst: 5, cost: "header:X-Cost"}`)
	policyUserIP    = rules("", limitUser, limitIP8)
	policyUserDeny  = rules("", `{name: per-user, key: "header:X-User-ID", algorithm: token_bucket, rate: 1/h, burst: 5, on_missing: refuse}`)
	policyTwoParts  = rules("", `{name: per-pair, key: ["header:X-A", "header:X-B"], algorithm: token_bucket, rate: 1/h, burst: 5}`)
	policyUntrusted = rules("trusted_proxies: [10.0.0.0/8]\n", limitIP)
	policyFwd       = rules("trusted_proxies: [10.0.0.0/8]\nclient_ip_header: Forwarded\n", limitIP)
	policyTrusted   = rules("trusted_proxies: [127.0.0.0/8, \"::1/128\"]\n", limitIP)
	policyScale1    = rules("", `{name: per-ip, key: ip, algorithm: token_bucket, rate: 1/h, burst: 5, overrides: [{key: "127.0.0.1", scale: 1}]}`)
	policyHost      = "rules:\n  - name: beta\n    match: {host: beta.example.com}\n    limits:\n      - " + limitIP + "\n"
	// policyOverrides is docs/config.md's example: a VIP header and an
	// internal caller's header, both sent by the client.
	policyOverrides = `rules:
  - name: api
    match: {path: /api/}
    limits:
      - name: per-user
        key: header:X-User-ID
        algorithm: token_bucket
        rate: 1/h
        burst: 5
        overrides:
          - {header: X-Plan, equals: vip, scale: 10}
          - {header: X-Internal-Caller, equals: billing, unlimited: true}
`
)

// PolicyUserIP limits each X-User-ID and, more loosely, each client
// address: httplimit also runs its cases with the two limits in two stacked
// middlewares.
var PolicyUserIP = policyUserIP

// times returns n requests made by f.
func times[R any](n int, f func(i int) R) []R {
	rs := make([]R, n)
	for i := range rs {
		rs[i] = f(i)
	}
	return rs
}

// same returns n copies of r.
func same[R any](n int, r R) []R { return times(n, func(int) R { return r }) }

func hdr(kv ...string) []Field {
	var fs []Field
	for i := 0; i+1 < len(kv); i += 2 {
		fs = append(fs, Field{kv[i], kv[i+1]})
	}
	return fs
}

// clean is the follow-up phase of a case: plain requests from the same
// client, to see what the hostile ones left of the limit.
func clean(want int, r Request) Phase[Request] {
	return Phase[Request]{What: "then plain requests", Reqs: same(N, r), Want: want}
}

// Digest is what decide.KeyValue turns a long value into, computed apart
// from it.
func Digest(v string) string {
	sum := sha256.Sum256([]byte(v))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Cases returns the table.
func Cases() []Case[Request] {
	var cs []Case[Request]
	cs = append(cs, costCases()...)
	cs = append(cs, keyCases()...)
	cs = append(cs, partCases()...)
	cs = append(cs, ipCases()...)
	cs = append(cs, hostPathCases()...)
	cs = append(cs, methodCases()...)
	cs = append(cs, overrideCases()...)
	cs = append(cs, whenCases()...)
	return append(cs, algorithmCases(cs)...)
}

// algorithms are the other limits some cases run under: each admits
// exactly Burst requests over a test, as the token bucket does.
var algorithms = []struct{ name, spec string }{
	{"gcra", "algorithm: gcra, rate: 1/h, burst: 5"},
	{"sliding_log", "algorithm: sliding_log, limit: 5, window: 1h"},
}

// algorithmCases repeats cases that charge more than one unit or race for
// the last ones under the other algorithms.
func algorithmCases(cs []Case[Request]) []Case[Request] {
	var out []Case[Request]
	for _, c := range cs {
		switch c.Name {
		case "cost 3", `cost "0"`, "cost sent twice", "cost 2, all at once", "key header, all at once", "key header values differing only after byte 256":
		default:
			continue
		}
		for _, a := range algorithms {
			v := c
			v.Name = c.Name + ", " + a.name
			v.Policy = strings.ReplaceAll(c.Policy, "algorithm: token_bucket, rate: 1/h, burst: 5", a.spec)
			out = append(out, v)
		}
	}
	return out
}

// costCases send `cost: header:X-Cost` values a client must not be able to
// use: each is a 4xx that charges nothing, never an admission.
func costCases() []Case[Request] {
	// (" 3" is 3: HTTP drops the blanks around a field value.)
	bad := []string{"0", "-1", "abc", "1.5", "999999", "9223372036854775808", "+3", "0x3", "1e1", "", "\u0663", "3,3", "3\x00"}
	var cs []Case[Request]
	for _, v := range bad {
		cs = append(cs, Case[Request]{
			Name:   fmt.Sprintf("cost %q", v),
			Policy: policyIPCost,
			Phases: []Phase[Request]{
				{What: fmt.Sprintf("X-Cost: %q", v), Reqs: same(N, Request{Header: hdr("X-Cost", v)}), Want: 0},
				clean(Burst, Request{}),
			},
		})
	}
	return append(cs,
		Case[Request]{Name: "cost sent twice", Policy: policyIPCost, Phases: []Phase[Request]{
			{What: "X-Cost: 1 twice", Reqs: same(N, Request{Header: hdr("X-Cost", "1", "X-Cost", "1")}), Want: 0},
			clean(Burst, Request{}),
		}},
		Case[Request]{Name: "cost in odd case", Policy: policyIPCost, Phases: []Phase[Request]{
			{What: "x-COST: 0", Reqs: same(N, Request{Header: hdr("x-COST", "0")}), Want: 0},
			clean(Burst, Request{}),
		}},
		Case[Request]{Name: "cost 2, all at once", Policy: policyIPCost, Phases: []Phase[Request]{
			{What: "X-Cost: 2, racing", Reqs: same(N, Request{Header: hdr("X-Cost", "2")}), Want: 2, Parallel: true},
			clean(1, Request{}),
		}},
		Case[Request]{Name: "cost 3", Policy: policyIPCost, Phases: []Phase[Request]{
			{What: "X-Cost: 3", Reqs: same(N, Request{Header: hdr("X-Cost", "3")}), Want: 1},
			clean(Burst-3, Request{}),
		}},
		Case[Request]{Name: "cost absent", Policy: policyIPCost, Phases: []Phase[Request]{
			{What: "no X-Cost", Reqs: same(N, Request{}), Want: Burst},
		}},
	)
}

// keyCases send key header values that must not let a client out of its
// counter or into another's: first how the header is sent (repeated, in
// odd case, absent, raced), then what its name and value hold
// (keyBytesCases).
func keyCases() []Case[Request] {
	names := []string{"x-user-id", "X-USER-ID", "X-User-Id", "x-UsEr-iD"}
	cs := []Case[Request]{
		{Name: "key header repeated", Policy: PolicyUser, Phases: []Phase[Request]{
			{What: "X-User-ID sent twice", Reqs: times(N, func(i int) Request {
				return Request{Header: hdr("X-User-ID", "alice", "X-User-ID", fmt.Sprint("other", i))}
			}), Want: 0},
			clean(Burst, user("alice")),
		}, NoAPI: "one value per header"},
		{Name: "key header repeated with one value", Policy: PolicyUser, Phases: []Phase[Request]{
			{What: "X-User-ID: alice twice", Reqs: same(N, Request{Header: hdr("X-User-ID", "alice", "x-user-id", "alice")}), Want: 0},
			clean(Burst, user("alice")),
		}, NoAPI: "one value per header"},
		{Name: "key header, pipelined", Policy: PolicyUser, Phases: []Phase[Request]{
			{What: "12 requests on one connection", Reqs: same(N, user("alice")), Want: Burst, Pipelined: true},
		}},
		{Name: "key header, all at once", Policy: policyUserIP, Phases: []Phase[Request]{
			{What: "12 requests racing", Reqs: same(N, user("alice")), Want: Burst, Parallel: true},
			{What: "12 more without the header, racing", Reqs: same(N, Request{}), Want: 8 - Burst, Parallel: true},
		}},
		{Name: "key header name in odd case", Policy: PolicyUser, Phases: []Phase[Request]{
			{What: "x-user-id, X-USER-ID, ...", Reqs: times(N, func(i int) Request {
				return Request{Header: hdr(names[i%len(names)], "alice")}
			}), Want: Burst},
		}},
		{Name: "key header absent", Policy: policyUserIP, Phases: []Phase[Request]{
			{What: "no X-User-ID: counted per ip", Reqs: same(N, Request{}), Want: 8},
		}},
		{Name: "key header empty", Policy: policyUserIP, Phases: []Phase[Request]{
			{What: "X-User-ID: (empty): counted per ip", Reqs: same(N, user("")), Want: 8},
		}},
		{Name: "key header absent, on_missing: refuse", Policy: policyUserDeny, Hole: Pending(4), Phases: []Phase[Request]{
			{What: "no X-User-ID", Reqs: same(N, Request{}), Want: 0},
			clean(Burst, user("alice")),
		}},
	}
	return append(cs, keyBytesCases()...)
}

// user is a request keyed by X-User-ID: v.
func user(v string) Request { return Request{Header: hdr("X-User-ID", v)} }

// keyBytesCases send key headers whose name or value holds odd bytes:
// long, invalid UTF-8, folded, control bytes, a digest's spelling.
func keyBytesCases() []Case[Request] {
	long := strings.Repeat("u", 100<<10)
	at256 := strings.Repeat("a", 256)
	longA, longB := strings.Repeat("d", 300), strings.Repeat("d", 299)+"e"
	return []Case[Request]{
		{Name: "key header 100 KB", Policy: PolicyUser, Phases: []Phase[Request]{
			{What: "one 100 KB value", Reqs: same(N, user(long)), Want: Burst, Or4xx: true},
			{What: "another 100 KB value", Reqs: same(N, user(long[1:]+"v")), Want: Burst, Or4xx: true},
		}},
		{Name: "key header invalid UTF-8", Policy: PolicyUser, Phases: []Phase[Request]{
			{What: "X-User-ID: \\xff\\xfe", Reqs: same(N, user("\xff\xfe")), Want: Burst, Or4xx: true},
		}},
		{Name: "key headers differing only in invalid bytes", Policy: PolicyUser, Phases: []Phase[Request]{
			{What: "u\\xff and u\\xfe in turn", Reqs: times(N, func(i int) Request {
				return user("u" + string([]byte{0xff - byte(i%2)}))
			}), Want: 2 * Burst, Or4xx: true},
			{What: "u\\uFFFD, which neither is", Reqs: same(N, user("u\uFFFD")), Want: Burst},
		}},
		{Name: "key header folded over two lines", Policy: PolicyUser, NoAPI: "no line folding in JSON", Phases: []Phase[Request]{
			{What: "X-User-ID: alice CRLF SP bob", Reqs: same(N, user("alice\r\n bob")), Want: Burst, Or4xx: true},
		}},
		{Name: "key header name with a blank before the colon", Policy: PolicyUser, Phases: []Phase[Request]{
			{What: "X-User-ID : alice", Reqs: same(N, Request{Header: hdr("X-User-ID ", "alice")}), Want: Burst, Or4xx: true},
		}},
		{Name: "key header with underscores for dashes", Policy: PolicyUser, Hole: finding("X_User_ID is not X-User-ID to sluice, but is to CGI/WSGI upstreams (HTTP_X_USER_ID)"), Phases: []Phase[Request]{
			{What: "X_User_ID: alice", Reqs: same(N, Request{Header: hdr("X_User_ID", "alice")}), Want: Burst, Or4xx: true},
		}},
		{Name: "key header with control bytes", Policy: PolicyUser, Phases: []Phase[Request]{
			{What: "X-User-ID: a\\x01b", Reqs: same(N, user("a\x01b")), Want: Burst, Or4xx: true},
		}},
		{Name: "key header values differing only after byte 256", Policy: PolicyUser, Phases: []Phase[Request]{
			{What: "256 a's then 1, then 2, in turn", Reqs: times(N, func(i int) Request {
				return user(at256 + fmt.Sprint(i%2+1))
			}), Want: 2 * Burst},
			{What: "300-byte values differing in the last byte, in turn", Reqs: times(N, func(i int) Request {
				return user([]string{longA, longB}[i%2])
			}), Want: 2 * Burst},
		}},
		{Name: "key header spelling a long value's digest", Policy: PolicyUser, Phases: []Phase[Request]{
			{What: "a 300-byte value", Reqs: same(N, user(longA)), Want: Burst},
			{What: "its digest, sent as the value", Reqs: same(N, user(Digest(longA))), Want: Burst},
		}},
		{Name: "key parts shifted between headers", Policy: policyTwoParts, Phases: []Phase[Request]{
			{What: "X-A: 1:a, X-B: b", Reqs: same(N, Request{Header: hdr("X-A", "1:a", "X-B", "b")}), Want: Burst},
			{What: "X-A: 1, X-B: a1:b", Reqs: same(N, Request{Header: hdr("X-A", "1", "X-B", ":a1:b")}), Want: Burst},
		}},
	}
}

// finding marks a case that fails today for a reason no branch fixes yet.
func finding(why string) map[string]string { return map[string]string{"*": "finding: " + why} }

// partCases spell query parameters and cookies a key is made of so that
// sluice and the upstream may read them differently.
func partCases() []Case[Request] {
	query := rules("", `{name: per-user, key: "query:user", algorithm: token_bucket, rate: 1/h, burst: 5}`)
	cookie := rules("", `{name: per-session, key: "cookie:session", algorithm: token_bucket, rate: 1/h, burst: 5}`)
	dropped := finding("a malformed key part is taken as missing, and the limit skipped")
	twice := finding("a query parameter or cookie sent twice is counted under its first value; a header sent twice is a 400")
	get := func(path string, kv ...string) Request { return Request{Path: path, Header: hdr(kv...)} }
	return []Case[Request]{
		{Name: "query key", Policy: query, Phases: []Phase[Request]{
			{What: "?user=alice", Reqs: same(N, get("/api/x?user=alice")), Want: Burst},
		}},
		{Name: "query key with a bad escape", Policy: query, Hole: dropped, Phases: []Phase[Request]{
			{What: "?user=alice%zz", Reqs: same(N, get("/api/x?user=alice%zz")), Want: Burst, Or4xx: true},
		}},
		{Name: "query key with a semicolon", Policy: query, Hole: dropped, Phases: []Phase[Request]{
			{What: "?user=alice;x=1", Reqs: same(N, get("/api/x?user=alice;x=1")), Want: Burst, Or4xx: true},
		}},
		{Name: "query key sent twice", Policy: query, Hole: twice, Phases: []Phase[Request]{
			{What: "?user=alice&user=<another each time>", Reqs: times(N, func(i int) Request {
				return get(fmt.Sprintf("/api/x?user=alice&user=u%d", i))
			}), Want: 0},
		}},
		{Name: "cookie key", Policy: cookie, Phases: []Phase[Request]{
			{What: "session=s1", Reqs: same(N, get("/api/x", "Cookie", "session=s1")), Want: Burst},
		}},
		{Name: "cookie key with a comma", Policy: cookie, Phases: []Phase[Request]{
			{What: "Cookie: session=s1,x", Reqs: same(N, get("/api/x", "Cookie", "session=s1,x")), Want: Burst, Or4xx: true},
		}},
		{Name: "cookie key with a quote inside", Policy: cookie, Hole: dropped, Phases: []Phase[Request]{
			{What: `Cookie: session=s1"x`, Reqs: same(N, get("/api/x", "Cookie", `session=s1"x`)), Want: Burst, Or4xx: true},
		}},
		{Name: "cookie key sent twice", Policy: cookie, Hole: twice, NoAPI: "one value per cookie", Phases: []Phase[Request]{
			{What: "Cookie: session=s1; session=<another each time>", Reqs: times(N, func(i int) Request {
				return get("/api/x", "Cookie", fmt.Sprintf("session=s1; session=s%d", i+2))
			}), Want: 0},
		}},
	}
}

// ipCases forge forwarding headers: from a peer that is not a trusted
// proxy they change nothing; through a trusted one, only the rightmost
// untrusted address counts.
func ipCases() []Case[Request] {
	many := strings.Repeat("203.0.113.9, ", 1000) + "198.51.100.7"
	garbage := "not-an-ip, ::::, 999.1.1.1, 1.2.3.4:99999, \xff, , ,"
	untrusted := "from a peer that is not a trusted proxy: counted under the peer"
	spoof := func(name string, f func(i int) string) Phase[Request] {
		return Phase[Request]{What: name, Reqs: times(N, func(i int) Request { return Request{Header: hdr(name, f(i))} }), Want: Burst}
	}
	rnd := func(i int) string { return fmt.Sprintf("198.51.100.%d", i+1) }
	return []Case[Request]{
		{Name: "X-Forwarded-For spoofed", Policy: policyUntrusted, NoAPI: untrusted, Phases: []Phase[Request]{spoof("X-Forwarded-For", rnd)}},
		{Name: "X-Real-IP spoofed", Policy: policyUntrusted, NoAPI: untrusted, Phases: []Phase[Request]{spoof("X-Real-IP", rnd)}},
		{Name: "Forwarded spoofed", Policy: policyFwd, NoAPI: untrusted, Phases: []Phase[Request]{
			spoof("Forwarded", func(i int) string { return "for=" + rnd(i) })}},
		{Name: "X-Forwarded-For with 1000 entries", Policy: policyUntrusted, NoAPI: untrusted, Phases: []Phase[Request]{
			spoof("X-Forwarded-For", func(i int) string { return fmt.Sprint(i, ".", many) })}},
		{Name: "X-Forwarded-For garbage", Policy: policyUntrusted, NoAPI: untrusted, Phases: []Phase[Request]{
			spoof("X-Forwarded-For", func(i int) string { return garbage + fmt.Sprint(i) })}},
		{Name: "X-Forwarded-For forged left of a trusted proxy", Policy: policyTrusted, Phases: []Phase[Request]{
			spoof("X-Forwarded-For", func(i int) string { return rnd(i+20) + ", 203.0.113.7" })}},
		{Name: "X-Forwarded-For of 1000 forged entries through a trusted proxy", Policy: policyTrusted, Phases: []Phase[Request]{
			spoof("X-Forwarded-For", func(i int) string { return fmt.Sprint(i, ".", many) })}},
		{Name: "X-Forwarded-For garbage through a trusted proxy", Policy: policyTrusted, NoAPI: "the garbage holds invalid UTF-8, which makes a decision API body a 400 (hole 8); the API ignores forwarding headers anyway", Phases: []Phase[Request]{
			spoof("X-Forwarded-For", func(i int) string { return garbage + fmt.Sprint(i) })}},
		{Name: "X-Forwarded-For repeated through a trusted proxy", Policy: policyTrusted, NoAPI: "one value per header", Phases: []Phase[Request]{
			{What: "two X-Forwarded-For lines, the first forged", Reqs: times(N, func(i int) Request {
				return Request{Header: hdr("X-Forwarded-For", rnd(i), "x-forwarded-for", "203.0.113.7")}
			}), Want: Burst}}},
		{Name: "Forwarded through a proxy that sets X-Forwarded-For", Policy: policyTrusted, Phases: []Phase[Request]{
			spoof("Forwarded", func(i int) string { return "for=" + rnd(i) })}},
	}
}

// hostPathCases spell a host or a path that a rule matches in other ways:
// the request is counted under the rule, or refused with a 4xx, never
// forwarded uncounted.
func hostPathCases() []Case[Request] {
	var cs []Case[Request]
	for _, h := range []string{"BETA.EXAMPLE.COM", "beta.example.com.", "beta.example.com:8080", "Beta.Example.Com.:8080"} {
		cs = append(cs, Case[Request]{Name: "host " + h, Policy: policyHost, Total: Burst, Phases: []Phase[Request]{
			{What: "Host: " + h, Reqs: same(N, Request{Host: h}), Want: Burst, Or4xx: true},
			clean(-1, Request{Host: "beta.example.com"}),
		}})
	}
	cs = append(cs,
		Case[Request]{Name: "Host sent twice", Policy: policyHost, NoAPI: "one host", Phases: []Phase[Request]{
			{What: "Host: other.example and Host: beta.example.com", Reqs: same(N, Request{Host: "other.example", Header: hdr("Host", "beta.example.com")}), Want: 0},
			clean(Burst, Request{Host: "beta.example.com"}),
		}},
		Case[Request]{Name: "host in an absolute request target", Policy: policyHost, Total: Burst, Phases: []Phase[Request]{
			{What: "GET http://beta.example.com/x, Host: other.example", Reqs: same(N, Request{Host: "other.example", Path: "http://beta.example.com/x"}), Want: Burst, Or4xx: true},
			clean(-1, Request{Host: "beta.example.com"}),
		}},
	)
	for _, p := range []string{"/api%2Fx", "/api;x/x", "/API/x", "//api/x", "/./api/x", "/api/../api/x", "/%61pi/x", "/%61%70%69/x", "/api/x/..%2F..%2Fapi/x", "/api%2fx", "/ap%69/x"} {
		cs = append(cs, Case[Request]{Name: "path " + p, Policy: PolicyIP, Total: Burst, Phases: []Phase[Request]{
			{What: "GET " + p, Reqs: same(N, Request{Path: p}), Want: Burst, Or4xx: true},
			clean(-1, Request{}),
		}})
	}
	return cs
}

// methodCases spell the method a rule matches in other ways, or name
// another one in the headers some frameworks honour on a POST: the request
// is counted under the rule, or refused with a 4xx, never forwarded
// uncounted as a method the upstream serves as the rule's.
func methodCases() []Case[Request] {
	policy := "rules:\n  - name: api\n    match: {methods: [POST], path: /api/}\n    limits:\n      - " + limitIP + "\n"
	post := Request{Method: "POST"}
	spell := func(what string, ms ...string) Case[Request] {
		return Case[Request]{Name: "method " + what, Policy: policy, Total: Burst, Phases: []Phase[Request]{
			{What: strings.Join(ms, ", "), Reqs: times(N, func(i int) Request { return Request{Method: ms[i%len(ms)]} }), Want: Burst, Or4xx: true},
			clean(-1, post),
		}}
	}
	overrides := []string{"X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override", "x-http-method-override", "X_HTTP_Method_Override"}
	odd := []string{"po\u017ft", "PO\x01ST", "P\xd6ST", "POST\x7f", "PO(ST"} // "poſt" is POST to Python's upper()
	return []Case[Request]{
		spell("in lower case", "post"),
		spell("in mixed case", "Post", "pOST", "PoSt", "posT"),
		{Name: "method overridden by a header", Policy: policy, Phases: []Phase[Request]{
			{What: "POST with X-HTTP-Method-Override: GET, ...", Reqs: times(N, func(i int) Request {
				return Request{Method: "POST", Header: hdr(overrides[i%len(overrides)], "GET")}
			}), Want: Burst},
		}},
		{Name: "method with odd bytes", Policy: policy, Phases: []Phase[Request]{
			{What: "po\\u017ft, PO\\x01ST, ...", Reqs: times(N, func(i int) Request { return Request{Method: odd[i%len(odd)]} }), Want: 0},
			clean(Burst, post),
		}},
	}
}

// overrideCases send the headers of overrides that grant more: from a
// client that is not a trusted proxy they grant nothing.
func overrideCases() []Case[Request] {
	mallory := func(kv ...string) Request {
		return Request{Header: hdr(append([]string{"X-User-ID", "mallory"}, kv...)...)}
	}
	hole3 := Pending(3)
	return []Case[Request]{
		{Name: "override X-Internal-Caller: billing (unlimited)", Policy: policyOverrides, Hole: hole3, Phases: []Phase[Request]{
			{What: "X-Internal-Caller: billing", Reqs: same(N, mallory("X-Internal-Caller", "billing")), Want: Burst},
		}},
		{Name: "override x-internal-caller in odd case", Policy: policyOverrides, Hole: hole3, Phases: []Phase[Request]{
			{What: "x-INTERNAL-caller: billing", Reqs: same(N, mallory("x-INTERNAL-caller", "billing")), Want: Burst},
		}},
		{Name: "override X-Plan: vip (scale 10)", Policy: policyOverrides, Hole: hole3, Phases: []Phase[Request]{
			{What: "X-Plan: vip", Reqs: same(N*5, mallory("X-Plan", "vip")), Want: Burst},
		}},
		{Name: "override with scale 1", Policy: policyScale1, Hole: Pending(2), Phases: []Phase[Request]{
			{What: "the overridden key", Reqs: same(N, Request{}), Want: Burst},
		}},
	}
}

// policyEntry counts the requests through the entry api, the rule they
// match first, unless a trusted proxy (none of the test's clients) names
// another in X-Sluice-Entry. policyRelateMissing limits each address only
// while its per-user limit is busy, keyed by a header the requests lack.
var (
	policyEntry = rules("trusted_proxies: [10.0.0.0/8]\nentry_header: X-Sluice-Entry\n",
		`{name: per-ip, key: ip, algorithm: token_bucket, rate: 1/h, burst: 5, when: {entry: api}}`)
	policyRelateMissing = rules("", `{name: per-ip, key: ip, algorithm: token_bucket, rate: 1/h, burst: 5, when: {limit: per-user, above: 0.8}}`) +
		"  - name: users\n    match: {path: /users/}\n    limits:\n      - " + limitUser + "\n"
)

// whenCases send what a client could use to step out of a limit with a
// when: the entry header of a trusted proxy, which a client cannot set
// (ignored, in any case, sent twice), and a request that lacks the key of
// the limit a relation looks at (the limit then applies).
func whenCases() []Case[Request] {
	return []Case[Request]{
		{Name: "entry header from a client", Policy: policyEntry, Phases: []Phase[Request]{
			{What: "X-Sluice-Entry: elsewhere", Reqs: same(N, Request{Header: hdr("X-Sluice-Entry", "elsewhere")}), Want: Burst},
			{What: "x-SLUICE-entry: other", Reqs: same(N, Request{Header: hdr("x-SLUICE-entry", "other")}), Want: 0},
		}},
		{Name: "entry header from a client, twice", Policy: policyEntry, Phases: []Phase[Request]{
			{What: "X-Sluice-Entry: api, then other", Reqs: same(N, Request{Header: hdr("X-Sluice-Entry", "api", "X-Sluice-Entry", "other")}), Want: Burst},
		}, NoAPI: "one value per header"},
		{Name: "relation to a key the request lacks", Policy: policyRelateMissing, Phases: []Phase[Request]{
			{What: "no X-User-ID", Reqs: same(N, Request{}), Want: Burst},
		}},
	}
}
