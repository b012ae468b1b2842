#!/usr/bin/env python3
"""Tiny random INT4 weight-only (W4A16) checkpoints in the three layouts Hugging Face INT4
releases use, packed in numpy after each format's published packing, and the exactly
dequantized weights they stand for (the float64 reference runs on those).

Formats (config.json quantization_config), W = [out, in] the HF weight, q in 0..15:
- ct: compressed-tensors "pack-quantized" (compressed_tensors pack_to_int32): weight_packed
  int32 [out, ceil(in/8)], word j of a row holding columns 8j..8j+7 in bits 4i..4i+3 as
  the signed value + 8; weight_scale [out, groups] ([out, 1] per channel); asymmetric:
  weight_zero_point int32 [ceil(out/8), groups], packed along the rows the same way
  (signed zero point + 8); weight_shape [out, in]. Value (q_signed - zp) * scale.
- gptq: AutoGPTQ / GPTQModel: qweight int32 [in/8, out], word j of a column holding input
  rows 8j..8j+7 in bits 4i; qzeros int32 [groups, out/8] packed along the columns; scales
  F16 [groups, out]; g_idx int32 [in] (group of each input column; act-order permutes
  it). v1 (checkpoint_format "gptq") stores zero - 1. Value (q - zero) * scale.
  desc_act (GPTQ's act-order as its writers leave it): the columns quantized in the order of
  a permutation perm (by the Hessian's diagonal), each group_size of them a group, then put
  back in place: g_idx[perm[j]] = j // group_size, a group's columns scattered over the
  whole input; q_proj, k_proj and v_proj (and gate_proj and up_proj) see the same input and
  so get the same perm, unless the model says otherwise (shared_perm False).
- awq: AutoAWQ GEMM: qweight int32 [in, out/8] with output columns 8c + (0, 2, 4, 6, 1, 3,
  5, 7) in nibbles 0..7 of word c; qzeros [groups, out/8] in the same order; scales F16
  [groups, out]. Value (q - zero) * scale.

Usage: make_int4.py OUTDIR [MODEL...]   (default: every model of MODELS)
       make_int4.py IN.gguf OUTDIR [ct|gptq|awq] [GROUP]   (SmolLM2 from its GGUF: convert)
"""
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import make_tiny  # noqa: E402
import weights as W  # noqa: E402

MATRICES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)

# name -> (make_tiny variant, format, options). group 0: per output channel. Group sizes 64
# and 128 need every input width a multiple of them (llama_kq: 256, 768, o_proj 768).
MODELS = {
    "llama3_tied-ct_g32_sym": ("llama3_tied", "ct", dict(group=32, sym=True,
                                                         scale="BF16", shape="I64")),
    "llama_kq-ct_g128_asym": ("llama_kq", "ct", dict(group=128, sym=False, scale="F32",
                                                     shape="I32")),
    "qwen3-ct_channel_asym": ("qwen3", "ct", dict(group=0, sym=False, scale="BF16",
                                                  shape="I64")),
    "llama_kq-gptq_g64_sym": ("llama_kq", "gptq", dict(group=64, sym=True, v1=True)),
    "llama3_tied-gptq_g32_actorder": ("llama3_tied", "gptq", dict(group=32, sym=False,
                                                                  v1=True, actorder=True)),
    "llama3_tied-gptq_g32_desc_sym": ("llama3_tied", "gptq", dict(group=32, sym=True, v1=True,
                                                                  desc_act=True)),
    "llama_kq-gptq_g128_desc_asym": ("llama_kq", "gptq", dict(group=128, sym=False, v1=True,
                                                              desc_act=True, shared_perm=False)),
    "qwen2-gptq_v2_channel": ("qwen2", "gptq", dict(group=0, sym=False, v1=False)),
    "llama_kq-awq_g128": ("llama_kq", "awq", dict(group=128)),
    "mistral-awq_g32": ("mistral", "awq", dict(group=32)),
}


def quant_config(fmt, o):
    g = o["group"]
    if fmt == "ct":
        w = {"num_bits": 4, "type": "int", "symmetric": o["sym"], "dynamic": False,
             "strategy": "group" if g else "channel", "group_size": g or None,
             "actorder": None, "observer": "minmax"}
        return {"quant_method": "compressed-tensors", "format": "pack-quantized",
                "quantization_status": "compressed", "kv_cache_scheme": None,
                "ignore": ["lm_head"], "config_groups": {"group_0": {
                    "targets": ["Linear"], "weights": w, "input_activations": None,
                    "output_activations": None}}}
    if fmt == "gptq":
        return {"quant_method": "gptq", "bits": 4, "group_size": g or -1,
                "desc_act": bool(o.get("actorder") or o.get("desc_act")), "sym": o["sym"],
                "true_sequential": True,
                "checkpoint_format": "gptq" if o["v1"] else "gptq_v2"}
    return {"quant_method": "awq", "bits": 4, "group_size": g, "zero_point": True,
            "version": "gemm", "modules_to_not_convert": None}


