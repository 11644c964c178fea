#!/usr/bin/env python3
"""e2e acceptance 1: the official `openai` and `anthropic` Python clients drive a real
`deepinfer serve` (CPU, the shipped demo model) on loopback.

Every streamed case is compared with the same request made without streaming (same seed, or
greedy for Anthropic, which has no seed): the SDK's own stream helper must assemble the final
message without error, and its text must equal the non-streamed text.

Tool calls: the 17M demo model never learned DSML tool calls, so the tool cases are made
deterministic through mechanisms the APIs offer, never by faking output:
  * tool_choice naming a function: the server forces the call by prefill (the DSML block start
    and the invoke of that function follow the reasoning); the model generates the rest of the
    call and the parser returns it (docs/server.md, "Forced tool choice").
  * DeepSeek chat prefix completion (an assistant message with "prefix": true) whose content
    opens the DSML block up to a parameter value: the model writes the value, which streams as
    argument deltas.

Usage: test_sdk_clients.py PATH/TO/deepinfer
"""
from __future__ import annotations

import json
import socket
import sys
import time

from server_harness import MODEL, Server, Suite, ensure_clients, metric_sum, request_blocks, wait_idle

WEATHER_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "description": "City name"}},
    "required": ["city"],
}
OPENAI_TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city", "parameters": WEATHER_SCHEMA}}]
ANTHROPIC_TOOLS = [{"name": "get_weather", "description": "Current weather in a city",
                    "input_schema": WEATHER_SCHEMA}]
NO_THINKING = {"thinking": {"type": "disabled"}}
GREEDY = {"temperature": 0}  # the anthropic SDK has no temperature argument any more: sent as is
OCEAN = [{"role": "user", "content": 'What does "ocean" mean?'}]
WEATHER = [{"role": "user", "content": "What is the weather in Paris?"}]
TOOL_RESULT = json.dumps({"city": "Paris", "sky": "sunny", "temperature_c": 21})


def extra(obj, key):
    """A DeepSeek extension field of an SDK object (kept in pydantic's extras)."""
    value = getattr(obj, key, None)
    if value is None and getattr(obj, "model_extra", None):
        value = obj.model_extra.get(key)
    return value


def check_usage(usage) -> None:
    hit = extra(usage, "prompt_cache_hit_tokens")
    miss = extra(usage, "prompt_cache_miss_tokens")
    assert hit is not None and miss is not None, usage
    assert usage.prompt_tokens == hit + miss, usage
    assert usage.prompt_tokens_details.cached_tokens == hit, usage
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens, usage


# ---- OpenAI chat ---------------------------------------------------------------------------

def plain_chat(oa) -> None:
    r = oa.chat.completions.create(model=MODEL, messages=OCEAN, max_tokens=40, temperature=0, extra_body=NO_THINKING)
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-"), r
    msg = r.choices[0].message
    assert msg.role == "assistant" and msg.content, r
    # The model card's greedy sample for this prompt (tools/dsv4 fp32 reference).
    assert msg.content.startswith('"Ocean" (adjective) means'), msg.content
    assert r.choices[0].finish_reason == "stop", r
    check_usage(r.usage)


