#!/usr/bin/env python3
"""Tiny random FP8 E4M3 checkpoints in the layouts Hugging Face FP8 releases use, and a
float64 reference that reads them back from disk and dequantizes them.

Schemes (config.json quantization_config):
- ct_tensor:  compressed-tensors float-quantized, strategy "tensor": weight_scale [1] (F32)
- ct_channel: compressed-tensors float-quantized, strategy "channel": weight_scale
              [rows, 1] in BF16 (as llm-compressor writes it for a BF16 model)
- fp8_block:  quant_method "fp8", weight_block_size [128, 128]: weight_scale_inv
              [ceil(rows/128), ceil(cols/128)] F32 (DeepSeek-V3 / Qwen3-FP8 layout)
The attention and MLP matrices are FP8 (absmax scaling per tensor / row / tile, E4M3
rounding: numpy below, checked against ml_dtypes' float8_e4m3fn by
tests/py/test_fp8_weights.py, which tests/py/test_fp8.py checks against util/fp8.h, so the
GPU machine needs no ml_dtypes); embeddings, norms and the LM head stay F32, as the
releases keep them ("ignore": ["lm_head"]). Activations are declared dynamic (per token).

Usage: make_fp8.py OUTDIR [MODEL...]   (default: every model of MODELS)
"""
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import make_tiny  # noqa: E402
import weights as W  # noqa: E402

E4M3_MAX = 448.0
FP8_MATRICES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
                "w1", "w2", "w3")  # Mixtral's experts

# name -> (make_tiny variant, scheme). Column counts are multiples of 32; llama3_tied has
# 224 / 320 columns, so 128x128 tiles are partial and tp 2 / 3 cut rows and columns off
# tile boundaries; llama_kq's 128-wide heads keep tp 2 / 3 on them.
MODELS = {
    "llama3_tied-fp8_block": ("llama3_tied", "fp8_block"),
    "llama_kq-fp8_block": ("llama_kq", "fp8_block"),
    "qwen3-ct_channel": ("qwen3", "ct_channel"),
    "llama3_tied-ct_tensor": ("llama3_tied", "ct_tensor"),
    # experts FP8, the router kept F32 (as the releases list it in "ignore")
    "mixtral-fp8_block": ("mixtral", "fp8_block"),
}


def _e4m3_table():
    """Value of every code 0..255 (NaN for 0x7f and 0xff)."""
    c = np.arange(256)
    e, m = (c >> 3) & 15, (c & 7).astype(np.float64)
    v = np.where(e == 0, m * 2.0 ** -9, (1 + m / 8) * 2.0 ** (e - 7))
    v = np.where(c & 0x80, -v, v)
    v[[0x7f, 0xff]] = np.nan
    return v


E4M3 = _e4m3_table()
E4M3_POS = E4M3[:0x7f]  # codes 0..0x7e: 0 .. 448, increasing


def decode_e4m3(codes):
    return E4M3[np.asarray(codes, np.uint8)]


def encode_e4m3(x):
    """Codes of float32 x: round to nearest, ties to the even code, |x| >= 448 saturating;
    no NaNs expected."""
    a = np.minimum(np.abs(np.asarray(x, np.float32)).astype(np.float64), E4M3_MAX)
    hi = np.minimum(np.searchsorted(E4M3_POS, a), 0x7e)
    lo = np.maximum(hi - 1, 0)
    dlo, dhi = a - E4M3_POS[lo], E4M3_POS[hi] - a
    code = np.where((dlo < dhi) | ((dlo == dhi) & (lo % 2 == 0)), lo, hi)
    return (code | np.where(np.signbit(np.asarray(x, np.float32)), 0x80, 0)).astype(np.uint8)


def quant_config(scheme):
    if scheme == "fp8_block":
        return {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
                "weight_block_size": [128, 128]}
    strategy = scheme.split("_")[1]
    return {
        "quant_method": "compressed-tensors", "format": "float-quantized",
        "quantization_status": "compressed", "kv_cache_scheme": None, "ignore": ["lm_head"],
        "config_groups": {"group_0": {
            "targets": ["Linear"],
            "weights": {"num_bits": 8, "type": "float", "strategy": strategy,
                        "symmetric": True, "dynamic": False, "group_size": None},
            "input_activations": {"num_bits": 8, "type": "float", "strategy": "token",
                                  "symmetric": True, "dynamic": True}}},
    }


