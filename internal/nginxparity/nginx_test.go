package nginxparity

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/memstore"
)

// zone is one limit_req configuration and the sluice limit it maps to:
// nginx's rate=R r/s burst=Q delay=D is LeakyBucket(R/s, Q).WithNoDelay(D),
// and nodelay is delay=Q.
type zone struct {
	path  string // the location
	nginx string // the limit_req parameters after the zone
	limit sluice.Limit
}

var zones = []zone{
	{"/queue", "burst=3", sluice.LeakyBucket(sluice.PerSecond(2), 3)},
	{"/nodelay", "burst=3 nodelay", sluice.LeakyBucket(sluice.PerSecond(2), 3).WithNoDelay(3)},
	{"/partial", "burst=5 delay=2", sluice.LeakyBucket(sluice.PerSecond(2), 5).WithNoDelay(2)},
}

// schedule is when requests are sent, relative to the start: first 5.9
// requests a second for 5s (issue 13's hole 6), then bursts, some into a
// full queue, some after it has drained, and some on the bound.
func schedule() []time.Duration {
	var at []time.Duration
	for i := range 30 {
		at = append(at, time.Duration(i)*10*time.Second/59)
	}
	burst := func(t time.Duration, n int) {
		for range n {
			at = append(at, t)
		}
	}
	burst(5500*time.Millisecond, 8)
	burst(6100*time.Millisecond, 3)
	burst(6600*time.Millisecond, 2)
	burst(9600*time.Millisecond, 7)
	burst(9850*time.Millisecond, 2)
	// one interval apart after the burst: each lands where the excess
	// reaches the bound exactly, give or take the clients' jitter
	for i := range 3 {
		burst(10100*time.Millisecond+time.Duration(i)*500*time.Millisecond, 1)
	}
	return at
}

// record is one request as nginx logged it.
type record struct {
	seq     int
	path    string
	arrival int64  // ms, nginx's $msec when the rewrite phase ran, before limit_req
	status  string // $limit_req_status: PASSED, DELAYED or REJECTED
	code    int
	conn    int64 // $connection: one request per connection
	excess  int64 // nginx's excess, in 1/1000 requests, from its debug log; -1 if unknown
}

// TestNginxLimitReqParity sends the schedule to three nginx limit_req
// zones at once, then replays each zone's requests, at the arrival times
// nginx recorded, into the sluice limit it maps to: every decision must be
// nginx's, and every excess nginx computed must be sluice's debt.
func TestNginxLimitReqParity(t *testing.T) {
	bin := nginxBinary(t)
	t.Parallel()
	dir := t.TempDir()
	var port int
	var stop func()
	for attempt := 1; stop == nil; attempt++ { // the free port may be taken meanwhile
		port = freePort(t)
		var err error
		if stop, err = startNginx(t, bin, dir, writeConf(t, dir, port), port); err != nil && attempt == 3 {
			t.Fatal(err)
		}
	}
	sent := drive(t, port)
	stop()
	recs := readLog(t, filepath.Join(dir, "access.log"), readExcess(t, filepath.Join(dir, "debug.log")))
	for _, z := range zones {
		t.Run(strings.TrimPrefix(z.path, "/"), func(t *testing.T) {
			var rs []record
			for _, r := range recs {
				if r.path == z.path {
					rs = append(rs, r)
				}
			}
			if len(rs) != len(sent) {
				t.Fatalf("nginx logged %d requests to %s, %d were sent", len(rs), z.path, len(sent))
			}
			for _, r := range rs {
				if got := sent[r.seq][z.path]; got != r.code {
					t.Fatalf("request %d to %s: the client got %d, nginx logged %d", r.seq, z.path, got, r.code)
				}
			}
			times := replay(t, z.limit, rs)
			if z.path == "/queue" {
				sustained(t, z.limit, rs, times)
			}
		})
	}
}

