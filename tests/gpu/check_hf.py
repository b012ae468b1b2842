#!/usr/bin/env python3
"""tpd's CUDA backend against HF transformers: randomly initialised LlamaForCausalLM (plain
and with llama3 rope scaling), Qwen2ForCausalLM (QKV bias) and Qwen3ForCausalLM (q/k norm,
head_dim != hidden/heads, tied embeddings), small configs, saved with save_pretrained as BF16
safetensors; config.json is read as transformers 5 writes it (rope_parameters, no top-level
rope_theta). The reference runs the same BF16 weights in float32 on the CPU; tpd runs prompts
of 1, 17 and 300 tokens:
  tp 1, whole prompts (prefill kernels) and one token per step (decode kernels);
  tp 2 with both ranks on the one GPU over the CUDA IPC all-reduce (--comm ipc);
  tp 2 on the one GPU over NCCL, each rank with its own NCCL_HOSTID so that NCCL takes them
  for two hosts (its socket transport over the loopback interface).
Tolerance: max |tpd - HF| / max |HF| <= 2e-2 for every prompt.

TPD_GPU_TEST_BACKEND=cpu runs the same comparison with tpd's CPU backend (tp 1 and tp 2 over
MPI), which needs no GPU: the CPU half of this check, runnable anywhere torch is.

Usage: check_hf.py [--keep DIR] [--list]     (results in $TPD_GPU_RESULTS, see gpu_common.py)"""
import os
import shutil
import sys
import tempfile
import threading

import numpy as np

from gpu_common import BACKEND, eval_logits, gpu_present, list_mode, record, rel_err, run_plan

TOL = 2e-2
PROMPT_LENGTHS = (1, 17, 300)
MODELS = ("llama", "llama3-rope-scaling", "qwen2", "qwen3")
# NCCL between two ranks of one GPU: separate "hosts", sockets over loopback, no InfiniBand
# (--log-level info: rank 0 names the all-reduce it set up, which the check requires)
NCCL_ENV = {"NCCL_SOCKET_IFNAME": "lo", "NCCL_IB_DISABLE": "1"}


def variants():
    """(label, eval_logits keyword arguments, the all-reduce tpd must report using)."""
    if BACKEND == "cpu":
        return [("tp1", dict(), None), ("tp1 one token per step", dict(chunk=1), None),
                ("tp2 mpi", dict(tp=2), None)]
    return [("tp1", dict(), None), ("tp1 one token per step", dict(chunk=1), None),
            ("tp2 one GPU ipc", dict(tp=2, extra=["--comm", "ipc", "--log-level", "info"]), "all-reduce ipc"),
            ("tp2 one GPU nccl (NCCL_HOSTID per rank)",
             dict(tp=2, env=NCCL_ENV, rank_env={"NCCL_HOSTID": "tpd-rank-"},
                  extra=["--comm", "nccl", "--log-level", "info"]), "all-reduce nccl")]


def configs(tf):
    common = dict(vocab_size=1024, hidden_size=256, intermediate_size=640, num_hidden_layers=3,
                  num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=2048, rms_norm_eps=1e-5,
                  initializer_range=0.08, tie_word_embeddings=False)

    def rope(theta, **kw):
        return dict(rope_parameters=dict(rope_type=kw.pop("rope_type", "default"), rope_theta=theta, **kw))
    return {
        "llama": (tf.LlamaConfig, tf.LlamaForCausalLM, dict(common, **rope(50000.0))),
        "llama3-rope-scaling": (tf.LlamaConfig, tf.LlamaForCausalLM,
                                dict(common, **rope(500000.0, rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                                    high_freq_factor=4.0, original_max_position_embeddings=64))),
        "qwen2": (tf.Qwen2Config, tf.Qwen2ForCausalLM, dict(common, **rope(1000000.0))),
        "qwen3": (tf.Qwen3Config, tf.Qwen3ForCausalLM,
                  dict(common, head_dim=64, tie_word_embeddings=True, **rope(1000000.0))),
    }


class Models:
    """Each model made, saved and run through HF once, when a check first needs it."""

    def __init__(self, base):
        self.base = base
        self.made = {}
        self.lock = threading.Lock()  # checks run in parallel (run_plan): each model made once

    def get(self, name):
        """(directory, prompts, HF logits [tokens, vocab], vocab)."""
        with self.lock:
            if name not in self.made:
                self.made[name] = self.make(name)
            return self.made[name]

    def make(self, name):
        import torch
        import transformers as tf
        cfg_cls, model_cls, kw = configs(tf)[name]
        torch.manual_seed(1234 + MODELS.index(name))
        rng = np.random.default_rng(1234 + MODELS.index(name))
        cfg = cfg_cls(**kw)
        d = os.path.join(self.base, name)
        model_cls(cfg).to(torch.bfloat16).save_pretrained(d)
        # the reference: the saved BF16 values loaded back in float32. Not model.float(): the
        # .to(bfloat16) has also rounded the rotary inverse frequencies (a buffer) to BF16,
        # which moves HF's own logits by up to 17% at position 300 (measured against the
        # float64 numpy reference, tests/reference/model_ref.py, which tpd's CPU backend matches)
        ref_model = model_cls.from_pretrained(d, dtype=torch.float32).eval()
        prompts = [rng.integers(0, cfg.vocab_size, n).tolist() for n in PROMPT_LENGTHS]
        with torch.no_grad():
            ref = np.concatenate([ref_model(input_ids=torch.tensor([p])).logits[0].float().numpy() for p in prompts])
        return d, prompts, ref, cfg.vocab_size


def check(models, name, kw, must_log):
    def fn():
        d, prompts, ref, vocab = models.get(name)
        log = []
        ours = eval_logits(d, prompts, vocab, BACKEND, timeout=600, log=log, **kw)
        if not np.all(np.isfinite(ours)):
            return "FAIL", "non-finite logits", {}
        if must_log and must_log not in log[0]:
            return "FAIL", f"tpd did not report '{must_log}': {log[0].strip()[-600:]}", {}
        errs, off = [], 0
        for p in prompts:
            errs.append(rel_err(ours[off:off + len(p)], ref[off:off + len(p)]))
            off += len(p)
        ok = max(errs) <= TOL
        detail = ", ".join(f"{n} tokens {e:.2e}" for n, e in zip(PROMPT_LENGTHS, errs)) + f" (tol {TOL:.0e})"
        return "PASS" if ok else "FAIL", detail, dict(errs=errs)
    return fn


def main():
    keep = sys.argv[sys.argv.index("--keep") + 1] if "--keep" in sys.argv else None
    base = keep or tempfile.mkdtemp(prefix="tpd_hf_")
    models = Models(base)
    plan = [(f"{BACKEND} vs HF {name} bf16 {label}", check(models, name, kw, must_log))
            for name in MODELS for label, kw, must_log in variants()]
    try:
        if list_mode():
            return run_plan(plan)
        if not gpu_present():
            for name, _ in plan:
                record(name, "SKIP", "no GPU")
            return 0
        try:
            import torch  # noqa: F401
            import transformers  # noqa: F401
        except ImportError as e:
            for name, _ in plan:
                record(name, "FAIL", f"torch/transformers not importable: {e}")
            return 1
        return 1 if run_plan(plan) else 0
    finally:
        if not keep:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
