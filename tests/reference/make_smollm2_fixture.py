#!/usr/bin/env python3
"""Writes tests/data/smollm2_greedy.json: greedy continuations of SmolLM2-135M-Instruct
(Q4_1 GGUF) computed by llama.cpp (llama-cpp-python), the independent reference for
`tpd generate`. Greedy = argmax of llama.cpp's logits taken here, step by step (no sampler,
no penalties). Each step also records the gap between the two best logits so that the test
can tell a near-tie (where any two correct implementations may part ways) from a bug.

Usage: make_smollm2_fixture.py [MODEL.gguf] [OUT.json]
(default model: ./launch/get-model smollm2; default output tests/data/smollm2_greedy.json)
"""
import json
import os
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
N_GEN = 64
N_THREADS = 2

CHAT = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
PROMPTS = [
    # chat prompts asking for long answers: tpd stops at an end-of-sequence token
    ("chat_question", CHAT.format("Explain in detail how a bicycle works.")),
    ("chat_story", CHAT.format("Write a long story about a robot who learns to paint.")),
    ("chat_system", "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
                    + CHAT.format("List five tips for staying healthy and explain each one.")),
    ("plain_text", "The quick brown fox jumps over the lazy dog. Then the fox"),
    ("code", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"),
    ("list", "Shopping list:\n1. Milk\n2. Eggs\n3."),
    ("numbers", "1, 2, 3, 4, 5, 6, 7,"),
    ("story", "Once upon a time, in a small village by the sea,"),
]


def model_path():
    out = subprocess.run([os.path.join(ROOT, "launch", "get-model"), "smollm2"], check=True,
                         capture_output=True, text=True).stdout
    return out.strip().splitlines()[-1]


def _dump(doc):
    """JSON with one line per field of a case (lists kept on one line), for readable diffs."""
    head = {k: v for k, v in doc.items() if k != "cases"}
    lines = ["{"] + [f" {json.dumps(k)}: {json.dumps(v)}," for k, v in head.items()] + [' "cases": [']
    for i, c in enumerate(doc["cases"]):
        fields = [f"   {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}" for k, v in c.items()]
        lines.append("  {\n" + ",\n".join(fields) + "\n  }" + ("," if i + 1 < len(doc["cases"]) else ""))
    lines += [" ]", "}"]
    return "\n".join(lines) + "\n"


def main():
    import llama_cpp

    path = sys.argv[1] if len(sys.argv) > 1 else model_path()
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "tests", "data", "smollm2_greedy.json")
    llm = llama_cpp.Llama(model_path=path, n_ctx=512, n_batch=512, n_threads=N_THREADS,
                          logits_all=False, verbose=False)
    meta = llm.metadata
    add_bos = meta.get("tokenizer.ggml.add_bos_token", "true").lower() == "true"
    eos = [int(llm.token_eos())]
    for t in ("<|im_end|>", "<|endoftext|>"):
        ids = llm.tokenize(t.encode(), add_bos=False, special=True)
        if len(ids) == 1 and ids[0] not in eos:
            eos.append(int(ids[0]))
    cases = []
    for name, text in PROMPTS:
        # add_bos=True lets llama.cpp add BOS only where the vocab asks for it
        ids = llm.tokenize(text.encode(), add_bos=True, special=True)
        llm.reset()
        llm.eval(ids)
        gen, gaps, second = [], [], []
        for step in range(N_GEN):
            # logits of the last evaluated token straight from the context
            ptr = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
            logits = np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),)).astype(np.float64)
            top2 = np.argsort(logits)[-2:]
            tok = int(np.argmax(logits))
            gen.append(tok)
            gaps.append(round(float(logits[top2[1]] - logits[top2[0]]), 5))
            second.append(int(top2[0]))
            if step + 1 < N_GEN:
                llm.eval([tok])
        cases.append({"name": name, "text": text, "prompt_ids": [int(i) for i in ids],
                      "generated_ids": gen, "top2_gap": gaps, "runner_up_ids": second,
                      "generated_text": llm.detokenize(gen).decode("utf-8", "replace")})
        print(f"{name}: {len(ids)} prompt tokens, min gap {min(gaps):.4f}: "
              f"{cases[-1]['generated_text'][:60]!r}")
    doc = {
        "model": os.path.basename(path),
        "generator": "tests/reference/make_smollm2_fixture.py",
        "llama_cpp_python_version": llama_cpp.__version__,
        "n_threads": N_THREADS,
        "add_bos": add_bos,
        "eos_ids": eos,
        "n_vocab": int(llm.n_vocab()),
        "n_gen": N_GEN,
        "note": "greedy = argmax of llama.cpp logits at each step; every step generated "
                "(no stop at EOS); top2_gap = best minus second-best logit, runner_up_ids = the second-best token",
        "cases": cases,
    }
    with open(out, "w") as f:
        f.write(_dump(doc))
    print("wrote", out)


if __name__ == "__main__":
    main()
