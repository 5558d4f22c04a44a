#!/usr/bin/env python3
"""Checks recorded model traffic against the providers' own SDK types.

The test mock (crates/test-support, `DSH_WIRE_RECORD_DIR`) writes one JSON file per model
request it served: `{test, path, request, status, response}`. This script validates

* every request body our adapters sent, against the official SDKs' request parameter types
  (pydantic `TypeAdapter` over the `*CreateParams` TypedDicts, unknown keys forbidden):
  OpenAI chat completions (`/chat/completions`), Anthropic Messages (`/v1/messages`),
  OpenAI Responses (`/responses`);
* every successful streamed response the mock served, event by event, against the SDKs'
  stream event models (`ChatCompletionChunk`, `RawMessageStreamEvent`,
  `ResponseStreamEvent`): every reply the mock generated (`generated`, its completion
  renderer) and the hand-written streams of the test files in GOOD_PATH_TESTS, which are
  meant to be well formed (other tests feed deliberately broken streams).

Fields that are vendor extensions of a shape (DeepSeek's `thinking` on chat completions,
...) are listed in EXTENSIONS with the reason; they are removed before validation and
counted in the report. Exit status 1 when any record fails; the report names file, path
and the first validation error.

usage: wire_check.py DIR [--table]
"""
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

from pydantic import TypeAdapter, ValidationError

from openai.types.chat import ChatCompletion, ChatCompletionChunk, completion_create_params
from openai.types.responses import ResponseStreamEvent, response_create_params
from anthropic.types import RawMessageStreamEvent, message_create_params

# Request keys that are documented vendor extensions of the shape they ride on.
EXTENSIONS = {
    "chat": {
        # DeepSeek: thinking mode switch (`{"type": "enabled"|"disabled"}`).
        "thinking": "DeepSeek thinking-mode switch",
        # DeepSeek (and reasoningPassback endpoints): an assistant turn's reasoning sent back.
        "messages.*.reasoning_content": "DeepSeek reasoning passback on assistant messages",
        # Upstream 0.2.1's DeepSeek request extensions (opt-in rows here).
        "dsh_session_log": "DeepSeek request extension: the session's unaccepted log rows",
        "dsh_plugin_packages": "DeepSeek request extension: the loaded plugins",
    },
    "messages": {
        # DeepSeek's Anthropic-compatible endpoint reads the effort here.
        "output_config": "DeepSeek Messages effort (output_config.effort)",
        # Sampling temperature: DeepSeek's endpoint reads it; anthropic 2.16 no longer
        # declares it (older releases did).
        "temperature": "sampling temperature (DeepSeek's Messages endpoint reads it)",
        "dsh_session_log": "DeepSeek request extension: the session's unaccepted log rows",
        "dsh_plugin_packages": "DeepSeek request extension: the loaded plugins",
    },
    "responses": {},
}

# Extensions check_request recognises by shape rather than by key (so the key stays
# validated when it has the standard shape).
SHAPED_EXTENSIONS = {
    "messages": {"thinking": "DeepSeek Messages thinking switch without a budget"},
}

# The mock's own unit tests send it hand-made requests: not adapter traffic.
SELF_TESTS = {"dsh_test_support"}

# Test files whose mock replies are meant to be valid provider streams.
GOOD_PATH_TESTS = {"anthropic", "responses"}

import typing

try:
    from typing_extensions import NotRequired, Required, is_typeddict
except ImportError:  # pragma: no cover
    from typing import NotRequired, Required, is_typeddict


def adapter(tp):
    return (tp, TypeAdapter(tp))


def _unwrap(tp):
    while typing.get_origin(tp) in (Required, NotRequired, typing.Annotated):
        tp = typing.get_args(tp)[0]
    return tp


def _literals(tp):
    tp = _unwrap(tp)
    if typing.get_origin(tp) is typing.Literal:
        return set(typing.get_args(tp))
    return set()


