#!/usr/bin/env python3
"""Encode speed of tpd's tokenizer against HF tokenizers, single-threaded, on 1 MB of mixed
text (the corpus generator's strings, joined). Usage:
  bench_tokenizer.py BENCH_BINARY [TOKENIZER.json ...]
Prints MB/s for both and the ratio tpd / HF per tokenizer."""
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
import tok_corpus  # noqa: E402


def mixed_text(size=1 << 20):
    parts, n = [], 0
    for b in tok_corpus.make(200000, 7):
        s = b.decode("utf-8", errors="replace")
        parts.append(s)
        n += len(s.encode())
        if n >= size:
            break
    return "\n".join(parts).encode()[:size].decode("utf-8", errors="ignore")


def main():
    bench = sys.argv[1]
    paths = sys.argv[2:] or [os.path.join(ROOT, "models", "tok", "hf", n, "tokenizer.json")
                             for n in ("smollm2", "llama-bpe", "qwen2", "gemma3")]
    text = mixed_text()
    from tokenizers import Tokenizer
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(text)
        tf = f.name
    mb = len(text.encode()) / 1e6
    for p in paths:
        if not os.path.exists(p):
            print(f"{p}: missing (tests/reference/tok_fetch.py)")
            continue
        tok = Tokenizer.from_file(p)
        best = 1e30
        for _ in range(5):
            t0 = time.perf_counter()
            ids = tok.encode(text, add_special_tokens=False).ids
            best = min(best, time.perf_counter() - t0)
        lines = text.split("\n")
        best_lines = 1e30
        for _ in range(3):
            t0 = time.perf_counter()
            tok.encode_batch(lines, add_special_tokens=False)
            best_lines = min(best_lines, time.perf_counter() - t0)
        r = json.loads(subprocess.run([bench, p, tf, "5"], capture_output=True, text=True, check=True).stdout)
        ok = "same ids" if r["tokens"] == len(ids) else f"token counts differ ({r['tokens']} vs {len(ids)})"
        print(f"{os.path.basename(os.path.dirname(p)) or p}: tpd {r['mb_per_s']:.2f} MB/s, "
              f"HF {mb / best:.2f} MB/s (one text) / {mb / best_lines:.2f} MB/s (per line, 1 thread), "
              f"ratio {r['mb_per_s'] / (mb / best):.2f}x / {r['mb_per_s'] / (mb / best_lines):.2f}x ({ok})")
    os.unlink(tf)


if __name__ == "__main__":
    main()
