#!/usr/bin/env bash
# A/B whole-process comparison of two dsh invocations on one scripted mock scenario,
# alternating runs in one sitting (the machine is shared: only same-sitting medians compare).
#   usage: bench/ab.sh SCENARIO N 'ARGS A' 'ARGS B'
#   e.g.   bench/ab.sh c-loop20 11 'headless go' 'headless --verbose go'
#          bench/ab.sh c-loop20 9 'headless go' 'headless --patch /tmp/landlock.yml go'
# Env: BIN (default target/release/dsh), ENV_A / ENV_B (extra `env` assignments per side).
set -euo pipefail
cd "$(dirname "$0")/.."
scenario=$1 n=$2 args_a=$3 args_b=$4
shared=../shared/bench
[ -f "$shared/mockllm.py" ] || { echo "bench: ../shared/bench/mockllm.py is absent" >&2; exit 1; }
BIN=${BIN:-$PWD/target/release/dsh}
[ -x "$BIN" ] || cargo build --release --bin dsh >&2
work=$(mktemp -d)
trap 'kill $MOCK 2>/dev/null || true; rm -rf "$work"' EXIT
export DSH_HOME=$work/home DEEPSEEK_API_KEY=sk-mock DSH_TELEMETRY_DISABLED=1
mkdir -p "$work/repo" "$DSH_HOME"
python3 "$shared/mockllm.py" --port 0 --port-file "$work/port" --script "$shared/scenarios/$scenario.json" >/dev/null 2>&1 &
MOCK=$!
for _ in $(seq 50); do [ -s "$work/port" ] && break; sleep 0.1; done
export DEEPSEEK_BASE_URL=http://127.0.0.1:$(cat "$work/port")
median() { sort -n | awk '{a[NR]=$1} END {printf "%.1f", ((NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2)/1000}'; }
a=(); b=()
for _ in $(seq "$n"); do
  for side in A B; do
    curl -s -X POST "$DEEPSEEK_BASE_URL/_reset" >/dev/null
    if [ $side = A ]; then args=$args_a extra=${ENV_A:-}; else args=$args_b extra=${ENV_B:-}; fi
    t0=$(date +%s%N)
    # shellcheck disable=SC2086
    env -C "$work/repo" $extra "$BIN" $args >/dev/null 2>&1
    t1=$(date +%s%N)
    if [ $side = A ]; then a+=($(( (t1 - t0) / 1000 ))); else b+=($(( (t1 - t0) / 1000 ))); fi
  done
done
echo "$scenario: A ($args_a) median $(printf '%s\n' "${a[@]}" | median) ms | B ($args_b) median $(printf '%s\n' "${b[@]}" | median) ms"
