#!/usr/bin/env bash
# Where a later step's time goes: runs the c-loop20 scenario of ../shared/bench against its
# mock LLM with the `dsh_step` trace target on (DSH_LOG=dsh_step=trace) and prints, for the
# steps after the first, the median time of each traced point after the mock finished
# sending the previous response, up to the mock receiving the next request (the step gap
# run-all.sh reports).
#   usage: bench/step-phases.sh [BIN] [RUNS]   (default: builds target/release/dsh; 3 runs)
# Points: response end, tool barrier (the call made durable), write / write done (a log
# batch, fdatasync included), resident request / started / exited (the sandboxed command),
# tool done, request barrier (the result made durable), request sent.
set -euo pipefail
cd "$(dirname "$0")/.."
shared=../shared/bench
[ -f "$shared/mockllm.py" ] || { echo "step-phases: ../shared/bench/mockllm.py is absent" >&2; exit 1; }
if [ $# -ge 1 ]; then
  BIN=$(realpath "$1")
else
  cargo build --release --bin dsh >&2
  BIN=${CARGO_TARGET_DIR:-$PWD/target}/release/dsh
fi
RUNS=${2:-3}
work=$(mktemp -d)
trap 'kill $MOCK 2>/dev/null || true; rm -rf "$work"' EXIT
export DSH_HOME=$work/home DEEPSEEK_API_KEY=sk-mock DSH_TELEMETRY_DISABLED=1 NO_COLOR=1
mkdir -p "$work/repo" "$DSH_HOME"
python3 "$shared/mockllm.py" --port 0 --port-file "$work/port" --script "$shared/scenarios/c-loop20.json" \
  --log "$work/mock.jsonl" >/dev/null 2>&1 &
MOCK=$!
for _ in $(seq 50); do [ -s "$work/port" ] && break; sleep 0.1; done
export DEEPSEEK_BASE_URL=http://127.0.0.1:$(cat "$work/port")
for _ in $(seq "$RUNS"); do
  curl -s -X POST "$DEEPSEEK_BASE_URL/_reset" >/dev/null
  DSH_LOG=dsh_step=trace env -C "$work/repo" "$BIN" --profile headless "run the twenty steps" \
    >/dev/null 2>>"$work/trace"
done
python3 - "$work/mock.jsonl" "$work/trace" <<'PY'
import collections, datetime, json, re, statistics, sys

requests = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
loop = [r for r in requests if r.get("method") == "POST" and r.get("api") and not r.get("aux")]
points = []
line_re = re.compile(r"^(\S+Z)\s+TRACE\s+dsh_step:\s+(.*?)(?:\s+events=\d+)?\s*$")
for line in open(sys.argv[2], errors="replace"):
    m = line_re.match(re.sub(r"\x1b\[[0-9;]*m", "", line))
    if m:
        stamp = datetime.datetime.fromisoformat(m.group(1).replace("Z", "+00:00")).timestamp()
        points.append((stamp, m.group(2)))
if not points:
    sys.exit("step-phases: the binary printed no dsh_step trace (built without it?)")
offsets, gaps, step = collections.defaultdict(list), [], 0
for done, nxt in zip(loop, loop[1:]):
    if nxt.get("fresh"):
        step = 0
        continue
    step += 1
    if step < 2:
        continue  # the first step also starts the session's sandbox
    t0, t1 = done["t_done"], nxt["t_recv"]
    gaps.append((t1 - t0) * 1000)
    seen = collections.Counter()
    for t, name in points:
        if t0 <= t <= t1:
            seen[name] += 1
            offsets[(name, seen[name])].append((t - t0) * 1000)
print(f"later steps: {len(gaps)}, gap median {statistics.median(gaps):.2f} ms (mock done -> next request received)")
rows = [(statistics.median(v), k, len(v)) for k, v in offsets.items() if len(v) * 2 >= len(gaps)]
for at, (name, n), count in sorted(rows):
    label = name if n == 1 else f"{name} ({n})"
    print(f"  {at:6.2f} ms  {label}")
print(f"  {statistics.median(gaps):6.2f} ms  mock received the next request")
PY
