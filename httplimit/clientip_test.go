package httplimit

import (
	"net/http"
	"net/netip"
	"runtime"
	"strings"
	"testing"
)

func req(remote string, headers ...string) *http.Request {
	r, _ := http.NewRequest("GET", "http://example.test/", nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Add(headers[i], headers[i+1])
	}
	return r
}

var proxies = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}

func TestClientIP(t *testing.T) {
	for _, tc := range []struct {
		name   string
		header string
		r      *http.Request
		want   string
	}{
		{"peer, no proxies trusted", "", req("203.0.113.7:5000", "X-Forwarded-For", "1.2.3.4"), "203.0.113.7"},
		{"trusted peer, one hop", "", req("10.0.0.1:80", "X-Forwarded-For", "198.51.100.9"), "198.51.100.9"},
		{"rightmost untrusted wins", "", req("10.0.0.1:80", "X-Forwarded-For", "6.6.6.6, 198.51.100.9, 10.1.1.1"), "198.51.100.9"},
		{"several header lines", "", req("10.0.0.1:80", "X-Forwarded-For", "6.6.6.6", "X-Forwarded-For", "198.51.100.9"), "198.51.100.9"},
		{"all trusted: leftmost", "", req("10.0.0.1:80", "X-Forwarded-For", "10.9.9.9, 10.1.1.1"), "10.9.9.9"},
		{"garbage hop skipped", "", req("10.0.0.1:80", "X-Forwarded-For", "198.51.100.9, not-an-ip"), "198.51.100.9"},
		{"ipv4 with port", "", req("10.0.0.1:80", "X-Forwarded-For", "198.51.100.9:4711"), "198.51.100.9"},
		{"ipv6 bracketed with port", "", req("10.0.0.1:80", "X-Forwarded-For", "[2001:db8::1]:4711"), "2001:db8::1"},
		{"mapped ipv4", "", req("[::ffff:10.0.0.1]:80", "X-Forwarded-For", "::ffff:198.51.100.9"), "198.51.100.9"},
		{"no header from trusted peer", "", req("10.0.0.1:80"), "10.0.0.1"},
		{"forwarded", "Forwarded", req("10.0.0.1:80", "Forwarded", `for=192.0.2.60;proto=http;by=203.0.113.43`), "192.0.2.60"},
		{"forwarded quoted ipv6 with port", "Forwarded", req("10.0.0.1:80", "Forwarded", `for="[2001:db8:cafe::17]:4711"`), "2001:db8:cafe::17"},
		{"forwarded list, rightmost untrusted", "Forwarded", req("10.0.0.1:80", "Forwarded", `for=6.6.6.6, for=198.51.100.9;proto=https, for=10.2.2.2`), "198.51.100.9"},
		{"forwarded obfuscated hop stops nothing", "Forwarded", req("10.0.0.1:80", "Forwarded", `for=198.51.100.9, for=_hidden, for=10.2.2.2`), "198.51.100.9"},
		{"forwarded quoted comma", "Forwarded", req("10.0.0.1:80", "Forwarded", `for=198.51.100.9;ext="a,b", for=10.2.2.2`), "198.51.100.9"},
		{"forwarded case", "Forwarded", req("10.0.0.1:80", "Forwarded", `For=198.51.100.9`), "198.51.100.9"},
		{"x-real-ip", "X-Real-IP", req("10.0.0.1:80", "X-Real-IP", "198.51.100.9"), "198.51.100.9"},
		{"x-real-ip ignored from untrusted", "X-Real-IP", req("203.0.113.7:80", "X-Real-IP", "198.51.100.9"), "203.0.113.7"},
	} {
		c := &ClientIP{TrustedProxies: proxies, Header: tc.header}
		if tc.name == "peer, no proxies trusted" {
			c.TrustedProxies = nil
		}
		got, err := c.Addr(tc.r)
		if err != nil || got.String() != tc.want {
			t.Errorf("%s: got %v %v, want %s", tc.name, got, err, tc.want)
		}
	}
}

// TestSpoofing: whatever forwarding headers an untrusted peer sends, in any
// form, the key is the peer's own address.
func TestSpoofing(t *testing.T) {
	spoofs := [][]string{
		{"X-Forwarded-For", "1.2.3.4"},
		{"X-Forwarded-For", "1.2.3.4, 5.6.7.8"},
		{"X-Forwarded-For", "10.0.0.1"},
		{"X-Forwarded-For", "1.2.3.4", "X-Forwarded-For", "5.6.7.8"},
		{"Forwarded", `for=1.2.3.4`},
		{"Forwarded", `for="[2001:db8::1]:80", for=5.6.7.8`},
		{"X-Real-IP", "1.2.3.4"},
		{"X-Forwarded-For", "2001:db8::1", "Forwarded", "for=1.2.3.4", "X-Real-IP", "9.9.9.9"},
	}
	for _, header := range []string{"", "Forwarded", "X-Real-IP"} {
		c := &ClientIP{TrustedProxies: proxies, Header: header}
		for _, s := range spoofs {
			for _, peer := range []string{"203.0.113.7:1234", "[2001:db8:1:2:3:4:5:6]:443"} {
				want, _ := c.Key(req(peer))
				got, err := c.Key(req(peer, s...))
				if err != nil || got != want {
					t.Errorf("header %q, peer %s, spoof %v: key %q, want %q", header, peer, s, got, want)
				}
			}
		}
	}
}

