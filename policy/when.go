package policy

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/httpname"
	"go.yaml.in/yaml/v3"
)

// when is a limit's when: the conditions under which it applies (Sentinel's
// strategies). Both, when both are given, must hold.
//
//   - limit and above (RELATE): the limit applies only while the limit
//     named uses more than above of its budget, for the key that limit
//     gives this request (decide.Relation).
//   - entry (CHAIN): the limit applies only to requests that came through
//     the entry named (Policy.entry).
type when struct {
	limit string // the related limit's name, "" for none
	above int64  // thousandths
	entry string // "" for none
	node  *yaml.Node

	related     *Limit // resolved once every rule is read
	relatedRule *Rule
}

// String describes when a limit applies, for Snapshot: " when writes is
// above 80%, through checkout"; "" for a limit that always applies.
func (wh *when) String() string {
	if wh == nil {
		return ""
	}
	var parts []string
	if wh.limit != "" {
		parts = append(parts, fmt.Sprintf("%s is above %g%%", wh.limit, float64(wh.above)/10))
	}
	if wh.entry != "" {
		parts = append(parts, "through "+wh.entry)
	}
	return " when " + strings.Join(parts, ", ")
}

// when reads a limit's when: (n).
func (l *loader) when(n *yaml.Node, w where) *when {
	f := l.Fields(n, w, "when", "limit", "above", "entry")
	wh := &when{node: n}
	if v := f["limit"]; v != nil {
		wh.limit, _ = l.Str(v, w, "when.limit")
		if v := f["above"]; v != nil {
			wh.above = l.thousandths(v, w, "when.above")
		} else {
			l.Fail(n, w, "when.above", "missing: when.limit needs the share of that limit's budget above which this one applies (above: 0.8)")
		}
	} else if v := f["above"]; v != nil {
		l.Fail(v, w, "when.above", "applies only with when.limit")
	}
	if v := f["entry"]; v != nil {
		wh.entry, _ = l.Str(v, w, "when.entry")
		if wh.entry == "" {
			l.Fail(v, w, "when.entry", "must not be empty")
		}
	}
	if f["limit"] == nil && f["entry"] == nil && f["above"] == nil {
		l.Fail(n, w, "when", "give limit and above (apply while another limit is busy), entry (apply to requests through an entry), or both")
	}
	return wh
}

// resolveWhen finds the limits the whens of p relate to and the entries
// they name, once every rule is read: a relation to no limit, to its own
// limit or in a cycle, and an entry that is neither a rule's name nor a
// plain name, are errors.
func (l *loader) resolveWhen(p *Policy) {
	byName := map[string]*Limit{}
	ruleOf := map[*Limit]*Rule{}
	for _, r := range p.Rules {
		for _, lim := range r.Limits {
			byName[lim.Name], ruleOf[lim] = lim, r
		}
	}
	for _, r := range p.Rules {
		for _, lim := range r.Limits {
			wh := lim.when
			if wh == nil {
				continue
			}
			w := where{rule: r.Name, limit: lim.Name}
			l.resolveEntry(p, wh, w)
			p.chains = p.chains || wh.entry != ""
			if wh.limit == "" {
				continue
			}
			switch rel := byName[wh.limit]; {
			case rel == nil:
				l.Fail(wh.node, w, "when.limit", "%q: no limit of that name (the policy's limits are %s)", wh.limit, strings.Join(slices.Sorted(maps.Keys(byName)), ", "))
			case rel == lim:
				l.Fail(wh.node, w, "when.limit", "%q is this limit: a limit cannot apply only while it is busy itself", wh.limit)
			default:
				wh.related, wh.relatedRule = rel, ruleOf[rel]
				l.warnRelation(wh, w, lim)
			}
		}
	}
	l.relationCycles(p)
}

// warnRelation warns about a relation whose related key has a part the
// client sends (a header, a query parameter, a cookie) that lim's own key
// does not: a client that sends another value there is looked at under
// another counter, one that is not busy, and escapes lim.
func (l *loader) warnRelation(wh *when, w where, lim *Limit) {
	for _, part := range wh.related.key {
		if part.kind != "header" && part.kind != "query" && part.kind != "cookie" {
			continue
		}
		if !slices.ContainsFunc(lim.key, func(p keyPart) bool { return p.kind == part.kind && p.name == part.name }) {
			l.warn(wh.node, w, "when.limit", "%q is keyed by %s:%s, which the client sends and this limit's key is not: a client that sends another value is looked at under another counter, one that is not busy", wh.limit, part.kind, part.name)
			return
		}
	}
}

