//go:build redisbench

package bench_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redisstore"
)

// TestRedisSerialFloor splits sluice's serial latency into its parts, in
// interleaved rounds on the same server:
//
//   - rb-tiny, rb-script: redis-benchmark -c 1 running EVALSHA of "return 1"
//     and the exact command sluice sends for one GCRA decision (its FCALL,
//     captured with MONITOR, keys spread with __rand_int__); rb-evalsha:
//     the EVALSHA it sends for the same decision as scripts;
//   - goredis-tiny, goredis-script: the same two commands from a go-redis
//     client in a plain loop;
//   - sluice: Limiter.Allow, which sends that command.
//
// The ratios say how much is the server and the network (rb-script), how
// much the Go client and runtime (goredis-script / rb-script) and how much
// sluice itself (sluice / goredis-script). Needs redis-benchmark on PATH.
func TestRedisSerialFloor(t *testing.T) {
	if _, err := exec.LookPath("redis-benchmark"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("redis-benchmark not on PATH (it comes with redis-tools)")
		}
		t.Skip("redis-benchmark not on PATH (it comes with redis-tools)")
	}
	ctx := context.Background()
	admin := newClient()
	defer admin.Close()
	flush(t, admin)
	host, port, _ := strings.Cut(redisAddr(), ":")

	rdb := newClient()
	defer rdb.Close()
	store, err := redisstore.New(rdb, redisstore.Config{Prefix: redisPrefix + ":floor:"})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	lim := sluice.New(store)
	limit := sluiceGCRA

	// Capture the command of one decision on a key ending in 12 digits,
	// which redis-benchmark's __rand_int__ can then vary: the FCALL sluice
	// sends by default and the EVALSHA it sends as scripts (Config.Scripts).
	const probe = "floor:000000000042"
	capture := func(l *sluice.Limiter, name string) []string {
		conn, err := net.DialTimeout("tcp", redisAddr(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		lines := bufio.NewReader(conn)
		if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
			t.Fatal(err)
		}
		if l, err := lines.ReadString('\n'); err != nil || !strings.HasPrefix(l, "+OK") {
			t.Fatalf("MONITOR: %q %v", l, err)
		}
		if _, err := l.Allow(ctx, probe, limit); err != nil {
			t.Fatal(err)
		}
		for {
			l, err := lines.ReadString('\n')
			if err != nil {
				t.Fatalf("MONITOR showed no %s: %v", name, err)
			}
			if strings.Contains(strings.ToUpper(l), `"`+name+`"`) {
				if c := monitorArgs(l); len(c) >= 4 {
					t.Logf("sluice sends: %q", c)
					return c
				}
			}
		}
	}
	// (the first call loads the function library, which MONITOR shows first)
	command := capture(lim, "FCALL")
	scripted, err := redisstore.New(rdb, redisstore.Config{Prefix: redisPrefix + ":floor:", Scripts: true})
	if err != nil {
		t.Fatal(err)
	}
	defer scripted.Close()
	evalsha := capture(sluice.New(scripted), "EVALSHA")
	tiny, err := admin.ScriptLoad(ctx, "return 1").Result()
	if err != nil {
		t.Fatal(err)
	}

	const n = 20_000
	keyOf := func(i int) string { return fmt.Sprintf("floor:%012d", i%numKeys) }
	// withKey is a captured command with probe's key index replaced.
	withKey := func(command []string, k string) []any {
		args := make([]any, len(command))
		for i, a := range command {
			args[i] = strings.ReplaceAll(a, probe, k)
		}
		return args
	}
	spread := make([][]any, numKeys)
	for i := range spread {
		spread[i] = withKey(command, keyOf(i))
	}
	rbFor := func(command []string) []string {
		args := []string{"-h", host, "-p", port, "-n", strconv.Itoa(n), "-c", "1", "-r", strconv.Itoa(numKeys), "-q"}
		for _, a := range withKey(command, "floor:__rand_int__") {
			args = append(args, a.(string))
		}
		return args
	}
	rbArgs, rbEvalArgs := rbFor(command), rbFor(evalsha)

	type result struct {
		rbTiny, rbScript, rbEval, goTiny, goScript, sluice, goTinyCPU, goScriptCPU, sluiceCPU float64
	}
	var rounds []result
	for round := range 6 {
		var r result
		r.rbTiny = redisBenchmark(t, "-h", host, "-p", port, "-n", strconv.Itoa(n), "-c", "1", "-q", "EVALSHA", tiny, "0")
		r.rbScript = redisBenchmark(t, rbArgs...)
		r.rbEval = redisBenchmark(t, rbEvalArgs...)
		r.goTiny, r.goTinyCPU = timeLoop(n, func(int) error { return rdb.EvalSha(ctx, tiny, nil).Err() })
		r.goScript, r.goScriptCPU = timeLoop(n, func(i int) error { return rdb.Do(ctx, spread[i%numKeys]...).Err() })
		r.sluice, r.sluiceCPU = timeLoop(n, func(i int) error {
			_, err := lim.Allow(ctx, keyOf(i), limit)
			return err
		})
		if round > 0 { // the first round warms the keys
			rounds = append(rounds, r)
		}
		t.Logf("round %d µs/call: rb-tiny %.1f rb-script %.1f rb-evalsha %.1f goredis-tiny %.1f goredis-script %.1f sluice %.1f; "+
			"client CPU µs/call: goredis-tiny %.1f goredis-script %.1f sluice %.1f",
			round, r.rbTiny, r.rbScript, r.rbEval, r.goTiny, r.goScript, r.sluice, r.goTinyCPU, r.goScriptCPU, r.sluiceCPU)
	}
	median := func(f func(result) float64) float64 {
		xs := make([]float64, len(rounds))
		for i, r := range rounds {
			xs[i] = f(r)
		}
		slices.Sort(xs)
		return xs[len(xs)/2]
	}
	t.Logf("medians of %d rounds (per-round ratios): sluice / rb-evalsha %.2fx, sluice / rb-script %.2fx, sluice / goredis-script %.2fx, "+
		"goredis-script / rb-script %.2fx, goredis-tiny / rb-tiny %.2fx, rb-script / rb-tiny %.2fx",
		len(rounds),
		median(func(r result) float64 { return r.sluice / r.rbEval }),
		median(func(r result) float64 { return r.sluice / r.rbScript }),
		median(func(r result) float64 { return r.sluice / r.goScript }),
		median(func(r result) float64 { return r.goScript / r.rbScript }),
		median(func(r result) float64 { return r.goTiny / r.rbTiny }),
		median(func(r result) float64 { return r.rbScript / r.rbTiny }))
	t.Logf("client CPU per call, medians: goredis-script %.1f µs, sluice %.1f µs",
		median(func(r result) float64 { return r.goScriptCPU }), median(func(r result) float64 { return r.sluiceCPU }))
}

