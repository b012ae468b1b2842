"""Hugging Face INT4 weight-only checkpoints (compressed-tensors pack-quantized group /
channel, symmetric / asymmetric; GPTQ v1 and v2 with g_idx, act-order moving whole 32-column
runs, and desc_act's groups scattered over the input, which tpd regroups with a gather
index; AWQ GEMM) through
`tpd eval` on the CPU backend at tp 1, 2 and 3, against the float64 reference run on the
exactly dequantized weights (tests/reference/make_int4.py packs them in numpy after each
format's published packing). tpd runs them as W4A16: exact weights, f32 activations, so the
F32 tolerance applies. Then broken checkpoints: each refused on every rank with a message
that names the tensor or the scheme."""
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "reference"))

import ckpt_edit  # noqa: E402
import make_int4  # noqa: E402
from quant_check import check_eval, reference  # noqa: E402


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("int4"))
    out = {}
    for name in make_int4.MODELS:
        path, config, deq = make_int4.write(d, name)
        out[name] = (path, reference(deq, config, make_int4.MODELS[name][0]))
    return out


def _cases():
    return [pytest.param(name, tp, id=f"{name}-tp{tp}") for name in make_int4.MODELS
            for tp in (1, 2, 3)]


@pytest.mark.parametrize("name,tp", _cases())
def test_int4_matches_reference(tpd, models, name, tp):
    path, ref = models[name]
    check_eval(path, ref, tp, name)


def test_int4_tp1_needs_no_group_split(tpd, tmp_path):
    """At tp 1 nothing is cut: a 224-column o_proj in groups of 64 (the last one partial,
    refused at tp 2: group_split below) loads and matches."""
    path, config, deq = make_int4.write(str(tmp_path), "m", ("llama3_tied", "awq",
                                                             dict(group=64)))
    check_eval(path, reference(deq, config), 1, "group 64")


def test_packing_matches_published_examples():
    """The packers against hand-worked words of each format's definition."""
    v = np.arange(16).reshape(2, 8) % 16
    # compressed-tensors / GPTQ: element i of 8 in bits 4i
    assert make_int4.pack_rows(v)[0, 0] == 0x76543210
    assert make_int4.pack_rows(v)[1, 0] == np.uint32(0xFEDCBA98).view(np.int32)
    # AWQ GEMM: nibbles hold columns 0, 2, 4, 6, 1, 3, 5, 7
    assert make_int4.pack_awq(v)[0, 0] == 0x75316420


