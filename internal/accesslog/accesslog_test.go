package accesslog

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/decide"
)

// TestFormats: one request written in each format reads as the same
// record; the combined format gives Referer and User-Agent as headers,
// the others the fields --field names (header names as Set lowers them).
func TestFormats(t *testing.T) {
	at := time.Date(2026, 3, 2, 10, 0, 5, 0, time.UTC)
	fields := DefaultFields
	if err := fields.Set("ip=remote_addr"); err != nil {
		t.Fatal(err)
	}
	if err := fields.Set("header:X-User=user"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		format, log string
		header      [][2]string
	}{
		{"combined", `203.0.113.7 - - [02/Mar/2026:10:00:05 +0000] "POST /login?x=1 HTTP/1.1" 401 12 "https://a.example/" "curl/8.5"` + "\n",
			[][2]string{{"Referer", "https://a.example/"}, {"User-Agent", "curl/8.5"}}},
		{"json", `{"time": "2026-03-02T10:00:05Z", "method": "POST", "path": "/login?x=1", "remote_addr": "203.0.113.7", "status": 401, "user": "ann"}` + "\n",
			[][2]string{{"x-user", "ann"}}},
		{"csv", "time,method,path,remote_addr,status,user\n1772445605,POST,/login?x=1,203.0.113.7,401,ann\n",
			[][2]string{{"x-user", "ann"}}},
	} {
		for _, name := range []string{c.format, "auto"} {
			first, _, _ := strings.Cut(c.log, "\n")
			f, err := OpenFormat(name, []byte(first), fields)
			if err != nil {
				t.Fatalf("%s as %s: %v", c.format, name, err)
			}
			var got []Record
			var bad Malformed
			if err := Read(strings.NewReader(c.log), f, &bad, func(r *Record) {
				r.Header = append([][2]string(nil), r.Header...)
				got = append(got, *r)
			}); err != nil || bad.Total != 0 || len(got) != 1 {
				t.Fatalf("%s as %s: %v, %d unreadable, %d records", c.format, name, err, bad.Total, len(got))
			}
			want := Record{Time: at, Method: "POST", Target: "/login?x=1", IP: "203.0.113.7", Header: c.header, Status: 401}
			if r := got[0]; !r.Time.Equal(want.Time) || fmt.Sprint(r.Header) != fmt.Sprint(want.Header) ||
				r.Method != want.Method || r.Target != want.Target || r.IP != want.IP || r.Status != want.Status || !r.Failed() {
				t.Errorf("%s as %s: %+v, want %+v", c.format, name, r, want)
			}
		}
	}
}

// TestParseLogTime: every layout logs write, Unix seconds and
// milliseconds with fractions; anything else is refused with the layouts
// it wants.
func TestParseLogTime(t *testing.T) {
	want := time.Date(2026, 3, 2, 10, 0, 5, 500_000_000, time.UTC)
	for _, s := range []string{"2026-03-02T10:00:05.5Z", "2026-03-02T11:00:05.5+01:00", "2026-03-02 10:00:05.5", "2026-03-02T10:00:05.5", "1772445605.5", "1772445605500"} {
		if got, err := parseLogTime(s); err != nil || !got.Equal(want) {
			t.Errorf("%q: %v, %v; want %v", s, got, err, want)
		}
	}
	if got, err := parseLogTime("02/Mar/2026:10:00:05 +0000"); err != nil || !got.Equal(want.Truncate(time.Second)) {
		t.Errorf("combined: %v, %v", got, err)
	}
	for _, s := range []string{"yesterday", "-1", "1e15", "NaN"} {
		if _, err := parseLogTime(s); err == nil || !strings.Contains(err.Error(), "want RFC 3339") {
			t.Errorf("%q: %v, want an error naming the layouts", s, err)
		}
	}
}

// TestMalformedBounded: a line longer than MaxLine is counted and
// skipped, the next one read; at most 20 reasons are kept, the rest
// counted as "other reasons", with the first three line numbers of each.
func TestMalformedBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("x" + strings.Repeat("a", MaxLine+10) + "\n")
	for i := range 30 {
		fmt.Fprintf(&b, `{"time": "t%d", "path": "/", "ip": "10.0.0.1"}`+"\n", i)
	}
	b.WriteString(`{"time": 1772445605, "path": "/", "ip": "10.0.0.1"}` + "\n")
	var bad Malformed
	n := 0
	if err := Read(strings.NewReader(b.String()), jsonFormat{DefaultFields}, &bad, func(*Record) { n++ }); err != nil {
		t.Fatal(err)
	}
	if n != 1 || bad.Total != 31 || len(bad.Reasons) != 21 || len(bad.Order) != 21 {
		t.Fatalf("%d read, %d unreadable, %d reasons", n, bad.Total, len(bad.Reasons))
	}
	if r := bad.Reasons["line longer than 64 KiB"]; r == nil || r.Count != 1 || r.Lines[0] != 1 {
		t.Errorf("long line: %+v", r)
	}
	if r := bad.Reasons["other reasons"]; r == nil || r.Count != 11 || len(r.Lines) != 3 || r.Lines[0] != 21 {
		t.Errorf("other reasons: %+v", r)
	}
}