def streamed_chat(oa) -> None:
    args = dict(model=MODEL, messages=OCEAN, max_tokens=32, temperature=0.9, seed=11, extra_body=NO_THINKING)
    full = oa.chat.completions.create(**args)
    deltas = []
    with oa.chat.completions.stream(**args) as stream:
        for event in stream:
            if event.type == "content.delta":
                deltas.append(event.delta)
        final = stream.get_final_completion()
    text = final.choices[0].message.content
    assert text == "".join(deltas) == full.choices[0].message.content, (text, full.choices[0].message.content)
    assert final.choices[0].finish_reason == full.choices[0].finish_reason
    # Raw chunks: one id, the role first, usage last (stream_options.include_usage), then [DONE].
    chunks = list(oa.chat.completions.create(**args, stream=True, stream_options={"include_usage": True}))
    assert len({c.id for c in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert all(c.usage is None for c in chunks[:-1])
    assert "".join(c.choices[0].delta.content or "" for c in chunks[:-1]) == text
    check_usage(chunks[-1].usage)
    assert chunks[-1].usage.completion_tokens == full.usage.completion_tokens


def streamed_reasoning(oa) -> None:
    args = dict(model=MODEL, messages=OCEAN, max_tokens=80, temperature=0.7, seed=5)  # thinking: the default
    full = oa.chat.completions.create(**args)
    with oa.chat.completions.stream(**args) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion()
    reasoning = extra(final.choices[0].message, "reasoning_content")
    assert reasoning, final
    assert reasoning == extra(full.choices[0].message, "reasoning_content")
    assert final.choices[0].message.content == full.choices[0].message.content
    assert full.usage.completion_tokens_details.reasoning_tokens > 0, full.usage
    # Raw chunks carry reasoning_content deltas before any content delta.
    seen_content = False
    pieces = []
    for chunk in oa.chat.completions.create(**args, stream=True):
        delta = chunk.choices[0].delta
        if extra(delta, "reasoning_content"):
            assert not seen_content, "reasoning after content"
            pieces.append(extra(delta, "reasoning_content"))
        seen_content = seen_content or bool(delta.content)
    assert "".join(pieces) == reasoning


PREFIX_OPENING = ('\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="get_weather">\n'
                  '<｜DSML｜parameter name="city" string="true">')


def tool_round_trip(oa, stream: bool) -> None:
    """Call (the model writes the argument after a prefix that opens the call), result, answer."""
    messages = WEATHER + [{"role": "assistant", "content": PREFIX_OPENING, "prefix": True}]
    args = dict(model=MODEL, messages=messages, tools=OPENAI_TOOLS, max_tokens=16, temperature=0.8, seed=5,
                extra_body=NO_THINKING)
    reference = oa.chat.completions.create(**args)
    response = reference
    if stream:
        fragments = []
        with oa.chat.completions.stream(**args) as s:
            for event in s:
                if event.type == "tool_calls.function.arguments.delta":
                    fragments.append(event.arguments_delta)
            response = s.get_final_completion()
        assert "".join(fragments) == response.choices[0].message.tool_calls[0].function.arguments
        assert len(fragments) > 2, fragments  # the value streams as the model writes it
    choice = response.choices[0]
    calls = choice.message.tool_calls
    assert calls and calls[0].type == "function" and calls[0].function.name == "get_weather", choice
    assert calls[0].id.startswith("call_"), calls[0].id
    assert list(json.loads(calls[0].function.arguments)) == ["city"], calls[0].function.arguments
    assert calls[0].function.arguments == reference.choices[0].message.tool_calls[0].function.arguments
    assert choice.finish_reason == reference.choices[0].finish_reason == "tool_calls", choice.finish_reason
    assert choice.message.content == "", "the prefix is not echoed"
    # The result goes back; the model answers.
    follow = WEATHER + [
        {"role": "assistant", "content": "",
         "tool_calls": [{"id": calls[0].id, "type": "function",
                         "function": {"name": "get_weather", "arguments": calls[0].function.arguments}}]},
        {"role": "tool", "tool_call_id": calls[0].id, "content": TOOL_RESULT},
    ]
    args2 = dict(model=MODEL, messages=follow, tools=OPENAI_TOOLS, max_tokens=100, temperature=0)  # thinking on
    answer = oa.chat.completions.create(**args2)
    assert answer.choices[0].message.content and answer.choices[0].finish_reason == "stop", answer
    if stream:
        with oa.chat.completions.stream(**args2) as s:
            for _ in s:
                pass
            streamed = s.get_final_completion()
        assert streamed.choices[0].message.content == answer.choices[0].message.content


def forced_tool_choice(oa) -> None:
    """tool_choice naming the function: the call is forced by prefill, with and without thinking."""
    for thinking in ({"type": "disabled"}, {"type": "enabled"}):
        args = dict(model=MODEL, messages=WEATHER, tools=OPENAI_TOOLS, max_tokens=60, temperature=0,
                    tool_choice={"type": "function", "function": {"name": "get_weather"}},
                    extra_body={"thinking": thinking})
        full = oa.chat.completions.create(**args)
        call = full.choices[0].message.tool_calls[0]
        assert call.function.name == "get_weather" and isinstance(json.loads(call.function.arguments), dict)
        if thinking["type"] == "enabled":
            assert extra(full.choices[0].message, "reasoning_content"), "reasoning comes first"
        # Raw chunks (the stream helper refuses finish_reason "length" when tools are given):
        # id, type and name on the first fragment, then argument fragments.
        calls = {}
        finish = None
        for chunk in oa.chat.completions.create(**args, stream=True):
            for c in chunk.choices[0].delta.tool_calls or []:
                if c.index not in calls:
                    assert c.id and c.type == "function" and c.function.name, c
                    calls[c.index] = {"name": c.function.name, "arguments": ""}
                calls[c.index]["arguments"] += c.function.arguments or ""
            finish = chunk.choices[0].finish_reason or finish
        assert calls[0] == {"name": "get_weather", "arguments": call.function.arguments}, calls
        assert finish == full.choices[0].finish_reason


def chat_options(oa) -> None:
    """n, logprobs, stop strings and JSON mode through the SDK."""
    r = oa.chat.completions.create(model=MODEL, messages=OCEAN, max_tokens=12, n=2, temperature=1.0, seed=1,
                                   logprobs=True, top_logprobs=2, extra_body=NO_THINKING)
    assert [c.index for c in r.choices] == [0, 1]
    for c in r.choices:
        assert c.logprobs.content and all(len(t.top_logprobs) == 2 for t in c.logprobs.content)
        assert "".join(t.token for t in c.logprobs.content).startswith(c.message.content[:8])
    chunks = list(oa.chat.completions.create(model=MODEL, messages=OCEAN, max_tokens=12, n=2, temperature=1.0,
                                             seed=1, stream=True, extra_body=NO_THINKING))
    for i in (0, 1):
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices and c.choices[0].index == i)
        assert text == r.choices[i].message.content, (i, text, r.choices[i].message.content)
    s = oa.chat.completions.create(model=MODEL, messages=OCEAN, max_tokens=40, temperature=0, stop=["adjective"],
                                   extra_body=NO_THINKING)
    assert s.choices[0].finish_reason == "stop" and "adjective" not in s.choices[0].message.content
    assert s.choices[0].message.content == '"Ocean" (', s.choices[0].message.content
    j = oa.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Reply in JSON: ocean"}],
                                   max_tokens=30, temperature=0, response_format={"type": "json_object"},
                                   extra_body=NO_THINKING)
    content = j.choices[0].message.content
    assert content is not None and (content.strip() == "" or content.lstrip()[0] in "{["), content


