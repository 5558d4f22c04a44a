#!/usr/bin/env bash
# Runs upstream's recorded ACP scenarios (../shared/conformance) against our binary and fails
# if any scenario listed in conformance/passing.txt no longer passes. A scenario counts as
# passing only at both levels: its stdout, and its session log wherever the scenario has
# one (stdout alone is mostly replayed model text). Skips cleanly without ../shared.
set -euo pipefail
cd "$(dirname "$0")/.."
shared="../shared/conformance"
if [ ! -f "$shared/run.py" ]; then
  echo "conformance: ../shared/conformance is absent; skipping the ratchet"
  exit 0
fi
# dsh-conformance is dsh plus the fixture plugins of upstream's snapshot suite (the
# production dsh has none); it reads the scenario's composition (DSH_SNAPSHOT_CONFIG) from
# conformance/compositions/.
cargo build --bin dsh-conformance
bin="${CARGO_TARGET_DIR:-$PWD/target}/debug/dsh-conformance"
out=$(mktemp)
# Every scenario runs, so the figures below describe the whole suite, not just the ratchet.
python3 "$shared/run.py" --agent "$bin acp --compositions $PWD/conformance/compositions" --scenarios "$shared/acp" -j 2 --json "$out" >/dev/null 2>&1 || true
python3 - "$out" conformance/passing.txt <<'PY'
import json, sys
results = {r["name"]: r for r in json.load(open(sys.argv[1]))["results"]}
want = [l.strip() for l in open(sys.argv[2]) if l.strip() and not l.lstrip().startswith("#")]

def full_pass(r):
    return r.get("stdout") == "PASS" and r.get("log") in ("PASS", "SKIP")

log_pass = sum(1 for r in results.values() if r.get("log") == "PASS")
log_fail = sum(1 for r in results.values() if r.get("log") == "FAIL")
full = sorted(n for n, r in results.items() if full_pass(r))
stdout_only = sorted(n for n, r in results.items() if r.get("stdout") == "PASS" and r.get("log") == "FAIL")
print(f"log level: {log_pass} passed, {log_fail} failed")
print(f"both levels: {len(full)} of {len(results)} scenarios pass")
print(f"stdout only (not counted as passing): {len(stdout_only)}")
bad = []
for name in want:
    r = results.get(name)
    if r is None:
        bad.append(f"{name}: not run")
    elif not full_pass(r):
        bad.append(f"{name}: stdout {r.get('stdout')} ({r.get('stdout_reason') or r.get('error')}), log {r.get('log')} ({r.get('log_reason')})")
new = [n for n in full if n not in want]
if new:
    print("passing now but not in conformance/passing.txt (add them): " + ", ".join(new))
if bad:
    print("conformance ratchet FAILED:")
    for b in bad:
        print("  " + b)
    sys.exit(1)
print(f"conformance ratchet: all {len(want)} listed scenarios pass at both levels")
PY
