package policy

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/sluicehq/sluice/decide"
	"golang.org/x/net/http/httpguts"
)

// A rule must match the request the upstream receives: if a rule matched
// one spelling of a path and the upstream served another, a client could
// spell its way around the rule. So a request target is brought to one
// normal form before any rule sees it, the same form sluice serve's gateway
// forwards, and what cannot be brought to it without guessing how the
// upstream reads it is refused (400).
//
// Host: ASCII letters lower-cased, one trailing dot dropped, the port kept
// for forwarding but ignored by rules (match.host) and by host keys, so
// that one host is one rule match and one key. Empty labels ("a..b",
// ".a"), characters no host name holds and a port that is not a number are
// refused.
//
// Path, segment by segment: percent-encoded unreserved characters
// (letters, digits, "-._~") decoded, other percent-encodings kept with
// upper-case hex, bytes a path may not hold raw (space, quotes, non-ASCII,
// "[]{}|^`<>#") percent-encoded; then empty segments (repeated slashes) and
// "." dropped and ".." resolved as RFC 3986 does (never above the root; a
// path ending in one ends in a slash). Refused, because upstreams disagree
// on what they mean: an encoded slash or backslash (%2F, %5C), a raw
// backslash, a control byte raw or encoded (%00-%1F, %7F), a ";" (path
// parameters: "/api;x/y" is "/api/y" to some servers and a segment named
// "api;x" to others), an invalid percent-encoding, and a target that is
// not a path (asterisk-form "*", authority-form of CONNECT). An
// absolute-form target ("http://host/path", which servers must accept) is
// taken as its host and path. The query is left as it is.
//
// Method: ASCII letters upper-cased ("post" and "Post" are POST). HTTP
// methods are case-sensitive, but every registered method is upper-case,
// and upstreams read another spelling as that method (Werkzeug, Django) or
// refuse it (nginx, Node.js, gunicorn): none serves it as a method of its
// own, so it is brought to the upper-case form rules name and the upstream
// receives that form. A method that is not an HTTP token (a control byte,
// a space, non-ASCII: "poſt" is POST to Python's upper()) is refused.
//
// Method overrides: X-HTTP-Method-Override, X-HTTP-Method and
// X-Method-Override (in any case, "_" for "-") are removed. Express's
// method-override, Symfony, Rack and OData serve a POST that carries one
// as the method it names; removed, the upstream serves the method the
// rules matched. A client that needs another method sends it.

// Normalize returns r in normal form: r itself if it is already, or else a
// shallow copy whose Method, Host, URL (Path and RawPath) and RequestURI
// (origin-form) are normalised and whose Header (a copy) holds no method
// override. The error is a *decide.ClientError, for a 400. Policy.Plan
// matches rules on the normalised request; a handler that should see the
// request the rules matched (sluice serve's gateway forwards it) takes the
// request Normalize returns.
func Normalize(r *http.Request) (*http.Request, error) {
	if err := targetForm(r); err != nil {
		return nil, err
	}
	method, err := NormalizeMethod(r.Method)
	if err != nil {
		return nil, err
	}
	host, err := NormalizeHost(r.Host)
	if err != nil {
		return nil, err
	}
	raw := rawPath(r.URL)
	path, err := NormalizePath(raw)
	if err != nil {
		return nil, err
	}
	normalTarget := host == r.Host && path == raw && (r.RequestURI == "" || r.RequestURI[0] == '/')
	override := hasOverride(r.Header)
	if normalTarget && method == r.Method && !override {
		return r, nil
	}
	r2 := new(http.Request)
	*r2 = *r
	r2.Method = method
	if override {
		r2.Header = withoutOverrides(r.Header)
	}
	if !normalTarget {
		setTarget(r2, host, path)
	}
	return r2, nil
}

// setTarget sets the normalised host and escaped path on r, a copy whose
// URL is still the original's.
func setTarget(r *http.Request, host, path string) {
	u := *r.URL
	u.Path, _ = url.PathUnescape(path) // path holds only valid escapes
	u.RawPath = ""
	if u.EscapedPath() != path {
		u.RawPath = path
	}
	if u.Host != "" {
		u.Host = host // an absolute-form target's, which is r.Host
	}
	r.URL, r.Host = &u, host
	if r.RequestURI != "" {
		r.RequestURI = u.RequestURI()
	}
}

