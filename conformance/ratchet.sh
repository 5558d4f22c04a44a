#!/usr/bin/env bash
# Runs upstream's recorded ACP scenarios (../shared/conformance) against our binary and fails
# if any scenario listed in conformance/passing.txt no longer passes at every level it is
# compared at. A scenario counts as passing at both levels only when both were compared: its
# stdout, and its session logs (structure through the shared runner, policy records through
# conformance/policy_check.py). Scenarios upstream records no log for (no model turn) are
# listed as `<name> stdout-only` and counted apart. Skips cleanly without ../shared.
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
trap 'rm -f "$out"' EXIT
# Every scenario runs, so the figures below describe the whole suite, not just the ratchet.
python3 "$shared/run.py" --agent "$bin acp --compositions $PWD/conformance/compositions" --scenarios "$shared/acp" -j 2 --keep --json "$out" >/dev/null 2>&1 || true
status=0
python3 conformance/policy_check.py "$out" "$shared/acp" "$shared/run.py" || status=1
python3 - "$out" conformance/passing.txt <<'PY' || status=1
import json, sys
results = {r["name"]: r for r in json.load(open(sys.argv[1]))["results"]}
listed = {}
for line in open(sys.argv[2]):
    line = line.strip()
    if not line or line.startswith("#"):
        continue
    name, _, level = line.partition(" ")
    listed[name] = level.strip() or "both"

NO_LOG = "scenario has no model turn"

def verdict(r):
    """both / stdout-only / failed / not-run"""
    if r.get("stdout") == "SKIP":
        return "not-run"
    if r.get("stdout") != "PASS":
        return "failed"
    if r.get("log") == "PASS":
        return "both"
    if r.get("log") == "SKIP" and NO_LOG in (r.get("log_reason") or ""):
        return "stdout-only"
    return "failed"

by = {}
for name, r in results.items():
    by.setdefault(verdict(r), []).append(name)
print(f"both levels compared and passing: {len(by.get('both', []))} of {len(results)} scenarios")
print(f"stdout only (upstream records no log for them): {len(by.get('stdout-only', []))}: " + ", ".join(sorted(by.get('stdout-only', []))))
for name in sorted(by.get("failed", [])):
    r = results[name]
    print(f"failing: {name}: stdout {r.get('stdout')} ({r.get('stdout_reason') or r.get('error') or ''}), log {r.get('log')} ({r.get('log_reason') or ''})")
for name in sorted(by.get("not-run", [])):
    print(f"not run: {name}: {results[name].get('stdout_reason') or results[name].get('error') or 'skipped by the runner'}")
bad = []
for name, level in listed.items():
    r = results.get(name)
    if r is None:
        bad.append(f"{name}: not run")
        continue
    got = verdict(r)
    if got != level:
        bad.append(f"{name}: listed as {level}, now {got}: stdout {r.get('stdout')} ({r.get('stdout_reason') or r.get('error') or ''}), log {r.get('log')} ({r.get('log_reason') or ''})")
new = [n for n in by.get("both", []) + by.get("stdout-only", []) if n not in listed]
if new:
    print("passing now but not in conformance/passing.txt (add them): " + ", ".join(sorted(new)))
if bad:
    print("conformance ratchet FAILED:")
    for b in bad:
        print("  " + b)
    sys.exit(1)
print(f"conformance ratchet: all {len(listed)} listed scenarios pass at the levels listed")
PY
# The kept scenario folders (the policy check reads them) go now.
python3 - "$out" <<'PY'
import json, shutil, sys
for r in json.load(open(sys.argv[1]))["results"]:
    for d in (r.get("dirs") or {}).values():
        shutil.rmtree(d, ignore_errors=True)
PY
exit $status
