// Package hostiletest is sluice's adversarial table for its HTTP
// front-ends: the requests a hostile client writes (cost headers, key
// headers, forwarding headers, hosts, paths, methods, overrides), each
// with the policy it is sent against and how many of them the limits
// allow through.
//
// The gateway and the decision API (cmd/sluice, real processes) and the
// middleware (httplimit, a real server on loopback) run the same table, so
// that an input is tried on every front-end. The standard it holds them to:
// what a client sends ends in a counted decision or a 4xx, never in an
// uncounted admission. Every limit has a long window (a token bucket that
// refills one request an hour), so the counts are exact on a loaded machine.
package hostiletest

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// Burst is the limit of every case's main limit: how many requests one
// client gets, for the whole test (the bucket refills one an hour).
const Burst = 5

// N is how many hostile requests a phase sends, more than twice Burst.
const N = 12

// Field is one header line, its name in the case the client chose.
type Field struct{ Name, Value string }

// Request is an HTTP request as a hostile client writes it: header names
// in any case, repeated, values with any bytes, a path sent as it is.
type Request struct {
	Method string // GET unless set
	Host   string // "localhost" unless set
	Path   string // "/api/x" unless set
	Header []Field
}

func (r Request) method() string { return or(r.Method, "GET") }
func (r Request) host() string   { return or(r.Host, "localhost") }
func (r Request) path() string   { return or(r.Path, "/api/x") }

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// Phase is a run of requests and how many of them may get through. R is
// what a front-end takes: a Request for the HTTP front-ends, a JSON body
// for the decision API's explicit checks, a RateLimitRequest for the RLS.
type Phase[R any] struct {
	What string
	Reqs []R
	// Want is how many get through (reach the upstream or are answered
	// allowed); -1 accepts any number. Every other request must be
	// answered with a 4xx.
	Want int
	// Or4xx also accepts every request of the phase answered with a 4xx.
	Or4xx bool
	// Parallel sends the requests all at once, each on its own
	// goroutine, racing for the limit's last units.
	Parallel bool
	// Pipelined sends them on one connection, each written before the
	// answer to the one before it is read (HTTP/1.1 pipelining), where
	// the front-end's Sender can.
	Pipelined bool
}

// Case is one hostile input: a policy and the phases sent against it, in
// order, by one client.
type Case[R any] struct {
	Name   string
	Policy string
	Phases []Phase[R]
	// Total, when not 0, is how many requests of all phases together get
	// through: what the limit allows, whichever way a phase was answered.
	Total int
	// Hole says why the case fails today, keyed by front-end ("gateway",
	// "api", "httplimit", "grpclimit", "rls") or "*" for all: the issue's
	// hole whose fix, on another branch, it needs, or a finding not yet
	// fixed. The failure message shows it.
	Hole map[string]string
	// NoAPI says why the decision API cannot express the case (repeated
	// header names, forwarding headers the caller resolves), if it cannot.
	NoAPI string
}

// HoleOn returns the hole note of c on a front-end, or "".
func (c Case[R]) HoleOn(front string) string {
	if h := c.Hole[front]; h != "" {
		return h
	}
	return c.Hole["*"]
}

// Pending marks a case whose fix is on another branch (issue hole n).
func Pending(hole int) map[string]string {
	return map[string]string{"*": fmt.Sprintf("hole %d: fixed on another branch", hole)}
}

// Sender sends one request to a front-end and returns the status it was
// answered with, in HTTP's terms: 2xx when the request got through, 4xx
// when it was refused or rejected (a gRPC front-end maps its codes). through reports how many requests got through so far (the
// upstream's count, or the answers that said allowed).
type Sender[R any] struct {
	Send    func(R) (int, error)
	Through func() int64
	// Pipeline, if set, sends the requests of a phase marked Pipelined
	// one after another on one connection, without waiting for answers,
	// and returns their statuses.
	Pipeline func([]R) ([]int, error)
}

