#!/usr/bin/env python3
"""Writes tiny random models for every architecture variant tpd supports, each as an HF
directory (config.json + safetensors) and as a GGUF file written the way llama.cpp's
convert_hf_to_gguf.py writes it, from the same logical weights. Deterministic (fixed seed).

Usage: make_tiny.py [OUTDIR]   (default tests/data/gen/tiny; prints the model list)
From Python: ensure(outdir) -> {model name: path}, regenerating only when this script or
its helpers changed (a stamp file holds their hash), under a file lock.

Conventions (as the llama.cpp converter does):
- arch keys `<arch>.block_count`, `.context_length`, `.embedding_length`,
  `.feed_forward_length`, `.attention.head_count`, `.attention.head_count_kv`,
  `.rope.freq_base`, `.attention.layer_norm_rms_epsilon`, `.vocab_size`,
  `.rope.dimension_count` (llama), `.attention.key_length`/`.value_length` when the HF
  config has head_dim; general.file_type; a byte-level BPE vocab (tokenizer.ggml.*).
- llama: Q and K weight rows permuted for interleaved RoPE (K with n_kv_heads);
  qwen2/qwen3 unpermuted (NEOX RoPE).
- llama3 rope scaling: only the F32 tensor `rope_freqs.weight` ([head_dim/2] divisors of
  the inverse frequencies), no rope.scaling.* keys.
- tied embeddings: no output.weight tensor.
- 1-D tensors (norms, biases, rope_freqs) stay F32 in every GGUF; every 2-D tensor takes
  the file's type (q4_k_m: Q4_K, but Q6_K for output, attn_v and blk.0.ffn_down), except K-quant tensors whose rows are not a multiple of 256, which fall
  back (Q4_K -> Q4_0, Q6_K -> Q8_0), as llama-quantize falls back.
"""
import fcntl
import hashlib
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import kquants  # noqa: E402
import weights as W  # noqa: E402

SEED = 1234
QK_GAIN = 1.0  # q/k projection gain; larger makes attention sharper and the model more sensitive