// NormalizeMethod returns a request method in normal form (see
// Normalize): its ASCII letters upper-cased. Its error, for a method that
// is not an HTTP token, is a *decide.ClientError. An empty method is GET,
// as net/http reads it.
func NormalizeMethod(m string) (string, error) {
	if m == "" {
		return http.MethodGet, nil
	}
	upper := true
	for i := 0; i < len(m); i++ {
		c := m[i]
		if !httpguts.IsTokenRune(rune(c)) {
			return "", &decide.ClientError{Field: "method", Reason: "not an HTTP token (letters, digits and !#$%&'*+-.^_`|~)"}
		}
		upper = upper && !('a' <= c && c <= 'z')
	}
	if upper {
		return m, nil
	}
	b := []byte(m)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b), nil
}

// methodOverrides are the request headers that name another method
// for a POST to some frameworks; Normalize removes them, and any header
// whose name reads as one of them with "_" for "-" (as CGI and WSGI
// read header names).
var methodOverrides = []string{"X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override"}

// overrideName reports whether the header name k is a method override.
func overrideName(k string) bool {
	for _, h := range methodOverrides {
		if len(k) != len(h) {
			continue
		}
		same := true
		for i := 0; i < len(k) && same; i++ {
			a, b := k[i], h[i]
			same = a == b || a == '_' && b == '-' || a|0x20 == b|0x20 && 'a' <= a|0x20 && a|0x20 <= 'z'
		}
		if same {
			return true
		}
	}
	return false
}

// hasOverride reports whether h holds a method override.
func hasOverride(h http.Header) bool {
	for k := range h {
		if overrideName(k) {
			return true
		}
	}
	return false
}

// withoutOverrides returns a copy of h without its method overrides.
func withoutOverrides(h http.Header) http.Header {
	h2 := h.Clone()
	for k := range h2 {
		if overrideName(k) {
			delete(h2, k)
		}
	}
	return h2
}

// targetForm refuses a request whose target is not a path: asterisk-form
// ("OPTIONS *"), authority-form (CONNECT host:port), an opaque URL.
func targetForm(r *http.Request) error {
	// net/http parses an absolute-form target into URL.Scheme (lower case)
	// and URL.Host, and clears the scheme of CONNECT's authority-form.
	absolute := r.URL != nil && (r.URL.Scheme == "http" || r.URL.Scheme == "https")
	t := r.RequestURI
	if r.URL == nil || r.URL.Opaque != "" || (t != "" && t[0] != '/' && !absolute) {
		return &decide.ClientError{Field: "request target", Reason: "not a path (origin-form) or an http(s) URL"}
	}
	return nil
}

// rawPath returns the path of u as it was sent: RawPath when it is an
// encoding of Path, even one EscapedPath would replace (EscapedPath
// re-escapes Path then, and "%2F" next to a raw "{" would become "/").
func rawPath(u *url.URL) string {
	if u.RawPath != "" {
		if p, err := url.PathUnescape(u.RawPath); err == nil && p == u.Path {
			return u.RawPath
		}
	}
	return u.EscapedPath()
}

// NormalizeHost returns a Host header (a name or address, with an optional
// port) in normal form: see Normalize. Its error is a *decide.ClientError.
// An empty host stays empty.
func NormalizeHost(host string) (string, error) {
	name, port, err := splitHost(host)
	if err != nil {
		return "", err
	}
	if normalHost(name) {
		return host, nil
	}
	b := []byte(strings.TrimSuffix(name, "."))
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	if port != "" {
		b = append(append(b, ':'), port...)
	}
	return string(b), nil
}

// splitHost splits host into its name and port, and checks both.
func splitHost(host string) (name, port string, err error) {
	bad := func(reason string) error {
		return &decide.ClientError{Field: "host", Reason: reason}
	}
	name = host
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.HasSuffix(host, "]") {
		name, port = host[:i], host[i+1:]
		if port == "" || len(port) > 5 || !all(port, isDigit) {
			return "", "", bad("the port is not a number")
		}
	}
	if strings.HasPrefix(name, "[") {
		if len(name) < 4 || !strings.HasSuffix(name, "]") || !all(name[1:len(name)-1], ipv6Byte) {
			return "", "", bad("not an IPv6 address in brackets")
		}
		return name, port, nil
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '.':
			if i == 0 || name[i-1] == '.' {
				return "", "", bad("an empty label (a leading dot or two dots in a row)")
			}
		case !hostByte(c):
			return "", "", bad("a host name holds letters, digits, '-', '_' and dots")
		}
	}
	return name, port, nil
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func ipv6Byte(c byte) bool { return unhex(c) >= 0 || c == ':' || c == '.' }

// all reports whether every byte of s satisfies ok.
func all(s string, ok func(byte) bool) bool {
	for i := 0; i < len(s); i++ {
		if !ok(s[i]) {
			return false
		}
	}
	return true
}

func hostByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_'
}

