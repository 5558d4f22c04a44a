#!/usr/bin/env python3
"""A small language server for dsh-lsp's tests, speaking LSP over stdio.

Its behaviour is chosen by the first argument:
  normal   answers initialize, definition, references, implementation, hover, shutdown
  crash    exits (with a line on stderr) whenever a definition is asked
  garbage  answers initialize, then prints text that is not an LSP frame
  huge     answers a definition with a frame larger than any sane limit
  silent   never answers a definition (ignores $/cancelRequest)
  utf8     negotiates the utf-8 position encoding
  minimal  offers definitions only
  indexing reports work-done progress for a second after `initialized`; hovers asked
           meanwhile answer null
  stuck    reports progress that never ends; hovers answer null
  pull     offers pull diagnostics (textDocument/diagnostic) and publishes none
  broken   cannot run: prints a reason and a long backtrace on stderr and exits at once
Every other mode publishes diagnostics when a document opens: one error per line that
mentions `undefined_name`.
It writes one line per received method to the file named by $FAKE_LSP_LOG, if set.
"""
import json
import os
import sys
import threading
import time

MODE = sys.argv[1] if len(sys.argv) > 1 else "normal"
LOG = os.environ.get("FAKE_LSP_LOG")
out = sys.stdout.buffer
inp = sys.stdin.buffer


def log(text):
    if LOG:
        with open(LOG, "a") as f:
            f.write(text + "\n")


WRITE = threading.Lock()
INDEXED = threading.Event()


def send(message):
    body = json.dumps(dict(jsonrpc="2.0", **message)).encode()
    with WRITE:
        out.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        out.flush()


def progress(kind, **fields):
    send({"method": "$/progress", "params": {"token": "idx", "value": dict(kind=kind, **fields)}})


def problems(text):
    found = []
    for n, line in enumerate(text.splitlines()):
        col = line.find("undefined_name")
        if col >= 0:
            r = {"start": {"line": n, "character": col}, "end": {"line": n, "character": col + 14}}
            found.append({"range": r, "severity": 1, "source": "fake", "code": "E1",
                          "message": "undefined_name is not defined"})
    return found


def index_for_a_second():
    time.sleep(1.0)
    # Indexed before it says so: a hover that follows the "end" must find it set, even
    # when this thread is preempted right after sending it.
    INDEXED.set()
    progress("end")


def read():
    length = None
    while True:
        line = inp.readline()
        if not line:
            return None
        line = line.strip()
        if not line:
            break
        name, _, value = line.decode().partition(":")
        if name.lower() == "content-length":
            length = int(value)
    return json.loads(inp.read(length))


def uri(name):
    return "file://" + os.path.join(os.getcwd(), name)


def loc(name, line, character):
    p = {"line": line, "character": character}
    return {"uri": uri(name), "range": {"start": p, "end": p}}


if MODE == "broken":
    sys.stderr.write("error: the active toolchain has no language server installed\n")
    for n in range(40):
        sys.stderr.write("   %d: fake::frame::function_%d at src/lib.rs:%d\n" % (n, n, n))
    sys.stderr.flush()
    sys.exit(1)

docs = {}
while True:
    msg = read()
    if msg is None:
        break
    method = msg.get("method")
    log(str(method))
    mid = msg.get("id")
    if method == "initialize":
        caps = {
            "positionEncoding": "utf-8" if MODE == "utf8" else "utf-16",
            "textDocumentSync": 1,
            "definitionProvider": True,
            "referencesProvider": True,
            "hoverProvider": {},
            "implementationProvider": True,
        }
        if MODE == "minimal":
            caps = {"positionEncoding": "utf-16", "textDocumentSync": {"openClose": True},
                    "definitionProvider": True}
        if MODE == "pull":
            caps["diagnosticProvider"] = {"interFileDependencies": False, "workspaceDiagnostics": False}
        # Ask the client something before answering, as real servers do.
        send({"id": "cfg", "method": "workspace/configuration", "params": {"items": [{}, {}]}})
        send({"id": mid, "result": {"capabilities": caps}})
        if MODE == "garbage":
            out.write(b"this is not a frame\r\n\r\n")
            out.flush()
    elif method == "initialized":
        if MODE in ("indexing", "stuck"):
            progress("begin", title="Indexing", percentage=0)
            progress("report", message="3/40 crates", percentage=7)
        if MODE == "indexing":
            threading.Thread(target=index_for_a_second, daemon=True).start()
    elif method == "textDocument/didOpen":
        td = msg["params"]["textDocument"]
        docs[td["uri"]] = td["text"]
        if MODE != "pull":
            send({"method": "textDocument/publishDiagnostics",
                  "params": {"uri": td["uri"], "diagnostics": problems(td["text"])}})
    elif method == "textDocument/diagnostic":
        text = docs.get(msg["params"]["textDocument"]["uri"], "")
        send({"id": mid, "result": {"kind": "full", "items": problems(text)}})
    elif method == "textDocument/didClose":
        docs.pop(msg["params"]["textDocument"]["uri"], None)
    elif method == "textDocument/definition":
        if MODE == "crash":
            sys.stderr.write("fake server: crashing on purpose\n")
            sys.stderr.flush()
            os._exit(3)
        if MODE == "silent":
            continue
        if MODE == "huge":
            out.write(b"Content-Length: 999999999\r\n\r\n{")
            out.flush()
            continue
        pos = msg["params"]["position"]
        send({"id": mid, "result": [loc("lib.py", pos["line"], pos["character"]), loc("main.py", 0, 0)]})
    elif method == "textDocument/references":
        ctx = msg["params"].get("context", {})
        result = [loc("main.py", 0, 4), loc("lib.py", 2, 0)]
        if ctx.get("includeDeclaration"):
            result.insert(0, loc("lib.py", 0, 4))
        send({"id": mid, "result": result})
    elif method == "textDocument/implementation":
        # A LocationLink, as servers with linkSupport answer.
        target = loc("lib.py", 0, 4)
        send({"id": mid, "result": [{"targetUri": target["uri"], "targetRange": target["range"],
                                     "targetSelectionRange": target["range"]}]})
    elif method == "textDocument/hover":
        if MODE == "stuck" or (MODE == "indexing" and not INDEXED.is_set()):
            send({"id": mid, "result": None})
            continue
        text = docs.get(msg["params"]["textDocument"]["uri"], "")
        first = text.splitlines()[0] if text else ""
        send({"id": mid, "result": {"contents": {"kind": "markdown", "value": "first line: " + first}}})
    elif method == "shutdown":
        send({"id": mid, "result": None})
    elif method == "exit":
        sys.exit(0)
    elif mid is not None and method is not None:
        send({"id": mid, "error": {"code": -32601, "message": "no " + method}})
