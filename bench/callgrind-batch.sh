#!/usr/bin/env bash
# Instructions the Redis server spends per sluice decision, counted by
# callgrind (independent of the machine's load, unlike wall-clock time).
#
#   bench/callgrind-batch.sh [BATCHES]
#
# Starts redis-server under valgrind --tool=callgrind on 127.0.0.1:6397,
# lets redisstore's TestBatchCost create 1,000 GCRA keys and load the
# scripts with instrumentation off, then counts BATCHES (default 100)
# batch scripts of 32 single decisions each, and prints the instructions
# per decision. Needs valgrind, redis-server and Go; stops only the server
# it started.
set -euo pipefail
batches=${1:-100}
cd "$(dirname "$0")/../redisstore"
out=$(mktemp -d)
valgrind --tool=callgrind --callgrind-out-file="$out/cg.out" --instr-atstart=no \
	redis-server --port 6397 --bind 127.0.0.1 --save '' --appendonly no >"$out/valgrind.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true' EXIT
for _ in $(seq 100); do redis-cli -p 6397 ping >/dev/null 2>&1 && break; sleep 0.2; done
export SLUICE_BATCHCOST_ADDR=127.0.0.1:6397
SLUICE_BATCHCOST_BATCHES=10 go test -count=1 -run '^TestBatchCost$' . >/dev/null
callgrind_control -i on $pid >/dev/null
SLUICE_BATCHCOST_WARM=0 SLUICE_BATCHCOST_BATCHES=$batches go test -count=1 -run '^TestBatchCost$' . >/dev/null
callgrind_control -d $pid >/dev/null
ir=$(callgrind_annotate "$out/cg.out.1" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
echo "$((ir / (batches * 32))) instructions per decision ($batches batches of 32 GCRA decisions, $ir in all)"
rm -rf "$out"
