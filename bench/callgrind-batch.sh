#!/usr/bin/env bash
# Instructions the Redis server spends per sluice decision, counted by
# callgrind (independent of the machine's load, unlike wall-clock time).
#
#   bench/callgrind-batch.sh [BATCHES [CHECK]]
#
# Starts redis-server under valgrind --tool=callgrind on 127.0.0.1:6397,
# lets redisstore's TestBatchCost create 1,000 GCRA keys (per limit) and
# use each twice with instrumentation off, then counts BATCHES (default 100)
# batch scripts of 32 single decisions each, and prints the instructions
# per decision. With CHECK (1 to 3) it counts instead BATCHES x 32 lone
# calls, one after another, each a check of CHECK GCRA limits on keys of
# their own, and prints the instructions per call. SLUICE_BATCHCOST_KEYS=N
# spreads the batches' decisions over N keys instead of 1,000 (1: every
# decision on one key, a hot key's runs). Needs valgrind,
# redis-server and Go; stops only the server it started.
set -euo pipefail
batches=${1:-100}
check=${2:-}
export SLUICE_BATCHCOST_CHECK=$check
cd "$(dirname "$0")/../redisstore"
out=$(mktemp -d)
valgrind --tool=callgrind --callgrind-out-file="$out/cg.out" --instr-atstart=no \
	redis-server --port 6397 --bind 127.0.0.1 --save '' --appendonly no >"$out/valgrind.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true' EXIT
for _ in $(seq 100); do redis-cli -p 6397 ping >/dev/null 2>&1 && break; sleep 0.2; done
SLUICE_BATCHCOST_ADDR=127.0.0.1:6397 SLUICE_BATCHCOST_CALLGRIND=1 SLUICE_BATCHCOST_BATCHES=$batches \
	go test -count=1 -run '^TestBatchCost$' . >"$out/test.log" || { cat "$out/test.log" >&2; exit 1; }
ir=$(callgrind_annotate "$out/cg.out.1" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
if [ -n "$check" ]; then
	echo "$((ir / (batches * 32))) instructions per call ($((batches * 32)) lone checks of $check GCRA limits, $ir in all)"
else
	echo "$((ir / (batches * 32))) instructions per decision ($batches batches of 32 GCRA decisions, $ir in all)"
fi
if [ -n "${SLUICE_CG_KEEP:-}" ]; then cp "$out/cg.out.1" "$SLUICE_CG_KEEP"; fi
rm -rf "$out"
