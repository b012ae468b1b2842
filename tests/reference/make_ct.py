#!/usr/bin/env python3
"""Hugging Face FP8 and INT4 checkpoints written by the formats' own tools, not by our numpy
packing (make_fp8.py, make_int4.py), for tests/py/test_quant_hf.py:

- compressed-tensors (the library llm-compressor saves with): apply_quantization_config on a
  transformers model, the weight scales and zero points from compressed_tensors'
  calculate_qparams over each tensor's / row's / group's / block's min and max (what
  llm-compressor's default min-max observer feeds it; weight-only scales need no calibration
  data), then ModelCompressor.compress_model (the library rounds, packs and names the
  tensors), save_pretrained and update_config. Formats: float-quantized FP8 (strategy tensor,
  channel, block 128x128; dynamic activations as FP8_DYNAMIC / FP8_BLOCK declare them) and
  pack-quantized W4A16 (group 32 / 128, channel; symmetric, asymmetric).
- transformers' FineGrainedFP8 quantize op (integrations.finegrained_fp8.Fp8Quantize, what
  `from_pretrained(..., quantization_config=FineGrainedFP8Config(...))` runs on a GPU; called
  directly, as its quantizer refuses to quantize without one): quant_method "fp8",
  weight_block_size [128, 128], weight_scale_inv. Written for "tiny768" only: Fp8Quantize
  leaves a matrix with partial tiles unquantized, and Fp8Dequantize (transformers 5.23.0)
  takes the tile size from the scale grid, so it refuses a 224 x 320 weight with a 2 x 3
  grid and misreads a 224 x 224 one with a 2 x 2 grid as 112 x 112 tiles (bench/RESULTS.md).
- GPT-QModel (what transformers' GPTQ and AWQ loaders run on): its TorchLinear.pack_block
  rounds and packs GPTQ (g_idx from a random act-order permutation for desc_act), its
  v2 -> v1 conversion writes v1's zero - 1, AwqTorchLinear.pack packs AWQ GEMM; scales and
  zeros are min-max per (row, group) as GPTQ's quantizer finds them without its Hessian
  updates (no calibration data); configs from transformers' GPTQConfig / AwqConfig.

Sources (float32 weights): "tiny768" (make_tiny's random weights, every width a multiple of
128 and hidden size = heads x head_dim, which transformers' LlamaConfig requires; tp 2 and 3
cut on 128-column group and tile boundaries), make_tiny's "llama3_tied" (llama3 rope, tied
embeddings, 224-wide rows), and SmolLM2-135M-Instruct dequantized from its Q4_1 GGUF.

Usage: make_ct.py OUTDIR [MODEL...]   (default: every model of MODELS but the SmolLM2 ones)
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import make_tiny  # noqa: E402
import weights as W  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(HERE))
SMOLLM2_GGUF = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
SMOLLM2_TOKENIZER = os.path.join(ROOT, "models", "tok", "hf", "smollm2", "tokenizer.json")

def smollm2_tokenizer():
    """SmolLM2's tokenizer.json, fetched by tok_fetch.py (as the tokenizer tests do) on a
    fresh checkout; a failure to fetch it is an error, not a skip."""
    if not os.path.exists(SMOLLM2_TOKENIZER):
        subprocess.run([sys.executable, os.path.join(HERE, "tok_fetch.py")], check=True,
                       capture_output=True)
    return SMOLLM2_TOKENIZER


TINY768 = dict(arch="llama", dim=768, n_heads=6, n_kv=3, head_dim=128, ffn=768, layers=2,
               vocab=512, tied=False, theta=10000.0, eps=1e-5)


def _fp8(strategy, **kw):
    return dict(num_bits=8, type="float", strategy=strategy, symmetric=True, dynamic=False, **kw)


def _int4(strategy, sym, **kw):
    return dict(num_bits=4, type="int", strategy=strategy, symmetric=sym, dynamic=False, **kw)


TOKEN_ACT = dict(num_bits=8, type="float", strategy="token", symmetric=True, dynamic=True)
GROUP_ACT = dict(num_bits=8, type="float", strategy="group", group_size=128, symmetric=True,
                 dynamic=True)

# scheme -> (weights, input activations) QuantizationArgs fields, or "transformers-fp8"
SCHEMES = {
    "fp8_tensor": (_fp8("tensor"), TOKEN_ACT),
    "fp8_channel": (_fp8("channel"), TOKEN_ACT),  # llm-compressor's FP8_DYNAMIC
    "fp8_block": (_fp8("block", block_structure=[128, 128]), GROUP_ACT),  # FP8_BLOCK
    "w4_g128_sym": (_int4("group", True, group_size=128), None),  # W4A16
    "w4_g128_asym": (_int4("group", False, group_size=128), None),  # W4A16_ASYM
    "w4_g32_sym": (_int4("group", True, group_size=32), None),
    "w4_g32_asym": (_int4("group", False, group_size=32), None),
    "w4_channel_asym": (_int4("channel", False), None),
    "w4_channel_sym": (_int4("channel", True), None),
    "hf_fp8_block": "transformers-fp8",
    # GPT-QModel's own packing (TorchLinear.pack_block, then its v2 -> v1 zero conversion;
    # AwqTorchLinear.pack): (format, group, symmetric, desc_act)
    "gptq_g32_desc_asym": ("gptq", 32, False, True),
    "gptq_g128_sym": ("gptq", 128, True, False),
    "awq_g128": ("awq", 128, False, False),
}

# name -> (source, scheme)
MODELS = {
    "tiny768-fp8_tensor": ("tiny768", "fp8_tensor"),
    "tiny768-fp8_block": ("tiny768", "fp8_block"),
    "tiny768-hf_fp8_block": ("tiny768", "hf_fp8_block"),
    "tiny768-w4_g128_sym": ("tiny768", "w4_g128_sym"),
    "tiny768-w4_g128_asym": ("tiny768", "w4_g128_asym"),
    "tiny768-w4_channel_sym": ("tiny768", "w4_channel_sym"),
    "llama3_tied-fp8_channel": ("llama3_tied", "fp8_channel"),
    "llama3_tied-w4_g32_asym": ("llama3_tied", "w4_g32_asym"),
    "llama3_tied-w4_channel_asym": ("llama3_tied", "w4_channel_asym"),
    "llama3_tied-gptq_g32_desc_asym": ("llama3_tied", "gptq_g32_desc_asym"),
    "tiny768-gptq_g128_sym": ("tiny768", "gptq_g128_sym"),
    "tiny768-awq_g128": ("tiny768", "awq_g128"),
    "smollm2-fp8_channel": ("smollm2", "fp8_channel"),
    "smollm2-w4_g32_sym": ("smollm2", "w4_g32_sym"),
}


def write_source(outdir, source):
    """A float32 HF checkpoint of source in outdir/source (written once); its path."""
    d = os.path.join(outdir, source)
    if os.path.exists(os.path.join(d, "config.json")):
        return d
    if source == "smollm2":
        config, w, _ = W.load_gguf(SMOLLM2_GGUF)
        config = dict(config, architectures=["LlamaForCausalLM"], model_type="llama",
                      torch_dtype="float32", hidden_act="silu", bos_token_id=1, eos_token_id=2)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(config, f, indent=2)
        shutil.copy(smollm2_tokenizer(), d)
        W.write_safetensors(os.path.join(d, "model.safetensors"),
                            {n: np.asarray(a, np.float32) for n, a in w.items()},
                            {n: "F32" for n in w}, {"format": "pt"})
        return d
    v = TINY768 if source == "tiny768" else make_tiny.VARIANTS[source]
    make_tiny.write_hf(d, v, make_tiny.make_weights(source, v), "f32", False)
    return d


def load_float(path):
    """The transformers model of a float checkpoint, float32, on the CPU."""
    import torch
    from transformers import AutoModelForCausalLM
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def _min_max(w, args):
    """Each quantization unit's min and max of w [rows, cols], shaped as its scale."""
    s = str(getattr(args.strategy, "value", args.strategy))
    if s == "tensor":
        return w.amin().reshape(1), w.amax().reshape(1)
    if s == "channel":
        return w.amin(1, keepdim=True), w.amax(1, keepdim=True)
    if s == "group":
        g = w.unflatten(-1, (-1, args.group_size))
        return g.amin(-1), g.amax(-1)
    br, bc = args.block_structure
    b = w.unflatten(0, (-1, br)).unflatten(-1, (-1, bc))
    return b.amin((1, 3)), b.amax((1, 3))