# ---- Anthropic -----------------------------------------------------------------------------

def anthropic_text(an) -> None:
    args = dict(model=MODEL, max_tokens=40, messages=OCEAN, thinking={"type": "disabled"}, extra_body=GREEDY)
    full = an.messages.create(**args)
    with an.messages.stream(**args) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert full.content[0].type == "text" and full.content[0].text.startswith('"Ocean"'), full
    assert text == final.content[0].text == full.content[0].text
    assert final.stop_reason == full.stop_reason == "end_turn"
    assert final.usage.output_tokens == full.usage.output_tokens
    assert final.usage.input_tokens + (final.usage.cache_read_input_tokens or 0) > 0


def anthropic_thinking_tool(an) -> None:
    args = dict(model=MODEL, max_tokens=200, extra_body=GREEDY, messages=WEATHER, tools=ANTHROPIC_TOOLS,
                thinking={"type": "enabled", "budget_tokens": 1024},
                tool_choice={"type": "tool", "name": "get_weather"})
    full = an.messages.create(**args)
    kinds = []
    with an.messages.stream(**args) as stream:
        for event in stream:
            kinds.append(event.type)
        final = stream.get_final_message()
    types = [b.type for b in final.content]
    assert types[0] == "thinking" and "tool_use" in types, types
    assert final.content[0].thinking and final.content[0].signature, final.content[0]
    tool = next(b for b in final.content if b.type == "tool_use")
    assert tool.name == "get_weather" and tool.id.startswith("toolu_") and isinstance(tool.input, dict), tool
    assert final.stop_reason in ("tool_use", "max_tokens"), final.stop_reason
    assert "input_json" in kinds and "thinking" in kinds, set(kinds)
    full_types = [b.type for b in full.content]
    assert full_types == types, (full_types, types)
    assert full.content[0].thinking == final.content[0].thinking
    assert next(b for b in full.content if b.type == "tool_use").input == tool.input
    # Round trip: the whole assistant turn goes back with the result; the model answers.
    follow = WEATHER + [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in final.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool.id, "content": TOOL_RESULT}]},
    ]
    args2 = dict(model=MODEL, max_tokens=80, extra_body=GREEDY, messages=follow, tools=ANTHROPIC_TOOLS,
                 thinking={"type": "enabled", "budget_tokens": 1024})
    answer = an.messages.create(**args2)
    with an.messages.stream(**args2) as stream:
        streamed = stream.get_final_message()
    assert [b.type for b in streamed.content] == [b.type for b in answer.content]
    assert streamed.content[-1].model_dump() == answer.content[-1].model_dump()
    assert answer.content, answer


