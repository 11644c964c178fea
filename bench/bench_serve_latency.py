#!/usr/bin/env python3
"""The HTTP server's own added latency: time to first byte minus the engine's TTFT.

For every request the server streams its first bytes as soon as the engine's first token is
out, so  added = TTFB - engine TTFT  is what the server itself costs on the way in (reading the
request, JSON parsing, chat encoding, tokenization, submission) and out (waking the session,
detokenizing, parsing, formatting, writing). With the header `x-deepinfer-timing: 1` the
server appends an SSE comment `: timing {"ttfb_s", "engine_ttft_s", "server_added_s"}` to the
stream (SDKs ignore comments); this script reads it and also measures TTFB on the client
(first response byte), so two figures are reported:
  server_added  = server-measured TTFB (request headers read -> first token bytes written)
                  minus engine TTFT (submission -> first token)
  client_added  = client-measured TTFB (request sent -> first response byte) minus engine TTFT
                  (adds loopback and the client's own wake-up)

Usage: bench_serve_latency.py [PATH/TO/deepinfer | --url URL] [--requests N] [--concurrency C]
                              [--api openai|anthropic|completions] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e"))
from server_harness import MODEL, Server  # noqa: E402

BODIES = {
    "openai": ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": 'What does "ocean" mean?'}],
                                        "max_tokens": 2, "stream": True, "thinking": {"type": "disabled"}}),
    "anthropic": ("/v1/messages", {"model": MODEL, "messages": [{"role": "user", "content": 'What does "ocean" mean?'}],
                                   "max_tokens": 2, "stream": True, "thinking": {"type": "disabled"}}),
    "completions": ("/v1/completions", {"model": MODEL, "prompt": "The meaning of life is", "max_tokens": 2,
                                        "stream": True}),
}


def one(port: int, path: str, body: dict) -> dict:
    payload = json.dumps(body).encode()
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        request = (f"POST {path} HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
                   f"x-deepinfer-timing: 1\r\nanthropic-version: 2023-06-01\r\n"
                   f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n").encode() + payload
        start = time.perf_counter()
        sock.sendall(request)
        data = sock.recv(65536)
        ttfb = time.perf_counter() - start
        while True:
            more = sock.recv(65536)
            if not more:
                break
            data += more
    finally:
        sock.close()
    text = data.decode(errors="replace")
    assert text.startswith("HTTP/1.1 200"), text[:200]
    marker = text.index(": timing ")
    timing = json.loads(text[marker + 9:text.index("\n", marker)])
    return {"client_ttfb": ttfb, "engine_ttft": timing["engine_ttft_s"], "server_ttfb": timing["ttfb_s"],
            "server_added": timing["server_added_s"], "client_added": ttfb - timing["engine_ttft_s"]}


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def run(port: int, api: str, requests: int, concurrency: int) -> list[dict]:
    path, body = BODIES[api]
    results: list[dict] = []
    lock = threading.Lock()
    counter = iter(range(requests))

    def worker():
        while True:
            with lock:
                if next(counter, None) is None:
                    return
            r = one(port, path, body)
            with lock:
                results.append(r)

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def summarize(results: list[dict]) -> dict:
    out = {"requests": len(results)}
    for key in ("server_added", "client_added", "engine_ttft", "client_ttfb"):
        values = [r[key] for r in results]
        out[f"{key}_p50_ms"] = round(pct(values, 0.5) * 1000, 3)
        out[f"{key}_p99_ms"] = round(pct(values, 0.99) * 1000, 3)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("binary", nargs="?")
    p.add_argument("--url")
    p.add_argument("--requests", type=int, default=300)
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    p.add_argument("--api", nargs="+", default=["openai", "anthropic", "completions"])
    p.add_argument("--json")
    args = p.parse_args()
    server = None
    if args.url:
        port = int(args.url.rsplit(":", 1)[1])
    else:
        server = Server(args.binary).start()
        port = server.port
    try:
        report = {}
        for api in args.api:
            run(port, api, 10, 1)  # warm-up
            for c in args.concurrency:
                summary = summarize(run(port, api, args.requests, c))
                report[f"{api}_c{c}"] = summary
                print(f"{api:12s} concurrency {c:3d}: server-added p50 {summary['server_added_p50_ms']:.3f} ms "
                      f"p99 {summary['server_added_p99_ms']:.3f} ms | client-measured p50 "
                      f"{summary['client_added_p50_ms']:.3f} ms p99 {summary['client_added_p99_ms']:.3f} ms | "
                      f"engine TTFT p50 {summary['engine_ttft_p50_ms']:.2f} ms", flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(report, f, indent=2)
        return 0
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    sys.exit(main())
