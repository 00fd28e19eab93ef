package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Process is a redis-server process (or a Sentinel, see StartSentinel)
// that belongs to one test, for tests of what happens when Redis fails:
// the test can kill it (SIGKILL), freeze and thaw it (SIGSTOP, SIGCONT)
// and start it again on the same port. It
// runs on a free loopback port with its files in a directory of
// t.TempDir(), persists nothing unless args ask for it (so a restart
// starts empty), and is killed, by its pid, when the test ends. Unlike
// [Standalone] and [Cluster], it needs no [Main].
type Process struct {
	// Addr is the server's host:port; it stays the same across Restart.
	Addr string
	// Port is Addr's port. Port+10000, the cluster bus, was free too.
	Port int
	// Dir holds the server's files (redis.log, nodes.conf for a cluster
	// node); it stays the same across Restart.
	Dir string

	t    testing.TB
	bin  string
	conf string // a Sentinel's configuration file, or ""
	args []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// StartProcess starts a redis-server owned by t, with args appended to its
// command line (for example "--cluster-enabled", "yes"), and waits until it
// answers PING. It fails t if there is no redis-server binary or it does
// not start.
func StartProcess(t testing.TB, args ...string) *Process {
	t.Helper()
	p := newProcess(t)
	p.args = args
	p.Restart()
	return p
}

// StartSentinel starts a Redis Sentinel owned by t (redis-server in
// sentinel mode, on a free loopback port) that monitors the master at
// master (host:port) under name, with the given quorum, and declares it
// down after downAfter without an answer; failoverTimeout bounds a
// failover. It waits until the Sentinel answers PING.
func StartSentinel(t testing.TB, name, master string, quorum int, downAfter, failoverTimeout time.Duration) *Process {
	t.Helper()
	host, port, err := net.SplitHostPort(master)
	if err != nil {
		t.Fatalf("redistest: master address %q: %v", master, err)
	}
	p := newProcess(t)
	p.conf = filepath.Join(p.Dir, "sentinel.conf")
	conf := fmt.Sprintf("sentinel monitor %s %s %s %d\n"+
		"sentinel down-after-milliseconds %s %d\n"+
		"sentinel failover-timeout %s %d\n",
		name, host, port, quorum, name, downAfter.Milliseconds(), name, failoverTimeout.Milliseconds())
	if err := os.WriteFile(p.conf, []byte(conf), 0o644); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	p.Restart()
	return p
}

// newProcess returns a Process owned by t on a free port, not started.
func newProcess(t testing.TB) *Process {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal(NoServerMessage)
	}
	ports, err := freePorts(1, true)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	p := &Process{
		Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])),
		Port: ports[0],
		Dir:  t.TempDir(),
		t:    t,
		bin:  bin,
	}
	t.Cleanup(p.kill)
	return p
}

// Pid returns the pid of the running server, or 0 if it is not running.
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Kill stops the server with SIGKILL, as a crash would, and waits until it
// has exited.
func (p *Process) Kill() {
	p.t.Helper()
	p.kill()
}

func (p *Process) kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT) // a frozen process dies of SIGKILL too, but say so plainly
	_ = cmd.Process.Kill()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		p.t.Errorf("redistest: redis-server pid %d did not exit within 10s of SIGKILL", cmd.Process.Pid)
	}
}

// Freeze stops the server with SIGSTOP: it keeps its connections open but
// answers nothing, like a hung or swapping server, until Thaw.
func (p *Process) Freeze() { p.signal(syscall.SIGSTOP) }

// Thaw resumes a frozen server with SIGCONT.
func (p *Process) Thaw() { p.signal(syscall.SIGCONT) }

func (p *Process) signal(sig syscall.Signal) {
	p.t.Helper()
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if cmd == nil {
		p.t.Fatalf("redistest: %v to %s: the server is not running", sig, p.Addr)
	}
	if err := cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("redistest: %v to redis-server pid %d: %v", sig, cmd.Process.Pid, err)
	}
}

// Restart starts the server again on the same port and directory (killing
// it first if it is running) and waits until it answers PING, with PONG or,
// while it loads a dataset from its directory, with LOADING.
func (p *Process) Restart() {
	p.t.Helper()
	p.kill()
	log := filepath.Join(p.Dir, "redis.log")
	var args []string
	if p.conf != "" {
		args = []string{p.conf, "--sentinel"} // the file first: a Sentinel rewrites it
	}
	args = append(args,
		"--port", strconv.Itoa(p.Port), "--bind", "127.0.0.1", "--protected-mode", "no",
		"--daemonize", "no", "--save", "", "--appendonly", "no",
		"--dir", p.Dir, "--logfile", log,
	)
	args = append(args, p.args...)
	cmd := exec.Command(p.bin, args...)
	setParentDeathSignal(cmd)
	out, err := os.OpenFile(filepath.Join(p.Dir, "stdout.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		p.t.Fatalf("redistest: %v", err)
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		p.t.Fatalf("redistest: start %s: %v", p.bin, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()

	c := redis.NewClient(&redis.Options{Addr: p.Addr, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	for {
		err := c.Ping(ctx).Err()
		if err == nil || strings.HasPrefix(err.Error(), "LOADING") || strings.HasPrefix(err.Error(), "NOAUTH") {
			return // a server loading its dataset answers, with LOADING; one with a password, with NOAUTH
		}
		select {
		case <-done:
			b, _ := os.ReadFile(log)
			p.t.Fatalf("redistest: redis-server on %s exited during startup: %v\n%s", p.Addr, err, b)
		case <-ctx.Done():
			p.t.Fatalf("redistest: redis-server on %s did not answer PING within %v: %v", p.Addr, startTimeout, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Client returns a client of the server that t closes when it ends.
func (p *Process) Client(opts *redis.Options) *redis.Client {
	if opts == nil {
		opts = &redis.Options{}
	}
	o := *opts
	o.Addr = p.Addr
	c := redis.NewClient(&o)
	p.t.Cleanup(func() { _ = c.Close() })
	return c
}

// String describes the process for messages.
func (p *Process) String() string { return fmt.Sprintf("redis-server %s (pid %d)", p.Addr, p.Pid()) }

// Lateness measures how late timers fire in this process while a fault
// test runs: n goroutines each wait for a timer of d, over and over, until
// stop is called, which returns the most any of them woke past its timer.
// On a loaded machine under the race detector that is often tens of
// milliseconds; a test that bounds a caller's latency by its deadline adds
// it to the bound, so that the bound holds what the code adds, not what
// the scheduler does.
func Lateness(n int, d time.Duration) (stop func() time.Duration) {
	var (
		mu    sync.Mutex
		worst time.Duration
		wg    sync.WaitGroup
		done  = make(chan struct{})
	)
	for range n {
		wg.Go(func() {
			t := time.NewTimer(d)
			defer t.Stop()
			for {
				start := time.Now()
				t.Reset(d)
				select {
				case <-done:
					return
				case <-t.C:
				}
				late := time.Since(start) - d
				mu.Lock()
				worst = max(worst, late)
				mu.Unlock()
			}
		})
	}
	return sync.OnceValue(func() time.Duration {
		close(done)
		wg.Wait()
		return worst
	})
}
