"""What evaluation clients ask of /v1/completions and /v1/models (issue 28): lm-evaluation-
harness's `local-completions` loglikelihood requests (a list of token-id prompts, "echo":
true, "logprobs": 1, "max_tokens": 1) get every prompt token's logprob, the first null; a
list of prompts gets one choice per prompt (times n); GET /v1/models/{id}; fields tpd does
not implement are a 400 naming them. The same server writes its access log to a file and a
stats line every second while there is traffic (log.access, log.stats_interval_s).

References: `tpd eval` (the same CPU kernels, whole-prompt logits) through a float64
log-softmax, which the served logprobs must equal to float32 rounding; and llama.cpp
(llama-cpp-python, logits_all) on the same GGUF within the spread two correct
implementations show on this model (test_smollm2_llamacpp.py: logits move by up to ~1).
"""
import re
import time

import numpy as np
import pytest

from test_server_api import MODEL, NAME, Server, client, oai, openai, tpd_cli

TEXTS = ["The capital of France is Paris, and the capital of Italy is Rome.",
         "Question: What is 2 + 2?\nAnswer: 4",
         "def add(a, b):\n    return a + b\n",
         # longer than a step scores at once (sched/batch.h: SCORE_ROWS), past a KV block or ten
         " ".join(f"{i} apples and {i + 1} pears;" for i in range(10))]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if tpd_cli.tpd_bin() is None:
        pytest.skip("tpd binary not built (set TPD_BIN)")
    d = tmp_path_factory.mktemp("tpd_cev")
    sock = str(d / "run" / "tpd.sock")
    srv = Server(sock, extra=["--access-log", d / "access.log", "--log.stats_interval_s", 1])
    srv.access = str(d / "access.log")
    yield srv
    assert srv.stop() == 0


@pytest.fixture(scope="module")
def http(server):
    with client(server.sock) as c:
        yield c


@pytest.fixture(scope="module")
def ids(http):
    out = []
    for t in TEXTS:
        r = http.post("/tokenize", json={"prompt": t})
        assert r.status_code == 200, r.text
        out.append(r.json()["tokens"])
    return out


@pytest.fixture(scope="module")
def reference(ids):
    """Per text: the float64 log-softmax logprob of each token after the first (tpd eval)."""
    vocab = 49152
    logits = tpd_cli.eval_logits(MODEL, ids, vocab, tp=2).astype(np.float64)
    out, at = [], 0
    for s in ids:
        rows = logits[at:at + len(s)]
        at += len(s)
        lse = np.log(np.exp(rows - rows.max(1, keepdims=True)).sum(1)) + rows.max(1)
        lp = rows - lse[:, None]
        out.append({"lp": [lp[i - 1, s[i]] for i in range(1, len(s))],
                    "best": [lp[i - 1].max() for i in range(1, len(s))],
                    "greedy": [int(lp[i - 1].argmax()) == s[i] for i in range(1, len(s))]})
    return out


def loglikelihood_request(http, prompts):
    """The request lm-evaluation-harness's local-completions sends for loglikelihood."""
    r = http.post("/v1/completions", json={"model": NAME, "prompt": prompts, "temperature": 0, "max_tokens": 1,
                                           "logprobs": 1, "seed": 1234, "echo": True})
    assert r.status_code == 200, r.text
    return r.json()


def parse_logprobs(body, ctxlens):
    """lm-evaluation-harness's parse_logprobs (models/openai_completions.py), verbatim in effect."""
    res = []
    for choice, ctxlen in zip(sorted(body["choices"], key=lambda c: c["index"]), ctxlens):
        lps = choice["logprobs"]["token_logprobs"][ctxlen:-1]
        tops = choice["logprobs"]["top_logprobs"][ctxlen:-1]
        res.append((sum(lps), all(tok == max(top.values()) for tok, top in zip(lps, tops))))
    return res


