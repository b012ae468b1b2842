#!/usr/bin/env python3
"""Deterministic tokenizer test corpus: writes N strings (default 10,000), one per line,
hex-encoded because some are deliberately invalid UTF-8. Usage: tok_corpus.py OUT [N] [SEED]
Covers mixed scripts (Latin, CJK, Cyrillic, Arabic, Devanagari, ...), emoji and ZWJ
sequences, digits of every length, runs of spaces/tabs/newlines and Unicode spaces,
contractions, code, special-token look-alikes and invalid UTF-8."""
import random
import sys

WORDS = {
    "latin": ["hello", "world", "The", "quick", "brown", "fox", "jumps", "über", "naïve", "café",
              "façade", "Straße", "élan", "años", "ÆØÅ", "smörgåsbord", "coöperate", "İstanbul",
              "ﬁnance", "Ǆemal", "ǅ", "ſtate", "KELVIN", "résumé", "piñata", "ZAŻÓŁĆ", "hyphen-ated"],
    "cjk": ["你好", "世界", "中文分词", "東京", "こんにちは", "カタカナ", "ひらがな", "漢字", "한국어", "안녕하세요",
            "일이삼", "我们的", "㐀㐁", "𠀀𠀁", "ｆｕｌｌｗｉｄｔｈ", "１２３", "。、「」"],
    "cyrillic": ["Привет", "мир", "Ёлка", "щука", "Україна", "ґанок", "Београд", "СССР", "ъ"],
    "arabic": ["مرحبا", "بالعالم", "السلام", "عليكم", "٠١٢٣٤٥", "ﷺ", "لا", "كتاب"],
    "devanagari": ["नमस्ते", "दुनिया", "हिन्दी", "क्षत्रिय", "०१२३", "श्री", "ड़"],
    "other": ["Γειά", "σου", "Κόσμε", "שלום", "עולם", "สวัสดี", "ភាសា", "ሰላም", "Ժողովուրդ", "ქართული",
              "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "𝟘𝟙𝟚", "Ⅻ", "½¾", "²³", "ℌ", "ℵ", "∑∫∂", "→⇒", "©®™", "°C", "µs"],
    "emoji": ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "❤️", "🇺🇸", "🇯🇵", "🧑🏿‍💻", "👩‍❤️‍💋‍👨", "✌︎",
              "🤷‍♀️", "1️⃣", "#️⃣", "🫠", "🦄", "☕", "⚡", "\u200d", "\ufe0f"],
    "contraction": ["it's", "don't", "we're", "they've", "I'm", "you'll", "he'd", "IT'S", "DON'T",
                    "We'Re", "I'M", "YOU'LL", "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "o'clock",
                    "rock'n'roll", "it’s", "''", "'", "'''"],
    "code": ["def f(x):\n    return x**2", "int main(void) { return 0; }", "for (i=0;i<n;i++) {",
             "if x == 1:\n\tpass", "console.log('hi');", "{\"key\": [1, 2.5, null]}", "<div class=\"a\">",
             "SELECT * FROM t WHERE id=42;", "a->b", "x += 1;", "#include <stdio.h>", "$HOME/.bashrc",
             "`code`", "~/path/to/file.txt", "http://example.com/?q=1&r=2", "0x1F 0b101 1e-9",
             "lambda: None", "std::vector<int>", "```python\nprint(1)\n```", "a_b_c", "__init__"],
    "special": ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<s>", "</s>", "<unk>", "<pad>",
                "<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>", "<|begin_of_text|>",
                "<|eot_id|>", "<|start_header_id|>", "[INST]", "[/INST]", "<<SYS>>", "<0x41>",
                "<0xFF>", "▁", "▁▁", "<|im_sta", "<|im_end", "<<|im_end|>>", "<|im_start|>system",
                "<|im_end|>\n", "<repo_name>", "<filename>", "<mask>", "<|fim_prefix|>", "<think>",
                "</think>", "<|", "|>", "<>", "<|endoftext|><|endoftext|>", "<image_soft_token>",
                "[multimodal]", "<start_of_image>"],
}