def anthropic_misc(an) -> None:
    stopped = an.messages.create(model=MODEL, max_tokens=40, messages=OCEAN, thinking={"type": "disabled"},
                                 stop_sequences=["adjective"], extra_body=GREEDY)
    assert stopped.stop_reason == "stop_sequence" and stopped.stop_sequence == "adjective", stopped
    assert stopped.content[0].text == '"Ocean" (', stopped.content
    count = an.messages.count_tokens(model=MODEL, messages=OCEAN)
    assert count.input_tokens > 5, count
    models = an.models.list()
    assert [m.id for m in models.data] == [MODEL]


# ---- completions, models -------------------------------------------------------------------

def completions(oa) -> None:
    args = dict(model=MODEL, prompt="The meaning of life is", max_tokens=16, temperature=0)
    full = oa.completions.create(**args)
    assert full.object == "text_completion" and full.choices[0].text.startswith(" the\nfuture of the world"), full
    streamed = "".join(c.choices[0].text for c in oa.completions.create(**args, stream=True) if c.choices)
    assert streamed == full.choices[0].text
    lp = oa.completions.create(**args, logprobs=2)
    assert len(lp.choices[0].logprobs.tokens) == lp.usage.completion_tokens - (lp.choices[0].finish_reason == "stop")
    assert "".join(lp.choices[0].logprobs.tokens) == lp.choices[0].text
    echo = oa.completions.create(**args, echo=True)
    assert echo.choices[0].text == "The meaning of life is" + full.choices[0].text
    batch = oa.completions.create(model=MODEL, prompt=["The meaning of life is", "To install a package"],
                                  max_tokens=8, temperature=0)
    assert [c.index for c in batch.choices] == [0, 1] and batch.choices[0].text == full.choices[0].text[:len(batch.choices[0].text)]
    assert [m.id for m in oa.models.list().data] == [MODEL]


# ---- connection behaviour ------------------------------------------------------------------

def disconnect_aborts(server: Server) -> None:
    before = wait_idle(server)
    body = json.dumps({"model": MODEL, "messages": OCEAN, "max_tokens": 3000, "ignore_eos": True, "stream": True,
                       "thinking": {"type": "disabled"}})
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(body)}\r\n\r\n{body}".encode())
    data = b""
    while b"data:" not in data:
        data += sock.recv(65536)
    assert wait_idle(server, timeout=0.2)["deepinfer_num_requests_running"] == 1
    sock.close()
    closed = time.time()
    after = wait_idle(server, timeout=10)
    elapsed = time.time() - closed
    assert after["deepinfer_num_requests_running"] == 0 and request_blocks(after) == 0, after
    assert after["deepinfer_engine_requests_aborted_total"] == before["deepinfer_engine_requests_aborted_total"] + 1
    assert (metric_sum(after, "deepinfer_generations_total", outcome="client_disconnect") ==
            metric_sum(before, "deepinfer_generations_total", outcome="client_disconnect") + 1)
    assert after["deepinfer_generation_tokens_total"] - before["deepinfer_generation_tokens_total"] < 3000
    print(f"  disconnect -> engine idle in {elapsed * 1000:.0f} ms")


def api_key(binary: str) -> None:
    import anthropic
    import openai
    with Server(binary, api_key="sekret") as server:
        try:
            openai.OpenAI(base_url=server.base_url + "/v1", api_key="wrong", max_retries=0).models.list()
            raise AssertionError("no 401")
        except openai.AuthenticationError as e:
            assert e.status_code == 401 and e.body["type"] == "authentication_error", e.body
        status, _, body = server.request("GET", "/v1/models")  # no key at all
        assert status == 401 and json.loads(body)["error"]["code"] == "invalid_api_key", body
        try:
            anthropic.Anthropic(base_url=server.base_url, api_key="wrong", max_retries=0).messages.create(
                model=MODEL, max_tokens=4, messages=OCEAN)
            raise AssertionError("no 401")
        except anthropic.AuthenticationError as e:
            assert e.status_code == 401 and e.body["error"]["type"] == "authentication_error", e.body
        ok = openai.OpenAI(base_url=server.base_url + "/v1", api_key="sekret", max_retries=0)
        assert ok.chat.completions.create(model=MODEL, messages=OCEAN, max_tokens=2, extra_body=NO_THINKING).choices
        an = anthropic.Anthropic(base_url=server.base_url, api_key="sekret", max_retries=0)
        assert an.messages.create(model=MODEL, max_tokens=2, messages=OCEAN).content is not None
        assert server.request("GET", "/health")[0] == 200  # open without a key


