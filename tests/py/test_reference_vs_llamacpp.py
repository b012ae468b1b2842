"""Checks of the test references themselves, independent of tpd:
- the numpy reference (model_ref) and our GGUF writer agree with llama.cpp (llama-cpp-python)
  on every generated GGUF model;
- HF and GGUF forms of a model hold the same weights (after un-permuting llama Q/K) and give
  the same reference logits (llama3 rope scaling: HF formula vs the rope_freqs tensor);
- our safetensors / BF16 / K-quant writers agree with the safetensors and gguf packages;
- the GGUF vocab and tokenizer.json tokenize alike (llama.cpp vs HF tokenizers)."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "reference"))

import kquants  # noqa: E402
import make_tiny  # noqa: E402
import model_ref  # noqa: E402
import refs  # noqa: E402
import weights as W  # noqa: E402

GGUF_MODELS = [n for n, (_, form, _) in make_tiny.MODELS.items() if form == "gguf"]


def _llama(path, **kw):
    llama_cpp = pytest.importorskip("llama_cpp")
    # F32 KV cache (GGML type 0) so F32 models can be compared tightly
    return llama_cpp.Llama(model_path=path, logits_all=True, n_ctx=64, n_batch=64, n_threads=2,
                           verbose=False, type_k=0, type_v=0, **kw)


@pytest.mark.parametrize("name", GGUF_MODELS)
def test_reference_matches_llamacpp(name):
    m = refs.load(name)
    typ = make_tiny.MODELS[name][2]
    # llama.cpp rounds activations for every non-F32 weight type (F16 included)
    aq = refs.act_quant(m, include_float=True)
    tol = {"f32": 1e-5, "f16": 2e-3}.get(typ, refs.tolerance(name))
    llm = _llama(refs.paths()[name])
    rng = np.random.default_rng(7)
    errs = []
    for _ in range(2):
        toks = rng.integers(0, m.config["vocab_size"], 23).tolist()
        llm.reset()
        llm.eval(toks)
        got = np.array(llm.scores[:len(toks)], dtype=np.float64)
        ref = model_ref.forward(m.weights, m.config, toks, m.freq_factors, aq, m.block_mins)
        errs.append(refs.rel_err(got, ref))
    print(f"{name}: reference vs llama.cpp max rel err {max(errs):.2e}")
    assert max(errs) <= tol, f"{name}: {errs} > {tol}"


@pytest.mark.parametrize("var", list(make_tiny.VARIANTS))
def test_hf_and_gguf_forms_agree(var):
    v = make_tiny.VARIANTS[var]
    want = make_tiny.make_weights(var, v)
    hf = refs.load(f"{var}-hf-f32")
    assert set(hf.weights) == set(want)
    for k in want:
        assert np.array_equal(hf.weights[k], want[k]), k
    assert hf.config["tie_word_embeddings"] == v["tied"]
    gname = f"{var}-gguf-f32"
    toks = list(range(3, 3 + 17))
    ref_hf = model_ref.forward(hf.weights, hf.config, toks)
    if gname in make_tiny.MODELS:
        g = refs.load(gname)
        assert set(g.weights) == set(want)
        for k in want:
            assert np.array_equal(g.weights[k], want[k]), k
        for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                    "intermediate_size", "vocab_size", "tie_word_embeddings"):
            assert g.config[key] == hf.config[key], key
        assert (g.freq_factors is not None) == bool(v.get("rope_scaling"))
        ref_g = model_ref.forward(g.weights, g.config, toks, g.freq_factors)
        assert refs.rel_err(ref_g, ref_hf) < 1e-6
    # the llama3 scaling must matter on these lengths, or the check above proves nothing
    if v.get("rope_scaling"):
        plain = dict(hf.config, rope_scaling=None)
        assert refs.rel_err(model_ref.forward(hf.weights, plain, toks), ref_hf) > 1e-3


def test_safetensors_files_read_by_safetensors_package():
    st = pytest.importorskip("safetensors.numpy")
    d = refs.paths()["llama_gqa-hf-f32"]
    files = [f for f in os.listdir(d) if f.endswith(".safetensors")]
    assert len(files) == 2
    n = 0
    for f in files:
        theirs = st.load_file(os.path.join(d, f))
        mine = W.read_safetensors(os.path.join(d, f))
        assert set(theirs) == set(mine)
        for k in theirs:
            assert theirs[k].dtype == np.float32 and np.array_equal(theirs[k], mine[k])
            n += 1
    assert n == len(make_tiny.make_weights("llama_gqa", make_tiny.VARIANTS["llama_gqa"]))
    theirs = st.load_file(os.path.join(refs.paths()["qwen3-hf-f16"], "model.safetensors"))
    assert all(a.dtype == np.float16 for a in theirs.values())
    # BF16 file: the package parses the header (numpy has no bf16 to load into)
    from safetensors import safe_open
    with safe_open(os.path.join(refs.paths()["qwen2-hf-bf16"], "model.safetensors"), "np") as f:
        assert "model.embed_tokens.weight" in list(f.keys())


def test_bf16_rounding_matches_gguf_package():
    gguf = pytest.importorskip("gguf")
    x = np.random.default_rng(3).standard_normal((4, 64)).astype(np.float32)
    x[0, :4] = [1.0 + 2**-8, 1.0 + 3 * 2**-8, -(1.0 + 2**-8), 0.0]  # ties to even
    theirs = gguf.quants.quantize(x, gguf.GGMLQuantizationType.BF16).view(np.uint16)
    assert np.array_equal(W.f32_to_bf16(x), theirs.reshape(x.shape))


@pytest.mark.parametrize("qt,fn,bound", [("Q4_K", kquants.quantize_q4_k, 0.6), ("Q6_K", kquants.quantize_q6_k, 0.6)])
def test_kquant_writers_roundtrip(qt, fn, bound):
    gguf = pytest.importorskip("gguf")
    rng = np.random.default_rng(11)
    x = rng.standard_normal((6, 512)).astype(np.float32)
    x[1] += 2.0            # all-positive-ish rows exercise the min terms
    x[2, :256] = 0.0       # an all-zero block
    q = fn(x)
    y = gguf.quants.dequantize(q, getattr(gguf.GGMLQuantizationType, qt))
    assert y.shape == x.shape
    # error within about half a quantization step of each 32/16-element sub-block
    step = (x.max() - x.min()) / (15 if qt == "Q4_K" else 63)
    assert np.abs(y - x).max() <= bound * step * 1.5
    assert np.all(y[2, :256] == 0)
    assert np.corrcoef(x.ravel(), y.ravel())[0, 1] > 0.99


def test_gguf_tensor_types_as_documented():
    gguf = pytest.importorskip("gguf")
    r = gguf.GGUFReader(refs.paths()["llama_kq-gguf-q4_k"])
    types = {t.name: t.tensor_type.name for t in r.tensors}
    assert types["blk.0.attn_output.weight"] == "Q4_K"
    assert types["blk.0.ffn_down.weight"] == "Q4_K"
    assert types["blk.0.attn_norm.weight"] == "F32"
    assert sum(1 for t in types.values() if t == "Q4_K") >= 10
    r = gguf.GGUFReader(refs.paths()["llama3_tied-gguf-q8_0"])
    names = {t.name for t in r.tensors}
    assert "output.weight" not in names and "rope_freqs.weight" in names


def test_tokenizer_json_and_gguf_vocab_agree():
    tokenizers = pytest.importorskip("tokenizers")
    name = "qwen2-gguf-f32"
    hf = tokenizers.Tokenizer.from_file(os.path.join(refs.paths()["qwen2-hf-f32"], "tokenizer.json"))
    llm = _llama(refs.paths()[name], vocab_only=True)
    for text in ["hello world", "abc xyz 123", "zebra quiz!", "\u00e9t\u00e9 na\u00efve"]:
        theirs = hf.encode(text, add_special_tokens=False).ids
        ours = llm.tokenize(text.encode(), add_bos=False, special=False)
        assert ours == theirs, text
