#!/usr/bin/env python3
"""Long-session benchmark helpers (stdlib only).

  long_session.py mock --bench DIR [mockllm args...]
      ../shared/bench/mockllm.py, plus: a compaction summary call (header
      x-deepseek-harness-compact: 1) is answered like a title (it never consumes a script step),
      and every request's log record gets `raw_len` and `prefix`: the number of leading bytes
      of its body equal to the previous non-auxiliary request's body; `prompt_len` and
      `prompt_prefix` measure the same on the prompt in the order a provider renders (and
      caches) it: system, tool schemas, then messages (the JSON body itself puts the tools
      after the messages).
  long_session.py analyze LOG
      per-step harness overhead near step 10 and near the last step (gap between a response's
      end and the next request, gaps spanning a compaction excluded), and the cacheable prefix
      share of each request between compactions.
"""
import json
import statistics
import sys
import threading


def common_prefix(a: bytes, b: bytes) -> int:
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:  # largest n with a[:n] == b[:n], by halving (memcmp-speed slices)
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def mock(argv):
    bench = argv[argv.index("--bench") + 1]
    rest = [a for i, a in enumerate(argv) if a != "--bench" and (i == 0 or argv[i - 1] != "--bench")]
    sys.path.insert(0, bench)
    import mockllm  # noqa: E402

    local = threading.local()
    state = {"prev": None, "prev_prompt": None, "lock": threading.Lock()}
    orig_is_aux, orig_read, orig_log = mockllm.is_aux, mockllm.Handler._read_body, mockllm.Handler._log

    def is_aux(script, body):
        return getattr(local, "compact", False) or orig_is_aux(script, body)

    def read_body(self):
        raw = orig_read(self)
        local.compact = (self.headers.get("x-deepseek-harness-compact") == "1")
        local.raw = raw
        return raw

    def log(self, rec):
        raw = getattr(local, "raw", b"") or b""
        rec["raw_len"] = len(raw)
        rec["compact"] = getattr(local, "compact", False)
        if rec.get("path", "").rstrip("/").endswith(("completions", "messages", "responses")) and not rec.get("aux"):
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                body = {}
            dump = lambda v: json.dumps(v, ensure_ascii=False, separators=(",", ":")).encode()  # noqa: E731
            prompt = dump(body.get("system")) + dump(body.get("tools")) + dump(body.get("messages") or body.get("input"))
            with state["lock"]:
                prev, prev_prompt = state["prev"], state["prev_prompt"]
                rec["prefix"] = common_prefix(prev, raw) if prev is not None else 0
                rec["prompt_len"] = len(prompt)
                rec["prompt_prefix"] = common_prefix(prev_prompt, prompt) if prev_prompt is not None else 0
                state["prev"], state["prev_prompt"] = raw, prompt
        orig_log(self, rec)

    mockllm.is_aux = is_aux
    mockllm.Handler._read_body = read_body
    mockllm.Handler._log = log
    sys.argv = ["mockllm.py"] + rest
    mockllm.main()


def analyze(path):
    recs = [json.loads(l) for l in open(path) if l.strip()]
    recs = [r for r in recs if "t_recv" in r and "t_done" in r]
    loop, between = [], []
    compacted = False
    for r in recs:
        if r.get("aux"):
            compacted = compacted or r.get("compact", False)
            continue
        loop.append(r)
        between.append(compacted)
        compacted = False
    gaps = {}
    for k in range(1, len(loop)):
        if not between[k]:
            gaps[k] = (loop[k]["t_recv"] - loop[k - 1]["t_done"]) * 1000.0
    n = len(loop)

    def window(lo, hi):
        vals = [gaps[k] for k in range(lo, hi + 1) if k in gaps]
        return statistics.median(vals) if vals else float("nan")

    early = window(5, 15)
    late = window(max(1, n - 11), n - 1)
    shares = [r["prefix"] / r["raw_len"] for k, r in enumerate(loop)
              if k > 0 and not between[k] and r.get("raw_len")]
    bytes_total = sum(r["raw_len"] for k, r in enumerate(loop) if k > 0 and not between[k])
    bytes_prefix = sum(r["prefix"] for k, r in enumerate(loop) if k > 0 and not between[k])
    pshares = [r["prompt_prefix"] / r["prompt_len"] for k, r in enumerate(loop)
               if k > 0 and not between[k] and r.get("prompt_len")]
    compactions = sum(1 for r in recs if r.get("compact"))
    print(json.dumps({
        "loop_requests": n,
        "compactions": compactions,
        "gap_ms_near_step_10": round(early, 2),
        "gap_ms_near_last_step": round(late, 2),
        "late_over_early": round(late / early, 2) if early else None,
        "prefix_share_mean": round(statistics.mean(shares), 4) if shares else None,
        "prefix_share_min": round(min(shares), 4) if shares else None,
        "prefix_share_bytes": round(bytes_prefix / bytes_total, 4) if bytes_total else None,
        "prompt_prefix_share_mean": round(statistics.mean(pshares), 4) if pshares else None,
        "prompt_prefix_share_min": round(min(pshares), 4) if pshares else None,
        "largest_request_bytes": max((r["raw_len"] for r in loop), default=0),
    }))


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in ("mock", "analyze"):
        sys.exit(__doc__)
    if sys.argv[1] == "mock":
        mock(sys.argv[2:])
    else:
        analyze(sys.argv[2])
