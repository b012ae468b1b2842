"""Reference forward pass in numpy float64, written from the math of the Hugging Face
transformers Llama / Qwen2 / Qwen3 models (no torch). Used only by the tests, never by tpd.

Weights are a dict of HF-named numpy arrays ([out, in] for linear layers):
  model.embed_tokens.weight, model.norm.weight, lm_head.weight (absent when tied),
  model.layers.N.{input_layernorm,post_attention_layernorm}.weight,
  model.layers.N.self_attn.{q,k,v,o}_proj.weight, .{q,k,v}_proj.bias (Qwen2),
  model.layers.N.self_attn.{q,k}_norm.weight (Qwen3),
  model.layers.N.mlp.{gate,up,down}_proj.weight.
The config is an HF config.json dict. RoPE is the rotate_half (NEOX) form HF uses.
"""
import math

import numpy as np


def _cfg(config, key, default=None):
    v = config.get(key)
    return default if v is None else v


def rope_inv_freq(config, freq_factors=None):
    """Per-pair inverse frequencies of RoPE, HF semantics (llama3 scaling included).
    freq_factors, if given, are llama.cpp's rope_freqs tensor: the divisors of inv_freq."""
    n_heads = config["num_attention_heads"]
    head_dim = _cfg(config, "head_dim", config["hidden_size"] // n_heads)
    theta = float(_cfg(config, "rope_theta", 10000.0))
    inv_freq = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    if freq_factors is not None:
        return inv_freq / np.asarray(freq_factors, dtype=np.float64)
    rs = config.get("rope_scaling")
    if rs:
        kind = rs.get("rope_type", rs.get("type"))
        if kind != "llama3":
            raise NotImplementedError(f"rope scaling {kind!r}")
        factor = float(rs["factor"])
        lo = float(rs["low_freq_factor"])
        hi = float(rs["high_freq_factor"])
        old_ctx = float(rs["original_max_position_embeddings"])
        low_wavelen = old_ctx / lo
        high_wavelen = old_ctx / hi
        wavelen = 2 * math.pi / inv_freq
        scaled = np.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
        smooth = (old_ctx / wavelen - lo) / (hi - lo)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
        inv_freq = np.where(medium, smoothed, scaled)
    return inv_freq


def rms_norm(x, w, eps):
    x = np.asarray(x, dtype=np.float64)
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def apply_rope(x, positions, inv_freq):
    """x: [T, H, D]; rotate_half pairing (x[i], x[i + D/2])."""
    ang = np.outer(positions.astype(np.float64), inv_freq)  # [T, D/2]
    cos = np.concatenate([np.cos(ang), np.cos(ang)], axis=-1)[:, None, :]
    sin = np.concatenate([np.sin(ang), np.sin(ang)], axis=-1)[:, None, :]
    half = x.shape[-1] // 2
    rot = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rot * sin


def silu(x):
    return x / (1.0 + np.exp(-x))


def _round_half_even(x):
    return np.rint(x)


def _round_half_away(x):
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def _q8_0(x32):
    """Q8_0/Q8_1 rounding of [T, n] float32: (values d*q [T, n], d in f32 [T, n/32],
    d in f16 [T, n/32], sum of q [T, n/32])."""
    T, n = x32.shape
    b = x32.reshape(T, n // 32, 32)
    amax = np.abs(b).max(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        iscale = np.where(amax > 0, np.float32(127.0) / amax, np.float32(0.0)).astype(np.float32)
    q = _round_half_away(b * iscale[..., None])
    d32 = (amax / np.float32(127.0)).astype(np.float32)
    d16 = d32.astype(np.float16).astype(np.float64)
    return (q * d16[..., None]).reshape(T, n), d32, d16, q.sum(axis=-1)


def q8_1_sum_correction(x):
    """For Q4_1 weights llama.cpp adds min_w * s_x per block, with s_x = fp16(d_x * sum q_x)
    (Q8_1's precomputed sum) rather than the exact fp16(d_x) * sum q_x: returns that
    difference [T, n/32], to be multiplied by the weights' block minimums."""
    _, d32, d16, qsum = _q8_0(np.asarray(x, dtype=np.float32))
    s = (d32 * qsum.astype(np.float32)).astype(np.float16).astype(np.float64)
    return s - d16 * qsum


def quantize_act(x, kind):
    """Rounds activations x [T, n] the way llama.cpp's CPU backend does before a dot
    product with weights of a given type (its vec_dot_type), returning the values the
    integer dot product effectively uses:
      'q8_0' (for Q4_0, Q8_0 weights): blocks of 32, d = fp16(amax/127),
             q = round(x*127/amax) (ties away from zero, as ggml's reference code);
      'q8_1' (for Q4_1 weights): the same values (see q8_1_sum_correction for the rest);
      'q8_K' (for K-quants): blocks of 256, scale from the signed max, d kept in f32;
      'f16', 'bf16': the activations rounded to that type;
      'e4m3_token': E4M3 with one scale per token (the CUDA backend's FP8 W8A8 prefill);
      None: unchanged."""
    if kind is None:
        return x
    x32 = np.asarray(x, dtype=np.float32)
    if kind == "f16":
        return x32.astype(np.float16).astype(np.float64)
    if kind == "bf16":
        from weights import bf16_to_f32, f32_to_bf16
        return bf16_to_f32(f32_to_bf16(x32)).astype(np.float64)
    T, n = x32.shape
    if kind in ("q8_0", "q8_1"):
        return _q8_0(x32)[0]
    if kind == "q8_K":
        b = x32.reshape(T, n // 256, 256)
        idx = np.abs(b).argmax(axis=-1)[..., None]
        mx = np.take_along_axis(b, idx, axis=-1)
        with np.errstate(divide="ignore", invalid="ignore"):
            iscale = np.where(mx != 0, np.float32(-127.0) / mx, np.float32(0.0)).astype(np.float32)
        q = np.minimum(_round_half_even(b * iscale), 127.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            d = np.where(iscale != 0, np.float32(1.0) / iscale, np.float32(0.0)).astype(np.float32)
        return (q * d.astype(np.float64)).reshape(T, n)
    if kind == "e4m3_token":
        return _e4m3_token(x32)
    raise ValueError(kind)


def _e4m3_token(x32):
    """The CUDA backend's W8A8 activations (kernels/cuda/w8a8_dev.cuh): per token (row)
    s = max(amax, 2^-100) / 448 in f32, codes of the f32 x * (448 / max(amax, 2^-100)) in E4M3
    (round to nearest, ties to the even code, saturating at 448), values code * s."""
    amax = np.maximum(np.abs(x32).max(axis=1, keepdims=True), np.float32(2.0 ** -100))
    inv = (np.float32(448.0) / amax).astype(np.float32)
    s = (amax / np.float32(448.0)).astype(np.float64)
    v = (x32 * inv).astype(np.float32).astype(np.float64)
    a = np.minimum(np.abs(v), 448.0)
    quantum = 2.0 ** (np.floor(np.log2(np.maximum(a, 2.0 ** -6))) - 3)  # 2^-9 below 2^-6
    q = np.minimum(np.rint(a / quantum) * quantum, 448.0)  # rint: ties to even codes
    return np.where(np.signbit(v), -q, q) * s


# GGML weight type name -> the activation rounding llama.cpp's CPU dot product implies
ACT_QUANT_FOR_TYPE = {
    "F32": None, "F16": "f16", "BF16": "bf16",
    "Q8_0": "q8_0", "Q4_0": "q8_0", "Q4_1": "q8_1", "Q5_0": "q8_0", "Q5_1": "q8_1",
    "Q4_K": "q8_K", "Q5_K": "q8_K", "Q6_K": "q8_K", "Q2_K": "q8_K", "Q3_K": "q8_K",
}


def moe_layer(config, layer):
    """Layer `layer`'s MLP is a mixture of experts (Mixtral, Qwen2-MoE, Qwen3-MoE)."""
    if not (_cfg(config, "num_experts") or _cfg(config, "num_local_experts")):
        return False
    step = _cfg(config, "decoder_sparse_step", 1)
    return layer not in _cfg(config, "mlp_only_layers", []) and (layer + 1) % step == 0


def route(logits, k, norm):
    """Each row's k experts (largest logits first, ties to the lower id) and weights: the
    softmax over all experts, renormalized over the chosen ones when norm."""
    ids, ws = [], []
    for row in logits:
        order = sorted(range(len(row)), key=lambda e: (-row[e], e))[:k]
        p = np.exp(row - row.max())
        p /= p.sum()
        w = p[order]
        ids.append(order)
        ws.append(w / w.sum() if norm else w)
    return ids, ws


def forward(weights, config, tokens, freq_factors=None, act_quant=None, block_mins=None,
            tp=1):
    """Logits [len(tokens), vocab] (float64) for one sequence starting at position 0.
    act_quant: optional {hf weight name: kind} (see quantize_act) to round each matmul's
    input as llama.cpp-style quantized dot products do; None means exact float64.
    block_mins: {hf weight name: [rows, cols/32] minimums} of Q4_1 weights, used with
    kind 'q8_1' to reproduce llama.cpp's Q4_1 x Q8_1 dot product.
    tp: with act_quant, the attention output projection's input is rounded the way a
    row-parallel split over tp ranks rounds it: each rank quantizes only its own heads'
    columns (contiguous near-even head ranges, rank r from n_heads*r//tp), the other
    columns being zero, so a quantization block straddling two ranks is rounded twice
    with each part's own scale. Exact when rank boundaries fall on block boundaries."""
    aq = act_quant or {}
    mins = block_mins or {}
    w = {k: np.asarray(v, dtype=np.float64) for k, v in weights.items()}

    def mm(x, name, col_ranges=None):
        kind = aq.get(name)
        if kind is None or not col_ranges:
            col_ranges = [(0, x.shape[1])]
        y = 0.0
        for c0, c1 in col_ranges:
            xr = np.zeros_like(x)
            xr[:, c0:c1] = x[:, c0:c1]
            y = y + quantize_act(xr, kind) @ w[name].T
            if kind == "q8_1" and name in mins:
                y = y + q8_1_sum_correction(xr) @ mins[name].T
        return y

    tokens = np.asarray(tokens, dtype=np.int64)
    T = len(tokens)
    n_layers = config["num_hidden_layers"]
    n_heads = config["num_attention_heads"]
    n_kv = _cfg(config, "num_key_value_heads", n_heads)
    head_dim = _cfg(config, "head_dim", config["hidden_size"] // n_heads)
    eps = float(_cfg(config, "rms_norm_eps", 1e-6))
    group = n_heads // n_kv
    assert n_heads % n_kv == 0
    head_ranges = [((n_heads * r // tp) * head_dim, (n_heads * (r + 1) // tp) * head_dim)
                   for r in range(tp)]
    inv_freq = rope_inv_freq(config, freq_factors)
    pos = np.arange(T)
    causal = np.triu(np.full((T, T), -np.inf), k=1)

    h = w["model.embed_tokens.weight"][tokens]
    for layer in range(n_layers):
        p = f"model.layers.{layer}."
        x = rms_norm(h, w[p + "input_layernorm.weight"], eps)
        qkv = []
        for n in ("q", "k", "v"):
            y = mm(x, p + f"self_attn.{n}_proj.weight")
            if p + f"self_attn.{n}_proj.bias" in w:
                y = y + w[p + f"self_attn.{n}_proj.bias"]
            qkv.append(y)
        q = qkv[0].reshape(T, n_heads, head_dim)
        k = qkv[1].reshape(T, n_kv, head_dim)
        v = qkv[2].reshape(T, n_kv, head_dim)
        if p + "self_attn.q_norm.weight" in w:  # Qwen3: per-head RMSNorm before RoPE
            q = rms_norm(q, w[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, w[p + "self_attn.k_norm.weight"], eps)
        q = apply_rope(q, pos, inv_freq)
        k = apply_rope(k, pos, inv_freq)
        out = np.empty((T, n_heads, head_dim))
        for hq in range(n_heads):
            kh = hq // group
            s = q[:, hq, :] @ k[:, kh, :].T / math.sqrt(head_dim) + causal
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            s /= s.sum(axis=-1, keepdims=True)
            out[:, hq, :] = s @ v[:, kh, :]
        h = h + mm(out.reshape(T, n_heads * head_dim), p + "self_attn.o_proj.weight", head_ranges)
        x = rms_norm(h, w[p + "post_attention_layernorm.weight"], eps)
        if moe_layer(config, layer):
            h = h + moe_mlp(x, p, config, mm)
            continue
        g = mm(x, p + "mlp.gate_proj.weight")
        u = mm(x, p + "mlp.up_proj.weight")
        h = h + mm(silu(g) * u, p + "mlp.down_proj.weight")
    h = rms_norm(h, w["model.norm.weight"], eps)
    head = "lm_head.weight" if "lm_head.weight" in w else "model.embed_tokens.weight"
    return mm(h, head)


def moe_mlp(x, p, config, mm):
    """The mixture-of-experts MLP of layer prefix p (HF transformers' Mixtral / Qwen2-MoE /
    Qwen3-MoE sparse blocks): router softmax, top-k, SwiGLU experts, and Qwen2-MoE's shared
    expert scaled by sigmoid of its gate."""
    k = config["num_experts_per_tok"]
    norm = bool(_cfg(config, "norm_topk_prob", "num_local_experts" in config))
    ids, ws = route(mm(x, p + "mlp.gate.weight"), k, norm)
    out = np.zeros_like(x)
    for t in range(x.shape[0]):
        xt = x[t:t + 1]
        for e, we in zip(ids[t], ws[t]):
            q = p + f"mlp.experts.{e}."
            a = silu(mm(xt, q + "gate_proj.weight")) * mm(xt, q + "up_proj.weight")
            out[t] += we * mm(a, q + "down_proj.weight")[0]
    if _cfg(config, "shared_expert_intermediate_size", 0):
        q = p + "mlp.shared_expert."
        a = silu(mm(x, q + "gate_proj.weight")) * mm(x, q + "up_proj.weight")
        gate = 1.0 / (1.0 + np.exp(-mm(x, p + "mlp.shared_expert_gate.weight")))
        out = out + gate * mm(a, q + "down_proj.weight")
    return out