def _round_scale(s, dt):
    s = np.asarray(s, np.float32)
    if dt == "F16":
        return s.astype(np.float16).astype(np.float32)
    if dt == "BF16":
        return W.bf16_to_f32(W.f32_to_bf16(s))
    return s


def quantize(w, gidx, ng, sym, sdt, zmin=0):
    """Codes q [out, in] (0..15), zeros z [out, ng] (integers), scales s [out, ng] (as
    stored) of w [out, in] with column k in group gidx[k]: min-max per (row, group)."""
    w = np.asarray(w, np.float32)
    lo = np.stack([np.minimum(w[:, gidx == g].min(axis=1), 0) for g in range(ng)], axis=1)
    hi = np.stack([np.maximum(w[:, gidx == g].max(axis=1), 0) for g in range(ng)], axis=1)
    if sym:
        s = _round_scale(np.maximum(np.maximum(-lo, hi), 1e-6) / 7.0, sdt)
        z = np.full(s.shape, 8, np.int64)
    else:
        s = _round_scale(np.maximum(hi - lo, 1e-6) / 15.0, sdt)
        z = np.clip(np.round(-lo / s), zmin, 15).astype(np.int64)
    q = np.clip(np.round(w / s[:, gidx]) + z[:, gidx], 0, 15).astype(np.int64)
    return q, z, s


