"""Our C model loaders against independent implementations.

Files are written by the `gguf` package's GGUFWriter and by `safetensors` (numpy), read
back by GGUFReader / numpy into JSON expectations (tests/data/gen_gguf_expect.py), and the
C test programs compare what model/gguf.c and model/modelfile.c see with that JSON:
    TPD_GGUF_FILE + TPD_GGUF_EXPECT -> build/tests/test_gguf    (metadata, tensor infos)
    TPD_MF_MODEL + TPD_MF_EXPECT    -> build/tests/test_modelfile (hparams, tensors, bytes)
Also checks that the committed SmolLM2 fixture still matches what GGUFReader reads.
"""
import json
import os
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
st_numpy = pytest.importorskip("safetensors.numpy")

SRC = Path(os.environ.get("TPD_SOURCE_DIR", Path(__file__).resolve().parents[2]))
BUILD = Path(os.environ.get("TPD_BUILD_DIR", SRC / "build"))
SMOLLM2 = SRC / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
FIXTURE = SRC / "tests" / "data" / "smollm2_q4_1.json"

sys.path.insert(0, str(SRC / "tests" / "data"))
sys.path.insert(0, str(SRC / "tests" / "reference"))
import gen_gguf_expect as gx  # noqa: E402
from hf_layout import hf_shapes  # noqa: E402

Q = gguf.GGMLQuantizationType
# bytes per block, elements per block (GGML layouts)
BLOCK = {Q.Q8_0: (34, 32), Q.Q4_0: (18, 32), Q.Q4_1: (20, 32), Q.Q4_K: (144, 256),
         Q.Q6_K: (210, 256), Q.BF16: (2, 1)}


def run_c(test, env):
    exe = BUILD / "tests" / test
    if not exe.exists():
        pytest.skip(f"{exe} not built")
    r = subprocess.run([str(exe)], env={**os.environ, **env}, capture_output=True,
                       text=True, timeout=900)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "1 test(s) run" in out and "PASSED" in out and "SKIPPED" not in out, out


