"""Mixture-of-experts models (Mixtral, Qwen2-MoE with its shared expert, Qwen3-MoE with dense
layers between sparse ones) against the float64 reference (tests/reference/model_ref.py,
itself checked against llama.cpp on the GGUF forms in test_reference_vs_llamacpp.py), with
the experts split both ways (parallel.moe tp and ep) at 2 and 3 ranks: expert counts 5, 6, 7
and 4 that 2 or 3 do not divide, and ranks holding no expert. Also: router ties broken by
expert id alike at every split, a token's logits independent of its batch, and inconsistent
expert counts and shapes refused with the tensor named. (test_forward_ref.py runs the same
models at tp 1-4 with the default split.)"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "reference"))

import make_tiny  # noqa: E402
import model_ref  # noqa: E402
import refs  # noqa: E402
import tpd_cli  # noqa: E402
import weights as W  # noqa: E402

SPLIT_MODELS = ["mixtral-hf-f32", "qwen2moe-gguf-f32", "qwen3moe_mixed-hf-f32", "mixtral-gguf-q8_0"]


@pytest.mark.parametrize("mode", ["tp", "ep"])
@pytest.mark.parametrize("tp", [2, 3])
@pytest.mark.parametrize("name", SPLIT_MODELS)
def test_split_matches_reference(tpd, name, tp, mode):
    seqs = refs.random_seqs(name, [1, 9, 17], seed=11)
    ref = refs.reference(name, seqs, tp)
    kv = refs.kv_type_for(name)
    ours = tpd_cli.eval_logits(refs.paths()[name], seqs, ref.shape[1], tp=tp, kv_type=kv,
                               extra=["--moe", mode])
    err = refs.rel_err(ours, ref)
    tol = refs.tolerance(name, kv or "f16")
    print(f"{name} tp={tp} moe={mode}: rel err {err:.2e} (tol {tol:.0e})")
    assert err <= tol
    # the argmax wherever the reference's top-2 gap is clear
    top2 = np.sort(ref, axis=1)[:, -2:]
    clear = (top2[:, 1] - top2[:, 0]) > 50 * tol * np.abs(ref).max()
    assert np.array_equal(ours.argmax(1)[clear], ref.argmax(1)[clear])


def _tied_router_model(tmp_path):
    """mixtral-hf-f32 with router rows 1 and 3 equal in every layer: the two experts tie on
    every token, and the lower id must win everywhere."""
    src = refs.paths()["mixtral-hf-f32"]
    d = tmp_path / "tied"
    shutil.copytree(src, d)
    cfg, w = W.load_hf(str(d))
    for f in os.listdir(d):
        if f.endswith(".safetensors") or f.endswith(".index.json"):
            os.remove(d / f)
    for k in list(w):
        if k.endswith("mlp.gate.weight"):
            w[k][3] = w[k][1]
    w = {W.qwen_to_mixtral_name(k): a.astype(np.float32) for k, a in w.items()}
    W.write_safetensors(str(d / "model.safetensors"), w, {k: "F32" for k in w}, {"format": "pt"})
    return str(d)


def test_router_ties_lower_id_everywhere(tpd, tmp_path):
    path = _tied_router_model(tmp_path)
    cfg, w = W.load_hf(path)
    seqs = refs.random_seqs("mixtral-hf-f32", [6, 11], seed=3)
    ref = np.concatenate([model_ref.forward(w, cfg, s) for s in seqs])
    # the ties happen: expert 1 or 3 is among the chosen for some token
    x = rms_norm_first_mlp_input(w, cfg, seqs[0])
    ids, _ = model_ref.route(x @ w["model.layers.0.mlp.gate.weight"].T, 2, True)
    assert any(1 in row or 3 in row for row in ids)
    outs = {}
    for tp, mode in [(1, "tp"), (2, "tp"), (2, "ep"), (3, "ep"), (3, "tp")]:
        ours = tpd_cli.eval_logits(path, seqs, ref.shape[1], tp=tp, kv_type="f32",
                                   extra=["--moe", mode])
        assert refs.rel_err(ours, ref) <= 1e-4, (tp, mode)
        outs[(tp, mode)] = ours.argmax(1)
    first = next(iter(outs.values()))
    for k, v in outs.items():
        assert np.array_equal(v, first), k


def rms_norm_first_mlp_input(w, cfg, toks):
    """Layer 0's router input: only to show that the tie is exercised (an approximation is
    enough: the attention block's output is left out)."""
    h = w["model.embed_tokens.weight"][np.asarray(toks)]
    return model_ref.rms_norm(h, w["model.layers.0.post_attention_layernorm.weight"],
                              cfg["rms_norm_eps"])


