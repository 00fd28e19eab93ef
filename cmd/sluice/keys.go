package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/internal/adminclient"
)

const keysUsage = `Usage:
  sluice keys list    [flags]                      the policy's limits (rule, limit, key parts) and the keys refused most
  sluice keys bans    [flags]                      the keys banned now (a limit's ban:), by any instance on the store
  sluice keys inspect [flags] RULE LIMIT VALUE...  one key's state under a limit, charging nothing
  sluice keys reset   [flags] RULE LIMIT VALUE...  forget one key's state: its usage starts afresh, its ban is lifted

Each asks a running sluice serve, on its admin listener (GET /status.json,
GET /admin/keys, POST /admin/keys/reset, GET /admin/bans). VALUE is one value per part of the
limit's key, in order, as the request carries it (an address, a header's
value); * for a global limit. 'sluice keys list' shows each limit's parts.
A VALUE may also be a mask the server showed (key#3f09a1c2d4e5, alone or as
shown: ip=key#3f09a1c2d4e5), copied from the list, the status page or a log
line: it names the value it masks, which stays unwritten. The keys it lists
are masked (key#...) unless the server shows them in clear:
sluice serve --show-keys (show_keys: true, SLUICE_SHOW_KEYS=true).

  sluice keys inspect api per-user ann
  sluice keys inspect api per-user key#3f09a1c2d4e5
  sluice keys reset --token-file /etc/sluice/admin-token api per-user ann

A reset is logged by the server (rule, limit, never the values). On Redis,
other instances may answer a refusal of the key from their near cache until
its Retry-After. Exit code: 0 done, 1 the server refused or could not answer,
2 usage.

Flags:
`

func keys(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluice keys", flag.ContinueOnError)
	af := adminFlags(fs)
	asJSON := af.asJSON
	fs.Usage = func() {
		fmt.Fprint(stdout, keysUsage)
		printFlags(stdout, fs, nil)
	}
	pos, code, done := parseInterleaved(fs, args, stdout, stderr)
	if done {
		return code
	}
	op, rest := "", []string(nil)
	if len(pos) > 0 {
		op, rest = pos[0], pos[1:]
	}
	if code, ok := keysArgs(op, rest, stderr); !ok {
		return code
	}
	kc, err := af.client()
	if err != nil {
		fmt.Fprintf(stderr, "sluice keys: %v\n", err)
		return exitUsage
	}
	var body []byte
	switch op {
	case "list":
		body, err = kc.Status()
	case "bans":
		body, err = kc.Bans()
	case "inspect":
		body, err = kc.Key("GET", "/admin/keys", rest)
	case "reset":
		body, err = kc.Key("POST", "/admin/keys/reset", rest)
	}
	if err == nil {
		err = printKeys(stdout, kc, op, body, *asJSON)
	}
	if err != nil {
		fmt.Fprintf(stderr, "sluice keys %s: %v\n", op, err)
		return exitInvalid
	}
	return exitOK
}

// adminArgs are the flags of the commands that ask a running server's
// admin listener (sluice keys, sluice overrides).
type adminArgs struct {
	admin, tokenFile *string
	tc               adminclient.TLSFiles
	timeout          *time.Duration
	asJSON           *bool
}

// adminFlags defines the flags of a command that asks the admin listener.
func adminFlags(fs *flag.FlagSet) *adminArgs {
	a := &adminArgs{}
	a.admin = fs.String("admin", envOr("SLUICE_ADMIN", "127.0.0.1:8082"), "the admin listener: `ADDR` as HOST:PORT, or https://HOST:PORT when it serves TLS (env SLUICE_ADMIN, as sluice serve reads it)")
	a.tokenFile = fs.String("token-file", os.Getenv("SLUICE_ADMIN_TOKEN_FILE"), "a `FILE` holding the admin token (its first line that is not blank or a # comment; sluice serve's auth.tokens_file will do); env SLUICE_ADMIN_TOKEN_FILE, or SLUICE_ADMIN_TOKEN for the token itself")
	fs.StringVar(&a.tc.CA, "ca-file", "", "a `FILE` of PEM certificates that sign the admin listener's, for https:// (default: the system's)")
	fs.StringVar(&a.tc.Cert, "cert-file", "", "a client certificate (PEM `FILE`), for an admin listener that asks for one (tls.client_auth)")
	fs.StringVar(&a.tc.Key, "key-file", "", "the client certificate's private key (PEM `FILE`)")
	a.timeout = fs.Duration("timeout", 10*time.Second, "how long to wait for the server")
	a.asJSON = fs.Bool("json", false, "print the server's JSON answer as it is")
	return a
}

// client is the client of the admin listener the flags name.
func (a *adminArgs) client() (*adminclient.Client, error) {
	return adminclient.New(*a.admin, *a.tokenFile, a.tc, *a.timeout)
}

