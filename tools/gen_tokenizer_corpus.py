#!/usr/bin/env python3
"""Generates the tokenizer comparison corpus (tests/data/tokenizer/corpus.txt): varied lines of
English, Chinese, Japanese, Korean, code, emoji, digit runs, odd whitespace, mixed scripts,
special-token strings inside text, and random Unicode (including code points assigned only in
recent Unicode versions). Every fragment is written here or drawn from code point ranges; the
output is a deterministic function of --seed and --lines.

Lines never contain '\\n' (the corpus is compared line by line) but do contain '\\r', tabs and
other line-breaking characters. Output is UTF-8, one line per '\\n'.

Usage: python3 tools/gen_tokenizer_corpus.py [--lines N] [--seed S] [--invalid-utf8] > FILE
  --invalid-utf8: emit lines with invalid UTF-8 byte sequences instead (for the lossy-input test).
"""
import argparse
import random
import sys

NOUNS = ("model token engine cache request server thread kernel matrix vector tensor batch queue "
         "river mountain city library garden window teacher student doctor machine network file "
         "memory budget report meeting question answer problem solution language planet ocean "
         "forest bridge street market kitchen bicycle camera picture story letter dream").split()
VERBS = ("runs builds reads writes sends loads checks finds makes takes gives keeps moves opens "
         "closes starts stops tries explains computes returns splits merges decodes encodes "
         "measures compares fixes breaks learns teaches").split()
ADJECTIVES = ("quick small large bright quiet strange simple careful ancient modern empty full "
              "rapid slow gentle fierce curious broken shiny noisy").split()
ADVERBS = "quickly slowly carefully rarely often never always almost really quite".split()
CONTRACTIONS = ("it's don't can't we're they've I'm you'll she'd isn't won't shouldn't "
                "y'all o'clock rock'n'roll").split()
NAMES = "Alice Bob Carol Dave Eve Mallory Trent Peggy Victor Walter Zoë José Ōtani Müller".split()

ZH = ("我们 今天 天气 很好 模型 推理 引擎 分词器 测试 数据 中文 句子 人工智能 深度学习 计算机 "
      "北京 上海 学校 老师 学生 朋友 喜欢 吃饭 睡觉 工作 时间 问题 答案 重要 简单 困难 世界 "
      "發展 經濟 語言 學習 電腦 網絡 開發 測試 繁體 臺灣 香港").split()
ZH_PUNCT = "，。！？；：、“”‘’（）《》【】…—·"
JA = ("こんにちは ありがとう すみません わたし あなた 今日 明日 東京 大阪 日本語 勉強 "
      "カタカナ ひらがな コンピュータ プログラム テスト トークン データ ラーメン "
      "食べます 行きます 見ました 楽しい 美しい 新しい ｶﾀｶﾅ ﾃｽﾄ").split()
JA_PUNCT = "、。「」『』・ー〜！？"
KO = ("안녕하세요 감사합니다 한국어 학교 선생님 학생 컴퓨터 프로그램 테스트 데이터 "
      "사랑 오늘 내일 서울 부산 먹다 가다 보다 좋아요 어려워요 쉬워요").split()

