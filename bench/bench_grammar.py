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
   runs.
3. The worst case per token among the grammars the default [grammar] limits accept: hostile
   ones (ambiguous regexes, 1024-value enums, deep nesting), SmolLM2's vocabulary, the
   costliest mask and accept of a walk through each (worst_bench).
Usage: bench_grammar.py [--mask-only] [--steps N]"""
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
            rows.append(json.loads(out.splitlines()[-1]))
        best = min(rows, key=lambda r: r["warm_median_us"])
        print(f"{name}: " + json.dumps(best))


def driver(kind, text, *args):
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as f:
        f.write(text)
        f.flush()
        return subprocess.run([DRIVER, SMOL, kind, f.name, *args], capture_output=True, text=True).stdout


def worst_bench(steps):
    """The costliest grammars the default [grammar] limits accept (grammar.h's struct
    grammar_limits), on SmolLM2's vocabulary: the worst mask and the worst accept of a random
    walk through each (the first walk: every state's mask computed), in us and work units,
    best of 3 runs; "stopped" is the limit a walk ran into (the request would end with that
    error), after which every call costs a constant."""
    if not os.path.exists(SMOL):
        print(f"{SMOL} absent")
        return
    n = 1
    while n < 64 and driver("regex", f"(.*){{{n + 1}}}x", "compile").startswith("ok"):
        n += 1
    cases = [("regex", f"(.*){{{n}}}x (the largest N accepted)", f"(.*){{{n}}}x"),
             ("regex", "[a-z]{40}(.*){40}x (costly past the first mask's reach)", "[a-z]{40}(.*){40}x"),
             ("schema", "string pattern ^(.*){50}x$", json.dumps({"type": "string", "pattern": "^(.*){50}x$"})),
             ("schema", "enum of 1024 strings", json.dumps({"enum": [f"value {i}" for i in range(1024)]})),
             ("schema", "object of 1000 optional properties",
              json.dumps({"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(1000)}})),
             ("gbnf", "nesting 400 deep (uncertain tokens)", 'root ::= "[" root? "]" | "a"\n'),
             ("json", "json_object", "")]
    for kind, name, text in cases:
        rows = []
        for _ in range(3):
            out = driver(kind, text, "bench", str(steps)).splitlines()
            if not out or not out[0].startswith("{"):
                print(f"{name}: {' '.join(out)[:200]}")
                break
            rows.append(json.loads(out[0]))
        if rows:
            best = min(rows, key=lambda r: max(r["worst_mask_us"], r["worst_accept_us"]))
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
    worst_bench(steps)
    if "--mask-only" not in sys.argv:
        step_bench()
