#!/usr/bin/env python3
"""A tiny MCP server over stdio (newline-delimited JSON-RPC) for the dsh-mcp tests.

Behaviour is chosen by environment variables so one script covers the bad cases:
  STUB_MODE     normal | exit (dies before answering) | bad-list (an invalid tool entry)
                | dup-list (a raw name listed twice) | garbage (non-JSON lines on stdout)
  STUB_STARTS   a file that gets one line per process start (counts reconnects)
  STUB_CANCELS  a file that gets the request id of every notifications/cancelled
The tools: echo, add_tool (adds `extra` and announces tools/list_changed), hang (never
answers), crash (the process exits mid-call), fail (isError), mixed (several block kinds).
"""
import json
import os
import sys

MODE = os.environ.get("STUB_MODE", "normal")


def log_line(var, text):
    path = os.environ.get(var)
    if path:
        with open(path, "a") as f:
            f.write(text + "\n")


def send(message):
    if MODE == "garbage":
        sys.stdout.write("this is not json\n")
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def schema(props=None):
    return {"type": "object", "properties": props or {}}


TOOLS = [
    {"name": "echo", "description": "Echoes its message.",
     "inputSchema": schema({"message": {"type": "string"}})},
    {"name": "add_tool", "description": "Adds the tool `extra`.", "inputSchema": schema()},
    {"name": "hang", "description": "Never answers.", "inputSchema": schema()},
    {"name": "crash", "description": "Exits mid-call.", "inputSchema": schema()},
    {"name": "fail", "description": "Reports a tool error.", "inputSchema": schema()},
    {"name": "mixed", "description": "Returns several block kinds.", "inputSchema": schema()},
    {"name": "get.pid", "description": "Its process id (a name that needs normalizing).",
     "inputSchema": schema()},
]


def tool_list():
    if MODE == "bad-list":
        return TOOLS + [{"name": "broken", "inputSchema": {"type": "string"}}]
    if MODE == "dup-list":
        return TOOLS + [TOOLS[0]]
    return TOOLS


def call(name, args):
    if name == "echo":
        return {"content": [{"type": "text", "text": "Echo: " + str(args.get("message", ""))}]}
    if name == "add_tool":
        if not any(t["name"] == "extra" for t in TOOLS):
            TOOLS.append({"name": "extra", "description": "Added later.", "inputSchema": schema()})
        return {"content": [{"type": "text", "text": "added"}]}
    if name == "fail":
        return {"isError": True, "content": [{"type": "text", "text": "it went wrong"}]}
    if name == "mixed":
        return {"content": [
            {"type": "text", "text": "one"},
            {"type": "resource_link", "name": "doc", "uri": "file:///doc"},
            {"type": "image", "mimeType": "image/png", "data": "iVBORw0KGgo="},
            {"type": "text", "text": "two"},
        ]}
    if name == "get.pid":
        return {"content": [{"type": "text", "text": str(os.getpid())}]}
    if name == "extra":
        return {"content": [{"type": "text", "text": "extra works"}]}
    return None


def main():
    log_line("STUB_STARTS", str(os.getpid()))
    if MODE == "exit":
        sys.stderr.write("stub: refusing to start\n")
        sys.exit(7)
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        msg = json.loads(line)
        method = msg.get("method")
        mid = msg.get("id")
        if method == "initialize":
            send({"jsonrpc": "2.0", "id": mid, "result": {
                "protocolVersion": msg["params"]["protocolVersion"],
                "capabilities": {"tools": {"listChanged": True}},
                "serverInfo": {"name": "stub", "version": "1"}}})
        elif method == "tools/list":
            tools = tool_list()
            cursor = (msg.get("params") or {}).get("cursor")
            # Two pages, to exercise pagination.
            if cursor is None:
                send({"jsonrpc": "2.0", "id": mid,
                      "result": {"tools": tools[:3], "nextCursor": "page-2"}})
            else:
                send({"jsonrpc": "2.0", "id": mid, "result": {"tools": tools[3:]}})
        elif method == "tools/call":
            params = msg.get("params") or {}
            name = params.get("name")
            if name == "hang":
                continue
            if name == "crash":
                os._exit(3)
            result = call(name, params.get("arguments") or {})
            if result is None:
                send({"jsonrpc": "2.0", "id": mid,
                      "error": {"code": -32602, "message": "Unknown tool: " + str(name)}})
            else:
                send({"jsonrpc": "2.0", "id": mid, "result": result})
                if name == "add_tool":
                    send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        elif method == "notifications/cancelled":
            log_line("STUB_CANCELS", json.dumps((msg.get("params") or {}).get("requestId")))
        elif method == "ping":
            send({"jsonrpc": "2.0", "id": mid, "result": {}})
        elif mid is not None:
            send({"jsonrpc": "2.0", "id": mid,
                  "error": {"code": -32601, "message": "Method not found"}})


main()