CODE = [
    "def encode(self, text: str) -> list[int]:",
    "    return [self.vocab[t] for t in self.split(text) if t in self.vocab]",
    "for (size_t i = 0; i < n; ++i) { sum += a[i] * b[i]; }",
    "#include <vector>", "template <typename T> struct Span { T* data; size_t size; };",
    "const auto it = std::find_if(v.begin(), v.end(), [&](int x) { return x > 42; });",
    "if (x != nullptr && *x >= 0x7F) throw std::runtime_error(\"bad byte\");",
    "fn main() { let v: Vec<u32> = (0..10).map(|x| x * x).collect(); println!(\"{:?}\", v); }",
    "SELECT id, name FROM users WHERE age >= 18 AND name LIKE 'A%' ORDER BY id DESC;",
    "curl -sS -X POST http://localhost:8000/v1/chat/completions -H 'Content-Type: application/json'",
    "{\"model\": \"deepseek-v4\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}",
    "<div class=\"row\"><a href=\"https://example.com/?q=1&r=2\">link</a></div>",
    "x = lambda a, *args, **kwargs: (a, args, kwargs)",
    "console.log(`value: ${obj?.field ?? 'none'}`); // template literal",
    "git commit -m \"tokenizer: faster BPE\" && git push origin HEAD:refs/for/main",
    "a += b; b <<= 3; c = a ^ ~b | (d & 0xFF); e = f >> 2; g = !h || i && j;",
    "    \tif (ptr->next) { ptr = ptr->next; }  // mixed indentation",
    "\t\treturn {{\"key\", value}};", "print(f\"{x!r:>10} {y:.3f} {z:08b}\")",
    "std::unordered_map<std::string, std::vector<int32_t>> cache_;",
    "#!/usr/bin/env bash", "set -euo pipefail; for f in *.txt; do wc -l \"$f\"; done",
    "matrix[i][j] = (i == j) ? 1.0f : -0.5e-3f;", "assert len(ids) == 3, f'got {ids}'",
    "import numpy as np; a = np.zeros((3, 4), dtype=np.float32)",
    "$ ./deepinfer tokenize --tokenizer tokenizer.json < in.txt > out.jsonl",
]
SPECIAL_TOKENS = [
    "<｜User｜>", "<｜Assistant｜>", "<think>", "</think>", "｜DSML｜", "<｜begin▁of▁sentence｜>",
    "<｜end▁of▁sentence｜>", "<|EOT|>", "<｜tool▁calls▁begin｜>", "<｜tool▁call▁end｜>",
    "<｜tool▁sep｜>", "<dsml:", "</dsml:", "<｜fim▁hole｜>", "<｜place▁holder▁no▁7｜>",
    "<｜▁pad▁｜>", "<｜/table>｜", "<｜table｜>", "<|place_holder_mm_span_0001|>",
]
PARTIAL_SPECIAL = ["<think", "think>", "</think", "<｜User", "User｜>", "｜DSML", "DSML｜", "<｜",
                   "｜>", "<|EOT", "<dsml", "<<think>>", "<｜User｜｜>", "<ｔｈｉｎｋ>"]
EMOJI = ["😀", "😂", "🤖", "🚀", "🔥", "❤️", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇨🇳", "🇯🇵", "🇺🇸", "1️⃣",
         "#️⃣", "✈︎", "☕", "🫠", "🫨", "🪼", "🫎", "🐦‍🔥", "🍋‍🟩", "🙂‍↔️", "🧑🏿‍💻", "⚡", "✅", "❌"]
WHITESPACE = [" ", "  ", "   ", "\t", "\t\t", " \t ", "\r", "\r\r", "\x0b", "\x0c", "\u00a0",
              "\u3000", "\u2002", "\u2003", "\u2009", "\u200a", "\u200b", "\u180e", "\ufeff",
              "\u2028", "\u2029", "\u0085", "\u1680", "\u202f", "\u205f", "        "]
# Code point ranges of many scripts and symbol blocks, plus code points assigned only in Unicode
# 15 and 16 (the reference's tables are newer than PCRE2's; these exercise the deltas).
RANGES = [(0x0400, 0x04FF), (0x0370, 0x03FF), (0x0590, 0x05FF), (0x0600, 0x06FF), (0x0900, 0x097F),
          (0x0E00, 0x0E7F), (0x10A0, 0x10FF), (0x0530, 0x058F), (0x1100, 0x11FF), (0x3040, 0x30FF),
          (0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0x2000, 0x206F), (0x2190, 0x22FF), (0x2500, 0x25FF),
          (0xFF00, 0xFFEF), (0x1F300, 0x1FAFF), (0x0300, 0x036F), (0x1D400, 0x1D7FF),
          (0x20000, 0x2A6DF), (0xE000, 0xE0FF), (0x0080, 0x00FF), (0x1C80, 0x1C8A), (0xA7C0, 0xA7DC),
          (0x105C0, 0x105F3), (0x10D40, 0x10D8F), (0x11380, 0x113E2), (0x1CC00, 0x1CEB3),
          (0x2EBF0, 0x2EE5D), (0x1FA80, 0x1FAEF), (0x31350, 0x323AF), (0x0897, 0x0897),
          (0x0CF3, 0x0CF3), (0x1B4E, 0x1B7F), (0x2427, 0x2429), (0x2FFC, 0x2FFF), (0x31E4, 0x31EF),
          (0x0378, 0x0379), (0x0870, 0x089F), (0xFFF0, 0xFFFD), (0x1F1E6, 0x1F1FF)]


