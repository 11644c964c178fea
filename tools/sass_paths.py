#!/usr/bin/env python3
"""Static checks on `cuobjdump -sass` output: a kernel's instructions along one path, and which
kernels two builds share instruction for instruction.

    cuobjdump -sass linear.o > a.sass          # or the `deepinfer` binary
    python3 tools/sass_paths.py loops a.sass 'ExpertsFp4RegistersKernelILi8ELi3E'
    python3 tools/sass_paths.py path a.sass 'ExpertsFp4RegistersKernelILi8ELi3E' d150 f820 \\
        --taken d260,e4c0 [--list]
    python3 tools/sass_paths.py same a.sass b.sass ['Experts|HcMix']

`loops` prints the kernel's backward branches (loop ends and their heads) and its first MMA of
each chunk (an HGMMA/QGMMA that ignores its accumulator), the landmarks for choosing a path.
`path` walks the kernel from address START until it reaches STOP: unconditional branches are
followed, a conditional one is followed only where its address is in --taken (else it falls
through), and each conditional branch it passes is printed, so that the decisions can be
corrected and the walk repeated. It prints the number of instructions walked, with --list each
one, and the opcodes' counts. A warp pays for every instruction its lanes execute, so a path of
lane 0's branch counts once for the warp.
`same` compares every kernel the two listings share by name (the translation unit's hash in
anonymous namespaces dropped) and says which differ; a change behind a switch that is off should
leave the old kernels identical. Used in docs/performance.md, version 45 (this machine's toolkit has
no cuobjdump: PyPI's nvidia-cuda-cuobjdump wheel provides one).
"""
import argparse
import collections
import re
import sys

FUNCTION = re.compile(r"^\s*Function : (\S+)")
INSTRUCTION = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
BRANCH = re.compile(r"^(@!?U?P\w+\s+)?BRA(\.\w+)*\s+(?:!?U?P\w+,\s*)?0x([0-9a-f]+)$")
ANONYMOUS = re.compile(r"_GLOBAL__N__[0-9a-f]+_\d+_\w+?_cu_[0-9a-f]+")


def kernels(lines):
    """{mangled name: [(address, instruction text)]} of a cuobjdump -sass listing."""
    result = {}
    current = None
    for line in lines:
        m = FUNCTION.match(line)
        if m:
            current = result.setdefault(m.group(1), [])
            continue
        m = INSTRUCTION.match(line)
        if m and current is not None:
            current.append((int(m.group(1), 16), m.group(2)))
    return result


def one_kernel(path, pattern):
    with open(path) as f:
        found = {k: v for k, v in kernels(f).items() if re.search(pattern, k)}
    if len(found) != 1:
        sys.exit(f"{len(found)} kernels match '{pattern}': " + ", ".join(sorted(found))[:2000])
    return next(iter(found.items()))


def cmd_loops(args):
    name, body = one_kernel(args.sass, args.kernel)
    print(name)
    for address, text in body:
        m = BRANCH.match(text)
        if m and int(m.group(3), 16) < address:
            print(f"  loop end {address:x} -> head {int(m.group(3), 16):x}: {text}")
        elif "GMMA" in text and "!UPT" in text:
            print(f"  first MMA of a chunk at {address:x}: {text}")


def cmd_path(args):
    name, body = one_kernel(args.sass, args.kernel)
    at = {address: text for address, text in body}
    order = [address for address, _ in body]
    following = dict(zip(order, order[1:]))
    taken = {int(a, 16) for a in args.taken.split(",") if a}
    pc, stop = int(args.start, 16), int(args.stop, 16)
    walked = []
    while pc != stop:
        if pc not in at or len(walked) > args.limit:
            sys.exit(f"left the kernel or passed {args.limit} instructions at {pc:x}: check START, STOP and --taken")
        text = at[pc]
        walked.append((pc, text))
        m = BRANCH.match(text)
        if m and (m.group(1) is None or pc in taken):
            pc = int(m.group(3), 16)
            continue
        if m:
            print(f"  not taken at {pc:x}: {text}")
        pc = following.get(pc, -1)
    print(f"{name}\n{len(walked)} instructions from {args.start} to {args.stop}")
    if args.list:
        for address, text in walked:
            print(f"  {address:x} {text}")
    opcodes = collections.Counter(re.sub(r"^@!?U?P\w+\s+", "", t).split()[0].split(".")[0] for _, t in walked)
    print("  " + ", ".join(f"{op} {n}" for op, n in opcodes.most_common()))


def cmd_same(args):
    listings = []
    for path in (args.a, args.b):
        with open(path) as f:
            listings.append({ANONYMOUS.sub("", k): [t for _, t in v] for k, v in kernels(f).items()})
    a, b = listings
    shared = sorted(k for k in a if k in b and re.search(args.pattern, k))
    different = [k for k in shared if a[k] != b[k]]
    print(f"{len(shared)} kernels in both, {len(shared) - len(different)} identical, {len(different)} different; "
          f"{len([k for k in a if k not in b])} only in {args.a}, {len([k for k in b if k not in a])} only in {args.b}")
    for k in different:
        print(f"  differs: {k} ({len(a[k])} / {len(b[k])} instructions)")
    return 1 if different else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("loops", help="a kernel's loops and chunk MMAs")
    p.add_argument("sass")
    p.add_argument("kernel", help="regex over mangled names, matching one kernel")
    p.set_defaults(run=cmd_loops)
    p = sub.add_parser("path", help="instructions along one path")
    p.add_argument("sass")
    p.add_argument("kernel", help="regex over mangled names, matching one kernel")
    p.add_argument("start", help="hex address the walk starts at")
    p.add_argument("stop", help="hex address the walk stops before")
    p.add_argument("--taken", default="", help="comma-separated hex addresses of conditional branches to follow")
    p.add_argument("--list", action="store_true", help="print every instruction walked")
    p.add_argument("--limit", type=int, default=5000)
    p.set_defaults(run=cmd_path)
    p = sub.add_parser("same", help="kernels two listings share instruction for instruction")
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("pattern", nargs="?", default=".")
    p.set_defaults(run=cmd_same)
    args = parser.parse_args()
    sys.exit(args.run(args) or 0)


if __name__ == "__main__":
    main()
