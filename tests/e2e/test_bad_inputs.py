#!/usr/bin/env python3
"""e2e acceptance 2: bad input gets the right status code and each API's own error shape, and
the server keeps answering (/health) afterwards.

OpenAI / DeepSeek shape: {"error": {"message": str, "type": str, "param": str|null, "code": ...}}
Anthropic shape:        {"type": "error", "error": {"type": str, "message": str}}

Usage: test_bad_inputs.py PATH/TO/deepinfer
"""
from __future__ import annotations

import json
import socket
import sys
import threading
import time

from server_harness import MODEL, Server, Suite

CHAT = "/v1/chat/completions"
MSGS = "/v1/messages"
COMP = "/v1/completions"
OK_MESSAGES = [{"role": "user", "content": "hi"}]

OPENAI_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "invalid_request_error",
                405: "invalid_request_error", 413: "invalid_request_error"}
ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
                   405: "invalid_request_error", 413: "request_too_large"}


def chat(**fields):
    body = {"model": MODEL, "messages": OK_MESSAGES, "max_tokens": 4}
    body.update(fields)
    return {k: v for k, v in body.items() if v is not ...}


def msgs(**fields):
    body = {"model": MODEL, "messages": OK_MESSAGES, "max_tokens": 4}
    body.update(fields)
    return {k: v for k, v in body.items() if v is not ...}


def tool(parameters, name="get_weather"):
    return [{"type": "function", "function": {"name": name, "parameters": parameters}}]


