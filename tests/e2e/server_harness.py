"""Starts and stops a real `deepinfer serve` on loopback for the e2e tests and benchmarks.

The server binds 127.0.0.1 on a free port (--port 0; the port is read from its log line
"serving ... on http://127.0.0.1:PORT"). stop() sends SIGTERM and checks that the server
drains and exits 0. The Python clients the tests drive (openai, anthropic, pinned in
tests/requirements.txt) are installed on first use if they are missing.
"""
from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REQUIREMENTS = os.path.join(REPO, "tests", "requirements.txt")
MODEL = "deepinfer-v4-demo"


def ensure_clients() -> None:
    """Installs tests/requirements.txt when the pinned openai/anthropic are not importable."""
    pins = {}
    with open(REQUIREMENTS) as f:
        for line in f:
            line = line.split("#")[0].strip()
            if "==" in line:
                name, version = line.split("==")
                pins[name.strip()] = version.strip()
    try:
        import anthropic  # noqa: F401
        import openai  # noqa: F401
        ok = openai.__version__ == pins.get("openai") and anthropic.__version__ == pins.get("anthropic")
    except ImportError:
        ok = False
    if not ok:
        subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "-r", REQUIREMENTS])


class Server:
    """A `deepinfer serve` child process."""

    def __init__(self, binary: str, args: list[str] | None = None, api_key: str | None = None,
                 timeout: float = 300.0):
        self.binary = binary
        self.args = list(args or [])
        self.api_key = api_key
        self.timeout = timeout
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.log_path = ""
        self._log_lines: list[str] = []

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> "Server":
        cmd = [self.binary, "serve", "--host", "127.0.0.1", "--port", "0", *self.args]
        if self.api_key:
            cmd += ["--api-key", self.api_key]
        log = tempfile.NamedTemporaryFile("w+", prefix="deepinfer-serve-", suffix=".log", delete=False)
        self.log_path = log.name
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, text=True)
        deadline = time.time() + self.timeout
        pattern = re.compile(r"serving .* on http://127\.0\.0\.1:(\d+)")
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"deepinfer serve exited with {self.proc.returncode}:\n{self.log()}")
            match = pattern.search(self.log())
            if match:
                self.port = int(match.group(1))
                break
            time.sleep(0.1)
        else:
            self.kill()
            raise RuntimeError(f"deepinfer serve did not start in {self.timeout} s:\n{self.log()}")
        status, _, _ = self.request("GET", "/health")
        if status != 200:
            raise RuntimeError(f"/health answered {status}")
        return self

    def stop(self, timeout: float = 120.0) -> int:
        """SIGTERM, wait for the drain; returns the exit code (0 expected)."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise RuntimeError(f"deepinfer serve did not exit {timeout} s after SIGTERM:\n{self.log()[-4000:]}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def __enter__(self) -> "Server":
        return self.start()

    def __exit__(self, *exc) -> None:
        try:
            self.stop()
        finally:
            self.kill()

    # -- plain HTTP ------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def request(self, method: str, path: str, body: bytes | str | dict | None = None,
                headers: dict | None = None, timeout: float = 300.0) -> tuple[int, dict, bytes]:
        """One request on a fresh connection: (status, lower-cased headers, body)."""
        if isinstance(body, dict):
            body = json.dumps(body)
        if isinstance(body, str):
            body = body.encode()
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            hdrs = {"Content-Type": "application/json"} if body is not None else {}
            hdrs.update(headers or {})
            conn.request(method, path, body=body, headers=hdrs)
            resp = conn.getresponse()
            data = resp.read()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
        finally:
            conn.close()

    def metrics(self) -> dict[str, float]:
        """/metrics as {series: value} (series with labels keep them in the key)."""
        status, _, body = self.request("GET", "/metrics")
        assert status == 200, status
        out = {}
        for line in body.decode().splitlines():
            if not line or line.startswith("#"):
                continue
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
        return out


def metric_sum(metrics: dict[str, float], prefix: str, **labels: str) -> float:
    """Sum of the series named `prefix` whose labels include `labels`."""
    total = 0.0
    for key, value in metrics.items():
        name = key.split("{", 1)[0]
        if name != prefix:
            continue
        if all(f'{k}="{v}"' in key for k, v in labels.items()):
            total += value
    return total


def request_blocks(metrics: dict[str, float]) -> float:
    """State-cache blocks that requests still hold: the engine's used blocks minus at most one
    block per ready resume pack (a pack keeps a copy of its partial block; packs are cache
    content, freed by LRU eviction, not by requests)."""
    used = metrics.get("deepinfer_cache_blocks_used", 1)
    return max(0.0, used - metrics.get("deepinfer_cache_packs", 0))


def wait_idle(server: Server, timeout: float = 60.0) -> dict[str, float]:
    """Waits until the engine has no running/waiting requests and no referenced blocks."""
    deadline = time.time() + timeout
    while True:
        m = server.metrics()
        idle = (m.get("deepinfer_num_requests_running", 1) == 0 and m.get("deepinfer_num_requests_waiting", 1) == 0
                and request_blocks(m) == 0 and m.get("deepinfer_cache_slots_used", 1) == 0
                and m.get("deepinfer_generations_running", 1) == 0)
        if idle or time.time() > deadline:
            return m
        time.sleep(0.05)


class Suite:
    """A minimal test runner: named cases, each a function; failures are collected."""

    def __init__(self, name: str):
        self.name = name
        self.results: list[tuple[str, bool, str]] = []
        self._lock = threading.Lock()

    def run(self, name: str, fn, *args) -> bool:
        start = time.time()
        try:
            fn(*args)
            ok, detail = True, ""
        except Exception:  # noqa: BLE001 - any failure is reported, not raised
            ok, detail = False, traceback.format_exc()
        with self._lock:
            self.results.append((name, ok, detail))
        print(f"{'PASS' if ok else 'FAIL'} {name} ({time.time() - start:.2f} s)", flush=True)
        if detail:
            print(detail, flush=True)
        return ok

    def finish(self) -> int:
        failed = [r for r in self.results if not r[1]]
        print(f"{self.name}: {len(self.results) - len(failed)}/{len(self.results)} passed", flush=True)
        return 1 if failed or not self.results else 0
