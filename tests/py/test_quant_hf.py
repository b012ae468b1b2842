"""FP8 and INT4 Hugging Face checkpoints run by tpd and by an independent implementation of
each format: transformers on the CPU with the format's own loader, in float64.

Checkpoints (tests/reference/make_ct.py) written by the formats' own tools: compressed-tensors
quantizes and packs float-quantized FP8 (per tensor / channel / 128x128 block) and
pack-quantized W4A16 (groups of 32 / 128, per channel; symmetric, asymmetric); transformers'
FineGrainedFP8 quantize op writes quant_method "fp8" (128x128 weight_scale_inv); GPT-QModel's own modules
pack GPTQ v1 (desc_act asymmetric, group 128 symmetric) and AWQ GEMM; from random tiny Llamas
and SmolLM2-135M-Instruct (dequantized from its Q4_1 GGUF). Also make_int4.py's GPTQ (v1
act-order runs, v2 per channel) and AWQ checkpoints (our numpy packing), read by GPT-QModel.
Reference: AutoModelForCausalLM.from_pretrained with CompressedTensorsConfig(dequantize=True)
(compressed-tensors' decompression), FineGrainedFP8Config(dequantize=True) (transformers'
Fp8Dequantize), GPTQConfig / AwqConfig (GPT-QModel's modules, each replaced by the dense
weight of its own unpacking), then float64, teacher-forced logits of every position.
tpd: `tpd eval` on the same directory, CPU backend, F32 KV cache, tp 1, 2, 3.

Bound. Both sides dequantize the weights exactly and run the activations unquantized (W8A16,
W4A16: tpd's choice for these schemes; the FP8 configs' dynamic activation schemes are not
applied by transformers' dequantize path either), so the format leaves no error between
them: what differs is tpd's float32 arithmetic, bounded as for the F32 models,
|tpd - HF| <= TOL * max|HF| with TOL = 1e-4 (quant_check.TOL). The argmax then has to agree
wherever HF's top-2 gap exceeds 2 * TOL * max|HF|. Each checkpoint is checked to be really
quantized (its matrices stored as F8_E4M3 / packed I32 words, and its logits more than
QUANT_VISIBLE = 30 * TOL * max|HF| away from those of the float model it came from), and a
checkpoint with one matrix's nibbles swapped pairwise or one FP8 scale changed is checked to
fail the comparison, so that the bound catches a wrong reading.

Measured: bench/RESULTS.md, "FP8 / INT4 checkpoints against transformers".
"""
import json
import os
import shutil
import struct
import sys

import numpy as np
import pytest
import torch  # a declared requirement (launch/requirements.txt): missing means failing

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "reference"))

import make_ct  # noqa: E402
import make_int4  # noqa: E402
import tpd_cli  # noqa: E402
from quant_check import SEQS, TOL  # noqa: E402

QUANT_VISIBLE = 30 * TOL
# make_int4.py's GPTQ (v1 with act-order runs, v2 per channel with QKV bias) and AWQ GEMM
# checkpoints that transformers' configs accept: packed by our numpy code, read by GPT-QModel
GPTQ_AWQ = ["llama3_tied-gptq_g32_actorder", "qwen2-gptq_v2_channel", "mistral-awq_g32"]
ALL = list(make_ct.MODELS) + GPTQ_AWQ
# SmolLM2: "The capital of France is Paris. The capital of Germany is Berlin, and the capital
# of Italy is" (its tokenizer.json), and SEQS' first
SMOL_SEQS = [[504, 3575, 282, 4649, 314, 7042, 30, 378, 3575, 282, 4521, 314, 11452, 28, 284,
              260, 3575, 282, 7158, 314], SEQS[0]]


def _seqs(name):
    return SMOL_SEQS if name.startswith("smollm2") else SEQS


