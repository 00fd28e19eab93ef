package policy

import "github.com/sluicehq/sluice"

// Override is one override of a limit as a tool shows it (sluice
// simulate draws each one): which requests it applies to, and the limit
// it applies instead.
type Override struct {
	// When says which requests it matches: "key VALUE",
	// "header NAME: VALUE" or "claim NAME: VALUE".
	When string
	// Limit is the limit those requests are checked against; zero when
	// Unlimited.
	Limit sluice.Limit
	// Unlimited overrides lift the limit: matching requests are not
	// checked against it.
	Unlimited bool
}

// Overrides lists l's overrides in file order.
func (l *Limit) Overrides() []Override {
	out := make([]Override, len(l.overrides))
	for i, o := range l.overrides {
		when := "key " + o.key
		switch {
		case o.claim != "":
			when = "claim " + o.claim + ": " + o.equals
		case o.key == "":
			when = "header " + o.header + ": " + o.equals
		}
		out[i] = Override{When: when, Unlimited: o.unlimited}
		if !o.unlimited {
			out[i].Limit = o.limit
		}
	}
	return out
}
