#!/usr/bin/env python3
"""e2e acceptance 3: a load test against a real `deepinfer serve`.

N streaming requests (default 2,000) from C concurrent clients (default 128), a mix of OpenAI
chat, Anthropic messages and /v1/completions (thinking on and off, greedy and sampled), short
max_tokens, some chat requests with a long shared system prompt (prefix cache), a fraction of
the clients disconnecting right after their first event. Checked:
  * zero server errors (no 5xx, no error events, the server stays up);
  * every completed stream is well-formed for its API (SSE framing, event order, one finish per
    choice, [DONE] / message_stop, usage);
  * afterwards the engine is idle and the state cache is back to its idle value (no blocks or
    slots referenced);
  * /metrics counts add up: HTTP requests by endpoint = requests sent; generations started =
    completed + client_disconnect + error (error = 0); completed = streams read to the end;
    engine requests finished + aborted = generations started.

A raw asyncio HTTP/1.1 client is used (no SDK) so that 128 clients fit on 2 cores.

Usage: load_test.py PATH/TO/deepinfer [--requests N] [--concurrency C] [--json OUT]
       load_test.py --url http://127.0.0.1:PORT ...   (a server that is already running)
"""
from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time

from server_harness import MODEL, Server, metric_sum, request_blocks, wait_idle

SYSTEM = ("You are a helpful assistant that answers questions about words, Debian packages and famous "
          "quotations. Keep answers short. ") * 12  # > 128 tokens: a shared prefix for the cache
QUESTIONS = ['What does "ocean" mean?', "Tell me a fortune.", 'What does "river" mean?', "What is apt?",
             'What does "mountain" mean?', "Tell me a quote about time.", 'Define "harbor".',
             "How do I install a package?"]
TEXTS = ["The meaning of life is", "To install a package with apt, you", "A river is", "Debian is"]


class Stats:
    def __init__(self):
        self.status: dict[int, int] = {}
        self.sent = {"chat_completions": 0, "messages": 0, "completions": 0}
        self.completed = 0
        self.disconnected = 0
        self.malformed: list[str] = []
        self.ttfb: list[float] = []
        self.tokens = 0


def request_body(i: int, rng: random.Random, args) -> tuple[str, str, dict]:
    kind = i % 3
    question = rng.choice(QUESTIONS)
    messages = [{"role": "user", "content": question}]
    common = {"model": MODEL, "max_tokens": rng.randint(1, args.max_tokens), "stream": True,
              "temperature": rng.choice([0, 0.7, 1.0])}
    if kind == 0:
        if rng.random() < args.system_fraction:
            messages = [{"role": "system", "content": SYSTEM}] + messages
        body = dict(common, messages=messages, seed=i, stream_options={"include_usage": rng.random() < 0.5})
        if rng.random() < 0.5:
            body["thinking"] = {"type": "disabled"}
        return "chat_completions", "/v1/chat/completions", body
    if kind == 1:
        body = dict(common, messages=messages)
        if rng.random() < args.system_fraction:
            body["system"] = SYSTEM
        body["thinking"] = {"type": rng.choice(["enabled", "disabled"])}
        return "messages", "/v1/messages", body
    body = dict(common, prompt=rng.choice(TEXTS), seed=i, stream_options={"include_usage": True})
    return "completions", "/v1/completions", body


# ---- SSE validation ------------------------------------------------------------------------

def split_events(text: str) -> list[tuple[str | None, str]]:
    events = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        name, data = None, []
        for line in block.split("\n"):
            if line.startswith(":"):
                continue
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data.append(line[6:])
            else:
                raise AssertionError(f"bad SSE line {line!r}")
        if data:
            events.append((name, "\n".join(data)))
    return events


def check_openai(text: str, chat: bool, usage_expected: bool) -> int:
    events = split_events(text)
    assert events and events[-1] == (None, "[DONE]"), events[-1:]
    chunks = [json.loads(d) for name, d in events[:-1]]
    assert all(name is None for name, _ in events), "named event in an OpenAI stream"
    assert len({c["id"] for c in chunks}) == 1
    obj = "chat.completion.chunk" if chat else "text_completion"
    assert all(c["object"] == obj for c in chunks)
    finishes = [ch for c in chunks for ch in c["choices"] if ch.get("finish_reason")]
    assert len(finishes) == 1, finishes
    if chat:
        assert chunks[0]["choices"][0]["delta"].get("role") == "assistant"
    usage = [c for c in chunks if c.get("usage")]
    if usage_expected:
        assert len(usage) == 1 and usage[0] is chunks[-1] and chunks[-1]["choices"] == []
        return usage[0]["usage"]["completion_tokens"]
    assert not usage
    return 0


