package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/policy"
)

// replayFlags are the flags sluice replay and sluice suggest share: the
// log and how to read it.
type replayFlags struct {
	log, format string
	fields      logFields
	maxKeys     int
}

func (f *replayFlags) define(fs *flag.FlagSet) {
	f.fields = defaultFields
	fs.StringVar(&f.log, "log", "", "the access log to replay (required; - for standard input)")
	fs.StringVar(&f.format, "format", "auto", "the log's format: combined (nginx, Apache), json (one object a line), csv (first line names the columns), or auto (told by the first line)")
	fs.Func("field", "for json and csv: NAME=FIELD, which field holds time, method, path, host, ip, duration (seconds), status (the response's code) or header:NAME; repeat (default: fields named time, method, path, host, ip, duration, status)", f.fields.setField)
	fs.IntVar(&f.maxKeys, "max-keys", 100_000, "most keys held, for the limits' state and for the statistics of each limit: beyond it the least used are forgotten, so memory stays bounded on any log (statistics then approximate; the report says)")
}

// check refuses flags that cannot work, before any file is read.
func (f *replayFlags) check() error {
	if f.log == "" {
		return fmt.Errorf("--log: name the access log to replay")
	}
	if f.maxKeys < 100 {
		return fmt.Errorf("--max-keys %d: want at least 100", f.maxKeys)
	}
	if _, err := openFormat(f.format, nil, f.fields); err != nil && f.format != "auto" {
		return err
	}
	return nil
}

// open opens the log and tells its format.
func (f *replayFlags) open() (io.ReadCloser, logFormat, error) {
	var rc io.ReadCloser = os.Stdin
	if f.log != "-" {
		file, err := os.Open(f.log)
		if err != nil {
			return nil, nil, err
		}
		rc = file
	}
	br := bufio.NewReaderSize(rc, maxLogLine)
	first, _ := br.Peek(maxLogLine)
	if i := strings.IndexByte(string(first), '\n'); i >= 0 {
		first = first[:i]
	}
	format, err := openFormat(f.format, first, f.fields)
	if err != nil {
		rc.Close()
		return nil, nil, err
	}
	return struct {
		io.Reader
		io.Closer
	}{br, rc}, format, nil
}

// replay runs a log through a policy and reports.
func replay(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluice replay", flag.ContinueOnError)
	var rf replayFlags
	rf.define(fs)
	policyFile := fs.String("policy", "", "the policy to replay the log through (required)")
	top := fs.Int("top", 5, "keys to list per limit")
	csvOut := fs.Bool("csv", false, "print one CSV line per limit and key instead of the report")
	svg := fs.String("svg", "", "also write the requests and refusals of each limit over time as an SVG chart to this file")
	width := fs.Int("width", terminalWidth(), "columns of the report's time rows (default: $COLUMNS, else 80)")
	fs.Usage = func() { replayUsage(fs) }
	if code, done := parseFlags(fs, args, false, stdout, stderr); done {
		return code
	}
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, "sluice replay: "+format+"\n", a...)
		return code
	}
	if err := rf.check(); err != nil {
		return fail(exitUsage, "%v", err)
	}
	if *policyFile == "" {
		return fail(exitUsage, "--policy: name the policy to replay the log through")
	}
	if *width < 20 || *width > maxSimColumns || *top < 0 {
		return fail(exitUsage, "--width %d, --top %d: want 20 to %d columns and 0 or more keys", *width, *top, maxSimColumns)
	}
	p, err := policy.Load(*policyFile, policy.Options{})
	if err != nil {
		return fail(exitInvalid, "--policy: %v", each(err, policy.Errors(err)))
	}
	rep, err := replayLog(&rf, p)
	if err != nil {
		return fail(exitInvalid, "%v", err)
	}
	rep.policyFile = *policyFile
	if *svg != "" {
		if err := writeFileWith(*svg, rep.writeSVG); err != nil {
			return fail(exitInvalid, "--svg: %v", err)
		}
	}
	if *csvOut {
		rep.writeCSV(stdout)
	} else {
		rep.writeText(stdout, *top, *width)
	}
	return exitOK
}

