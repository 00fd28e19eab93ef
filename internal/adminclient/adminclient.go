// Package adminclient asks a running sluice serve's admin listener about
// keys (sluice keys): its limits and heaviest keys (GET /status.json),
// one key's state (GET /admin/keys) and resetting it (POST
// /admin/keys/reset), and its runtime overrides (sluice overrides: PUT,
// GET and DELETE /admin/overrides), over HTTP or TLS, with a bearer token. Every answer
// other than a 200 becomes an error that says what to do about it.
package adminclient

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"
)

// Client asks one sluice serve's admin listener about keys.
type Client struct {
	base   *url.URL // scheme and host of the admin listener
	token  string   // bearer token; "" sends none
	client *http.Client
}

// TLSFiles are the files of --ca-file, --cert-file and --key-file.
type TLSFiles struct{ CA, Cert, Key string }

// Config returns the TLS client configuration of the files.
func (tf TLSFiles) Config() (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if tf.CA != "" {
		pem, err := os.ReadFile(tf.CA)
		if err != nil {
			return nil, fmt.Errorf("--ca-file: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--ca-file %s: no PEM certificate in it", tf.CA)
		}
	}
	if (tf.Cert == "") != (tf.Key == "") {
		return nil, errors.New("--cert-file and --key-file go together: give both or neither")
	}
	if tf.Cert != "" {
		pair, err := tls.LoadX509KeyPair(tf.Cert, tf.Key)
		if err != nil {
			return nil, fmt.Errorf("--cert-file, --key-file: %w", err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return tc, nil
}

// New returns a client of the admin listener at addr (--admin), with the
// token of tokenFile, else of $SLUICE_ADMIN_TOKEN.
func New(addr, tokenFile string, tf TLSFiles, timeout time.Duration) (*Client, error) {
	base, err := adminURL(addr)
	if err != nil {
		return nil, err
	}
	kc := &Client{base: base, token: strings.TrimSpace(os.Getenv("SLUICE_ADMIN_TOKEN"))}
	if tokenFile != "" {
		if kc.token, err = readToken(tokenFile); err != nil {
			return nil, err
		}
	}
	tc, err := tf.Config()
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

// Key asks about the key of args (RULE LIMIT VALUE...): method GET and
// path /admin/keys inspect it, POST and /admin/keys/reset reset it. It
// returns the server's JSON answer, a KeyAnswer.
func (kc *Client) Key(method, path string, args []string) ([]byte, error) {
	form := url.Values{"rule": {args[0]}, "limit": {args[1]}, "value": args[2:]}
	req, err := http.NewRequest(method, kc.base.String()+path, nil)
	if err != nil {
		return nil, err
	}
	if q := form.Encode(); method == "GET" {
		req.URL.RawQuery = q
	} else {
		req.Body = io.NopCloser(strings.NewReader(q))
		req.ContentLength = int64(len(q))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	return kc.do(req)
}

// Status returns the server's /status.json, a StatusAnswer.
func (kc *Client) Status() ([]byte, error) {
	req, err := http.NewRequest("GET", kc.base.String()+"/status.json", nil)
	if err != nil {
		return nil, err
	}
	return kc.do(req)
}

// Decode reads an answer into v, or says that it is not the admin
// listener's JSON.
func (kc *Client) Decode(body []byte, v any) error {
	if err := json.Unmarshal(body, v); err != nil {
		return kc.notAdmin(body)
	}
	return nil
}

// KeyAnswer is the server's answer about one key (server's keyState).
type KeyAnswer struct {
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
	Ban          string   `json:"ban"`
	BannedForMs  int64    `json:"banned_for_ms"`
}

// StatusAnswer is what sluice keys list reads of the server's
// /status.json.
type StatusAnswer struct {
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

// do sends req with the token and returns the body of a 200, or an error
// that says what to do about any other answer.
func (kc *Client) do(req *http.Request) ([]byte, error) {
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
func (kc *Client) connError(err error) error {
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
func (kc *Client) notAdmin(body []byte) error {
	return fmt.Errorf("%s answered %q, not sluice's admin JSON: is --admin sluice serve's admin listener (not its gateway or decision API)?", kc.base.Host, serverMessage(body))
}

// statusError explains an answer other than 200.
func (kc *Client) statusError(status int, path, msg string) error {
	switch status {
	case http.StatusUnauthorized:
		if kc.token == "" {
			return fmt.Errorf("401: %s asks for a token (its auth.tokens_file): pass --token-file FILE, or set SLUICE_ADMIN_TOKEN_FILE or SLUICE_ADMIN_TOKEN", kc.base.Host)
		}
		return fmt.Errorf("401: %s refused the token: it is not in the server's auth.tokens_file (which the server reads again when it changes)", kc.base.Host)
	case http.StatusForbidden:
		return fmt.Errorf("403: %s forbids %s: something in front of sluice (a proxy, a client-certificate check) refuses this caller: %s", kc.base.Host, path, msg)
	case http.StatusNotFound:
		if strings.HasPrefix(msg, "no override of limit") {
			return fmt.Errorf("404: %s", msg)
		}
		if strings.HasPrefix(msg, "the policy has no limit") {
			return fmt.Errorf("404: %s; 'sluice keys list' shows its rules and limits", msg)
		}
		return fmt.Errorf("404: %s has no %s: is --admin sluice serve's admin listener (not its gateway or decision API), of a sluice that has this endpoint?", kc.base.Host, path)
	case http.StatusBadRequest:
		if strings.Contains(msg, "HTTP request to an HTTPS server") {
			return fmt.Errorf("%s speaks TLS: pass --admin https://%s", kc.base.Host, kc.base.Host)
		}
		return fmt.Errorf("400: %s", msg)
	case http.StatusConflict:
		return fmt.Errorf("409: %s", msg)
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