def check_anthropic(text: str) -> int:
    events = split_events(text)
    names = [n for n, _ in events]
    datas = [json.loads(d) for _, d in events]
    assert all(n is not None and d["type"] == n for n, d in zip(names, datas)), names
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"], names
    open_index = None
    next_index = 0
    for name, data in zip(names[1:-2], datas[1:-2]):
        if name == "ping":
            continue
        if name == "content_block_start":
            assert open_index is None and data["index"] == next_index, (open_index, data)
            open_index, next_index = data["index"], next_index + 1
        elif name == "content_block_delta":
            assert data["index"] == open_index, data
        elif name == "content_block_stop":
            assert data["index"] == open_index, data
            open_index = None
        else:
            raise AssertionError(f"unexpected event {name}")
    assert open_index is None, "a block was left open"
    delta = datas[-2]
    assert delta["delta"]["stop_reason"] in ("end_turn", "max_tokens", "stop_sequence", "tool_use"), delta
    return delta["usage"]["output_tokens"]


# ---- client --------------------------------------------------------------------------------

async def read_head(reader) -> tuple[int, dict]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    return status, headers


async def read_chunk(reader) -> bytes:
    size = int((await reader.readuntil(b"\r\n")).strip(), 16)
    data = await reader.readexactly(size + 2)
    return data[:-2]


