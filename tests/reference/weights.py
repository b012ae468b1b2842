"""Loads model weights for the numpy reference, independently of tpd: HF directories
(config.json + safetensors, sharded or not, F32/F16/BF16) and GGUF files (any type the
`gguf` package can dequantize), returned as HF-named float64 arrays plus an HF-style config.
GGUF llama Q/K rows are un-permuted back to HF order (the converter permutes them for
llama.cpp's interleaved RoPE)."""
import collections
import json
import os
import struct

import numpy as np

# GGUF name (without "blk.N.") -> HF name (without "model.layers.N.")
LAYER_MAP = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
    # mixture of experts (Qwen-MoE names; Mixtral's are normalized to these on load)
    "ffn_gate_inp.weight": "mlp.gate.weight",
    "ffn_gate_inp_shexp.weight": "mlp.shared_expert_gate.weight",
    "ffn_gate_shexp.weight": "mlp.shared_expert.gate_proj.weight",
    "ffn_up_shexp.weight": "mlp.shared_expert.up_proj.weight",
    "ffn_down_shexp.weight": "mlp.shared_expert.down_proj.weight",
}
# GGUF 3-D expert tensors ([n_experts, rows, cols]) -> each expert's HF projection
EXPS_MAP = {"ffn_gate_exps.weight": "gate_proj", "ffn_up_exps.weight": "up_proj",
            "ffn_down_exps.weight": "down_proj"}
MIXTRAL_MAP = {"w1": "gate_proj", "w3": "up_proj", "w2": "down_proj"}


# Mixtral's block_sparse_moe prefixes in the Qwen-MoE spelling the reference uses; with
# MIXTRAL_MAP (the experts' projections) the one table both directions read.
MIXTRAL_PREFIX = {".block_sparse_moe.gate.": ".mlp.gate.", ".block_sparse_moe.experts.": ".mlp.experts."}


def _moe_rename(hf, prefix, proj_map):
    for old, new in prefix.items():
        if old not in hf:
            continue
        if not old.endswith(".experts."):
            return hf.replace(old, new)
        pre, rest = hf.split(old)
        e, proj, tail = rest.split(".", 2)
        return f"{pre}{new}{e}.{proj_map[proj]}.{tail}"
    return hf


def mixtral_to_qwen_name(hf):
    """Mixtral's block_sparse_moe names in the Qwen-MoE spelling the reference uses."""
    return _moe_rename(hf, MIXTRAL_PREFIX, MIXTRAL_MAP)


def qwen_to_mixtral_name(hf):
    """The reference's Qwen-MoE names in Mixtral's spelling (mixtral_to_qwen_name undone)."""
    return _moe_rename(hf, {v: k for k, v in MIXTRAL_PREFIX.items()},
                       {v: k for k, v in MIXTRAL_MAP.items()})


GLOBAL_MAP = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}


def hf_to_gguf_name(hf):
    for g, h in GLOBAL_MAP.items():
        if hf == h:
            return g
    assert hf.startswith("model.layers."), hf
    rest = hf[len("model.layers."):]
    n, sub = rest.split(".", 1)
    for g, h in LAYER_MAP.items():
        if sub == h:
            return f"blk.{n}.{g}"
    raise KeyError(hf)


def gguf_to_hf_name(g):
    if g in GLOBAL_MAP:
        return GLOBAL_MAP[g]
    if g.startswith("blk."):
        _, n, sub = g.split(".", 2)
        if sub in LAYER_MAP:
            return f"model.layers.{n}.{LAYER_MAP[sub]}"
    return None