def pack_rows(v):
    """[n, m] nibbles -> int32 [n, ceil(m / 8)]: element 8j + i in bits 4i of word j."""
    n, m = v.shape
    v = np.pad(np.asarray(v, np.uint32), ((0, 0), (0, -m % 8)))
    out = np.zeros((n, v.shape[1] // 8), np.uint32)
    for i in range(8):
        out |= (v[:, i::8] & 15) << np.uint32(4 * i)
    return out.view(np.int32)


def pack_awq(v):
    """[n, m] nibbles -> int32 [n, m / 8] in AWQ's GEMM order."""
    n, m = v.shape
    out = np.zeros((n, m // 8), np.uint32)
    for i, c in enumerate(AWQ_ORDER):
        out |= (np.asarray(v[:, c::8], np.uint32) & 15) << np.uint32(4 * i)
    return out.view(np.int32)


# the matrices that read the same input (GPTQ's desc_act gives them the same perm)
SAME_INPUT = {"q_proj": "qkv", "k_proj": "qkv", "v_proj": "qkv", "gate_proj": "gate_up",
              "up_proj": "gate_up"}


def pack_matrix(name, w, fmt, o, rng, perm=None):
    """({HF name: array}, {HF name: dtype}, dequantized float64 weight) of one matrix; perm:
    desc_act's column order (default: a random one)."""
    out, inp = w.shape
    g = o["group"] or inp
    ng = -(-inp // g)
    gidx = np.arange(inp) // g
    if o.get("actorder"):  # groups in a shuffled order, each a run of 32 columns
        runs = rng.permutation(inp // 32)
        gidx = (runs[np.arange(inp) // 32] * 32) // g
    if o.get("desc_act"):  # group j // g holds column perm[j]: scattered over the input
        perm = rng.permutation(inp) if perm is None else perm
        gidx = np.empty(inp, np.int64)
        gidx[perm] = np.arange(inp) // g
    sdt = o.get("scale", "F16")
    sym = o.get("sym", False)
    q, z, s = quantize(w, gidx, ng, sym, sdt, zmin=1 if fmt == "gptq" and o.get("v1") else 0)
    deq = (q - z[:, gidx]).astype(np.float64) * s[:, gidx].astype(np.float64)
    base = name[: -len("weight")]
    t, d = {}, {}
    if fmt == "ct":
        t[base + "weight_packed"], d[base + "weight_packed"] = pack_rows(q), "I32"
        t[base + "weight_scale"], d[base + "weight_scale"] = s, sdt
        t[base + "weight_shape"] = np.array([out, inp], np.int64)
        d[base + "weight_shape"] = o["shape"]
        if not sym:
            t[base + "weight_zero_point"] = pack_rows(z.T).T.copy()
            d[base + "weight_zero_point"] = "I32"
    else:
        zs = z - 1 if fmt == "gptq" and o.get("v1") else z  # GPTQ v1 stores zero - 1
        if fmt == "gptq":
            t[base + "qweight"] = pack_rows(q).T.copy()  # rows of W packed 8 a word
            t[base + "qzeros"] = pack_rows(zs.T)
            t[base + "g_idx"], d[base + "g_idx"] = gidx.astype(np.int32), "I32"
        else:
            t[base + "qweight"] = pack_awq(q.T)
            t[base + "qzeros"] = pack_awq(zs.T)
        d[base + "qweight"] = d[base + "qzeros"] = "I32"
        t[base + "scales"], d[base + "scales"] = s.T.copy(), "F16"
    return t, d, deq


def build(name, spec=None):
    """(config, tensors, dtypes, dequantized {HF name: float64}) of MODELS[name]."""
    var, fmt, o = spec or MODELS[name]
    v = make_tiny.VARIANTS[var]
    w = make_tiny.make_weights(var, v)
    cfg = make_tiny.hf_config(v)
    cfg["torch_dtype"] = "float16"
    cfg["quantization_config"] = quant_config(fmt, o)
    rng = np.random.default_rng(29)
    tensors, dtypes, deq, perms = {}, {}, {}, {}
    for n, a in w.items():
        if n.endswith(".weight") and n.split(".")[-2] in MATRICES:
            perm = None
            kind = SAME_INPUT.get(n.split(".")[-2])
            if o.get("desc_act") and o.get("shared_perm", True) and kind:
                key = n.split(".")[2], kind  # (layer, input)
                if key not in perms:
                    perms[key] = rng.permutation(a.shape[1])
                perm = perms[key]
            t, d, x = pack_matrix(n, a, fmt, o, rng, perm)
            tensors.update(t)
            dtypes.update(d)
            deq[n] = x
        else:
            tensors[n], dtypes[n], deq[n] = a, "F32", np.asarray(a, np.float64)
    return cfg, tensors, dtypes, deq


def write(outdir, name, spec=None):
    """Writes the checkpoint into outdir/name; returns (path, config, dequantized)."""
    cfg, tensors, dtypes, deq = build(name, spec)
    d = os.path.join(outdir, name)
    os.makedirs(d, exist_ok=True)
    for fn in os.listdir(d):
        os.remove(os.path.join(d, fn))
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    make_tiny.write_hf_tokenizer(d, make_tiny.VARIANTS[(spec or MODELS[name])[0]]["vocab"])
    W.write_safetensors(os.path.join(d, "model.safetensors"), tensors, dtypes, {"format": "pt"})
    return d, cfg, deq


def convert(src, out, fmt="gptq", group=128):
    """SmolLM2 (or another Llama GGUF) as an INT4 checkpoint: the GGUF dequantized
    (weights.load_gguf, Q/K in HF order), the attention and MLP matrices quantized and
    packed as fmt (asymmetric, F16 scales; GPTQ v1), the rest BF16; fmt "gptq-desc": GPTQ
    with desc_act's scattered groups (one random column order per layer and input, as GPTQ
    gives the matrices that share an input). For greedy-text checks and benchmarks; tpd
    reads the tokenizer from the GGUF (--tokenizer)."""
    config, w, _ = W.load_gguf(src)
    o = dict(group=group, sym=False, v1=True, scale="F16", shape="I64")
    if fmt == "gptq-desc":
        fmt, o["desc_act"] = "gptq", True
    config = dict(config, architectures=["LlamaForCausalLM"], model_type="llama",
                  torch_dtype="bfloat16", quantization_config=quant_config(fmt, o))
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    tensors, dtypes = {}, {}
    rng = np.random.default_rng(29)
    perms = {}
    for n, a in w.items():
        a = np.asarray(a, np.float32)
        if n.endswith(".weight") and n.split(".")[-2] in MATRICES:
            kind = SAME_INPUT.get(n.split(".")[-2])
            perm = None
            if o.get("desc_act") and kind:
                perm = perms.setdefault((n.split(".")[2], kind), rng.permutation(a.shape[1]))
            t, d, _ = pack_matrix(n, a, fmt, o, rng, perm)
            tensors.update(t)
            dtypes.update(d)
        else:
            tensors[n], dtypes[n] = a, "BF16"
    W.write_safetensors(os.path.join(out, "model.safetensors"), tensors, dtypes, {"format": "pt"})
    return out


def main():
    if len(sys.argv) >= 3 and sys.argv[1].endswith(".gguf"):
        print(convert(sys.argv[1], sys.argv[2], *sys.argv[3:4],
                      *[int(g) for g in sys.argv[4:5]]))
        return
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for name in sys.argv[2:] or MODELS:
        print(write(sys.argv[1], name)[0])


if __name__ == "__main__":
    main()
