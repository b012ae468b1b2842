"""Pipeline parallelism x tensor parallelism (docs/tensor-parallel.md#pipeline-parallelism):
`tpd eval` and `tpd generate` on tp x pp ranks (pp stages of tp ranks, stage-major) against
one rank and against the independent numpy reference (tests/reference/model_ref.py), on a
tiny model of every architecture variant (tests/reference/make_tiny.py) and on the real
SmolLM2-135M (30 layers), under mpirun --oversubscribe with one thread per rank.

Splitting the layers into stages must not change the arithmetic: each stage runs the same
kernels on the same rows, and the residual stream crosses stages as exact F32. So logits at
(tp, pp) equal those at (tp, 1) bit for bit, and those at (1, 1) within 1e-5 in F32 (only
the TP all-reduce's summation order differs); greedy continuations are identical.
"""
import json
import os
import sys
import zlib

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "reference"))

import make_tiny  # noqa: E402
import refs  # noqa: E402
import tpd_cli  # noqa: E402

PAIRS = [(1, 2), (2, 2), (1, 3), (3, 2), (1, 5)]  # (tp, pp)
# one model per architecture variant; llama_kq in a K-quant (block-aligned row-parallel splits)
TINY = ["llama_gqa-gguf-f32", "llama3_tied-gguf-f32", "mistral-hf-f32", "qwen2-gguf-f32", "qwen3-gguf-f32",
        "llama_kq-gguf-q4_k"]
LENGTHS = [1, 7, 19]
CHUNK = 5        # chunked prefill: every sequence crosses the pipeline in several steps
BLOCK_SIZE = 8   # and its KV straddles blocks
F32_TOL = 1e-5

SMOLLM2 = os.path.join(os.environ.get("TPD_SOURCE_DIR", ROOT), "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
SMOLLM2_LAYERS = 30
SMOLLM2_N = 12


def variant(name):
    return make_tiny.VARIANTS[make_tiny.MODELS[name][0]]


_evals = {}


def tiny_eval(name, tp, pp):
    """Logits of the tiny model `name` at (tp, pp), cached per module."""
    key = (name, tp, pp)
    if key not in _evals:
        v = variant(name)
        seqs = refs.random_seqs(name, LENGTHS, seed=zlib.crc32(name.encode()))
        _evals[key] = tpd_cli.eval_logits(refs.paths()[name], seqs, v["vocab"], tp=tp, pp=pp, chunk=CHUNK,
                                          kv_type=refs.kv_type_for(name), block_size=BLOCK_SIZE, threads=1)
    return _evals[key]


def tiny_cases():
    out = []
    for name in TINY:
        v = variant(name)
        for tp, pp in PAIRS:
            if pp <= v["layers"] and tp <= v["n_heads"]:
                out.append(pytest.param(name, tp, pp, id=f"{name}-tp{tp}-pp{pp}"))
    return out


@pytest.mark.parametrize("name,tp,pp", tiny_cases())
def test_tiny_eval_matches_one_rank(tpd, name, tp, pp):
    ours = tiny_eval(name, tp, pp)
    assert np.all(np.isfinite(ours)), "non-finite logits"
    # the independent reference
    seqs = refs.random_seqs(name, LENGTHS, seed=zlib.crc32(name.encode()))
    ref = refs.reference(name, seqs, tp)
    err = refs.rel_err(ours, ref)
    tol = refs.tolerance(name, refs.kv_type_for(name) or "f16")
    assert err <= tol, f"{name} tp={tp} pp={pp}: rel err {err:.3e} against the numpy reference > {tol:.0e}"
    # the same tp without stages: the pipeline must not change the arithmetic
    same_tp = tiny_eval(name, tp, 1)
    assert np.array_equal(ours, same_tp), (f"{name} tp={tp} pp={pp}: differs from pp 1 at the same tp by "
                                           f"{np.abs(ours - same_tp).max():.3e}")
    if refs.weight_kind(name) == "f32":
        one = tiny_eval(name, 1, 1)
        rel = float(np.abs(ours - one).max() / np.abs(one).max())
        assert rel <= F32_TOL, f"{name} tp={tp} pp={pp}: rel diff {rel:.3e} from tp 1 > {F32_TOL}"


def test_pp_beyond_layers_is_refused(tpd):
    name = "llama_gqa-gguf-f32"  # 2 layers
    with pytest.raises(RuntimeError) as e:
        tpd_cli.eval_logits(refs.paths()[name], [[1, 2, 3]], variant(name)["vocab"], tp=1, pp=3, threads=1)
    assert "pp must be one of 1..2" in str(e.value)


def test_ranks_must_be_tp_times_pp(tpd):
    name = "llama_gqa-gguf-f32"
    args = ["eval", "--model", refs.paths()[name], "--seqs", "1,2", "--out", "/dev/null", "--threads", 1, "--pp", 2]
    with pytest.raises(RuntimeError) as e:
        tpd_cli.run(3, args)
    assert "parallel.pp = 2 does not divide the 3 ranks" in str(e.value)


@pytest.mark.parametrize("tp,pp", [(1, 3), (3, 2)])
def test_tiny_generate_greedy(tpd, tp, pp):
    name = "llama3_tied-gguf-f32"  # 3 layers, tied embeddings: the last stage loads them as its LM head
    prompt = refs.random_seqs(name, [9], seed=7)[0]
    want, _ = tpd_cli.generate(refs.paths()[name], prompt, 16, tp=1, threads=1, extra=["--ignore-eos"])
    got, _ = tpd_cli.generate(refs.paths()[name], prompt, 16, tp=tp, pp=pp, threads=1, extra=["--ignore-eos"])
    assert len(want) == 16 and got == want


@pytest.fixture(scope="module")
def smollm2(tpd):
    if not os.path.exists(SMOLLM2):
        pytest.skip(f"{SMOLLM2} absent (run ./launch/get-model smollm2)")
    with open(os.path.join(ROOT, "tests", "data", "smollm2_greedy.json")) as f:
        case = json.load(f)["cases"][0]
    prompt = case["prompt_ids"]
    ids, _ = tpd_cli.generate(SMOLLM2, prompt, SMOLLM2_N, tp=1, threads=1, extra=["--ignore-eos"])
    return prompt, ids


@pytest.mark.parametrize("tp,pp", PAIRS, ids=[f"tp{t}-pp{p}" for t, p in PAIRS])
def test_smollm2_generate_greedy(smollm2, tp, pp):
    prompt, want = smollm2
    assert len(want) == SMOLLM2_N
    assert pp <= SMOLLM2_LAYERS
    got, _ = tpd_cli.generate(SMOLLM2, prompt, SMOLLM2_N, tp=tp, pp=pp, threads=1, extra=["--ignore-eos"])
    assert got == want, f"tp {tp} x pp {pp}: {got} != tp 1: {want}"


def test_smollm2_eval_pp5_equals_one_rank(smollm2):
    prompt, gen = smollm2
    seqs = [prompt + gen[:4], prompt[:5]]
    one = tpd_cli.eval_logits(SMOLLM2, seqs, 49152, tp=1, threads=1, chunk=8)
    five = tpd_cli.eval_logits(SMOLLM2, seqs, 49152, tp=1, pp=5, threads=1, chunk=8)
    assert np.array_equal(one, five), f"pp 5 differs from one rank by {np.abs(one - five).max():.3e}"
