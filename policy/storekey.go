package policy

import (
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/decide"
)

// StoreKey returns the store key this limit of rule gives a request whose
// key parts have values (one per part of Key, in order; "*" for global),
// as planning builds it: for an operator to inspect or reset one client's
// state. A value may also be a mask this process showed (decide.MaskValue,
// "key#3f09a1c2d4e5", alone or after its part's name as logs and the
// status page show it: "ip=key#3f09a1c2d4e5"): it names the value it
// masks. It fails when the number of values is not the number of parts, a
// value is empty, or a mask is not one this process remembers.
func (l *Limit) StoreKey(rule string, values []string) (string, error) {
	if len(values) != len(l.key) {
		return "", fmt.Errorf("limit %q has key %s: want %d value(s), one per part, got %d", l.Name, l.Key(), len(l.key), len(values))
	}
	b := decide.AppendKey(nil, rule, l.Name)
	for i, v := range values {
		part, err := l.storeValue(i, v)
		if err != nil {
			return "", err
		}
		b = decide.AppendKeyPart(b, part)
	}
	return string(b), nil
}

// storeValue is the part of a store key that value v of key part i makes:
// the value a mask names, as the key holds it, or v bounded by
// decide.KeyValue as planning bounds a request's values.
func (l *Limit) storeValue(i int, v string) (string, error) {
	names, _ := l.KeyNames()
	if name, m, ok := strings.Cut(v, "="); ok && name == names[i] && decide.IsMask(m) {
		v = m
	}
	switch {
	case v == "":
		return "", fmt.Errorf("limit %q: value %d (%s) is empty", l.Name, i+1, l.key[i].kind)
	case !decide.IsMask(v):
		return decide.KeyValue(v), nil
	}
	stored, ok := decide.Unmask(v)
	if !ok {
		return "", fmt.Errorf("limit %q: value %d (%s) is the mask %s, which this server has not shown lately (masks are drawn afresh when a server starts, and it remembers the last few thousand it showed): give the value itself, or a mask from its current logs or status page", l.Name, i+1, names[i], v)
	}
	return stored, nil
}
