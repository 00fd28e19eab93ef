package server

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/problem"
	"github.com/sluicehq/sluice/server/internal/reloading"
)

// maxTokensFile bounds the tokens file.
const maxTokensFile = 1 << 20

// tokenSet is the SHA-256 of each accepted token: comparing digests in
// constant time tells nothing about a token's length or prefix.
type tokenSet [][sha256.Size]byte

func loadTokens(path string) func() (tokenSet, error) {
	return func() (tokenSet, error) {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		if len(data) > maxTokensFile {
			return nil, fmt.Errorf("%s: larger than %d bytes", path, maxTokensFile)
		}
		var set tokenSet
		sc := bufio.NewScanner(bytes.NewReader(data))
		for line := 1; sc.Scan(); line++ {
			tok := strings.TrimSpace(sc.Text())
			if tok == "" || strings.HasPrefix(tok, "#") {
				continue
			}
			if strings.ContainsAny(tok, " \t") {
				return nil, fmt.Errorf("%s:%d: a token has no spaces", path, line)
			}
			set = append(set, sha256.Sum256([]byte(tok)))
		}
		if len(set) == 0 {
			return nil, errors.New(path + ": no token in it")
		}
		return set, nil
	}
}

// has reports whether tok is one of the set, in time that depends only on
// the set's size.
func (ts tokenSet) has(tok string) bool {
	d := sha256.Sum256([]byte(tok))
	found := 0
	for i := range ts {
		found |= subtle.ConstantTimeCompare(d[:], ts[i][:])
	}
	return found == 1
}

// authenticate asks next's callers on the listener called name for a
// token (or a verified client certificate), if auth is configured for it.
// A refused request is answered 401 before it reaches next: it is neither
// decided nor counted as a decision.
func authenticate(tokens *reloading.Value[tokenSet], on []string, unauthorized *prometheus.CounterVec, name string, next http.Handler) http.Handler {
	if tokens == nil || !slices.Contains(on, name) {
		return next
	}
	unauthorized.WithLabelValues(name) // exported from zero
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if name == "admin" && (r.URL.Path == "/healthz" || r.URL.Path == "/readyz") {
			next.ServeHTTP(w, r)
			return
		}
		if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
			next.ServeHTTP(w, r)
			return
		}
		scheme, tok, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		if strings.EqualFold(scheme, "Bearer") && tok != "" && tokens.Get().has(strings.TrimSpace(tok)) {
			next.ServeHTTP(w, r)
			return
		}
		unauthorized.WithLabelValues(name).Inc()
		w.Header().Set("WWW-Authenticate", `Bearer realm="sluice"`)
		problem.Write(w, http.StatusUnauthorized, "Unauthorized", "This listener needs Authorization: Bearer with a valid token, or a client certificate.", nil)
	})
}

// warnOpen logs the listeners that anyone who reaches them may use: the
// decision API and admin on an address other than loopback with neither
// tokens (tokens says whether there are) nor client certificates.
func warnOpen(cfg *Config, tokens bool, log *slog.Logger) {
	for _, l := range []struct{ name, addr string }{{"api", cfg.API}, {"admin", cfg.Admin}} {
		if l.addr == "" || loopback(l.addr) {
			continue
		}
		if tokens && slices.Contains(cfg.Auth.On(), l.name) {
			continue
		}
		if cfg.TLS.ClientCAFile != "" && slices.Contains(cfg.TLS.ClientAuthOn(), l.name) && slices.Contains(cfg.TLS.On(), l.name) {
			continue
		}
		log.Warn("listening beyond loopback without authentication: anyone who reaches it may use it (auth.tokens_file, or tls client certificates; docs/operations.md)", "listener", l.name, "addr", l.addr)
	}
}

// loopback reports whether addr's host is a loopback address or localhost.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}
