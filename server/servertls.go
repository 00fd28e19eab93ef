package server

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"slices"
)

// serverTLS is the TLS of sluice's listeners: one certificate, and the
// CAs whose client certificates some listeners require, each read again
// when its files change (at most once a second, on a handshake).
type serverTLS struct {
	cfg  TLSConfig
	cert *reloading[*tls.Certificate]
	cas  *reloading[*x509.CertPool] // nil without a client CA file
}

// newServerTLS loads cfg's files; nil, nil when TLS is off.
func newServerTLS(cfg TLSConfig, log *slog.Logger) (*serverTLS, error) {
	if cfg.CertFile == "" {
		return nil, nil
	}
	t := &serverTLS{cfg: cfg}
	var err error
	t.cert, err = newReloading("tls certificate", []string{cfg.CertFile, cfg.KeyFile}, loadKeyPair(cfg.CertFile, cfg.KeyFile), log)
	if err != nil {
		return nil, err
	}
	if cfg.ClientCAFile != "" {
		t.cas, err = newReloading("tls client CAs", []string{cfg.ClientCAFile}, loadCAs(cfg.ClientCAFile), log)
		if err != nil {
			return nil, err
		}
	}
	return t, nil
}

// config returns the tls.Config of the listener called name, offering
// alpn; nil if that listener serves in clear.
func (t *serverTLS) config(name string, alpn ...string) *tls.Config {
	if t == nil || !slices.Contains(t.cfg.listeners(), name) {
		return nil
	}
	verify := t.cas != nil && slices.Contains(t.cfg.clientAuth(), name)
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			c := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: alpn}
			cert := t.cert.get()
			if cert == nil {
				return nil, errors.New("sluice: no TLS certificate")
			}
			c.Certificates = []tls.Certificate{*cert}
			if verify {
				c.ClientAuth = tls.RequireAndVerifyClientCert
				c.ClientCAs = t.cas.get()
			}
			return c, nil
		},
	}
}
