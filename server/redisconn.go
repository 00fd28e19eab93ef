package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/server/config"
	"github.com/sluicehq/sluice/server/internal/reloading"
)

// redisDialer returns the Dialer of a Redis client: TCP, then TLS when
// cfg asks for it, with the CA and client certificate files read again
// when they change and each server verified under its own host name (a
// Cluster's nodes each have theirs). nil means go-redis's plain dialer.
func redisDialer(cfg config.RedisTLSConfig, on bool, timeout time.Duration, log *slog.Logger) (func(ctx context.Context, network, addr string) (net.Conn, error), error) {
	if !on {
		return nil, nil
	}
	var cas *reloading.Value[*x509.CertPool]
	var cert *reloading.Value[*tls.Certificate]
	var err error
	if cfg.CAFile != "" {
		if cas, err = reloading.New("redis tls CAs", []string{cfg.CAFile}, reloading.CAs(cfg.CAFile), log); err != nil {
			return nil, err
		}
	}
	if cfg.CertFile != "" {
		if cert, err = reloading.New("redis tls client certificate", []string{cfg.CertFile, cfg.KeyFile}, reloading.KeyPair(cfg.CertFile, cfg.KeyFile), log); err != nil {
			return nil, err
		}
	}
	d := &net.Dialer{Timeout: timeout, KeepAlive: 5 * time.Minute}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		name := cfg.ServerName
		if name == "" {
			name, _, _ = net.SplitHostPort(addr)
		}
		tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: name}
		if cas != nil {
			tc.RootCAs = cas.Get()
		}
		if cert != nil {
			tc.Certificates = []tls.Certificate{*cert.Get()}
		}
		raw, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		hctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		c := tls.Client(raw, tc)
		if err := c.HandshakeContext(hctx); err != nil {
			raw.Close()
			return nil, fmt.Errorf("redis tls %s: %w", addr, err)
		}
		return c, nil
	}, nil
}

// redisCredentials returns a go-redis CredentialsProvider that reads the
// password from file on each new connection (a rotated password needs no
// restart; an unreadable file keeps the last one read), or nil without a
// file. The file's first line is the password.
func redisCredentials(username, file string, log *slog.Logger) (func() (string, string), error) {
	if file == "" {
		return nil, nil
	}
	read := func() (string, error) {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", err
		}
		line, _, _ := strings.Cut(string(b), "\n")
		return strings.TrimRight(line, "\r"), nil
	}
	pw, err := read()
	if err != nil {
		return nil, fmt.Errorf("store.redis.password_file: %w", err)
	}
	var mu sync.Mutex
	return func() (string, string) {
		mu.Lock()
		defer mu.Unlock()
		if p, err := read(); err == nil {
			pw = p
		} else {
			log.Warn("store.redis.password_file unreadable; using the password read before", "err", err)
		}
		return username, pw
	}, nil
}