func replayUsage(fs *flag.FlagSet) {
	fmt.Fprint(fs.Output(), `Usage: sluice replay --log FILE --policy FILE [flags]

Replays an access log through a policy on a simulated clock (the log's own
times), deciding each request as sluice serve would (the same plan and
decision path, on a memory store), and reports, per rule and limit, how
many requests were refused, when, which keys most often, and each key's
peak (the most requests it sent within the limit's window). It reads
nginx/Apache combined logs, JSON lines and CSV; lines it cannot read are
counted and reported, never fatal. Memory stays bounded on any log
(--max-keys).

  sluice replay --log access.log --policy policy.yaml
  sluice replay --log requests.jsonl --policy policy.yaml --field ip=remote_addr --field header:X-User=user
  sluice replay --log access.csv --policy policy.yaml --csv > keys.csv
  sluice replay --log access.log --policy policy.yaml --svg refusals.svg

sluice suggest reads the same logs and proposes limits.

Flags:
`)
	printFlags(fs.Output(), fs, nil)
}

// replayLog replays the log rf names through p.
func replayLog(rf *replayFlags, p *policy.Policy) (*replayReport, error) {
	rc, format, err := rf.open()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	r, err := newReplayer(p, rf.maxKeys)
	if err != nil {
		return nil, err
	}
	defer r.close()
	r.rep.file = rf.log
	if rf.log == "-" {
		r.rep.file = "standard input"
	}
	if err := readLog(rc, format, &r.rep.bad, r.request); err != nil {
		return nil, fmt.Errorf("reading %s: %v", rf.log, err)
	}
	return r.rep, nil
}

// replayer decides logged requests through a policy, on memstores whose
// clock is the log's time.
type replayer struct {
	pol     *policy.Policy
	now     time.Time
	limiter *sluice.Limiter
	stores  []*memstore.Store
	dec     *decide.Decider
	measure *sluice.Limiter // the same keys under unbounded limits: their peaks
	leases  leaseQueue
	checks  []decide.Check
	res     decide.Result
	rep     *replayReport
}

func newReplayer(p *policy.Policy, maxKeys int) (*replayer, error) {
	r := &replayer{pol: p, rep: newReplayReport(maxKeys)}
	for _, rule := range p.Rules { // every limit reported, in the policy's order
		for _, l := range rule.Limits {
			r.rep.addLimit(rule.Name, l.Name, l.Limit).shadow = rule.Shadow
		}
	}
	clock := func() time.Time { return r.now }
	var limiters [2]*sluice.Limiter
	for i := range limiters {
		s, err := memstore.New(memstore.Config{Now: clock, SweepInterval: -1, MaxKeys: maxKeys})
		if err != nil {
			r.close()
			return nil, err
		}
		r.stores = append(r.stores, s)
		limiters[i] = sluice.New(s)
	}
	r.limiter, r.measure = limiters[0], limiters[1]
	var err error
	r.dec, err = decide.New(r.limiter, decide.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Component: "sluice replay"})
	return r, err
}

func (r *replayer) close() {
	for _, s := range r.stores {
		s.Close()
	}
}