// monitorArgs returns the quoted arguments of a MONITOR line.
func monitorArgs(line string) []string {
	var args []string
	for _, m := range monitorArg.FindAllStringSubmatch(line, -1) {
		s, err := strconv.Unquote(`"` + m[1] + `"`)
		if err != nil {
			s = m[1]
		}
		args = append(args, s)
	}
	return args
}

var monitorArg = regexp.MustCompile(`"((?:[^"\\]|\\.)*)"`)

// redisBenchmark runs redis-benchmark and returns its µs per request.
func redisBenchmark(t *testing.T, args ...string) float64 {
	t.Helper()
	out, err := exec.Command("redis-benchmark", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-benchmark: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`([0-9.]+) requests per second`).FindAllSubmatch(out, -1)
	if m == nil {
		t.Fatalf("redis-benchmark printed no rate:\n%s", out)
	}
	rps, _ := strconv.ParseFloat(string(m[len(m)-1][1]), 64)
	return 1e6 / rps
}

// timeLoop runs f n times and returns the wall-clock µs per call and the
// process's CPU µs (user and system) per call; it panics on an error.
func timeLoop(n int, f func(i int) error) (wall, cpu float64) {
	cpu0 := processCPU()
	start := time.Now()
	for i := range n {
		if err := f(i); err != nil {
			panic(err)
		}
	}
	wall = float64(time.Since(start).Microseconds()) / float64(n)
	return wall, float64((processCPU() - cpu0).Microseconds()) / float64(n)
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