def quantize_ct(model, scheme):
    """compressed-tensors quantization of model's Linear layers (lm_head kept) in place,
    compressed into the scheme's format; returns the ModelCompressor."""
    import torch
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import (QuantizationArgs, QuantizationConfig,
                                                 QuantizationScheme, apply_quantization_config)
    from compressed_tensors.quantization.utils import calculate_qparams
    wargs, aargs = SCHEMES[scheme]
    qs = QuantizationScheme(targets=["Linear"], weights=QuantizationArgs(**wargs),
                            input_activations=QuantizationArgs(**aargs) if aargs else None)
    apply_quantization_config(model, QuantizationConfig(config_groups={"group_0": qs},
                                                        ignore=["lm_head"]))
    with torch.no_grad():
        for _, m in model.named_modules():
            qs = getattr(m, "quantization_scheme", None)
            if qs is None:
                continue
            lo, hi = _min_max(m.weight, qs.weights)
            scale, zp = calculate_qparams(lo, hi, qs.weights)
            m.weight_scale.copy_(scale.reshape(m.weight_scale.shape))
            if hasattr(m, "weight_zero_point"):
                m.weight_zero_point.copy_(zp.reshape(m.weight_zero_point.shape))
    compressor = ModelCompressor.from_pretrained_model(model)
    compressor.compress_model(model)
    return compressor


