package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// pki is a certificate authority made for one test, writing PEM files in
// dir.
type pki struct {
	t      *testing.T
	dir    string
	ca     *x509.Certificate
	key    *ecdsa.PrivateKey
	caFile string
	pool   *x509.CertPool
}

var serial atomic.Int64

func newPKI(t *testing.T, name string) *pki {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial.Add(1)),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	p := &pki{t: t, dir: t.TempDir(), ca: ca, key: key, pool: x509.NewCertPool()}
	p.pool.AddCert(ca)
	p.caFile = p.write(name+"-ca.pem", "CERTIFICATE", der)
	return p
}

func (p *pki) write(name, kind string, der []byte) string {
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		p.t.Fatal(err)
	}
	return path
}

// issue signs a certificate for 127.0.0.1 and localhost named cn, for a
// server and a client both, and returns its files and the key pair.
func (p *pki) issue(cn string) (certFile, keyFile string, pair tls.Certificate) {
	p.t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		p.t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.key)
	if err != nil {
		p.t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		p.t.Fatal(err)
	}
	certFile = p.write(cn+".pem", "CERTIFICATE", der)
	keyFile = p.write(cn+"-key.pem", "PRIVATE KEY", kder)
	pair, err = tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		p.t.Fatal(err)
	}
	return certFile, keyFile, pair
}

// httpsClient trusts p's CA and presents certs.
func httpsClient(p *pki, certs ...tls.Certificate) *http.Client {
	return &http.Client{
		Timeout: 20 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: p.pool, Certificates: certs},
			ForceAttemptHTTP2: true,
		},
	}
}

// servedCert returns the common name of the certificate addr presents.
func servedCert(t *testing.T, p *pki, addr string) string {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, &tls.Config{RootCAs: p.pool})
	if err != nil {
		return "error: " + err.Error()
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].Subject.CommonName
}

// TestTLS serves every listener but admin over TLS with certificates made
// here: HTTPS (HTTP/2) on the gateway, the decision API and gRPC requiring
// a client certificate (one without is refused), and a renewed server
// certificate picked up without a restart.
func TestTLS(t *testing.T) {
	ca := newPKI(t, "sluice-test")
	certFile, keyFile, _ := ca.issue("server-1")
	_, _, clientCert := ca.issue("client")
	strange := newPKI(t, "elsewhere")
	_, _, strangerCert := strange.issue("stranger")
	p := start(t, nil, "--tls-cert", certFile, "--tls-key", keyFile, "--tls-client-ca", ca.caFile)
	if !strings.Contains(p.logs(), `"tls":"gateway,api,grpc"`) {
		t.Errorf("the serving line does not say which listeners serve TLS")
	}

	resp, err := httpsClient(ca).Get("https://" + p.addrs["gateway"] + "/")
	if err != nil {
		t.Fatalf("HTTPS gateway: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.ProtoMajor != 2 {
		t.Errorf("HTTPS gateway: %d over %s, want 200 over HTTP/2", resp.StatusCode, resp.Proto)
	}
	if r, err := client.Get("http://" + p.addrs["gateway"] + "/"); err == nil {
		r.Body.Close()
		if r.StatusCode != 400 { // net/http's "Client sent an HTTP request to an HTTPS server."
			t.Errorf("the TLS gateway answered plain HTTP with %d", r.StatusCode)
		}
	}

	check := func(c *http.Client) (int, error) {
		resp, err := c.Post("https://"+p.addrs["api"]+"/v1/check", "application/json", strings.NewReader(`{"checks":[{"name":"n","key":"k","limit":{"algorithm":"fixed_window","limit":5,"window":"1m"}}]}`))
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	if code, err := check(httpsClient(ca, clientCert)); err != nil || code != 200 {
		t.Errorf("decision API with a client certificate: %d %v", code, err)
	}
	for name, c := range map[string]*http.Client{"no": httpsClient(ca), "another CA's": httpsClient(ca, strangerCert)} {
		if code, err := check(c); err == nil {
			t.Errorf("decision API with %s client certificate: answered %d", name, code)
		}
	}

	health := func(certs ...tls.Certificate) error {
		creds := credentials.NewTLS(&tls.Config{RootCAs: ca.pool, Certificates: certs})
		conn, err := grpc.NewClient(p.addrs["grpc"], grpc.WithTransportCredentials(creds))
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}
	if err := health(clientCert); err != nil {
		t.Errorf("gRPC with a client certificate: %v", err)
	}
	if err := health(); err == nil {
		t.Errorf("gRPC without a client certificate was served")
	}

	// Renewal: new files over the old; the next handshakes present them.
	if got := servedCert(t, ca, p.addrs["gateway"]); got != "server-1" {
		t.Fatalf("served %q, want server-1", got)
	}
	newCert, newKey, _ := ca.issue("server-2")
	for from, to := range map[string]string{newCert: certFile, newKey: keyFile} {
		if err := os.Rename(from, to); err != nil {
			t.Fatal(err)
		}
	}
	// A verified client certificate stands for a token.
	tokens := filepath.Join(t.TempDir(), "tokens")
	writeFile(t, tokens, "secret\n")
	q := start(t, nil, "--tls-cert", certFile, "--tls-key", keyFile, "--tls-client-ca", ca.caFile, "--auth-tokens", tokens)
	resp, err = httpsClient(ca, clientCert).Post("https://"+q.addrs["api"]+"/v1/check", "application/json", strings.NewReader(`{"checks":[{"name":"n","key":"k","limit":{"algorithm":"fixed_window","limit":5,"window":"1m"}}]}`))
	if err != nil || resp.StatusCode != 200 {
		t.Errorf("decision API with a client certificate and no token: %v %v, want 200", resp, err)
	}
	if resp != nil {
		resp.Body.Close()
	}

	waitFor(t, "the renewed certificate", func() bool { return servedCert(t, ca, p.addrs["gateway"]) == "server-2" })
	if got := servedCert(t, ca, p.addrs["api"]); got == "server-1" {
		t.Errorf("the api listener still serves the old certificate")
	}
}
