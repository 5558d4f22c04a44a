#!/usr/bin/env bash
# Records crates/cli/startup.order: the functions of the dsh binary that a headless run
# executes, which crates/cli/build.rs has the linker place side by side in release builds
# (see the comment there). Runs the mock-LLM scenarios a-hello and c-loop20 of ../shared/bench
# under callgrind and keeps the binary's functions in first-seen order.
#   usage: bench/startup-order.sh [BIN]   (default: builds target/release/dsh)
#          bench/startup-order.sh --check BIN
# Needs valgrind. Re-run it after larger changes; a stale list only costs memory (a change
# of a dependency's features renames most symbols: hello then mapped 7 MiB more).
# --check says how many listed functions a release binary still has under their recorded
# names, and fails below 94 %: then re-record from that binary and rebuild. (A list recorded
# from the same build keeps about 95.5 %: the rest are names the callgrind run saw that the
# release link folds away; a list one dependency change old kept 93 %.)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = --check ]; then
  [ $# -eq 2 ] || { echo "usage: bench/startup-order.sh --check BIN" >&2; exit 2; }
  listed=$(sort -u crates/cli/startup.order | wc -l)
  found=$(nm --defined-only "$2" | awk '{print $3}' | sort -u | comm -12 - <(sort -u crates/cli/startup.order) | wc -l)
  permille=$((1000 * found / (listed > 0 ? listed : 1)))
  echo "startup-order: $found of $listed listed functions are in $2 ($((permille / 10)).$((permille % 10)) %)"
  if [ "$permille" -lt 940 ]; then
    echo "startup-order: the list is stale for this build: bench/startup-order.sh $2, then rebuild" >&2
    exit 1
  fi
  exit 0
fi
shared=../shared/bench
[ -f "$shared/mockllm.py" ] || { echo "startup-order: ../shared/bench/mockllm.py is absent" >&2; exit 1; }
command -v valgrind >/dev/null || { echo "startup-order: valgrind is needed" >&2; exit 1; }
if [ $# -ge 1 ]; then
  BIN=$(realpath "$1")
else
  cargo build --release --bin dsh >&2
  BIN=${CARGO_TARGET_DIR:-$PWD/target}/release/dsh
fi
work=$(mktemp -d)
trap 'kill $MOCK 2>/dev/null || true; rm -rf "$work"' EXIT
export DSH_HOME=$work/home DEEPSEEK_API_KEY=sk-mock DSH_TELEMETRY_DISABLED=1
mkdir -p "$work/repo" "$DSH_HOME"

record() {  # $1 = scenario file, $2 = task, $3 = output
  python3 "$shared/mockllm.py" --port 0 --port-file "$work/port" --script "$1" --log "$work/mock.log" >/dev/null 2>&1 &
  MOCK=$!
  for _ in $(seq 50); do [ -s "$work/port" ] && break; sleep 0.1; done
  export DEEPSEEK_BASE_URL=http://127.0.0.1:$(cat "$work/port")
  # The first run creates the profile; the recorded one is a run as users see it.
  env -C "$work/repo" "$BIN" --profile headless "$2" >/dev/null
  curl -s -X POST "$DEEPSEEK_BASE_URL/_reset" >/dev/null
  env -C "$work/repo" valgrind --tool=callgrind --demangle=no --compress-strings=no \
    --callgrind-out-file="$3" "$BIN" --profile headless "$2" >/dev/null 2>"$work/valgrind.log"
  kill $MOCK; wait $MOCK 2>/dev/null || true; rm -f "$work/port"
}

record "$shared/scenarios/a-hello.json" "say hello" "$work/hello.cg"
record "$shared/scenarios/c-loop20.json" "run the twenty steps" "$work/loop.cg"
python3 - "$BIN" "$work/hello.cg" "$work/loop.cg" > crates/cli/startup.order <<'PY'
import sys
binary, seen, order = sys.argv[1], set(), []
for path in sys.argv[2:]:
    obj = None
    for line in open(path, errors="replace"):
        if line.startswith("ob="):
            obj = line[3:].strip()
        elif line.startswith("fn=") and obj == binary:
            name = line[3:].strip()
            if name not in seen and " " not in name:
                seen.add(name)
                order.append(name)
print("\n".join(order))
PY
echo "startup-order: $(wc -l < crates/cli/startup.order) functions in crates/cli/startup.order" >&2