// parseInterleaved parses fs's flags wherever they are among args (sluice
// keys inspect --json api per-user ann) and returns the other arguments:
// after "--", every argument is one of them (a value that starts with -).
func parseInterleaved(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (pos []string, code int, done bool) {
	for len(args) > 0 {
		if code, done := parseFlags(fs, args, true, stdout, stderr); done {
			return nil, code, true
		}
		rest := fs.Args()
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), 0, false
		}
		if len(rest) == 0 {
			break
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
	return pos, 0, false
}

// keysArgs checks the operation and its arguments; ok is false, with the
// exit code, when they cannot be sent.
func keysArgs(op string, rest []string, stderr io.Writer) (code int, ok bool) {
	switch {
	case op == "":
		fmt.Fprint(stderr, "sluice keys: name an operation: list, bans, inspect or reset (sluice keys --help)\n")
	case (op == "list" || op == "bans") && len(rest) > 0:
		fmt.Fprintf(stderr, "sluice keys %s: unexpected argument %q (flags only)\n", op, rest[0])
	case op == "list" || op == "bans":
		return 0, true
	case op != "inspect" && op != "reset":
		near := nearest(op, []string{"list", "bans", "inspect", "reset"})
		fmt.Fprintf(stderr, "sluice keys: unknown operation %q%s\nRun 'sluice keys --help' for the operations.\n", op, near)
	case len(rest) < 3:
		fmt.Fprintf(stderr, "sluice keys %s: want RULE LIMIT VALUE... (one value per part of the limit's key; 'sluice keys list' shows them), got %d argument(s)\n", op, len(rest))
	default:
		return 0, true
	}
	return exitUsage, false
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// printKeys prints the server's answer: as it came with --json, else
// read and printed for people.
func printKeys(w io.Writer, kc *adminclient.Client, op string, body []byte, asJSON bool) error {
	if asJSON {
		_, err := w.Write(body)
		return err
	}
	if op == "bans" {
		var ba adminclient.BansAnswer
		if err := kc.Decode(body, &ba); err != nil {
			return err
		}
		printBans(w, ba)
		return nil
	}
	if op == "list" {
		var st adminclient.StatusAnswer
		if err := kc.Decode(body, &st); err != nil {
			return err
		}
		printList(w, st)
		return nil
	}
	var ka adminclient.KeyAnswer
	if err := kc.Decode(body, &ka); err != nil {
		return err
	}
	printKey(w, ka)
	return nil
}

// printKey prints the state of one key.
func printKey(w io.Writer, ka adminclient.KeyAnswer) {
	if ka.Reset {
		fmt.Fprintln(w, "reset: the key's usage starts afresh")
	}
	fmt.Fprintf(w, "rule %s, limit %s, key %s: %s\n", ka.Rule, ka.Limit, strings.Join(ka.Values, " "), ka.Spec)
	now := "admitted"
	if !ka.Allowed {
		now = "refused, retry after " + msDuration(ka.RetryAfterMs)
	}
	fmt.Fprintf(w, "  remaining %d; a request now would be %s; full again in %s\n", ka.Remaining, now, msDuration(ka.ResetAfterMs))
	if ka.BannedForMs > 0 {
		fmt.Fprintf(w, "  banned for %s more (the limit's ban: %s); 'sluice keys reset' lifts it\n", msDuration(ka.BannedForMs), ka.Ban)
	}
	if ka.Degraded {
		fmt.Fprintln(w, "  (degraded: the store did not answer; this is the local fallback's state)")
	}
}

func msDuration(ms int64) string { return (time.Duration(ms) * time.Millisecond).String() }

// printList prints the policy's limits and the keys refused most.
func printList(w io.Writer, st adminclient.StatusAnswer) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "RULE\tLIMIT\tKEY (one VALUE per part)\tLIMIT SPEC\n")
	for _, r := range st.Rules {
		for _, l := range r.Limits {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Name, l.Name, l.Key, l.Algorithm)
		}
	}
	tw.Flush()
	if len(st.Rules) == 0 {
		fmt.Fprintf(w, "(the policy %s has no rules)\n", st.Policy)
	}
	if len(st.HeavyKeys) > 0 {
		fmt.Fprintf(w, "\nKeys refused most:\n")
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, h := range st.HeavyKeys {
			fmt.Fprintf(tw, "  %s\t%s\t%d\n", h.Limit, h.Key, h.Count)
		}
		tw.Flush()
		if !st.ShowKeys {
			fmt.Fprint(w, "  (keys masked; to see them in clear, run sluice serve with --show-keys,\n  show_keys: true in its config, or SLUICE_SHOW_KEYS=true)\n")
		}
	}
}

// printBans prints the keys banned now, with what sluice keys reset
// takes to lift each ban.
func printBans(w io.Writer, ba adminclient.BansAnswer) {
	if len(ba.Bans) == 0 {
		fmt.Fprintln(w, "no key is banned")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "RULE\tLIMIT\tVALUES\tBANNED FOR\n")
	for _, b := range ba.Bans {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", b.Rule, b.Limit, strings.Join(b.Values, " "), msDuration(b.BannedForMs))
	}
	tw.Flush()
	fmt.Fprintln(w, "('sluice keys reset RULE LIMIT VALUES...' lifts a ban)")
}