// nginxBinary finds nginx: on PATH or in /usr/sbin. Missing, the test
// skips, or fails under CI=true.
func nginxBinary(t *testing.T) string {
	for _, p := range []string{"nginx", "/usr/sbin/nginx"} {
		if bin, err := exec.LookPath(p); err == nil {
			return bin
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("nginx not found: install it (Debian: apt-get install nginx; scripts/test does)")
	}
	t.Skip("nginx not found; scripts/test installs it")
	return ""
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// writeConf writes an nginx configuration with one zone and location per
// entry of zones, each answered by empty_gif (a bare return would answer
// in the rewrite phase, before limit_req runs). $arrival is $msec read in
// the rewrite phase: the same cached time limit_req then reads, where
// $msec at logging time would be after a delay.
func writeConf(t *testing.T, dir string, port int) string {
	var b strings.Builder
	fmt.Fprintf(&b, `worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log notice;
events { worker_connections 512; }
http {
    client_body_temp_path %[1]s/body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
    log_format parity '$arrival $msec $http_x_seq $uri $limit_req_status $status $connection';
    access_log off;
    limit_req_status 429;
`, dir)
	for i := range zones {
		fmt.Fprintf(&b, "    limit_req_zone $host zone=z%d:1m rate=2r/s;\n", i)
	}
	fmt.Fprintf(&b, "    server {\n        listen 127.0.0.1:%d;\n        location = /ready { empty_gif; }\n", port)
	for i, z := range zones {
		fmt.Fprintf(&b, `        location = %s {
            set $arrival $msec;
            limit_req zone=z%d %s;
            access_log %[4]s/access.log parity;
            error_log %[4]s/debug.log debug;
            empty_gif;
        }
`, z.path, i, z.nginx, dir)
	}
	b.WriteString("    }\n}\n")
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return conf
}

// startNginx runs nginx in the foreground and waits until it answers. The
// returned function stops it (SIGQUIT: finish requests, then exit).
func startNginx(t *testing.T, bin, dir, conf string, port int) (func(), error) {
	cmd := exec.Command(bin, "-p", dir, "-c", conf, "-e", filepath.Join(dir, "error.log"), "-g", "daemon off;")
	out, err := os.Create(filepath.Join(dir, "stderr.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cmd.Process.Signal(syscall.SIGQUIT)
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				cmd.Process.Kill()
				<-done
			}
		})
	}
	t.Cleanup(stop)
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/ready", port))
		if err == nil {
			resp.Body.Close()
			return stop, nil
		}
		select {
		case err := <-done:
			logs, _ := os.ReadFile(filepath.Join(dir, "stderr.log"))
			elog, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			return nil, fmt.Errorf("nginx exited: %v\n%s\n%s", err, logs, elog)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("nginx did not answer on port %d within 10s: %v", port, err)
		}
	}
}

// drive sends the schedule to every location at once, each request on its
// own connection, and returns the status each got, by sequence number and
// path. The times need not be kept exactly: the comparison uses the times
// nginx recorded.
func drive(t *testing.T, port int) []map[string]int {
	at := schedule()
	got := make([]map[string]int, len(at))
	for i := range got {
		got[i] = map[string]int{}
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var failed error
	start := time.Now()
	for i, a := range at {
		time.Sleep(time.Until(start.Add(a)))
		for _, z := range zones {
			wg.Go(func() {
				req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d%s", port, z.path), nil)
				req.Header.Set("X-Seq", strconv.Itoa(i))
				resp, err := client.Do(req)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					failed = errors.Join(failed, err)
					return
				}
				resp.Body.Close()
				got[i][z.path] = resp.StatusCode
			})
		}
	}
	wg.Wait()
	if failed != nil {
		t.Fatal(failed)
	}
	return got
}

