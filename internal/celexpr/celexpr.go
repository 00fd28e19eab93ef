// Package celexpr compiles and evaluates the CEL expressions of a policy
// (match: {expr}, a key part expr:'...', a cost expr:'...') over one
// request and the claims of its verified token.
//
// An expression sees two variables:
//
//	request  method, path, host, ip (strings); headers (lower-case names),
//	         query, cookies (maps of string to string)
//	jwt      the claims of the request's verified bearer token (a map;
//	         empty when the request has none that verifies)
//
// Expressions are compiled and type-checked once, when the policy loads:
// a syntax error, an unknown variable or field of request, or a result of
// the wrong type is an error that names the expression's line and column.
// Evaluation is bounded by a cost limit (MaxCost, CEL's own cost units),
// so that no expression runs long; what fails (a missing map key, a
// header or query parameter sent more than once, a query that does not
// parse, the cost limit) is an error the caller turns into a counted
// decision or a 4xx, never an admission.
//
// Evaluating costs the expression's own work plus, on the first use of
// request in a request, building its maps (one allocation per header);
// bench/CLAIMS.md has the numbers.
package celexpr

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
	"cel.dev/cel-go/ext"
	"cel.dev/cel-go/interpreter"
)

// Bounds of an expression.
const (
	// MaxSource bounds an expression's text.
	MaxSource = 2048
	// MaxCost bounds an evaluation, in CEL's cost units (about one per
	// operation, one per byte a string function reads).
	MaxCost = 10000
)

// Kind is what an expression computes, and so its result type.
type Kind uint8

const (
	Match Kind = iota // a bool: does the rule apply
	Key               // a key part: a string, number or bool
	Cost              // a cost: an int
)

// fields are request's fields.
var fields = [...]string{"method", "path", "host", "ip", "headers", "query", "cookies"}

var (
	envOnce sync.Once
	env     *cel.Env
	envErr  error
)

func newEnv() (*cel.Env, error) {
	envOnce.Do(func() {
		env, envErr = cel.NewEnv(
			cel.Variable("request", cel.MapType(cel.StringType, cel.DynType)),
			cel.Variable("jwt", cel.MapType(cel.StringType, cel.DynType)),
			cel.OptionalTypes(),
			ext.Strings(), // lowerAscii, split, replace, ...
		)
	})
	return env, envErr
}

// Expr is a compiled expression. It is safe for concurrent use.
type Expr struct {
	src   string
	kind  Kind
	prg   cel.Program
	needs need // the fields of request it reads
}

// need is a set of request's fields, a bit per entry of fields.
type need uint8

const needAll need = 1<<len(fields) - 1

// String is the expression as written.
func (e *Expr) String() string { return e.src }

// Compile parses, type-checks and plans src as an expression of kind.
func Compile(src string, kind Kind) (*Expr, error) {
	if len(src) > MaxSource {
		return nil, fmt.Errorf("%d bytes, more than %d", len(src), MaxSource)
	}
	if strings.TrimSpace(src) == "" {
		return nil, errors.New("empty")
	}
	e, err := newEnv()
	if err != nil {
		return nil, err
	}
	checked, iss := e.Compile(src)
	if iss.Err() != nil {
		return nil, errors.New(strings.ReplaceAll(iss.Err().Error(), "\n", " "))
	}
	needs, err := checkFields(checked)
	if err != nil {
		return nil, err
	}
	if err := checkOutput(checked.OutputType(), kind); err != nil {
		return nil, err
	}
	prg, err := e.Program(checked, cel.CostLimit(MaxCost), cel.EvalOptions(cel.OptOptimize))
	if err != nil {
		return nil, err
	}
	return &Expr{src: src, kind: kind, prg: prg, needs: needs}, nil
}