# (name, method, path, body (dict -> JSON, str/bytes raw), expected status, api, message fragment)
CASES = [
    ("malformed JSON", "POST", CHAT, '{"model": "x", "messages": [', 400, "openai", "not valid JSON"),
    ("body is a JSON array", "POST", CHAT, "[1, 2, 3]", 400, "openai", "JSON object"),
    ("empty body", "POST", CHAT, "", 400, "openai", "JSON"),
    ("invalid UTF-8 in a string", "POST", CHAT,
     b'{"model": "deepinfer-v4-demo", "messages": [{"role": "user", "content": "\xff\xfe bad"}]}', 400, "openai", "JSON"),
    ("10 MB body", "POST", CHAT, '{"model": "x", "pad": "' + "a" * 10_000_000 + '"}', 413, "openai", "larger"),
    ("nesting 100000 deep", "POST", CHAT, "[" * 100_000 + "]" * 100_000, 400, "openai", "nested"),
    ("number out of double range", "POST", CHAT, '{"model": "x", "messages": [], "temperature": 1e999}', 400, "openai", ""),
    ("messages missing", "POST", CHAT, chat(messages=...), 400, "openai", "messages"),
    ("messages is a string", "POST", CHAT, chat(messages="hello"), 400, "openai", "messages"),
    ("empty messages list", "POST", CHAT, chat(messages=[]), 400, "openai", "messages"),
    ("unknown role", "POST", CHAT, chat(messages=[{"role": "wizard", "content": "hi"}]), 400, "openai", "role"),
    ("content is a number", "POST", CHAT, chat(messages=[{"role": "user", "content": 42}]), 400, "openai", "content"),
    ("message is not an object", "POST", CHAT, chat(messages=["hi"]), 400, "openai", "messages[0]"),
    ("negative max_tokens", "POST", CHAT, chat(max_tokens=-5), 400, "openai", "max_tokens"),
    ("max_tokens zero", "POST", CHAT, chat(max_tokens=0), 400, "openai", "max_tokens"),
    ("max_tokens over the context", "POST", CHAT, chat(max_tokens=10**12), 400, "openai", "context length"),
    ("max_tokens is a string", "POST", CHAT, chat(max_tokens="many"), 400, "openai", "max_tokens"),
    ("temperature 1e9", "POST", CHAT, chat(temperature=1e9), 400, "openai", "temperature"),
    ("temperature is a string", "POST", CHAT, chat(temperature="hot"), 400, "openai", "temperature"),
    ("top_p 5", "POST", CHAT, chat(top_p=5), 400, "openai", "top_p"),
    ("n zero", "POST", CHAT, chat(n=0), 400, "openai", "n"),
    ("n 1000", "POST", CHAT, chat(n=1000), 400, "openai", "n"),
    ("top_logprobs 50", "POST", CHAT, chat(logprobs=True, top_logprobs=50), 400, "openai", "top_logprobs"),
    ("seed is a string", "POST", CHAT, chat(seed="abc"), 400, "openai", "seed"),
    ("stop is a number", "POST", CHAT, chat(stop=7), 400, "openai", "stop"),
    ("response_format xml", "POST", CHAT, chat(response_format={"type": "xml"}), 400, "openai", "response_format"),
    ("stream_options without stream", "POST", CHAT, chat(stream_options={"include_usage": True}), 400, "openai",
     "stream_options"),
    ("unknown top-level field", "POST", CHAT, chat(frobnicate=True), 400, "openai", "frobnicate"),
    ("tool parameters is a string", "POST", CHAT, chat(tools=tool("object")), 400, "openai", "parameters"),
    ("tool schema with an unknown type", "POST", CHAT,
     chat(tools=tool({"type": "object", "properties": {"city": {"type": "strng"}}})), 400, "openai", "strng"),
    ("tool schema properties is a list", "POST", CHAT,
     chat(tools=tool({"type": "object", "properties": ["city"]})), 400, "openai", "properties"),
    ("tool schema required is not a list", "POST", CHAT,
     chat(tools=tool({"type": "object", "required": "city"})), 400, "openai", "required"),
    ("tool schema top-level type array", "POST", CHAT, chat(tools=tool({"type": "array"})), 400, "openai", "type"),
    ("tool name with spaces", "POST", CHAT, chat(tools=tool({"type": "object"}, name="get weather")), 400, "openai",
     "name"),
    ("tool without function", "POST", CHAT, chat(tools=[{"type": "function"}]), 400, "openai", "function"),
    ("tool_choice names an unknown tool", "POST", CHAT,
     chat(tools=tool({"type": "object"}), tool_choice={"type": "function", "function": {"name": "nope"}}), 400,
     "openai", "nope"),
    ("logit_bias (unsupported)", "POST", CHAT, chat(logit_bias={"5": 10}), 400, "openai", "logit_bias"),
    ("unknown model", "POST", CHAT, chat(model="gpt-17"), 404, "openai", "gpt-17"),
    ("unknown route", "POST", "/v1/engines/x/completions", chat(), 404, "openai", "no route"),
    ("GET on a POST route", "GET", CHAT, None, 405, "openai", "POST"),
    ("prompt over the context", "POST", CHAT,
     chat(messages=[{"role": "user", "content": "ocean " * 6000}]), 400, "openai", "context length"),
    ("completions: prompt missing", "POST", COMP, {"model": MODEL, "max_tokens": 4}, 400, "openai", "prompt"),
    ("completions: token id out of range", "POST", COMP, {"model": MODEL, "prompt": [1, 2, 99999999]}, 400, "openai",
     "prompt"),
    ("completions: suffix (FIM)", "POST", COMP, {"model": MODEL, "prompt": "a", "suffix": "b"}, 400, "openai",
     "suffix"),
    ("completions: prompt is an object", "POST", COMP, {"model": MODEL, "prompt": {"text": "a"}}, 400, "openai",
     "prompt"),
    ("anthropic: malformed JSON", "POST", MSGS, "{oops", 400, "anthropic", "JSON"),
    ("anthropic: max_tokens missing", "POST", MSGS, msgs(max_tokens=...), 400, "anthropic", "max_tokens"),
    ("anthropic: unknown field", "POST", MSGS, msgs(frobnicate=1), 400, "anthropic", "Extra inputs"),
    ("anthropic: messages is an object", "POST", MSGS, msgs(messages={"role": "user"}), 400, "anthropic",
     "messages"),
    ("anthropic: unknown role", "POST", MSGS, msgs(messages=[{"role": "system", "content": "x"}]), 400,
     "anthropic", "role"),
    ("anthropic: unsupported block", "POST", MSGS,
     msgs(messages=[{"role": "user", "content": [{"type": "document", "source": {}}]}]), 400, "anthropic",
     "document"),
    ("anthropic: input_schema not a schema", "POST", MSGS,
     msgs(tools=[{"name": "t", "input_schema": {"type": "object", "properties": {"a": 5}}}]), 400, "anthropic",
     "input_schema"),
    ("anthropic: temperature 3", "POST", MSGS, msgs(temperature=3), 400, "anthropic", "temperature"),
    ("anthropic: 10 MB body", "POST", MSGS, '{"pad": "' + "a" * 10_000_000 + '"}', 413, "anthropic", "larger"),
    ("anthropic: unknown model", "POST", MSGS, msgs(model="gpt-17"), 404, "anthropic", "gpt-17"),
]