def keepalives_ignored(binary: str) -> None:
    """A server that sends a keep-alive after 1 ms of silence: the streams fill with
    ': keep-alive' comments and ping events, and the SDK helpers still assemble the same text."""
    import anthropic
    import openai
    with Server(binary, ["--keepalive-interval", "0.001"]) as server:
        oa = openai.OpenAI(base_url=server.base_url + "/v1", api_key="none", max_retries=0)
        an = anthropic.Anthropic(base_url=server.base_url, api_key="none", max_retries=0)
        args = dict(model=MODEL, messages=OCEAN, max_tokens=30, temperature=0, extra_body=NO_THINKING)
        with oa.chat.completions.stream(**args) as stream:
            text = stream.get_final_completion().choices[0].message.content
        assert text == oa.chat.completions.create(**args).choices[0].message.content
        margs = dict(model=MODEL, max_tokens=30, messages=OCEAN, thinking={"type": "disabled"}, extra_body=GREEDY)
        with an.messages.stream(**margs) as stream:
            message = stream.get_final_message()
        assert message.content[0].text == an.messages.create(**margs).content[0].text
        body = {"model": MODEL, "messages": OCEAN, "max_tokens": 30, "stream": True, "thinking": {"type": "disabled"}}
        raw = server.request("POST", "/v1/chat/completions", body)[2].decode()
        assert ": keep-alive" in raw, raw[:500]


def sigterm_drains(binary: str) -> None:
    """SIGTERM while a stream runs: it still completes, new requests are refused, exit 0."""
    server = Server(binary).start()
    try:
        body = json.dumps({"model": MODEL, "messages": OCEAN, "max_tokens": 60, "ignore_eos": True, "stream": True,
                           "thinking": {"type": "disabled"}})
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(body)}\r\n\r\n{body}".encode())
        data = sock.recv(65536)
        assert data.startswith(b"HTTP/1.1 200"), data[:80]
        server.proc.send_signal(15)
        time.sleep(0.3)
        try:
            status = server.request("GET", "/health", timeout=5)[0]
            assert status == 503, status
        except OSError:
            pass  # the listener is closed: refused is fine too
        while b"data: [DONE]" not in data:
            more = sock.recv(65536)
            assert more, "stream cut during the drain"
            data += more
        sock.close()
        assert server.proc.wait(timeout=60) == 0, server.log()[-2000:]
        assert "drained" in server.log()
    finally:
        server.kill()


def main() -> int:
    binary = sys.argv[1]
    ensure_clients()
    import anthropic
    import openai
    suite = Suite("sdk clients")
    with Server(binary) as server:
        oa = openai.OpenAI(base_url=server.base_url + "/v1", api_key="none", max_retries=0, timeout=300)
        an = anthropic.Anthropic(base_url=server.base_url, api_key="none", max_retries=0, timeout=300)
        suite.run("openai: plain chat", plain_chat, oa)
        suite.run("openai: streamed chat (stream helper) == non-streamed", streamed_chat, oa)
        suite.run("openai: streamed chat with reasoning == non-streamed", streamed_reasoning, oa)
        suite.run("openai: tool-call round trip", tool_round_trip, oa, False)
        suite.run("openai: tool-call round trip, streamed", tool_round_trip, oa, True)
        suite.run("openai: forced tool_choice (prefill), with and without reasoning", forced_tool_choice, oa)
        suite.run("openai: n, logprobs, stop, json mode", chat_options, oa)
        suite.run("anthropic: streamed text == non-streamed", anthropic_text, an)
        suite.run("anthropic: streamed thinking + tool use, round trip", anthropic_thinking_tool, an)
        suite.run("anthropic: stop_sequences, count_tokens, models", anthropic_misc, an)
        suite.run("openai: /v1/completions", completions, oa)
        suite.run("client disconnect aborts the request", disconnect_aborts, server)
        idle = wait_idle(server)
        suite.run("engine idle afterwards", lambda: None if request_blocks(idle) == 0 else 1 / 0)
    suite.run("--api-key: 401 both shapes, keys accepted", api_key, binary)
    suite.run("SSE keep-alives (comments, pings) are ignored by the SDKs", keepalives_ignored, binary)
    suite.run("SIGTERM drains running streams, exit 0", sigterm_drains, binary)
    return suite.finish()


if __name__ == "__main__":
    sys.exit(main())