@pytest.mark.parametrize("again", [0, 1])  # once more: the prefix cache holds these prompts now
def test_echo_logprobs_equal_eval(http, ids, reference, again):
    body = loglikelihood_request(http, ids)
    assert [c["index"] for c in body["choices"]] == list(range(len(ids)))
    assert body["usage"]["prompt_tokens"] == sum(len(s) for s in ids)
    for s, ref, ch in zip(ids, reference, body["choices"]):
        lp = ch["logprobs"]
        assert len(lp["tokens"]) == len(s) + 1  # the prompt, echoed, and the one generated token
        assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
        got = np.array(lp["token_logprobs"][1:len(s)])
        print(f"tpd serve vs tpd eval, {len(s) - 1} tokens: max |diff| {np.abs(got - np.array(ref['lp'])).max():.2e}")
        assert np.abs(got - np.array(ref["lp"])).max() < 1e-4, (got, ref["lp"])
        best = np.array([max(t.values()) for t in lp["top_logprobs"][1:len(s)]])
        assert np.abs(best - np.array(ref["best"])).max() < 1e-4
        assert lp["text_offset"][0] == 0 and lp["text_offset"] == sorted(lp["text_offset"])
    # context / continuation split as the harness does: sums and greediness from the reference
    ctxlens = [len(s) // 2 for s in ids]
    for (ll, greedy), ref, ctx in zip(parse_logprobs(body, ctxlens), reference, ctxlens):
        want = sum(ref["lp"][ctx - 1:])
        assert abs(ll - want) < 1e-2, (ll, want)
        assert greedy == all(ref["greedy"][ctx - 1:])


def near_llamacpp(llm, s):
    """llama.cpp's (a llama_cpp.Llama with logits_all) float64 logprob of each token of s
    after the first: the reference the served logprobs must come near."""
    llm.reset()
    llm.eval(s)
    rows = np.array(llm.scores[:len(s)], dtype=np.float64)
    m = rows.max(1, keepdims=True)
    lp = rows - (np.log(np.exp(rows - m).sum(1, keepdims=True)) + m)
    return [lp[i - 1, s[i]] for i in range(1, len(s))]


def test_echo_logprobs_near_llamacpp(http, ids):
    llama_cpp = pytest.importorskip("llama_cpp")
    llm = llama_cpp.Llama(model_path=MODEL, n_ctx=512, logits_all=True, verbose=False)
    body = loglikelihood_request(http, ids)
    diffs = []
    for s, ch in zip(ids, body["choices"]):
        want = np.array(near_llamacpp(llm, s))
        diffs += list(np.abs(np.array(ch["logprobs"]["token_logprobs"][1:len(s)]) - want))
    diffs = np.array(diffs)
    print(f"tpd vs llama.cpp prompt logprobs over {diffs.size} tokens: max |diff| {diffs.max():.3f}, "
          f"mean {diffs.mean():.4f}")
    assert diffs.max() < 1.0 and diffs.mean() < 0.1, (diffs.max(), diffs.mean())


def test_prompt_list_one_choice_each(server, http, ids):
    """Strings and token-id lists alike; with n, choice k * n + i is prompt k's i-th."""
    single = []
    for t in TEXTS[:2]:
        r = http.post("/v1/completions", json={"prompt": t, "max_tokens": 6, "temperature": 0})
        single.append(r.json()["choices"][0]["text"])
    r = http.post("/v1/completions", json={"prompt": TEXTS[:2], "max_tokens": 6, "temperature": 0, "n": 2})
    assert r.status_code == 200, r.text
    ch = sorted(r.json()["choices"], key=lambda c: c["index"])
    assert [c["index"] for c in ch] == [0, 1, 2, 3]
    assert [c["text"] for c in ch] == [single[0], single[0], single[1], single[1]]
    r = http.post("/v1/completions", json={"prompt": ids[:2], "max_tokens": 6, "temperature": 0})
    assert [c["text"] for c in sorted(r.json()["choices"], key=lambda c: c["index"])] == single
    # the SDK, a batch of strings
    res = oai(server.sock).completions.create(model=NAME, prompt=TEXTS[:2], max_tokens=6, temperature=0)
    assert [c.text for c in sorted(res.choices, key=lambda c: c.index)] == single


def test_models_retrieve(server):
    c = oai(server.sock)
    m = c.models.retrieve(NAME)
    assert m.id == NAME and m.object == "model"
    with pytest.raises(openai.NotFoundError) as ex:
        c.models.retrieve("no-such-model")
    assert "no-such-model" in str(ex.value)


@pytest.mark.parametrize("extra,field", [({"suffix": " the end"}, "suffix"), ({"best_of": 3}, "best_of"),
                                         ({"n": 2, "best_of": 4}, "best_of")])
def test_unimplemented_fields_named(server, extra, field):
    c = oai(server.sock)
    with pytest.raises(openai.BadRequestError) as ex:
        c.completions.create(model=NAME, prompt="Hi", max_tokens=2, **extra)
    assert ex.value.status_code == 400
    assert ex.value.body["param"] == field and field in ex.value.body["message"]
    # at its neutral value the field passes
    r = c.completions.create(model=NAME, prompt="Hi", max_tokens=2, suffix="", best_of=extra.get("n", 1),
                             n=extra.get("n", 1))
    assert len(r.choices) == extra.get("n", 1)


def test_access_log_and_stats(server, http):
    r = http.post("/v1/completions", json={"prompt": "Access log test", "max_tokens": 3, "temperature": 0,
                                           "ignore_eos": True})
    assert r.status_code == 200
    assert http.get("/v1/no/such/thing").status_code == 404
    assert http.get("/health").status_code == 200
    deadline = time.time() + 30
    while time.time() < deadline and "stats: " not in server.output():
        time.sleep(0.2)
    with open(server.access) as f:
        lines = f.read().splitlines()
    gen = [l for l in lines if "method=POST path=/v1/completions status=200" in l]
    assert gen, lines[-5:]
    m = re.search(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z access uid=\d+ method=POST path=/v1/completions "
                  r"status=200 total_s=[0-9.]+ prompt_tokens=(\d+) cached_tokens=\d+ completion_tokens=3 "
                  r"ttft_s=[0-9.]+ finish=length$", gen[-1])
    assert m and int(m.group(1)) > 1, gen[-1]
    assert any("path=/v1/no/such/thing status=404" in l for l in lines), lines[-5:]
    assert not any("path=/health" in l for l in lines)
    stats = [l for l in server.output().splitlines() if "stats: running" in l]
    assert stats, server.output()[-3000:]
    assert re.search(r"stats: running \d+, waiting \d+; prompt [0-9.]+ tokens/s, generation [0-9.]+ tokens/s; "
                     r"KV cache [0-9.]+% used \(\d+ of \d+ blocks\); prefix cache hit [0-9.]+% \(\d+ of \d+ prompt "
                     r"tokens\); \d+ requests finished in [0-9.]+ s", stats[-1]), stats[-1]