func TestIPv6Grouping(t *testing.T) {
	c := &ClientIP{}
	a, _ := c.Key(req("[2001:db8:1:2:aaaa::1]:1"))
	b, _ := c.Key(req("[2001:db8:1:2:bbbb::2]:1"))
	if a != b || a != "2001:db8:1:2::/64" {
		t.Fatalf("same /64 keyed apart: %q %q", a, b)
	}
	c.IPv6Prefix = 128
	a, _ = c.Key(req("[2001:db8:1:2:aaaa::1]:1"))
	if a != "2001:db8:1:2:aaaa::1/128" {
		t.Fatalf("/128: %q", a)
	}
	if k, _ := c.Key(req("198.51.100.9:1")); k != "198.51.100.9" {
		t.Fatalf("ipv4: %q", k)
	}
	if _, err := c.Key(req("not an address")); err == nil {
		t.Fatal("unparsable RemoteAddr accepted")
	}
}

func TestClientIPValidate(t *testing.T) {
	if err := (&ClientIP{Header: "X-Client"}).Validate(); err == nil {
		t.Error("unknown header accepted")
	}
	if err := (&ClientIP{IPv6Prefix: 129}).Validate(); err == nil {
		t.Error("/129 accepted")
	}
	if err := (&ClientIP{Header: "forwarded", TrustedProxies: proxies}).Validate(); err != nil {
		t.Error(err)
	}
}

// FuzzClientIP: no forwarding header, however malformed, panics, and an
// untrusted peer's key never changes.
func FuzzClientIP(f *testing.F) {
	for _, s := range []string{"1.2.3.4", `for="[::1]:80";by=x, for=_a`, `for="\"`, ",,,,", "[", `for=";;"`, "2001:db8::1%eth0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		for _, header := range []string{"X-Forwarded-For", "Forwarded", "X-Real-IP"} {
			trusted := &ClientIP{TrustedProxies: proxies, Header: header}
			if _, err := trusted.Key(req("10.0.0.1:80", header, v)); err != nil {
				t.Fatalf("trusted peer: %v", err)
			}
			k, err := trusted.Key(req("203.0.113.7:80", header, v))
			if err != nil || k != "203.0.113.7" {
				t.Fatalf("untrusted peer keyed %q (%v) by %s: %q", k, err, header, v)
			}
		}
	})
}

// TestClientIPForms: every header form a trusted proxy may send, including
// the odd ones (several Forwarded lines, obfuscated identifiers, "unknown",
// mixed case, stray whitespace, IPv4-mapped IPv6).
func TestClientIPForms(t *testing.T) {
	for _, tc := range []struct {
		name    string
		header  string
		headers []string
		want    string
	}{
		{"xff whitespace", "", []string{"X-Forwarded-For", " \t198.51.100.9 ,  10.1.1.1\t"}, "198.51.100.9"},
		{"xff empty members", "", []string{"X-Forwarded-For", ",,198.51.100.9,,"}, "198.51.100.9"},
		{"xff unknown skipped", "", []string{"X-Forwarded-For", "198.51.100.9, unknown"}, "198.51.100.9"},
		{"xff mapped ipv6", "", []string{"X-Forwarded-For", "::ffff:198.51.100.9, ::FFFF:10.1.1.1"}, "198.51.100.9"},
		{"xff upper-case ipv6", "", []string{"X-Forwarded-For", "2001:DB8::1"}, "2001:db8::1"},
		{"xff zone dropped", "", []string{"X-Forwarded-For", "fe80::1%eth0"}, "fe80::1"},
		{"forwarded several lines", "Forwarded", []string{"Forwarded", "for=6.6.6.6", "Forwarded", "for=198.51.100.9", "Forwarded", "for=10.2.2.2"}, "198.51.100.9"},
		{"forwarded unknown skipped", "Forwarded", []string{"Forwarded", `for=198.51.100.9, for=unknown`}, "198.51.100.9"},
		{"forwarded obfuscated port", "Forwarded", []string{"Forwarded", `for="198.51.100.9:_port"`}, ""},
		{"forwarded mixed case name", "Forwarded", []string{"Forwarded", `FoR=198.51.100.9;PROTO=https`}, "198.51.100.9"},
		{"forwarded whitespace", "Forwarded", []string{"Forwarded", ` proto=https ; for = "198.51.100.9" , for=10.2.2.2 `}, "198.51.100.9"},
		{"forwarded quoted mapped ipv6", "Forwarded", []string{"Forwarded", `for="[::ffff:198.51.100.9]:443"`}, "198.51.100.9"},
		{"forwarded by= is not for=", "Forwarded", []string{"Forwarded", `by=198.51.100.9`}, ""},
		{"x-real-ip whitespace", "X-Real-IP", []string{"X-Real-IP", "  198.51.100.9 "}, "198.51.100.9"},
		{"x-real-ip last line", "X-Real-IP", []string{"X-Real-IP", "6.6.6.6", "X-Real-IP", "198.51.100.9"}, "198.51.100.9"},
		{"x-real-ip mapped", "x-real-ip", []string{"X-Real-IP", "::ffff:198.51.100.9"}, "198.51.100.9"},
	} {
		c := &ClientIP{TrustedProxies: proxies, Header: tc.header}
		want := tc.want
		if want == "" {
			want = "10.0.0.1" // nothing usable: the trusted peer itself
		}
		got, err := c.Addr(req("10.0.0.1:80", tc.headers...))
		if err != nil || got.String() != want {
			t.Errorf("%s: got %v %v, want %s", tc.name, got, err, want)
		}
	}
}

