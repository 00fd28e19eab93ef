package rls

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/internal/yamlload"
	"go.yaml.in/yaml/v3"
)

// What envoyproxy/ratelimit accepts, read from its src/config/config_impl.go
// (upstream commit f2fb15770f7fd1c88ca6c3a1b58ee513917ace96). That service
// checks every key of a file against one list, whatever the level, and
// decodes the file leniently (a repeated key: the last counts; a key at a
// level that does not use it: ignored; only the first YAML document). sluice
// loads the same files with the same meaning and reports what the strict
// reading would refuse as warnings (Config.Warnings; sluice check --strict
// makes them errors).

// peerKeys are the keys envoyproxy/ratelimit accepts at any level.
var peerKeys = []string{
	"domain", "key", "value", "descriptors", "rate_limit", "unit", "requests_per_unit",
	"unlimited", "shadow_mode", "quota_mode", "name", "replaces", "detailed_metric",
	"value_to_metric", "share_threshold", "metadata",
}

// ownKeys are sluice's additions, read only where they belong.
var ownKeys = []string{"unit_multiplier", "sluice"}

// Fields read at each level.
var (
	topFields        = []string{"domain", "descriptors", "sluice"}
	descriptorFields = []string{"key", "value", "rate_limit", "descriptors", "shadow_mode", "quota_mode", "detailed_metric", "value_to_metric", "share_threshold", "metadata"}
	rateLimitFields  = []string{"unit", "requests_per_unit", "unlimited", "name", "replaces", "unit_multiplier", "sluice"}
	replacesFields   = []string{"name"}
)

// fields reads the mapping n (called field in messages) as
// envoyproxy/ratelimit does: an unknown key is an error; a key it knows
// but this level does not use is ignored with a warning (after checking
// its content as that service does); a repeated key warns and the last one
// counts.
func (l *loader) fields(n *yaml.Node, w where, field string, allowed []string) map[string]*yaml.Node {
	n = yamlload.Resolve(n)
	out := map[string]*yaml.Node{}
	if n == nil || n.Kind != yaml.MappingNode {
		l.Fail(n, w, field, "want a mapping of %s", strings.Join(allowed, ", "))
		return out
	}
	prefix := ""
	if field != "" {
		prefix = field + "."
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], yamlload.Resolve(n.Content[i+1])
		name := k.Value
		switch {
		case k.Kind != yaml.ScalarNode || (!slices.Contains(peerKeys, name) && !slices.Contains(ownKeys, name)):
			l.Fail(k, w, "", "unknown field %q (known: %s)", prefix+name, strings.Join(allowed, ", "))
		case !slices.Contains(allowed, name):
			if slices.Contains(ownKeys, name) {
				l.Fail(k, w, "", "unknown field %q (known: %s)", prefix+name, strings.Join(allowed, ", "))
				continue
			}
			l.warn(k, w, "", "field %q is not read here; it is ignored (fields here: %s)", prefix+name, strings.Join(allowed, ", "))
			l.shape(v, w, name, false)
		case out[name] != nil:
			l.warn(k, w, "", "field %q appears twice; the last one counts", prefix+name)
			out[name] = v
		default:
			out[name] = v
		}
	}
	return out
}

// shape checks a value as envoyproxy/ratelimit checks every value:
// mappings have known keys, lists hold mappings, and leaves are strings,
// whole numbers, booleans or null. metadata and sluice's own block are not
// looked into. With leavesOnly it checks the leaves alone: the loader reads
// the rest where it is used. Each node is checked once, so aliases cost
// nothing more and a recursive alias ends.
func (l *loader) shape(n *yaml.Node, w where, field string, leavesOnly bool) {
	n = yamlload.Resolve(n)
	if l.shaped == nil {
		l.shaped = map[shaped]bool{}
	}
	if n == nil || l.shaped[shaped{n, leavesOnly}] {
		return
	}
	l.shaped[shaped{n, leavesOnly}] = true
	switch {
	case field == "metadata" || field == "sluice":
	case n.Kind == yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if !leavesOnly && (k.Kind != yaml.ScalarNode || !slices.Contains(peerKeys, k.Value)) {
				l.Fail(k, w, field, "unknown field %q", k.Value)
				continue
			}
			l.shape(n.Content[i+1], w, k.Value, leavesOnly)
		}
	case n.Kind == yaml.SequenceNode:
		for _, c := range n.Content {
			if c = yamlload.Resolve(c); !leavesOnly && c.Kind != yaml.MappingNode {
				l.Fail(c, w, field, "want a list of mappings (got %s in it)", yamlload.Show(c))
				continue
			}
			l.shape(c, w, field, leavesOnly)
		}
	case n.Tag == "!!float":
		l.Fail(n, w, field, "%s is not a string, a whole number or a boolean", yamlload.Show(n))
	case n.Tag == "!!int":
		if _, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64); err != nil {
			l.Fail(n, w, field, "%s is out of range", yamlload.Show(n))
		}
	}
}

