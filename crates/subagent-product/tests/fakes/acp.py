"""A stand-in ACP agent (JSON-RPC 2.0 lines on stdio).
FAKE_MODE: success | permission | maxtokens | crash | hang | nostart.  FAKE_LOG: received frames.
FAKE_PIDS: pids of this process and its grandchild (hang)."""
import json, os, subprocess, sys

mode = os.environ.get("FAKE_MODE", "success")
log = os.environ.get("FAKE_LOG")
prompt_id = None


def send(o):
    o["jsonrpc"] = "2.0"
    sys.stdout.write(json.dumps(o) + "\n")
    sys.stdout.flush()


def record(m):
    if log:
        with open(log, "a") as f:
            f.write(json.dumps(m) + "\n")


def chunk(text):
    send({"method": "session/update", "params": {"sessionId": "s-1", "update": {
        "sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}}})


record({"cwd": os.getcwd()})
for line in sys.stdin:
    m = json.loads(line)
    record(m)
    method = m.get("method")
    if method == "initialize":
        send({"id": m["id"], "result": {"protocolVersion": 1, "agentCapabilities": {}}})
    elif method == "session/new":
        if mode == "nostart":
            sys.exit(1)
        send({"id": m["id"], "result": {"sessionId": "s-1"}})
    elif method == "session/prompt":
        prompt_id = m["id"]
        text = "".join(b["text"] for b in m["params"]["prompt"])
        if mode == "success":
            chunk("ACP_")
            chunk("OK: " + text)
            send({"id": prompt_id, "result": {"stopReason": "end_turn"}})
        elif mode == "permission":
            send({"id": 50, "method": "session/request_permission", "params": {
                "sessionId": "s-1", "toolCall": {"toolCallId": "t1"},
                "options": [{"optionId": "no", "name": "Reject", "kind": "reject_once"},
                            {"optionId": "yes", "name": "Allow", "kind": "allow_once"}]}})
        elif mode == "maxtokens":
            chunk("partial")
            send({"id": prompt_id, "result": {"stopReason": "max_tokens"}})
        elif mode == "crash":
            chunk("partial")
            sys.exit(4)
        elif mode == "hang":
            chunk("partial")
            child = subprocess.Popen(["sleep", "300"])
            with open(os.environ["FAKE_PIDS"], "w") as f:
                f.write(f"{os.getpid()} {child.pid}\n")
    elif m.get("id") == 50:
        chunk(json.dumps(m["result"]["outcome"]))
        send({"id": prompt_id, "result": {"stopReason": "end_turn"}})
    elif method == "session/cancel" and prompt_id is not None:
        send({"id": prompt_id, "result": {"stopReason": "cancelled"}})
