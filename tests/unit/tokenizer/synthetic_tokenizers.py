"""Small tokenizer.json specs and corpora for compare_hf.py --synthetic.

Each case targets features the DeepSeek-V4 file does not use (or uses only one way): added-token
flags (single_word, lstrip, rstrip, normalized, special), overlapping added tokens, every Split
behavior with and without invert, String patterns, regexes that match the empty string, the
Oniguruma constructs our translator rewrites, ByteLevel with add_prefix_space / use_regex, models
without ByteLevel (unk_token, fuse_unk, byte_fallback, ignore_merges) and merges in pair form.
The merges join most adjacent pairs of a small alphabet, so a piece boundary in a different place
changes the ids. Corpora are deterministic (fixed seeds).
"""
import itertools
import random


def _byte_level_table():
    bs = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


BYTE_CHAR = _byte_level_table()
ALPHABET = "abcxyz019 .,-_'"


def _byte_level_model(extra_merges=(), pair_form=False):
    vocab = {BYTE_CHAR[b]: b for b in range(256)}  # ids = byte values
    merges = []
    symbols = [BYTE_CHAR[ord(c)] for c in ALPHABET]
    for left, right in itertools.product(symbols, symbols):
        merges.append((left, right))
    for left, right in [("ab", "c"), ("Ġa", "b"), ("x", "yz"), ("0", "19"), ("ĠĠ", "ĠĠ")] + list(extra_merges):
        merges.append((left, right))
    for left, right in merges:
        vocab.setdefault(left + right, len(vocab))
    for left, right in merges:  # parts of the extra merges, e.g. "yz", "19"
        vocab.setdefault(left, len(vocab))
        vocab.setdefault(right, len(vocab))
    encoded = [[l, r] for l, r in merges] if pair_form else [f"{l} {r}" for l, r in merges]
    return {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
            "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
            "vocab": vocab, "merges": encoded}


def _spec(model, pre_tokenizer, added=()):
    tokens = []
    next_id = max(model["vocab"].values()) + 1
    for entry in added:
        content = entry["content"]
        token_id = model["vocab"].get(content)
        if token_id is None:
            token_id, next_id = next_id, next_id + 1
        tokens.append({"id": token_id, "content": content,
                       "single_word": entry.get("single_word", False),
                       "lstrip": entry.get("lstrip", False), "rstrip": entry.get("rstrip", False),
                       "normalized": entry.get("normalized", False),
                       "special": entry.get("special", False)})
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": tokens,
            "normalizer": None, "pre_tokenizer": pre_tokenizer, "post_processor": None,
            "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                        "use_regex": True},
            "model": model}


def _byte_level(add_prefix_space=False, use_regex=True):
    return {"type": "ByteLevel", "add_prefix_space": add_prefix_space, "trim_offsets": True,
            "use_regex": use_regex}


def _split(pattern, behavior="Isolated", invert=False, literal=False):
    return {"type": "Split", "pattern": {"String" if literal else "Regex": pattern},
            "behavior": behavior, "invert": invert}


def _sequence(*steps):
    return {"type": "Sequence", "pretokenizers": list(steps)}


SPACES = [" ", "  ", "\t", "\r", "\u00a0", "\u2000", "\u3000", "\u180e", "\u200b", "\u0085",
          "\u2028", "\x0b", "\x0c"]
WORDISH = ["a", "Z", "9", "_", "é", "中", "ー", "²", "½", "\u0301", "-", ".", "!", "😀", "ǅ", "Ⅻ",
           "\u1c89", "\U0001fae8", "\u0897"]


def _random_lines(seed, pieces, count, max_parts=12):
    r = random.Random(seed)
    lines = []
    for _ in range(count):
        lines.append("".join(r.choice(pieces) for _ in range(r.randint(0, max_parts))))
    return lines


def _added_token_case():
    added = [
        {"content": "<mask>", "single_word": True, "lstrip": True, "rstrip": True},
        {"content": "[SEP]", "rstrip": True, "special": True},
        {"content": "[CLS]", "lstrip": True, "special": True},
        {"content": "ony", "single_word": True, "normalized": True},
        {"content": "my", "lstrip": True, "rstrip": True, "normalized": True},
        {"content": " sp", "normalized": False},
        {"content": "ab", "normalized": False},
        {"content": "abcx", "normalized": True},
        {"content": "<s>", "special": True},
        {"content": "<s>", "special": True, "lstrip": True},   # same content, other flags
        {"content": "a", "special": False},                     # already in the vocabulary
        {"content": "<|w|>", "single_word": True, "special": True},
    ]
    pieces = ["<mask>", "[SEP]", "[CLS]", "ony", "my", " sp", "ab", "abcx", "<s>", "a", "<|w|>",
              "x", "bc", "yz"] + SPACES + WORDISH
    corpus = ["[CLS] My name is Anthony [SEP]", "Hi <mask> there\t<mask>\t<mask>\u2000",
              "<mask> My name <mask> A<mask> <mask>ony <mask>", "<mask>, <mask>- \u25cc\u0330<mask>",
              "abcx ab abc  sp sp", "ony_ ony ony² ½ony", "x<s>  <s>\t<s>y", "<|w|>a <|w|> é<|w|>"]
    corpus += _random_lines(11, pieces, 1500)
    spec = _spec(_byte_level_model(), _byte_level(), added)
    return "added_tokens", spec, corpus