# name: architecture hyperparameters. Head counts chosen so that 2 and 4 rarely divide.
VARIANTS = {
    # llama, GQA 9/3, head_dim 16, untied
    "llama_gqa": dict(arch="llama", dim=144, n_heads=9, n_kv=3, head_dim=16, ffn=384,
                      layers=2, vocab=512, tied=False, theta=10000.0, eps=1e-5),
    # llama 3 style: rope scaling llama3, tied embeddings, 7 heads / 1 kv head
    "llama3_tied": dict(arch="llama", dim=224, n_heads=7, n_kv=1, head_dim=32, ffn=320,
                        layers=3, vocab=777, tied=True, theta=500000.0, eps=1e-5,
                        rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                          high_freq_factor=4.0,
                                          original_max_position_embeddings=32)),
    # mistral-like: llama arch, 5 heads, a single KV head
    "mistral": dict(arch="llama", hf_type="mistral", dim=160, n_heads=5, n_kv=1, head_dim=32,
                    ffn=288, layers=2, vocab=400, tied=False, theta=1000000.0, eps=1e-5),
    # qwen2: QKV bias, 9 heads / 3 kv
    "qwen2": dict(arch="qwen2", dim=288, n_heads=9, n_kv=3, head_dim=32, ffn=480, layers=2,
                  vocab=600, tied=False, theta=1000000.0, eps=1e-6),
    # qwen3: per-head q/k RMSNorm, head_dim (32) != dim / n_heads, tied
    "qwen3": dict(arch="qwen3", dim=128, n_heads=7, n_kv=1, head_dim=32, ffn=256, layers=2,
                  vocab=640, tied=True, theta=1000000.0, eps=1e-6, explicit_head_dim=True),
    # K-quant friendly: every row length a multiple of 256 (dim 256, 6*128 heads, ffn 768)
    "llama_kq": dict(arch="llama", dim=256, n_heads=6, n_kv=3, head_dim=128, ffn=768,
                     layers=2, vocab=512, tied=False, theta=10000.0, eps=1e-5,
                     explicit_head_dim=True),
    # mixtures of experts (tests/py/test_moe.py): expert counts 2 and 3 do not divide
    "mixtral": dict(arch="llama", hf_type="mixtral", dim=96, n_heads=6, n_kv=2, head_dim=16,
                    ffn=64, layers=2, vocab=300, tied=False, theta=1000000.0, eps=1e-5,
                    experts=5, used=2),
    "qwen3moe": dict(arch="qwen3", hf_type="qwen3_moe", dim=64, n_heads=4, n_kv=2, head_dim=16,
                     ffn=96, moe_ffn=48, layers=2, vocab=320, tied=True, theta=1000000.0,
                     eps=1e-6, experts=7, used=3, norm_topk=True, explicit_head_dim=True),
    # dense layer 1 (mlp_only_layers) between sparse ones; HF only (llama.cpp has no such key)
    "qwen3moe_mixed": dict(arch="qwen3", hf_type="qwen3_moe", dim=64, n_heads=4, n_kv=2,
                           head_dim=16, ffn=96, moe_ffn=48, layers=3, vocab=320, tied=True,
                           theta=1000000.0, eps=1e-6, experts=4, used=2, norm_topk=True,
                           mlp_only=[1], explicit_head_dim=True),
    # K-quant friendly experts: rows of 256 (the Q4_K_M mix below)
    "mixtral_kq": dict(arch="llama", hf_type="mixtral", dim=256, n_heads=4, n_kv=2, head_dim=64,
                       ffn=256, layers=2, vocab=300, tied=False, theta=1000000.0, eps=1e-5,
                       experts=4, used=2),
    "qwen2moe": dict(arch="qwen2", hf_type="qwen2_moe", dim=64, n_heads=4, n_kv=2, head_dim=16,
                     ffn=128, moe_ffn=32, shexp_ffn=80, layers=2, vocab=300, tied=False,
                     theta=1000000.0, eps=1e-6, experts=6, used=2, norm_topk=False),
}

