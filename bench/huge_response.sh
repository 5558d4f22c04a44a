#!/usr/bin/env bash
# Peak RSS of one headless run whose model answers with one huge streamed response
# (bench/huge_response.py), measured with /usr/bin/time -v.
#   usage: bench/huge_response.sh MIB [DELTA_BYTES] [PROTOCOL] [extra dsh args...]
#   e.g.   bench/huge_response.sh 64            (64 MiB of 4-character chat deltas)
#          bench/huge_response.sh 64 4096       (64 MiB of 4 KiB deltas)
#          bench/huge_response.sh 512 4 chat --patch /tmp/limit.yml
# Env: BIN (default $CARGO_TARGET_DIR/debug/dsh, else target/debug/dsh).
set -euo pipefail
cd "$(dirname "$0")/.."
mib=$1 delta=${2:-4} protocol=${3:-chat}
shift $(( $# < 3 ? $# : 3 ))
BIN=${BIN:-${CARGO_TARGET_DIR:-$PWD/target}/debug/dsh}
work=$(mktemp -d)
trap 'kill $MOCK 2>/dev/null || true; rm -rf "$work"' EXIT
export DSH_HOME=$work/home DEEPSEEK_API_KEY=sk-mock DSH_TELEMETRY_DISABLED=1
mkdir -p "$work/repo" "$DSH_HOME"
# The DeepSeek route speaks Messages when asked to (as upstream 0.2's does by default).
[ "$protocol" = anthropic ] && printf 'llm-deepseek:\n  api: anthropic-messages\n' >"$DSH_HOME/settings.yaml"
python3 bench/huge_response.py --port-file "$work/port" --mib "$mib" --delta-bytes "$delta" \
  --protocol "$protocol" &
MOCK=$!
for _ in $(seq 50); do [ -s "$work/port" ] && break; sleep 0.1; done
export DEEPSEEK_BASE_URL=http://127.0.0.1:$(cat "$work/port")
set +e
/usr/bin/time -v -o "$work/time" env -C "$work/repo" "$BIN" --profile headless -q "$@" "say something long" \
  >"$work/out" 2>"$work/err"
status=$?
set -e
echo "exit=$status stdout_bytes=$(wc -c <"$work/out")"
tail -n 3 "$work/err"
grep -E "Maximum resident set size|Elapsed \(wall" "$work/time"
du -sh "$DSH_HOME/sessions" 2>/dev/null | cut -f1 | sed 's/^/session_log=/'