def _behavior_cases():
    cases = []
    pieces = ["a", "b", "c", "x", "y", "z", "0", "1", "9", " ", "  ", ".", ",", "-", "_", "'",
              "é", "中文", "\t", "\u3000", "😀"]
    patterns = [("[abc]+", False), ("a*", False), ("\\s*", False), ("(?=x)", False), (".", True),
                ("ab", True), ("", True), ("\\b", False), ("x|", False)]
    behaviors = ["Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"]
    for index, ((pattern, literal), behavior, invert) in enumerate(
            itertools.product(patterns, behaviors, [False, True])):
        pre = _sequence(_split(pattern, behavior, invert, literal), _byte_level(use_regex=False))
        corpus = _random_lines(100 + index, pieces, 60)
        cases.append((f"split_{index}", _spec(_byte_level_model(), pre), corpus))
    return cases


REGEXES = [
    r"\s+", r"\S+", r"\w+", r"\W+", r"\d+", r"\D+", r"\h+", r"\H+", r"\p{Han}+", r"\p{^L}+",
    r"\P{N}+", r"[^\s\p{L}\p{N}]+", r"\p{N}{1,3}", r"x{,2}", r"(?m:a.b)", r"a.b", r"^\s*\w", r"\w$",
    r"(?i)AB|Z", r"(?<=a)b+", r"\u4e2d+", r"\x{6587}+", r"[\w.]+", r"[\s\d]+", r"[^\S]+",
    r"\p{Lu}\p{Ll}*", r"\p{C}+", r"[\p{P}\p{S}]+", r"\p{Cyrillic}+|\p{Latin}+", r"a\b", r"\Bb",
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
]


def _regex_cases():
    pieces = ["a", "b", "A", "B", "x", "Z", "0", "9", "19", " ", "  ", "\t", "\r", "\u3000",
              "\u180e", "\u2028", "\u0085", ".", ",", "-", "_", "'s", "'T", "é", "E\u0301", "中",
              "文", "Ж", "ж", "Ω", "ǅ", "²", "½", "Ⅻ", "٣", "😀", "\U0001fae8", "\u1c89", "\u2ebf0",
              "\ue000", "\U0010fffd", "\u0378", "'", "ſ", "K", "ß", "DF"]
    cases = []
    for index, pattern in enumerate(REGEXES):
        for behavior in ("Isolated", "MergedWithNext"):
            pre = _sequence(_split(pattern, behavior), _byte_level(add_prefix_space=index % 2 == 0,
                                                                    use_regex=False))
            corpus = _random_lines(500 + index, pieces, 80)
            cases.append((f"regex_{index}_{behavior}", _spec(_byte_level_model(), pre), corpus))
    return cases


def _char_model_cases():
    chars = list("abcxyz019 .,") + ["é", "中", "[UNK]"]
    vocab = {c: i for i, c in enumerate(chars)}
    merges = [("a", "b"), ("ab", "c"), ("x", "y"), ("xy", "z"), (" ", "a"), ("1", "9"), ("0", "19")]
    for left, right in merges:
        vocab.setdefault(left + right, len(vocab))
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    pieces = ["a", "b", "c", "x", "y", "z", "0", "1", "9", " ", ".", "é", "中", "ж", "😀", "\u3000",
              "abc", "xyz", "019"]
    cases = []
    for index, (unk, fuse, fallback, ignore, pairs) in enumerate([
            (None, False, False, False, False), ("[UNK]", False, False, False, True),
            ("[UNK]", True, False, False, False), (None, False, True, False, True),
            ("[UNK]", True, True, True, False)]):
        # the string form cannot hold a token with a space: only the pair form gets (" ", "a")
        encoded = ([[l, r] for l, r in merges] if pairs else
                   [f"{l} {r}" for l, r in merges if " " not in l + r])
        model = {"type": "BPE", "dropout": None, "unk_token": unk, "continuing_subword_prefix": None,
                 "end_of_word_suffix": None, "fuse_unk": fuse, "byte_fallback": fallback,
                 "ignore_merges": ignore, "vocab": dict(vocab), "merges": encoded}
        if fallback:  # without its own characters: every non-ASCII char falls back to bytes
            del model["vocab"]["é"], model["vocab"]["中"]
        pre = None if index % 2 == 0 else _sequence(_split(r"\s+", "MergedWithNext"))
        spec = _spec(model, pre, [{"content": "<s>", "special": True}])
        cases.append((f"chars_{index}", spec, _random_lines(900 + index, pieces + ["<s>"], 200)))
    # merges in pair form may hold a space inside a token
    model = {"type": "BPE", "vocab": {"a": 0, " ": 1, "b": 2, "a ": 3, "a b": 4},
             "merges": [["a", " "], ["a ", "b"]]}
    cases.append(("pair_merges_with_space", _spec(model, None),
                  _random_lines(950, ["a", " ", "b", "a b"], 100)))
    return cases


def _prefix_space_cases():
    pieces = ["a", "b", "x", "1", " ", "  ", ".", "中", "\t"]
    cases = []
    for index, (prefix, regex) in enumerate(itertools.product([False, True], [False, True])):
        pre = _sequence(_split(r"\d", "Isolated"), _byte_level(prefix, regex))
        spec = _spec(_byte_level_model(pair_form=True), pre, [{"content": "<s>", "special": True}])
        cases.append((f"byte_level_{index}", spec, _random_lines(700 + index, pieces + ["<s>"], 150)))
    spec = _spec(_byte_level_model(), _byte_level(True, True))
    cases.append(("byte_level_only", spec, _random_lines(710, pieces, 150)))
    return cases


def cases():
    """(name, tokenizer.json dict, corpus lines) for every synthetic case."""
    return ([_added_token_case()] + _behavior_cases() + _regex_cases() + _char_model_cases() +
            _prefix_space_cases())
