#!/usr/bin/env python3
"""Load run of dsh for a team on this machine: N sessions x STEPS bash steps through `dsh serve`
gateways and `dsh worker` processes, PostgreSQL as the store and NATS JetStream as the transport
(both on loopback), against a mock LLM that answers each conversation on its own.

  usage: bench/team_load.py [--dsh target/release/dsh] [--sessions 4,8,16] [--workers 1,2,4]
                            [--gateways 2] [--steps 20] [--no-nats]

Prints one table row per (workers, sessions): wall time, sessions per minute, p50/p99 step
latency (between consecutive `step/start` events of a session, from the stored log), events per
second received by the clients through the gateways, and the peak RSS of a turn process (the
memory one running session costs a worker) and of a worker itself.

Needs PostgreSQL (DSH_BENCH_POSTGRES, default host=127.0.0.1 port=5432 user=postgres
dbname=test; psql on PATH) and, unless --no-nats, NATS with JetStream (DSH_BENCH_NATS, default
nats://127.0.0.1:4222). Each run uses a fresh schema and pool.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from http.server import ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.join(HERE, "..", "..", "shared", "bench")
sys.path.insert(0, SHARED)
import mockllm  # noqa: E402  (the shared mock's protocol code; only its script is replaced)

_body = threading.local()
_is_fresh = mockllm.is_fresh


def _remember_body(body):
    _body.value = body
    return _is_fresh(body)


mockllm.is_fresh = _remember_body


class PerConversation(mockllm.Script):
    """Answers a bash call until the conversation holds `steps` tool results, then text."""

    def __init__(self, steps):
        super().__init__(None)
        self.k = steps

    def next_step(self, aux, fresh=False):
        with self.lock:
            self.n_requests += 1
        if aux:
            return {"text": self.aux_text}, -1
        body = getattr(_body, "value", {}) or {}
        done = tool_results(body)
        if done < self.k:
            return {"shell": "echo step %d" % (done + 1)}, done
        return {"text": "all %d steps done" % self.k}, done


def tool_results(body):
    """Tool results in a request: `tool` messages (chat completions) or `tool_result` blocks
    (Anthropic Messages, DeepSeek's default route)."""
    n = 0
    for m in body.get("messages") or []:
        if not isinstance(m, dict):
            continue
        if m.get("role") == "tool":
            n += 1
        elif isinstance(m.get("content"), list):
            n += sum(1 for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_result")
    return n


def start_mock(steps):
    srv = ThreadingHTTPServer(("127.0.0.1", 0), mockllm.Handler)
    srv.daemon_threads = True
    srv.script = PerConversation(steps)
    srv.log_f = None
    srv.log_lock = threading.Lock()
    srv.log_bodies = False
    srv.model_ids = ["mock-model"]
    srv.latency = 0
    srv.chunk_delay = 0
    srv.text_chunk = 8
    srv.always_usage = False
    srv.verbose = False
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def psql(conn, sql):
    subprocess.run(["psql", "-q", conn, "-c", sql], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def pct(values, p):
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))]


class RssSampler(threading.Thread):
    """Peak VmRSS (KiB) per pid of processes whose command line contains a marker."""

    def __init__(self, markers):
        super().__init__(daemon=True)
        self.markers = markers
        self.peak = {m: {} for m in markers}
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            for pid in os.listdir("/proc"):
                if not pid.isdigit():
                    continue
                try:
                    with open("/proc/%s/cmdline" % pid, "rb") as f:
                        cmd = f.read().decode("utf-8", "replace")
                    with open("/proc/%s/status" % pid) as f:
                        rss = next((int(l.split()[1]) for l in f if l.startswith("VmRSS:")), 0)
                except OSError:
                    continue
                for m in self.markers:
                    if m in cmd:
                        d = self.peak[m]
                        d[pid] = max(d.get(pid, 0), rss)
            time.sleep(0.02)


def follow(url, token, out, idx):
    """Reads the session's event stream until its turn ends; records (count, end time)."""
    req = urllib.request.Request(url, headers={"Authorization": "Bearer " + token})
    n = 0
    with urllib.request.urlopen(req, timeout=600) as resp:
        for raw in resp:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            if line.startswith("data: "):
                n += 1
                if '"type":"turn/end"' in line:
                    break
    out[idx] = (n, time.time())


