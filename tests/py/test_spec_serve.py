"""Speculative decoding end to end, `mpirun -np 2 tpd serve` with each drafter at tp 2, the
n-gram drafter also at tp 1 x pp 2 (micro-batches in flight), and the draft model at tp 1 on
demand (TPD_SPEC_FULL=1): the
n-gram drafter on SmolLM2-135M-Instruct Q4_1, and the Q4_1 file as the draft model of an F16
GGUF made from it (tests/reference/dequant_gguf.py, written at test time under
tests/data/gen/). 32 greedy requests (completions and chat: copying tasks, where the
prompt holds most of the answer) are each sent with `"speculative": false` and with
speculation, and must give the same text, tokens' logprobs and finish reason, including
answers cut by stop strings, answers that run into the context limit and chat answers that
end with the end-of-turn token (which the n-gram lookup drafts from the prompt's own turn
ends, so it falls inside accepted runs). /metrics must show drafts accepted; the acceptance
is printed. Grammar-constrained requests (a JSON Schema, json_object, a regex, one closed by
the budget) speculate too and give the same output.
(tp 1 with the n-gram and an oracle drafter, and the sampling exactness, are in
tests/test_spec.c.)"""
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "reference"))

import dequant_gguf  # noqa: E402
import tpd_cli  # noqa: E402
from test_server_api import MODEL, Server, client  # noqa: E402

CTX = 256
ROOT_SRC = os.environ.get("TPD_SOURCE_DIR", os.path.dirname(os.path.dirname(HERE)))

WORDS = ["apple", "river", "stone", "cloud", "green", "quiet", "north", "table", "light", "music",
         "paper", "seven", "window", "garden", "silver", "market"]


def passage(i):
    w = [WORDS[(i * 5 + k * 3) % len(WORDS)] for k in range(6)]
    return f"The {w[0]} {w[1]} and the {w[2]} {w[3]} went to the {w[4]} {w[5]}."


def requests(scale, n=32):
    """(path, body) for the first n of 32 greedy requests; completions' max_tokens times scale."""
    out = []
    for i in range(n):
        text = " ".join(passage(i + k) for k in range(2 + i % 3))
        if i % 4 == 0:  # chat: ends with the end-of-turn token
            text = " ".join(passage(i + k) for k in range(1 + i % 8 // 4))
            body = {"messages": [{"role": "user", "content": f"Repeat exactly, nothing else: {text}"}],
                    "max_tokens": 64}
            out.append(("/v1/chat/completions", body))
            continue
        body = {"prompt": f"Copy the text.\nText: {text}\nCopy: {text}\nText: {text}\nCopy:",
                "max_tokens": int(40 * scale), "logprobs": 2}
        if i % 4 == 3:  # long prompt, no max_tokens: generation runs into the context
            long_text = " ".join(passage(i + k) for k in range(7))
            body = {"prompt": f"{long_text}\n{long_text}\n", "logprobs": 1}
        out.append(("/v1/completions", body))
    return out


FULL = os.environ.get("TPD_SPEC_FULL") == "1"


@pytest.fixture(scope="module", params=[("ngram", 2, 1), ("ngram", 1, 2), ("draft", 2, 1), ("draft", 1, 1)],
                ids=["ngram-tp2", "ngram-pp2", "draft-tp2", "draft-tp1"])
def spec_server(request):
    method, tp, pp = request.param
    if method == "draft" and tp == 1 and not FULL:
        pytest.skip("the draft model at tp 1 runs with TPD_SPEC_FULL=1 (on demand; tests/test_spec.c covers tp 1 "
                    "with the n-gram and an oracle drafter)")
    if tpd_cli.tpd_bin() is None:
        pytest.skip("tpd binary not built (set TPD_BIN)")
    if not os.path.exists(MODEL):
        pytest.skip(f"{MODEL} absent (run ./launch/get-model smollm2)")
    import tempfile
    d = tempfile.mkdtemp(prefix="tpd_spec_")
    if method == "ngram":
        extra = ["--speculative.method", "ngram", "--speculative.ngram_min", 1, "--speculative.k", 5]
    else:
        target = dequant_gguf.ensure(MODEL, os.path.join(ROOT_SRC, "tests", "data", "gen", "smollm2_f16.gguf"))
        extra = ["--model", target, "--speculative.method", "draft", "--speculative.draft_model", MODEL,
                 "--speculative.k", 4]
    if pp > 1:
        extra += ["--pp", pp]
    s = Server(os.path.join(d, "run", "tpd.sock"), extra=["--ctx", CTX, *extra], np=tp * pp)
    s.method, s.tp, s.pp = method, tp, pp
    yield s
    out = s.output()
    assert s.stop() == 0, out[-4000:]
    subprocess.run(["rm", "-rf", d])


def answer(c, path, body):
    r = c.post(path, json=dict(body, temperature=0, seed=1))
    assert r.status_code == 200, r.text
    ch = r.json()["choices"][0]
    text = ch["message"]["content"] if "message" in ch else ch["text"]
    lp = (ch.get("logprobs") or {}).get("token_logprobs") or []
    return text, ch["finish_reason"], lp, r.json()["usage"]["completion_tokens"]


def test_greedy_same_with_and_without_speculation(spec_server):
    with client(spec_server.sock, timeout=900) as c:
        kinds = {"stop": 0, "length_ctx": 0, "stop_eos": 0}
        # The draft-model case serves an F16 target (a few tokens/s on the CPU): CI sends the
        # first 16 requests (every kind of ending, 4 of each); TPD_SPEC_FULL=1 sends all 32.
        n = 32 if spec_server.method == "ngram" or FULL else 16
        for i, (path, body) in enumerate(requests(0.6 if spec_server.method == "ngram" else 0.4, n)):
            plain = answer(c, path, dict(body, speculative=False))
            if i % 4 == 1 and len(plain[0]) > 30:  # a stop string from the reference answer
                stop = plain[0][20:26]
                body = dict(body, stop=[stop])
                plain = answer(c, path, dict(body, speculative=False))
                kinds["stop"] += plain[1] == "stop"
            spec = answer(c, path, body)
            assert spec[0] == plain[0], (i, plain, spec)
            assert spec[1] == plain[1], (i, plain, spec)
            assert spec[3] == plain[3], (i, plain, spec)
            assert spec[2] == pytest.approx(plain[2], abs=1e-3), i
            if i % 4 == 3:
                kinds["length_ctx"] += plain[1] == "length"
            if i % 4 == 0:
                kinds["stop_eos"] += plain[1] == "stop"
        assert kinds["stop"] >= n // 8 and kinds["length_ctx"] >= 3 * n // 16 and kinds["stop_eos"] >= n // 8, kinds
        text = c.get("/metrics").text  # one snapshot, so the gauges and counters agree

        def metric_of(name):
            return next(float(ln.split()[-1]) for ln in text.splitlines() if ln.startswith(name + " "))
        drafted = metric_of("tpd_spec_draft_tokens_total")
        accepted = metric_of("tpd_spec_accepted_tokens_total")
        assert 0 < accepted < drafted, (accepted, drafted)
        rate = metric_of("tpd_spec_acceptance_rate")
        assert rate == pytest.approx(accepted / drafted, rel=1e-4)
        assert metric_of("tpd_spec_mean_accepted_length") > 1
        print(f"tp {spec_server.tp} x pp {spec_server.pp} {spec_server.method}: {n} requests, drafted {drafted:.0f}, accepted {accepted:.0f} ({rate:.2f})")


def grammar_requests():
    """Greedy requests under a grammar whose answer is in the prompt (drafts found and
    accepted): a JSON Schema, json_object, a regex, and a schema cut by the closer."""
    doc = '{"name": "apple river", "age": 7, "tags": ["stone", "cloud", "green"]}'
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                                               "tags": {"type": "array", "items": {"type": "string"}}},
              "required": ["name", "age", "tags"], "additionalProperties": False}
    rf = {"type": "json_schema", "json_schema": {"name": "person", "schema": schema}}
    ask = [{"role": "user", "content": f"Repeat exactly this JSON, nothing else: {doc}"}]
    text = " ".join(passage(k) for k in range(3))
    return [
        ("/v1/chat/completions", {"messages": ask, "response_format": rf, "max_tokens": 64}),
        ("/v1/chat/completions", {"messages": ask, "response_format": {"type": "json_object"}, "max_tokens": 64}),
        ("/v1/completions", {"prompt": f"Copy the text.\nText: {text}\nCopy: {text}\nText: {text}\nCopy:",
                             "guided_regex": r"( The [a-z]+ [a-z]+ and the [a-z]+ [a-z]+ went to the [a-z]+ [a-z]+\.){3}",
                             "max_tokens": 80}),
        ("/v1/chat/completions", {"messages": ask, "response_format": rf, "max_tokens": 16}),  # closed: "length"
    ]


