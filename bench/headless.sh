#!/usr/bin/env bash
# Whole-process wall time and peak RSS of `dsh --profile headless` against the scripted mock
# LLM of ../shared/bench (loopback). Prints the median of N runs per scenario.
#   usage: bench/headless.sh [N]          (default N=10; builds target/release/dsh first)
# Scenarios: a-hello (one text answer), c-loop20 (twenty bash steps), from ../shared/bench.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-10}
shared=../shared/bench
[ -f "$shared/mockllm.py" ] || { echo "bench: ../shared/bench/mockllm.py is absent" >&2; exit 1; }
cargo build --release --bin dsh >&2
BIN=${CARGO_TARGET_DIR:-$PWD/target}/release/dsh
work=$(mktemp -d)
trap 'kill $MOCK 2>/dev/null || true; rm -rf "$work"' EXIT
export DSH_HOME=$work/home DEEPSEEK_API_KEY=sk-mock DSH_TELEMETRY_DISABLED=1
mkdir -p "$work/repo" "$DSH_HOME"

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

run_scenario() {  # $1 = scenario file, $2 = task
  python3 "$shared/mockllm.py" --port 0 --port-file "$work/port" --script "$1" --log "$work/mock.log" >/dev/null 2>&1 &
  MOCK=$!
  for _ in $(seq 50); do [ -s "$work/port" ] && break; sleep 0.1; done
  export DEEPSEEK_BASE_URL=http://127.0.0.1:$(cat "$work/port")
  local walls=() rss=()
  for _ in $(seq "$N"); do
    curl -s -X POST "$DEEPSEEK_BASE_URL/_reset" >/dev/null
    local t0 t1
    t0=$(date +%s%N)
    /usr/bin/time -f "%M" -o "$work/t" env -C "$work/repo" "$BIN" --profile headless "$2" >/dev/null
    t1=$(date +%s%N)
    walls+=("$(( (t1 - t0) / 1000 ))"); rss+=("$(cat "$work/t")")
  done
  kill $MOCK; wait $MOCK 2>/dev/null || true; rm -f "$work/port"
  echo "$(basename "$1" .json): wall_median_ms=$(printf '%s\n' "${walls[@]}" | median | awk '{printf "%.1f", $1/1000}') peak_rss_median_mib=$(printf '%s\n' "${rss[@]}" | median | awk '{printf "%.1f", $1/1024}')"
}

run_scenario "$shared/scenarios/a-hello.json" "say hello"
run_scenario "$shared/scenarios/c-loop20.json" "run the twenty steps"
