"""Helpers for the GPU checks (tests/gpu/*.py): `tpd eval` / `tpd generate` with a chosen
backend under mpirun, results recorded one JSON line each in $TPD_GPU_RESULTS (the table
that tests/gpu/run prints last is made from them)."""
import concurrent.futures
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))

import tpd_cli  # noqa: E402


# The backend under test. TPD_GPU_TEST_BACKEND=cpu dry-runs these scripts on a machine
# without a GPU (every check then compares the CPU backend with itself).
BACKEND = os.environ.get("TPD_GPU_TEST_BACKEND", "cuda")

# SmolLM2-135M-Instruct Q4_1: $TPD_SMOLLM2 (tests/gpu/run assembles it from the two carried
# halves), else models/ of the checkout.
SMOLLM2 = os.environ.get("TPD_SMOLLM2") or os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


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
    line = {"name": name, "status": status, "detail": detail, "step": os.environ.get("TPD_GPU_STEP", "")}
    line.update(values)
    print(f"[{status}] {name}: {detail}", flush=True)
    path = os.environ.get("TPD_GPU_RESULTS")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(line) + "\n")


# The [debug] switches tests/gpu/run turns on for every tpd it starts: TPD_GPU_DEBUG holds
# flags such as "--debug.attn_decode true" (a variable of these scripts; tpd reads none).
DEBUG_FLAGS = os.environ.get("TPD_GPU_DEBUG", "").split()


def eval_logits(model, seqs, vocab, backend, tp=1, chunk=None, kv_type=None, block_size=None, separate=False,
                timeout=600, env=None, rank_env=None, log=None, pp=1, extra=()):
    """Logits [total tokens, vocab] from `mpirun -np tp*pp tpd eval --backend B` (pp pipeline
    stages of tp ranks). rank_env: see run(); log: a list that receives tpd's stderr (its
    INFO lines name the all-reduce used, with extra ["--log-level", "info"]); extra: more
    flags (["--comm", "ipc"])."""
    fd, out = tempfile.mkstemp(prefix="tpd_gpu_eval_", suffix=".f32")
    os.close(fd)
    try:
        args = ["eval", "--model", model, "--backend", backend,
                "--seqs", ";".join(",".join(str(t) for t in s) for s in seqs), "--out", out,
                "--threads", cpu_threads(tp) if backend == "cpu" else 1]
        if chunk:
            args += ["--chunk", chunk]
        if kv_type:
            args += ["--kv-type", kv_type]
        if block_size:
            args += ["--block-size", block_size]
        if separate:
            args.append("--separate")
        if pp != 1:
            args += ["--pp", pp]
        p = run(tp * pp, args + list(extra), timeout, env, rank_env)
        if log is not None:
            log.append(p.stderr)
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
            "--threads", cpu_threads(tp) if backend == "cpu" else 1]
    p = run(tp, args, timeout, env)
    lines = [ln.strip() for ln in p.stdout.splitlines() if ln.strip()]
    ids = next((ln for ln in reversed(lines) if ln.replace(",", "").isdigit()), None)
    if ids is None:
        raise AssertionError(f"no id line in tpd generate output:\n{p.stdout[-2000:]}")
    return [int(x) for x in ids.split(",")]


def list_mode():
    """True when a check script was asked for --list: it prints the names of the checks it
    would record, one a line, and runs nothing (tests/gpu/run names the checks a step did not
    reach from these)."""
    return "--list" in sys.argv


# Checks a plan may run at once (TPD_GPU_JOBS): each is a few short tpd runs on tiny models,
# mostly process start-up and CUDA context creation, so several share the GPU and the 16
# cores well; run_plan(plan, jobs=1) keeps timing-sensitive checks alone.
JOBS = max(1, int(os.environ.get("TPD_GPU_JOBS", "6")))


def cpu_threads(tp):
    """Threads for a CPU-backend reference run: the cores shared among the parallel checks."""
    return max(1, tpd_cli.default_threads(tp) // JOBS)


def run_plan(plan, jobs=None):
    """Runs [(name, fn)], each fn returning (status, detail, values); an exception is a FAIL
    with its message. Up to `jobs` (default JOBS) at once; results are recorded as each ends.
    Under --list prints the names only. Returns the failure count."""
    if list_mode():
        for name, _ in plan:
            print(name)
        return 0

    def one(item):
        name, fn = item
        try:
            status, detail, values = fn()
        except Exception as e:  # noqa: BLE001  (a crash is a failed check, with its output)
            status, detail, values = "FAIL", f"{type(e).__name__}: {str(e)[-1500:]}", {}
        with _record_lock:
            record(name, status, detail, **values)
        return status == "FAIL"

    jobs = JOBS if jobs is None else max(1, jobs)
    if jobs == 1:
        return sum(one(item) for item in plan)
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        return sum(pool.map(one, plan))


_record_lock = threading.Lock()


def run(tp, args, timeout=600, env=None, rank_env=None):
    """mpirun -np tp tpd ARGS DEBUG_FLAGS. rank_env: {VAR: prefix}, each rank getting
    VAR=prefix<rank> (NCCL_HOSTID per rank), set by a shell in front of tpd."""
    args = list(args) + DEBUG_FLAGS
    if rank_env:
        sets = "; ".join(f'export {k}="{v}$OMPI_COMM_WORLD_RANK"' for k, v in rank_env.items())
        cmd = tpd_cli.mpirun_cmd(tp, ["-c", sets + '; exec "$0" "$@"', tpd_cli.tpd_bin()] + list(args), binary="/bin/sh")
    else:
        cmd = tpd_cli.mpirun_cmd(tp, args)
    e = tpd_cli.mpirun_env()
    if env:
        e.update(env)
    p = run_group(cmd, e, min(timeout, CALL_TIMEOUT))
    if p.returncode != 0:
        raise RuntimeError(f"exit {p.returncode}: {p.stderr.strip()[-1200:] or p.stdout.strip()[-1200:]} "
                           f"[command: {' '.join(map(str, cmd))[:400]}]")
    return p


# Each tpd run of a check is cut off after this many seconds (TPD_GPU_CALL_TIMEOUT): a hung
# rank must cost one check, not the step's whole time limit.
CALL_TIMEOUT = int(os.environ.get("TPD_GPU_CALL_TIMEOUT", "120"))


def run_group(cmd, env, timeout):
    """subprocess.run in a process group of its own; on timeout the whole group (mpirun and
    every rank it started) is killed, so no rank lingers holding the GPU, and a RuntimeError
    carries the end of what it had printed."""
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = p.communicate()
        raise RuntimeError(f"timed out after {timeout} s (TPD_GPU_CALL_TIMEOUT), process group killed: "
                           f"{(err or out or '').strip()[-1200:]} [command: {' '.join(map(str, cmd))[:300]}]")
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


def rel_err(a, b):
    """max |a - b| / max |b| (b the reference)."""
    b = np.asarray(b, np.float64)
    return float(np.abs(np.asarray(a, np.float64) - b).max() / max(np.abs(b).max(), 1e-30))
