"""Helpers for the GPU checks (tests/gpu/*.py): `tpd eval` / `tpd generate` with a chosen
backend under mpirun, results recorded one JSON line each in $TPD_GPU_RESULTS (the table
that tests/gpu/run prints last is made from them)."""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))

import tpd_cli  # noqa: E402


# The backend under test. TPD_GPU_TEST_BACKEND=cpu dry-runs these scripts on a machine
# without a GPU (every check then compares the CPU backend with itself).
BACKEND = os.environ.get("TPD_GPU_TEST_BACKEND", "cuda")


def gpu_present():
    """True when nvidia-smi lists at least one GPU (or a dry run was asked for)."""
    if BACKEND != "cuda":
        return True
    try:
        p = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return p.returncode == 0 and "GPU" in p.stdout


def record(name, status, detail="", **values):
    """One result line: status PASS, FAIL or SKIP; printed too."""
    detail = " | ".join(ln for ln in str(detail).splitlines() if ln.strip())
    line = {"name": name, "status": status, "detail": detail}
    line.update(values)
    print(f"[{status}] {name}: {detail}", flush=True)
    path = os.environ.get("TPD_GPU_RESULTS")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(line) + "\n")


def eval_logits(model, seqs, vocab, backend, tp=1, chunk=None, kv_type=None, block_size=None, separate=False,
                timeout=600, env=None):
    """Logits [total tokens, vocab] from `mpirun -np tp tpd eval --backend B`."""
    fd, out = tempfile.mkstemp(prefix="tpd_gpu_eval_", suffix=".f32")
    os.close(fd)
    try:
        args = ["eval", "--model", model, "--backend", backend,
                "--seqs", ";".join(",".join(str(t) for t in s) for s in seqs), "--out", out,
                "--threads", tpd_cli.default_threads(tp) if backend == "cpu" else 1]
        if chunk:
            args += ["--chunk", chunk]
        if kv_type:
            args += ["--kv-type", kv_type]
        if block_size:
            args += ["--block-size", block_size]
        if separate:
            args.append("--separate")
        run(tp, args, timeout, env)
        data = np.fromfile(out, dtype="<f4")
    finally:
        os.unlink(out)
    total = sum(len(s) for s in seqs)
    if data.size != total * vocab:
        raise AssertionError(f"tpd eval wrote {data.size} floats, expected {total}x{vocab}")
    return data.reshape(total, vocab)


def generate(model, prompt_ids, n, backend, tp=1, timeout=600, env=None):
    """Greedy ids from `tpd generate --temperature 0 --ids --ignore-eos`."""
    args = ["generate", "--model", model, "--backend", backend, "--prompt-ids", ",".join(map(str, prompt_ids)),
            "-n", n, "--temperature", 0, "--ids", "--ignore-eos",
            "--threads", tpd_cli.default_threads(tp) if backend == "cpu" else 1]
    p = run(tp, args, timeout, env)
    lines = [ln.strip() for ln in p.stdout.splitlines() if ln.strip()]
    ids = next((ln for ln in reversed(lines) if ln.replace(",", "").isdigit()), None)
    if ids is None:
        raise AssertionError(f"no id line in tpd generate output:\n{p.stdout[-2000:]}")
    return [int(x) for x in ids.split(",")]


def run(tp, args, timeout=600, env=None):
    cmd = tpd_cli.mpirun_cmd(tp, args)
    e = tpd_cli.mpirun_env()
    if env:
        e.update(env)
    p = subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"exit {p.returncode}: {p.stderr.strip()[-1200:] or p.stdout.strip()[-1200:]} "
                           f"[command: {' '.join(map(str, cmd))[:400]}]")
    return p


def rel_err(a, b):
    """max |a - b| / max |b| (b the reference)."""
    b = np.asarray(b, np.float64)
    return float(np.abs(np.asarray(a, np.float64) - b).max() / max(np.abs(b).max(), 1e-30))
