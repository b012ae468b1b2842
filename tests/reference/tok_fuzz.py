#!/usr/bin/env python3
"""Builds tests/test_tokenizer_fuzz.c as a libFuzzer binary (clang, ASan + UBSan) and runs
it. Usage: tok_fuzz.py [SECONDS] [WORKDIR]   (default 600 s, /tmp/tpd-tok-fuzz)
Seeds: the fixtures of tests/data/tok/ and chat templates (selector byte prepended)."""
import glob
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def main():
    secs = int(sys.argv[1]) if len(sys.argv) > 1 else 600
    work = sys.argv[2] if len(sys.argv) > 2 else "/tmp/tpd-tok-fuzz"
    os.makedirs(os.path.join(work, "corpus"), exist_ok=True)
    srcs = glob.glob(os.path.join(ROOT, "tokenizer", "*.c")) + [
        os.path.join(ROOT, p) for p in ("model/gguf.c", "util/err.c", "util/dtype.c")]
    exe = os.path.join(work, "fuzz_tokenizer")
    subprocess.run(["clang", "-g", "-O1", "-DTPD_LIBFUZZER", "-D_GNU_SOURCE", "-std=gnu11",
                    "-fsanitize=fuzzer,address,undefined", "-fno-sanitize-recover=undefined",
                    "-I", ROOT, os.path.join(ROOT, "tests", "test_tokenizer_fuzz.c"), *srcs,
                    "-lpcre2-8", "-lutf8proc", "-lcjson", "-lm", "-lpthread", "-o", exe], check=True)
    seeds = {0: [open(p, "rb").read() for p in glob.glob(os.path.join(ROOT, "tests/data/tok/*.json"))
                 if "expected" not in p and "templates" not in p],
             1: [b"Hello <|im_start|> world 123", "😀 naïve 你好".encode(), b"\xff\xfe\xe2\x82"],
             2: [b"Hello <s> world", "\u2581x".encode()],
             3: [b"{% for m in messages %}{{ m.content | trim }}{% endfor %}",
                 b"{%- set ns = namespace(a=1) -%}{{ ns.a ~ (messages | tojson) }}"]}
    for sel, items in seeds.items():
        for i, s in enumerate(items):
            with open(os.path.join(work, "corpus", f"seed{sel}_{i}"), "wb") as f:
                f.write(bytes([sel]) + s)
    env = dict(os.environ, TPD_SOURCE_DIR=ROOT)
    rc = subprocess.run([exe, os.path.join(work, "corpus"), f"-max_total_time={secs}",
                         "-max_len=65536", "-timeout=10", "-rss_limit_mb=4096",
                         f"-artifact_prefix={work}/"], env=env).returncode
    sys.exit(rc)


if __name__ == "__main__":
    main()