def quantize(w, scheme):
    """(codes uint8 [rows, cols], scale array, scale dtype, scale tensor suffix)."""
    w = np.asarray(w, np.float32)
    rows, cols = w.shape
    if scheme == "ct_tensor":
        s = np.array([np.abs(w).max() / E4M3_MAX], np.float32)
        return encode_e4m3(w / s[0]), s, "F32", "weight_scale"
    if scheme == "ct_channel":
        s = (np.abs(w).max(axis=1, keepdims=True) / E4M3_MAX).astype(np.float32)
        s = W.bf16_to_f32(W.f32_to_bf16(s))  # stored as BF16: quantize with what is stored
        return encode_e4m3(w / s), s, "BF16", "weight_scale"
    br, bc = 128, 128
    nr, nc = -(-rows // br), -(-cols // bc)
    s = np.zeros((nr, nc), np.float32)
    codes = np.zeros((rows, cols), np.uint8)
    for i in range(nr):
        for j in range(nc):
            t = w[i * br:(i + 1) * br, j * bc:(j + 1) * bc]
            s[i, j] = np.abs(t).max() / E4M3_MAX
            codes[i * br:(i + 1) * br, j * bc:(j + 1) * bc] = encode_e4m3(t / s[i, j])
    return codes, s, "F32", "weight_scale_inv"


def write(outdir, name, spec=None):
    """The checkpoint of MODELS[name] (or of spec, a (variant, scheme) pair) in outdir/name."""
    var, scheme = spec or MODELS[name]
    v = make_tiny.VARIANTS[var]
    w = make_tiny.make_weights(var, v)
    if v.get("hf_type") == "mixtral":  # Mixtral checkpoints spell the experts their own way
        w = {W.qwen_to_mixtral_name(k): a for k, a in w.items()}
    d = os.path.join(outdir, name)
    os.makedirs(d, exist_ok=True)
    for fn in os.listdir(d):
        os.remove(os.path.join(d, fn))
    cfg = make_tiny.hf_config(v)
    cfg["torch_dtype"] = "float32"
    cfg["quantization_config"] = quant_config(scheme)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    make_tiny.write_hf_tokenizer(d, v["vocab"])
    tensors, dtypes = {}, {}
    for n, a in w.items():
        if n.split(".")[-2] in FP8_MATRICES:
            codes, s, sdt, suffix = quantize(a, scheme)
            tensors[n], dtypes[n] = codes, "F8_E4M3"
            sn = n[: -len("weight")] + suffix
            tensors[sn], dtypes[sn] = s, sdt
        else:
            tensors[n], dtypes[n] = a, "F32"
    W.write_safetensors(os.path.join(d, "model.safetensors"), tensors, dtypes, {"format": "pt"})
    return d


def load_dequant(path):
    """(config, {hf name: float64}) of an FP8 checkpoint: codes decoded exactly, times the
    scale that covers each element (the formats' definition)."""
    types = {}
    config, raw = W.load_hf(path, types)
    qc = config["quantization_config"]
    out = {}
    for n, a in raw.items():
        if types[n] != "F8_E4M3":
            if not n.endswith(("weight_scale", "weight_scale_inv")):
                out[n] = a
            continue
        x = decode_e4m3(a.astype(np.uint8))
        base = n[: -len("weight")]
        if qc["quant_method"] == "fp8":
            br, bc = qc["weight_block_size"]
            s = raw[base + "weight_scale_inv"]
            s = np.repeat(np.repeat(s, br, axis=0), bc, axis=1)[: x.shape[0], : x.shape[1]]
        else:
            s = raw[base + "weight_scale"]
            s = s.reshape(-1, 1) if s.size == x.shape[0] and s.size > 1 else s.reshape(())
        out[n] = x * s
    return config, out


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for name in sys.argv[2:] or MODELS:
        print(write(sys.argv[1], name))


if __name__ == "__main__":
    main()