@pytest.mark.parametrize("tp,mode", [(1, "tp"), (2, "ep")])
def test_batch_invariant(tpd, tp, mode):
    """A token's logits do not depend on what it is batched with: the experts see different
    token groups batched and alone."""
    name = "qwen2moe-hf-f32"
    seqs = refs.random_seqs(name, [1, 23, 5, 12], seed=9)
    vocab = refs.load(name).config["vocab_size"]
    args = dict(tp=tp, kv_type="f32", extra=["--moe", mode])
    batched = tpd_cli.eval_logits(refs.paths()[name], seqs, vocab, **args)
    alone = tpd_cli.eval_logits(refs.paths()[name], seqs, vocab, separate=True, **args)
    assert np.abs(batched - alone).max() <= 1e-5 * np.abs(alone).max()


# ---------------------------------------------------------------- bad input

def _run_fail(path, tp=2):
    cmd = tpd_cli.mpirun_cmd(tp, ["eval", "--model", path, "--seqs", "1,2,3", "--out",
                                  os.devnull, "--threads", 1])
    p = subprocess.run(cmd, env=tpd_cli.mpirun_env(), capture_output=True, text=True,
                       timeout=120)
    assert p.returncode != 0, "a bad model loaded"
    return p.stdout + p.stderr


def _hf_copy(tmp_path, name, edit_config=None, drop=None, add=None):
    d = tmp_path / "bad"
    shutil.copytree(refs.paths()[name], d)
    if edit_config:
        c = json.loads((d / "config.json").read_text())
        edit_config(c)
        (d / "config.json").write_text(json.dumps(c))
    if drop or add:
        st = W.read_safetensors(str(d / "model.safetensors"))
        st = {k: v for k, v in st.items() if not (drop and drop in k)}
        if add:
            st.update(add(st))
        W.write_safetensors(str(d / "model.safetensors"), st, {k: "F32" for k in st})
    return str(d)


def test_bad_experts_used(tpd, tmp_path):
    path = _hf_copy(tmp_path, "mixtral-hf-f32", edit_config=lambda c: c.update(num_experts_per_tok=9))
    out = _run_fail(path)
    assert "9 used per token" in out and "config.json" in out, out[-2000:]


def test_missing_expert(tpd, tmp_path):
    path = _hf_copy(tmp_path, "mixtral-hf-f32", drop="experts.4.")
    out = _run_fail(path)
    assert "model.layers.0.block_sparse_moe.experts.4.w1.weight" in out, out[-2000:]
    assert "expert 4 of the 5" in out


def test_extra_expert(tpd, tmp_path):
    def router5(st):  # the routers agree with the config: only the experts' tensors do not
        return {k: v[:5] for k, v in st.items() if k.endswith("mlp.gate.weight")}
    path = _hf_copy(tmp_path, "qwen2moe-hf-f32", edit_config=lambda c: c.update(num_experts=5),
                    add=router5)
    out = _run_fail(path)
    assert "is expert 5, but the config declares 5 experts" in out, out[-2000:]


def test_wrong_expert_shape(tpd, tmp_path):
    def grow(st):
        k = "model.layers.1.mlp.experts.2.down_proj.weight"
        return {k: np.zeros((st[k].shape[0], st[k].shape[1] + 1), np.float32)}
    path = _hf_copy(tmp_path, "qwen2moe-hf-f32", add=grow)
    out = _run_fail(path)
    assert "model.layers.1.mlp.experts.2.down_proj.weight" in out and "expected shape" in out, out[-2000:]


