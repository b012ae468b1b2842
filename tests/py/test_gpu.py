"""The CUDA backend on the GPU, when the machine has one: CUDA vs CPU backend and vs the
independent numpy reference on every tiny model, and the FP8 KV cache CUDA vs CPU
(tests/gpu/check_backends.py --quick). The
whole GPU suite with benchmarks is tests/gpu/run. Skips with "skipped: no GPU" elsewhere."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def gpu_present():
    try:
        p = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return p.returncode == 0 and "GPU" in p.stdout


def test_cuda_backend_matches_cpu_and_reference():
    if not gpu_present():
        pytest.skip("skipped: no GPU")
    env = dict(os.environ)
    env.pop("TPD_GPU_RESULTS", None)
    env.pop("TPD_GPU_TEST_BACKEND", None)
    p = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "gpu", "check_backends.py"), "--quick",
                        "--only=tiny,tp2,fp8"], env=env, capture_output=True, text=True, timeout=1700)
    print(p.stdout[-20000:])
    assert p.returncode == 0, "GPU checks failed:\n" + "\n".join(
        ln for ln in p.stdout.splitlines() if ln.startswith("[FAIL]"))[-8000:] + p.stderr[-4000:]