def check_shape(status: int, body: bytes, expected: int, api: str, fragment: str) -> None:
    assert status == expected, (status, body[:300])
    error = json.loads(body)
    if api == "openai":
        assert set(error) == {"error"}, error
        e = error["error"]
        assert set(e) == {"message", "type", "param", "code"}, e
        assert isinstance(e["message"], str) and e["message"], e
        assert e["type"] == OPENAI_TYPES[expected], e
        assert e["param"] is None or isinstance(e["param"], str), e
    else:
        assert error["type"] == "error" and set(error) == {"type", "error"}, error
        e = error["error"]
        assert set(e) == {"type", "message"} and e["type"] == ANTHROPIC_TYPES[expected], e
    assert fragment.lower() in e["message"].lower(), (fragment, e["message"])


def raw_exchange(server: Server, payload: bytes) -> bytes:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    try:
        sock.sendall(payload)
        data = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return data
            data += chunk
            if b"\r\n\r\n" in data and b"}" in data:
                return data
    finally:
        sock.close()


def main() -> int:
    suite = Suite("bad inputs")
    with Server(sys.argv[1]) as server:
        for name, method, path, body, status, api, fragment in CASES:
            headers = {"anthropic-version": "2023-06-01"} if api == "anthropic" else {}
            def case(method=method, path=path, body=body, status=status, api=api, fragment=fragment):
                got, _, data = server.request(method, path, body, headers=headers)
                check_shape(got, data, status, api, fragment)
            suite.run(name, case)

        def oversized_headers():
            reply = raw_exchange(server, b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 200_000 + b"\r\n\r\n")
            assert reply.startswith(b"HTTP/1.1 413"), reply[:100]
        suite.run("headers over the limit", oversized_headers)

        def garbage_http():
            reply = raw_exchange(server, b"NOT HTTP AT ALL\r\n\r\n")
            assert reply.startswith(b"HTTP/1.1 400"), reply[:100]
        suite.run("not HTTP", garbage_http)

        def still_healthy():
            assert server.alive(), server.log()[-3000:]
            status, _, data = server.request("GET", "/health")
            assert status == 200 and json.loads(data) == {"status": "ok"}, (status, data)
            ok = server.request("POST", CHAT, chat(max_tokens=2))
            assert ok[0] == 200, ok
        suite.run("server still answers /health and requests afterwards", still_healthy)
        print(f"{len(CASES) + 2} bad-input cases")

    def queue_full():
        """More requests than the engine may hold: the extra ones get 429 in each API's shape."""
        with Server(sys.argv[1], ["--max-waiting-requests", "2", "--max-num-seqs", "1"]) as small:
            long_chat = chat(max_tokens=400, ignore_eos=True, thinking={"type": "disabled"})
            threads = [threading.Thread(target=small.request, args=("POST", CHAT, long_chat)) for _ in range(2)]
            for t in threads:
                t.start()
            deadline = time.time() + 60
            while time.time() < deadline:
                m = small.metrics()
                if m["deepinfer_num_requests_running"] + m["deepinfer_num_requests_waiting"] == 2:
                    break
                time.sleep(0.01)
            for path, api in ((CHAT, "openai"), (MSGS, "anthropic")):
                status, headers, body = small.request("POST", path, msgs(), headers=(
                    {"anthropic-version": "2023-06-01"} if api == "anthropic" else {}))
                assert status == 429, (status, body)
                error = json.loads(body)
                if api == "anthropic":
                    assert error["type"] == "error" and error["error"]["type"] == "rate_limit_error", error
                else:
                    assert error["error"]["type"] == "rate_limit_error", error
                assert headers.get("retry-after") == "1", headers
            assert small.request("GET", "/health")[0] == 200
            small.stop()  # the two long requests finish within the drain timeout
            for t in threads:
                t.join()
    suite.run("queue full: 429 (OpenAI and Anthropic shapes, Retry-After)", queue_full)
    return suite.finish()


if __name__ == "__main__":
    sys.exit(main())