// checkOutput reports a result type that kind cannot use (dyn, a claim's
// type, is checked when evaluated).
func checkOutput(t *cel.Type, kind Kind) error {
	if t.IsExactType(cel.DynType) {
		return nil
	}
	switch kind {
	case Match:
		if !t.IsExactType(cel.BoolType) {
			return fmt.Errorf("gives %s, want bool", t)
		}
	case Cost:
		if !t.IsExactType(cel.IntType) && !t.IsExactType(cel.UintType) {
			return fmt.Errorf("gives %s, want int", t)
		}
	case Key:
		for _, ok := range []*cel.Type{cel.StringType, cel.IntType, cel.UintType, cel.BoolType, cel.DoubleType} {
			if t.IsExactType(ok) {
				return nil
			}
		}
		return fmt.Errorf("gives %s, want a string, number or bool", t)
	}
	return nil
}

// checkFields reports a field of request that does not exist
// (request.heders), which type-checking a map cannot, and returns the
// fields the expression reads: all of them when it uses request other
// than as request.FIELD.
func checkFields(checked *cel.Ast) (need, error) {
	var bad []string
	var needs need
	root := ast.NavigateAST(checked.NativeRep())
	for _, n := range ast.MatchDescendants(root, func(e ast.NavigableExpr) bool {
		return e.Kind() == ast.IdentKind && e.AsIdent() == "request"
	}) {
		parent, ok := n.Parent()
		if !ok || parent.Kind() != ast.SelectKind {
			needs = needAll
			continue
		}
		name := parent.AsSelect().FieldName()
		i := slices.Index(fields[:], name)
		if i < 0 {
			bad = append(bad, name)
			continue
		}
		needs |= 1 << i
	}
	if len(bad) > 0 {
		return 0, fmt.Errorf("request has no field %s (it has %s)", strings.Join(bad, ", "), strings.Join(fields[:], ", "))
	}
	return needs, nil
}

// Bool evaluates a Match expression.
func (e *Expr) Bool(in *Input) (bool, error) {
	v, err := e.eval(in)
	if err != nil {
		return false, err
	}
	b, ok := v.(types.Bool)
	if !ok {
		return false, fmt.Errorf("gave %s, want bool", v.Type().TypeName())
	}
	return bool(b), nil
}

// Value evaluates a Key expression: a string as it is, a number or bool
// written out.
func (e *Expr) Value(in *Input) (string, error) {
	v, err := e.eval(in)
	if err != nil {
		return "", err
	}
	switch x := v.(type) {
	case types.String:
		return string(x), nil
	case types.Int, types.Uint, types.Double, types.Bool:
		return fmt.Sprint(x.Value()), nil
	}
	return "", fmt.Errorf("gave %s, want a string, number or bool", v.Type().TypeName())
}

// Int evaluates a Cost expression.
func (e *Expr) Int(in *Input) (int64, error) {
	v, err := e.eval(in)
	if err != nil {
		return 0, err
	}
	switch x := v.(type) {
	case types.Int:
		return int64(x), nil
	case types.Uint:
		if uint64(x) > 1<<62 {
			return 0, fmt.Errorf("gave %d, too large", uint64(x))
		}
		return int64(x), nil
	}
	return 0, fmt.Errorf("gave %s, want int", v.Type().TypeName())
}

func (e *Expr) eval(in *Input) (ref.Val, error) {
	in.build(e.needs)
	v, _, err := e.prg.Eval(in)
	if err != nil {
		return nil, err
	}
	return v, nil
}

// Input is what the expressions of one request read. Build one per
// request (its maps are built on first use and reused by every
// expression of the request); it is not safe for concurrent use.
type Input struct {
	// Request is the request, as the policy's rules see it.
	Request *http.Request
	// IP returns the client's address.
	IP func() string
	// Claims are the verified claims of its token, nil when none.
	Claims map[string]any

	request, jwt map[string]any
	built        need // the fields of request built so far
}

var _ interpreter.Activation = (*Input)(nil)

// ResolveName returns the variable name: request or jwt.
func (in *Input) ResolveName(name string) (any, bool) {
	switch name {
	case "request":
		return in.request, true
	case "jwt":
		if in.jwt == nil {
			in.jwt = claims(in.Claims)
		}
		return in.jwt, true
	}
	return nil, false
}