// TestSpoofingForms: the odd forms of TestClientIPForms, from an untrusted
// peer, change nothing either, whichever header is configured.
func TestSpoofingForms(t *testing.T) {
	spoofs := [][]string{
		{"Forwarded", "for=1.2.3.4", "Forwarded", "for=5.6.7.8"},
		{"Forwarded", `for=_hidden, for=unknown`},
		{"Forwarded", `FOR="[::ffff:1.2.3.4]:80"`},
		{"Forwarded", ` for = 1.2.3.4 ; proto=http `},
		{"X-Forwarded-For", " 1.2.3.4 , unknown ,"},
		{"X-Forwarded-For", "::ffff:1.2.3.4"},
		{"X-Forwarded-For", "10.0.0.1, 10.0.0.2"}, // claims to be a trusted proxy
		{"X-Real-IP", " ::ffff:1.2.3.4 "},
		{"X-Real-IP", "1.2.3.4", "X-Real-IP", "5.6.7.8"},
		{"x-forwarded-for", "1.2.3.4", "FORWARDED", "for=1.2.3.4", "x-real-ip", "1.2.3.4"},
	}
	peers := []string{"203.0.113.7:1234", "[2001:db8:1:2:3:4:5:6]:443", "[::ffff:203.0.113.7]:80"}
	for _, header := range []string{"", "X-Forwarded-For", "Forwarded", "X-Real-IP"} {
		c := &ClientIP{TrustedProxies: proxies, Header: header}
		for _, s := range spoofs {
			for _, peer := range peers {
				want, _ := c.Key(req(peer))
				got, err := c.Key(req(peer, s...))
				if err != nil || got != want {
					t.Errorf("header %q, peer %s, spoof %q: key %q, want %q", header, peer, s, got, want)
				}
			}
		}
	}
}

// TestForwardedHeaderCost: a forwarding header of a megabyte, in any form,
// from a trusted peer, is read without allocating, and only its last hops
// count.
func TestForwardedHeaderCost(t *testing.T) {
	huge := strings.Repeat("1.2.3.4, ", 100_000) + "198.51.100.9"
	commas := strings.Repeat(",", 1<<20) + "198.51.100.9"
	fwd := strings.Repeat(`for="[2001:db8::1]:80";proto=https, `, 30_000) + "for=198.51.100.9"
	quotes := `for="` + strings.Repeat(`\"`, 1<<19) + `"` + ", for=198.51.100.9"
	for _, tc := range []struct {
		header string
		value  string
	}{
		{"X-Forwarded-For", huge}, {"X-Forwarded-For", commas}, {"Forwarded", fwd}, {"Forwarded", quotes},
	} {
		c := &ClientIP{TrustedProxies: proxies, Header: tc.header}
		r := req("10.0.0.1:80", tc.header, tc.value)
		var got netip.Addr
		allocs := testing.AllocsPerRun(3, func() { got, _ = c.Addr(r) })
		if got.String() != "198.51.100.9" || allocs > 0 {
			t.Errorf("%s of %d bytes: client %v, %.0f allocations", tc.header, len(tc.value), got, allocs)
		}
	}
}

// TestForwardedGarbageCost: a megabyte of hops that look like addresses but
// are not costs a few kilobytes: only the last 128 members are parsed (a
// parser's error allocates), not one per member.
func TestForwardedGarbageCost(t *testing.T) {
	garbage := strings.Repeat("deadbeef, 1.2.3, ", 60_000) + "198.51.100.9"
	c := &ClientIP{TrustedProxies: proxies}
	r := req("10.0.0.1:80", "X-Forwarded-For", garbage)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	got, _ := c.Addr(r)
	runtime.ReadMemStats(&after)
	if alloc := after.TotalAlloc - before.TotalAlloc; got.String() != "198.51.100.9" || alloc > 64<<10 {
		t.Fatalf("client %v; %d bytes allocated reading a header of %d", got, alloc, len(garbage))
	}
}

// TestByIPNil: ByIP(nil) keys by the TCP peer and ignores a forwarding
// header, as the zero ClientIP does, rather than panicking on the first
// request.
func TestByIPNil(t *testing.T) {
	got, err := ByIP(nil)(req("198.51.100.9:4711", "X-Forwarded-For", "203.0.113.1"))
	if err != nil || got != "198.51.100.9" {
		t.Fatalf("ByIP(nil) = %q, %v; want the peer 198.51.100.9", got, err)
	}
}