// TestFieldsAndFormatErrors: a --field or --format that cannot work is
// refused with what to write instead.
func TestFieldsAndFormatErrors(t *testing.T) {
	var f Fields
	for s, want := range map[string]string{
		"colour=x": `"colour=x": NAME is time, method, path, host, ip, duration, status or header:NAME`,
		"ip":       `"ip": want NAME=FIELD`,
		"header:=": `"header:=": want NAME=FIELD`,
	} {
		if err := f.Set(s); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("Set(%q): %v, want %q", s, err, want)
		}
	}
	if _, err := OpenFormat("xml", nil, DefaultFields); err == nil || err.Error() != `--format "xml": want auto, combined, json or csv` {
		t.Errorf("xml: %v", err)
	}
}

// TestOpen: a file's format is told by its first line; a missing file is
// an error.
func TestOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "access.csv")
	os.WriteFile(path, []byte("time,path,ip\n1772445605,/x,10.0.0.1\n"), 0o644)
	rc, f, err := Open(path, "auto", DefaultFields)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, ok := f.(*csvFormat); !ok {
		t.Errorf("format %T, want CSV", f)
	}
	if b, _ := io.ReadAll(rc); !strings.HasPrefix(string(b), "time,path,ip\n") {
		t.Errorf("the first line was consumed: %q", b)
	}
	if _, _, err := Open(filepath.Join(t.TempDir(), "missing"), "auto", DefaultFields); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

// TestRequest: a record becomes the request the gateway would have
// received: the logged client as its remote address, localhost when no
// host was logged; a target that is not one is the client's error.
func TestRequest(t *testing.T) {
	rec := Record{Method: "GET", Target: "/a?b=1", IP: "2001:db8::1", Header: [][2]string{{"X-User", "ann"}}}
	req, err := rec.Request()
	if err != nil || req.RemoteAddr != "[2001:db8::1]:40000" || req.Host != "localhost" || req.URL.RawQuery != "b=1" || req.Header.Get("X-User") != "ann" {
		t.Fatalf("%+v, %v", req, err)
	}
	rec.Target = "a b"
	if _, err := rec.Request(); err == nil {
		t.Fatal("a bad target made a request")
	} else if ce, ok := decide.AsClientError(err); !ok || ce.Field != "path" {
		t.Errorf("%v: not the client's error on path", err)
	}
}

// FuzzAccessLog: no line makes a parser panic, and a line read gives a
// request with a time, a target and an IP address.
func FuzzAccessLog(f *testing.F) {
	for _, s := range []string{
		`203.0.113.7 - - [01/Jan/2026:12:00:00 +0000] "GET /a?b=1 HTTP/1.1" 200 512 "-" "curl/8.5"`,
		`::1 - "a b" [01/Jan/2026:12:00:00 +0000] "GET / HTTP/1.1" 200 - "x\"y" "z"`,
		`{"time": 1767268800.5, "method": "GET", "path": "/", "ip": "10.0.0.1", "duration": "0.2"}`,
		`{"time": "2026-01-01T12:00:00Z", "path": "/x", "ip": "::1", "user": 7}`,
		`2026-01-01 12:00:00,GET,/x,10.0.0.1,alice`, `"a,b",1e308,/,::ffff:1.2.3.4`, `{}`, `[]`, `"`,
	} {
		f.Add(s)
	}
	fields := DefaultFields
	fields.Set("header:X-User=user")
	fields.Set("time=1")
	fields.Set("method=2")
	fields.Set("path=3")
	fields.Set("ip=4")
	f.Fuzz(func(t *testing.T, line string) {
		for _, format := range []Format{combinedFormat{}, jsonFormat{DefaultFields}, &csvFormat{fields: fields, columns: map[string]int{}}} {
			var bad Malformed
			Read(strings.NewReader(line), format, &bad, func(r *Record) {
				if r.Time.IsZero() && !strings.Contains(line, "0001") || r.Target == "" || checkIP(r.IP) != nil || r.Duration < 0 {
					t.Fatalf("%T read %q as %+v", format, line, *r)
				}
				if req, err := r.Request(); err == nil && req.RemoteAddr == "" {
					t.Fatalf("no remote address for %q", line)
				}
			})
		}
	})
}