// request decides one logged request as sluice serve would have.
func (r *replayer) request(rec *logRecord) {
	t := rec.time
	if t.Before(r.now) { // logs written at completion are a little out of order
		r.rep.outOfOrder++
		t = r.now
	}
	r.now = t
	r.leases.releaseUntil(r.limiter, t) // a memstore does not fail
	r.rep.arrive(t)
	req, err := httpRequest(rec)
	if err == nil {
		r.checks, err = r.pol.Plan(req, r.checks[:0])
	}
	if err != nil {
		r.rep.invalid(err)
		return
	}
	r.dec.Run(context.Background(), r.checks, &r.res)
	r.rep.outcomes[r.res.Outcome]++
	r.observe(t, rec.failed(), r.res.Enforced, r.res.Each, r.res.Decided, r.res.Outcome)
	r.observe(t, rec.failed(), r.res.Shadow, r.res.ShadowEach, -1, 0)
	if !r.res.Proceed() || rec.duration <= 0 {
		r.res.Release()
		return
	}
	r.leases.holdChecks(r.res.Enforced, r.res.Each, t.Add(r.res.Decision.Delay+rec.duration))
	r.leases.holdChecks(r.res.Shadow, r.res.ShadowEach, t.Add(r.res.Decision.Delay+rec.duration))
}

// observe counts checks and their decisions under each limit: failed
// says the logged response was a failure, decided is the index of the
// enforced check that refused (-1: none, or shadow checks, each refused
// on its own).
func (r *replayer) observe(t time.Time, failed bool, checks []decide.Check, ds []sluice.Decision, decided int, outcome decide.Outcome) {
	for i := range checks {
		c := &checks[i]
		if c.Key == "" || i >= len(ds) {
			continue
		}
		refused := false
		if decided < 0 {
			if ds[i] == (sluice.Decision{}) {
				continue // a shadow check of a request not admitted does not run
			}
			refused = !ds[i].Allowed
		} else {
			refused = outcome == decide.Refused && i == decided
		}
		r.rep.limit(c).observe(t, c.Key, keyEvent{refused: refused, delayed: ds[i].Delay > 0, failed: failed}, r.peak(c))
	}
}

// peak is how much c's key has used of an unbounded limit of the same
// window, counting this request: the most it could be refused under.
func (r *replayer) peak(c *decide.Check) int64 {
	m, ok := measureLimit(c.Limit)
	if !ok {
		return 0
	}
	d, err := r.measure.AllowN(context.Background(), c.Key, m, c.Cost)
	if err != nil {
		return 0
	}
	return m.Count - d.Remaining
}

// measureHuge is the count of the limits that measure peaks: more than
// any log asks of one key in one window.
const measureHuge = 1 << 32

// measureLimit is the limit whose use measures a key's peak under l: a
// fixed window for a fixed window, a sliding window counter of l's period
// for the rest (the period of a bucket's rate); none for concurrency.
func measureLimit(l sluice.Limit) (sluice.Limit, bool) {
	switch {
	case algo.Leases(l.Algorithm) || l.Period <= 0:
		return sluice.Limit{}, false
	case algo.Aligned(l.Algorithm):
		return sluice.FixedWindow(measureHuge, l.Period), true
	}
	return sluice.SlidingWindow(measureHuge, l.Period), true
}

// httpRequest builds the request a logged line stands for, as sluice
// serve's gateway would have received it from the logged client.
func httpRequest(rec *logRecord) (*http.Request, error) {
	u, err := url.ParseRequestURI(rec.target)
	if err != nil {
		return nil, &decide.ClientError{Field: "path", Reason: "not a request target"}
	}
	req := &http.Request{
		Method: rec.method, URL: u, RequestURI: rec.target, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Host: rec.host, Header: http.Header{}, RemoteAddr: net.JoinHostPort(rec.ip, "40000"),
	}
	if req.Host == "" {
		req.Host = "localhost"
	}
	for _, h := range rec.header {
		req.Header.Add(h[0], h[1])
	}
	return req.WithContext(context.Background()), nil
}

// holdChecks holds the concurrency leases of checks admitted with ds
// until until.
func (q *leaseQueue) holdChecks(checks []decide.Check, ds []sluice.Decision, until time.Time) {
	reqs := make([]sluice.Request, len(checks))
	for i, c := range checks {
		reqs[i] = sluice.Request{Key: c.Key, Limit: c.Limit}
	}
	q.hold(reqs, ds[:len(reqs)], until)
}
