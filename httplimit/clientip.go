package httplimit

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// ClientIP finds the address of the client that sent a request.
//
// Without trusted proxies it is the address of the TCP peer
// (Request.RemoteAddr), and forwarding headers are ignored: anyone can send
// them. With trusted proxies, and only when the peer is one of them, the
// forwarding header is read from right to left, skipping addresses that are
// themselves trusted proxies; the first address that is not is the client
// (the rightmost untrusted address, the only one a trusted proxy vouches
// for). If every address is trusted, the leftmost one is used.
//
// The zero value trusts no proxy. A ClientIP is safe for concurrent use once
// built.
type ClientIP struct {
	// TrustedProxies are the networks of the proxies in front of the
	// service (for example a load balancer's subnet).
	TrustedProxies []netip.Prefix

	// Header is the forwarding header the trusted proxies set:
	// "X-Forwarded-For" (the default), "Forwarded" (RFC 7239) or
	// "X-Real-IP".
	Header string

	// IPv6Prefix groups IPv6 clients by network: an ISP hands each customer
	// a /64 or shorter, and a client that owns a /64 owns 2^64 addresses.
	// Default 64; 128 keys every address apart.
	IPv6Prefix int
}

// ErrNoClientIP means a request carried no usable client address (a
// RemoteAddr that does not parse, as with some test servers or unix
// sockets).
var ErrNoClientIP = errors.New("httplimit: no client address")

// maxForwardHops bounds how many addresses of a forwarding header are read,
// so a header of a million commas costs no more than a short one.
const maxForwardHops = 32

// Validate reports a configuration that cannot work.
func (c *ClientIP) Validate() error {
	switch http.CanonicalHeaderKey(c.Header) {
	case "", "X-Forwarded-For", "Forwarded", "X-Real-Ip":
	default:
		return fmt.Errorf("httplimit: ClientIP.Header %q: want X-Forwarded-For, Forwarded or X-Real-IP", c.Header)
	}
	if c.IPv6Prefix < 0 || c.IPv6Prefix > 128 {
		return fmt.Errorf("httplimit: ClientIP.IPv6Prefix %d: want 0 to 128", c.IPv6Prefix)
	}
	for _, p := range c.TrustedProxies {
		if !p.IsValid() {
			return fmt.Errorf("httplimit: ClientIP.TrustedProxies: invalid prefix %v", p)
		}
	}
	return nil
}

// Addr returns the client's address, not grouped.
func (c *ClientIP) Addr(r *http.Request) (netip.Addr, error) {
	peer, err := remoteAddr(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}, err
	}
	if !c.trusted(peer) {
		return peer, nil
	}
	hops := c.forwarded(r)
	client := peer
	for i := len(hops) - 1; i >= 0; i-- {
		client = hops[i]
		if !c.trusted(client) {
			return client, nil
		}
	}
	return client, nil
}

// Key returns the client's address as a limiting key: IPv4 addresses whole,
// IPv6 addresses reduced to their IPv6Prefix network ("2001:db8::/64").
func (c *ClientIP) Key(r *http.Request) (string, error) {
	a, err := c.Addr(r)
	if err != nil {
		return "", err
	}
	if a.Is4() {
		return a.String(), nil
	}
	bits := c.IPv6Prefix
	if bits == 0 {
		bits = 64
	}
	p, _ := a.Prefix(bits) // bits is within 0..128 for an IPv6 address
	return p.String(), nil
}

func (c *ClientIP) trusted(a netip.Addr) bool {
	for _, p := range c.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// forwarded returns the addresses of the configured header, in order, the
// last maxForwardHops of them, skipping entries that are not addresses.
func (c *ClientIP) forwarded(r *http.Request) []netip.Addr {
	var hops []netip.Addr
	add := func(s string) {
		if a, ok := parseHop(s); ok {
			if len(hops) == maxForwardHops {
				copy(hops, hops[1:])
				hops = hops[:maxForwardHops-1]
			}
			hops = append(hops, a)
		}
	}
	switch http.CanonicalHeaderKey(c.Header) {
	case "Forwarded":
		for _, line := range r.Header.Values("Forwarded") {
			for _, elem := range splitOutsideQuotes(line, ',') {
				if v, ok := forwardedFor(elem); ok {
					add(v)
				}
			}
		}
	case "X-Real-Ip":
		if v := r.Header.Values("X-Real-Ip"); len(v) > 0 {
			add(strings.TrimSpace(v[len(v)-1]))
		}
	default:
		for _, line := range r.Header.Values("X-Forwarded-For") {
			for _, v := range strings.Split(line, ",") {
				add(strings.TrimSpace(v))
			}
		}
	}
	return hops
}

// parseHop reads one forwarded address: "203.0.113.7", "2001:db8::1",
// "[2001:db8::1]:4711", "203.0.113.7:80". Obfuscated identifiers
// ("_hidden"), "unknown" and garbage are not addresses.
func parseHop(s string) (netip.Addr, bool) {
	if s == "" {
		return netip.Addr{}, false
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap().WithZone(""), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap().WithZone(""), true
	}
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil {
			return a.Unmap().WithZone(""), true
		}
	}
	return netip.Addr{}, false
}

// forwardedFor returns the value of the for= parameter of one
// forwarded-element (RFC 7239 section 4), unquoted.
func forwardedFor(elem string) (string, bool) {
	for _, pair := range splitOutsideQuotes(elem, ';') {
		name, value, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || !strings.EqualFold(strings.TrimSpace(name), "for") {
			continue
		}
		value = strings.TrimSpace(value)
		if len(value) >= 2 && value[0] == '"' && value[len(value)-1] == '"' {
			value = strings.ReplaceAll(value[1:len(value)-1], `\`, "")
		}
		return value, true
	}
	return "", false
}

// splitOutsideQuotes splits s at sep where sep is not inside a quoted
// string.
func splitOutsideQuotes(s string, sep byte) []string {
	var out []string
	quoted, escaped, start := false, false, 0
	for i := 0; i < len(s); i++ {
		switch {
		case escaped:
			escaped = false
		case quoted && s[i] == '\\':
			escaped = true
		case s[i] == '"':
			quoted = !quoted
		case !quoted && s[i] == sep:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

func remoteAddr(s string) (netip.Addr, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap().WithZone(""), nil
	}
	host, _, err := net.SplitHostPort(s)
	if err != nil {
		host = s
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%w: RemoteAddr %q", ErrNoClientIP, s)
	}
	return a.Unmap().WithZone(""), nil
}
