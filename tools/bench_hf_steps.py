#!/usr/bin/env python3
"""HF transformers' DeepseekV4ForCausalLM on the shapes of `deepinfer bench steps`, as the
side-by-side baseline: the time of one decode step at (batch, context) and of a one-sequence
prefill, on the same config with random BF16 weights (speed only; HF is not a numerical oracle
for V4, see tests/data/goldens-v4/README.md).

Decode: a prefill of `batch` random prompts of `context` tokens builds HF's cache, then
--iterations single-token steps are timed (CUDA synchronized around them). HF's eager attention
materializes [batch, heads, context, context] scores in that prefill, so points whose scores
would pass --max-score-gib are reported as skipped instead of run. Prefill: one forward over a
prompt. Prints one JSON object.

    python3 tools/bench_hf_steps.py bench/configs/v4-flash-3layer --points 1:1024,1:8192,64:1024 --prompts 1024,8192
"""
import argparse
import json
import os
import time


def parse_points(text):
    points = []
    for item in text.split(","):
        batch, context = item.split(":")
        points.append((int(batch), int(context)))
    return points


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config_dir")
    ap.add_argument("--points", default="1:1024,8:1024,32:1024,64:1024,1:8192",
                    help="decode points as BATCH:CONTEXT, comma-separated")
    ap.add_argument("--prompts", default="1024,8192", help="prefill prompt lengths")
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--max-score-gib", type=float, default=40.0)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()

    import torch
    from transformers import DeepseekV4Config, DeepseekV4ForCausalLM

    with open(os.path.join(args.config_dir, "config.json")) as f:
        raw = json.load(f)
    raw.pop("quantization_config", None)  # random BF16 weights, not the FP8 checkpoint format
    config = DeepseekV4Config(**raw)
    torch.manual_seed(0)
    with torch.device(args.device):
        model = DeepseekV4ForCausalLM(config).to(torch.bfloat16).eval()
    gen = torch.Generator(device="cpu").manual_seed(1)

    def ids(batch, length):
        return torch.randint(2, config.vocab_size, (batch, length), generator=gen).to(args.device)

    def score_gib(batch, length):
        return batch * config.num_attention_heads * length * length * 2 / 2**30

    def sync():
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()

    report = {"engine": "hf-transformers", "transformers": __import__("transformers").__version__,
              "config": args.config_dir, "dtype": "bfloat16", "decode": [], "prefill": []}
    for batch, context in parse_points(args.points):
        point = {"batch": batch, "context": context}
        past = out = None
        if score_gib(batch, context) > args.max_score_gib:
            point["skipped"] = f"prefill scores of {score_gib(batch, context):.0f} GiB"
            report["decode"].append(point)
            continue
        try:
            with torch.no_grad():
                out = model(input_ids=ids(batch, context), use_cache=True)
                past = out.past_key_values
                step = ids(batch, 1)
                out = model(input_ids=step, past_key_values=past, use_cache=True)  # warm-up step
                past = out.past_key_values
                sync()
                t0 = time.perf_counter()
                for _ in range(args.iterations):
                    out = model(input_ids=step, past_key_values=past, use_cache=True)
                    past = out.past_key_values
                sync()
                point["step_seconds"] = (time.perf_counter() - t0) / args.iterations
                point["tokens_per_s"] = batch / point["step_seconds"]
        except torch.cuda.OutOfMemoryError as e:
            point["skipped"] = "out of memory: " + str(e).split("\n")[0][:120]
        past = out = None
        torch.cuda.empty_cache()
        report["decode"].append(point)
    for prompt in (int(p) for p in args.prompts.split(",")):
        point = {"prompt": prompt}
        try:
            with torch.no_grad():
                x = ids(1, prompt)
                model(input_ids=x, use_cache=False)  # warm-up
                sync()
                t0 = time.perf_counter()
                model(input_ids=x, use_cache=False)
                sync()
                point["seconds"] = time.perf_counter() - t0
                point["tokens_per_s"] = prompt / point["seconds"]
        except torch.cuda.OutOfMemoryError as e:
            point["skipped"] = "out of memory: " + str(e).split("\n")[0][:120]
        torch.cuda.empty_cache()
        report["prefill"].append(point)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
