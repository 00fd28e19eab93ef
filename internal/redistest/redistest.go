// Package redistest connects sluice's tests to real Redis servers: a
// standalone server and a Redis Cluster with at least three masters.
//
// Where the servers come from:
//
//   - SLUICE_REDIS_ADDR (host:port) names the standalone server and
//     SLUICE_REDIS_CLUSTER (comma-separated host:port list) names cluster
//     nodes. ./scripts/test sets both: it runs `scripts/redis up DIR`, which
//     installs Debian's redis-server when it is missing, starts a standalone
//     server on 127.0.0.1:6391 and a 3-master cluster on 127.0.0.1:7101-7103
//     (ports overridable with SLUICE_REDIS_PORT and SLUICE_REDIS_CLUSTER_PORTS)
//     and prints the two export lines; `scripts/redis down DIR` stops them.
//     To run `go test` by hand against those servers:
//
//     dir=$(mktemp -d); eval "$(scripts/redis up "$dir")"
//     go test ./...
//     scripts/redis down "$dir"
//
//   - When a variable is unset or empty and a redis-server binary is on PATH,
//     the first test that needs it starts a private server (or a private
//     3-master cluster) on free loopback ports in a temporary directory,
//     shared by every test of the test binary. A package that uses this
//     package calls [Main] from its TestMain so the private servers are
//     stopped when its tests finish; they also stop by themselves when the
//     test binary exits, however it exits.
//
//   - Otherwise the test fails (it is never skipped): a Redis test that did
//     not run must not look like one that passed.
//
// Tests never need FLUSHDB: each test writes under its own [Prefix], so tests
// can run in parallel against shared servers, and [Keys] lists what a test
// left behind.
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// EnvAddr is the environment variable naming the standalone Redis server
// (host:port) that [Standalone] connects to.
const EnvAddr = "SLUICE_REDIS_ADDR"

// EnvCluster is the environment variable naming the Redis Cluster nodes
// (comma-separated host:port list) that [Cluster] connects to.
const EnvCluster = "SLUICE_REDIS_CLUSTER"

// NoServerMessage is the failure message of [Standalone] and [Cluster] when
// neither the environment variable nor a redis-server binary is available.
const NoServerMessage = "redis tests need a Redis server: run ./scripts/test, which installs and starts one, or set SLUICE_REDIS_ADDR / SLUICE_REDIS_CLUSTER"

// ClusterMasters is the number of masters of the private cluster that
// [Cluster] starts when EnvCluster is not set.
const ClusterMasters = 3

const (
	pingTimeout  = 5 * time.Second  // Standalone's PING
	readyTimeout = 20 * time.Second // Cluster's wait until every master is usable
	startTimeout = 30 * time.Second // a private deployment, from exec to ready
	stopTimeout  = 10 * time.Second // a private deployment, from stop to gone
)

// Standalone returns a client of the standalone Redis server named by
// SLUICE_REDIS_ADDR, or of a private server if that is unset (see the package
// doc). It fails t if the server does not answer PING, and closes the client
// when t ends.
func Standalone(t testing.TB) *redis.Client {
	t.Helper()
	addr := strings.TrimSpace(os.Getenv(EnvAddr))
	source := EnvAddr
	if addr == "" {
		d := private(t, &standalone, 1, false)
		addr, source = d.addrs[0], "private redis-server"
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("redistest: PING %s (%s): %v", addr, source, err)
	}
	return c
}

