package policy

import (
	"strconv"
	"strings"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
)

// FailureMode returns the failure mode of the rule a request belongs to,
// as its action.on_error names it: the function failover.Config.Mode
// wants. It finds the rule by the request's key, which Plan starts with the
// rule's name; a key Plan did not make gets failover.FailOpen, the
// default of a rule without on_error.
func (p *Policy) FailureMode(r sluice.Request) failover.Mode {
	name, ok := ruleOfKey(r.Key)
	if !ok {
		return failover.FailOpen
	}
	for _, rule := range p.Rules {
		if rule.Name == name {
			return rule.OnError
		}
	}
	return failover.FailOpen
}

// FailureMode is the current policy's FailureMode. A request planned under
// an older policy is judged by the current one, whose rule of the same name
// is the one that replaced it.
func (h *Holder) FailureMode(r sluice.Request) failover.Mode {
	return h.current.Load().FailureMode(r)
}

// ruleOfKey reads the rule name at the start of a key Plan built: its
// length, a colon, then the name.
func ruleOfKey(key string) (string, bool) {
	i := strings.IndexByte(key, ':')
	if i <= 0 || i > 10 {
		return "", false
	}
	n, err := strconv.Atoi(key[:i])
	if err != nil || n < 0 || n > len(key)-i-1 {
		return "", false
	}
	return key[i+1 : i+1+n], true
}
