package policy

import (
	"fmt"

	"github.com/sluicehq/sluice/decide"
)

// StoreKey returns the store key this limit of rule gives a request whose
// key parts have values (one per part of Key, in order; "*" for global),
// as planning builds it: for an operator to inspect or reset one client's
// state. It fails when the number of values is not the number of parts or
// a value is empty.
func (l *Limit) StoreKey(rule string, values []string) (string, error) {
	if len(values) != len(l.key) {
		return "", fmt.Errorf("limit %q has key %s: want %d value(s), one per part, got %d", l.Name, l.Key(), len(l.key), len(values))
	}
	b := decide.AppendKey(nil, rule, l.Name)
	for i, v := range values {
		if v == "" {
			return "", fmt.Errorf("limit %q: value %d (%s) is empty", l.Name, i+1, l.key[i].kind)
		}
		b = decide.AppendKeyPart(b, decide.KeyValue(v))
	}
	return string(b), nil
}
