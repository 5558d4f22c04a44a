#!/usr/bin/env python3
"""A hostile model endpoint (stdlib only) for measuring what one oversized response costs.

  huge_response.py --port-file FILE --mib N [--delta-bytes B] [--protocol chat|anthropic]

Every POST is answered with one streamed response of about N MiB of SSE: text deltas of B
characters each (default 4: one DeepSeek-sized token per event), generated on the fly so the
mock itself stays small, then the protocol's normal end. It writes the port it listens on to
FILE. Used by bench/huge_response.sh.
"""
import argparse
import http.server
import json
import socketserver


def chat_event(text):
    chunk = {
        "id": "chatcmpl-huge", "object": "chat.completion.chunk", "created": 1700000000,
        "model": "deepseek-v4-flash", "system_fingerprint": "fp_huge",
        "choices": [{"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": None}],
    }
    return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"


def chat_frames(total, delta):
    yield chat_event("")
    sent = 0
    piece = "x" * delta
    event = chat_event(piece)
    while sent < total:
        yield event
        sent += len(event)
    done = {
        "id": "chatcmpl-huge", "object": "chat.completion.chunk", "created": 1700000000,
        "model": "deepseek-v4-flash",
        "choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
    }
    yield b"data: " + json.dumps(done).encode() + b"\n\n"
    yield b"data: [DONE]\n\n"


def anthropic_frames(total, delta):
    def ev(name, body):
        return f"event: {name}\ndata: {json.dumps(body, separators=(',', ':'))}\n\n".encode()
    yield ev("message_start", {"type": "message_start", "message": {
        "id": "msg_huge", "type": "message", "role": "assistant", "model": "deepseek-v4-flash",
        "content": [], "stop_reason": None, "usage": {"input_tokens": 10, "output_tokens": 0}}})
    yield ev("content_block_start", {"type": "content_block_start", "index": 0,
                                     "content_block": {"type": "text", "text": ""}})
    event = ev("content_block_delta", {"type": "content_block_delta", "index": 0,
                                       "delta": {"type": "text_delta", "text": "x" * delta}})
    sent = 0
    while sent < total:
        yield event
        sent += len(event)
    yield ev("content_block_stop", {"type": "content_block_stop", "index": 0})
    yield ev("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                               "usage": {"output_tokens": 10}})
    yield ev("message_stop", {"type": "message_stop"})


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port-file", required=True)
    p.add_argument("--mib", type=int, required=True)
    p.add_argument("--delta-bytes", type=int, default=4)
    p.add_argument("--protocol", choices=["chat", "anthropic"], default="chat")
    args = p.parse_args()
    total = args.mib << 20

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers.get("content-length") or 0))
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("connection", "close")
            self.end_headers()
            frames = chat_frames if args.protocol == "chat" else anthropic_frames
            batch = []
            size = 0
            try:
                for frame in frames(total, args.delta_bytes):
                    batch.append(frame)
                    size += len(frame)
                    if size >= 1 << 16:
                        self.wfile.write(b"".join(batch))
                        batch, size = [], 0
                self.wfile.write(b"".join(batch))
            except (BrokenPipeError, ConnectionResetError):
                pass
            self.close_connection = True

    class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
        daemon_threads = True

    server = Server(("127.0.0.1", 0), Handler)
    with open(args.port_file, "w") as f:
        f.write(str(server.server_address[1]))
    server.serve_forever()


if __name__ == "__main__":
    main()
