package policy

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/yamlload"
)

// ParseDuration reads a duration as people write it in configuration: Go's
// syntax ("1m30s", "250ms") plus days ("1d", "7d").
func ParseDuration(s string) (time.Duration, error) { return yamlload.ParseDuration(s) }

// ParseRate reads a rate: "100/s", "10/m", "5/h", "1000/d", or a count per
// any duration, "3/250ms", "100/10s".
func ParseRate(s string) (sluice.Rate, error) {
	n, per, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return sluice.Rate{}, fmt.Errorf("%q is not a rate (write it as count/period: 100/s, 10/m, 5/h, 3/250ms)", s)
	}
	count, err := strconv.ParseInt(strings.TrimSpace(n), 10, 64)
	if err != nil {
		return sluice.Rate{}, fmt.Errorf("%q is not a rate: %q is not a whole number", s, n)
	}
	per = strings.TrimSpace(per)
	var d time.Duration
	switch per {
	case "s":
		d = time.Second
	case "m":
		d = time.Minute
	case "h":
		d = time.Hour
	case "d":
		d = 24 * time.Hour
	default:
		if d, err = ParseDuration(per); err != nil {
			return sluice.Rate{}, fmt.Errorf("%q is not a rate: the period %q is not s, m, h, d or a duration", s, per)
		}
	}
	return sluice.Per(count, d), nil
}

var errKeySyntax = errors.New("want global, ip, route, method, host, header:NAME, query:NAME, cookie:NAME, jwt:CLAIM, expr:'...' or func:NAME")

func parseKeyPart(s string) (keyPart, error) {
	kind, name, hasName := strings.Cut(strings.TrimSpace(s), ":")
	switch kind {
	case "global", "ip", "route", "method", "host":
		if hasName {
			return keyPart{}, fmt.Errorf("%q: %s takes no name", s, kind)
		}
		return keyPart{kind: kind}, nil
	case "header", "query", "cookie", "jwt", "expr", "func":
		if !hasName || name == "" {
			return keyPart{}, fmt.Errorf("%q: %s needs a name, as in %s:NAME", s, kind, kind)
		}
		if kind == "header" && overrideName(name) {
			return keyPart{}, fmt.Errorf("%q: method override headers are removed from every request (a key cannot use one; key by method instead)", s)
		}
		return keyPart{kind: kind, name: name}, nil
	}
	return keyPart{}, fmt.Errorf("%q: %w", s, errKeySyntax)
}
