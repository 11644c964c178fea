"""Greedy goldens of the shipped demo model for the C++ engine: tests/data/demo/greedy_golden.json.

  python3 -m tools.demo.make_greedy_golden [--model models/deepinfer-v4-demo] [--n-new 64]

20 prompts (plain text and V4 chat renderings: chat mode, thinking mode, multi-turn, system
prompt), their ids under the shipped tokenizer, and 64 greedy tokens from tools/dsv4 running
exactly the shipped safetensors (BF16 weights upcast, fp32 math, CPU, quantization simulation
off): one-shot prefill of the prompt, then token-by-token decode. Generation does NOT stop at
EOS (first_eos_index says where the first EOS is), so an engine test can run with ignore_eos or
compare up to and including the first EOS. min_margin is the smallest top-1/top-2 logit gap over
the 64 steps (step_margins: each step's); the 20 cases are picked from a larger candidate pool by
largest min_margin within each prompt group; csa_topk_binds says whether some query saw more CSA rows than index_topk.
"""
import argparse
import hashlib
import json
import os

import torch
from tokenizers import Tokenizer

from tools.dsv4.checkpoint import load_model

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
BOS, EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
U, A = "<｜User｜>", "<｜Assistant｜>"

LONG_TEXT = (
    "Debian is a free operating system, developed and maintained by the Debian project. "
    "It comes with thousands of packages, precompiled software bundled up in a nice format "
    "for easy installation on your machine. The package manager keeps track of which files "
    "belong to which package, which other packages a package depends on, and which versions "
    "are installed. When you want to add a program, you ask the package manager to fetch it "
    "from a mirror, check its signature, unpack it and configure it. When a new version is "
    "released, the same tool upgrades the whole system in one step, and it can remove a "
    "package together with the files it installed. Administrators like this because the "
    "system stays consistent, and users like it because software is only a command away. "
    "The most common tools for this work are")


def chat(q, system="", thinking=False, history=()):
    s = BOS + system
    for hq, ha in history:
        s += U + hq + A + "</think>" + ha + EOS
    return s + U + q + A + ("<think>" if thinking else "</think>")


LONG_TEXT2 = (
    "A dictionary lists the words of a language in alphabetical order and explains what each of "
    "them means. A good entry gives the part of speech, the pronunciation and the origin of the "
    "word, and then one or more senses, each with a short definition and often an example of its "
    "use. Some words have a single plain meaning, while others have grown many senses over the "
    "centuries, some of them now rare or obsolete. Readers open a dictionary when they meet an "
    "unfamiliar word, when they are unsure how to spell it, or when they want to choose between "
    "two words that seem to mean the same thing. The word")