// Cluster returns a client of the Redis Cluster whose nodes SLUICE_REDIS_CLUSTER
// lists, or of a private 3-master cluster if that is unset (see the package
// doc). It waits briefly until every master answers PING and reports
// cluster_state:ok, fails t otherwise, and closes the client when t ends.
func Cluster(t testing.TB) *redis.ClusterClient {
	t.Helper()
	var addrs []string
	for a := range strings.SplitSeq(os.Getenv(EnvCluster), ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	source := EnvCluster
	if len(addrs) == 0 {
		d := private(t, &cluster, ClusterMasters, true)
		addrs, source = d.addrs, "private redis cluster"
	}
	return clusterClient(t, addrs, source)
}

// OwnStandalone returns a client of a redis-server started for t alone and
// stopped when t ends, whatever SLUICE_REDIS_ADDR says. It is for the tests
// that read server-wide figures (INFO commandstats, DBSIZE): on a shared
// server, the tests of other packages running beside them would move those
// figures.
func OwnStandalone(t testing.TB) *redis.Client {
	t.Helper()
	d := own(t, 1, false)
	c := redis.NewClient(&redis.Options{Addr: d.addrs[0]})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// OwnCluster is [OwnStandalone] for a Redis Cluster of [ClusterMasters]
// masters started for t alone.
func OwnCluster(t testing.TB) *redis.ClusterClient {
	t.Helper()
	d := own(t, ClusterMasters, true)
	return clusterClient(t, d.addrs, "redis cluster of "+t.Name())
}

// own starts a private deployment of n nodes that t owns: it stops when t
// ends (or with the test binary, as every private deployment).
func own(t testing.TB, n int, isCluster bool) *deployment {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal(NoServerMessage)
	}
	d, err := startPrivate(bin, n, isCluster)
	if err != nil {
		t.Fatalf("redistest: starting a redis-server of %s's own failed: %v", t.Name(), err)
	}
	t.Cleanup(d.stop)
	return d
}

// clusterClient connects to the cluster of addrs and waits until it is usable.
func clusterClient(t testing.TB, addrs []string, source string) *redis.ClusterClient {
	t.Helper()
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	for {
		err := clusterReady(ctx, c)
		if err == nil {
			return c
		}
		if ctx.Err() != nil {
			t.Fatalf("redistest: cluster %s (%s) not usable within %v: %v",
				strings.Join(addrs, ","), source, readyTimeout, err)
		}
		c.ReloadState(ctx)
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// clusterReady reports whether every master that c knows answers PING and
// reports cluster_state:ok.
func clusterReady(ctx context.Context, c *redis.ClusterClient) error {
	var mu sync.Mutex
	masters := 0
	err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		addr := m.Options().Addr
		if err := m.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("PING %s: %w", addr, err)
		}
		info, err := m.ClusterInfo(ctx).Result()
		if err != nil {
			return fmt.Errorf("CLUSTER INFO %s: %w", addr, err)
		}
		if !strings.Contains(info, "cluster_state:ok") {
			return fmt.Errorf("%s: cluster_state is not ok", addr)
		}
		mu.Lock()
		masters++
		mu.Unlock()
		return nil
	})
	if err == nil && masters == 0 {
		err = errors.New("no masters known yet")
	}
	return err
}

// Prefix returns a key prefix unique to this call, of the form
// "sluicetest:<test name>:<random hex>:", with the test name reduced to
// letters, digits, '_', '-' and '.'. Tests that write only under their own
// prefix never collide and never need FLUSHDB.
func Prefix(t testing.TB) string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return "sluicetest:" + sanitize(t.Name()) + ":" + hex.EncodeToString(b[:]) + ":"
}

func sanitize(name string) string {
	const maxLen = 80
	var sb strings.Builder
	for _, r := range name {
		if sb.Len() >= maxLen {
			break
		}
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-', r == '.':
			sb.WriteRune(r)
		default:
			sb.WriteByte('_')
		}
	}
	return sb.String()
}

// Keys returns, sorted, the keys that start with prefix, found with SCAN on
// every master of a *redis.ClusterClient, on every shard of a *redis.Ring, or
// on the server of any other client. It fails t on error.
func Keys(t testing.TB, c redis.UniversalClient, prefix string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pattern := escapeGlob(prefix) + "*"
	var (
		mu   sync.Mutex
		keys []string
	)
	scan := func(ctx context.Context, c redis.Cmdable) error {
		var found []string
		it := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for it.Next(ctx) {
			found = append(found, it.Val())
		}
		if err := it.Err(); err != nil {
			return err
		}
		mu.Lock()
		keys = append(keys, found...)
		mu.Unlock()
		return nil
	}
	var err error
	switch c := c.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return scan(ctx, m) })
	case *redis.Ring:
		err = c.ForEachShard(ctx, func(ctx context.Context, s *redis.Client) error { return scan(ctx, s) })
	default:
		err = scan(ctx, c)
	}
	if err != nil {
		t.Fatalf("redistest: SCAN MATCH %q: %v", pattern, err)
	}
	slices.Sort(keys)
	return slices.Compact(keys) // SCAN may return a key twice
}

// escapeGlob escapes the characters that SCAN's MATCH treats specially.
func escapeGlob(s string) string {
	var sb strings.Builder
	for _, r := range s {
		switch r {
		case '*', '?', '[', ']', '\\':
			sb.WriteByte('\\')
		}
		sb.WriteRune(r)
	}
	return sb.String()
}

// Main runs the tests of m, stops the private servers that they started, and
// exits with m's exit code. Call it from TestMain in every package that uses
// [Standalone] or [Cluster]:
//
//	func TestMain(m *testing.M) { redistest.Main(m) }
func Main(m *testing.M) {
	os.Exit(Run(m))
}

