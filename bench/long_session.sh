#!/usr/bin/env bash
# The long-session benchmark of issue #10: one scripted headless session of STEPS bash steps
# (each prints 2 KB) against ../shared/bench's mock LLM on loopback. Reports, per run: harness
# overhead per step near step 10 and near the last step (target: within 1.5x), peak RSS, and
# the cacheable prefix (share of each request's bytes repeating the previous request's prefix
# byte for byte, between compactions; target >= 95%).
#   usage: bench/long_session.sh [STEPS] [WINDOW]     (defaults 500 and 100000)
# Runs: this build with its default context window, this build with DSH_CONTEXT_WINDOW=WINDOW
# (compaction active), and upstream dsh 0.2.1 when DSH2_BIN names its executable (.ci/run's
# virtualenv; see ../shared/bench/run-dsh2.sh), on the same script.
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-500}
WINDOW=${2:-100000}
shared=../shared/bench
[ -f "$shared/mockllm.py" ] || { echo "bench: ../shared/bench/mockllm.py is absent" >&2; exit 1; }
cargo build --release --bin dsh >&2
BIN=${CARGO_TARGET_DIR:-$PWD/target}/release/dsh
work=$(mktemp -d)
MOCK=
trap '[ -n "$MOCK" ] && kill $MOCK 2>/dev/null; rm -rf "$work"' EXIT
cat > "$work/script.json" <<JSON
{"steps": [
  {"repeat": $STEPS, "step": {"shell": "yes step-{i}-0123456789abcdefghijklmnopqrstuvwxyz | head -c 2048"}},
  {"text": "loop finished"}
], "done_text": "done", "aux_when_no_tools": true, "aux_text": "Mock title"}
JSON
TASK="Run the benchmark loop: $STEPS shell steps, one after the other."

run() {  # $1 = label, then the command (run in a fresh home and workspace)
  local label=$1; shift
  local home=$work/home-$label repo=$work/repo-$label log=$work/$label.jsonl
  mkdir -p "$home" "$repo"
  python3 bench/long_session.py mock --bench "$shared" --port 0 --port-file "$work/port" \
    --script "$work/script.json" --log "$log" --no-bodies --no-auto-reset 2>/dev/null &
  MOCK=$!
  for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.05; done
  local t0 t1
  t0=$(date +%s%N)
  env -C "$repo" HOME="$home" DSH_HOME="$home/.dsh" DSH_TELEMETRY_DISABLED=1 DEEPSEEK_API_KEY=sk-mock \
    DEEPSEEK_BASE_URL="http://127.0.0.1:$(cat "$work/port")" \
    /usr/bin/time -f "%M" -o "$work/$label.rss" "$@" "$TASK" </dev/null >"$work/$label.out" 2>"$work/$label.err" \
    || { echo "$label: exit $? ($(tail -n 3 "$work/$label.err"))" >&2; }
  t1=$(date +%s%N)
  kill $MOCK 2>/dev/null; wait $MOCK 2>/dev/null || true; MOCK=; rm -f "$work/port"
  echo "$label: wall_s=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", (b-a)/1e9}') peak_rss_mib=$(awk '{printf "%.1f", $1/1024}' "$work/$label.rss") $(python3 bench/long_session.py analyze "$log")"
}

run rust-dsh "$BIN" --profile headless
run rust-dsh-window-$WINDOW env DSH_CONTEXT_WINDOW="$WINDOW" "$BIN" --profile headless
if [ -n "${DSH2_BIN:-}" ] && [ -x "$DSH2_BIN" ]; then
  run upstream-0.2.1 env DSH_PERMISSION_MODE=danger-full-access "$DSH2_BIN" headless
else
  echo "upstream-0.2.1: skipped (set DSH2_BIN to the executable of PyPI deepseek-harness-runtime-bin)"
fi
