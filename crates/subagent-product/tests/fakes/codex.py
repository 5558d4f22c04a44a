"""A stand-in for `codex app-server --stdio` speaking the app-server wire (JSON-RPC 2.0 lines).
FAKE_MODE: success | approval | fail | nokey | crash | hang | context.  FAKE_LOG: file the received frames are appended to.
FAKE_PIDS: file the pids of this process and its grandchild are written to (hang)."""
import json, os, signal, subprocess, sys

mode = os.environ.get("FAKE_MODE", "success")
log = os.environ.get("FAKE_LOG")
THREAD, TURN = "thr-1", "turn-1"


def send(o):
    o.setdefault("jsonrpc", "2.0")
    sys.stdout.write(json.dumps(o) + "\n")
    sys.stdout.flush()


def record(m):
    if log:
        with open(log, "a") as f:
            f.write(json.dumps(m) + "\n")


def item(text, phase):
    send({"method": "item/completed", "params": {"threadId": THREAD, "turnId": TURN,
          "item": {"type": "agentMessage", "id": "i", "text": text, "phase": phase}}})


def done(status, error=None):
    turn = {"id": TURN, "status": status}
    if error is not None:
        turn["error"] = error
    send({"method": "turn/completed", "params": {"threadId": THREAD, "turn": turn}})


task = ""
record({"argv": sys.argv[1:], "cwd": os.getcwd(), "env_secret": os.environ.get("SECRET_API_KEY"),
        "env_extra": os.environ.get("FAKE_EXTRA")})
for line in sys.stdin:
    m = json.loads(line)
    record(m)
    method = m.get("method")
    if method == "initialize":
        send({"id": m["id"], "result": {"userAgent": "fake-codex"}})
    elif method == "thread/start":
        send({"id": m["id"], "result": {"thread": {"id": THREAD, "ephemeral": True}}})
    elif method == "turn/start":
        task = "".join(i["text"] for i in m["params"]["input"])
        send({"method": "turn/started", "params": {"threadId": THREAD, "turn": {"id": TURN}}})
        send({"id": m["id"], "result": {"turn": {"id": TURN, "status": "inProgress"}}})
        if mode == "success":
            item("Looking at it.", "commentary")
            item("draft", None)
            item("CODEX_OK: " + task, "final_answer")
            done("completed")
        elif mode == "approval":
            send({"id": 99, "method": "item/commandExecution/requestApproval",
                  "params": {"threadId": THREAD, "turnId": TURN, "itemId": "c1",
                             "availableDecisions": ["accept", "decline", "cancel"]}})
        elif mode == "fail":
            item("partial codex text", None)
            done("failed", {"message": "boom", "codexErrorInfo": {"httpConnectionFailed": {"httpStatusCode": 503}}})
        elif mode == "nokey":
            # What Codex says when its provider's key variable is unset.
            done("failed", {"message": "Missing environment variable: `OPENAI_API_KEY`.", "codexErrorInfo": "other"})
        elif mode == "context":
            item("partial", None)
            done("failed", {"message": "too long", "codexErrorInfo": "contextWindowExceeded"})
        elif mode == "crash":
            sys.exit(3)
        elif mode == "hang":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            child = subprocess.Popen(["sleep", "300"])
            with open(os.environ["FAKE_PIDS"], "w") as f:
                f.write(f"{os.getpid()} {child.pid}\n")
    elif m.get("id") == 99 and "result" in m:
        item("CODEX_AFTER_APPROVAL", "final_answer")
        done("completed")
    elif method == "turn/interrupt":
        send({"id": m["id"], "result": {}})
