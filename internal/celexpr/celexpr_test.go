package celexpr

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestCompileErrors(t *testing.T) {
	for src, want := range map[string]string{
		`request.method ==`:               "Syntax error",
		`request.heders["x"] == "1"`:      "request has no field heders",
		`"GET"`:                           "gives string, want bool",
		`unknown == 1`:                    "undeclared reference",
		`request.method + 1 == 2`:         "", // dyn: checked when evaluated
		``:                                "empty",
		strings.Repeat("a", MaxSource+1):  "more than",
		`request.path.startsWith("/v2/")`: "",
		`request.headers[?"x"].orValue("") == "2"`: "",
	} {
		_, err := Compile(src, Match)
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("Compile(%.40q) = %v, want %q", src, err, want)
		}
	}
	if _, err := Compile(`1`, Key); err != nil {
		t.Errorf("Key 1: %v", err)
	}
	if _, err := Compile(`"1"`, Cost); err == nil {
		t.Error(`Cost "1": no error`)
	}
	if _, err := Compile(`[1]`, Key); err == nil {
		t.Error(`Key [1]: no error`)
	}
}

func input(target string, headers ...string) *Input {
	r := httptest.NewRequest("GET", target, nil)
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Add(headers[i], headers[i+1])
	}
	return &Input{Request: r, IP: func() string { return "203.0.113.7" }}
}

// TestEvaluate: what an expression sees, and what fails rather than
// choosing a value.
func TestEvaluate(t *testing.T) {
	v2 := must(t, `request.headers["x-api-version"] == "2"`, Match)
	for _, tc := range []struct {
		in      *Input
		want    bool
		wantErr string
	}{
		{input("/v2only/x", "X-Api-Version", "2"), true, ""},
		{input("/v2only/x", "X-Api-Version", "1"), false, ""},
		{input("/v2only/x"), false, "no such key"},
		{input("/v2only/x", "X-Api-Version", "1", "X-Api-Version", "2"), false, "sent 2 times"},
	} {
		got, err := v2.Bool(tc.in)
		if got != tc.want || tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%v: %v, %v; want %v, %q", tc.in.Request.Header, got, err, tc.want, tc.wantErr)
		}
	}
	key := must(t, `request.ip + "/" + request.query["q"] + "/" + request.cookies["s"] + "/" + request.method + request.host + request.path`, Key)
	in := input("http://Example.com/a?q=1", "Cookie", "s=abc")
	if got, err := key.Value(in); err != nil || got != "203.0.113.7/1/abc/GETExample.com/a" {
		t.Errorf("key = %q, %v", got, err)
	}
	if _, err := key.Value(input("/a?q=%zz", "Cookie", "s=abc")); err == nil || !strings.Contains(err.Error(), "does not parse") {
		t.Errorf("bad query: %v", err)
	}
	if _, err := key.Value(input("/a?q=1&q=2", "Cookie", "s=abc")); err == nil {
		t.Error("a query parameter sent twice gave a value")
	}
	if got, err := must(t, `"x-a" in request.headers`, Match).Bool(input("/", "X-A", "1", "X-A", "2")); !got || err != nil {
		t.Errorf("in with a header sent twice: %v, %v", got, err)
	}
}

func TestClaims(t *testing.T) {
	var c map[string]any
	d := json.NewDecoder(strings.NewReader(`{"plan": "pro", "n": 12345678901234567, "f": 1.5, "roles": ["a", "b"], "o": {"x": 1}}`))
	d.UseNumber()
	d.Decode(&c)
	in := input("/")
	in.Claims = c
	for src, want := range map[string]bool{
		`jwt.plan == "pro"`:          true,
		`jwt.n == 12345678901234567`: true,
		`jwt.f > 1.0`:                true,
		`"b" in jwt.roles`:           true,
		`jwt.o.x == 1`:               true,
	} {
		if got, err := must(t, src, Match).Bool(in); got != want || err != nil {
			t.Errorf("%s = %v, %v", src, got, err)
		}
	}
	if _, err := must(t, `jwt.plan == "pro"`, Match).Bool(input("/")); err == nil {
		t.Error("jwt.plan without claims: no error")
	}
}

// TestCostBound: an expression that would run long stops at MaxCost
// with an error.
func TestCostBound(t *testing.T) {
	l := "[" + strings.TrimSuffix(strings.Repeat("1,", 30), ",") + "]"
	e := must(t, l+".all(a, "+l+".all(b, "+l+".all(c, a + b + c > 0)))", Match)
	if _, err := e.Bool(input("/")); err == nil || !strings.Contains(err.Error(), "cost limit") {
		t.Fatalf("err = %v, want the cost limit", err)
	}
	long := must(t, `request.headers["x"].matches("^(a|aa)*$")`, Match)
	if _, err := long.Bool(input("/", "X", strings.Repeat("a", 100<<10))); err == nil || !strings.Contains(err.Error(), "cost limit") {
		t.Fatalf("100 KB header through a regexp: err = %v, want the cost limit", err)
	}
}

func must(t testing.TB, src string, k Kind) *Expr {
	t.Helper()
	e, err := Compile(src, k)
	if err != nil {
		t.Fatal(err)
	}
	return e
}
