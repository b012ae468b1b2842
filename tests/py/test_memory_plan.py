"""`tpd config` prints each rank's weights before anything is loaded (from the model's tensor
directory alone); they must be the bytes each rank then holds, as the engine's "weights
loaded" line says after `tpd eval` loads them: dense, tied, quantized (block-aligned row
splits), mixture-of-experts with either split, and pipeline stages."""
import os
import re
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "reference"))

import refs  # noqa: E402
import tpd_cli  # noqa: E402

CASES = [  # model, tp, pp, parallel.moe
    ("llama_gqa-hf-f32", 2, 1, "auto"),
    ("llama3_tied-gguf-q4_0", 3, 1, "auto"),
    ("llama_kq-gguf-q4_k_m", 2, 2, "auto"),
    ("qwen2-hf-bf16", 1, 2, "auto"),
    ("mixtral-gguf-q8_0", 3, 1, "tp"),
    ("mixtral-hf-f32", 2, 1, "ep"),
    ("qwen2moe-hf-f32", 3, 1, "ep"),
    ("qwen3moe_mixed-hf-f32", 2, 2, "tp"),
]


@pytest.mark.parametrize("name,tp,pp,moe", CASES)
def test_plan_is_what_loads(tpd, name, tp, pp, moe):
    path = refs.paths()[name]
    p = subprocess.run([tpd, "config", "--model", path, "--parallel.tp", str(tp), "--pp", str(pp),
                        "--moe", moe], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    planned = {int(r): int(b) for r, b in re.findall(r"#   rank (\d+) \(stage \d+\): (\d+) bytes", p.stdout)}
    assert sorted(planned) == list(range(tp * pp)), p.stdout
    r = tpd_cli.run(tp * pp, ["eval", "--model", path, "--seqs", "1,2,3", "--out", os.devnull,
                              "--threads", 1, "--pp", pp, "--moe", moe, "--log.level", "info"])
    loaded = {int(k): int(b) for k, b in re.findall(r"rank (\d+) [0-9.]+ GiB \((\d+) bytes\)", r.stderr)}
    assert loaded == planned, (loaded, planned)
