package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	sim "github.com/sluicehq/sluice/internal/simulate"
)

func simulate(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluice simulate", flag.ContinueOnError)
	var f sim.Options
	fs.StringVar(&f.Traffic, "traffic", sim.DefaultTraffic, "the requests that arrive: phases separated by commas, each N (N at once), RATE for DURATION (evenly spaced) or pause DURATION")
	fs.StringVar(&f.Rate, "rate", "10/s", "the rate every algorithm of the default set allows (100/s, 10/m, 3/250ms)")
	fs.Int64Var(&f.Burst, "burst", 0, "the burst of the buckets, the queue of leaky_bucket (default: the rate's count)")
	fs.StringVar(&f.Warmup, "warmup", "2s", "warm_up's warm-up period")
	fs.StringVar(&f.Slot, "slot", "", "the time each column stands for (default: the shortest of 1ms, 2ms, 5ms, 10ms, ... 1h, 1d whose columns fit --width)")
	fs.IntVar(&f.Width, "width", terminalWidth(), "columns of the drawing (default: $COLUMNS, else 80)")
	fs.StringVar(&f.Hold, "hold", "500ms", "how long each admitted request stays in flight, for concurrency limits")
	fs.BoolVar(&f.CSV, "csv", false, "print a table of admissions per slot (CSV) instead of the drawing")
	fs.StringVar(&f.SVG, "svg", "", "also write the drawing as an SVG chart to this file")
	fs.DurationVar(&f.MaxDelay, "max-delay", time.Second, "the longest shaping delay the server waits (sluice serve's max_delay): a leaky_bucket whose queue cannot be served within it is refused by sluice check, so it is not drawn")
	fs.StringVar(&f.Policy, "policy", "", "draw the limits of this policy file: each limit of each rule, each override, and each rule as a whole (all its limits at once, as the gateway checks them)")
	fs.Func("limit", "a limit to draw, written as in a policy file, e.g. '{algorithm: gcra, rate: 100/s, burst: 20}'; repeat to compare several (replaces the default set)", func(s string) error {
		f.Limits = append(f.Limits, s)
		return nil
	})
	fs.Usage = func() { simulateUsage(fs) }
	if code, done := parseFlags(fs, args, false, stdout, stderr); done {
		return code
	}
	s, err := f.Build()
	for _, n := range f.Notes {
		fmt.Fprintf(stderr, "sluice simulate: %s\n", n)
	}
	if err != nil {
		fmt.Fprintf(stderr, "sluice simulate: %v\n", err)
		return exitUsage
	}
	if f.SVG != "" {
		if err := writeFileWith(f.SVG, s.WriteSVG); err != nil {
			fmt.Fprintf(stderr, "sluice simulate: --svg: %v\n", err)
			return exitInvalid
		}
	}
	if f.CSV {
		s.WriteCSV(stdout)
	} else {
		s.WriteDrawing(stdout)
	}
	return exitOK
}

func simulateUsage(fs *flag.FlagSet) {
	fmt.Fprint(fs.Output(), `Usage: sluice simulate [flags]

Draws how each algorithm treats a traffic pattern, on a simulated clock: it
finishes at once and prints the same picture every time. Each limit is a
row, each column a slot of time, each glyph how many of that slot's requests
were admitted: '.' none, 1-9 that many, '+' ten or more (--csv prints the
exact counts). By default every rate algorithm at the same rate; --limit and
--policy draw your own (a policy's limits as if one client, on one key per
limit, sent all the traffic; each admitted request holds a concurrency
limit's lease for --hold). A leaky_bucket whose queue the server could not
serve within --max-delay (its max_delay) is not drawn, as sluice check
refuses it.

  sluice simulate
  sluice simulate --traffic '100, 20/s for 5s' --rate 10/s --burst 50
  sluice simulate --limit '{algorithm: sliding_window, limit: 100, window: 1m}' \
                  --limit '{algorithm: gcra, rate: 100/m, burst: 20}' \
                  --traffic '300/m for 3m'
  sluice simulate --policy policy.yaml --traffic '50, 5/s for 10s' --svg sim.svg

Flags:
`)
	printFlags(fs.Output(), fs, nil)
}

// terminalWidth is $COLUMNS, or 80.
func terminalWidth() int {
	if n, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && n > 0 {
		return n
	}
	return 80
}

// writeFileWith writes what write writes to path.
func writeFileWith(path string, write func(io.Writer)) error {
	var b bytes.Buffer
	write(&b)
	return os.WriteFile(path, b.Bytes(), 0o644)
}