def test_grammar_requests_speculate_with_the_same_output(spec_server):
    """A grammar-constrained request speculates (its drafts cut where the grammar refuses one,
    each verified row masked at its own grammar state, the closer's budget counting the
    accepted drafts) and gives exactly the output it gives without speculation."""
    with client(spec_server.sock, timeout=900) as c:
        def counters():
            text = c.get("/metrics").text
            return [next(float(ln.split()[-1]) for ln in text.splitlines() if ln.startswith(n + " "))
                    for n in ("tpd_spec_draft_tokens_total", "tpd_spec_accepted_tokens_total")]
        reqs = grammar_requests()
        plain = [answer(c, path, dict(body, speculative=False)) for path, body in reqs]
        d0, a0 = counters()
        spec = [answer(c, path, body) for path, body in reqs]
        d1, a1 = counters()
        for i, (p_, s_) in enumerate(zip(plain, spec)):
            assert s_[0] == p_[0] and s_[1] == p_[1] and s_[3] == p_[3], (i, p_, s_)
        assert json.loads(plain[0][0])["tags"] == ["stone", "cloud", "green"], plain[0]
        assert plain[3][1] == "length"
        json.loads(plain[3][0])  # the closer ended it as a whole document
        assert a1 - a0 > 0, (d1 - d0, a1 - a0)
        print(f"{spec_server.method} tp {spec_server.tp} x pp {spec_server.pp}: grammar requests drafted "
              f"{d1 - d0:.0f}, accepted {a1 - a0:.0f}")


def test_draft_model_with_another_tokenizer_is_refused():
    """A draft model whose vocabulary is not the model's: a clear error, exit non-zero."""
    if tpd_cli.tpd_bin() is None or not os.path.exists(MODEL):
        pytest.skip("tpd or the model absent")
    import make_tiny
    tiny = make_tiny.ensure()["llama_gqa-gguf-f32"]
    p = subprocess.run(tpd_cli.mpirun_cmd(1, ["generate", "--model", MODEL, "--prompt-ids", "1,2,3", "-n", 4,
                                              "--speculative.method", "draft", "--speculative.draft_model", tiny]),
                       env=tpd_cli.mpirun_env(), capture_output=True, text=True, timeout=300)
    assert p.returncode != 0
    assert "must share the model's tokenizer" in p.stderr, p.stderr[-2000:]
