"""tpd's forward pass against the independent numpy reference (tests/reference/model_ref.py)
on tiny random models of every architecture variant, in HF and GGUF form, F32 / F16 /
BF16 / quantized, at tensor-parallel sizes 1-4, with whole prompts and with chunked
prefill through the paged KV cache. See tests/reference/refs.py for the tolerances."""
import os
import sys
import zlib

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "reference"))

import make_tiny  # noqa: E402
import refs  # noqa: E402
import tpd_cli  # noqa: E402

LENGTHS = [1, 7, 19]
CHUNK = 5
CHUNK_TPS = (1, 3)      # chunked prefill at these tp sizes (keeps the file fast)
CHUNK_BLOCK_SIZE = 8    # small KV blocks: a 19-token prompt spans 3 blocks, chunks straddle them


def _cases():
    out = []
    for name, (var, form, typ) in make_tiny.MODELS.items():
        n_heads = make_tiny.VARIANTS[var]["n_heads"]
        for tp in (1, 2, 3, 4):
            if tp > n_heads or (name in make_tiny.MOE_MODELS and tp in (2, 3)):
                continue  # mixtures of experts at 2 and 3 ranks: test_moe.py, both splits
            out.append(pytest.param(name, tp, None, id=f"{name}-tp{tp}"))
            if tp in CHUNK_TPS:
                out.append(pytest.param(name, tp, CHUNK, id=f"{name}-tp{tp}-chunk{CHUNK}"))
    return out


@pytest.mark.parametrize("name,tp,chunk", _cases())
def test_forward_matches_reference(tpd, name, tp, chunk):
    seqs = refs.random_seqs(name, LENGTHS, seed=zlib.crc32(name.encode()))  # same at every tp
    ref = refs.reference(name, seqs, tp)
    kv = refs.kv_type_for(name)
    ours = tpd_cli.eval_logits(refs.paths()[name], seqs, ref.shape[1], tp=tp, chunk=chunk,
                               kv_type=kv, block_size=CHUNK_BLOCK_SIZE if chunk else None)
    assert np.all(np.isfinite(ours)), "non-finite logits"
    err = refs.rel_err(ours, ref)
    tol = refs.tolerance(name, kv or "f16")
    print(f"{name} tp={tp} chunk={chunk}: rel err {err:.2e} (tol {tol:.0e})")
    assert err <= tol, (f"{name} tp={tp} chunk={chunk}: max rel err {err:.3e} > {tol:.0e}; "
                        f"per sequence {['%.2e' % e for e in refs.per_seq_errors(ours, ref, seqs)]}")