def rand_chars(r, n):
    out = []
    while len(out) < n:
        lo, hi = r.choice(RANGES)
        c = r.randint(lo, hi)
        if 0xD800 <= c < 0xE000 or c == 0x0A:
            continue
        out.append(chr(c))
    return "".join(out)


def number(r):
    kind = r.randrange(8)
    if kind == 0:
        return str(r.randrange(10 ** r.randint(1, 40)))
    if kind == 1:
        return f"{r.uniform(-1e6, 1e6):.{r.randint(0, 6)}f}"
    if kind == 2:
        return f"{r.randint(1900, 2100)}-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}"
    if kind == 3:
        return f"${r.randint(0, 99999):,}.{r.randint(0, 99):02d}"
    if kind == 4:
        return f"{r.randint(0, 100)}%"
    if kind == 5:
        return "".join(r.choice("０１２３４５６７８９٠١٢٣٤٥٦٧٨٩०१२३४५६७८९²³¹½¼⅓ⅫⅣ")
                       for _ in range(r.randint(1, 12)))
    if kind == 6:
        return f"+{r.randint(1, 99)} {r.randint(100, 999)}-{r.randint(1000, 9999)}"
    return f"0x{r.getrandbits(64):x}"


def english(r):
    words = []
    for _ in range(r.randint(3, 25)):
        k = r.randrange(10)
        if k < 3:
            words.append(r.choice(NOUNS))
        elif k < 5:
            words.append(r.choice(VERBS))
        elif k == 5:
            words.append(r.choice(ADJECTIVES))
        elif k == 6:
            words.append(r.choice(ADVERBS))
        elif k == 7:
            words.append(r.choice(CONTRACTIONS))
        elif k == 8:
            words.append(r.choice(NAMES))
        else:
            words.append(number(r))
        if r.random() < 0.12:
            words[-1] += r.choice([",", ";", ":", "!", "?", "...", ")", "\"", "'s", "—"])
        if r.random() < 0.08:
            words[-1] = words[-1].upper() if r.random() < 0.5 else words[-1].capitalize()
    text = " ".join(words)
    return text[:1].upper() + text[1:] + r.choice([".", "!", "?", "", " :-)", "..."])


def cjk(r, words, punct, sep=""):
    parts = []
    for _ in range(r.randint(2, 30)):
        parts.append(r.choice(words))
        if r.random() < 0.25:
            parts.append(r.choice(punct))
        if r.random() < 0.08:
            parts.append(r.choice([" ", number(r), r.choice(NOUNS), " " + r.choice(NOUNS) + " "]))
    return sep.join(parts)


def special_line(r):
    parts = []
    for _ in range(r.randint(1, 8)):
        k = r.randrange(6)
        if k < 2:
            parts.append(r.choice(SPECIAL_TOKENS))
        elif k == 2:
            parts.append(r.choice(PARTIAL_SPECIAL))
        elif k == 3:
            parts.append(english(r))
        elif k == 4:
            parts.append(cjk(r, ZH, ZH_PUNCT))
        else:
            parts.append(r.choice(WHITESPACE))
    return r.choice(["", " ", "\t"]).join(parts)


def whitespace_line(r):
    parts = []
    for _ in range(r.randint(1, 12)):
        parts.append(r.choice(WHITESPACE) * r.randint(1, 4))
        if r.random() < 0.6:
            parts.append(r.choice([r.choice(NOUNS), number(r), r.choice(EMOJI), r.choice(ZH),
                                   r.choice(".,;:!?()[]{}'\"-")]))
    return "".join(parts)


def emoji_line(r):
    parts = []
    for _ in range(r.randint(1, 15)):
        parts.append(r.choice(EMOJI))
        if r.random() < 0.4:
            parts.append(r.choice([" ", "", r.choice(NOUNS), r.choice(ZH), "!", number(r)]))
    return "".join(parts)


