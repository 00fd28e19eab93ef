package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/sluicehq/sluice/internal/accesslog"
	rp "github.com/sluicehq/sluice/internal/replay"
	sim "github.com/sluicehq/sluice/internal/simulate"
	"github.com/sluicehq/sluice/internal/yamlload"
	"github.com/sluicehq/sluice/policy"
)

// defineInput defines the flags sluice replay and sluice suggest share:
// the log and how to read it.
func defineInput(fs *flag.FlagSet, f *rp.Input) {
	f.Fields = accesslog.DefaultFields
	fs.StringVar(&f.Log, "log", "", "the access log to replay (required; - for standard input)")
	fs.StringVar(&f.Format, "format", "auto", "the log's format: combined (nginx, Apache), json (one object a line), csv (first line names the columns), or auto (told by the first line)")
	fs.Func("field", "for json and csv: NAME=FIELD, which field holds time, method, path, host, ip, duration (seconds), status (the response's code) or header:NAME; repeat (default: fields named time, method, path, host, ip, duration, status)", f.Fields.Set)
	fs.IntVar(&f.MaxKeys, "max-keys", 100_000, "most keys held, for the limits' state and for the statistics of each limit: beyond it the least used are forgotten, so memory stays bounded on any log (statistics then approximate; the report says)")
}

// replay runs a log through a policy and reports.
func replay(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluice replay", flag.ContinueOnError)
	var rf rp.Input
	defineInput(fs, &rf)
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
	if err := rf.Check(); err != nil {
		return fail(exitUsage, "%v", err)
	}
	if *policyFile == "" {
		return fail(exitUsage, "--policy: name the policy to replay the log through")
	}
	if *width < 20 || *width > sim.MaxColumns || *top < 0 {
		return fail(exitUsage, "--width %d, --top %d: want 20 to %d columns and 0 or more keys", *width, *top, sim.MaxColumns)
	}
	p, err := policy.Load(*policyFile, policy.Options{})
	if err != nil {
		return fail(exitInvalid, "--policy: %v", yamlload.Join(err, policy.Errors(err)))
	}
	rep, err := rp.Run(&rf, p)
	if err != nil {
		return fail(exitInvalid, "%v", err)
	}
	rep.PolicyFile = *policyFile
	if *svg != "" {
		if err := writeFileWith(*svg, rep.WriteSVG); err != nil {
			return fail(exitInvalid, "--svg: %v", err)
		}
	}
	if *csvOut {
		rep.WriteCSV(stdout)
	} else {
		rep.WriteText(stdout, *top, *width)
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
