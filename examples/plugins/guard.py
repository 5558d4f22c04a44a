#!/usr/bin/env python3
"""An example dsh plugin (stdlib only) for the `plugin-host` row.

It speaks the plugin-host protocol (crates/plugin-host/README.md): JSON-RPC 2.0, one
message per line on stdin/stdout. It

* adds a tool, `guard_note`, that records a note and answers with it;
* adds a system-prompt section telling the model about the guard;
* rewrites the request in `agent/request` (sets a low temperature);
* vetoes, in `tools/pre-execute`, bash commands containing `rm -rf /`.

Use it with `dsh plugin add guard -- python3 examples/plugins/guard.py`.
Logs go to stderr (stdout carries protocol messages only).
"""

import json
import sys

FORBIDDEN = "rm -rf /"


def initialize(_params):
    return {
        "tools": [
            {
                "name": "guard_note",
                "description": "Record a note with the guard plugin and get it back.",
                "inputSchema": {
                    "type": "object",
                    "properties": {"note": {"type": "string"}},
                    "required": ["note"],
                },
            }
        ],
        "sections": [
            {
                "name": "guard",
                "text": "A guard plugin is active: destructive shell commands are refused.",
            }
        ],
        "stages": ["agent/request", "tools/pre-execute"],
        "events": ["tools/result"],
    }


def tool_execute(params):
    if params.get("name") != "guard_note":
        return {"content": "unknown tool", "isError": True}
    note = params.get("arguments", {}).get("note", "")
    return {"content": "guard noted: " + str(note)}


def agent_request(_params):
    # Continue with a changed request: these fields are laid over the call config.
    return {"action": "replace", "value": {"temperature": 0.25}}


def pre_execute(params):
    args = params.get("arguments")
    command = args.get("command", "") if isinstance(args, dict) else ""
    if params.get("name") == "bash" and FORBIDDEN in str(command):
        return {
            "action": "short-circuit",
            "value": {"decision": "deny", "reason": "guard: refusing `rm -rf /`"},
        }
    return {"action": "next"}


HANDLERS = {
    "initialize": initialize,
    "tool/execute": tool_execute,
    "agent/request": agent_request,
    "tools/pre-execute": pre_execute,
}


def main():
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        message = json.loads(line)
        method = message.get("method")
        if "id" not in message:
            # A notification (an event): just log it.
            print("guard: event", message.get("params", {}).get("type"), file=sys.stderr)
            continue
        handler = HANDLERS.get(method)
        if handler is None:
            reply = {"error": {"code": -32601, "message": "method not found: %s" % method}}
        else:
            reply = {"result": handler(message.get("params") or {})}
        reply.update({"jsonrpc": "2.0", "id": message["id"]})
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
