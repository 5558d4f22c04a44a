"""A stand-in dsh SDK runtime (JSON-RPC 2.0 lines on stdio). FAKE_MODE: success | maxtokens | crash."""
import json, os, sys

mode = os.environ.get("FAKE_MODE", "success")
log = os.environ.get("FAKE_LOG")


def send(o):
    o["jsonrpc"] = "2.0"
    sys.stdout.write(json.dumps(o) + "\n")
    sys.stdout.flush()


def record(m):
    if log:
        with open(log, "a") as f:
            f.write(json.dumps(m) + "\n")


def event(sid, e):
    send({"method": "session.event", "params": {"sessionId": sid, "event": e}})


for line in sys.stdin:
    m = json.loads(line)
    record(m)
    method = m.get("method")
    if method == "initialize":
        send({"id": m["id"], "result": {"serverInfo": {"name": "fake"}}})
    elif method == "session/prompt":
        sid = m["params"]["sessionId"]
        text = "".join(b["text"] for b in m["params"]["contentBlocks"])
        send({"id": m["id"], "result": {"messageId": "m-1"}})
        send({"method": "session.status", "params": {"sessionId": sid, "status": "running"}})
        # Another session's events are not the child's.
        event("other", {"type": "assistant/message", "data": {"message": {"role": "assistant",
              "content": [{"type": "text", "text": "NOT_MINE"}]}}})
        if mode == "crash":
            sys.exit(5)
        event(sid, {"type": "assistant/message", "data": {"message": {"role": "assistant",
              "content": [{"type": "text", "text": "SDK_OK: " + text}]}}})
        kind = "max-tokens" if mode == "maxtokens" else "completed"
        event(sid, {"type": "turn/end", "data": {"reason": {"kind": kind}}})
        send({"method": "session.status", "params": {"sessionId": sid, "status": "idle"}})
    elif method == "shutdown":
        send({"id": m["id"], "result": {}})
        sys.exit(0)
