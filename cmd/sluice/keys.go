package main

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
)

const keysUsage = `Usage:
  sluice keys list    [flags]                      the policy's limits (rule, limit, key parts) and the keys refused most
  sluice keys inspect [flags] RULE LIMIT VALUE...  one key's state under a limit, charging nothing
  sluice keys reset   [flags] RULE LIMIT VALUE...  forget one key's state: its usage starts afresh

Each asks a running sluice serve, on its admin listener (GET /status.json,
GET /admin/keys, POST /admin/keys/reset). VALUE is one value per part of the
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

// keysClient asks one sluice serve's admin listener about keys.
type keysClient struct {
	base   *url.URL // scheme and host of the admin listener
	token  string   // bearer token; "" sends none
	json   bool     // print the server's JSON as it is
	client *http.Client
}

func keys(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluice keys", flag.ContinueOnError)
	admin := fs.String("admin", envOr("SLUICE_ADMIN", "127.0.0.1:8082"), "the admin listener: `ADDR` as HOST:PORT, or https://HOST:PORT when it serves TLS (env SLUICE_ADMIN, as sluice serve reads it)")
	tokenFile := fs.String("token-file", os.Getenv("SLUICE_ADMIN_TOKEN_FILE"), "a `FILE` holding the admin token (its first line that is not blank or a # comment; sluice serve's auth.tokens_file will do); env SLUICE_ADMIN_TOKEN_FILE, or SLUICE_ADMIN_TOKEN for the token itself")
	var tc tlsFiles
	fs.StringVar(&tc.ca, "ca-file", "", "a `FILE` of PEM certificates that sign the admin listener's, for https:// (default: the system's)")
	fs.StringVar(&tc.cert, "cert-file", "", "a client certificate (PEM `FILE`), for an admin listener that asks for one (tls.client_auth)")
	fs.StringVar(&tc.key, "key-file", "", "the client certificate's private key (PEM `FILE`)")
	timeout := fs.Duration("timeout", 10*time.Second, "how long to wait for the server")
	asJSON := fs.Bool("json", false, "print the server's JSON answer as it is")
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
	kc, err := newKeysClient(*admin, *tokenFile, tc, *timeout)
	if err != nil {
		fmt.Fprintf(stderr, "sluice keys: %v\n", err)
		return exitUsage
	}
	kc.json = *asJSON
	switch op {
	case "list":
		err = kc.list(stdout)
	case "inspect":
		err = kc.key(stdout, "GET", "/admin/keys", rest)
	case "reset":
		err = kc.key(stdout, "POST", "/admin/keys/reset", rest)
	}
	if err != nil {
		fmt.Fprintf(stderr, "sluice keys %s: %v\n", op, err)
		return exitInvalid
	}
	return exitOK
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
		fmt.Fprint(stderr, "sluice keys: name an operation: list, inspect or reset (sluice keys --help)\n")
	case op == "list" && len(rest) > 0:
		fmt.Fprintf(stderr, "sluice keys list: unexpected argument %q (flags only)\n", rest[0])
	case op == "list":
		return 0, true
	case op != "inspect" && op != "reset":
		near := nearest(op, []string{"list", "inspect", "reset"})
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

// tlsFiles are the files of --ca-file, --cert-file and --key-file.
type tlsFiles struct{ ca, cert, key string }

// config returns the TLS client configuration of the files.
func (tf tlsFiles) config() (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if tf.ca != "" {
		pem, err := os.ReadFile(tf.ca)
		if err != nil {
			return nil, fmt.Errorf("--ca-file: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--ca-file %s: no PEM certificate in it", tf.ca)
		}
	}
	if (tf.cert == "") != (tf.key == "") {
		return nil, errors.New("--cert-file and --key-file go together: give both or neither")
	}
	if tf.cert != "" {
		pair, err := tls.LoadX509KeyPair(tf.cert, tf.key)
		if err != nil {
			return nil, fmt.Errorf("--cert-file, --key-file: %w", err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return tc, nil
}

// newKeysClient returns a client of the admin listener at addr.
func newKeysClient(addr, tokenFile string, tf tlsFiles, timeout time.Duration) (*keysClient, error) {
	base, err := adminURL(addr)
	if err != nil {
		return nil, err
	}
	kc := &keysClient{base: base, token: strings.TrimSpace(os.Getenv("SLUICE_ADMIN_TOKEN"))}
	if tokenFile != "" {
		if kc.token, err = readToken(tokenFile); err != nil {
			return nil, err
		}
	}
	tc, err := tf.config()
	if err != nil {
		return nil, err
	}
	kc.client = &http.Client{Timeout: timeout, Transport: &http.Transport{Proxy: nil, TLSClientConfig: tc}}
	return kc, nil
}

// adminURL reads --admin: HOST:PORT (http), or a URL with http or https.
// A listen address without a host (":8082", "0.0.0.0:8082") is asked on
// loopback.
func adminURL(addr string) (*url.URL, error) {
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("--admin %q: want HOST:PORT or https://HOST:PORT, such as 127.0.0.1:8082", strings.TrimPrefix(addr, "http://"))
	}
	if host, port, err := net.SplitHostPort(u.Host); err == nil && (host == "" || host == "0.0.0.0" || host == "::") {
		u.Host = net.JoinHostPort("127.0.0.1", port)
	}
	return &url.URL{Scheme: u.Scheme, Host: u.Host}, nil
}

// readToken reads the first token of path: its first line that is
// neither blank nor a # comment, trimmed.
func readToken(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, 1<<20))
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" && !strings.HasPrefix(line, "#") {
			return line, nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("--token-file %s: %w", path, err)
	}
	return "", fmt.Errorf("--token-file %s: no token in it (one a line; # starts a comment)", path)
}

// keyAnswer is the server's answer about one key (server's keyState).
type keyAnswer struct {
	Rule         string   `json:"rule"`
	Limit        string   `json:"limit"`
	Values       []string `json:"values"`
	Spec         string   `json:"spec"`
	Remaining    int64    `json:"remaining"`
	Allowed      bool     `json:"allowed"`
	RetryAfterMs int64    `json:"retry_after_ms"`
	ResetAfterMs int64    `json:"reset_after_ms"`
	Degraded     bool     `json:"degraded"`
	Reset        bool     `json:"reset"`
}

// key inspects or resets the key of args (RULE LIMIT VALUE...).
func (kc *keysClient) key(w io.Writer, method, path string, args []string) error {
	form := url.Values{"rule": {args[0]}, "limit": {args[1]}, "value": args[2:]}
	req, err := http.NewRequest(method, kc.base.String()+path, nil)
	if err != nil {
		return err
	}
	if q := form.Encode(); method == "GET" {
		req.URL.RawQuery = q
	} else {
		req.Body = io.NopCloser(strings.NewReader(q))
		req.ContentLength = int64(len(q))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	var ka keyAnswer
	if printed, err := kc.fetch(req, w, &ka); printed || err != nil {
		return err
	}
	ka.print(w)
	return nil
}

// fetch sends req and reads its answer into v, or, with --json, writes
// the answer to w as it came (printed).
func (kc *keysClient) fetch(req *http.Request, w io.Writer, v any) (printed bool, err error) {
	body, err := kc.do(req)
	if err != nil {
		return false, err
	}
	if kc.json {
		_, err = w.Write(body)
		return true, err
	}
	if err := json.Unmarshal(body, v); err != nil {
		return false, kc.notAdmin(body)
	}
	return false, nil
}

func (ka keyAnswer) print(w io.Writer) {
	if ka.Reset {
		fmt.Fprintln(w, "reset: the key's usage starts afresh")
	}
	fmt.Fprintf(w, "rule %s, limit %s, key %s: %s\n", ka.Rule, ka.Limit, strings.Join(ka.Values, " "), ka.Spec)
	now := "admitted"
	if !ka.Allowed {
		now = "refused, retry after " + msDuration(ka.RetryAfterMs)
	}
	fmt.Fprintf(w, "  remaining %d; a request now would be %s; full again in %s\n", ka.Remaining, now, msDuration(ka.ResetAfterMs))
	if ka.Degraded {
		fmt.Fprintln(w, "  (degraded: the store did not answer; this is the local fallback's state)")
	}
}

func msDuration(ms int64) string { return (time.Duration(ms) * time.Millisecond).String() }

// statusAnswer is what list reads of the server's /status.json.
type statusAnswer struct {
	Policy   string `json:"policy"`
	ShowKeys bool   `json:"show_keys"`
	Rules    []struct {
		Name   string `json:"name"`
		Limits []struct {
			Name      string `json:"name"`
			Key       string `json:"key"`
			Algorithm string `json:"algorithm"`
		} `json:"limits"`
	} `json:"rules"`
	HeavyKeys []struct {
		Limit string `json:"limit"`
		Key   string `json:"key"`
		Count int64  `json:"count"`
	} `json:"heavy_keys"`
}

// list prints the policy's limits and the keys refused most.
func (kc *keysClient) list(w io.Writer) error {
	req, err := http.NewRequest("GET", kc.base.String()+"/status.json", nil)
	if err != nil {
		return err
	}
	var st statusAnswer
	if printed, err := kc.fetch(req, w, &st); printed || err != nil {
		return err
	}
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
	return nil
}

// do sends req with the token and returns the body of a 200, or an error
// that says what to do about any other answer.
func (kc *keysClient) do(req *http.Request) ([]byte, error) {
	if kc.token != "" {
		req.Header.Set("Authorization", "Bearer "+kc.token)
	}
	resp, err := kc.client.Do(req)
	if err != nil {
		return nil, kc.connError(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return nil, fmt.Errorf("reading the answer of %s: %w", kc.base.Host, err)
	}
	if resp.StatusCode == http.StatusOK {
		return body, nil
	}
	return nil, kc.statusError(resp.StatusCode, req.URL.Path, serverMessage(body))
}

// connError explains a request that got no answer.
func (kc *keysClient) connError(err error) error {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("nothing listens at %s: is sluice serve running, with its admin listener there (--admin, default 127.0.0.1:8082)? Pass the address with --admin or SLUICE_ADMIN", kc.base.Host)
	case errors.As(err, &ne) && ne.Timeout():
		return fmt.Errorf("%s did not answer in time (--timeout): %v", kc.base.Host, err)
	case kc.base.Scheme == "http" && strings.Contains(err.Error(), "malformed HTTP response"):
		return fmt.Errorf("%s speaks TLS: pass --admin https://%s", kc.base.Host, kc.base.Host)
	case errors.As(err, new(*tls.CertificateVerificationError)), errors.As(err, new(x509.UnknownAuthorityError)):
		return fmt.Errorf("%s's certificate is not trusted: pass --ca-file with the CA that signs it (%v)", kc.base.Host, err)
	case strings.Contains(err.Error(), "certificate required"), strings.Contains(err.Error(), "bad certificate"):
		return fmt.Errorf("%s asks for a client certificate (tls.client_auth) and refused this one or its absence: pass --cert-file and --key-file (%v)", kc.base.Host, err)
	}
	return fmt.Errorf("asking %s: %w", kc.base.Host, err)
}

// notAdmin explains an answer that is not the admin listener's JSON.
func (kc *keysClient) notAdmin(body []byte) error {
	return fmt.Errorf("%s answered %q, not sluice's admin JSON: is --admin sluice serve's admin listener (not its gateway or decision API)?", kc.base.Host, serverMessage(body))
}

// statusError explains an answer other than 200.
func (kc *keysClient) statusError(status int, path, msg string) error {
	switch status {
	case http.StatusUnauthorized:
		if kc.token == "" {
			return fmt.Errorf("401: %s asks for a token (its auth.tokens_file): pass --token-file FILE, or set SLUICE_ADMIN_TOKEN_FILE or SLUICE_ADMIN_TOKEN", kc.base.Host)
		}
		return fmt.Errorf("401: %s refused the token: it is not in the server's auth.tokens_file (which the server reads again when it changes)", kc.base.Host)
	case http.StatusForbidden:
		return fmt.Errorf("403: %s forbids %s: something in front of sluice (a proxy, a client-certificate check) refuses this caller: %s", kc.base.Host, path, msg)
	case http.StatusNotFound:
		if strings.HasPrefix(msg, "the policy has no limit") {
			return fmt.Errorf("404: %s; 'sluice keys list' shows its rules and limits", msg)
		}
		return fmt.Errorf("404: %s has no %s: is --admin sluice serve's admin listener (not its gateway or decision API), of a sluice that has this endpoint?", kc.base.Host, path)
	case http.StatusBadRequest:
		if strings.Contains(msg, "HTTP request to an HTTPS server") {
			return fmt.Errorf("%s speaks TLS: pass --admin https://%s", kc.base.Host, kc.base.Host)
		}
		return fmt.Errorf("400: %s", msg)
	case http.StatusNotImplemented:
		return fmt.Errorf("501: %s", msg)
	case http.StatusServiceUnavailable:
		return fmt.Errorf("503: %s; try again once the store answers (sluice keys list, or /readyz, shows the store's state)", msg)
	}
	return fmt.Errorf("%d from %s%s: %s", status, kc.base.Host, path, msg)
}

// serverMessage is the message of an error answer: sluice's {"error"} or
// a problem document's detail, else the body's first line.
func serverMessage(body []byte) string {
	var m struct{ Error, Detail string }
	if json.Unmarshal(body, &m) == nil && (m.Error != "" || m.Detail != "") {
		return m.Error + m.Detail
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(body)), "\n")
	if len(line) > 200 {
		line = line[:200] + "..."
	}
	return line
}
