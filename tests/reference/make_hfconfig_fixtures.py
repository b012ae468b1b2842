#!/usr/bin/env python3
"""Writes tests/data/hfconfig/NAME/{config.json,expect.json}: the config.json that
transformers (5.x) saves for small Llama (plain and with llama3 rope scaling), Qwen2 and Qwen3
models, as tests/gpu/check_hf.py makes them (rope settings under "rope_parameters"), and
beside it what transformers itself computes from that file once loaded back: the rotary base
and llama3 parameters its config holds, and the inverse frequencies of its rotary embedding.
tests/test_hfconfig.c checks that tpd's reading of each file gives the same.

Needs torch and transformers (not in CI: the fixtures are committed).
Usage: make_hfconfig_fixtures.py [OUTDIR]"""
import json
import os
import sys
import tempfile

import torch
import transformers as tf

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "gpu"))
os.environ.setdefault("TPD_GPU_TEST_BACKEND", "cpu")  # check_hf imports nothing GPU-side
import check_hf  # noqa: E402  (the same configurations)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tests", "data", "hfconfig")
    small = dict(vocab_size=64, hidden_size=128, intermediate_size=96, num_hidden_layers=1)
    for name, (cfg_cls, model_cls, kw) in check_hf.configs(tf).items():
        kw = dict(kw, **small)
        if "head_dim" in kw:
            kw["head_dim"] = 16
        model = model_cls(cfg_cls(**kw))
        with tempfile.TemporaryDirectory() as d:
            model.config.architectures = [model_cls.__name__]  # as model.save_pretrained writes it
            model.config.save_pretrained(d)
            text = open(os.path.join(d, "config.json")).read()
            back = model_cls(cfg_cls.from_pretrained(d))
        rp = back.config.rope_parameters
        rot = back.model.rotary_emb
        inv = rot.inv_freq.to(torch.float64).tolist()
        expect = {"transformers": tf.__version__, "rope_theta": rp["rope_theta"], "inv_freq": inv}
        if rp.get("rope_type") == "llama3":
            expect["llama3"] = {k: rp[k] for k in ("factor", "low_freq_factor", "high_freq_factor",
                                                   "original_max_position_embeddings")}
        os.makedirs(os.path.join(out, name), exist_ok=True)
        with open(os.path.join(out, name, "config.json"), "w") as f:
            f.write(text)
        with open(os.path.join(out, name, "expect.json"), "w") as f:
            json.dump(expect, f, indent=1)
            f.write("\n")
        top = [k for k in ("rope_theta", "rope_scaling") if k in json.loads(text)]
        print(f"{name}: rope_parameters {rp}; top-level keys {top or 'none'}; {len(inv)} frequencies")


if __name__ == "__main__":
    main()