// readLog parses the access log, taking each request's excess from
// excess (by connection).
func readLog(t *testing.T, path string, excess map[int64]int64) []record {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []record
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 7 {
			t.Fatalf("access log line %q: want 7 fields", sc.Text())
		}
		var r record
		var err1, err2, err3, err4 error
		r.arrival, err1 = strconv.ParseInt(strings.Replace(fs[0], ".", "", 1), 10, 64)
		r.seq, err2 = strconv.Atoi(fs[2])
		r.path, r.status = fs[3], fs[4]
		r.code, err3 = strconv.Atoi(fs[5])
		r.conn, err4 = strconv.ParseInt(fs[6], 10, 64)
		if err := errors.Join(err1, err2, err3, err4); err != nil || len(fs[0]) != 14 {
			t.Fatalf("access log line %q: %v", sc.Text(), err)
		}
		r.excess = -1
		if e, ok := excess[r.conn]; ok {
			r.excess = e
		}
		out = append(out, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// limitReqDebug matches limit_req's debug line: "*<connection>
// limit_req[0]: <rc> <excess/1000>.<excess%1000>".
var limitReqDebug = regexp.MustCompile(`\*(\d+) limit_req\[0\]: -?\d+ (\d+)\.(\d{3})$`)

// readExcess reads the excess limit_req computed for each connection from
// nginx's debug log. An nginx built without --with-debug (Debian's has it)
// writes no such lines: the map is then empty.
func readExcess(t *testing.T, path string) map[int64]int64 {
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	out := map[int64]int64{}
	for _, line := range strings.Split(string(data), "\n") {
		if m := limitReqDebug.FindStringSubmatch(line); m != nil {
			conn, _ := strconv.ParseInt(m[1], 10, 64)
			whole, _ := strconv.ParseInt(m[2], 10, 64)
			frac, _ := strconv.ParseInt(m[3], 10, 64)
			out[conn] = whole*1000 + frac
		}
	}
	return out
}

// severity orders nginx's decisions: within one millisecond the excess only
// grows, so requests nginx decided at the same time went in this order, and
// in the order of their excesses.
var severity = map[string]int{"PASSED": 0, "DELAYED": 1, "REJECTED": 2}

// decision names a sluice decision as $limit_req_status does.
func decision(d sluice.Decision) string {
	switch {
	case !d.Allowed:
		return "REJECTED"
	case d.Delay > 0:
		return "DELAYED"
	}
	return "PASSED"
}

// candidate is a state sluice's bucket may be in after the requests so far,
// and the times (µs) it decided them at.
type candidate struct {
	st    algo.State
	times []int64
}

// replay sorts rs into the order nginx decided them and plays them through
// sluice's leaky_bucket step, requiring nginx's decision for every one and,
// where nginx's debug log gave it, its excess: nginx's excess after a
// request, in 1/1000 requests, is sluice's debt before it (nginx counts the
// requests beyond the one being served, sluice all of them). It returns
// the times (µs) it decided them at.
//
// The times are nginx's recorded milliseconds, read exactly one way or
// another: nginx's limit_req measures time on ngx_current_msec, the
// monotonic clock, while $msec is the wall clock; ngx_time_update reads
// both at once but truncates each to the millisecond on its own, so a
// recorded arrival is either the monotonic reading (shifted by a constant)
// or one millisecond after it. Which one depends on the sub-millisecond
// phase of the two clocks, which no variable logs. At 2r/s a millisecond
// is 2 of the 1000 units of nginx's excess, so it changes a decision only
// when the excess lands within 2 units of a bound (the burst or the delay
// allowance); the excess it changes always. replay therefore keeps every
// state reachable by reading each arrival as t or t-1 ms, and fails only if
// no such reading explains what nginx did. Rates in r/s leave nginx's
// excess arithmetic (rate·ms/1000) exact, so that is the only difference.
func replay(t *testing.T, lim sluice.Limit, rs []record) []int64 {
	slices.SortFunc(rs, func(a, b record) int {
		if a.arrival != b.arrival {
			return int(a.arrival - b.arrival)
		}
		if d := severity[a.status] - severity[b.status]; d != 0 {
			return d
		}
		if a.excess != b.excess { // admitted in one millisecond: 1000 more each
			return int(a.excess - b.excess)
		}
		return a.seq - b.seq
	})
	p, err := algo.Compile(lim)
	if err != nil {
		t.Fatal(err)
	}
	cands := []candidate{{}}
	var shifted []int // requests only the earlier reading explains
	excesses := 0
	for i, r := range rs {
		if _, ok := severity[r.status]; !ok {
			t.Fatalf("request %d: $limit_req_status %q", r.seq, r.status)
		}
		if r.excess >= 0 {
			excesses++
		}
		var next []candidate
		var tried []string
		for _, back := range []int64{0, 1} {
			for _, c := range cands {
				st := c.st
				now := (r.arrival - back) * 1000
				debt := int64(0) // before the request, in units of 1/B requests
				if st.X > now {
					debt = (st.X-now)*p.A - st.Y
				}
				got := decision(algo.Step(&p, &st, now, 1, algo.NoMaxDelay, 0, true))
				tried = append(tried, fmt.Sprintf("at %d ms: %s, excess %.3f", r.arrival-back, got, float64(debt)/float64(p.B)))
				if got != r.status || r.excess >= 0 && debt*1000 != r.excess*p.B ||
					slices.ContainsFunc(next, func(n candidate) bool { return n.st.X == st.X && n.st.Y == st.Y }) {
					continue
				}
				next = append(next, candidate{st, append(slices.Clip(c.times), now)})
			}
			if back == 0 && len(next) == 0 {
				shifted = append(shifted, i)
			}
		}
		if len(next) == 0 {
			t.Fatalf("%s: request %d (seq %d, arrival %d ms): nginx %s, excess %.3f; sluice %s\nbefore it:%s",
				lim, i, r.seq, r.arrival, r.status, float64(r.excess)/1000, strings.Join(tried, "; "), recent(rs[:i]))
		}
		cands = next
	}
	t.Logf("%s: %d requests, every decision nginx's and %d excesses (from its debug log) too; %d agree only with the arrival read 1 ms earlier (monotonic against wall clock): %v",
		lim, len(rs), excesses, len(shifted), shifted)
	return cands[0].times
}

func recent(rs []record) string {
	var b strings.Builder
	for _, r := range rs[max(0, len(rs)-6):] {
		fmt.Fprintf(&b, "\n  seq %d at %d ms: %s, excess %.3f", r.seq, r.arrival, r.status, float64(r.excess)/1000)
	}
	return b.String()
}

// sustained replays, through memstore on a fake clock, the requests of the
// 5.9/s phase at the times replay found, with MaxDelay set to the queue's
// longest delay (the least max_delay a policy now accepts for this limit):
// sluice serves what nginx served (13 of 30 when the schedule is kept).
// With MaxDelay 1s, below it, a request that would wait longer is refused
// uncharged, and admissions go on to the end instead of starving.
func sustained(t *testing.T, lim sluice.Limit, rs []record, times []int64) {
	p, _ := algo.Compile(lim)
	longest := time.Duration(p.LongestDelay()) * time.Microsecond
	for _, bound := range []time.Duration{longest, time.Second} {
		var now int64
		store, err := memstore.New(memstore.Config{Now: func() time.Time { return time.UnixMicro(now) }, SweepInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		nginx, served, last, end := 0, 0, time.Duration(0), time.Duration(0)
		for i, r := range rs {
			now = times[i]
			d, err := store.Take(context.Background(), sluice.Request{Key: "k", Limit: lim, Cost: 1, MaxDelay: bound})
			if err != nil {
				t.Fatal(err)
			}
			if bound == longest && decision(d) != r.status {
				t.Fatalf("memstore, max delay %s: request seq %d at %d ms: %s, nginx %s", bound, r.seq, r.arrival, decision(d), r.status)
			}
			if r.seq >= 30 {
				continue
			}
			end = time.Duration(times[i]-times[0]) * time.Microsecond
			if r.status != "REJECTED" {
				nginx++
			}
			if d.Allowed {
				served++
				last = time.Duration(times[i]-times[0]) * time.Microsecond
			}
		}
		store.Close()
		t.Logf("5.9/s for 5s, max delay %s: nginx served %d of 30, sluice %d, the last arriving at %s of %s", bound, nginx, served, last, end)
		if bound == longest && served != nginx {
			t.Fatalf("max delay %s: sluice served %d of 30, nginx %d", bound, served, nginx)
		}
		if last < end-time.Second { // one is served every 500ms
			t.Fatalf("max delay %s: the last request served arrived at %s, the last sent at %s: the shaper starved", bound, last, end)
		}
	}
}