def permute_qk(w, n_head):
    """llama.cpp converter's permutation of Q/K rows (HF rotate_half -> interleaved pairs)."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def unpermute_qk(w, n_head):
    return (w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


# ---------------------------------------------------------------- safetensors (own reader)

_ST_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I32": np.int32,
              "I64": np.int64, "I8": np.int8,  # INT4 checkpoints' packed words and parts
              "F8_E4M3": np.uint8}  # FP8 codes stay raw bytes: make_fp8.decode_e4m3


def bf16_to_f32(u16):
    return (np.asarray(u16, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(x):
    """Round-to-nearest-even float32 -> bf16 bits (uint16). No NaNs expected."""
    b = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
    return b.astype(np.uint16)


def read_safetensors(path, types=None):
    """{name: float32/float16 ndarray}; BF16 is widened to float32 exactly.
    types, if a dict, receives {name: safetensors dtype string}."""
    with open(path, "rb") as f:
        raw = f.read()
    (hlen,) = struct.unpack_from("<Q", raw, 0)
    header = json.loads(raw[8:8 + hlen])
    base = 8 + hlen
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        buf = raw[base + b: base + e]
        shape = tuple(info["shape"])
        if types is not None:
            types[name] = info["dtype"]
        if info["dtype"] == "BF16":
            out[name] = bf16_to_f32(np.frombuffer(buf, dtype="<u2")).reshape(shape)
        else:
            out[name] = np.frombuffer(buf, dtype=np.dtype(_ST_DTYPES[info["dtype"]]).newbyteorder("<")).reshape(shape)
    return out


def write_safetensors(path, tensors, dtypes, metadata=None):
    """tensors: {name: float array}; dtypes: {name: 'F32'|'F16'|'BF16'}. Header entries are
    written in name order with 8-byte padded header, as the safetensors library does."""
    header = {}
    blobs = []
    off = 0
    for name in sorted(tensors):
        a = tensors[name]
        dt = dtypes[name]
        if dt == "BF16":
            data = f32_to_bf16(a).astype("<u2").tobytes()
        elif dt == "F8_E4M3":
            data = np.asarray(a, dtype=np.uint8).tobytes()  # codes, as make_fp8 makes them
        elif dt == "F16":
            data = np.asarray(a, dtype="<f2").tobytes()
        elif dt in ("I32", "I64", "I8"):
            data = np.asarray(a, dtype=np.dtype(_ST_DTYPES[dt]).newbyteorder("<")).tobytes()
        else:
            data = np.asarray(a, dtype="<f4").tobytes()
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    if metadata is not None:
        header["__metadata__"] = metadata
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)


def load_hf(path, types=None):
    """(config dict, {hf_name: float64 array}) from an HF model directory; types, if a
    dict, receives {hf_name: 'F32'|'F16'|'BF16'}."""
    with open(os.path.join(path, "config.json")) as f:
        config = json.load(f)
    idx = os.path.join(path, "model.safetensors.index.json")
    if os.path.exists(idx):
        with open(idx) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = sorted(x for x in os.listdir(path) if x.endswith(".safetensors"))
    weights = {}
    for fn in files:
        st_types = {}
        for k, v in read_safetensors(os.path.join(path, fn), st_types).items():
            weights[mixtral_to_qwen_name(k)] = v.astype(np.float64)
        if types is not None:
            types.update({mixtral_to_qwen_name(k): t for k, t in st_types.items()})
    if config.get("tie_word_embeddings"):
        weights.pop("lm_head.weight", None)
    return config, weights


# ---------------------------------------------------------------- GGUF

def _field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


def load_gguf(path, types=None, block_mins=None):
    """(config dict, {hf_name: float64 array}, freq_factors or None) from a GGUF file,
    dequantized with gguf.quants.dequantize. The config is rebuilt from GGUF metadata.
    types, if a dict, receives {hf_name: GGML type name}; block_mins, if a dict, receives
    {hf_name: [rows, cols/32] float64} block minimums of Q4_1 tensors."""
    import gguf

    r = gguf.GGUFReader(path)
    arch = _field(r, "general.architecture")
    a = arch + "."
    n_heads = int(_field(r, a + "attention.head_count"))
    dim = int(_field(r, a + "embedding_length"))
    head_dim = int(_field(r, a + "attention.key_length", dim // n_heads))
    config = {
        "model_type": arch,
        "hidden_size": dim,
        "num_hidden_layers": int(_field(r, a + "block_count")),
        "num_attention_heads": n_heads,
        "num_key_value_heads": int(_field(r, a + "attention.head_count_kv", n_heads)),
        "head_dim": head_dim,
        "intermediate_size": int(_field(r, a + "feed_forward_length")),
        "rms_norm_eps": float(_field(r, a + "attention.layer_norm_rms_epsilon")),
        "rope_theta": float(_field(r, a + "rope.freq_base", 10000.0)),
        "max_position_embeddings": int(_field(r, a + "context_length")),
    }
    weights = {}
    freq_factors = None
    for t in r.tensors:
        data = gguf.quants.dequantize(t.data, t.tensor_type)
        data = np.asarray(data, dtype=np.float64).reshape(tuple(int(x) for x in reversed(t.shape)))
        if t.name == "rope_freqs.weight":
            freq_factors = data
            continue
        if t.name.startswith("blk.") and t.name.split(".", 2)[2] in EXPS_MAP:
            _, n, sub = t.name.split(".", 2)
            for e in range(data.shape[0]):
                hf = f"model.layers.{n}.mlp.experts.{e}.{EXPS_MAP[sub]}.weight"
                weights[hf] = data[e]
                if types is not None:
                    types[hf] = t.tensor_type.name
            continue
        hf = gguf_to_hf_name(t.name)
        if hf is None:
            raise KeyError(f"unexpected GGUF tensor {t.name}")
        if hf.endswith("shared_expert_gate.weight"):
            data = data.reshape(1, -1)
        weights[hf] = data
        if types is not None:
            types[hf] = t.tensor_type.name
        if block_mins is not None and t.tensor_type == gguf.GGMLQuantizationType.Q4_1:
            raw = np.asarray(t.data, dtype=np.uint8).reshape(data.shape[0], -1, 20)
            block_mins[hf] = raw[:, :, 2:4].copy().view(np.float16)[..., 0].astype(np.float64)
    n_exp = int(_field(r, a + "expert_count", 0))
    if n_exp:
        config["num_experts"] = n_exp
        config["num_experts_per_tok"] = int(_field(r, a + "expert_used_count"))
        config["moe_intermediate_size"] = int(_field(r, a + "expert_feed_forward_length",
                                                     config["intermediate_size"]))
        config["shared_expert_intermediate_size"] = int(
            _field(r, a + "expert_shared_feed_forward_length", 0))
        config["norm_topk_prob"] = arch != "qwen2moe"  # llama.cpp's norm_w
    config["vocab_size"] = weights["model.embed_tokens.weight"].shape[0]
    config["tie_word_embeddings"] = "lm_head.weight" not in weights
    if arch == "llama":
        n_kv = config["num_key_value_heads"]
        for d in (weights, block_mins if block_mins is not None else {}):
            for k in list(d):
                if k.endswith("self_attn.q_proj.weight") or k.endswith("self_attn.q_proj.bias"):
                    d[k] = unpermute_qk(d[k], n_heads)
                elif k.endswith("self_attn.k_proj.weight") or k.endswith("self_attn.k_proj.bias"):
                    d[k] = unpermute_qk(d[k], n_kv)
    return config, weights, freq_factors


Model = collections.namedtuple("Model", "config weights freq_factors types block_mins")


def load_any(path):
    """Model(config, weights, freq_factors, types, block_mins) for a .gguf file or an HF
    directory (see load_gguf)."""
    types, mins = {}, {}
    if os.path.isdir(path):
        c, w = load_hf(path, types)
        return Model(c, w, None, types, mins)
    c, w, ff = load_gguf(path, types, mins)
    return Model(c, w, ff, types, mins)