// normalHost reports whether a checked host name is in normal form.
func normalHost(name string) bool {
	if strings.HasSuffix(name, ".") {
		return false
	}
	for i := 0; i < len(name); i++ {
		if 'A' <= name[i] && name[i] <= 'Z' {
			return false
		}
	}
	return true
}

// hostname returns the name of a normalised host, without its port and
// without the brackets of an IPv6 address: what match.host and host keys
// see.
func hostname(host string) string {
	if strings.HasPrefix(host, "[") {
		if i := strings.IndexByte(host, ']'); i > 0 {
			return host[1:i]
		}
	}
	if i := strings.LastIndexByte(host, ':'); i >= 0 {
		return host[:i]
	}
	return host
}

// NormalizePath returns an escaped path (as sent on the request line,
// without the query) in normal form: see Normalize. Its error is a
// *decide.ClientError. An empty path is "/".
func NormalizePath(p string) (string, error) {
	switch {
	case p == "":
		return "/", nil
	case p[0] != '/':
		return "", &decide.ClientError{Field: "path", Reason: "does not start with /"}
	case normalPath(p):
		return p, nil
	}
	segs := make([]string, 0, 8)
	trailing := false
	for rest, more := p[1:], true; more; {
		var seg string
		seg, rest, more = strings.Cut(rest, "/")
		s, err := normalSegment(seg)
		if err != nil {
			return "", err
		}
		switch s {
		case "", ".":
		case "..":
			if len(segs) > 0 {
				segs = segs[:len(segs)-1]
			}
		default:
			segs = append(segs, s)
			trailing = false
			continue
		}
		trailing = true
	}
	out := "/" + strings.Join(segs, "/")
	if trailing && len(segs) > 0 {
		out += "/"
	}
	return out, nil
}

// normalPath reports whether p is in normal form already, without
// allocating: the common case.
func normalPath(p string) bool {
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c == '/' {
			next := p[i+1:]
			if strings.HasPrefix(next, "/") || next == "." || next == ".." ||
				strings.HasPrefix(next, "./") || strings.HasPrefix(next, "../") {
				return false
			}
			continue
		}
		if pathBytes[c] != raw {
			return false
		}
	}
	return true
}

// How a byte of a path is written in normal form.
const (
	raw     = iota // as it is
	encoded        // percent-encoded
	refused        // not at all: the path is refused
)

// pathBytes says how each byte is written in a normal path: raw if it is
// unreserved, a sub-delimiter other than ";", ':' or '@' (RFC 3986's
// pchar); refused if it is a control byte, '\\' or ';'; encoded otherwise.
// '%' is encoded: an escape is kept or decoded by normalSegment, never
// passed through as it is.
var pathBytes = func() (t [256]uint8) {
	for c := range t {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
			t[c] = raw
		case c < 0x20 || c == 0x7f || c == '\\' || c == ';':
			t[c] = refused
		case c < 0x80 && strings.IndexByte("-._~!$&'()*+,=:@", byte(c)) >= 0:
			t[c] = raw
		default:
			t[c] = encoded
		}
	}
	return t
}()

func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

// normalSegment returns one segment of a path in normal form.
func normalSegment(seg string) (string, error) {
	bad := func(reason string) error {
		return &decide.ClientError{Field: "path", Reason: reason}
	}
	const hex = "0123456789ABCDEF"
	b := make([]byte, 0, len(seg)+8)
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		if c == '%' {
			if i+2 >= len(seg) || unhex(seg[i+1]) < 0 || unhex(seg[i+2]) < 0 {
				return "", bad("an invalid percent-encoding")
			}
			c = byte(unhex(seg[i+1])<<4 | unhex(seg[i+2]))
			i += 2
			switch {
			case c == '/' || c == '\\':
				return "", bad("an encoded slash or backslash (%2F, %5C): upstreams disagree on whether it separates segments")
			case c < 0x20 || c == 0x7f:
				return "", bad("an encoded control byte")
			case unreserved(c):
				b = append(b, c)
			default:
				b = append(b, '%', hex[c>>4], hex[c&15])
			}
			continue
		}
		switch pathBytes[c] {
		case raw:
			b = append(b, c)
		case encoded:
			b = append(b, '%', hex[c>>4], hex[c&15])
		default:
			switch c {
			case ';':
				return "", bad(`a ";" (path parameters: upstreams disagree on whether they are part of the segment)`)
			case '\\':
				return "", bad("a backslash: some upstreams take it for a slash")
			}
			return "", bad("a control byte")
		}
	}
	return string(b), nil
}

func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c - 'a' + 10)
	case 'A' <= c && c <= 'F':
		return int(c - 'A' + 10)
	}
	return -1
}
