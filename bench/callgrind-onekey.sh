#!/usr/bin/env bash
# Instructions the Redis server spends per decision on one key, for sluice
# and the peers of BenchmarkRedisOneKey, counted by callgrind (independent
# of the machine's load, unlike wall-clock time).
#
#   bench/callgrind-onekey.sh [CALLS [PORT]]
#
# Starts redis-server under valgrind --tool=callgrind on 127.0.0.1:PORT
# (default 6433), runs TestRedisOneKeyCost, which warms each library up and
# then counts CALLS (default 2,000) serial decisions of it alone, and
# prints the instructions per decision of each. SLUICE_CG_KEEP=DIR keeps
# the dumps there (callgrind_annotate them for the functions). Needs
# valgrind, redis-server and Go; stops only the server it started.
set -euo pipefail
calls=${1:-2000}
port=${2:-6433}
cd "$(dirname "$0")"
out=$(mktemp -d)
valgrind --tool=callgrind --callgrind-out-file="$out/cg.out" --instr-atstart=no \
	redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no >"$out/valgrind.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true' EXIT
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.2; done
REDISBENCH_ADDR=127.0.0.1:$port REDISBENCH_CALLGRIND=1 REDISBENCH_ONEKEY_CALLS=$calls \
	go test -tags redisbench -count=1 -run '^TestRedisOneKeyCost$' -v . >"$out/test.log" || { cat "$out/test.log" >&2; exit 1; }
i=1
for lib in $(grep -o '^ *redis_onekey_cost_test.go:[0-9]*: [a-z_-]*' "$out/test.log" | awk '{print $2}'); do
	ir=$(awk '/^totals:/ {print $2}' "$out/cg.out.$i")
	echo "$lib: $((ir / calls)) instructions per decision ($calls decisions on one key, $ir in all)"
	i=$((i + 1))
done
if [ -n "${SLUICE_CG_KEEP:-}" ]; then mkdir -p "$SLUICE_CG_KEEP" && cp "$out"/cg.out.* "$SLUICE_CG_KEEP"/; fi
rm -rf "$out"
