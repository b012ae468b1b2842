"""Hugging Face FP8 E4M3 checkpoints (compressed-tensors float-quantized per tensor and per
channel, quant_method "fp8" with 128x128 block scales) through `tpd eval` on the CPU backend
at tp 1, 2 and 3, against a float64 reference that reads the same files back and
dequantizes them (tests/reference/make_fp8.py; ml_dtypes' E4M3 decode, which
tests/py/test_fp8.py checks against util/fp8.h code for code). tpd runs these as W8A16:
exact weights, f32 activations, so the F32 tolerance applies. Then broken checkpoints: each
refused on every rank with a message that names the problem."""
import json
import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "reference"))

import ckpt_edit  # noqa: E402
import make_fp8  # noqa: E402
from quant_check import check_eval, reference  # noqa: E402


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("fp8"))
    return {name: make_fp8.write(d, name) for name in make_fp8.MODELS}


@pytest.fixture(scope="module")
def refs(models):
    out = {}
    for name, path in models.items():
        config, w = make_fp8.load_dequant(path)
        out[name] = reference(w, config, make_fp8.MODELS[name][0])
    return out


def test_e4m3_rounding_matches_ml_dtypes():
    """make_fp8's numpy E4M3 against ml_dtypes (itself checked against util/fp8.h)."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    f8 = ml_dtypes.float8_e4m3fn
    ref = np.arange(256, dtype=np.uint8).view(f8).astype(np.float64)
    assert np.array_equal(make_fp8.decode_e4m3(np.arange(256)), ref, equal_nan=True)
    pos = np.unique(ref[np.isfinite(ref) & (ref >= 0)])
    mids = (pos[:-1] + pos[1:]) / 2
    x = np.concatenate([pos, mids, np.nextafter(mids, 0), np.nextafter(mids, 1e9),
                        np.random.default_rng(0).standard_normal(20000) * 50, [448, 460, 1e4]])
    x = np.concatenate([x, -x]).astype(np.float32)
    want = np.clip(x, -448, 448).astype(f8).view(np.uint8)
    assert np.array_equal(make_fp8.encode_e4m3(x), want)


def _cases():
    return [pytest.param(name, tp, id=f"{name}-tp{tp}") for name in make_fp8.MODELS
            for tp in (1, 2, 3)]


@pytest.mark.parametrize("name,tp", _cases())
def test_fp8_matches_reference(tpd, models, refs, name, tp):
    check_eval(models[name], refs[name], tp, name)


@pytest.mark.parametrize("name,want", [("qwen3-ct_channel", "8 of 8"),
                                       ("llama3_tied-ct_tensor", "12 of 12"),
                                       ("llama3_tied-fp8_block", "0 of 12")])
def test_fp8_row_scaled_on_load(tpd, models, tmp_path, name, want):
    """The loader marks per-tensor and per-channel matrices row-scaled (struct bweight's
    row_scaled: the CUDA backend's W8A8 prefill) and 128x128-block ones (two or three column
    tiles a row here, each its own scale) not; its log line counts them."""
    import subprocess
    p = subprocess.run([tpd, "eval", "--model", models[name], "--seqs", "1,2", "--threads", "1",
                        "--log-level", "info", "--out", str(tmp_path / "o.f32")],
                       capture_output=True, text=True, timeout=120)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert f"FP8 weights: {want} matrices with one scale per row" in out, out


# ---------------------------------------------------------------- refusals

_edit_config = ckpt_edit.edit_config
_edit_tensors = ckpt_edit.edit_tensors


def _bad_unknown_method(p):
    _edit_config(p, lambda q: q.update(quant_method="bitsandbytes"))


def _bad_static_acts(p):
    def fn(q):
        q["config_groups"]["group_0"]["input_activations"]["dynamic"] = False
    _edit_config(p, fn)


def _bad_block_size(p):
    _edit_config(p, lambda q: q.update(weight_block_size=[128, 48]))


def _bad_scale_shape(p):
    def fn(t, types):
        t["model.layers.1.mlp.down_proj.weight_scale_inv"] = np.ones((2, 2), np.float32)
    _edit_tensors(p, fn)


def _bad_scale_missing(p):
    _edit_tensors(p, lambda t, types: t.pop("model.layers.0.self_attn.k_proj.weight_scale"))


def _bad_nan_code(p):
    def fn(t, types):
        t["model.layers.1.mlp.up_proj.weight"][3, 5] = 0x7f
    _edit_tensors(p, fn)


def _bad_truncated(p):
    f = os.path.join(p, "model.safetensors")
    os.truncate(f, os.path.getsize(f) - 1000)


def _bad_no_config(p):
    _edit_config(p, lambda q: q.clear())
    with open(os.path.join(p, "config.json")) as f:
        c = json.load(f)
    del c["quantization_config"]
    with open(os.path.join(p, "config.json"), "w") as f:
        json.dump(c, f)


# name: (model written, how it is broken, what every rank must say)
BAD = {
    "unknown_method": ("qwen3-ct_channel", _bad_unknown_method,
                       "quant_method 'bitsandbytes' is not supported"),
    "static_acts": ("qwen3-ct_channel", _bad_static_acts,
                    "static input activation scales are not supported"),
    "block_size": ("llama3_tied-fp8_block", _bad_block_size, "weight_block_size [128, 48]"),
    "scale_shape": ("llama3_tied-fp8_block", _bad_scale_shape,
                    "model.layers.1.mlp.down_proj.weight_scale_inv' of the 224 x 320 weight has "
                    "shape [2, 2]; the fp8 scheme needs [2, 3]"),
    "scale_missing": ("qwen3-ct_channel", _bad_scale_missing,
                      "model.layers.0.self_attn.k_proj.weight' (F8_E4M3, compressed-tensors) has "
                      "no 'weight_scale'"),
    "nan_code": ("llama3_tied-ct_tensor", _bad_nan_code,
                 "model.layers.1.mlp.up_proj.weight': NaN code at row 3, column 5"),
    "truncated": ("llama3_tied-ct_tensor", _bad_truncated, "model.safetensors"),
    "no_config": ("qwen3-ct_channel", _bad_no_config,
                  "dtype F8_E4M3 but config.json has no FP8 quantization_config"),
    # 144 columns: not a whole number of tpd's 32-element FP8 blocks
    "columns": (("llama_gqa", "ct_channel"), None, "multiple of 32 columns"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_fp8_refusals(tpd, tmp_path, case):
    model, breaker, msg = BAD[case]
    if isinstance(model, tuple):
        path = make_fp8.write(str(tmp_path), "m", model)
    else:
        path = make_fp8.write(str(tmp_path), model)
        breaker(path)
    out, ranks = ckpt_edit.refused(path, tmp_path)
    for rank in (0, 1):
        # a bad code is found only by the rank whose shard holds it (row 3: rank 0's rows);
        # the others hear of it from the load's collective
        want = msg if case != "nan_code" or rank == 0 else "another rank failed to load the model"
        lines = ranks[rank]
        assert any(want in ln for ln in lines), f"rank {rank} did not say {want!r}:\n{out[-3000:]}"
