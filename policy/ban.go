package policy

import (
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
)

// maxBan bounds a limit's ban.
const maxBan = 30 * 24 * time.Hour

// banPart is the part after the rule's name in a ban key: a limit's name
// cannot hold a space, so ban keys never meet a limit's keys.
const banPart = " ban"

// ban reads a limit's ban: a duration a key it refuses stays refused.
func (l *loader) ban(v *yaml.Node, w where, lim *Limit) {
	s, _ := l.Str(v, w, "ban")
	d, err := ParseDuration(s)
	if err != nil || d < time.Second || d > maxBan {
		l.Fail(v, w, "ban", "%q: want a duration from 1s to %s, such as 15m", s, sluice.FormatDuration(maxBan))
		return
	}
	lim.ban = d
}

// Ban is how long a key the limit refuses stays refused (its ban:), 0
// without one.
func (l *Limit) Ban() time.Duration { return l.ban }

// banOf returns the ban of a check of l in rule (nil without one, and in
// a shadow rule, which never refuses).
func (p *Policy) banOf(rule *Rule, l *Limit, key string) *decide.Ban {
	if l.ban == 0 || rule.Shadow {
		return nil
	}
	return &decide.Ban{Key: BanKey(rule.Name, key), Limit: decide.BanLimit(l.ban), Index: p.bans}
}

// BanKey returns the store key of the ban of a key of a limit of rule
// (key as planning built it, decide.AppendKey).
func BanKey(rule, key string) string {
	return string(decide.AppendKey(nil, rule, banPart)) + key
}

// banName names the check of a limit's ban in answers and metrics.
func banName(l *Limit) string { return l.Name + ".ban" }