// Parent is nil: an Input is the only activation.
func (in *Input) Parent() interpreter.Activation { return nil }

// build adds the fields of request in needs that are not built yet: an
// expression that reads only headers costs no query or cookie parsing.
func (in *Input) build(needs need) {
	todo := needs &^ in.built
	if todo == 0 {
		return
	}
	if in.request == nil {
		in.request = make(map[string]any, len(fields))
	}
	in.built |= todo
	r := in.Request
	for i, f := range fields {
		if todo&(1<<i) != 0 {
			in.request[f] = in.field(r, f)
		}
	}
}

func (in *Input) field(r *http.Request, name string) any {
	switch name {
	case "method":
		return r.Method
	case "path":
		return r.URL.Path
	case "host":
		return r.Host
	case "ip":
		if in.IP == nil {
			return ""
		}
		return in.IP()
	case "headers":
		m := multiMap{vals: make(map[string][]string, len(r.Header)), what: "header"}
		for k, vs := range r.Header {
			lk := strings.ToLower(k)
			m.vals[lk] = append(m.vals[lk], vs...)
		}
		return m.val()
	case "query":
		m := multiMap{what: "query parameter"}
		m.vals, m.err = url.ParseQuery(r.URL.RawQuery)
		return m.val()
	}
	m := multiMap{vals: map[string][]string{}, what: "cookie"}
	for _, c := range r.Cookies() {
		m.vals[c.Name] = append(m.vals[c.Name], c.Value)
	}
	return m.val()
}

// multiMap is a map of names to values where a name given more than once
// (a header sent twice) is an error to read, not one of its values: which
// one the upstream reads is unknown, so an expression must not choose.
type multiMap struct {
	traits.Mapper // the names given once
	vals          map[string][]string
	dup           map[string]int
	what          string
	err           error // the whole map does not parse (a query string)
}

func (m multiMap) val() multiMap {
	once := make(map[string]string, len(m.vals))
	for k, vs := range m.vals {
		if len(vs) == 1 {
			once[k] = vs[0]
		} else {
			if m.dup == nil {
				m.dup = map[string]int{}
			}
			m.dup[k] = len(vs)
		}
	}
	m.Mapper = types.DefaultTypeAdapter.NativeToValue(once).(traits.Mapper)
	m.vals = nil
	if m.err != nil {
		m.err = fmt.Errorf("the %s does not parse", m.what)
	}
	return m
}

func (m multiMap) fail(key ref.Val) ref.Val {
	if m.err != nil {
		return types.NewErr("%v", m.err)
	}
	if k, ok := key.(types.String); ok {
		if n := m.dup[string(k)]; n > 0 {
			return types.NewErr("%s %q sent %d times", m.what, string(k), n)
		}
	}
	return nil
}

// Get returns the value of key, an error if it is given more than once.
func (m multiMap) Get(key ref.Val) ref.Val {
	if e := m.fail(key); e != nil {
		return e
	}
	return m.Mapper.Get(key)
}

// Find returns the value of key, an error if it is given more than once.
func (m multiMap) Find(key ref.Val) (ref.Val, bool) {
	if e := m.fail(key); e != nil {
		return e, false
	}
	return m.Mapper.Find(key)
}

// Contains reports whether key is given, once or more.
func (m multiMap) Contains(key ref.Val) ref.Val {
	if m.err != nil {
		return types.NewErr("%v", m.err)
	}
	if k, ok := key.(types.String); ok && m.dup[string(k)] > 0 {
		return types.True
	}
	return m.Mapper.Contains(key)
}

// claims converts verified claims for CEL: JSON numbers as int or double.
func claims(c map[string]any) map[string]any {
	out := make(map[string]any, len(c))
	for k, v := range c {
		out[k] = claimValue(v)
	}
	return out
}

func claimValue(v any) any {
	switch x := v.(type) {
	case interface {
		Int64() (int64, error)
		Float64() (float64, error)
	}: // json.Number
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case map[string]any:
		return claims(x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = claimValue(e)
		}
		return out
	}
	return v
}