def mixed_line(r):
    parts = []
    for _ in range(r.randint(2, 10)):
        k = r.randrange(7)
        parts.append([english, lambda q: cjk(q, ZH, ZH_PUNCT), lambda q: cjk(q, JA, JA_PUNCT),
                      lambda q: cjk(q, KO, "., ", " "), lambda q: rand_chars(q, q.randint(1, 12)),
                      emoji_line, lambda q: q.choice(CODE)][k](r))
    return r.choice(["", " ", "  ", "\t"]).join(parts)


def digits_line(r):
    return r.choice(["", " "]).join(number(r) for _ in range(r.randint(1, 10)))


def markup_line(r):
    return r.choice([
        f"## {english(r)}", f"- [ ] {english(r)}", f"| {r.choice(NOUNS)} | {number(r)} | {r.choice(ZH)} |",
        f"$\\frac{{{r.randint(1, 9)}}}{{{r.randint(2, 9)}}} + \\sqrt{{x_{r.randint(0, 9)}}}$",
        f"> {english(r)}", f"**{r.choice(NOUNS)}** _{r.choice(ADJECTIVES)}_ `{r.choice(CODE)}`",
        f"[{r.choice(NOUNS)}](https://example.org/{r.choice(NOUNS)}?id={number(r)}#top)",
        f"<p>{english(r)}</p>", f"{r.choice(NAMES)} <{r.choice(NOUNS)}@example.com>",
    ])


def long_line(r):
    k = r.randrange(5)
    if k == 0:
        return cjk(r, ZH, ZH_PUNCT) * r.randint(5, 30)
    if k == 1:
        return " " * r.randint(50, 500) + r.choice(NOUNS) + "\t" * r.randint(5, 50)
    if k == 2:
        return "".join(r.choice("0123456789") for _ in range(r.randint(100, 2000)))
    if k == 3:
        return " ".join(english(r) for _ in range(r.randint(10, 40)))
    return rand_chars(r, r.randint(200, 1500))


GENERATORS = [
    (english, 20), (lambda r: cjk(r, ZH, ZH_PUNCT), 12), (lambda r: cjk(r, JA, JA_PUNCT), 8),
    (lambda r: cjk(r, KO, "., ", " "), 6), (lambda r: r.choice(CODE), 8), (emoji_line, 6),
    (digits_line, 6), (whitespace_line, 6), (mixed_line, 10), (special_line, 10),
    (lambda r: rand_chars(r, r.randint(1, 40)), 8), (markup_line, 5), (long_line, 1),
    (lambda r: "", 1),
]


def invalid_utf8_line(r):
    """A line of valid text with invalid or truncated UTF-8 sequences spliced in (bytes); never
    valid UTF-8 as a whole (spliced pieces can happen to form a valid character: drawn again)."""
    while True:
        line = _spliced_line(r)
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            return line


def _spliced_line(r):
    bad = [b"\x80", b"\xbf", b"\xc0\xaf", b"\xc1\x81", b"\xe0\x80\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80",
           b"\xf5", b"\xff", b"\xfe", b"\xe4\xbd", b"\xf0\x9f\x98", b"\xf0\x9f", b"\xc3", b"\xe2\x82"]
    parts = []
    for _ in range(r.randint(1, 6)):
        parts.append(r.choice([english(r), cjk(r, ZH, ZH_PUNCT), r.choice(EMOJI), ""]).encode())
        parts.append(b"".join(r.choice(bad) for _ in range(r.randint(1, 3))))
    return b"".join(parts)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=6000)
    parser.add_argument("--seed", type=int, default=20240501)
    parser.add_argument("--invalid-utf8", action="store_true")
    args = parser.parse_args()
    r = random.Random(args.seed)
    out = sys.stdout.buffer
    generators = [g for g, w in GENERATORS for _ in range(w)]
    for _ in range(args.lines):
        if args.invalid_utf8:
            line = invalid_utf8_line(r)
        else:
            line = r.choice(generators)(r).replace("\n", " ").encode()
        out.write(line.replace(b"\n", b" ") + b"\n")


if __name__ == "__main__":
    main()