# model name -> (variant, form, type). form: "hf" (directory) or "gguf" (file).
MODELS = {
    "llama_gqa-hf-f32": ("llama_gqa", "hf", "f32"),           # sharded over 2 files
    "llama_gqa-gguf-f32": ("llama_gqa", "gguf", "f32"),
    "llama_gqa-hf-f16": ("llama_gqa", "hf", "f16"),
    "llama_gqa-hf-bf16": ("llama_gqa", "hf", "bf16"),
    "llama3_tied-hf-f32": ("llama3_tied", "hf", "f32"),
    "llama3_tied-gguf-f32": ("llama3_tied", "gguf", "f32"),
    "llama3_tied-gguf-q8_0": ("llama3_tied", "gguf", "q8_0"),
    "llama3_tied-gguf-q4_0": ("llama3_tied", "gguf", "q4_0"),
    "mistral-hf-f32": ("mistral", "hf", "f32"),
    "mistral-gguf-f32": ("mistral", "gguf", "f32"),
    "mistral-gguf-q4_1": ("mistral", "gguf", "q4_1"),
    "qwen2-hf-f32": ("qwen2", "hf", "f32"),
    "qwen2-gguf-f32": ("qwen2", "gguf", "f32"),
    "qwen2-gguf-q8_0": ("qwen2", "gguf", "q8_0"),
    "qwen2-gguf-f16": ("qwen2", "gguf", "f16"),
    "qwen2-hf-bf16": ("qwen2", "hf", "bf16"),
    "qwen3-hf-f32": ("qwen3", "hf", "f32"),
    "qwen3-gguf-f32": ("qwen3", "gguf", "f32"),
    "qwen3-gguf-q4_0": ("qwen3", "gguf", "q4_0"),
    "qwen3-gguf-q4_1": ("qwen3", "gguf", "q4_1"),
    "qwen3-hf-f16": ("qwen3", "hf", "f16"),
    "llama_kq-hf-f32": ("llama_kq", "hf", "f32"),
    "llama_kq-gguf-q4_k": ("llama_kq", "gguf", "q4_k"),
    "llama_kq-gguf-q6_k": ("llama_kq", "gguf", "q6_k"),
    "llama_kq-gguf-q8_0": ("llama_kq", "gguf", "q8_0"),
    "llama_kq-gguf-q4_k_m": ("llama_kq", "gguf", "q4_k_m"),  # Q4_K with some Q6_K, as Q4_K_M
    "mixtral-hf-f32": ("mixtral", "hf", "f32"),
    "mixtral-gguf-f32": ("mixtral", "gguf", "f32"),
    "mixtral-gguf-q8_0": ("mixtral", "gguf", "q8_0"),
    "qwen3moe-hf-f32": ("qwen3moe", "hf", "f32"),
    "qwen3moe-hf-bf16": ("qwen3moe", "hf", "bf16"),
    "qwen3moe-gguf-f32": ("qwen3moe", "gguf", "f32"),
    "qwen3moe_mixed-hf-f32": ("qwen3moe_mixed", "hf", "f32"),
    "mixtral_kq-hf-f32": ("mixtral_kq", "hf", "f32"),
    "mixtral_kq-gguf-q4_k_m": ("mixtral_kq", "gguf", "q4_k_m"),
    "qwen2moe-hf-f32": ("qwen2moe", "hf", "f32"),
    "qwen2moe-gguf-f32": ("qwen2moe", "gguf", "f32"),
}
MOE_MODELS = [n for n, (var, _, _) in MODELS.items() if VARIANTS[var].get("experts")]
SHARDED = {"llama_gqa-hf-f32"}

BOS_ID = 256  # "<|endoftext|>" right after the 256 byte tokens
EOS_ID = 256


def model_path(outdir, name):
    return os.path.join(outdir, name + (".gguf" if MODELS[name][1] == "gguf" else ""))


def is_quantized(name):
    return MODELS[name][2] not in ("f32",)


# ---------------------------------------------------------------- weights

def hf_config(v):
    arch = v["arch"]
    hf_type = v.get("hf_type", arch)
    arch_cls = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
                "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
                "mixtral": "MixtralForCausalLM", "qwen2_moe": "Qwen2MoeForCausalLM",
                "qwen3_moe": "Qwen3MoeForCausalLM"}[hf_type]
    c = {
        "architectures": [arch_cls],
        "model_type": hf_type,
        "hidden_size": v["dim"],
        "intermediate_size": v["ffn"],
        "num_hidden_layers": v["layers"],
        "num_attention_heads": v["n_heads"],
        "num_key_value_heads": v["n_kv"],
        "max_position_embeddings": 256,
        "rms_norm_eps": v["eps"],
        "rope_theta": v["theta"],
        "rope_scaling": v.get("rope_scaling"),
        "tie_word_embeddings": v["tied"],
        "vocab_size": v["vocab"],
        "hidden_act": "silu",
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "initializer_range": 0.02,
        "use_cache": True,
    }
    if v.get("explicit_head_dim") or v["head_dim"] * v["n_heads"] != v["dim"]:
        c["head_dim"] = v["head_dim"]
    if hf_type in ("llama", "qwen3"):
        c["attention_bias"] = False
        c["attention_dropout"] = 0.0
    if hf_type == "llama":
        c["mlp_bias"] = False
        c["pretraining_tp"] = 1
    if hf_type == "mistral":
        c["sliding_window"] = None
        c["head_dim"] = v["head_dim"]
    if hf_type in ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe"):
        c["use_sliding_window"] = False
        c["sliding_window"] = None
        c["max_window_layers"] = v["layers"]
    if hf_type == "mixtral":  # transformers' MixtralConfig keys
        c["num_local_experts"] = v["experts"]
        c["num_experts_per_tok"] = v["used"]
        c["router_aux_loss_coef"] = 0.02
        c["sliding_window"] = None
    if hf_type in ("qwen2_moe", "qwen3_moe"):  # Qwen2MoeConfig / Qwen3MoeConfig keys
        c["num_experts"] = v["experts"]
        c["num_experts_per_tok"] = v["used"]
        c["moe_intermediate_size"] = v["moe_ffn"]
        c["norm_topk_prob"] = v["norm_topk"]
        c["decoder_sparse_step"] = 1
        c["mlp_only_layers"] = v.get("mlp_only", [])
        c["router_aux_loss_coef"] = 0.001
        if hf_type == "qwen2_moe":
            c["shared_expert_intermediate_size"] = v["shexp_ffn"]
            c["qkv_bias"] = True
    return c


