#!/usr/bin/env python3
"""Constrained decoding benchmarks (figures in bench/RESULTS.md).

1. Mask time per token: tests/grammar/grammar_driver's `bench` mode walks a random path of
   400 allowed tokens through a nested JSON Schema (bench/grammar_nested.json) and times the
   mask of every state: "cold" is the first walk (every new state computes its mask by a trie
   walk), "warm" the same path again (masks cached, as for the next request with the same
   schema). Vocabularies: SmolLM2 (49k), Llama 3 (128k) and Qwen2 (152k), the GGUF vocab
   files tests/reference/tok_fetch.py fetches (models/tok/llama.cpp/, or $TPD_TOK_DIR).
2. Step time at batch 16: `tpd serve` on SmolLM2 (CPU), 16 concurrent chat requests of 64
   tokens (ignore_eos), constrained by a schema whose string field keeps the constraint
   active for every token vs the same requests unconstrained; wall time ratio, alternating
   runs. Usage: bench_grammar.py [--mask-only] [--steps N]"""
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("TPD_BUILD_DIR", os.path.join(ROOT, "build"))
DRIVER = os.path.join(BUILD, "tests", "grammar_driver")
TOK = os.environ.get("TPD_TOK_DIR", os.path.join(ROOT, "models", "tok", "llama.cpp"))
SMOL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
SCHEMA = os.path.join(ROOT, "bench", "grammar_nested.json")


def mask_bench(steps):
    for name, path in [("SmolLM2 49k", SMOL), ("Llama 3 128k", os.path.join(TOK, "ggml-vocab-llama-bpe.gguf")),
                       ("Qwen2 152k", os.path.join(TOK, "ggml-vocab-qwen2.gguf"))]:
        if not os.path.exists(path):
            print(f"{name}: {path} absent (run tests/reference/tok_fetch.py)")
            continue
        rows = []
        for seed in range(3):  # the driver's walk differs per process only through its state; repeat
            out = subprocess.run([DRIVER, path, "schema", SCHEMA, "bench", str(steps)], capture_output=True,
                                 text=True, check=True).stdout
            rows.append(json.loads(out))
        best = min(rows, key=lambda r: r["warm_median_us"])
        print(f"{name}: " + json.dumps(best))


def step_bench():
    sys.path.insert(0, os.path.join(ROOT, "tests", "py"))
    sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
    os.environ.setdefault("TPD_BIN", os.path.join(BUILD, "tpd"))
    import test_server_api as T
    d = tempfile.mkdtemp()
    s = T.Server(os.path.join(d, "run", "tpd.sock"), extra=["--max-running", 16])
    schema = {"type": "object", "properties": {"story": {"type": "string", "maxLength": 400}}, "required": ["story"]}
    try:
        c = T.client(s.sock, timeout=600)

        def run(constrained):
            body = {"messages": [{"role": "user", "content": "Tell me a long story as JSON."}], "max_tokens": 64,
                    "ignore_eos": True, "temperature": 0}
            if constrained:
                body["response_format"] = {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}
            t0 = time.time()
            with concurrent.futures.ThreadPoolExecutor(16) as ex:
                rs = list(ex.map(lambda _: c.post("/v1/chat/completions", json=body), range(16)))
            assert all(r.status_code == 200 for r in rs), rs[0].text
            return time.time() - t0

        run(True)  # warm the grammar's masks and the model
        run(False)
        t = {True: [], False: []}
        for _ in range(3):
            for k in (False, True):
                t[k].append(run(k))
        print(f"batch 16 x 64 tokens: unconstrained {min(t[False]):.2f} s, constrained {min(t[True]):.2f} s, "
              f"ratio {min(t[True]) / min(t[False]):.3f} (all runs: {t})")
    finally:
        s.stop()


if __name__ == "__main__":
    steps = int(sys.argv[sys.argv.index("--steps") + 1]) if "--steps" in sys.argv else 400
    mask_bench(steps)
    if "--mask-only" not in sys.argv:
        step_bench()
