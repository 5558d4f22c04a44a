#!/usr/bin/env bash
# Runs upstream's recorded ACP scenarios (../shared/conformance) against our binary and
# fails if any scenario listed in conformance/passing.txt no longer passes (stdout and,
# where the scenario compares logs, the log structure). Skips cleanly without ../shared.
set -euo pipefail
cd "$(dirname "$0")/.."
shared="../shared/conformance"
if [ ! -f "$shared/run.py" ]; then
  echo "conformance: ../shared/conformance is absent; skipping the ratchet"
  exit 0
fi
cargo build --bin dsh
bin="$PWD/target/debug/dsh"
list=$(cat conformance/passing.txt conformance/passing-stdout.txt | grep -v '^\s*#' | grep -v '^\s*$' | paste -sd, -)
if [ -z "$list" ]; then
  echo "conformance: no scenarios listed"
  exit 0
fi
out=$(mktemp)
python3 "$shared/run.py" --agent "$bin acp" --scenarios "$shared/acp" --only "$list" -j 2 --json "$out" || true
python3 - "$out" conformance/passing.txt conformance/passing-stdout.txt <<'PY'
import json, sys
results = {r["name"]: r for r in json.load(open(sys.argv[1]))["results"]}
def names(path):
    return [l.strip() for l in open(path) if l.strip() and not l.lstrip().startswith("#")]
want = names(sys.argv[2])
stdout_only = names(sys.argv[3])
bad = []
for name in stdout_only:
    r = results.get(name)
    if r is None or r.get("stdout") != "PASS":
        bad.append(f"{name}: stdout {r and r.get('stdout')} ({r and (r.get('stdout_reason') or r.get('error'))})")
for name in want:
    r = results.get(name)
    if r is None:
        bad.append(f"{name}: not run")
    elif r.get("stdout") != "PASS":
        bad.append(f"{name}: stdout {r.get('stdout')} ({r.get('stdout_reason') or r.get('error')})")
    elif r.get("log") == "FAIL":
        bad.append(f"{name}: log FAIL ({r.get('log_reason')})")
if bad:
    print("conformance ratchet FAILED:")
    for b in bad:
        print("  " + b)
    sys.exit(1)
print(f"conformance ratchet: all {len(want)} full and {len(stdout_only)} stdout-level scenarios pass")
PY