def unknown_keys(tp, value, path="", depth=0):
    """Keys of `value` that the TypedDict shape `tp` does not declare, as dotted paths.
    Pydantic ignores undeclared keys of a TypedDict, and drift is exactly what this
    check is for."""
    tp = _unwrap(tp)
    if depth > 30:
        return []
    origin = typing.get_origin(tp)
    if origin is typing.Union or str(origin) in ("typing.Union", "<class 'types.UnionType'>"):
        members = [m for m in typing.get_args(tp) if m is not type(None)]
        candidates = []
        for m in members:
            mu = _unwrap(m)
            if is_typeddict(mu) and isinstance(value, dict):
                hints = typing.get_type_hints(mu, include_extras=True)
                tags = {k: _literals(h) for k, h in hints.items() if _literals(h)}
                if all(value.get(k) in lits for k, lits in tags.items() if k in value) \
                        and all(k in value for k in tags if k in mu.__required_keys__):
                    candidates.append(m)
            elif not is_typeddict(mu):
                candidates.append(m)
        results = [unknown_keys(m, value, path, depth + 1) for m in (candidates or members)]
        return min(results, key=len) if results else []
    if is_typeddict(tp):
        if not isinstance(value, dict):
            return []
        hints = typing.get_type_hints(tp, include_extras=True)
        out = [f"{path}{k}" for k in value if k not in hints]
        for k, v in value.items():
            if k in hints:
                out += unknown_keys(hints[k], v, f"{path}{k}.", depth + 1)
        return out
    if origin in (list, typing.List, typing.Iterable, typing.Sequence) or \
            str(origin) in ("<class 'collections.abc.Iterable'>", "<class 'collections.abc.Sequence'>"):
        args = typing.get_args(tp)
        if args and isinstance(value, list):
            out = []
            for i, v in enumerate(value):
                out += unknown_keys(args[0], v, f"{path}{i}.", depth + 1)
            return out
    return []


REQUESTS = {
    "chat": (
        adapter(completion_create_params.CompletionCreateParamsStreaming),
        adapter(completion_create_params.CompletionCreateParamsNonStreaming),
    ),
    "messages": (
        adapter(message_create_params.MessageCreateParamsStreaming),
        adapter(message_create_params.MessageCreateParamsNonStreaming),
    ),
    "responses": (
        adapter(response_create_params.ResponseCreateParamsStreaming),
        adapter(response_create_params.ResponseCreateParamsNonStreaming),
    ),
}

def by_type(union):
    """`{event type: TypeAdapter of its model}` for a discriminated union of stream events,
    so a mismatch is reported against the event's own model."""
    import typing
    out = {}
    stack = [union]
    while stack:
        t = stack.pop()
        args = typing.get_args(t)
        if args and (typing.get_origin(t) in (typing.Union, typing.Annotated)
                     or str(typing.get_origin(t)) == "typing.Union"):
            stack.extend(a for a in args if isinstance(a, type) or typing.get_args(a))
            continue
        field = getattr(t, "model_fields", {}).get("type")
        if field is not None:
            for literal in typing.get_args(field.annotation):
                out[literal] = TypeAdapter(t)
    return out


EVENTS = {
    "chat": None,
    "messages": by_type(RawMessageStreamEvent),
    "responses": by_type(ResponseStreamEvent),
}
CHUNK = TypeAdapter(ChatCompletionChunk)


def kind_of(path):
    path = path.rstrip("/").split("?")[0]
    if path.endswith("/chat/completions"):
        return "chat"
    if path.endswith("/v1/messages") or path.endswith("/messages"):
        return "messages"
    if path.endswith("/responses"):
        return "responses"
    return None


def sse_payloads(text):
    """The JSON payloads of an SSE body (the `[DONE]` sentinel skipped)."""
    data = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        lines = [l[5:].lstrip() for l in block.split("\n") if l.startswith("data:")]
        if not lines:
            continue
        payload = "\n".join(lines)
        if payload.strip() == "[DONE]":
            continue
        data.append(json.loads(payload))
    return data


def first_error(e):
    err = e.errors()[0]
    return f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}"