def make_weights(name, v):
    """HF-named float32 weights; std chosen so activations stay O(1) through the layers."""
    seed = int.from_bytes(hashlib.sha256(f"{SEED}:{name}".encode()).digest()[:4], "little")
    rng = np.random.default_rng(seed)
    dim, hd, nh, nkv, ffn = v["dim"], v["head_dim"], v["n_heads"], v["n_kv"], v["ffn"]

    def lin(out, inp, gain=1.0):
        return (rng.standard_normal((out, inp)) * gain / np.sqrt(inp)).astype(np.float32)

    def norm(n):
        return (1.0 + 0.2 * rng.standard_normal(n)).astype(np.float32)

    w = {"model.embed_tokens.weight": rng.standard_normal((v["vocab"], dim)).astype(np.float32)}
    for i in range(v["layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = norm(dim)
        w[p + "self_attn.q_proj.weight"] = lin(nh * hd, dim, QK_GAIN)
        w[p + "self_attn.k_proj.weight"] = lin(nkv * hd, dim, QK_GAIN)
        w[p + "self_attn.v_proj.weight"] = lin(nkv * hd, dim)
        w[p + "self_attn.o_proj.weight"] = lin(dim, nh * hd)
        if v["arch"] == "qwen2":
            w[p + "self_attn.q_proj.bias"] = (0.5 * rng.standard_normal(nh * hd)).astype(np.float32)
            w[p + "self_attn.k_proj.bias"] = (0.5 * rng.standard_normal(nkv * hd)).astype(np.float32)
            w[p + "self_attn.v_proj.bias"] = (0.5 * rng.standard_normal(nkv * hd)).astype(np.float32)
        if v["arch"] == "qwen3":
            w[p + "self_attn.q_norm.weight"] = norm(hd) * 1.5
            w[p + "self_attn.k_norm.weight"] = norm(hd) * 1.5
        w[p + "post_attention_layernorm.weight"] = norm(dim)
        if v.get("experts") and i not in v.get("mlp_only", []):
            eff = v.get("moe_ffn", ffn)
            w[p + "mlp.gate.weight"] = lin(v["experts"], dim, 2.0)
            for e in range(v["experts"]):
                q = p + f"mlp.experts.{e}."
                w[q + "gate_proj.weight"] = lin(eff, dim)
                w[q + "up_proj.weight"] = lin(eff, dim)
                w[q + "down_proj.weight"] = lin(dim, eff)
            if v.get("shexp_ffn"):
                w[p + "mlp.shared_expert_gate.weight"] = lin(1, dim)
                w[p + "mlp.shared_expert.gate_proj.weight"] = lin(v["shexp_ffn"], dim)
                w[p + "mlp.shared_expert.up_proj.weight"] = lin(v["shexp_ffn"], dim)
                w[p + "mlp.shared_expert.down_proj.weight"] = lin(dim, v["shexp_ffn"])
            continue
        w[p + "mlp.gate_proj.weight"] = lin(ffn, dim)
        w[p + "mlp.up_proj.weight"] = lin(ffn, dim)
        w[p + "mlp.down_proj.weight"] = lin(dim, ffn)
    w["model.norm.weight"] = norm(dim)
    if not v["tied"]:
        w["lm_head.weight"] = lin(v["vocab"], dim, 2.0)
    return w


def llama3_rope_factors(v):
    """rope_freqs.weight as llama.cpp's converter computes it (per-pair divisors)."""
    rs = v["rope_scaling"]
    hd = v["head_dim"]
    base = v["theta"]
    freqs = 1.0 / (base ** (np.arange(0, hd, 2, dtype=np.float32) / hd))
    factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old = rs["original_max_position_embeddings"]
    low_wl, high_wl = old / lo, old / hi
    out = []
    for f in freqs:
        wl = 2 * np.pi / f
        if wl < high_wl:
            out.append(1.0)
        elif wl > low_wl:
            out.append(factor)
        else:
            smooth = (old / wl - lo) / (hi - lo)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


# ---------------------------------------------------------------- tokenizer

def byte_vocab(n):
    """GPT-2 byte-level alphabet for ids 0..255, then <|endoftext|>, then filler tokens."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    cs = bs[:]
    k = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + k)
            k += 1
    byte_tok = {b: chr(c) for b, c in zip(bs, cs)}
    toks = [byte_tok[b] for b in range(256)] + ["<|endoftext|>"]
    letters = "abcdefghijklmnopqrstuvwxyz"
    pairs = [x + y for x in letters for y in letters][: n - len(toks)]
    assert len(toks) + len(pairs) == n
    toks += pairs
    types = [1] * 256 + [3] + [1] * (n - 257)
    merges = [p[0] + " " + p[1] for p in pairs]  # two-letter tokens, reachable by one merge
    return toks, types, merges


def write_hf_tokenizer(d, vocab):
    toks, _, merges = byte_vocab(vocab)
    tj = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": BOS_ID, "content": "<|endoftext|>", "single_word": False,
                          "lstrip": False, "rstrip": False, "normalized": False, "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {t: i for i, t in enumerate(toks)}, "merges": merges},
    }
    with open(os.path.join(d, "tokenizer.json"), "w") as f:
        json.dump(tj, f)
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>",
                   "add_bos_token": False, "model_max_length": 256}, f)


# ---------------------------------------------------------------- writers

ST_TYPE = {"f32": "F32", "f16": "F16", "bf16": "BF16"}


def write_hf(d, v, w, typ, sharded):
    os.makedirs(d, exist_ok=True)
    for fn in os.listdir(d):
        os.remove(os.path.join(d, fn))
    cfg = hf_config(v)
    cfg["torch_dtype"] = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}[typ]
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    write_hf_tokenizer(d, v["vocab"])
    dt = ST_TYPE[typ]
    if v.get("hf_type") == "mixtral":  # Mixtral checkpoints spell the experts their own way
        w = {W.qwen_to_mixtral_name(k): a for k, a in w.items()}
    names = sorted(w)
    if not sharded:
        W.write_safetensors(os.path.join(d, "model.safetensors"), w, {n: dt for n in names},
                            {"format": "pt"})
        return
    # two shards: layer 0 + embeddings in the first, the rest in the second
    first = [n for n in names if n.startswith("model.layers.0.") or n == "model.embed_tokens.weight"]
    second = [n for n in names if n not in first]
    files = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    wmap = {}
    total = 0
    for fn, part in zip(files, (first, second)):
        W.write_safetensors(os.path.join(d, fn), {n: w[n] for n in part}, {n: dt for n in part},
                            {"format": "pt"})
        for n in part:
            wmap[n] = fn
            total += w[n].size * (4 if dt == "F32" else 2)
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(wmap.items()))}, f, indent=2)


def _gguf_types():
    import gguf
    Q = gguf.GGMLQuantizationType
    return {"f32": Q.F32, "f16": Q.F16, "bf16": Q.BF16, "q8_0": Q.Q8_0, "q4_0": Q.Q4_0,
            "q4_1": Q.Q4_1, "q4_k": Q.Q4_K, "q6_k": Q.Q6_K, "q4_k_m": Q.Q4_K}


def _file_type(typ):
    import gguf
    F = gguf.LlamaFileType
    return {"f32": F.ALL_F32, "f16": F.MOSTLY_F16, "bf16": F.MOSTLY_BF16, "q8_0": F.MOSTLY_Q8_0,
            "q4_0": F.MOSTLY_Q4_0, "q4_1": F.MOSTLY_Q4_1, "q4_k": F.MOSTLY_Q4_K_M,
            "q6_k": F.MOSTLY_Q6_K, "q4_k_m": F.MOSTLY_Q4_K_M}[typ]


def quantize(a, qt):
    """(array to hand to GGUFWriter.add_tensor, raw_dtype)."""
    import gguf
    Q = gguf.GGMLQuantizationType
    if qt == Q.F32:
        return a.astype(np.float32), None
    if qt == Q.F16:
        return a.astype(np.float16), None
    if qt in (Q.Q4_K, Q.Q6_K):  # row by row; a 3-D expert tensor as its rows
        f = kquants.quantize_q4_k if qt == Q.Q4_K else kquants.quantize_q6_k
        q = f(a.reshape(-1, a.shape[-1]))
        return q.reshape(*a.shape[:-1], q.shape[-1]), qt
    return gguf.quants.quantize(a.astype(np.float32), qt), qt


def write_gguf(path, v, w, typ):
    import gguf
    Q = gguf.GGMLQuantizationType
    qt = _gguf_types()[typ]
    arch = v["arch"]
    wr = gguf.GGUFWriter(path, {"qwen2_moe": "qwen2moe", "qwen3_moe": "qwen3moe"}.get(
        v.get("hf_type"), arch))
    wr.add_name("tpd tiny " + arch)
    wr.add_block_count(v["layers"])
    wr.add_context_length(256)
    wr.add_embedding_length(v["dim"])
    wr.add_feed_forward_length(v["ffn"])
    wr.add_head_count(v["n_heads"])
    wr.add_head_count_kv(v["n_kv"])
    wr.add_rope_freq_base(v["theta"])
    wr.add_layer_norm_rms_eps(v["eps"])
    cfg = hf_config(v)
    if "head_dim" in cfg:
        wr.add_key_length(v["head_dim"])
        wr.add_value_length(v["head_dim"])
    wr.add_file_type(_file_type(typ))
    if arch == "llama":
        wr.add_vocab_size(v["vocab"])
        wr.add_rope_dimension_count(v["head_dim"])
    if v.get("experts"):  # as convert_hf_to_gguf.py writes Mixtral / Qwen2-MoE / Qwen3-MoE
        wr.add_expert_count(v["experts"])
        wr.add_expert_used_count(v["used"])
        if "moe_ffn" in v:
            wr.add_expert_feed_forward_length(v["moe_ffn"])
        if v.get("shexp_ffn"):
            wr.add_expert_shared_feed_forward_length(v["shexp_ffn"])
    toks, types, merges = byte_vocab(v["vocab"])
    wr.add_tokenizer_model("gpt2")
    wr.add_tokenizer_pre("default")
    wr.add_token_list(toks)
    wr.add_token_types(types)
    wr.add_token_merges(merges)
    wr.add_bos_token_id(BOS_ID)
    wr.add_eos_token_id(EOS_ID)
    wr.add_add_bos_token(False)
    wr.add_quantization_version(gguf.GGML_QUANT_VERSION)

    tensors = []
    if arch == "llama" and v.get("rope_scaling"):
        tensors.append(("rope_freqs.weight", llama3_rope_factors(v)))
    w = dict(w)
    for i in range(v["layers"]):  # experts stacked into 3-D tensors, [experts, rows, cols]
        p = f"model.layers.{i}.mlp.experts."
        for g, proj in W.EXPS_MAP.items():
            names = [p + f"{e}.{proj}.weight" for e in range(v.get("experts", 0))]
            if names and names[0] in w:
                tensors.append((f"blk.{i}.{g}", np.stack([w.pop(n) for n in names])))
    for hf in w:
        a = w[hf]
        if hf.endswith("shared_expert_gate.weight"):
            a = a.reshape(-1)  # llama.cpp's ffn_gate_inp_shexp is a vector
        if arch == "llama" and hf.endswith("q_proj.weight"):
            a = W.permute_qk(a, v["n_heads"])
        elif arch == "llama" and hf.endswith("k_proj.weight"):
            a = W.permute_qk(a, v["n_kv"])
        tensors.append((W.hf_to_gguf_name(hf), a))
    order = {"token_embd.weight": 0, "rope_freqs.weight": 1, "output_norm.weight": 3, "output.weight": 4}
    tensors.sort(key=lambda t: (order.get(t[0], 2), int(t[0].split(".")[1]) if t[0].startswith("blk.") else 0))
    for name, a in tensors:
        t = qt
        if typ == "q4_k_m" and (name == "output.weight" or name.endswith("attn_v.weight")
                                or name in ("blk.0.ffn_down.weight", "blk.0.ffn_down_exps.weight")):
            t = Q.Q6_K  # llama-quantize's Q4_K_M keeps these more precise
        if a.ndim == 1 or name.endswith("ffn_gate_inp.weight"):
            t = Q.F32  # llama-quantize keeps the router in F32 too
        elif t in (Q.Q4_K, Q.Q6_K) and a.shape[-1] % 256 != 0:
            t = Q.Q4_0 if t == Q.Q4_K else Q.Q8_0
        data, raw = quantize(a, t)
        wr.add_tensor(name, data, raw_dtype=raw)
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()


# ---------------------------------------------------------------- driver

def _source_hash():
    h = hashlib.sha256()
    for fn in ("make_tiny.py", "kquants.py", "weights.py"):
        with open(os.path.join(HERE, fn), "rb") as f:
            h.update(f.read())
    import gguf  # the writer's version matters too
    h.update(getattr(gguf, "__version__", "").encode())
    return h.hexdigest()


def generate(outdir):
    os.makedirs(outdir, exist_ok=True)
    cache = {}
    for name, (var, form, typ) in MODELS.items():
        v = VARIANTS[var]
        if var not in cache:
            cache[var] = make_weights(var, v)
        w = cache[var]
        path = model_path(outdir, name)
        if form == "hf":
            write_hf(path, v, w, typ, name in SHARDED)
        else:
            write_gguf(path, v, w, typ)
    return {n: model_path(outdir, n) for n in MODELS}


def default_outdir():
    return os.path.join(os.path.dirname(HERE), "data", "gen", "tiny")


def ensure(outdir=None):
    """Generates the models once (per source hash); safe against concurrent callers."""
    outdir = outdir or default_outdir()
    os.makedirs(outdir, exist_ok=True)
    stamp = os.path.join(outdir, ".stamp")
    want = _source_hash()
    with open(os.path.join(outdir, ".lock"), "w") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        have = open(stamp).read() if os.path.exists(stamp) else ""
        if have != want or not all(os.path.exists(model_path(outdir, n)) for n in MODELS):
            if os.path.exists(stamp):
                os.remove(stamp)
            generate(outdir)
            with open(stamp, "w") as f:
                f.write(want)
    return {n: model_path(outdir, n) for n in MODELS}


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else default_outdir()
    paths = ensure(outdir)
    for n, p in paths.items():
        print(f"{n}\t{p}")


if __name__ == "__main__":
    main()