# candidate pool: (name, group, kind, text); the 20 shipped cases are the ones with the largest
# top-1/top-2 margins within each group (quota below), so that fp32 rounding differences between
# implementations cannot flip a greedy token
CANDIDATES = [
    ("plain-life", "plain", "plain", BOS + "The meaning of life is"),
    ("plain-apple", "plain", "plain", BOS + "apple (noun):"),
    ("plain-debian", "plain", "plain", BOS + "Debian is"),
    ("plain-apt", "plain", "plain", BOS + "To install a package with apt, you"),
    ("plain-once", "plain", "plain", BOS + "Once upon a time, there was a"),
    ("plain-computer-gcide", "plain", "plain", BOS + "Computer (noun): "),
    ("plain-devil-love", "plain", "plain", BOS + "LOVE, n."),
    ("plain-devil-war", "plain", "plain", BOS + "WAR, n."),
    ("plain-jargon", "plain", "plain", BOS + "hacker: "),
    ("plain-jargon-kernel", "plain", "plain", BOS + "kernel: "),
    ("plain-nobos-fox", "plain", "plain", "The quick brown fox"),
    ("plain-friend", "plain", "plain", BOS + "A good friend is"),
    ("plain-dog", "plain", "plain", BOS + "dog (noun):"),
    ("plain-run", "plain", "plain", BOS + "run (verb):"),
    ("plain-learn", "plain", "plain", BOS + "The best way to learn a language is"),
    ("plain-beginning", "plain", "plain", BOS + "In the beginning"),
    ("plain-happiness", "plain", "plain", BOS + "Happiness is"),
    ("plain-long-debian", "plain-long", "plain", BOS + LONG_TEXT),
    ("plain-long-dictionary", "plain-long", "plain", BOS + LONG_TEXT2),
    ("chat-ocean", "chat", "chat", chat("What does \"ocean\" mean?")),
    ("chat-happiness", "chat", "chat", chat("Define happiness.")),
    ("chat-fortune", "chat", "chat", chat("Tell me a fortune.")),
    ("chat-computer", "chat", "chat", chat("What is a computer?")),
    ("chat-devil-friendship", "chat", "chat", chat("What does the Devil's Dictionary say about friendship?")),
    ("chat-devil-money", "chat", "chat", chat("What does the Devil's Dictionary say about money?")),
    ("chat-jargon", "chat", "chat", chat("What is kludge in hacker jargon?")),
    ("chat-cat", "chat", "chat", chat("What does cat mean?")),
    ("chat-garden", "chat", "chat", chat("Define the word garden.")),
    ("chat-wise", "chat", "chat", chat("Tell me something wise.")),
    ("chat-teacher", "chat", "chat", chat("What is a teacher?")),
    ("chat-quote", "chat", "chat", chat("Give me a quote.")),
    ("chat-long-debian", "chat-long", "chat", chat("Read this and tell me which tools it means.\n\n" + LONG_TEXT + " apt and dpkg.")),
    ("chat-long-dictionary", "chat-long", "chat", chat("Summarize this text.\n\n" + LONG_TEXT2 + " is the unit.")),
    ("chat-multiturn-fortune", "multi-turn", "multi-turn", chat("Tell me a fortune.", history=[(
        "What does \"brave\" mean?", "Brave means possessing or displaying courage.")])),
    ("chat-multiturn-define", "multi-turn", "multi-turn", chat("Define bridge.", history=[(
        "Tell me a fortune.", "A journey of a thousand miles begins with a single step.")])),
    ("chat-system-river", "system", "chat+system", chat("What does river mean?", system="You are a helpful assistant.")),
    ("chat-system-book", "system", "chat+system", chat("What is a book?", system="You are DeepInfer's demo model. Answer briefly.")),
    ("thinking-mountain", "thinking", "thinking", chat("What does mountain mean?", thinking=True)),
    ("thinking-music", "thinking", "thinking", chat("What does music mean?", thinking=True)),
]
QUOTA = {"plain": 9, "plain-long": 1, "chat": 6, "chat-long": 1, "multi-turn": 1, "system": 1, "thinking": 1}


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(REPO, "models", "deepinfer-v4-demo"))
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "data", "demo", "greedy_golden.json"))
    ap.add_argument("--n-new", type=int, default=64)
    args = ap.parse_args()
    torch.set_num_threads(1)
    model, cfg = load_model(args.model)
    tok = Tokenizer.from_file(os.path.join(args.model, "tokenizer.json"))
    cases = []
    for name, group, kind, text in CANDIDATES:
        ids = tok.encode(text, add_special_tokens=False).ids
        gen, steps = model.generate(ids, args.n_new, eos=None)
        margins = []
        for lg in steps:
            top2 = lg.topk(2).values
            margins.append((top2[0] - top2[1]).item())
        total = len(ids) + args.n_new
        eos_at = gen.index(cfg.eos_id) if cfg.eos_id in gen else None
        cases.append({
            "name": name, "group": group, "kind": kind, "prompt": text, "prompt_ids": ids, "greedy_ids": gen,
            "greedy_text": tok.decode(gen, skip_special_tokens=False),
            "first_eos_index": eos_at, "min_margin": round(min(margins), 5),
            "step_margins": [round(m, 5) for m in margins],
            "csa_topk_binds": (total - 1 + 1) // 4 > cfg.index_topk})
        print(f"[{name}] margin {min(margins):.3f} eos@{eos_at}: {text[-60:]!r} -> "
              f"{tok.decode(gen[:eos_at + 1] if eos_at is not None else gen, skip_special_tokens=False)!r}", flush=True)
    chosen = []
    for g, q in QUOTA.items():
        grp = sorted([c for c in cases if c["group"] == g], key=lambda c: -c["min_margin"])
        chosen += grp[:q]
    assert len(chosen) == 20, len(chosen)
    chosen.sort(key=lambda c: [x[0] for x in CANDIDATES].index(c["name"]))
    cases = chosen
    out = {
        "description": "Greedy continuations of the shipped demo model, computed by tools/dsv4 (the training "
                       "implementation) on exactly models/deepinfer-v4-demo/model.safetensors: BF16 weights "
                       "upcast to fp32, fp32 math on CPU, no quantization simulation; one-shot prefill of "
                       "prompt_ids then token-by-token decode; generation continues past EOS.",
        "made_by": "python3 -m tools.demo.make_greedy_golden",
        "model_dir": "models/deepinfer-v4-demo",
        "model_safetensors_sha256": sha256(os.path.join(args.model, "model.safetensors")),
        "tokenizer_json_sha256": sha256(os.path.join(args.model, "tokenizer.json")),
        "n_new": args.n_new, "bos_id": cfg.bos_id, "eos_id": cfg.eos_id,
        "cases": cases}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
    print(f"wrote {args.out}: {len(cases)} cases; min margin {min(c['min_margin'] for c in cases):.4f}")


if __name__ == "__main__":
    main()
