#!/usr/bin/env python3
"""tpd's CUDA backend against HF transformers: randomly initialised LlamaForCausalLM (plain
and with llama3 rope scaling), Qwen2ForCausalLM (QKV bias) and Qwen3ForCausalLM (q/k norm,
head_dim != hidden/heads, tied embeddings), saved with save_pretrained as BF16 safetensors.
The reference runs the same BF16 weights in float32 on the CPU; tpd runs prompts of 1, 17 and
300 tokens, whole (prefill kernels) and one token per step (decode kernels).
Tolerance: max |tpd - HF| / max |HF| <= 2e-2.

Usage: check_hf.py [--keep DIR]     (results in $TPD_GPU_RESULTS, see gpu_common.py)"""
import json
import os
import shutil
import sys
import tempfile

import numpy as np

from gpu_common import BACKEND, eval_logits, gpu_present, record, rel_err

TOL = 2e-2
PROMPT_LENGTHS = (1, 17, 300)


def configs(tf):
    common = dict(vocab_size=1024, hidden_size=256, intermediate_size=640, num_hidden_layers=3,
                  num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=2048, rms_norm_eps=1e-5,
                  initializer_range=0.08, tie_word_embeddings=False)
    rope = lambda theta, **kw: dict(rope_parameters=dict(rope_type=kw.pop("rope_type", "default"), rope_theta=theta,
                                                         **kw))
    return {
        "llama": (tf.LlamaConfig, tf.LlamaForCausalLM, dict(common, **rope(50000.0))),
        "llama3-rope-scaling": (tf.LlamaConfig, tf.LlamaForCausalLM,
                                dict(common, **rope(500000.0, rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                                    high_freq_factor=4.0, original_max_position_embeddings=64))),
        "qwen2": (tf.Qwen2Config, tf.Qwen2ForCausalLM, dict(common, **rope(1000000.0))),
        "qwen3": (tf.Qwen3Config, tf.Qwen3ForCausalLM,
                  dict(common, head_dim=64, tie_word_embeddings=True, **rope(1000000.0))),
    }


def patch_config(path):
    """transformers >= 5 writes the rotary settings only under rope_parameters; tpd's loader
    reads the long-standing top-level rope_theta / rope_scaling, which every published
    checkpoint has, so they are added beside it (same values). Returns a note, or ''."""
    cfg = json.load(open(path))
    rp = cfg.get("rope_parameters")
    if not isinstance(rp, dict) or "rope_theta" in cfg:
        return ""
    cfg["rope_theta"] = rp["rope_theta"]
    if rp.get("rope_type", "default") != "default" and not cfg.get("rope_scaling"):
        cfg["rope_scaling"] = {k: v for k, v in rp.items() if k != "rope_theta"}
    json.dump(cfg, open(path, "w"), indent=2)
    return "config.json had rope_parameters only: top-level rope_theta/rope_scaling added for tpd's loader"


def main():
    keep = sys.argv[sys.argv.index("--keep") + 1] if "--keep" in sys.argv else None
    if not gpu_present():
        record("cuda vs HF transformers", "SKIP", "skipped: no GPU")
        return 0
    try:
        import torch
        import transformers as tf
    except ImportError as e:
        record("cuda vs HF transformers", "SKIP", f"torch/transformers not importable: {e}")
        return 0
    torch.manual_seed(1234)
    rng = np.random.default_rng(1234)
    base = keep or tempfile.mkdtemp(prefix="tpd_hf_")
    fails = 0
    try:
        for name, (cfg_cls, model_cls, kw) in configs(tf).items():
            label = f"cuda vs HF {name} bf16"
            try:
                cfg = cfg_cls(**kw)
                model = model_cls(cfg).to(torch.bfloat16).eval()
                d = os.path.join(base, name)
                model.save_pretrained(d)
                note = patch_config(os.path.join(d, "config.json"))
                ref_model = model.float()  # the saved BF16 values, computed in float32
                prompts = [rng.integers(0, cfg.vocab_size, n).tolist() for n in PROMPT_LENGTHS]
                with torch.no_grad():
                    ref = np.concatenate([ref_model(input_ids=torch.tensor([p])).logits[0].float().numpy()
                                          for p in prompts])
                errs = {}
                for chunk in (None, 1):
                    ours = eval_logits(d, prompts, cfg.vocab_size, BACKEND, chunk=chunk, timeout=900)
                    if not np.all(np.isfinite(ours)):
                        raise AssertionError(f"non-finite logits (chunk {chunk})")
                    errs["whole prompts" if chunk is None else "one token per step"] = rel_err(ours, ref)
            except Exception as e:  # noqa: BLE001  (a crash is a failed check, with its output)
                record(label, "FAIL", str(e)[-1500:])
                fails += 1
                continue
            ok = all(v <= TOL for v in errs.values())
            detail = ", ".join(f"{k} {v:.2e}" for k, v in errs.items()) + f" (tol {TOL:.0e}; prompts {PROMPT_LENGTHS})"
            record(label, "PASS" if ok else "FAIL", detail + (f"; {note}" if note else ""))
            fails += not ok
    finally:
        if not keep:
            shutil.rmtree(base, ignore_errors=True)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
