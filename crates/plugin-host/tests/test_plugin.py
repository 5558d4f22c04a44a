#!/usr/bin/env python3
"""Test plugin for crates/plugin-host/tests/host.rs. Behaviour is chosen per call by the
`plugin` argument of the tool call the stage sees: crash | hang | garbage | replace | veto;
anything else answers `next`. Appends its pid to $PID_FILE on start."""

import json
import os
import sys
import time

if os.environ.get("PID_FILE"):
    with open(os.environ["PID_FILE"], "a") as f:
        f.write("%d\n" % os.getpid())


def reply(mid, result):
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": mid, "result": result}) + "\n")
    sys.stdout.flush()


def misbehave(mode):
    if mode == "crash":
        os._exit(3)
    if mode == "hang":
        time.sleep(3600)
    if mode == "garbage":
        sys.stdout.write("this is not json\n")
        sys.stdout.flush()
        return True
    return False


for line in sys.stdin:
    msg = json.loads(line)
    mid, method, params = msg.get("id"), msg.get("method"), msg.get("params") or {}
    if mid is None:
        if method == "event" and os.environ.get("EVENTS_FILE"):
            with open(os.environ["EVENTS_FILE"], "a") as f:
                f.write("%s %s\n" % (params.get("type"), params.get("payload", {}).get("name")))
        continue
    if method == "initialize":
        reply(mid, {
            "tools": [{"name": "plug_echo", "description": "Echo text.",
                       "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}}],
            "stages": ["tools/pre-execute", "tools/post-execute"],
            "events": ["tools/result"],
        })
    elif method == "tool/execute":
        args = params.get("arguments") or {}
        if misbehave(args.get("plugin")):
            continue
        reply(mid, {"content": "echo: " + str(args.get("text")), "isError": args.get("fail", False)})
    elif method == "tools/pre-execute":
        args = params.get("arguments") or {}
        mode = args.get("plugin") if isinstance(args, dict) else None
        # The plugin's own tool misbehaves in tool/execute, not in this stage.
        if params.get("name") != "plug_echo" and misbehave(mode):
            continue
        if mode == "veto":
            reply(mid, {"action": "short-circuit", "value": {"decision": "deny", "reason": "vetoed by plugin"}})
        else:
            reply(mid, {"action": "next"})
    elif method == "tools/post-execute":
        args = params.get("arguments") or {}
        if isinstance(args, dict) and args.get("plugin") == "replace":
            reply(mid, {"action": "replace", "value": {"decision": "accept", "content": "rewritten: " + params["result"]["content"]}})
        elif isinstance(args, dict) and args.get("plugin") == "bogus":
            reply(mid, {"action": "explode"})
        else:
            reply(mid, {"action": "next"})
    else:
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "no such method"}}) + "\n")
        sys.stdout.flush()