// Run is Main for a TestMain with more to clean up: it runs the tests,
// stops the private servers and returns the exit code.
func Run(m *testing.M) int {
	code := m.Run()
	stopPrivate()
	return code
}

// ---------------------------------------------------------------- private servers

// A deployment is a set of private redis-server processes under one
// temporary directory, run by a watchdog shell that stops them and removes the
// directory when its standard input closes: when stop closes it, or when the
// test binary exits in any way.
type deployment struct {
	dir   string
	addrs []string
	stdin io.WriteCloser
	done  chan struct{} // closed when the watchdog has exited
}

type lazyDeployment struct {
	once sync.Once
	d    *deployment
	err  error
}

var (
	standalone, cluster lazyDeployment

	startedMu sync.Mutex
	started   []*deployment
)

// private returns the process-wide private deployment l, starting it on first
// use; it fails t if there is no redis-server binary or the start failed.
func private(t testing.TB, l *lazyDeployment, n int, isCluster bool) *deployment {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal(NoServerMessage)
	}
	l.once.Do(func() { l.d, l.err = startPrivate(bin, n, isCluster) })
	if l.err != nil {
		env := EnvAddr
		if isCluster {
			env = EnvCluster
		}
		t.Fatalf("redistest: %s is not set, and starting a private %s failed: %v", env, bin, l.err)
	}
	return l.d
}

func stopPrivate() {
	startedMu.Lock()
	ds := started
	started = nil
	startedMu.Unlock()
	for _, d := range ds {
		d.stop()
	}
}

