"""Speculative decoding at tp 2, end to end: `mpirun -np 2 tpd serve` with the n-gram drafter
on SmolLM2-135M-Instruct. 32 greedy requests (completions and chat: copying tasks, where the
prompt holds most of the answer) are each sent with `"speculative": false` and with
speculation, and must give the same text, tokens' logprobs and finish reason, including
answers cut by stop strings, answers that run into the context limit and chat answers that
end with the end-of-turn token (which the n-gram lookup drafts from the prompt's own turn
ends, so it falls inside accepted runs). /metrics must show drafts accepted.
(tp 1 and the sampling exactness are in tests/test_spec.c.)"""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "reference"))

import tpd_cli  # noqa: E402
from test_server_api import MODEL, Server, client, metric  # noqa: E402

CTX = 256

WORDS = ["apple", "river", "stone", "cloud", "green", "quiet", "north", "table", "light", "music",
         "paper", "seven", "window", "garden", "silver", "market"]


def passage(i):
    w = [WORDS[(i * 5 + k * 3) % len(WORDS)] for k in range(6)]
    return f"The {w[0]} {w[1]} and the {w[2]} {w[3]} went to the {w[4]} {w[5]}."


def requests():
    """(path, body) for 32 greedy requests."""
    out = []
    for i in range(32):
        text = " ".join(passage(i + k) for k in range(2 + i % 3))
        if i % 4 == 0:  # chat: ends with the end-of-turn token
            body = {"messages": [{"role": "user", "content": f"Repeat exactly, nothing else: {text}"}],
                    "max_tokens": 80}
            out.append(("/v1/chat/completions", body))
            continue
        body = {"prompt": f"Copy the text.\nText: {text}\nCopy: {text}\nText: {text}\nCopy:",
                "max_tokens": 40, "logprobs": 2}
        if i % 4 == 3:  # long prompt, no max_tokens: generation runs into the context
            long_text = " ".join(passage(i + k) for k in range(7))
            body = {"prompt": f"{long_text}\n{long_text}\n", "logprobs": 1}
        out.append(("/v1/completions", body))
    return out


@pytest.fixture(scope="module")
def spec_server():
    if tpd_cli.tpd_bin() is None:
        pytest.skip("tpd binary not built (set TPD_BIN)")
    if not os.path.exists(MODEL):
        pytest.skip(f"{MODEL} absent (run ./launch/get-model smollm2)")
    import tempfile
    d = tempfile.mkdtemp(prefix="tpd_spec_")
    s = Server(os.path.join(d, "run", "tpd.sock"),
               extra=["--ctx", CTX, "--speculative.method", "ngram", "--speculative.ngram_min", 1,
                      "--speculative.k", 5])
    yield s
    out = s.output()
    assert s.stop() == 0, out[-4000:]


def answer(c, path, body):
    r = c.post(path, json=dict(body, temperature=0, seed=1))
    assert r.status_code == 200, r.text
    ch = r.json()["choices"][0]
    text = ch["message"]["content"] if "message" in ch else ch["text"]
    lp = (ch.get("logprobs") or {}).get("token_logprobs") or []
    return text, ch["finish_reason"], lp, r.json()["usage"]["completion_tokens"]


def test_greedy_same_with_and_without_speculation(spec_server):
    with client(spec_server.sock) as c:
        kinds = {"stop": 0, "length_ctx": 0, "stop_eos": 0}
        for i, (path, body) in enumerate(requests()):
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
        assert kinds["stop"] >= 4 and kinds["length_ctx"] >= 6 and kinds["stop_eos"] >= 4, kinds
        drafted = metric(c, "tpd_spec_draft_tokens_total")
        accepted = metric(c, "tpd_spec_accepted_tokens_total")
        assert 0 < accepted < drafted, (accepted, drafted)
        rate = metric(c, "tpd_spec_acceptance_rate")
        assert rate == pytest.approx(accepted / drafted, rel=1e-4)
        assert metric(c, "tpd_spec_mean_accepted_length") > 1
        print(f"tp 2 n-gram: drafted {drafted:.0f}, accepted {accepted:.0f} ({rate:.2f})")