// Run sends every phase of c with s and checks the counts. front names the
// front-end in failure messages.
func Run[R any](t *testing.T, front string, c Case[R], s Sender[R]) {
	t.Helper()
	note := ""
	if h := c.HoleOn(front); h != "" {
		note = " [" + h + "]"
	}
	start := s.Through()
	for _, ph := range c.Phases {
		before := s.Through()
		statuses, bad := send(t, front, ph, s)
		got := int(s.Through() - before)
		all4xx := got == 0 && len(statuses) > 0
		for st := range statuses {
			all4xx = all4xx && st >= 400 && st < 500
		}
		ok := bad == 0 && (ph.Want < 0 || got == ph.Want || ph.Or4xx && all4xx)
		if !ok {
			want := fmt.Sprint(ph.Want)
			if ph.Or4xx {
				want += " (or every one a 4xx)"
			}
			t.Errorf("%s: %s: %d of %d got through, want %s; answers %s%s",
				front, ph.What, got, len(ph.Reqs), want, Statuses(statuses), note)
		}
	}
	if got := int(s.Through() - start); c.Total != 0 && got != c.Total {
		t.Errorf("%s: %d requests got through in all, want %d%s", front, got, c.Total, note)
	}
}

// send sends the requests of ph and returns the count of each status and
// of answers that are neither 2xx nor 4xx.
func send[R any](t *testing.T, front string, ph Phase[R], s Sender[R]) (statuses map[int]int, bad int) {
	statuses = map[int]int{}
	if ph.Pipelined && s.Pipeline != nil {
		sts, err := s.Pipeline(ph.Reqs)
		if err != nil {
			t.Errorf("%s: %s: %v", front, ph.What, err)
		}
		for _, st := range sts {
			statuses[st]++
			if st < 200 || st >= 300 && st < 400 || st >= 500 {
				bad++
			}
		}
		return statuses, bad
	}
	var mu sync.Mutex
	one := func(i int, r R) {
		st, err := s.Send(r)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			t.Errorf("%s: %s: request %d: %v", front, ph.What, i, err)
			return
		}
		statuses[st]++
		if st < 200 || st >= 300 && st < 400 || st >= 500 {
			bad++
		}
	}
	var wg sync.WaitGroup
	for i, r := range ph.Reqs {
		if !ph.Parallel {
			one(i, r)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			one(i, r)
		}()
	}
	wg.Wait()
	return statuses, bad
}

// Statuses prints a count of statuses ("200×5 429×7").
func Statuses(m map[int]int) string {
	var keys []int
	for k := range m {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d×%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

// Pipeline writes every request of rs to addr on one connection, all
// before reading any answer, and returns the statuses of the answers.
func Pipeline(addr string, rs []Request) ([]int, error) {
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	var b bytes.Buffer
	for i, r := range rs {
		writeRequest(&b, r, i == len(rs)-1)
	}
	if _, err := conn.Write(b.Bytes()); err != nil {
		return nil, err
	}
	br := bufio.NewReader(conn)
	var sts []int
	for range rs {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return sts, fmt.Errorf("answer %d of %d: %v", len(sts)+1, len(rs), err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		sts = append(sts, resp.StatusCode)
	}
	return sts, nil
}

func writeRequest(b *bytes.Buffer, r Request, last bool) {
	fmt.Fprintf(b, "%s %s HTTP/1.1\r\nHost: %s\r\n", r.method(), r.path(), r.host())
	for _, f := range r.Header {
		b.WriteString(f.Name + ": " + f.Value + "\r\n")
	}
	if last {
		b.WriteString("Connection: close\r\n")
	}
	b.WriteString("\r\n")
}

// Send writes r to addr over a new TCP connection, exactly as it is (no
// client library normalises its path or headers), and returns the status
// of the answer.
func Send(addr string, r Request) (int, error) {
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	var b bytes.Buffer
	writeRequest(&b, r, true)
	if _, err := conn.Write(b.Bytes()); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}