def add_raw(w, rng, name, qtype, rows, cols):
    """A tensor of random bytes in a block format: numpy [rows, bytes per row]."""
    bpb, epb = BLOCK[qtype]
    assert cols % epb == 0
    data = rng.integers(0, 256, size=(rows, cols // epb * bpb), dtype=np.uint8)
    w.add_tensor(name, data, raw_dtype=qtype)


def write_gguf(path, arch, build):
    w = gguf.GGUFWriter(str(path), arch)
    build(w)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def check_gguf(tmp_path, path, with_model):
    exp = tmp_path / (path.name + ".json")
    exp.write_text(json.dumps(gx.expect(str(path), with_model=with_model)))
    run_c("test_gguf", {"TPD_GGUF_FILE": str(path), "TPD_GGUF_EXPECT": str(exp)})
    if with_model:
        run_c("test_modelfile", {"TPD_MF_MODEL": str(path), "TPD_MF_EXPECT": str(exp)})


@pytest.mark.parametrize("alignment", [None, 64, 256])
def test_gguf_writer_metadata_and_types(tmp_path, alignment):
    rng = np.random.default_rng(alignment or 1)
    V = gguf.GGUFValueType

    def build(w):
        if alignment:
            w.add_custom_alignment(alignment)
        w.add_uint8("t.u8", 250)
        w.add_int8("t.i8", -7)
        w.add_uint16("t.u16", 65535)
        w.add_int16("t.i16", -32768)
        w.add_uint32("t.u32", 4294967295)
        w.add_int32("t.i32", -2147483648)
        w.add_uint64("t.u64", 2**64 - 1)
        w.add_int64("t.i64", -(2**63))
        w.add_float32("t.f32", 3.25)
        w.add_float64("t.f64", 1e-300)
        w.add_bool("t.bool", True)
        w.add_string("t.str", "héllo ✓ \u00e9")
        w.add_string("t.empty", "")
        w.add_array("t.arr_str", ["a", "", "ünïcode", "x" * 1000])
        w.add_key_value("t.arr_u8", [0, 255, 7], V.ARRAY, sub_type=V.UINT8)
        w.add_key_value("t.arr_i16", [-1, 2, -3], V.ARRAY, sub_type=V.INT16)
        w.add_key_value("t.arr_u64", [2**64 - 1, 0, 12345678901234], V.ARRAY, sub_type=V.UINT64)
        w.add_key_value("t.arr_f64", [0.1, -2.5], V.ARRAY, sub_type=V.FLOAT64)
        w.add_key_value("t.arr_f32", [float(x) for x in rng.standard_normal(40).astype(np.float32)], V.ARRAY, sub_type=V.FLOAT32)
        w.add_key_value("t.arr_bool", [True, False, True], V.ARRAY, sub_type=V.BOOL)
        w.add_key_value("t.arr_i32", list(range(-20, 20)), V.ARRAY, sub_type=V.INT32)
        w.add_tensor("f32", rng.standard_normal((3, 5)).astype(np.float32))
        w.add_tensor("f16", rng.standard_normal((7,)).astype(np.float16))
        w.add_tensor("f32_3d", rng.standard_normal((2, 3, 4)).astype(np.float32))
        w.add_tensor("f32_4d", rng.standard_normal((2, 1, 3, 2)).astype(np.float32))
        add_raw(w, rng, "bf16", Q.BF16, 3, 10)
        add_raw(w, rng, "q8_0", Q.Q8_0, 4, 64)
        add_raw(w, rng, "q4_0", Q.Q4_0, 2, 96)
        add_raw(w, rng, "q4_1", Q.Q4_1, 5, 32)
        add_raw(w, rng, "q4_k", Q.Q4_K, 3, 512)
        add_raw(w, rng, "q6_k", Q.Q6_K, 2, 256)

    path = tmp_path / "types.gguf"
    write_gguf(path, "llama", build)
    check_gguf(tmp_path, path, with_model=False)


def model_builder(arch, rng, dim, heads, kv, head_dim, ffn, vocab, layers):
    def build(w):
        w.add_block_count(layers)
        w.add_context_length(1024)
        w.add_embedding_length(dim)
        w.add_feed_forward_length(ffn)
        w.add_head_count(heads)
        w.add_head_count_kv(kv)
        if head_dim != dim // heads:
            w.add_key_length(head_dim)
            w.add_value_length(head_dim)
        w.add_layer_norm_rms_eps(1e-6)
        w.add_rope_freq_base(1e6 if arch != "llama" else 5e5)
        w.add_token_list([f"tok{i}" for i in range(vocab)])
        w.add_bos_token_id(3)
        w.add_eos_token_id(4)
        q, k = heads * head_dim, kv * head_dim

        def norm(name, n):
            w.add_tensor(name, (1 + 0.1 * rng.standard_normal(n)).astype(np.float32))

        add_raw(w, rng, "token_embd.weight", Q.Q8_0, vocab, dim)
        norm("output_norm.weight", dim)
        if arch == "llama":
            w.add_tensor("rope_freqs.weight", np.linspace(1, 8, head_dim // 2).astype(np.float32))
        else:
            w.add_tensor("output.weight", rng.standard_normal((vocab, dim)).astype(np.float16))
        for l in range(layers):
            p = f"blk.{l}."
            norm(p + "attn_norm.weight", dim)
            add_raw(w, rng, p + "attn_q.weight", Q.Q4_K, q, dim)
            add_raw(w, rng, p + "attn_k.weight", Q.Q4_0, k, dim)
            add_raw(w, rng, p + "attn_v.weight", Q.Q8_0, k, dim)
            add_raw(w, rng, p + "attn_output.weight", Q.Q6_K, dim, q)
            norm(p + "ffn_norm.weight", dim)
            add_raw(w, rng, p + "ffn_gate.weight", Q.Q4_1, ffn, dim)
            w.add_tensor(p + "ffn_up.weight", rng.standard_normal((ffn, dim)).astype(np.float16))
            add_raw(w, rng, p + "ffn_down.weight", Q.BF16, dim, ffn)
            if arch == "qwen2":
                norm(p + "attn_q.bias", q)
                norm(p + "attn_k.bias", k)
                norm(p + "attn_v.bias", k)
            if arch == "qwen3":
                norm(p + "attn_q_norm.weight", head_dim)
                norm(p + "attn_k_norm.weight", head_dim)
    return build


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
def test_gguf_writer_model(tmp_path, arch):
    rng = np.random.default_rng(7)
    head_dim = 128 if arch == "qwen3" else 64
    path = tmp_path / f"{arch}.gguf"
    write_gguf(path, arch, model_builder(arch, rng, dim=256, heads=4, kv=2,
                                         head_dim=head_dim, ffn=512, vocab=96, layers=2))
    check_gguf(tmp_path, path, with_model=True)


# ---- Hugging Face directories written with safetensors ---------------------------------

HF_ARCH = {"LlamaForCausalLM": 0, "MistralForCausalLM": 0, "Qwen2ForCausalLM": 1,
           "Qwen3ForCausalLM": 2}
HF_LAYER = {"input_layernorm.weight": "attn_norm.weight",
            "post_attention_layernorm.weight": "ffn_norm.weight",
            "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
            "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
            "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias",
            "self_attn.v_proj.bias": "attn_v.bias", "self_attn.q_norm.weight": "attn_q_norm.weight",
            "self_attn.k_norm.weight": "attn_k_norm.weight", "mlp.gate_proj.weight": "ffn_gate.weight",
            "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight"}
HF_TOP = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
          "lm_head.weight": "output.weight"}


def gguf_name(hf):
    if hf in HF_TOP:
        return HF_TOP[hf]
    parts = hf.split(".", 3)
    if len(parts) == 4 and parts[:2] == ["model", "layers"] and parts[3] in HF_LAYER:
        return f"blk.{int(parts[2])}.{HF_LAYER[parts[3]]}"
    return None


def hf_tensors(rng, cfg, dtype, lm_head):
    t = hf_shapes(cfg)
    if lm_head:
        t["lm_head.weight"] = t["model.embed_tokens.weight"]
    hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    out = {k: rng.standard_normal(s).astype(dtype) for k, s in t.items()}
    out["model.layers.0.self_attn.rotary_emb.inv_freq"] = np.ones(hd // 2, np.float32)
    return out


def hf_expect(cfg, tensors):
    names = {gguf_name(k) for k in tensors} - {None}
    arch = HF_ARCH[cfg["architectures"][0]]
    eos = cfg.get("eos_token_id", -1)
    heads = cfg["num_attention_heads"]
    rs = cfg.get("rope_scaling") or {}
    hp = {"arch": arch, "n_layers": cfg["num_hidden_layers"], "dim": cfg["hidden_size"],
          "n_heads": heads, "n_kv_heads": cfg.get("num_key_value_heads", heads),
          "head_dim": cfg.get("head_dim") or cfg["hidden_size"] // heads,
          "ffn_dim": cfg["intermediate_size"], "vocab_size": cfg["vocab_size"],
          "max_ctx": cfg["max_position_embeddings"], "norm_eps": cfg["rms_norm_eps"],
          "rope_theta": cfg.get("rope_theta", 10000.0), "rope_neox": 1,
          "rope_scaling_llama3": int(rs.get("rope_type", rs.get("type")) == "llama3"),
          "tied_embeddings": int(cfg.get("tie_word_embeddings", False) or "output.weight" not in names),
          "qkv_bias": int(arch == 1 or "blk.0.attn_q.bias" in names),
          "qk_norm": int(arch == 2 or "blk.0.attn_q_norm.weight" in names),
          "bos_id": cfg.get("bos_token_id", -1),
          "eos_id": eos[0] if isinstance(eos, list) else eos}
    ggml_type = {np.dtype(np.float32): 0, np.dtype(np.float16): 1}
    ts = []
    for k, a in tensors.items():
        g = gguf_name(k)
        if g is None:
            continue
        b = np.ascontiguousarray(a).tobytes()
        ts.append({"name": g, "type": ggml_type[a.dtype], "ne": [str(x) for x in a.shape[::-1]],
                   "nbytes": str(len(b)), "crc32": "%08x" % (zlib.crc32(b) & 0xFFFFFFFF)})
    return {"hparams": hp, "tensors": ts}


@pytest.mark.parametrize("arch,dtype,shards,lm_head", [
    ("LlamaForCausalLM", np.float32, 1, False),
    ("MistralForCausalLM", np.float16, 3, True),
    ("Qwen2ForCausalLM", np.float16, 2, False),
    ("Qwen3ForCausalLM", np.float32, 1, True),
])
def test_hf_safetensors(tmp_path, arch, dtype, shards, lm_head):
    rng = np.random.default_rng(3)
    cfg = {"architectures": [arch], "hidden_size": 48, "num_hidden_layers": 3,
           "num_attention_heads": 6, "num_key_value_heads": 2, "intermediate_size": 80,
           "vocab_size": 50, "max_position_embeddings": 512, "rms_norm_eps": 1e-5,
           "rope_theta": 250000.0, "tie_word_embeddings": not lm_head, "bos_token_id": 1,
           "eos_token_id": [2, 9], "torch_dtype": "float32"}
    if arch == "Qwen3ForCausalLM":
        cfg["head_dim"] = 16
    if arch == "LlamaForCausalLM":
        cfg["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 128}
    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    tensors = hf_tensors(rng, cfg, dtype, lm_head)
    if shards == 1:
        st_numpy.save_file(tensors, str(d / "model.safetensors"), metadata={"format": "pt"})
    else:
        names = list(tensors)
        wm = {}
        for s in range(shards):
            fn = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
            part = {k: tensors[k] for k in names[s::shards]}
            st_numpy.save_file(part, str(d / fn))
            wm.update({k: fn for k in part})
        (d / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": 0}, "weight_map": wm}))
    exp = tmp_path / "expect.json"
    exp.write_text(json.dumps(hf_expect(cfg, tensors)))
    run_c("test_modelfile", {"TPD_MF_MODEL": str(d), "TPD_MF_EXPECT": str(exp)})


def test_smollm2_fixture_matches_reader():
    if not SMOLLM2.exists():
        pytest.skip(f"{SMOLLM2} absent")
    assert json.loads(FIXTURE.read_text()) == json.loads(json.dumps(gx.expect(str(SMOLLM2))))