// relationCycles reports each cycle of relations once, at its first limit
// in file order (a → b → a: neither is ever the one that is busy first).
func (l *loader) relationCycles(p *Policy) {
	var lims []*Limit
	rules, index := map[*Limit]string{}, map[*Limit]int{}
	for _, r := range p.Rules {
		for _, lim := range r.Limits {
			rules[lim], index[lim] = r.Name, len(lims)
			lims = append(lims, lim)
		}
	}
	related := func(i int) int {
		if w := lims[i].when; w != nil && w.related != nil {
			return index[w.related]
		}
		return -1
	}
	inCycle := map[*Limit]bool{}
	for i, lim := range lims {
		c := decide.RelationCycle(i, len(lims), related)
		if c == nil || inCycle[lim] {
			continue
		}
		path := make([]string, len(c))
		for k, j := range c {
			path[k], inCycle[lims[j]] = lims[j].Name, true
		}
		l.Fail(lim.when.node, where{rule: rules[lim], limit: lim.Name}, "when.limit", "the relations form a cycle: %s", strings.Join(path, " → "))
	}
}

// resolveEntry checks the entry a when names: a rule's name, or else a
// plain name (letters, digits, '_', '-', '.'), which only the entry header
// or a Go middleware (sluice.WithEntry) can give.
func (l *loader) resolveEntry(p *Policy, wh *when, w where) {
	if wh.entry == "" || slices.ContainsFunc(p.Rules, func(r *Rule) bool { return r.Name == wh.entry }) {
		return
	}
	if !plainName(wh.entry) {
		l.Fail(wh.node, w, "when.entry", "%q names no rule, and is not a plain name (letters, digits, '_', '-' and '.', at most 64)", wh.entry)
		return
	}
	if p.entryHeader == "" {
		l.warn(wh.node, w, "when.entry", "%q names no rule and the policy has no entry_header: sluice serve never sees that entry; only a Go middleware that marks it (sluice.WithEntry) can", wh.entry)
	}
}

// plainName reports whether s is 1 to 64 letters, digits, '_', '-' and '.'.
func plainName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// entryHeader reads the policy's entry_header: the request header that
// names a request's entry, honoured from trusted_proxies only.
func (l *loader) entryHeader(n *yaml.Node, proxies int) string {
	s, _ := l.Str(n, where{}, "entry_header")
	if !httpname.Valid(s) {
		l.Fail(n, where{}, "entry_header", "%q is not a header name", s)
		return ""
	}
	if proxies == 0 {
		l.warn(n, where{}, "entry_header", "honoured only for requests through trusted_proxies, and the policy lists none: it never applies")
	}
	return http.CanonicalHeaderKey(s)
}

// entry returns the entry r came through, for the limits that apply only
// to requests through one (when: {entry}): the value of the policy's
// entry_header when r comes from a trusted proxy; else the entry a Go
// middleware marked on r's context (sluice.WithEntry); else first, the
// name of the first rule r matched. The header from any other peer is
// ignored (sluice serve removes it: ProtectedHeaders). A header sent
// twice by a trusted proxy is the client's error. A policy without such
// limits returns "": none reads it.
func (p *Policy) entry(r *http.Request, first string) (string, error) {
	if !p.chains {
		return "", nil
	}
	if p.entryHeader != "" && p.ClientIP.PeerTrusted(r) {
		v, err := httplimit.HeaderValue(r, p.entryHeader)
		if err != nil || v != "" {
			return v, err
		}
	}
	if e := sluice.EntryFrom(r.Context()); e != "" {
		return e, nil
	}
	return first, nil
}

// relation is the decide.Relation of a limit whose when names a related
// limit, for r (mr: r with its path folded, as rules match): the related
// limit's check as its own rule would plan it for r. Nil when that check
// cannot be planned (a key part r lacks, a key that cannot be computed,
// an override that makes the related limit unlimited for r): the limit
// then applies, as if the related one were busy.
func (p *Policy) relation(r, mr *http.Request, wh *when) *decide.Relation {
	var buf [128]byte
	rule := wh.relatedRule
	rc, ok, err := p.planKey(r, rule.match.pattern(mr), rule, wh.related, buf[:0])
	if !ok || err != nil || rc.Err != nil {
		return nil
	}
	return &decide.Relation{Name: rc.Name, Key: rc.Key, Slot: rc.Slot, Limit: rc.Limit, Above: wh.above}
}
