// Package keyview shows sluice's store keys as people read them: each value
// named by the part of the limit's key it comes from, masked unless keys
// are shown. The status page, the refusal logs, the decision API's answers
// and sluice keys all show keys this way.
package keyview

import (
	"strings"

	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/policy"
)

// Shower shows store keys as the status page does: each value named by
// the part of the limit's key it comes from ("ip=203.0.113.7
// header:X-User=alice"), masked unless Show is set: decide.KeyText with
// the names the policy gives the limit's key. The refusal logs and sluice
// keys show keys the same way (decide.Config.KeyText).
type Shower struct {
	Show bool
	// Names returns the key names of a policy limit (see
	// policy.Limit.KeyNames), ok false when the policy has no such limit.
	Names func(rule, limit string) (key, onMissing []string, ok bool)
}

// Under returns k naming the parts of keys as p does (NamesIn): the view
// of a request served under p, whatever policy is in force by the time its
// keys are shown.
func (k Shower) Under(p *policy.Policy) Shower {
	k.Names = func(rule, limit string) ([]string, []string, bool) { return NamesIn(p, rule, limit) }
	return k
}

// NamesIn returns the key names of the limit of p named limit in the rule
// named rule (see policy.Limit.KeyNames), ok false when p has no such
// limit.
func NamesIn(p *policy.Policy, rule, limit string) (key, onMissing []string, ok bool) {
	for _, r := range p.Rules {
		if r.Name != rule {
			continue
		}
		for _, l := range r.Limits {
			if l.Name == limit {
				key, onMissing = l.KeyNames()
				return key, onMissing, true
			}
		}
	}
	return nil, nil, false
}

// Key shows one store key.
func (k Shower) Key(key string) string {
	v, ok := k.View(key)
	switch {
	case !ok:
		return decide.ShowValue(key, k.Show) // not a key sluice built: all of it, masked
	case v.Note != "":
		return v.Note
	case v.OnMissing:
		return "(on_missing) " + decide.KeyText(v.Names, v.Values, k.Show)
	}
	return decide.KeyText(v.Names, v.Values, k.Show)
}

// View is a store key split as people read it: the rule it counts
// under ("" for the decision API's explicit checks and the RLS), the names
// of the parts of the limit's key and their values, as the key holds them
// (a long value as its digest, decide.KeyValue).
type View struct {
	Rule          string
	Names, Values []string
	OnMissing     bool   // counted under the limit's on_missing key
	Note          string // instead of values, for a key that holds none
}

// lastEntryKey is the key of the last entry of an RLS descriptor path
// ("generic_key=login/remote_address": remote_address).
func lastEntryKey(path string) string {
	last := path[strings.LastIndexByte(path, '/')+1:]
	key, _, _ := strings.Cut(last, "=")
	return key
}

// View splits a store key sluice built; ok is false for any other key.
func (k Shower) View(key string) (v View, ok bool) {
	parts, ok := decide.KeyParts(key)
	if !ok || len(parts) < 2 {
		return v, false
	}
	switch {
	case parts[0] == "" && parts[1] == "api": // an explicit check of the decision API
		v.Names, v.Values = []string{"key"}, parts[2:]
	case parts[0] == "" && parts[1] == "rls" && len(parts) == 3: // an RLS limit without detailed_metric
		v.Note = "(any value: the service reports values of detailed_metric limits only)"
	case parts[0] == "" && parts[1] == "rls" && len(parts) == 4: // descriptor path, its last entry's value
		v.Names, v.Values = []string{lastEntryKey(parts[2])}, parts[3:]
	case parts[0] == "" && parts[1] == "rls" && len(parts)%2 == 1: // a store key: domain, then each entry's key and value
		for i := 3; i < len(parts); i += 2 {
			v.Names, v.Values = append(v.Names, parts[i]), append(v.Values, parts[i+1])
		}
	default: // a policy key: rule, limit, values
		key, onMissing, ok := k.Names(parts[0], parts[1])
		v.Rule, v.Names, v.Values = parts[0], key, parts[2:]
		if len(v.Values) > 0 && v.Values[0] == "" && ok { // counted under the on_missing key
			v.Names, v.Values, v.OnMissing = onMissing, v.Values[1:], true
		}
	}
	return v, true
}