def st_dtypes(path):
    """{tensor name: safetensors dtype} of path/model.safetensors (its JSON header)."""
    with open(os.path.join(path, "model.safetensors"), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    return {k: v["dtype"] for k, v in h.items() if k != "__metadata__"}


def _biases_f16(path):
    """Biases stored F16, as GPTQ releases (and GPT-QModel's modules, which round them on
    load) have them."""
    from safetensors.torch import load_file, save_file
    st = os.path.join(path, "model.safetensors")
    t = load_file(st)
    save_file({n: a.half() if n.endswith("_proj.bias") else a for n, a in t.items()}, st,
              {"format": "pt"})


def _dense_gptq(model, method):
    """Each GPT-QModel quantized linear of model replaced by a float64 nn.Linear of the
    weight its own unpacking gives (TorchLinear.dequantize_weight, AWQ's dequantize_gemm;
    scales widened first, so the products are exact)."""
    from gptqmodel.quantization.awq.utils.packing_utils import dequantize_gemm
    quantized = [(n, m) for n, m in model.named_modules() if hasattr(m, "qweight")]
    assert len(quantized) == 7 * model.config.num_hidden_layers, len(quantized)
    for n, mod in quantized:
        mod.scales = mod.scales.double()
        w = (mod.dequantize_weight() if method == "gptq" else
             dequantize_gemm(mod.qweight, mod.qzeros, mod.scales, mod.bits, mod.group_size))
        lin = torch.nn.Linear(mod.in_features, mod.out_features, bias=mod.bias is not None,
                              dtype=torch.float64)
        lin.weight.data = w.T.contiguous().double()  # [in, out] in GPTQ's and AWQ's layout
        if mod.bias is not None:
            lin.bias.data = mod.bias.double()
        parent, _, child = n.rpartition(".")
        setattr(model.get_submodule(parent), child, lin)


def hf_logits(path, seqs, quantized):
    """transformers' float64 logits [total tokens, vocab] of path: a quantized checkpoint
    dequantized by the format's own loader, or a float one."""
    from transformers import (AutoModelForCausalLM, AwqConfig, CompressedTensorsConfig,
                              FineGrainedFP8Config, GPTQConfig)
    kw, method = {}, None
    if quantized:
        with open(os.path.join(path, "config.json")) as f:
            method = json.load(f)["quantization_config"]["quant_method"]
        kw["quantization_config"] = {
            "fp8": lambda: FineGrainedFP8Config(dequantize=True),
            "compressed-tensors": lambda: CompressedTensorsConfig(dequantize=True),
            # GPT-QModel's pure-torch kernels: no JIT-compiled CPU extension
            "gptq": lambda: GPTQConfig(bits=4, backend="torch"),
            "awq": lambda: AwqConfig(backend="torch_awq")}[method]()
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, device_map="cpu",
                                                 attn_implementation="eager", **kw)
    if method in ("gptq", "awq"):
        _dense_gptq(model, method)
    # nn.Module's own cast: transformers refuses one of a GPTQ model, dense now
    model = torch.nn.Module.to(model, torch.float64).eval()
    with torch.no_grad():
        return np.concatenate([model(torch.tensor([s])).logits[0].numpy() for s in seqs])


@pytest.fixture(scope="module")
def outdir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("quant_hf"))


_cache = {}


def checkpoint(outdir, name):
    """(path, HF logits of the checkpoint, HF logits of its float source), made once."""
    if name not in _cache:
        if name in GPTQ_AWQ:
            path = make_int4.write(outdir, name)[0]
            _biases_f16(path)
            src = make_ct.write_source(outdir, make_int4.MODELS[name][0])
        else:
            path, src = make_ct.write(outdir, name)
        seqs = _seqs(name)
        _cache[name] = (path, hf_logits(path, seqs, True), hf_logits(src, seqs, False))
    return _cache[name]


def compare(ours, ref):
    """(max relative error, positions whose argmax differs where HF's top-2 gap exceeds the
    bound's)."""
    scale = np.abs(ref).max()
    err = np.abs(ours.astype(np.float64) - ref).max() / scale
    top2 = np.sort(ref, axis=1)[:, -2:]
    clear = (top2[:, 1] - top2[:, 0]) > 2 * TOL * scale
    bad = np.flatnonzero(clear & (ours.argmax(1) != ref.argmax(1)))
    return err, bad, int(clear.sum())