def test_gguf_expert_count_mismatch(tpd, tmp_path):
    """A GGUF whose expert_count says 4 while its router and *_exps tensors hold 5 experts:
    the first tensor that disagrees is named."""
    pytest.importorskip("gguf")
    v = make_tiny.VARIANTS["mixtral"]
    path = str(tmp_path / "bad.gguf")
    assert _write_gguf_with_count(path, v, make_tiny.make_weights("mixtral", v), 4)
    out = _run_fail(path)
    assert "blk.0.ffn_gate_inp.weight" in out and "found [96, 5]" in out, out[-2000:]


def _write_gguf_with_count(path, v, w, count):
    import gguf
    real = gguf.GGUFWriter.add_expert_count
    try:
        gguf.GGUFWriter.add_expert_count = lambda self, n: real(self, count)
        make_tiny.write_gguf(path, v, w, "f32")
    finally:
        gguf.GGUFWriter.add_expert_count = real
    return os.path.exists(path)


@pytest.mark.parametrize("tp,pp,mode", [(1, 3, "tp"), (2, 2, "ep")])
def test_pipeline_stages(tpd, tp, pp, mode):
    """Pipeline stages over a model with a dense layer between sparse ones."""
    name = "qwen3moe_mixed-hf-f32"
    seqs = refs.random_seqs(name, [1, 7, 19], seed=5)
    ref = refs.reference(name, seqs, 1)
    ours = tpd_cli.eval_logits(refs.paths()[name], seqs, ref.shape[1], tp=tp, pp=pp,
                               kv_type="f32", extra=["--moe", mode])
    assert refs.rel_err(ours, ref) <= 1e-4


def test_served(tpd, tmp_path):
    """Through the daemon (2 ranks, expert parallel): greedy text the same without and with
    n-gram speculation, again from the prefix cache, and a JSON Schema obeyed."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from test_server_api import NAME, Server, client
    sock = str(tmp_path / "run" / "tpd.sock")
    s = Server(sock, extra=["--model", refs.paths()["mixtral-gguf-f32"], "--moe", "ep", "--ctx", 256,
                            "--speculative.method", "ngram", "--speculative.ngram_min", 1])
    try:
        with client(sock, timeout=300) as c:
            body = {"model": NAME, "prompt": "abab abab abab abab abab ab", "max_tokens": 24,
                    "temperature": 0}
            texts = []
            for spec in (False, True, True):  # the third reuses the prompt's cached blocks
                r = c.post("/v1/completions", json=dict(body, speculative=spec))
                assert r.status_code == 200, r.text
                texts.append(r.json()["choices"][0]["text"])
            assert texts[0] == texts[1] == texts[2] and texts[0]
            schema = {"type": "object", "properties": {"a": {"type": "string", "enum": ["x", "yz"]}},
                      "required": ["a"], "additionalProperties": False}
            r = c.post("/v1/completions", json=dict(body, max_tokens=40, response_format={
                "type": "json_schema", "json_schema": {"name": "s", "schema": schema}}))
            assert r.status_code == 200, r.text
            assert json.loads(r.json()["choices"][0]["text"])["a"] in ("x", "yz")
            # the expert-parallel load: pairs routed (2 per token per layer), the busiest
            # rank's share, and their imbalance (1 at best, 2 ranks at worst)
            m = {ln.split()[0]: float(ln.split()[1]) for ln in c.get("/metrics").text.splitlines()
                 if ln.startswith("tpd_moe_")}
            assert m["tpd_moe_expert_pairs_total"] >= 2 * 2 * 24, m
            assert 0 < m["tpd_moe_busiest_rank_pairs_total"] <= m["tpd_moe_expert_pairs_total"]
            assert 1.0 <= m["tpd_moe_load_imbalance"] <= 2.0, m
    finally:
        out = s.output()
        assert s.stop() == 0, out[-4000:]