SPACES = [" ", "  ", "   ", "    ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", "\r\n", "\r", " \n", "\n ",
          "\u00a0", "\u2009", "\u3000", "\u2028", "\u0085", "\u200b", "\u202f", " \t \n", "\x0b", "\x0c"]

PUNCT = list(".,;:!?-—–()[]{}<>\"'`~@#$%^&*_+=|\\/…«»¿¡")


def digits(r):
    n = r.choice([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 15, 16, 20, 25, 30, 40])
    s = "".join(r.choice("0123456789") for _ in range(n))
    return r.choice([s, s, "-" + s, s + "." + s[: r.randint(1, 5)], "1,234,567", s + "%", "$" + s,
                     "٣٤٥", "१२३", "①②", "1st", "2nd", s + "px", "v" + s])


def invalid_bytes(r):
    kinds = [
        lambda: bytes([r.randint(0x80, 0xBF)]),                       # lone continuation
        lambda: bytes([r.choice([0xC3, 0xE2, 0xF0])]),                # truncated lead
        lambda: b"\xe2\x82",                                           # truncated 3-byte
        lambda: b"\xf0\x9f\x98",                                       # truncated 4-byte
        lambda: bytes([r.choice([0xFE, 0xFF, 0xC0, 0xC1, 0xF5, 0xF8])]),  # never valid
        lambda: b"\xc0\xaf",                                           # overlong '/'
        lambda: b"\xe0\x80\xaf",                                       # overlong 3-byte
        lambda: b"\xed\xa0\x80",                                       # surrogate
        lambda: b"\xf4\x90\x80\x80",                                   # above U+10FFFF
        lambda: bytes(r.randint(0, 255) for _ in range(r.randint(1, 6))),  # noise
    ]
    return r.choice(kinds)()


def piece(r):
    cat = r.choice(["latin", "latin", "cjk", "cyrillic", "arabic", "devanagari", "other", "emoji",
                    "contraction", "code", "special", "digits", "space", "punct"])
    if cat == "digits":
        return digits(r)
    if cat == "space":
        return r.choice(SPACES) * r.choice([1, 1, 1, 2, 3, 8])
    if cat == "punct":
        return "".join(r.choice(PUNCT) for _ in range(r.randint(1, 4)))
    return r.choice(WORDS[cat])


def text(r, max_pieces):
    parts = []
    for _ in range(r.randint(1, max_pieces)):
        parts.append(piece(r))
        parts.append(r.choice([" ", " ", " ", "", "", "\n", "  ", "\t", ", ", ". "]))
    s = "".join(parts)
    if r.random() < 0.2:
        s = s.strip()
    return s


def make(n, seed):
    r = random.Random(seed)
    out = [b"", b" ", b"  ", b"\n", b"\t", b"a", b"0", b"12345678901234567890", b" Hello", b"Hello",
           "▁Hello".encode(), b"<|im_start|>user\nhi<|im_end|>\n"]
    # every single word, alone and with a leading space
    for cat in sorted(WORDS):
        for w in WORDS[cat]:
            out += [w.encode(), (" " + w).encode()]
    for s in SPACES:
        out += [(s + "x").encode(), ("x" + s).encode(), (s * 5).encode(), ("x" + s * 3 + "y").encode()]
    for k in range(1, 41):  # digits of every length
        out.append("".join(str((i * 7 + k) % 10) for i in range(k)).encode())
    while len(out) < n:
        u = r.random()
        if u < 0.70:
            b = text(r, 12).encode()
        elif u < 0.85:  # invalid UTF-8 spliced into text
            a = text(r, 4).encode()
            cut = r.randint(0, len(a))
            b = a[:cut] + invalid_bytes(r) + a[cut:]
            if r.random() < 0.3:
                b += invalid_bytes(r)
        elif u < 0.97:  # one category, repeated
            b = r.choice(SPACES + [" ", "a", "ab ", "😀", "你", "1", "'s", "\u200d", "<|im_end|>"]) * r.randint(2, 60)
            b = b.encode()
        else:  # long text
            b = text(r, 400).encode()
        out.append(b)
    return out[:n]


def main():
    path = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 10000
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 1234
    with open(path, "w") as f:
        for b in make(n, seed):
            f.write(b.hex() + "\n")


if __name__ == "__main__":
    main()