// startPrivate starts n redis-server processes, joined into a cluster if
// isCluster, retrying on other ports if a start fails (another process may
// take a port between the check and the start).
func startPrivate(bin string, n int, isCluster bool) (*deployment, error) {
	var errs []error
	for range 3 {
		d, err := tryStart(bin, n, isCluster)
		if err == nil {
			return d, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// watchdog starts the servers whose config files follow $1 (the directory) and
// $2 (the redis-server binary), then waits for its standard input to close.
const watchdog = `
dir=$1 bin=$2
shift 2
pids=
cleanup() {
	trap - EXIT HUP INT TERM
	for p in $pids; do kill "$p" 2>/dev/null; done
	wait
	rm -rf "$dir"
	exit 0
}
trap cleanup EXIT HUP INT TERM
for conf in "$@"; do
	"$bin" "$conf" </dev/null &
	pids="$pids $!"
done
read -r _ || :
`

// tryStart starts n nodes of bin (a cluster of them if isCluster) in a
// fresh directory and waits until they answer.
func tryStart(bin string, n int, isCluster bool) (d *deployment, err error) {
	dir, err := os.MkdirTemp("", "sluice-redistest-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil && d == nil {
			_ = os.RemoveAll(dir)
		}
	}()
	ports, err := freePorts(n, isCluster)
	if err != nil {
		return nil, err
	}
	confs, addrs, err := writeConfs(dir, ports, isCluster)
	if err != nil {
		return nil, err
	}
	if d, err = launch(dir, bin, confs, addrs); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	err = d.ready(ctx, isCluster)
	if err != nil {
		err = fmt.Errorf("%w%s", err, d.logs())
		d.stop()
		return nil, err
	}
	return d, nil
}

// writeConfs writes a redis.conf per port in a directory of its own under
// dir, and returns their paths and the nodes' addresses.
func writeConfs(dir string, ports []int, isCluster bool) (confs, addrs []string, err error) {
	for _, p := range ports {
		nodeDir := filepath.Join(dir, "node-"+strconv.Itoa(p))
		if err := os.Mkdir(nodeDir, 0o755); err != nil {
			return nil, nil, err
		}
		conf := []string{
			"port " + strconv.Itoa(p),
			"bind 127.0.0.1",
			"protected-mode no",
			"daemonize no",
			`save ""`,
			"appendonly no",
			"dir " + strconv.Quote(nodeDir),
			"logfile " + strconv.Quote(filepath.Join(nodeDir, "redis.log")),
		}
		if isCluster {
			conf = append(conf,
				"cluster-enabled yes",
				"cluster-config-file "+strconv.Quote(filepath.Join(nodeDir, "nodes.conf")),
				"cluster-node-timeout 5000",
			)
		}
		path := filepath.Join(nodeDir, "redis.conf")
		if err := os.WriteFile(path, []byte(strings.Join(conf, "\n")+"\n"), 0o644); err != nil {
			return nil, nil, err
		}
		confs = append(confs, path)
		addrs = append(addrs, net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	}
	return confs, addrs, nil
}

// launch starts the watchdog that runs bin on each of confs and removes
// dir when its standard input closes (see watchdog), and records the
// deployment in started.
func launch(dir, bin string, confs, addrs []string) (*deployment, error) {
	logf, err := os.Create(filepath.Join(dir, "watchdog.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command("/bin/sh", append([]string{"-c", watchdog, "sh", dir, bin}, confs...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	d := &deployment{dir: dir, addrs: addrs, stdin: stdin, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(d.done)
	}()
	startedMu.Lock()
	started = append(started, d)
	startedMu.Unlock()
	return d, nil
}

// ready waits until every server answers PING and, for a cluster, assigns the
// slots, joins the nodes and waits until every node reports cluster_state:ok.
func (d *deployment) ready(ctx context.Context, isCluster bool) error {
	clients := make([]*redis.Client, len(d.addrs))
	for i, a := range d.addrs {
		clients[i] = redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1, DialTimeout: time.Second})
		defer clients[i].Close()
	}
	for i, c := range clients {
		if err := d.poll(ctx, func() error { return c.Ping(ctx).Err() }); err != nil {
			return fmt.Errorf("redis-server at %s did not answer PING: %w", d.addrs[i], err)
		}
	}
	if !isCluster {
		return nil
	}
	const slots = 16384
	n := len(clients)
	for i, c := range clients {
		ss := make([]int, 0, slots/n+1)
		for s := i * slots / n; s < (i+1)*slots/n; s++ {
			ss = append(ss, s)
		}
		if err := c.ClusterAddSlots(ctx, ss...).Err(); err != nil {
			return fmt.Errorf("CLUSTER ADDSLOTS on %s: %w", d.addrs[i], err)
		}
		if err := c.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
			return fmt.Errorf("CLUSTER SET-CONFIG-EPOCH on %s: %w", d.addrs[i], err)
		}
	}
	for _, a := range d.addrs[1:] {
		host, port, _ := net.SplitHostPort(a)
		if err := clients[0].ClusterMeet(ctx, host, port).Err(); err != nil {
			return fmt.Errorf("CLUSTER MEET %s: %w", a, err)
		}
	}
	known := "cluster_known_nodes:" + strconv.Itoa(n)
	for i, c := range clients {
		err := d.poll(ctx, func() error {
			info, err := c.ClusterInfo(ctx).Result()
			if err != nil {
				return err
			}
			if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, known) {
				return errors.New("cluster not formed yet")
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("cluster node %s: %w", d.addrs[i], err)
		}
	}
	return nil
}

// poll calls f until it succeeds, the watchdog exits or ctx ends.
func (d *deployment) poll(ctx context.Context, f func() error) error {
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-d.done:
			return fmt.Errorf("servers exited: %w", err)
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// logs returns the tails of the servers' logs, for an error message.
func (d *deployment) logs() string {
	var sb strings.Builder
	paths, _ := filepath.Glob(filepath.Join(d.dir, "*", "redis.log"))
	paths = append(paths, filepath.Join(d.dir, "watchdog.log"))
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil || len(b) == 0 {
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		lines = lines[max(0, len(lines)-10):]
		fmt.Fprintf(&sb, "\n--- %s:\n%s", p, strings.Join(lines, "\n"))
	}
	return sb.String()
}

// stop makes the watchdog stop the servers and remove the directory, and
// waits for it.
func (d *deployment) stop() {
	_ = d.stdin.Close()
	select {
	case <-d.done:
	case <-time.After(stopTimeout):
		fmt.Fprintf(os.Stderr, "redistest: private redis-server under %s did not stop within %v\n", d.dir, stopTimeout)
	}
	_ = os.RemoveAll(d.dir)
}

// freePorts returns n distinct loopback ports that are free now. For a
// cluster, port+10000 (the cluster bus) is free too. Ports are drawn from
// 15000-22767 so that neither they nor their bus ports fall in Linux's
// ephemeral range (32768 and up), where outgoing connections take ports.
func freePorts(n int, isCluster bool) ([]int, error) {
	const lo, hi = 15000, 22768
	var ports []int
	var held []net.Listener
	defer func() {
		for _, l := range held {
			_ = l.Close()
		}
	}()
	for tries := 0; len(ports) < n; tries++ {
		if tries > 200 {
			return nil, errors.New("found no free loopback ports in 15000-22767")
		}
		r, err := rand.Int(rand.Reader, big.NewInt(hi-lo))
		if err != nil {
			return nil, err
		}
		p := lo + int(r.Int64())
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		if isCluster {
			bus, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p+10000)))
			if err != nil {
				_ = l.Close()
				continue
			}
			held = append(held, bus)
		}
		held = append(held, l)
		ports = append(ports, p)
	}
	return ports, nil
}