def check(path, ref, name, tp):
    ours = tpd_cli.eval_logits(path, _seqs(name), ref.shape[1], tp=tp, kv_type="f32")
    err, bad, clear = compare(ours, ref)
    print(f"{name} tp={tp}: rel err {err:.2e}, argmax checked at {clear}/{len(ref)}")
    assert not len(bad), f"{name} tp={tp}: argmax differs at positions {bad.tolist()}"
    assert err <= TOL, f"{name} tp={tp}: rel err {err:.3e} > {TOL}"
    return err


def _cases():
    return [pytest.param(n, tp, id=f"{n}-tp{tp}") for n in ALL for tp in (1, 2, 3)]


@pytest.mark.parametrize("name,tp", _cases())
def test_matches_transformers(tpd, outdir, name, tp):
    path, ref, _ = checkpoint(outdir, name)
    check(path, ref, name, tp)


@pytest.mark.parametrize("name", ALL)
def test_checkpoint_is_quantized(outdir, name):
    """Every attention and MLP matrix stored quantized, nothing else; logits visibly off the
    float model's."""
    path, ref, ref_float = checkpoint(outdir, name)
    types = st_dtypes(path)
    fp8 = "fp8" in name
    mats = [n for n in types if n.split(".")[-2].endswith("_proj")]
    stored = {n.rsplit(".", 1)[0] for n in mats}
    assert len(stored) == 7 * len({n.split(".")[2] for n in mats}), sorted(stored)[:8]
    for m in stored:
        if fp8:
            assert types[m + ".weight"] == "F8_E4M3", (m, types[m + ".weight"])
        else:
            packed = ".qweight" if "gptq" in name or "awq" in name else ".weight_packed"
            assert m + ".weight" not in types and types[m + packed] == "I32", m
    assert not any(t in ("F8_E4M3", "I32", "F16") for n, t in types.items()
                   if "_proj." not in n)
    diff = np.abs(ref - ref_float).max() / np.abs(ref).max()
    print(f"{name}: quantized vs float rel diff {diff:.2e}")
    assert diff > QUANT_VISIBLE, f"{name}: quantized logits only {diff:.2e} off the float's"


def _swap_nibbles(t):
    """Each packed word's nibbles swapped in pairs (bits 0-3 with 4-7, ...)."""
    u = t.view(torch.int32).numpy().view(np.uint32)
    s = ((u & 0x0F0F0F0F) << 4) | ((u >> 4) & 0x0F0F0F0F)
    return torch.from_numpy(s.view(np.int32).copy())


# name: (checkpoint, tensor edited, edit)
BROKEN = {
    "nibble_order": ("tiny768-w4_g128_asym", "model.layers.1.mlp.down_proj.weight_packed",
                     _swap_nibbles),
    "fp8_scale": ("tiny768-fp8_tensor", "model.layers.0.self_attn.o_proj.weight_scale",
                  lambda t: t * 1.02),
    "awq_order": ("mistral-awq_g32", "model.layers.0.mlp.gate_proj.qweight", _swap_nibbles),
    "block_scale": ("tiny768-hf_fp8_block", "model.layers.1.mlp.up_proj.weight_scale_inv",
                    lambda t: t.flip(0).contiguous()),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_comparison_catches_misreading(tpd, outdir, tmp_path, case):
    """tpd on a copy with one tensor misread on purpose, against HF on the intact file:
    the comparison above must fail."""
    from safetensors.torch import load_file, save_file
    name, tensor, edit = BROKEN[case]
    path, ref, _ = checkpoint(outdir, name)
    bad = str(tmp_path / "bad")
    shutil.copytree(path, bad)
    st = os.path.join(bad, "model.safetensors")
    t = load_file(st)
    t[tensor] = edit(t[tensor])
    save_file(t, st, {"format": "pt"})
    with pytest.raises(AssertionError, match="rel err|argmax"):
        check(bad, ref, name, 1)
