#!/usr/bin/env python3
"""Throughput of HF transformers' DeepseekV4ForCausalLM on a config directory, for a side-by-side
with `deepinfer bench overlap` on the same config in the same run.

Random BF16 weights (HF cannot load our dummy weights; the numbers are about speed only), greedy
generation of --new-tokens tokens for --batch prompts of --prompt-len random tokens, prefill
included in the time, as in ../shared/design/performance.md. Prints one JSON line.

    python3 tools/bench_hf_v4.py bench/configs/v4-flash-2layer --batch 1 --prompt-len 512 --new-tokens 32
"""
import argparse
import json
import os
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config_dir")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--warmup", type=int, default=1, help="untimed generations first")
    args = ap.parse_args()

    import torch
    from transformers import DeepseekV4Config, DeepseekV4ForCausalLM

    with open(os.path.join(args.config_dir, "config.json")) as f:
        raw = json.load(f)
    raw.pop("quantization_config", None)  # random BF16 weights, not the FP8 checkpoint format
    config = DeepseekV4Config(**raw)
    dtype = getattr(torch, args.dtype)
    torch.manual_seed(0)
    with torch.device(args.device):
        model = DeepseekV4ForCausalLM(config).to(dtype).eval()
    gen = torch.Generator(device="cpu").manual_seed(1)
    ids = torch.randint(2, config.vocab_size, (args.batch, args.prompt_len), generator=gen).to(args.device)
    mask = torch.ones_like(ids)

    def run() -> float:
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=args.new_tokens,
                                 min_new_tokens=args.new_tokens, do_sample=False)
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        assert out.shape == (args.batch, args.prompt_len + args.new_tokens), out.shape
        return time.perf_counter() - t0

    for _ in range(args.warmup):
        run()
    seconds = run()
    print(json.dumps({
        "engine": "hf-transformers", "transformers": __import__("transformers").__version__,
        "config": args.config_dir, "device": args.device, "dtype": args.dtype, "batch": args.batch,
        "prompt_len": args.prompt_len, "new_tokens": args.new_tokens, "seconds": seconds,
        "output_tokens_per_s": args.batch * args.new_tokens / seconds,
    }))


if __name__ == "__main__":
    main()
