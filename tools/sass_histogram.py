#!/usr/bin/env python3
"""Static SASS instruction counts per kernel, from `cuobjdump -sass` output.

    cuobjdump -sass build/gpu-dist/deepinfer > all.sass
    python3 tools/sass_histogram.py all.sass 'ExpertsGemvKernel' [--top 12]

For every function whose mangled name matches the regex: the instruction count and the most
frequent opcodes (the first dot-separated part, predicates dropped). Static counts, not executed
ones: they say what a loop body is made of (e.g. index arithmetic against decoding), and ncu's
issued-instruction figures say how often it ran.
"""
import argparse
import collections
import re
import sys

FUNCTION = re.compile(r"^\s*Function : (\S+)")
INSTRUCTION = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[0-9T]\s+)?([A-Z][A-Z0-9_]*)")


def histograms(lines, pattern):
    current = None
    counts = {}
    for line in lines:
        m = FUNCTION.match(line)
        if m:
            current = m.group(1) if pattern.search(m.group(1)) else None
            if current is not None:
                counts.setdefault(current, collections.Counter())
            continue
        if current is None:
            continue
        m = INSTRUCTION.match(line)
        if m:
            counts[current][m.group(1)] += 1
    return counts


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sass", help="cuobjdump -sass output ('-' for stdin)")
    parser.add_argument("regex", help="regex over the mangled function names")
    parser.add_argument("--top", type=int, default=12, help="opcodes listed per function")
    args = parser.parse_args()
    source = sys.stdin if args.sass == "-" else open(args.sass, encoding="utf-8", errors="replace")
    counts = histograms(source, re.compile(args.regex))
    if not counts:
        print(f"no function matches {args.regex!r}", file=sys.stderr)
        return 1
    for name, c in counts.items():
        total = sum(c.values())
        top = ", ".join(f"{op} {n}" for op, n in c.most_common(args.top))
        print(f"{name}\n  {total} instructions: {top}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