def write_hf_fp8(src, d, block=(128, 128)):
    """src's Linear weights but lm_head through transformers' Fp8Quantize, into d."""
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import FineGrainedFP8Config
    from transformers.integrations.finegrained_fp8 import Fp8Quantize

    qc = FineGrainedFP8Config(weight_block_size=list(block))
    op = Fp8Quantize(type("Quantizer", (), {"quantization_config": qc})())
    tensors = {}
    for n, t in load_file(os.path.join(src, "model.safetensors")).items():
        if n.endswith("_proj.weight"):
            tensors.update(op.convert({n: t}))
        else:
            tensors[n] = t
    assert all(t.dtype == torch.float8_e4m3fn for n, t in tensors.items()
               if n.endswith("_proj.weight"))
    save_file(tensors, os.path.join(d, "model.safetensors"), {"format": "pt"})
    with open(os.path.join(src, "config.json")) as f:
        config = json.load(f)
    config["quantization_config"] = qc.to_dict()
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f, indent=2)


def _gptq_params(w, gidx, ng, sym):
    """Scales and zeros [rows, ng] of w as GPTQ's quantizer finds them (min-max; symmetric:
    zero 8), scales rounded to the F16 they are stored in."""
    import torch
    lo = torch.stack([w[:, gidx == g].amin(1) for g in range(ng)], 1).clamp(max=0)
    hi = torch.stack([w[:, gidx == g].amax(1) for g in range(ng)], 1).clamp(min=0)
    if sym:
        hi = torch.maximum(-lo, hi)
        lo = -hi
    s = ((hi - lo) / 15).clamp(min=1e-6).half().float()
    z = torch.full_like(s, 8.0) if sym else torch.round(-lo / s).clamp(0, 15)
    return s, z


def write_gptq(src, d, scheme):
    """src's attention and MLP matrices packed by GPT-QModel's own modules into d."""
    import types
    import torch
    from gptqmodel.nn_modules.qlinear.torch import TorchLinear
    from gptqmodel.nn_modules.qlinear.torch_awq import AwqTorchLinear
    from gptqmodel.utils.model import convert_gptq_v2_to_v1_format_module
    from safetensors.torch import load_file, save_file
    from transformers import AwqConfig, GPTQConfig
    fmt, group, sym, desc = SCHEMES[scheme]
    gen = torch.Generator().manual_seed(29)
    perms, out = {}, {}
    for n, w in load_file(os.path.join(src, "model.safetensors")).items():
        if not n.endswith("_proj.weight"):
            out[n] = w
            continue
        rows, cols = w.shape
        gidx = torch.arange(cols) // group
        if desc:  # act-order: one column order per layer and input (q/k/v, gate/up)
            key = n.split(".")[2], "qkv" if "attn" in n and "o_proj" not in n else n
            perm = perms.setdefault(key, torch.randperm(cols, generator=gen))
            gidx = torch.empty_like(gidx)
            gidx[perm] = torch.arange(cols) // group
        s, z = _gptq_params(w, gidx, cols // group, sym)
        lin = torch.nn.Linear(cols, rows, bias=False)
        lin.weight.data = w
        cls = TorchLinear if fmt == "gptq" else AwqTorchLinear
        m = cls(bits=4, group_size=group, sym=sym, desc_act=desc, in_features=cols,
                out_features=rows, register_buffers=True)
        if fmt == "gptq":
            m.pack_block(lin, s, z, gidx.to(torch.int32))
            convert_gptq_v2_to_v1_format_module(
                m, types.SimpleNamespace(bits=4, pack_dtype=torch.int32))
            out[n[:-6] + "g_idx"] = m.g_idx.to(torch.int32)
        else:
            m.pack(lin, s, z)
        for k in ("qweight", "qzeros", "scales"):
            out[n[:-6] + k] = getattr(m, k).contiguous()
    save_file(out, os.path.join(d, "model.safetensors"), {"format": "pt"})
    with open(os.path.join(src, "config.json")) as f:
        config = json.load(f)
    qc = (GPTQConfig(bits=4, group_size=group, desc_act=desc, sym=sym) if fmt == "gptq" else
          AwqConfig(bits=4, group_size=group, zero_point=True, version="gemm"))
    config["quantization_config"] = qc.to_dict()
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f, indent=2)


def write(outdir, name):
    """Writes MODELS[name] into outdir/name (the source into outdir/SOURCE first); returns
    (path, source path)."""
    source, scheme = MODELS[name]
    src = write_source(outdir, source)
    d = os.path.join(outdir, name)
    if os.path.exists(d):
        shutil.rmtree(d)
    os.makedirs(d)
    if SCHEMES[scheme] == "transformers-fp8":
        write_hf_fp8(src, d)
    elif SCHEMES[scheme][0] in ("gptq", "awq"):
        write_gptq(src, d, scheme)
    else:
        model = load_float(src)
        compressor = quantize_ct(model, scheme)
        model.save_pretrained(d)
        compressor.update_config(d)
    for fn in os.listdir(src):
        if fn.startswith("tokenizer") or fn in ("vocab.json", "merges.txt"):
            shutil.copy(os.path.join(src, fn), d)
    return d, src


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for name in sys.argv[2:] or [n for n in MODELS if not n.startswith("smollm2")]:
        print(write(sys.argv[1], name)[0])


if __name__ == "__main__":
    main()
