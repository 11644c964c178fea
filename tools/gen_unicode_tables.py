#!/usr/bin/env python3
"""Generates src/tokenizer/unicode_tables.cpp: the Unicode data our tokenizer regexes need so that
PCRE2 (Debian 12: 10.42, Unicode 14.0) classifies code points exactly as the Hugging Face
`tokenizers` library does (Oniguruma for Split/ByteLevel regexes, Rust `regex` for the added-token
flags), whose Unicode tables are newer.

The reference sets are measured by black-box probing of the pinned `tokenizers` wheel
(tests/requirements.txt): every code point is run through the library and its classification is
read back. PCRE2's own sets are measured the same way through libpcre2-8 (ctypes). For each class
item we emit what must be added to PCRE2's item (`added`) and what must be taken away (`removed`).

Usage: python3 tools/gen_unicode_tables.py [OUT.cpp]   (needs tokenizers and libpcre2-8; ~3 min)
"""
import ctypes
import ctypes.util
import json
import sys

import tokenizers
from tokenizers import Regex, Tokenizer
from tokenizers.pre_tokenizers import Split

ALL_CPS = [c for c in range(0x110000) if not 0xD800 <= c < 0xE000]
ALL_TEXT = "".join(chr(c) for c in ALL_CPS)
ALL_SET = frozenset(ALL_CPS)

GENERAL_CATEGORIES = (
    "L Lu Ll Lt Lm Lo M Mn Mc Me N Nd Nl No P Pc Pd Ps Pe Pi Pf Po S Sm Sc Sk So Z Zs Zl Zp "
    "C Cc Cf Co Cn").split()
SCRIPTS = (
    "Latin Greek Cyrillic Armenian Hebrew Arabic Syriac Thaana Devanagari Bengali Gurmukhi "
    "Gujarati Oriya Tamil Telugu Kannada Malayalam Sinhala Thai Lao Tibetan Myanmar Georgian "
    "Hangul Ethiopic Cherokee Khmer Mongolian Hiragana Katakana Bopomofo Han Yi Common "
    "Inherited").split()
# (name as written in an Oniguruma pattern, PCRE2 class items that approximate it from below)
SHORTHANDS = [("\\s", "\\s"), ("\\d", "\\p{Nd}"), ("\\w", "\\p{L}\\p{M}\\p{Nd}\\p{Pc}")]
# An item whose PCRE2 counterpart matches code points the reference does not is emitted as an
# explicit range list when the list is at most this long (so it also works inside classes).
MAX_EXPLICIT_RANGES = 64

PCRE2_UTF, PCRE2_UCP = 0x00080000, 0x00020000


class Pcre2:
    def __init__(self):
        lib = ctypes.CDLL(ctypes.util.find_library("pcre2-8") or "libpcre2-8.so.0")
        lib.pcre2_compile_8.restype = ctypes.c_void_p
        lib.pcre2_compile_8.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint32,
                                        ctypes.POINTER(ctypes.c_int),
                                        ctypes.POINTER(ctypes.c_size_t), ctypes.c_void_p]
        lib.pcre2_match_data_create_from_pattern_8.restype = ctypes.c_void_p
        lib.pcre2_match_data_create_from_pattern_8.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        lib.pcre2_match_8.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t,
                                      ctypes.c_size_t, ctypes.c_uint32, ctypes.c_void_p,
                                      ctypes.c_void_p]
        lib.pcre2_get_ovector_pointer_8.restype = ctypes.POINTER(ctypes.c_size_t)
        lib.pcre2_get_ovector_pointer_8.argtypes = [ctypes.c_void_p]
        lib.pcre2_config_8.argtypes = [ctypes.c_uint32, ctypes.c_void_p]
        self.lib = lib
        self.subject = ALL_TEXT.encode()
        # byte offset of a character start -> its index in ALL_CPS
        self.index_at = {}
        offset = 0
        for index, c in enumerate(ALL_CPS):
            self.index_at[offset] = index
            offset += len(chr(c).encode())
        self.index_at[offset] = len(ALL_CPS)

    def unicode_version(self):
        buf = ctypes.create_string_buffer(64)
        self.lib.pcre2_config_8(10, buf)  # PCRE2_CONFIG_UNICODE_VERSION
        return buf.value.decode()

    def members(self, items):
        pattern = f"[{items}]+".encode()  # runs: one match call per run of members
        err, erroff = ctypes.c_int(), ctypes.c_size_t()
        code = self.lib.pcre2_compile_8(pattern, len(pattern), PCRE2_UTF | PCRE2_UCP,
                                        ctypes.byref(err), ctypes.byref(erroff), None)
        if not code:
            raise RuntimeError(f"PCRE2 cannot compile {pattern!r}")
        md = self.lib.pcre2_match_data_create_from_pattern_8(code, None)
        out, start, n = set(), 0, len(self.subject)
        while start < n and self.lib.pcre2_match_8(code, self.subject, n, start, 0, md, None) > 0:
            ov = self.lib.pcre2_get_ovector_pointer_8(md)
            out.update(ALL_CPS[self.index_at[ov[0]]:self.index_at[ov[1]]])
            start = ov[1]
        return out


