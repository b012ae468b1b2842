"""The numpy emulation of the CUDA backend's W8A8 activations (model_ref's 'e4m3_token',
used by tests/gpu/check_backends.py to size the FP8 prefill tolerance) against make_fp8's
E4M3 encoder (itself checked against ml_dtypes and util/fp8.h): per token amax / 448, codes
rounded to nearest even, saturating; a row of zeros stays zero."""
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))

import make_fp8  # noqa: E402
import model_ref  # noqa: E402


def expected(x32):
    amax = np.maximum(np.abs(x32).max(axis=1, keepdims=True), np.float32(2.0 ** -100))
    inv = (np.float32(448.0) / amax).astype(np.float32)
    s = (amax / np.float32(448.0)).astype(np.float64)
    return make_fp8.decode_e4m3(make_fp8.encode_e4m3((x32 * inv).astype(np.float32))) * s


def test_e4m3_token_matches_the_encoder():
    rng = np.random.default_rng(29)
    for scale in (1e-30, 1e-3, 1.0, 3e4):
        x = (rng.standard_normal((9, 256)) * scale).astype(np.float32)
        x[1] = 0.0                       # amax 0
        x[2, 5] = 1000 * scale           # an outlier: the rest in subnormal codes
        x[3] *= np.float32(2.0) ** rng.integers(-12, 3, 256).astype(np.float32)
        got = model_ref.quantize_act(x, "e4m3_token")
        want = expected(x)
        assert np.array_equal(got, want), np.abs(got - want).max()
        assert np.all(got[1] == 0)


def test_e4m3_token_ties_and_bound():
    # each row's amax is 448, so x * inv = x: the midpoints between codes go to the even code
    vals = make_fp8.E4M3_POS
    mids = ((vals[:-1] + vals[1:]) / 2).astype(np.float32)
    x = np.stack([np.concatenate([mids, [448.0]]), -np.concatenate([mids, [448.0]])]).astype(np.float32)
    got = model_ref.quantize_act(x, "e4m3_token")
    codes = make_fp8.encode_e4m3(x)
    assert np.array_equal(got, make_fp8.decode_e4m3(codes))
    assert np.all(codes[0, :-1] % 2 == 0)
    # the error bound test_cuda_w8a8 and matmul_w8a8.cu state: 2^-4 |x| + 2^-10 s
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((4, 4096)) * np.exp(rng.uniform(-8, 2, (4, 4096)))).astype(np.float32)
    s = np.abs(x).max(axis=1, keepdims=True).astype(np.float64) / 448
    err = np.abs(model_ref.quantize_act(x, "e4m3_token") - x)
    assert np.all(err <= 2.0 ** -4 * np.abs(x) * (1 + 2.0 ** -20) + 2.0 ** -10 * s)
