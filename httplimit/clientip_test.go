package httplimit

import (
	"net/http"
	"net/netip"
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