def reference_members(pattern):
    """Code points that the reference's Oniguruma regex `pattern` matches (one char each)."""
    pieces = Split(Regex(pattern), "removed").pre_tokenize_str(ALL_TEXT)
    kept = {ord(ch) for piece, _ in pieces for ch in piece}
    return ALL_SET - kept


def byte_level_tokenizer(added):
    bs = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    vocab = {chr(c): i for i, c in enumerate(cs)}
    spec = {"version": "1.0", "truncation": None, "padding": None, "normalizer": None,
            "added_tokens": [dict(id=256, content="@@", single_word=False, lstrip=False,
                                  rstrip=False, normalized=False, special=False) | added],
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False,
                              "trim_offsets": False, "use_regex": False},
            "post_processor": None, "decoder": None,
            "model": {"type": "BPE", "vocab": vocab, "merges": []}}
    return Tokenizer.from_str(json.dumps(spec))


def added_token_members(flag, text_of):
    """Code points for which the reference's added-token `flag` logic treats c as word/space."""
    tok = byte_level_tokenizer({flag: True})
    texts = [text_of(chr(c)) for c in ALL_CPS]
    out = set()
    for c, enc in zip(ALL_CPS, tok.encode_batch(texts, add_special_tokens=False)):
        ids = enc.ids
        if flag == "single_word" and 256 not in ids:
            out.add(c)  # c is a word character: "@@" glued to it is not a single word
        if flag == "lstrip" and ids == [256]:
            out.add(c)  # c was stripped into the token: it is a space
    return out


def ranges(cps):
    out = []
    for c in sorted(cps):
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return out


def emit_ranges(name, cps):
    body = ", ".join(f"{{0x{a:X}, 0x{b:X}}}" for a, b in ranges(cps))
    return f"constexpr CodepointRange {name}[] = {{{body}}};\n" if cps else \
        f"constexpr std::span<const CodepointRange> {name};\n"


def main():
    out_path = sys.argv[1] if len(sys.argv) > 1 else "src/tokenizer/unicode_tables.cpp"
    pcre = Pcre2()
    items = [(gc, f"\\p{{{gc}}}", f"\\p{{{gc}}}") for gc in GENERAL_CATEGORIES]
    items += [(sc, f"\\p{{{sc}}}", f"\\p{{sc:{sc}}}") for sc in SCRIPTS]
    items += [(name, name, pcre_items) for name, pcre_items in SHORTHANDS]
    # Inside a class Oniguruma's \w leaves out a few Latin-1 numbers that a bare \w matches;
    # "[\w]"-style items record the in-class meaning where it differs.
    items += [(f"[{name}]", f"[{name}]", pcre_items) for name, pcre_items in SHORTHANDS
              if reference_members(name) != reference_members(f"[{name}]")]
    defs, table = [], []
    for index, (name, onig, pcre_items) in enumerate(items):
        ref = reference_members(onig)
        ours = pcre.members(pcre_items)
        added, removed = ref - ours, ours - ref
        if removed and len(ranges(ref)) <= MAX_EXPLICIT_RANGES:
            pcre_items, added, removed = "", ref, set()
        print(f"{name:10s} ref={len(ref):7d} added={len(added):6d} removed={len(removed):6d}"
              f" explicit={pcre_items == ''}", file=sys.stderr)
        defs.append(emit_ranges(f"kAdded{index}", added))
        defs.append(emit_ranges(f"kRemoved{index}", removed))
        escaped = pcre_items.replace("\\", "\\\\")
        table.append(f'    {{"{json.dumps(name)[1:-1]}", "{escaped}", kAdded{index}, '
                     f"kRemoved{index}}},\n")
    word = added_token_members("single_word", lambda c: c + "@@")
    space = added_token_members("lstrip", lambda c: c + "@@")
    print(f"added-token word={len(word)} space={len(space)}", file=sys.stderr)
    with open(out_path, "w") as f:
        f.write("// Generated by tools/gen_unicode_tables.py; do not edit.\n"
                f"// Reference: tokenizers {tokenizers.__version__} (PyPI), probed code point by "
                "code point.\n"
                f"// PCRE2 Unicode version the deltas are relative to: {pcre.unicode_version()}.\n"
                "#include \"tokenizer/unicode_tables.h\"\n\n"
                "namespace deepinfer::tokenizer_internal {\nnamespace {\n")
        f.writelines(defs)
        f.write(emit_ranges("kAddedTokenWord", word))
        f.write(emit_ranges("kAddedTokenSpace", space))
        f.write("}  // namespace\n\n"
                f'const std::string_view kTablesPcre2UnicodeVersion = "{pcre.unicode_version()}";\n'
                f'const std::string_view kTablesReference = "tokenizers {tokenizers.__version__}";\n'
                "std::span<const ClassItemDelta> ClassItemDeltas() {\n"
                "  static const ClassItemDelta kItems[] = {\n")
        f.writelines(table)
        f.write("  };\n  return kItems;\n}\n"
                "const std::span<const CodepointRange> kAddedTokenWordRanges = kAddedTokenWord;\n"
                "const std::span<const CodepointRange> kAddedTokenSpaceRanges = kAddedTokenSpace;\n"
                "\n}  // namespace deepinfer::tokenizer_internal\n")


if __name__ == "__main__":
    main()
