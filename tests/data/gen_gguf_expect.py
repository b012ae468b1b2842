#!/usr/bin/env python3
"""Writes what an independent reader (the `gguf` package's GGUFReader) sees in a GGUF file,
as JSON that tests/test_gguf.c and tests/test_modelfile.c compare our C loader against.

    gen_gguf_expect.py MODEL.gguf OUT.json

Sections: "gguf" (version, alignment, data offset, every metadata entry), "tensors" (each
tensor's name, type, ne, absolute offset, size and CRC-32 of its bytes) and "hparams"
(hyperparameters derived from the metadata by the rules of model/hparams.h, written here
in Python independently of the C code). Integers are written as decimal strings (JSON numbers lose
precision above 2^53), strings as hex of their bytes.

tests/data/smollm2_q4_1.json was made with:
    .venv/bin/python tests/data/gen_gguf_expect.py \
        models/SmolLM2-135M-Instruct.Q4_1.gguf tests/data/smollm2_q4_1.json
"""
import json
import sys
import zlib

import numpy as np
from gguf import GGUFReader, GGUFValueType

INT_TYPES = {GGUFValueType.UINT8, GGUFValueType.INT8, GGUFValueType.UINT16,
             GGUFValueType.INT16, GGUFValueType.UINT32, GGUFValueType.INT32,
             GGUFValueType.UINT64, GGUFValueType.INT64}
FLOAT_TYPES = {GGUFValueType.FLOAT32, GGUFValueType.FLOAT64}
HEAD = 8  # array elements kept at each end


def scalar(vtype, part):
    """One value as JSON: ints as strings, floats as numbers, strings as hex."""
    if vtype == GGUFValueType.STRING:
        return bytes(part).hex()
    v = part.tolist()[0] if hasattr(part, "tolist") else part
    if vtype in INT_TYPES:
        return str(int(v))
    if vtype == GGUFValueType.BOOL:
        return bool(v)
    return float(v)


def kv_entries(r):
    out = []
    for name, f in r.fields.items():
        if name.startswith("GGUF."):
            continue  # header fields GGUFReader exposes as pseudo-keys
        e = {"key": name, "type": int(f.types[0])}
        if f.types[0] == GGUFValueType.ARRAY:
            et = f.types[1] if len(f.types) > 1 else GGUFValueType.UINT8
            vals = [scalar(et, f.parts[i]) for i in f.data]
            e["array_type"] = int(et)
            e["n"] = str(len(vals))
            e["head"] = vals[:HEAD]
            e["tail"] = vals[-HEAD:] if len(vals) > HEAD else []
        else:
            e["value"] = scalar(f.types[0], f.parts[f.data[0]])
        out.append(e)
    return out


def crc(t):
    data = np.ascontiguousarray(t.data).view(np.uint8).reshape(-1)
    assert data.nbytes == t.n_bytes
    return "%08x" % (zlib.crc32(data) & 0xFFFFFFFF)


def field(r, key, default=None):
    f = r.fields.get(key)
    if f is None:
        return default
    if f.types[0] == GGUFValueType.ARRAY:
        return [f.parts[i] for i in f.data]
    v = f.parts[f.data[0]]
    if f.types[0] == GGUFValueType.STRING:
        return bytes(v).decode()
    return v.tolist()[0]


def hparams(r):
    """model/hparams.h fields from GGUF metadata, following the loader's documented rules."""
    arch = field(r, "general.architecture")
    a = {"llama": 0, "qwen2": 1, "qwen3": 2}[arch]
    names = {t.name: t for t in r.tensors}
    n_heads = field(r, f"{arch}.attention.head_count")
    dim = field(r, f"{arch}.embedding_length")
    vocab = field(r, f"{arch}.vocab_size")
    if vocab is None:
        toks = field(r, "tokenizer.ggml.tokens")
        vocab = len(toks) if toks is not None else int(names["token_embd.weight"].shape[1])
    return {
        "arch": a,
        "n_layers": field(r, f"{arch}.block_count"),
        "dim": dim,
        "n_heads": n_heads,
        "n_kv_heads": field(r, f"{arch}.attention.head_count_kv", n_heads),
        "head_dim": field(r, f"{arch}.attention.key_length", dim // n_heads),
        "ffn_dim": field(r, f"{arch}.feed_forward_length"),
        "vocab_size": vocab,
        "max_ctx": field(r, f"{arch}.context_length"),
        "norm_eps": field(r, f"{arch}.attention.layer_norm_rms_epsilon"),
        "rope_theta": field(r, f"{arch}.rope.freq_base", 10000.0),
        "rope_neox": 0 if arch == "llama" else 1,
        "rope_scaling_llama3": 0,
        "tied_embeddings": int("output.weight" not in names),
        "qkv_bias": int(arch == "qwen2" or "blk.0.attn_q.bias" in names),
        "qk_norm": int(arch == "qwen3" or "blk.0.attn_q_norm.weight" in names),
        "bos_id": field(r, "tokenizer.ggml.bos_token_id", -1),
        "eos_id": field(r, "tokenizer.ggml.eos_token_id", -1),
    }


def expect(path, with_model=True):
    r = GGUFReader(path)
    tensors = [{"name": t.name, "type": int(t.tensor_type),
                "ne": [str(int(x)) for x in t.shape],
                "offset": str(int(t.data_offset)), "nbytes": str(int(t.n_bytes)),
                "crc32": crc(t)} for t in r.tensors]
    out = {"gguf": {"version": str(field(r, "GGUF.version")),
                    "alignment": str(r.alignment),
                    "data_offset": str(r.data_offset),
                    "kv": kv_entries(r)},
           "tensors": tensors}
    if with_model:
        out["hparams"] = hparams(r)
    return out


if __name__ == "__main__":
    with open(sys.argv[2], "w") as fp:
        json.dump(expect(sys.argv[1]), fp, indent=0)
        fp.write("\n")
