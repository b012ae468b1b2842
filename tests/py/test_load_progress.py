"""Loading progress of the whole job (issue 28, item 2): rank 0 logs the bytes all ranks have
read of the job's total (the sum of each rank's plan, as `tpd config` prints it), the speed
and the time left, and a line as each rank finishes; a rank killed while loading still ends
the job within seconds (the progress posts add no collective for the others to hang in)."""
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "reference"))

import refs  # noqa: E402
import tpd_cli  # noqa: E402
from hf_layout import hf_shapes  # noqa: E402
from test_preflight import GEOM, write_sparse_safetensors  # noqa: E402

JOB = re.compile(r"loading weights: [0-9.]+ of [0-9.]+ GiB \(\d+%; (\d+) of (\d+) bytes\) on (\d+) ranks, "
                 r"(\d+) done(?:, \d+ failed)?, [0-9.]+ s, [0-9.]+ GB/s, about \d+ s left")
FINISHED = re.compile(r"loading weights: rank (\d+) finished: [0-9.]+ GiB \((\d+) bytes\) in [0-9.]+ s")


def plan(tpd, path, tp, pp):
    p = subprocess.run([tpd, "config", "--model", path, "--parallel.tp", str(tp), "--pp", str(pp)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return {int(r): int(b) for r, b in re.findall(r"#   rank (\d+) \(stage \d+\): (\d+) bytes", p.stdout)}


@pytest.mark.parametrize("name,tp,pp", [("llama_gqa-hf-f32", 2, 1), ("llama_kq-gguf-q4_k_m", 2, 2)])
def test_job_progress(tpd, name, tp, pp):
    path = refs.paths()[name]
    planned = plan(tpd, path, tp, pp)
    assert sorted(planned) == list(range(tp * pp))
    r = tpd_cli.run(tp * pp, ["eval", "--model", path, "--seqs", "1,2,3", "--out", os.devnull,
                              "--threads", 1, "--pp", pp, "--log.level", "info"])
    jobs = [tuple(map(int, m)) for m in JOB.findall(r.stderr)]
    assert jobs, r.stderr[-3000:]
    total = sum(planned.values())
    for read, tot, ranks, done in jobs:  # the exact total from the start, read never past it
        assert (tot, ranks) == (total, tp * pp) and read <= total and done <= ranks, (jobs, planned)
    assert jobs[-1] == (total, total, tp * pp, tp * pp), (jobs, planned)
    finished = [tuple(map(int, m)) for m in FINISHED.findall(r.stderr)]
    assert sorted(finished) == sorted(planned.items()), (finished, planned)
    # every finished line before the job's last line
    assert r.stderr.rindex("loading weights: rank") < r.stderr.rindex(" done, "), r.stderr[-3000:]


def test_rank_killed_while_loading(tpd, tmp_path):
    """A 2 GB model (sparse: reading it takes each rank seconds): rank 1 killed once the
    job is loading; rank 0, waiting for posts, ends with the job."""
    d = str(tmp_path)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(GEOM, f)
    write_sparse_safetensors(os.path.join(d, "model.safetensors"), hf_shapes(GEOM))
    log = os.path.join(d, "log")
    with open(log, "w") as out:
        p = subprocess.Popen(tpd_cli.mpirun_cmd(2, ["eval", "--model", d, "--seqs", "1,2", "--out", os.devnull,
                                                    "--threads", 1, "--log.level", "info"]),
                             env=tpd_cli.mpirun_env(), stdout=out, stderr=subprocess.STDOUT,
                             start_new_session=True)
    try:
        until = time.monotonic() + 60
        while "loading weights" not in open(log).read():
            assert p.poll() is None and time.monotonic() < until, open(log).read()[-3000:]
            time.sleep(0.05)
        pids = subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True, text=True).stdout.split()
        ranks = {tpd_cli.mpi_rank(pid): int(pid) for pid in pids}
        assert "rank 1 finished" not in open(log).read()
        os.kill(ranks[1], signal.SIGKILL)
        t0 = time.monotonic()
        rc = p.wait(timeout=30)
        dt = time.monotonic() - t0
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    text = open(log).read()
    assert rc != 0 and "rank 1 finished" not in text, text[-3000:]
    assert dt < 15, f"{dt:.1f} s after rank 1 died:\n{text[-3000:]}"


def test_rank_failing_while_loading(tpd, tmp_path):
    """A NaN code in rank 0's rows (the FP8 refusal's checkpoint): rank 0 fails, rank 1 loads;
    rank 0 still hears rank 1's end and says which failed before the job stops."""
    import test_fp8_weights
    model, breaker, _ = test_fp8_weights.BAD["nan_code"]
    path = test_fp8_weights.make_fp8.write(str(tmp_path), model)
    breaker(path)
    p = subprocess.run(tpd_cli.mpirun_cmd(2, ["eval", "--model", path, "--seqs", "1,2", "--threads", 1,
                                              "--out", os.devnull, "--log.level", "info"]),
                       env=tpd_cli.mpirun_env(), capture_output=True, text=True, timeout=120)
    out = p.stdout + p.stderr
    assert p.returncode != 0 and "rank 1: another rank failed to load the model" in out, out[-3000:]
    assert "loading weights: rank 0 failed after " in out, out[-3000:]
    assert FINISHED.search(out) and FINISHED.search(out).group(1) == "1", out[-3000:]
    assert re.search(r"on 2 ranks, 1 done, 1 failed, ", out), out[-3000:]
