package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"github.com/sluicehq/sluice/internal/adminclient"
)

const overridesUsage = `Usage:
  sluice overrides set    [flags] LIMIT KEY (--scale N | --unlimited | --limit JSON) [--ttl D] [--reason TEXT]
  sluice overrides list   [flags]
  sluice overrides delete [flags] LIMIT KEY

Runtime overrides change one key's limit while sluice serve runs, on top of
its policy file: a scale (--scale 5: five times the limit), no limit
(--unlimited) or another limit of the same algorithm (--limit
'{"algorithm": "fixed_window", "rate": "100/h"}'), for --ttl or until
deleted. KEY is the key's value as the limit keys it: the header's value of
a header:NAME key, an address of an ip key (in any form), the values of a key
of several parts joined by +. They are kept in the store: every instance on
one Redis applies a change within a second, and after a restart; on the
memory store, in the server's state_dir.

Each asks a running sluice serve, on its admin listener (PUT, GET and DELETE
/admin/overrides). Every change is logged by the server (who, what, ttl,
reason) and counted (sluice_overrides_changes_total).

  sluice overrides set per-tenant acme --scale 5 --ttl 24h --reason "launch week"
  sluice overrides list
  sluice overrides delete per-tenant acme

Exit code: 0 done, 1 the server refused or could not answer, 2 usage.

Flags:
`

// overrideFlags are the flags of sluice overrides set.
type overrideFlags struct {
	scale       *float64
	unlimited   *bool
	limit       *string
	ttl, reason *string
	scaleGiven  bool
}

func overrides(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluice overrides", flag.ContinueOnError)
	af := adminFlags(fs)
	of := overrideFlags{
		scale:     fs.Float64("scale", 0, "set: multiply the limit by `N` (above 0; 0.5 halves it)"),
		unlimited: fs.Bool("unlimited", false, "set: lift the limit for the key"),
		limit:     fs.String("limit", "", "set: the `JSON` of the limit to apply instead, of the same algorithm"),
		ttl:       fs.String("ttl", "", "set: how long the override lasts (`DURATION`, such as 1h; default until deleted)"),
		reason:    fs.String("reason", "", "set: why, for the server's log and the list (at most 500 bytes)"),
	}
	fs.Usage = func() {
		fmt.Fprint(stdout, overridesUsage)
		printFlags(stdout, fs, nil)
	}
	pos, code, done := parseInterleaved(fs, args, stdout, stderr)
	if done {
		return code
	}
	fs.Visit(func(f *flag.Flag) { of.scaleGiven = of.scaleGiven || f.Name == "scale" })
	op, rest := "", []string(nil)
	if len(pos) > 0 {
		op, rest = pos[0], pos[1:]
	}
	if code, ok := overridesArgs(op, rest, stderr); !ok {
		return code
	}
	kc, err := af.client()
	if err != nil {
		fmt.Fprintf(stderr, "sluice overrides: %v\n", err)
		return exitUsage
	}
	var body []byte
	switch op {
	case "set":
		body, err = kc.SetOverride(rest[0], rest[1], of.body())
	case "list":
		body, err = kc.Overrides()
	case "delete":
		body, err = kc.DeleteOverride(rest[0], rest[1])
	}
	if err == nil {
		err = printOverrides(stdout, kc, op, body, *af.asJSON)
	}
	if err != nil {
		fmt.Fprintf(stderr, "sluice overrides %s: %v\n", op, err)
		return exitInvalid
	}
	return exitOK
}

// body is the JSON of the PUT the flags describe: what they give, for the
// server to judge (it answers a clear 400 for none, or two).
func (of overrideFlags) body() []byte {
	m := map[string]any{}
	if of.scaleGiven {
		m["scale"] = *of.scale
	}
	if *of.unlimited {
		m["unlimited"] = true
	}
	if *of.limit != "" {
		m["limit"] = json.RawMessage(*of.limit)
	}
	if *of.ttl != "" {
		m["ttl"] = *of.ttl
	}
	if *of.reason != "" {
		m["reason"] = *of.reason
	}
	b, err := json.Marshal(m)
	if err != nil { // --limit is not JSON: sent as a string, which the server refuses with its reason
		m["limit"] = *of.limit
		b, _ = json.Marshal(m)
	}
	return b
}

// overridesArgs checks the operation and its arguments; ok is false, with
// the exit code, when they cannot be sent.
func overridesArgs(op string, rest []string, stderr io.Writer) (code int, ok bool) {
	switch {
	case op == "":
		fmt.Fprint(stderr, "sluice overrides: name an operation: set, list or delete (sluice overrides --help)\n")
	case op == "list" && len(rest) > 0:
		fmt.Fprintf(stderr, "sluice overrides list: unexpected argument %q (flags only)\n", rest[0])
	case op == "list":
		return 0, true
	case op != "set" && op != "delete":
		near := nearest(op, []string{"set", "list", "delete"})
		fmt.Fprintf(stderr, "sluice overrides: unknown operation %q%s\nRun 'sluice overrides --help' for the operations.\n", op, near)
	case len(rest) != 2:
		fmt.Fprintf(stderr, "sluice overrides %s: want LIMIT KEY, got %d argument(s)\n", op, len(rest))
	default:
		return 0, true
	}
	return exitUsage, false
}

// printOverrides prints the server's answer: as it came with --json,
// else for people.
func printOverrides(w io.Writer, kc *adminclient.Client, op string, body []byte, asJSON bool) error {
	if asJSON {
		_, err := w.Write(body)
		return err
	}
	switch op {
	case "set":
		var o adminclient.OverrideAnswer
		if err := kc.Decode(body, &o); err != nil {
			return err
		}
		fmt.Fprintf(w, "set: limit %s, key %s: %s, %s\n", o.Limit, o.Key, o.What(), o.Until())
	case "delete":
		fmt.Fprintln(w, "deleted: the key is limited as the policy says")
	case "list":
		var l adminclient.OverridesAnswer
		if err := kc.Decode(body, &l); err != nil {
			return err
		}
		l.WriteTable(w)
	}
	return nil
}