def _plan(tpd, path, tp):
    p = subprocess.run([tpd, "config", "--model", path, "--parallel.tp", str(tp)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return [int(b) for b in re.findall(r"#   rank \d+ \(stage \d+\): (\d+) bytes", p.stdout)]


def test_desc_act_memory_plan(tpd, tmp_path):
    """`tpd config`'s plan counts a desc_act checkpoint's regrouped weights exactly: against
    the same checkpoint without g_idx, each rank holds, per matrix whose g_idx scatters its
    groups over the rank's columns, a 4-byte gather entry per stored column, and the
    row-parallel slices (o_proj, down_proj: columns [256r, 256r + 256) of 768 at tp 3)
    their padding: each group's columns there rounded up to 32, 24 bytes a 32-column block
    of a row. Computed here from the g_idx, independently of tpd."""
    name = "llama_kq-gptq_g128_desc_asym"
    path, _, _ = make_int4.write(str(tmp_path), name)
    _, tensors, _, _ = make_int4.build(name)
    plan = _plan(tpd, path, 3)
    extra = [0, 0, 0]
    for n, g in tensors.items():
        if not n.endswith(".g_idx"):
            continue
        rows = tensors[n[:-len("g_idx")] + "scales"].shape[1]
        for r in range(3):
            cut = any(m in n for m in ("o_proj", "down_proj"))
            sl = g[256 * r: 256 * r + 256] if cut else g
            if all(len(set(sl[b:b + 32])) == 1 for b in range(0, len(sl), 32)):
                continue  # whole 32-column runs per group: stored as they are
            kp = sum(-(-c // 32) * 32 for c in np.bincount(sl) if c)
            extra[r] += 4 * kp + rows * (kp - len(sl)) // 32 * 24
    assert all(e > 0 for e in extra)

    def drop(t, types):
        for n in [n for n in t if n.endswith(".g_idx")]:
            t.pop(n)
    _edit_tensors(path, drop)
    plain = _plan(tpd, path, 3)
    assert [a - b for a, b in zip(plan, plain)] == extra, (plan, plain, extra)


# ---------------------------------------------------------------- refusals

_edit_config = ckpt_edit.edit_config
_edit_tensors = ckpt_edit.edit_tensors


def _set(key, value):
    return lambda p: _edit_config(p, lambda q: q.update({key: value}))


def _scale_shape(p):
    def fn(t, types):
        t["model.layers.1.mlp.down_proj.scales"] = np.ones((2, 256), np.float16)
    _edit_tensors(p, fn)


def _ct_scale_shape(p):
    def fn(t, types):
        t["model.layers.0.self_attn.q_proj.weight_scale"] = np.ones((224, 6), np.float32)
    _edit_tensors(p, fn)


def _truncated_packed(p):
    def fn(t, types):
        n = "model.layers.0.mlp.up_proj.weight_packed"
        t[n] = t[n][:, :-1].copy()
    _edit_tensors(p, fn)


def _ct_shape_lies(p):
    def fn(t, types):
        t["model.layers.1.self_attn.k_proj.weight_shape"] = np.array([32, 200], np.int64)
    _edit_tensors(p, fn)


def _zeros_missing(p):
    _edit_tensors(p, lambda t, types: t.pop("model.layers.0.self_attn.v_proj.qzeros"))


def _gidx_counts(p):
    def fn(t, types):  # group 0 of a row-parallel matrix loses a column to group 1
        g = t["model.layers.1.self_attn.o_proj.g_idx"]
        g[np.flatnonzero(g == 0)[-1]] = 1
    _edit_tensors(p, fn)


def _gidx_range(p):
    def fn(t, types):
        t["model.layers.0.mlp.gate_proj.g_idx"][5] = 99
    _edit_tensors(p, fn)


def _mixed_groups(p):
    def fn(q):
        g = json.loads(json.dumps(q["config_groups"]["group_0"]))
        g["weights"]["group_size"] = 64
        g["targets"] = ["re:.*mlp.*"]
        q["config_groups"]["group_1"] = g
    _edit_config(p, fn)


# name: (model written, how it is broken, what every rank must say)
BAD = {
    "unknown_method": ("llama_kq-awq_g128", _set("quant_method", "hqq"),
                       "quant_method 'hqq' is not supported"),
    "bits8": ("llama_kq-gptq_g64_sym", _set("bits", 8), "gptq with 8-bit weights is not "
              "supported"),
    "group16": ("llama_kq-awq_g128", _set("group_size", 16), "awq group_size 16 is not "
                "supported"),
    "awq_gemv": ("llama_kq-awq_g128", _set("version", "gemv"), "awq version 'gemv'"),
    "mixed": ("llama_kq-ct_g128_asym", _mixed_groups,
              "config groups with different weight schemes are not supported"),
    "scale_shape": ("llama_kq-gptq_g64_sym", _scale_shape,
                    "model.layers.1.mlp.down_proj.scales' has shape [2, 256]; the 256 x 768 "
                    "weight (gptq, groups of 64) needs [12, 256]"),
    "ct_scale_shape": ("llama3_tied-ct_g32_sym", _ct_scale_shape,
                       "model.layers.0.self_attn.q_proj.weight_scale' has shape [224, 6]; "
                       "the 224 x 224 weight (compressed-tensors, groups of 32) needs [224, 7]"),
    "truncated_packed": ("llama3_tied-ct_g32_sym", _truncated_packed,
                         "model.layers.0.mlp.up_proj.weight_packed': expected shape [224, 320]"),
    "shape_lies": ("llama3_tied-ct_g32_sym", _ct_shape_lies,
                   "model.layers.1.self_attn.k_proj.weight_shape' says [32, 200]"),
    "zeros_missing": ("llama_kq-gptq_g64_sym", _zeros_missing,
                      "model.layers.0.self_attn.v_proj.qweight' (gptq, asymmetric) has no zero "
                      "point tensor"),
    # every rank reads g_idx whole, so each says it, not only the rank holding the column
    "gidx_counts": ("llama3_tied-gptq_g32_desc_sym", _gidx_counts,
                    "model.layers.1.self_attn.o_proj.g_idx': group 0 has 31 columns, not 32"),
    "gidx_range": ("llama3_tied-gptq_g32_actorder", _gidx_range,
                   "model.layers.0.mlp.gate_proj.g_idx': element 5 is 99"),
    "truncated_file": ("llama_kq-awq_g128", lambda p: os.truncate(
        os.path.join(p, "model.safetensors"), os.path.getsize(
            os.path.join(p, "model.safetensors")) - 1000), "model.safetensors"),
    # 224-column o_proj in groups of 64: no split of it falls on group boundaries
    "group_split": (("llama3_tied", "awq", dict(group=64)), None,
                    "groups of 64 columns: the row-parallel"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_int4_refusals(tpd, tmp_path, case):
    model, breaker, msg = BAD[case]
    if isinstance(model, tuple):
        path = make_int4.write(str(tmp_path), "m", model)[0]
    else:
        path = make_int4.write(str(tmp_path), model)[0]
        breaker(path)
    out, ranks = ckpt_edit.refused(path, tmp_path)
    for rank in (0, 1):
        lines = ranks[rank]
        assert any(msg in ln for ln in lines), f"rank {rank} did not say {msg!r}:\n{out[-3000:]}"


@pytest.mark.parametrize("kind,block_bytes", [("int4", 24), ("fp8", 36)])
def test_synthetic_quantized_geometry(tpd, kind, block_bytes):
    """`--synthetic GEOMETRY:int4|fp8` (the GPU decode benchmarks' INT4 / FP8 models) holds its
    matrices, embedding and head as I4_S32 / F8_E4M3_S32 blocks: the weights loaded are exactly
    those blocks' bytes plus the f32 norms, and a greedy run on the CPU does not collapse to
    one repeated token (random codes with zero-mean values, unlike a biased zero point)."""
    import subprocess
    r = subprocess.run([tpd, "generate", "--synthetic", f"tiny:{kind}", "--backend", "cpu",
                        "--prompt-ids", "1,2,3", "-n", "12", "--temperature", "0", "--log.level", "info"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    dim, kv, ffn, vocab, layers = 256, 128, 512, 1000, 2  # parallel/synthetic.c "tiny"
    elems = layers * (2 * dim * dim + 2 * kv * dim + 3 * ffn * dim) + 2 * vocab * dim
    norms = 4 * (2 * layers * dim + dim)
    import re
    m = re.search(r"weights loaded: rank 0 .*\((\d+) bytes\)", r.stderr)
    assert m, r.stderr[-2000:]
    assert int(m.group(1)) == elems // 32 * block_bytes + norms
    toks = [int(t) for t in r.stdout.strip().splitlines()[-1].split(",")]
    assert len(toks) == 12 and len(set(toks)) >= 4, toks