// unquoted reports whether n, the value of a number or boolean field, is
// written without quotes; a quoted one is a string, which
// envoyproxy/ratelimit refuses there, and so an error.
func (l *loader) unquoted(n *yaml.Node, w where, field string) bool {
	if n.Kind == yaml.ScalarNode && n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 {
		l.Fail(n, w, field, "%s is quoted: a string, not a number or a boolean", yamlload.Show(n))
		return false
	}
	return true
}

// shaped is a node shape has checked, and how.
type shaped struct {
	n          *yaml.Node
	leavesOnly bool
}

// metadata checks a descriptor's metadata: a mapping (any content), as
// envoyproxy/ratelimit returns it in dynamic metadata.
func (l *loader) metadata(n *yaml.Node, w where) {
	if n.Kind != yaml.MappingNode && !yamlload.IsNull(n) {
		l.Fail(n, w, "metadata", "want a mapping (got %s)", yamlload.Show(n))
	}
}

// warn records a warning: something envoyproxy/ratelimit accepts that
// sluice's strict reading would refuse.
func (l *loader) warn(n *yaml.Node, w where, field, format string, args ...any) {
	before := len(l.Errs)
	l.Fail(n, w, field, format, args...)
	l.warns = append(l.warns, l.Errs[before:]...)
	l.Errs = l.Errs[:before]
}

// wildcard reports whether a descriptor's key and value make it a
// wildcard: a '*' anywhere in either.
func wildcard(key, value string) bool {
	return strings.Contains(key, "*") || strings.Contains(value, "*")
}

// globMatch reports whether s matches the pattern split on '*' (each '*'
// matches any run of bytes, the empty one included), as
// envoyproxy/ratelimit's wildcardMatch does.
func globMatch(parts []string, s string) bool {
	if len(parts) == 1 {
		return parts[0] == s
	}
	first, last := parts[0], parts[len(parts)-1]
	if len(s) < len(first)+len(last) || !strings.HasPrefix(s, first) || !strings.HasSuffix(s, last) {
		return false
	}
	mid := s[len(first) : len(s)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(mid, p)
		if i < 0 {
			return false
		}
		mid = mid[i+len(p):]
	}
	return true
}

// matches reports whether a request entry matches wildcard node n. When
// the configured key has no '*', the key must be equal and the value
// match; otherwise the pattern "key_value" is matched against the
// request's "key_value", as envoyproxy/ratelimit matches every wildcard
// (sluice keeps key and value apart where it can, so that key "a_b" with
// value "c" never meets key "a" with value "b_c").
func (n *node) matches(key, value string) bool {
	if !strings.Contains(n.key, "*") {
		return n.key == key && globMatch(n.glob, value)
	}
	return globMatch(n.glob, key+"_"+value)
}

// put adds n to l, by its kind: key and value, wildcard, or key alone.
func (l *level) put(n *node) {
	if wildcard(n.key, n.value) {
		pattern := n.value
		if strings.Contains(n.key, "*") {
			pattern = n.key
			if n.value != "" {
				pattern += "_" + n.value
			}
		}
		n.glob = strings.Split(pattern, "*")
		l.wildcards = append(l.wildcards, n)
	}
	l.nodes = append(l.nodes, n)
	if n.value == "" {
		l.keyOnly[n.key] = n
	} else {
		l.exact[pair{n.key, n.value}] = n // a value that is literally "x*" matches itself first
	}
}

// get returns the entry of l configured with exactly key and value.
func (l *level) get(key, value string) *node {
	if value == "" {
		return l.keyOnly[key]
	}
	return l.exact[pair{key, value}]
}

// all returns l's entries in file order.
func (l *level) all() []*node { return l.nodes }

// clone returns a copy of l that put can extend without changing l.
func (l *level) clone() level {
	c := level{exact: maps.Clone(l.exact), keyOnly: maps.Clone(l.keyOnly), wildcards: slices.Clone(l.wildcards), nodes: slices.Clone(l.nodes)}
	if c.exact == nil {
		c.exact = map[pair]*node{}
	}
	if c.keyOnly == nil {
		c.keyOnly = map[string]*node{}
	}
	return c
}

// apart reports whether r is checked apart from the request's enforced
// limits: after them, only when they admit, and never refusing the
// request by itself. Shadow limits are; so are quota_mode limits, which
// refuse only when every quota limit of the request is over (see answer).
func (r *rule) apart() bool { return r.shadow || r.quota }
