"""Runs the tpd CLI (`tpd eval`, `tpd generate`) under mpirun for the Python tests and
benchmarks. Knows nothing of tpd's internals: only the command-line contract."""
import os
import re
import shutil
import subprocess
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def tpd_bin():
    """Path of the tpd executable, or None: $TPD_BIN, else $TPD_BUILD_DIR/tpd, else a
    build*/ folder of the source tree."""
    cands = []
    if os.environ.get("TPD_BIN"):
        cands.append(os.environ["TPD_BIN"])
    if os.environ.get("TPD_BUILD_DIR"):
        cands += [os.path.join(os.environ["TPD_BUILD_DIR"], "tpd"),
                  os.path.join(os.environ["TPD_BUILD_DIR"], "daemon", "tpd")]
    if not os.environ.get("TPD_BIN"):
        for d in sorted(os.listdir(ROOT)):
            if d.startswith("build"):
                cands += [os.path.join(ROOT, d, "tpd"), os.path.join(ROOT, d, "daemon", "tpd")]
    for c in cands:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


# Open MPI on a machine without ssh or rsh (the lent GPU machine, a container): an agent named
# and on-node transports only, for the variables the user has not set (as launch/ompi-env).
LONE_MACHINE_OMPI = {
    "OMPI_MCA_plm_rsh_agent": shutil.which("false") or "/bin/false",
    "OMPI_MCA_pml": "ob1",
    "OMPI_MCA_btl": "self,vader",
    "OMPI_MCA_mtl": "^ofi,psm,psm2",
    "OMPI_MCA_osc": "^ucx",
    "OMPI_MCA_btl_base_warn_component_unused": "0",
    "OMPI_MCA_btl_vader_single_copy_mechanism": "none",  # no CMA: sandboxes that deny ptrace refuse it
}


def mpirun_env():
    env = dict(os.environ)
    env["OMPI_MCA_rmaps_base_oversubscribe"] = "1"
    if not shutil.which("ssh") and not shutil.which("rsh"):
        for k, v in LONE_MACHINE_OMPI.items():
            env.setdefault(k, v)
    if os.geteuid() == 0:
        env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
        env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    return env


def mpi_rank(pid):
    """World rank of a process Open MPI started (OMPI_COMM_WORLD_RANK in its environment), or
    None (not an MPI rank, or gone)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
    except OSError:
        return None
    r = env.get(b"OMPI_COMM_WORLD_RANK")
    return int(r) if r is not None else None


def default_threads(tp):
    """All cores for one rank; one thread per rank when several share the machine."""
    return max(1, os.cpu_count() or 1) if tp == 1 else 1


def mpirun_cmd(tp, args, binary=None):
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        raise RuntimeError("mpirun not found")
    # no binding: a rank bound to one core would run its threads on that core alone
    cmd = [mpirun, "--oversubscribe", "--bind-to", "none"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    cmd += ["-np", str(tp), binary or tpd_bin()]
    return cmd + [str(a) for a in args]


def run(tp, args, timeout=300):
    """subprocess.CompletedProcess of `mpirun -np tp tpd ARGS` (text mode); raises with
    the output on a non-zero exit."""
    cmd = mpirun_cmd(tp, args)
    p = subprocess.run(cmd, env=mpirun_env(), capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"command failed ({p.returncode}): {' '.join(cmd)}\n"
                           f"stdout:\n{p.stdout[-4000:]}\nstderr:\n{p.stderr[-4000:]}")
    return p


def eval_logits(model, seqs, vocab, tp=1, chunk=None, separate=False, kv_type=None,
                threads=None, block_size=None, timeout=300, pp=1, extra=()):
    """Logits [total_tokens, vocab] float32 from `tpd eval` for a list of token lists, on
    tp x pp ranks (pp pipeline stages of tp)."""
    fd, out = tempfile.mkstemp(prefix="tpd_eval_", suffix=".f32")
    os.close(fd)
    try:
        args = ["eval", "--model", model, "--seqs", ";".join(",".join(str(t) for t in s) for s in seqs),
                "--out", out, "--threads", threads or default_threads(tp)]
        if chunk:
            args += ["--chunk", chunk]
        if separate:
            args.append("--separate")
        if kv_type:
            args += ["--kv-type", kv_type]
        if block_size:
            args += ["--block-size", block_size]
        if pp != 1:
            args += ["--pp", pp]
        args += list(extra)
        run(tp * pp, args, timeout)
        data = np.fromfile(out, dtype="<f4")
    finally:
        os.unlink(out)
    total = sum(len(s) for s in seqs)
    if data.size != total * vocab:
        raise AssertionError(f"tpd eval wrote {data.size} floats, expected {total}x{vocab}")
    return data.reshape(total, vocab)


TIMING_RE = re.compile(r"timing:\s*prefill_tokens=(\d+)\s+prefill_s=([0-9.eE+-]+)\s+"
                       r"decode_tokens=(\d+)\s+decode_s=([0-9.eE+-]+)")


def generate(model, prompt_ids, n, tp=1, threads=None, timeout=600, extra=(), pp=1):
    """(generated ids, timing dict or None) from `tpd generate --temperature 0 --ids` on
    tp x pp ranks."""
    args = ["generate", "--model", model, "--prompt-ids", ",".join(str(t) for t in prompt_ids),
            "-n", n, "--temperature", 0, "--ids", "--threads", threads or default_threads(tp * pp)]
    args += list(extra)
    if pp != 1:
        args += ["--pp", pp]
    p = run(tp * pp, args, timeout)
    lines = [ln.strip() for ln in p.stdout.splitlines() if ln.strip()]
    ids_line = next((ln for ln in reversed(lines) if re.fullmatch(r"\d+(,\d+)*", ln)), None)
    if ids_line is None:
        raise AssertionError(f"no id line in tpd generate output:\n{p.stdout[-2000:]}")
    ids = [int(x) for x in ids_line.split(",")]
    m = TIMING_RE.search(p.stderr)
    timing = None
    if m:
        timing = {"prefill_tokens": int(m.group(1)), "prefill_s": float(m.group(2)),
                  "decode_tokens": int(m.group(3)), "decode_s": float(m.group(4))}
    return ids, timing
