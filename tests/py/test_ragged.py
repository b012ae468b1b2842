"""Ragged batching must not change results: five sequences of different lengths run in one
step (`tpd eval` default) give the same logits as each sequence run alone (--separate), and
as chunked prefill through the paged KV cache; and all of them match the numpy reference."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "reference"))

import refs  # noqa: E402
import tpd_cli  # noqa: E402

LENGTHS = [1, 40, 13, 2, 27]
MODELS = ["qwen2-hf-f32", "llama3_tied-gguf-q4_0", "llama_kq-gguf-q4_k"]
SAME_TOL = 1e-5


def _rel(a, b):
    return float(np.abs(a.astype(np.float64) - b).max() / np.abs(b).max())


@pytest.mark.parametrize("tp", [1, 2])
@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("kv_type", ["f32", "f16"])
def test_ragged_equals_separate(tpd, name, tp, kv_type):
    seqs = refs.random_seqs(name, LENGTHS, seed=42)
    vocab = refs.load(name).config["vocab_size"]
    batched = tpd_cli.eval_logits(refs.paths()[name], seqs, vocab, tp=tp, kv_type=kv_type)
    alone = tpd_cli.eval_logits(refs.paths()[name], seqs, vocab, tp=tp, kv_type=kv_type, separate=True)
    err = _rel(batched, alone.astype(np.float64))
    assert err <= SAME_TOL, f"ragged vs separate: rel err {err:.3e}"
    # both could be wrong alike: anchor to the reference too
    ref = refs.reference(name, seqs, tp)
    tol = refs.tolerance(name, kv_type)
    if kv_type != "f32":
        tol = max(tol, 5e-3)  # F16 KV rounding on F32 weights
    err = refs.rel_err(batched, ref)
    assert err <= tol, f"vs reference: rel err {err:.3e} > {tol:.0e}"


@pytest.mark.parametrize("tp", [1, 2])
@pytest.mark.parametrize("name", MODELS)
def test_chunked_prefill_equals_whole(tpd, name, tp):
    """With an F32 KV cache, feeding prompts 3 tokens per step through 4-token KV blocks must
    give what one whole-prompt step gives (only the batch composition differs)."""
    seqs = refs.random_seqs(name, LENGTHS, seed=43)
    vocab = refs.load(name).config["vocab_size"]
    whole = tpd_cli.eval_logits(refs.paths()[name], seqs, vocab, tp=tp, kv_type="f32")
    chunked = tpd_cli.eval_logits(refs.paths()[name], seqs, vocab, tp=tp, kv_type="f32",
                                  chunk=3, block_size=4)
    err = _rel(chunked, whole.astype(np.float64))
    assert err <= SAME_TOL, f"chunked vs whole: rel err {err:.3e}"


@pytest.mark.parametrize("tp", [1, 2, 3, 4])
def test_batched_bit_identical(tpd, tp):
    """Bit for bit, at any tp: a token's logits do not depend on how many tokens shared its
    step (what makes concurrent greedy requests give the text they give alone). 1,005 tokens
    in one step against each sequence alone; at tp 3 MPI_Allreduce's own summation order
    changed with the message size and this failed before comm_allreduce_host summed ranks in
    a fixed order (comm/comm.c)."""
    # batched, the step's all-reduces are large (the sliced path at tp > 2); alone, the small
    # ones take the gather path: the two must sum in the same order too
    name = "qwen2-gguf-q8_0"
    seqs = refs.random_seqs(name, [5, 200] + [100] * 8, seed=44)
    vocab = refs.load(name).config["vocab_size"]
    batched = tpd_cli.eval_logits(refs.paths()[name], seqs, vocab, tp=tp, threads=1)
    alone = tpd_cli.eval_logits(refs.paths()[name], seqs, vocab, tp=tp, threads=1, separate=True)
    assert batched.tobytes() == alone.tobytes(), \
        f"batched vs alone: {int((batched != alone).sum())} logits differ, max |d| {float(abs(batched - alone).max()):.3e}"
