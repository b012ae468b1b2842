"""What the quantized-checkpoint tests (tests/py/test_fp8_weights.py, test_int4_weights.py)
share: the sequences and the tolerance, the float64 reference over the dequantized weights
(checked to differ from the unquantized model's, so that the quantization is visible), and
`tpd eval`'s logits against it."""
import numpy as np

import make_tiny
import model_ref
import tpd_cli

TOL = 1e-4             # the F32 models' bound (tests/reference/refs.py)
SEQS = [[1, 5, 9, 33, 100, 7, 250, 17, 3], [3], [200, 11, 4, 4, 60]]


def reference(weights, config, variant=None):
    """The logits of SEQS on weights; with variant (a make_tiny variant name) also checks that
    the unquantized weights of that variant give other logits."""
    ref = np.concatenate([model_ref.forward(weights, config, s) for s in SEQS])
    if variant is not None:
        full = make_tiny.make_weights(variant, make_tiny.VARIANTS[variant])
        ref0 = np.concatenate([model_ref.forward(full, config, s) for s in SEQS])
        assert np.abs(ref0 - ref).max() / np.abs(ref).max() > 1e-3, variant
    return ref


def check_eval(path, ref, tp, what):
    """tpd eval of path at tp (F32 KV) within TOL of ref."""
    ours = tpd_cli.eval_logits(path, SEQS, ref.shape[1], tp=tp, kv_type="f32")
    err = np.abs(ours.astype(np.float64) - ref).max() / np.abs(ref).max()
    print(f"{what} tp={tp}: rel err {err:.2e}")
    assert err <= TOL, f"{what} tp={tp}: rel err {err:.3e} > {TOL}"