def one_run(args, dsh, mock_url, workers, sessions):
    conn = os.environ.get("DSH_BENCH_POSTGRES", "host=127.0.0.1 port=5432 user=postgres dbname=test")
    schema = "dsh_load_" + uuid.uuid4().hex[:12]
    psql(conn, "CREATE SCHEMA %s" % schema)
    work = tempfile.mkdtemp(prefix="dsh-team-load-")
    procs = []
    try:
        env = dict(os.environ)
        env.update({
            "DSH_HOME": os.path.join(work, "home"),
            "DEEPSEEK_API_KEY": "sk-mock",
            "DEEPSEEK_BASE_URL": mock_url,
            "DSH_STORAGE": "%s options=-csearch_path=%s" % (conn, schema),
            "DSH_PERMISSION_MODE": os.environ.get("DSH_PERMISSION_MODE", "workspace-write"),
        })
        if not args.no_nats:
            env["DSH_TRANSPORT"] = os.environ.get("DSH_BENCH_NATS", "nats://127.0.0.1:4222")
        repo = os.path.join(work, "repo")
        os.makedirs(repo)
        pool = schema
        out = subprocess.run([dsh, "team", "user", "add", "load"], env=env, cwd=repo,
                             capture_output=True, text=True, check=True)
        token = json.loads(out.stdout)["token"]
        gateways = []
        for _ in range(args.gateways):
            p = subprocess.Popen([dsh, "serve", "--listen", "127.0.0.1:0", "--pool", pool], env=env,
                                 cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            procs.append(p)
            gateways.append(p.stdout.readline().strip().replace("listening on ", ""))
        marker_turn = "team.patch.yml"
        marker_worker = "\x00worker\x00"
        sampler = RssSampler([marker_turn, marker_worker])
        sampler.start()
        for w in range(workers):
            procs.append(subprocess.Popen(
                [dsh, "worker", "--pool", pool, "--owner", "load-w%d" % w], env=env, cwd=repo,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(0.5)  # the workers are up and idle
        t0 = time.time()
        ids = []
        for i in range(sessions):
            gw = gateways[i % len(gateways)]
            req = urllib.request.Request(gw + "/v1/sessions", method="POST",
                                         data=json.dumps({"text": "run %d steps" % args.steps}).encode(),
                                         headers={"Authorization": "Bearer " + token,
                                                  "Content-Type": "application/json"})
            with urllib.request.urlopen(req) as resp:
                ids.append(json.load(resp)["sessionId"])
        results = [None] * sessions
        readers = []
        for i, sid in enumerate(ids):
            gw = gateways[(i + 1) % len(gateways)]  # read through the other gateway
            t = threading.Thread(target=follow, args=(gw + "/v1/sessions/%s/events" % sid, token, results, i))
            t.start()
            readers.append(t)
        for t in readers:
            t.join()
        wall = max(r[1] for r in results) - t0
        sampler.stop.set()
        sampler.join()
        events = sum(r[0] for r in results)
        # Step latency from the stored log: consecutive step/start times within a session.
        lat = []
        for sid in ids:
            out = subprocess.run([dsh, "team", "events", sid], env=env, cwd=repo,
                                 capture_output=True, text=True, check=True)
            starts = [json.loads(l)["time"] for l in out.stdout.splitlines()
                      if l.startswith('{"type":"step/start"')]
            lat += [b - a for a, b in zip(starts, starts[1:])]
        turn_rss = list(sampler.peak[marker_turn].values())
        worker_rss = list(sampler.peak[marker_worker].values())
        return {
            "workers": workers, "sessions": sessions, "wall_s": wall,
            "sessions_per_min": sessions / wall * 60,
            "step_p50_ms": pct(lat, 50), "step_p99_ms": pct(lat, 99),
            "events_per_s": events / wall, "events": events,
            "turn_rss_mib": (statistics.median(turn_rss) / 1024) if turn_rss else float("nan"),
            "turn_rss_max_mib": (max(turn_rss) / 1024) if turn_rss else float("nan"),
            "worker_rss_mib": (max(worker_rss) / 1024) if worker_rss else float("nan"),
        }
    finally:
        for p in procs:
            p.kill()
            p.wait()
        shutil.rmtree(work, ignore_errors=True)
        psql(conn, "DROP SCHEMA %s CASCADE" % schema)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsh", default=os.path.join(HERE, "..", "target", "release", "dsh"))
    ap.add_argument("--sessions", default="4,8,16")
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--gateways", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--no-nats", action="store_true")
    args = ap.parse_args()
    dsh = os.path.abspath(args.dsh)
    mock = start_mock(args.steps)
    mock_url = "http://127.0.0.1:%d" % mock.server_address[1]
    print("| workers | sessions | wall s | sessions/min | step p50 ms | step p99 ms | events/s (clients) "
          "| turn RSS median / max MiB | worker RSS MiB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for w in [int(x) for x in args.workers.split(",")]:
        for n in [int(x) for x in args.sessions.split(",")]:
            r = one_run(args, dsh, mock_url, w, n)
            print("| %d | %d | %.1f | %.1f | %.0f | %.0f | %.0f | %.1f / %.1f | %.1f |" % (
                r["workers"], r["sessions"], r["wall_s"], r["sessions_per_min"], r["step_p50_ms"],
                r["step_p99_ms"], r["events_per_s"], r["turn_rss_mib"], r["turn_rss_max_mib"],
                r["worker_rss_mib"]))
            sys.stdout.flush()


if __name__ == "__main__":
    main()