def strip_extensions(kind, body, stats):
    """`body` without the documented vendor extensions (`a.*.b` names a key of each item of
    the list `a`), each one counted."""
    body = json.loads(json.dumps(body))
    for ext in EXTENSIONS[kind]:
        parts = ext.split(".")
        targets = [body]
        for part in parts[:-1]:
            nxt = []
            for t in targets:
                if part == "*" and isinstance(t, list):
                    nxt.extend(x for x in t if isinstance(x, dict))
                elif isinstance(t, dict) and part in t:
                    nxt.append(t[part])
            targets = nxt
        for t in targets:
            if isinstance(t, dict) and parts[-1] in t:
                del t[parts[-1]]
                stats["extensions"][f"{kind}.{ext}"] += 1
    return body


def check_request(kind, body, stats):
    body = strip_extensions(kind, body, stats)
    # DeepSeek's Messages endpoint takes `thinking: {"type": "enabled"|"disabled"}` without a
    # budget (the effort rides in output_config); Anthropic's type requires budget_tokens.
    thinking = body.get("thinking") if kind == "messages" else None
    if isinstance(thinking, dict) and "budget_tokens" not in thinking \
            and thinking.get("type") in ("enabled", "disabled") and len(thinking) == 1:
        del body["thinking"]
        stats["extensions"]["messages.thinking"] += 1
    streaming, plain = REQUESTS[kind]
    tp, checker = streaming if body.get("stream") else plain
    try:
        checker.validate_python(body)
    except ValidationError as e:
        return f"request {first_error(e)}"
    unknown = unknown_keys(tp, body)
    if unknown:
        return f"request has keys the SDK type does not declare: {', '.join(unknown[:5])}"
    return None


def check_response(kind, text, stats):
    if text.lstrip().startswith("{"):
        if kind == "chat":
            try:
                ChatCompletion.model_validate_json(text)
            except ValidationError as e:
                return f"response {first_error(e)}"
        return None
    try:
        events = sse_payloads(text)
    except json.JSONDecodeError as e:
        return f"response: an SSE data line is not JSON ({e})"
    for i, event in enumerate(events):
        if kind == "chat":
            model = CHUNK
        else:
            model = EVENTS[kind].get(event.get("type"))
            if model is None:
                return f"response event {i}: type {event.get('type')!r} is not a {kind} stream event"
        try:
            model.validate_python(event)
        except ValidationError as e:
            return f"response event {i} ({event.get('type', event.get('object', '?'))}): {first_error(e)}"
        stats["events"][kind] += 1
    return None


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    root = Path(sys.argv[1])
    files = sorted(root.glob("*.json"))
    stats = {"requests": Counter(), "responses": Counter(), "events": Counter(),
             "extensions": Counter(), "skipped": Counter(), "failed": Counter()}
    failures = []
    for f in files:
        record = json.loads(f.read_text())
        kind = kind_of(record.get("path", ""))
        if record.get("test") in SELF_TESTS:
            stats["skipped"]["the mock's own tests"] += 1
            continue
        if kind is None:
            stats["skipped"]["unknown path"] += 1
            continue
        problem = check_request(kind, record["request"], stats)
        stats["requests"][kind] += 1
        if problem is None and record.get("status") == 200 and record.get("response") \
                and (record.get("generated") or record.get("test") in GOOD_PATH_TESTS):
            problem = check_response(kind, record["response"], stats)
            stats["responses"][kind] += 1
        if problem:
            stats["failed"][kind] += 1
            failures.append(f"{f.name} [{record.get('test')} {record.get('path')}]: {problem}")
    print(f"wire check: {len(files)} records in {root}")
    for kind in ("chat", "messages", "responses"):
        print(f"  {kind:9} {stats['requests'][kind]:5} requests, {stats['responses'][kind]:4} replies"
              f" ({stats['events'][kind]} stream events) checked; {stats['failed'][kind]} failed")
    for ext, n in sorted(stats["extensions"].items()):
        kind, name = ext.split(".", 1)
        why = EXTENSIONS[kind].get(name) or SHAPED_EXTENSIONS[kind][name]
        print(f"  extension {ext}: {n} times ({why})")
    for why, n in stats["skipped"].items():
        print(f"  skipped ({why}): {n}")
    if failures:
        print(f"{len(failures)} records do not match the SDK types:")
        for line in failures[:40]:
            print(f"  {line}")
        return 1
    if not files:
        print("no records: nothing was checked", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
