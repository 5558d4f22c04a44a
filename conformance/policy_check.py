#!/usr/bin/env python3
"""Compares the policy records of each scenario's session logs with the recorded ones.

The shared runner leaves `permission/preset`, `sandbox/mode` and `approval/policy` out of its
v4 structure comparison on both sides (upstream 0.2 writes them on other occasions than the
v0 fixtures). This check puts them back, normalized instead of dropped: for every log (parent
and children, matched as the runner matches them) the sequence of policy records, each with
its data and the number of turns started before it, with a record that repeats the previous
value of its kind folded away. Both sides must agree.

usage: policy_check.py RESULTS.json SCENARIOS_DIR RUNNER   (RESULTS from run.py --keep --json)
Prints one line per scenario whose logs were compared; exits 1 when any differs.
"""
import importlib.util
import json
import os
import sys

POLICY = ("permission/preset", "sandbox/mode", "approval/policy")


def load_runner(path):
    spec = importlib.util.spec_from_file_location("conformance_run", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["conformance_run"] = module
    spec.loader.exec_module(module)
    return module


def policy_records(text):
    """[(turns started before it, kind, data)] with repeats of the same value folded."""
    out, turns, last = [], 0, {}
    for line in text.split("\n"):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        kind = rec.get("type") if isinstance(rec, dict) else None
        if kind == "turn/start":
            turns += 1
        elif kind in POLICY:
            data = json.dumps(rec.get("data"), sort_keys=True)
            if last.get(kind) == data:
                continue
            last[kind] = data
            out.append((turns, kind, data))
    return out


def main():
    results_path, scenarios, runner_path = sys.argv[1:4]
    run = load_runner(runner_path)
    results = json.load(open(results_path))["results"]
    failed = compared = 0
    for r in results:
        if r.get("log") not in ("PASS", "FAIL"):
            continue  # no log compared (no model turn upstream, or the scenario did not run)
        home = (r.get("dirs") or {}).get("home")
        if not home or not os.path.isdir(home):
            print(f"policy {r['name']}: FAIL (the harvested logs were not kept)")
            failed += 1
            continue
        sdir = os.path.join(scenarios, r["name"])
        fixtures = run.session_fixture_names(sorted(os.listdir(sdir)))
        logs, _ = run.harvest_logs(home)
        problems = []
        if len(logs) != len(fixtures):
            problems.append(f"{len(logs)} logs for {len(fixtures)} recorded")
        for log, name in zip(logs, fixtures):
            ours = policy_records(log.content)
            with open(os.path.join(sdir, name), encoding="utf-8") as f:
                recorded = policy_records(f.read())
            if ours != recorded:
                problems.append(f"{name}: recorded {recorded}, ours {ours}")
        compared += 1
        if problems:
            failed += 1
            print(f"policy {r['name']}: FAIL ({'; '.join(problems)})")
    print(f"policy records: {compared - failed} of {compared} compared scenarios agree")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