async def one(i: int, host: str, port: int, rng: random.Random, args, stats: Stats) -> None:
    endpoint, path, body = request_body(i, rng, args)
    disconnect = rng.random() < args.disconnect_fraction
    payload = json.dumps(body).encode()
    reader, writer = await asyncio.open_connection(host, port)
    start = time.perf_counter()
    try:
        headers = "anthropic-version: 2023-06-01\r\n" if endpoint == "messages" else ""
        writer.write(f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n{headers}"
                     f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n".encode() + payload)
        stats.sent[endpoint] += 1
        status, hdrs = await read_head(reader)
        stats.status[status] = stats.status.get(status, 0) + 1
        if status != 200:
            await reader.read()
            return
        assert hdrs.get("transfer-encoding") == "chunked", hdrs
        text = b""
        first = True
        while True:
            chunk = await read_chunk(reader)
            text += chunk
            if first and b"data: " in text:  # the first event (keep-alive comments do not count)
                stats.ttfb.append(time.perf_counter() - start)
                first = False
                if disconnect:
                    stats.disconnected += 1
                    return
            if not chunk:
                break
        try:
            decoded = text.decode()
            if endpoint == "messages":
                stats.tokens += check_anthropic(decoded)
            else:
                stats.tokens += check_openai(decoded, endpoint == "chat_completions",
                                             body.get("stream_options", {}).get("include_usage", False))
            stats.completed += 1
        except Exception as e:  # noqa: BLE001 - collected and reported
            stats.malformed.append(f"{endpoint} #{i}: {e!r}: {text[:400]!r}")
    finally:
        writer.transport.abort() if disconnect else writer.close()


async def run_load(host: str, port: int, args) -> Stats:
    stats = Stats()
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(args.requests):
        queue.put_nowait(i)
    rng = random.Random(args.seed)

    async def worker():
        while not queue.empty():
            i = queue.get_nowait()
            try:
                await one(i, host, port, random.Random(rng.random() + i), args, stats)
            except Exception as e:  # noqa: BLE001
                stats.malformed.append(f"#{i}: client error {e!r}")

    await asyncio.gather(*(worker() for _ in range(args.concurrency)))
    return stats


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def check_metrics(before: dict, after: dict, stats: Stats) -> list[str]:
    problems = []
    delta = lambda name, **labels: metric_sum(after, name, **labels) - metric_sum(before, name, **labels)  # noqa: E731
    for endpoint, sent in stats.sent.items():
        got = delta("deepinfer_http_requests_total", endpoint=endpoint)
        if got != sent:
            problems.append(f"http_requests_total{{endpoint={endpoint}}} +{got}, sent {sent}")
    started = delta("deepinfer_generations_started_total")
    completed = delta("deepinfer_generations_total", outcome="completed")
    gone = delta("deepinfer_generations_total", outcome="client_disconnect")
    errors = delta("deepinfer_generations_total", outcome="error")
    if started != completed + gone + errors:
        problems.append(f"started {started} != completed {completed} + disconnect {gone} + error {errors}")
    if errors:
        problems.append(f"{errors} generations ended in error")
    ok_streams = stats.status.get(200, 0)
    if completed + gone != ok_streams:
        problems.append(f"server completed {completed} + disconnects {gone} != {ok_streams} streams started")
    # A client that hung up after its first event may still have been sent everything.
    if not stats.completed + len(stats.malformed) <= completed <= stats.completed + stats.disconnected:
        problems.append(f"server completed {completed}, clients read {stats.completed} complete streams")
    if gone > stats.disconnected:
        problems.append(f"server saw {gone} disconnects, clients made {stats.disconnected}")
    finished = delta("deepinfer_engine_requests_finished_total")  # every ended request, aborted ones too
    aborted = delta("deepinfer_engine_requests_aborted_total")
    if finished != started:
        problems.append(f"engine requests finished {finished} != generations started {started}")
    if aborted > gone:
        problems.append(f"engine aborted {aborted} requests, more than the {gone} disconnects")
    for gauge in ("deepinfer_cache_slots_used", "deepinfer_num_requests_running", "deepinfer_num_requests_waiting",
                  "deepinfer_generations_running"):
        if after.get(gauge) != before.get(gauge):
            problems.append(f"{gauge}: {after.get(gauge)} after, {before.get(gauge)} idle before")
    if request_blocks(after) != 0:
        problems.append(f"blocks still held by requests: {after.get('deepinfer_cache_blocks_used')} used, "
                        f"{after.get('deepinfer_cache_packs')} packs")
    if after.get("deepinfer_cache_packs", 0) == 0 and after.get("deepinfer_cache_blocks_used") != before.get(
            "deepinfer_cache_blocks_used"):
        problems.append("cache usage differs from its idle value")
    return problems


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("binary", nargs="?")
    p.add_argument("--url")
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--concurrency", type=int, default=128)
    p.add_argument("--max-tokens", type=int, default=8)
    p.add_argument("--disconnect-fraction", type=float, default=0.1)
    p.add_argument("--system-fraction", type=float, default=0.05,
                   help="chat/messages requests with the long shared system prompt (prefix cache)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--json")
    p.add_argument("--serve-args", default="", help="extra flags for deepinfer serve")
    args = p.parse_args()

    server = None
    if args.url:
        host, port = args.url.split("//")[1].split(":")
        port = int(port)
        probe = Server("")
        probe.port = port
    else:
        server = Server(args.binary, args.serve_args.split()).start()
        probe, host, port = server, "127.0.0.1", server.port
    try:
        before = wait_idle(probe)
        start = time.perf_counter()
        stats = asyncio.run(run_load(host, port, args))
        elapsed = time.perf_counter() - start
        after = wait_idle(probe, timeout=120)
        problems = check_metrics(before, after, stats)
        server_errors = sum(n for s, n in stats.status.items() if s >= 500)
        if server_errors:
            problems.append(f"{server_errors} responses with status >= 500")
        problems += [f"malformed: {m}" for m in stats.malformed[:20]]
        if server is not None and not server.alive():
            problems.append("the server died")
        report = {
            "requests": args.requests, "concurrency": args.concurrency, "seconds": round(elapsed, 2),
            "requests_per_s": round(args.requests / elapsed, 1), "status": stats.status,
            "completed_streams": stats.completed, "client_disconnects": stats.disconnected,
            "malformed": len(stats.malformed), "server_errors": server_errors,
            "completion_tokens": stats.tokens,
            "ttfb_p50_ms": round(pct(stats.ttfb, 0.5) * 1000, 1), "ttfb_p99_ms": round(pct(stats.ttfb, 0.99) * 1000, 1),
            "server_disconnects_seen": metric_sum(after, "deepinfer_generations_total", outcome="client_disconnect")
            - metric_sum(before, "deepinfer_generations_total", outcome="client_disconnect"),
            "cache_blocks_used_after": after.get("deepinfer_cache_blocks_used"),
            "problems": problems,
        }
        print(json.dumps(report, indent=2))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(report, f, indent=2)
        if server is not None and server.stop() != 0:
            problems.append("non-zero exit after SIGTERM")
        return 1 if problems else 0
    finally:
        if server is not None:
            server.kill()


if __name__ == "__main__":
    sys.exit(main())
