package policy

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/internal/celexpr"
	"go.yaml.in/yaml/v3"
)

// exprApplies reports whether a rule whose pattern matched r applies:
// its match.expr is true, or fails. An expression that fails (a header it
// reads is absent or sent twice, the cost limit) applies the rule, so
// that a request is counted rather than let through because of what it
// left out; write request.headers[?"x"].orValue("") to read an absent
// header as empty.
func (m *matcher) exprApplies(r *http.Request) bool {
	if m.expr == nil {
		return true
	}
	ok, err := m.expr.Bool(&factsOf(r).input)
	return ok || err != nil
}

// exprPart is the value of a key part expr:'...' for r, "" (missing: the
// limit's on_missing applies) when it fails or is empty.
func exprPart(r *http.Request, e *celexpr.Expr) string {
	v, err := e.Value(&factsOf(r).input)
	if err != nil {
		return ""
	}
	return v
}

// exprCost is the cost expr:'...' gives r: a whole number from 0 to most.
func exprCost(r *http.Request, e *celexpr.Expr, most int64) (int64, error) {
	c, err := e.Int(&factsOf(r).input)
	if err != nil {
		return 0, fmt.Errorf("the cost expression failed: %v", err)
	}
	if c < 0 || c > most {
		return 0, fmt.Errorf("the cost expression gave %d, not a whole number from 0 to %d", c, most)
	}
	return c, nil
}

// compileExpr compiles the expression of field (written as in
// expr:'...', src without the prefix: one pair of single quotes around it
// is dropped), recording an error that names the line, rule and field.
func (l *loader) compileExpr(n *yaml.Node, w where, field, src string, kind celexpr.Kind) *celexpr.Expr {
	if len(src) >= 2 && src[0] == '\'' && src[len(src)-1] == '\'' {
		src = src[1 : len(src)-1]
	}
	e, err := celexpr.Compile(strings.TrimSpace(src), kind)
	if err != nil {
		l.Fail(n, w, field, "expression %q: %v", src, err)
		return nil
	}
	l.hasExpr = true
	return e
}
