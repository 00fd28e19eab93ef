//go:build redisbench

package bench_test

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// TestRedisOneKeyCost sends, for each library of BenchmarkRedisOneKey,
// 1,000 serial decisions on one key to warm up and then
// REDISBENCH_ONEKEY_CALLS (default 2,000) more, and reports the server's
// time per decision from INFO commandstats. Under callgrind-onekey.sh
// (REDISBENCH_CALLGRIND=1, the server run by valgrind --tool=callgrind
// with instrumentation off) it turns the instrumentation on for the
// measured calls of each library alone and dumps its counts after them,
// one dump per library in the order of oneKeyLibs.
func TestRedisOneKeyCost(t *testing.T) {
	ctx := context.Background()
	calls := 2000
	if v := os.Getenv("REDISBENCH_ONEKEY_CALLS"); v != "" {
		var err error
		if calls, err = strconv.Atoi(v); err != nil || calls < 1 {
			t.Fatalf("REDISBENCH_ONEKEY_CALLS=%q: want a count", v)
		}
	}
	callgrind := os.Getenv("REDISBENCH_CALLGRIND") == "1"
	admin := newClient()
	defer admin.Close()
	flush(t, admin)
	control := func(args ...string) {
		info, err := admin.Info(ctx, "server").Result()
		if err != nil {
			t.Fatal(err)
		}
		var pid string
		for _, l := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(l, "process_id:"); ok {
				pid = v
			}
		}
		if out, err := exec.Command("callgrind_control", append(args, pid)...).CombinedOutput(); err != nil {
			t.Fatalf("callgrind_control %v %s: %v\n%s", args, pid, err, out)
		}
	}
	for _, lib := range redisLibs {
		if !oneOf(lib.name, oneKeyLibs) {
			continue
		}
		rdb := newClient()
		allow, closer, err := lib.new(rdb)
		if err != nil {
			t.Fatal(err)
		}
		for range 1000 {
			if _, err := allow(ctx, "one"); err != nil {
				t.Fatal(err)
			}
		}
		before, err := commandStats(ctx, admin)
		if err != nil {
			t.Fatal(err)
		}
		if callgrind {
			control("-i", "on")
			control("-z")
		}
		for range calls {
			if ok, err := allow(ctx, "one"); err != nil || !ok {
				t.Fatalf("%s: %v %v", lib.name, ok, err)
			}
		}
		if callgrind {
			control("-d", lib.name)
			control("-i", "off")
		}
		after, err := commandStats(ctx, admin)
		if err != nil {
			t.Fatal(err)
		}
		usec, _, detail := serverTime(before, after)
		t.Logf("%-16s %.2f µs of server time per decision (%s)", lib.name, float64(usec)/float64(calls), detail)
		closer()
		rdb.Close()
	}
}
