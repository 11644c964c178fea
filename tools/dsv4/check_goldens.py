"""Check tools/dsv4 against DeepSeek's reference goldens (../shared/fixtures/goldens-v4).

For each archive: per-layer residual streams at the dump positions (one-shot prefill), the
last-position prefill logits, and the greedy continuation through the token-by-token decode
path (plus each decode step's top-5 logits). fp32 on CPU.

  python3 -m tools.dsv4.check_goldens [--dir DIR_WITH_TGZ_OR_UNPACKED] [--quick]
"""
import argparse
import glob
import json
import os
import sys
import tarfile
import tempfile
import time

import torch
from safetensors.torch import load_file

from .checkpoint import load_model

DEFAULT_DIRS = [os.path.join(os.path.dirname(__file__), "../../tests/data/goldens-v4"),
                os.path.join(os.path.dirname(__file__), "../../../shared/fixtures/goldens-v4"),
                "/work/shared/fixtures/goldens-v4"]


def find_cases(d):
    cases = {}
    for tgz in sorted(glob.glob(os.path.join(d, "*.tgz"))):
        cases[os.path.basename(tgz)[:-4]] = tgz
    for cfg in sorted(glob.glob(os.path.join(d, "*", "golden.json"))):
        cases.setdefault(os.path.basename(os.path.dirname(cfg)), os.path.dirname(cfg))
    return cases


def check_case(name, src, tmp, quick=False):
    if src.endswith(".tgz"):
        with tarfile.open(src) as tf:
            tf.extractall(tmp, filter="data")
        src = os.path.join(tmp, name)
    g = json.load(open(os.path.join(src, "golden.json")))
    gt = load_file(os.path.join(src, "golden_tensors.safetensors"))
    model, cfg = load_model(src)
    ids = torch.tensor([g["prompt_ids"]])
    res = {"case": name, "prompt_len": ids.shape[1]}
    with torch.no_grad():
        out = model(ids, want_mtp=False, dump_streams=True)
    pos = torch.tensor(g["dump_positions"])
    worst = 0.0
    first_bad = None
    for i, X in enumerate(out["streams"]):
        ref = gt[f"layer{i}.hidden_streams"]
        err = (X[0, pos] - ref).abs().max().item()
        rel = err / ref.abs().max().item()
        worst = max(worst, rel)
        if rel > 1e-4 and first_bad is None:
            first_bad = i
    res["streams_max_rel_err"] = worst
    res["first_layer_over_1e-4"] = first_bad
    last = out["logits"][0, -1]
    ref_logits = gt["prefill.last_logits"]
    res["prefill_logits_max_abs_err"] = (last - ref_logits).abs().max().item()
    res["prefill_argmax_match"] = int(last.argmax()) == int(ref_logits.argmax())
    n_new = len(g["greedy_continuation"])
    if quick:
        n_new = min(n_new, 4)
    t0 = time.time()
    gen, steps = model.generate(g["prompt_ids"], n_new)
    res["decode_seconds"] = round(time.time() - t0, 1)
    res["greedy_match"] = gen == g["greedy_continuation"][:n_new]
    res["greedy_tokens"] = f"{sum(a == b for a, b in zip(gen, g['greedy_continuation']))}/{n_new}"
    err = 0.0
    for lg, ref in zip(steps, g["steps"]):
        err = max(err, (lg[torch.tensor(ref["top5_ids"])] - torch.tensor(ref["top5_logits"])).abs().max().item())
    res["decode_top5_logit_max_abs_err"] = err
    # the decode path's first logits = prefill's last logits
    res["decode_vs_prefill_last_logits"] = (steps[0] - last).abs().max().item()
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=None)
    ap.add_argument("--quick", action="store_true", help="only 4 decode steps")
    args = ap.parse_args()
    torch.set_num_threads(1)
    dirs = [args.dir] if args.dir else DEFAULT_DIRS
    cases = {}
    for d in dirs:
        if d and os.path.isdir(d):
            cases = find_cases(d)
            if cases:
                print(f"goldens from {os.path.abspath(d)}")
                break
    if not cases:
        sys.exit("no goldens found")
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for name, src in cases.items():
            r = check_case(name, src, tmp, args.quick)
            print(json.dumps(r))
            good = (r["greedy_match"] and r["prefill_logits_max_abs_err"] < 1e-3
                    and r["streams_max_rel_err"] < 1e-4)
            ok &= good
    print("ALL GOLDENS MATCH" if ok else "GOLDEN MISMATCH")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
