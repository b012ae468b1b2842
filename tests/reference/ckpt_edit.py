"""Breaking a quantized Hugging Face checkpoint on purpose (tests/py/test_fp8_weights.py,
test_int4_weights.py), and running `tpd eval` on 2 ranks over it to read what each says."""
import json
import os
import subprocess

import numpy as np

import tpd_cli
import weights as W


def edit_config(path, fn):
    """fn(quantization_config dict), written back."""
    p = os.path.join(path, "config.json")
    with open(p) as f:
        c = json.load(f)
    fn(c["quantization_config"])
    with open(p, "w") as f:
        json.dump(c, f)


def edit_tensors(path, fn):
    """fn({name: array}, {name: dtype}) on model.safetensors, written back."""
    p = os.path.join(path, "model.safetensors")
    types = {}
    t = W.read_safetensors(p, types)
    t = {k: np.array(v) for k, v in t.items()}
    fn(t, types)
    W.write_safetensors(p, t, types, {"format": "pt"})


def refused(path, tmp_path):
    """The lines of ranks 0 and 1 of a `tpd eval` at tp 2 that must fail: asserts it failed
    without a crash."""
    cmd = tpd_cli.mpirun_cmd(2, ["eval", "--model", path, "--seqs", "1,2", "--threads", 1,
                                 "--out", os.path.join(str(tmp_path), "o.f32")])
    p = subprocess.run(cmd, env=tpd_cli.mpirun_env(), capture_output=True, text=True,
                       timeout=120)
    out = p.stdout + p.stderr
    assert p.returncode != 0, out
    assert "signal" not in out.lower() and "segmentation" not in out.lower(), out
    return out, [[ln for ln in out.splitlines() if f"rank {r}:" in ln] for r in (0, 1)]
