package hostiletest

import (
	"bytes"
	"fmt"
	"net/http"
	"sort"
	"strings"
)

// APIBody returns the body of a decision API request (POST /v1/check)
// that describes r under the policy, from the client address ip. Strings
// are written byte for byte (invalid UTF-8 stays invalid), as a hostile
// caller would send them. ok is false when the API cannot express r: it
// takes one value per header name.
func APIBody(r Request, ip string) (body []byte, ok bool) {
	headers := map[string]string{}
	var names []string
	for _, f := range r.Header {
		canon := http.CanonicalHeaderKey(f.Name)
		for _, n := range names {
			if http.CanonicalHeaderKey(n) == canon {
				return nil, false
			}
		}
		names = append(names, f.Name)
		headers[f.Name] = f.Value
	}
	sort.Strings(names)
	path, query, _ := strings.Cut(r.path(), "?")
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"request": {"method": %s, "host": %s, "path": %s, "query": %s, "ip": %s, "headers": {`,
		JSONString(r.method()), JSONString(r.host()), JSONString(path), JSONString(query), JSONString(ip))
	for i, n := range names {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(JSONString(n) + ": " + JSONString(headers[n]))
	}
	b.WriteString("}}}")
	return b.Bytes(), true
}

// JSONString quotes s as a JSON string, escaping quotes, backslashes and
// control bytes and leaving every other byte as it is: invalid UTF-8 is
// sent invalid, not replaced as encoding/json would.
func JSONString(s string) string {
	b := []byte{'"'}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = fmt.Appendf(b, `\u%04x`, c)
		default:
			b = append(b, c)
		}
	}
	return string(append(b, '"'))
}
