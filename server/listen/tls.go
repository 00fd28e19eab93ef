package listen

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"slices"

	"github.com/sluicehq/sluice/server/internal/reloading"
)

// TLS is the TLS of sluice's listeners: one certificate, and the
// CAs whose client certificates some listeners require, each read again
// when its files change (at most once a second, on a handshake).
type TLS struct {
	cfg  TLSConfig
	cert *reloading.Value[*tls.Certificate]
	cas  *reloading.Value[*x509.CertPool] // nil without a client CA file
}

// NewTLS loads cfg's files; nil, nil when TLS is off.
func NewTLS(cfg TLSConfig, log *slog.Logger) (*TLS, error) {
	if cfg.CertFile == "" {
		return nil, nil
	}
	t := &TLS{cfg: cfg}
	var err error
	t.cert, err = reloading.New("tls certificate", []string{cfg.CertFile, cfg.KeyFile}, reloading.KeyPair(cfg.CertFile, cfg.KeyFile), log)
	if err != nil {
		return nil, err
	}
	if cfg.ClientCAFile != "" {
		t.cas, err = reloading.New("tls client CAs", []string{cfg.ClientCAFile}, reloading.CAs(cfg.ClientCAFile), log)
		if err != nil {
			return nil, err
		}
	}
	return t, nil
}

// Config returns the tls.Config of the listener called name, offering
// alpn; nil if that listener serves in clear.
func (t *TLS) Config(name string, alpn ...string) *tls.Config {
	if t == nil || !slices.Contains(t.cfg.On(), name) {
		return nil
	}
	verify := t.cas != nil && slices.Contains(t.cfg.ClientAuthOn(), name)
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			c := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: alpn}
			cert := t.cert.Get()
			if cert == nil {
				return nil, errors.New("sluice: no TLS certificate")
			}
			c.Certificates = []tls.Certificate{*cert}
			if verify {
				c.ClientAuth = tls.RequireAndVerifyClientCert
				c.ClientCAs = t.cas.Get()
			}
			return c, nil
		},
	}
}

// TLSConfig turns on TLS (HTTPS, gRPC over TLS) and client certificates.
type TLSConfig struct {
	// CertFile and KeyFile are the server's certificate (with its chain)
	// and key, PEM. Setting them turns TLS on for Listeners. Both are read
	// again when they change (a renewed certificate needs no restart).
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ClientCAFile is a PEM bundle of the CAs that sign client
	// certificates. With it, the ClientAuth listeners refuse a client
	// without a certificate it verifies (mutual TLS). Read again when it
	// changes.
	ClientCAFile string `yaml:"client_ca_file"`
	// Listeners serve TLS. Default gateway, api and grpc; the admin
	// listener too if listed (its probes then need scheme HTTPS).
	Listeners []string `yaml:"listeners"`
	// ClientAuth lists the listeners that require a client certificate.
	// Default, with a client_ca_file: api and grpc (the callers are
	// services; the gateway's are users).
	ClientAuth []string `yaml:"client_auth"`
}

// On returns the listeners that serve TLS (Listeners or its default).
func (t TLSConfig) On() []string {
	if t.Listeners == nil {
		return []string{"gateway", "api", "grpc"}
	}
	return t.Listeners
}

// ClientAuthOn returns the listeners that require a client certificate
// (ClientAuth or its default).
func (t TLSConfig) ClientAuthOn() []string {
	if t.ClientAuth == nil {
		return []string{"api", "grpc"}
	}
	return t.ClientAuth
}

// Validate calls fail for each field of t that is wrong.
func (t TLSConfig) Validate(fail func(field, format string, args ...any)) {
	if (t.CertFile == "") != (t.KeyFile == "") {
		fail("tls", "cert_file and key_file go together")
	}
	if t.CertFile == "" && (t.ClientCAFile != "" || t.Listeners != nil || t.ClientAuth != nil) {
		fail("tls", "client_ca_file, listeners and client_auth need cert_file and key_file")
	}
	for _, l := range []struct {
		field string
		names []string
	}{{"tls.listeners", t.Listeners}, {"tls.client_auth", t.ClientAuth}} {
		for _, n := range l.names {
			if !slices.Contains([]string{"gateway", "api", "grpc", "admin"}, n) {
				fail(l.field, "%q: want gateway, api, grpc or admin", n)
			}
		}
	}
	if len(t.ClientAuth) > 0 && t.ClientCAFile == "" {
		fail("tls.client_auth", "needs client_ca_file, the CAs that sign client certificates")
	}
	for _, n := range t.ClientAuth {
		if !slices.Contains(t.On(), n) {
			fail("tls.client_auth", "%q does not serve TLS (tls.listeners)", n)
		}
	}
}
