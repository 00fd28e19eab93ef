#!/usr/bin/env bash
# Instructions and cache misses per decision, independent of the machine's
# load: cachegrind (8 MB last-level cache simulated, no hardware prefetch)
# of instr/ at 300,000 and 100,000 decisions, difference / 200,000.
#
#   bench/instr.sh LIB KEYS PATH     e.g. bench/instr.sh sluice 100000 allowed
#
# Needs valgrind. GOGC=off and no asynchronous preemption keep the
# collector and signals out of the count.
set -euo pipefail
lib=$1 keys=$2 path=$3
dir=$(mktemp -d)
cd "$(dirname "$0")"
go build -o "$dir/instr" ./instr
run() {
	GODEBUG=asyncpreemptoff=1 GOGC=off valgrind --tool=cachegrind --cache-sim=yes --LL=8388608,16,64 \
		--cachegrind-out-file="$dir/out.$1" "$dir/instr" "$lib" "$keys" "$1" "$path" >"$dir/log.$1" 2>&1
	grep '^summary' "$dir/out.$1" | cut -d' ' -f2-
}
a=($(run 100000))
b=($(run 300000))
# events: Ir I1mr ILmr Dr D1mr DLmr Dw D1mw DLmw
awk -v lib="$lib" -v keys="$keys" -v path="$path" \
	-v ir=$((b[0] - a[0])) -v d1=$((b[4] + b[7] - a[4] - a[7])) -v ll=$((b[5] + b[8] - a[5] - a[8])) \
	'BEGIN { printf "%s keys=%s %s: %d instructions, %.2f D1 misses, %.2f LL misses per decision\n", lib, keys, path, ir / 200000, d1 / 200000, ll / 200000 }'
rm -rf "$dir"
