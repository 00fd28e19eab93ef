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

// maxForwardHops bounds how many addresses of a forwarding header are kept,
// and maxForwardMembers how many of its last members (addresses or not) are
// parsed, so a header of a million commas or a million almost-addresses
// costs a scan, no more memory than a short one.
const (
	maxForwardHops    = 32
	maxForwardMembers = 4 * maxForwardHops
)

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

// PeerTrusted reports whether r came straight from one of TrustedProxies:
// only then are the headers such a proxy sets (forwarding headers, or a
// header a policy override honours) the proxy's and not the client's.
func (c *ClientIP) PeerTrusted(r *http.Request) bool {
	peer, err := remoteAddr(r.RemoteAddr)
	return err == nil && c.trusted(peer)
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
	hops, n := c.forwarded(r)
	client := peer
	for i := n - 1; i >= 0 && i >= n-maxForwardHops; i-- {
		client = hops[i%maxForwardHops]
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
	return c.KeyOf(a)
}

// KeyOf returns address a as Key would give it for a client at a: an
// IPv4 address (also one mapped into IPv6, ::ffff:192.0.2.1) whole, an
// IPv6 address reduced to its IPv6Prefix network. For an operator's
// writing of a key (a runtime override, sluice keys).
func (c *ClientIP) KeyOf(a netip.Addr) (string, error) {
	a = a.Unmap().WithZone("")
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

// forwarded reads the addresses among the last maxForwardMembers members
// of the configured header, skipping members that are not addresses. It
// returns how many it read, n, and the last maxForwardHops of them in a
// ring: address i (counting from 0) is at ring[i%maxForwardHops]. It
// allocates nothing for a header of valid addresses however long, and
// allocates for at most maxForwardMembers invalid ones (a parser's error).
func (c *ClientIP) forwarded(r *http.Request) (ring [maxForwardHops]netip.Addr, n int) {
	total := 0
	c.eachMember(r, func(string) { total++ })
	i := 0
	c.eachMember(r, func(s string) {
		i++
		if i <= total-maxForwardMembers {
			return
		}
		if a, ok := parseHop(s); ok {
			ring[n%maxForwardHops] = a
			n++
		}
	})
	return ring, n
}

// eachMember calls fn with each member of the configured header, in order:
// the for= values of Forwarded, the addresses of X-Forwarded-For, the last
// X-Real-IP.
func (c *ClientIP) eachMember(r *http.Request, fn func(string)) {
	switch http.CanonicalHeaderKey(c.Header) {
	case "Forwarded":
		for _, line := range r.Header.Values("Forwarded") {
			eachOutsideQuotes(line, ',', func(elem string) {
				if v, ok := forwardedFor(elem); ok {
					fn(v)
				}
			})
		}
	case "X-Real-Ip":
		if v := r.Header.Values("X-Real-Ip"); len(v) > 0 {
			fn(strings.TrimSpace(v[len(v)-1]))
		}
	default:
		for _, line := range r.Header.Values("X-Forwarded-For") {
			for rest := line; ; {
				v, after, more := strings.Cut(rest, ",")
				fn(strings.TrimSpace(v))
				if !more {
					break
				}
				rest = after
			}
		}
	}
}

// maxHopLen is longer than any address with a port and zone a proxy writes;
// longer hops are not parsed at all.
const maxHopLen = 100

// parseHop reads one forwarded address: "203.0.113.7", "2001:db8::1",
// "[2001:db8::1]:4711", "203.0.113.7:80". Obfuscated identifiers
// ("_hidden"), "unknown" and garbage are not addresses. It picks the one
// parser that fits the shape, so that valid forms allocate nothing (a
// parser's error does).
func parseHop(s string) (netip.Addr, bool) {
	if s == "" || len(s) > maxHopLen || !isHexDigit(s[0]) && s[0] != '[' && s[0] != ':' {
		return netip.Addr{}, false
	}
	var a netip.Addr
	var err error
	switch colons := strings.Count(s, ":"); {
	case s[0] == '[' && s[len(s)-1] == ']':
		a, err = netip.ParseAddr(s[1 : len(s)-1])
	case s[0] == '[' || colons == 1:
		var ap netip.AddrPort
		ap, err = netip.ParseAddrPort(s)
		a = ap.Addr()
	default:
		a, err = netip.ParseAddr(s)
	}
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap().WithZone(""), true
}

func isHexDigit(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// forwardedFor returns the value of the first for= parameter of one
// forwarded-element (RFC 7239 section 4), unquoted.
func forwardedFor(elem string) (value string, found bool) {
	eachOutsideQuotes(elem, ';', func(pair string) {
		if found {
			return
		}
		name, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || !strings.EqualFold(strings.TrimSpace(name), "for") {
			return
		}
		v = strings.TrimSpace(v)
		if len(v) >= 2 && len(v) <= maxHopLen+2 && v[0] == '"' && v[len(v)-1] == '"' {
			v = strings.ReplaceAll(v[1:len(v)-1], `\`, "")
		}
		value, found = v, true
	})
	return value, found
}

// eachOutsideQuotes calls fn with each part of s between separators sep
// that are not inside a quoted string.
func eachOutsideQuotes(s string, sep byte, fn func(string)) {
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
			fn(s[start:i])
			start = i + 1
		}
	}
	fn(s[start:])
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
