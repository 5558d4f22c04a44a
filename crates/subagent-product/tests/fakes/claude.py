"""A stand-in for the `claude` CLI in stream-json mode (the Agent SDK's control protocol).
FAKE_MODE: success | permission | budget | invalid | crash | hang.  FAKE_LOG: received frames."""
import json, os, signal, subprocess, sys

mode = os.environ.get("FAKE_MODE", "success")
log = os.environ.get("FAKE_LOG")


def send(o):
    sys.stdout.write(json.dumps(o) + "\n")
    sys.stdout.flush()


def record(m):
    if log:
        with open(log, "a") as f:
            f.write(json.dumps(m) + "\n")


def result(subtype, text, is_error=False):
    send({"type": "result", "subtype": subtype, "is_error": is_error, "result": text,
          "duration_ms": 1, "num_turns": 1, "session_id": "s", "errors": [] if subtype == "success" else ["limit"]})


record({"argv": sys.argv[1:], "cwd": os.getcwd()})
for line in sys.stdin:
    m = json.loads(line)
    record(m)
    kind = m.get("type")
    if kind == "control_request" and m["request"]["subtype"] == "initialize":
        send({"type": "control_response", "response": {"subtype": "success", "request_id": m["request_id"],
              "response": {"commands": []}}})
    elif kind == "control_request" and m["request"]["subtype"] == "interrupt":
        send({"type": "control_response", "response": {"subtype": "success", "request_id": m["request_id"], "response": {}}})
    elif kind == "user":
        task = m["message"]["content"]
        send({"type": "system", "subtype": "init", "session_id": "s"})
        if mode == "success":
            send({"type": "assistant", "message": {"role": "assistant", "content": [{"type": "text", "text": "hi"}]}})
            result("success", "CLAUDE_OK: " + task)
        elif mode == "permission":
            send({"type": "control_request", "request_id": "cli-1",
                  "request": {"subtype": "can_use_tool", "tool_name": "Bash", "input": {"command": "rm -rf x"}}})
        elif mode == "budget":
            result("error_max_budget_usd", "", True)
        elif mode == "invalid":
            result("success", "   ")
        elif mode == "crash":
            sys.exit(2)
        elif mode == "hang":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            child = subprocess.Popen(["sleep", "300"])
            with open(os.environ["FAKE_PIDS"], "w") as f:
                f.write(f"{os.getpid()} {child.pid}\n")
    elif kind == "control_response" and m["response"]["request_id"] == "cli-1":
        result("error_during_execution", "", True)
