#!/usr/bin/env python3
"""The recorded reference of the `rich` ACP projection (what `dsh acp` sends by default).

Runs every shown scenario of ../shared/conformance/acp against an agent in the rich
projection, with the conformance runner's own harness (run.py: same client frames, same
replayed model, same normalization of ids, times and paths), and

* checks every frame the agent sent against the official ACP SDK's schemas
  (validate.mjs), and
* compares the normalized stream with golden/<scenario>.jsonl, or with --record writes it.

Usage: rich.py --agent 'CMD ARGS' --shared ../shared/conformance [--record] [--only a,b] [-j 2]
Exits 0 when every scenario matches its golden file and every frame validates.
"""

from __future__ import annotations

import argparse
import difflib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, 'golden')

# Scenarios whose composition this build does not serve yet (no PowerShell tools): the
# agent stops at boot, so there is no rich stream to keep.
NOT_SERVED = {'pwsh-tool-turn', 'persistent-pwsh-tool-turn'}


def load_runner(shared: str):
    spec = importlib.util.spec_from_file_location('acp_runner', os.path.join(shared, 'run.py'))
    if spec is None or spec.loader is None:
        raise SystemExit(f'rich.py: cannot load {shared}/run.py')
    module = importlib.util.module_from_spec(spec)
    sys.modules['acp_runner'] = module
    spec.loader.exec_module(module)
    # Remember which method each client request named, so responses can be validated.
    send = module.AcpConnection._send

    def recording_send(self, message):
        if isinstance(message, dict) and 'method' in message and 'id' in message:
            self.__dict__.setdefault('sent_methods', {})[json.dumps(message['id'])] = message['method']
        send(self, message)

    module.AcpConnection._send = recording_send
    return module


ISO_TIME = re.compile(r'\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})')


def _times(value):
    if isinstance(value, str):
        return '{{time}}' if ISO_TIME.fullmatch(value) else value
    if isinstance(value, list):
        return [_times(v) for v in value]
    if isinstance(value, dict):
        return {k: _times(v) for k, v in value.items()}
    return value


def normalize(runner, stream: str) -> str:
    """The runner's normalization plus wall-clock timestamps (`updatedAt` of session info
    updates), which the committed projection never sends."""
    lines = []
    for line in stream.splitlines():
        lines.append(runner.js_dumps(_times(runner.js_loads(line))) if line.strip() else line)
    return '\n'.join(lines) + ('\n' if stream.endswith('\n') else '')


def run_scenario(runner, sdir: str, argv: list[str], opts) -> dict:
    name = os.path.basename(sdir)
    meta = runner.load_meta(sdir)
    run = runner.ScenarioRun(sdir, argv, opts, meta)
    try:
        outcome = run.execute()
    except Exception as error:  # noqa: BLE001 - report, do not abort the other scenarios
        return {'name': name, 'error': f'runner exception: {error!r}'}
    result = runner.judge(sdir, meta, outcome)
    conn = getattr(run, 'conn', None)
    sent = getattr(conn, 'sent_methods', {}) if conn else {}
    frames = []
    for line in (conn.raw if conn else []):
        text = line.decode('utf-8', errors='replace').strip()
        if not text:
            continue
        try:
            frame = json.loads(text)
        except ValueError:
            frames.append({'frame': {'not_json': text[:200]}})
            continue
        entry = {'frame': frame}
        if isinstance(frame, dict) and 'method' not in frame and 'id' in frame:
            entry['answers'] = sent.get(json.dumps(frame['id']))
        frames.append(entry)
    return {
        'name': name,
        'stream': None if result.get('stdout_actual') is None else normalize(runner, result['stdout_actual']),
        'reason': result.get('stdout_reason'),
        'error': outcome.error,
        'stderr': outcome.stderr[-2000:],
        'frames': frames,
    }


def validate(results: list[dict]) -> tuple[int, list[str]]:
    node = shutil.which('node')
    if node is None:
        return 0, ['node is not on PATH: the frames cannot be checked against the ACP SDK schemas']
    with tempfile.NamedTemporaryFile('w', suffix='.json', delete=False) as f:
        json.dump([{'scenario': r['name'], 'frames': r['frames']} for r in results], f)
        path = f.name
    try:
        out = subprocess.run([node, os.path.join(HERE, 'validate.mjs'), path],
                             capture_output=True, text=True, check=False)
    finally:
        os.unlink(path)
    if out.returncode != 0:
        return 0, [f'validate.mjs failed: {out.stderr.strip()[-1500:]}']
    report = json.loads(out.stdout)
    return report['checked'], report['errors']


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument('--agent', required=True)
    ap.add_argument('--shared', required=True, help='the shared conformance folder (run.py, acp/)')
    ap.add_argument('--record', action='store_true', help='write golden/<scenario>.jsonl')
    ap.add_argument('--only', help='comma-separated scenario names')
    ap.add_argument('-j', '--jobs', type=int, default=2)
    args = ap.parse_args()

    runner = load_runner(args.shared)
    argv = runner.resolve_agent(args.agent)
    opts = argparse.Namespace(timeout=120.0, exit_timeout=30.0, keep=False, verbose=False,
                              no_skip=False, jobs=1)
    root = os.path.join(args.shared, 'acp')
    names = sorted(n for n in os.listdir(root) if os.path.isdir(os.path.join(root, n)))
    if args.only:
        wanted = set(args.only.split(','))
        names = [n for n in names if n in wanted]
    names = [n for n in names if n not in NOT_SERVED]
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(lambda n: run_scenario(runner, os.path.join(root, n), argv, opts), names))

    problems = []
    for r in results:
        golden = os.path.join(GOLDEN, r['name'] + '.jsonl')
        stream = r.get('stream')
        if stream is None:
            problems.append(f"{r['name']}: no stream ({r.get('reason') or r.get('error')}): {r.get('stderr', '')[-400:]}")
            continue
        if r.get('error'):
            # The harness itself failed (a wait timed out, a request got no answer): the
            # stream is not a run of the scenario.
            problems.append(f"{r['name']}: harness: {r['error'].splitlines()[0]}")
            continue
        if args.record:
            with open(golden, 'w', encoding='utf-8') as f:
                f.write(stream)
            continue
        if not os.path.exists(golden):
            problems.append(f"{r['name']}: no golden/{r['name']}.jsonl (record with DSH_RECORD_RICH=1)")
            continue
        with open(golden, encoding='utf-8') as f:
            expected = f.read()
        if expected != stream:
            diff = ''.join(difflib.unified_diff(
                expected.splitlines(True), stream.splitlines(True),
                f"golden/{r['name']}.jsonl", 'rich stream now', n=1))
            problems.append(f"{r['name']}: the rich stream changed:\n{diff[:4000]}")
    if args.record:
        known = {r['name'] + '.jsonl' for r in results if r.get('stream') is not None}
        if not args.only:
            for stale in set(os.listdir(GOLDEN)) - known:
                os.unlink(os.path.join(GOLDEN, stale))
    checked, schema_errors = validate(results)
    problems.extend(f'schema: {e}' for e in schema_errors)
    for p in problems:
        print(p)
    verb = 'recorded' if args.record else 'compared'
    print(f'rich reference: {len(results)} scenarios {verb}, {checked} frames checked against the ACP SDK schemas, '
          f'{len(problems)} problems')
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
