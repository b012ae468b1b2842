#!/usr/bin/env python3
"""The CUDA path as a running job, on one GPU:
- the startup all-reduce at tp 2 over each communicator (IPC, NCCL with NCCL_HOSTID per rank,
  MPI staging): the job starts (gpu_comm_init checks the sums exactly) and names the path;
- the watchdog: a rank stopped with SIGSTOP during decode ends the job non-zero within the
  configured timeout (parallel.step_timeout_s over IPC; parallel.comm_timeout_s over NCCL, where the
  all-reduce watchdog of comm/watchdog.c sees the collective never finish);
- the start-up check of the memory plan against the GPU's free memory: 2^28 KV tokens are
  refused on every rank before the weights are read, naming the GPU;
- `tpd serve` on the GPU (tp 2, both ranks on the GPU) answering the openai client over its
  Unix socket: greedy completions equal to llama.cpp's (tests/data/smollm2_greedy.json), a
  streamed chat answer;
- compute-sanitizer memcheck and racecheck on one short `tpd generate` at tp 1 (a tiny Q4_K_M
  model: 17-token prefill, 4 decode steps): zero errors.
SmolLM2-135M Q4_1 ($TPD_SMOLLM2, see gpu_common.py) where present, else a tiny model (the
serve check is then weaker and says so).

Usage: check_runtime.py [--list] [--only=startup,preflight,watchdog,serve,sanitizer]"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from gpu_common import (BACKEND, DEBUG_FLAGS, ROOT, SMOLLM2, gpu_present, list_mode, record, run,
                        run_group, run_plan, tpd_cli)

sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
import tpd_cli  # noqa: E402

FIXTURE = os.path.join(ROOT, "tests", "data", "smollm2_greedy.json")
NEAR_TIE = 0.75
TINY = "llama_kq-gguf-q4_k_m"  # quantized matmuls, GQA; a byte-level tokenizer
NCCL_RANK_ENV = {"NCCL_HOSTID": "tpd-rank-"}
NCCL_ENV = {"NCCL_SOCKET_IFNAME": "lo", "NCCL_IB_DISABLE": "1"}
COMMS = {  # label: (env, rank_env, what rank 0 must log, tpd's --comm)
    "ipc": ({}, None, "all-reduce ipc", "ipc"),
    "nccl (NCCL_HOSTID per rank)": (NCCL_ENV, NCCL_RANK_ENV, "all-reduce nccl", "nccl"),
    "mpi staging": ({}, None, "all-reduce mpi", "mpi"),
}
WATCHDOG_TIMEOUT = 10  # seconds
WATCHDOG_MARGIN = 15   # the job must be gone within timeout + margin


def model():
    """(path, is_smollm2)."""
    if os.path.exists(SMOLLM2):
        return SMOLLM2, True
    import refs
    return refs.paths()[TINY], False


def context(smol):
    """The daemon's context: 2048 for SmolLM2, the tiny models' trained 256 (tpd refuses more)."""
    return 2048 if smol else 256


def startup(label):
    env, rank_env, want, comm = COMMS[label]

    def fn():
        path, _ = model()
        p = run(2, ["generate", "--model", path, "--backend", BACKEND, "--prompt-ids", "1,2,3,4,5,6,7,8", "-n", 4,
                    "--temperature", 0, "--ids", "--ignore-eos", "--threads", 1, "--comm", comm,
                    "--log-level", "info"], 180, env, rank_env)
        if BACKEND == "cuda" and want not in p.stderr:
            return "FAIL", f"rank 0 did not report '{want}': {p.stderr.strip()[-800:]}", {}
        line = next((ln for ln in p.stderr.splitlines() if "all-reduce" in ln), "")
        return "PASS", f"started, sums checked; {line[line.find('all-reduce'):].split(';')[0]}", {}
    return fn


def preflight_gpu_memory():
    """A plan that cannot fit the GPU (2^28 KV tokens) is refused before any weight is read,
    by every rank, naming the GPU and its free memory (daemon/preflight.c, issue 28)."""
    def fn():
        path, smol = model()
        d = tempfile.mkdtemp(prefix="tpd_gpu_pre_")
        os.chmod(d, 0o700)
        t0 = time.monotonic()
        cmd = tpd_cli.mpirun_cmd(2, ["serve", "--model", path, "--socket", os.path.join(d, "s.sock"),
                                     "--threads", 1, "--backend", BACKEND, "--ctx", context(smol),
                                     "--kv-tokens", 268435456] + DEBUG_FLAGS)
        p = run_group(cmd, tpd_cli.mpirun_env(), 120)
        took = time.monotonic() - t0
        shutil.rmtree(d, ignore_errors=True)
        want = "memory plan: GPU" if BACKEND == "cuda" else "memory plan:"
        if p.returncode == 0 or want not in p.stderr:
            return "FAIL", f"exit {p.returncode}, no '{want}': {p.stderr.strip()[-800:]}", {}
        if "loading" in p.stderr.lower() and "%" in p.stderr:
            return "FAIL", f"weights were read before the refusal: {p.stderr.strip()[-800:]}", {}
        line = next(ln for ln in p.stderr.splitlines() if want in ln)
        return "PASS", f"refused in {took:.1f} s (mpirun included): {line.strip()[-300:]}", {
            "seconds": round(took, 2)}
    return fn


class Serve:
    """`mpirun -np 2 tpd serve` on the GPU; output to a file."""

    def __init__(self, path, sock, ctx, extra=(), env=None, rank_env=None):
        self.sock, self.ctx = sock, ctx
        self.log = tempfile.NamedTemporaryFile(prefix="tpd_gpu_serve_", suffix=".log", delete=False)
        args = ["serve", "--model", path, "--socket", sock, "--threads", 1, "--model-name", "m", "--ctx", ctx,
                "--backend", BACKEND, "--log-level", "info", *extra, *DEBUG_FLAGS]
        if rank_env:
            sets = "; ".join(f'export {k}="{v}$OMPI_COMM_WORLD_RANK"' for k, v in rank_env.items())
            cmd = tpd_cli.mpirun_cmd(2, ["-c", sets + '; exec "$0" "$@"', tpd_cli.tpd_bin()] + args, binary="/bin/sh")
        else:
            cmd = tpd_cli.mpirun_cmd(2, args)
        e = tpd_cli.mpirun_env()
        e.update(env or {})
        self.proc = subprocess.Popen(cmd, env=e, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def output(self):
        with open(self.log.name, errors="replace") as f:
            return f.read()

    def wait_healthy(self, timeout=240):
        import httpx
        t0 = time.time()
        while time.time() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tpd serve exited {self.proc.returncode}: {self.output()[-3000:]}")
            if os.path.exists(self.sock):
                try:
                    with httpx.Client(transport=httpx.HTTPTransport(uds=self.sock), base_url="http://localhost",
                                      timeout=10) as c:
                        if c.get("/health").status_code == 200:
                            return
                except httpx.TransportError:
                    pass
            time.sleep(0.3)
        raise RuntimeError(f"tpd serve not healthy after {timeout} s: {self.output()[-3000:]}")

    def ranks(self):
        """{rank: pid} of the tpd processes under mpirun (through the /bin/sh in front, if any)."""
        out, todo = {}, [self.proc.pid]
        while todo:
            pid = todo.pop()
            kids = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
            todo += [int(k) for k in kids]
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
                with open(f"/proc/{pid}/comm") as f:
                    comm = f.read().strip()
            except OSError:
                continue
            if comm == "tpd" and b"OMPI_COMM_WORLD_RANK" in env:
                out[int(env[b"OMPI_COMM_WORLD_RANK"])] = pid
        return out

    def kill(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
            self.proc.wait()
        os.unlink(self.log.name)


def stream_forever(sock, ctx, chunks, stop):
    """Streamed completions filling most of the context (ctx), one after another until stop is
    set or the job dies (on a GPU one tiny-model completion is over in a second, before the
    watchdog check has stopped a rank); counts their chunks; chunks[1] gets the HTTP status."""
    import httpx
    body = {"prompt": "Once upon a time", "max_tokens": ctx - 48, "stream": True, "ignore_eos": True,
            "temperature": 0}
    try:
        with httpx.Client(transport=httpx.HTTPTransport(uds=sock), base_url="http://localhost", timeout=600) as c:
            while not stop.is_set():
                with c.stream("POST", "/v1/completions", json=body) as r:
                    chunks[1] = r.status_code
                    if r.status_code != 200:
                        return
                    for line in r.iter_lines():
                        if line.startswith("data:"):
                            chunks[0] += 1
                        if stop.is_set():
                            return
    except Exception:  # noqa: BLE001  (the job is killed under it: expected)
        pass


def watchdog(extra, env, rank_env, expect):
    def fn():
        path, smol = model()
        d = tempfile.mkdtemp(prefix="tpd_gpu_wd_")
        srv = Serve(path, os.path.join(d, "s.sock"), context(smol), extra, env, rank_env)
        stop, chunks = threading.Event(), [0, None]
        try:
            srv.wait_healthy()
            t = threading.Thread(target=stream_forever, args=(srv.sock, srv.ctx, chunks, stop), daemon=True)
            t.start()
            t0 = time.time()
            while chunks[0] < 8 and time.time() - t0 < 60 and srv.proc.poll() is None:
                time.sleep(0.05)
            if chunks[0] < 8:
                return ("FAIL", f"decode did not start streaming ({chunks[0]} chunks, HTTP status {chunks[1]}): "
                        f"{srv.output()[-1500:]}", {})
            ranks = srv.ranks()
            if 1 not in ranks:
                return "FAIL", f"rank 1 not found among mpirun's children ({ranks})", {}
            os.kill(ranks[1], signal.SIGSTOP)
            t_stop = time.time()
            try:
                rc = srv.proc.wait(WATCHDOG_TIMEOUT + WATCHDOG_MARGIN)
            except subprocess.TimeoutExpired:
                return ("FAIL", f"the job still runs {WATCHDOG_TIMEOUT + WATCHDOG_MARGIN} s after rank 1 stopped "
                        f"(decode had streamed {chunks[0]} chunks): {srv.output()[-1500:]}", {})
            elapsed = time.time() - t_stop
            out = srv.output()
            why = next((ln.strip() for ln in out.splitlines() if expect in ln), None)
            ok = rc != 0 and why is not None
            return ("PASS" if ok else "FAIL",
                    f"rank 1 stopped after {chunks[0]} streamed chunks; job ended after {elapsed:.1f} s with exit {rc}"
                    f" (timeout {WATCHDOG_TIMEOUT} s); " + (why[-300:] if why else f"no '{expect}' in: {out[-1200:]}"),
                    dict(elapsed=elapsed))
        finally:
            stop.set()
            srv.kill()
            shutil.rmtree(d, ignore_errors=True)
    return fn


def serve_openai():
    def fn():
        try:
            import httpx
            import openai
        except ImportError as e:
            return "FAIL", f"openai/httpx not importable ({e}): carry build-gpu-wheels (tests/gpu/fetch-deps)", {}
        path, smol = model()
        d = tempfile.mkdtemp(prefix="tpd_gpu_serve_")
        srv = Serve(path, os.path.join(d, "s.sock"), context(smol))
        try:
            srv.wait_healthy()
            c = openai.OpenAI(base_url="http://localhost/v1", api_key="unused", max_retries=0,
                              http_client=httpx.Client(transport=httpx.HTTPTransport(uds=srv.sock), timeout=180))
            notes = []
            if smol:
                fx = json.load(open(FIXTURE))
                for case in fx["cases"]:
                    n = next((i for i, g in enumerate(case["top2_gap"]) if g < NEAR_TIE), len(case["top2_gap"]))
                    if n < 3:
                        continue
                    r = c.completions.create(model="m", prompt=case["prompt_ids"], max_tokens=n, temperature=0,
                                             extra_body={"ignore_eos": True})
                    text = r.choices[0].text
                    # llama.cpp's text for all n_gen tokens starts with the text of the first n
                    if r.usage.completion_tokens != n or not text or not case["generated_text"].startswith(text):
                        return ("FAIL", f"{case['name']}: {r.usage.completion_tokens} tokens {text!r} is not the start "
                                f"of llama.cpp's {case['generated_text'][:200]!r}", {})
                    notes.append(f"{case['name']} {n} tokens = llama.cpp")
            else:
                r = c.completions.create(model="m", prompt="abc", max_tokens=8, temperature=0,
                                         extra_body={"ignore_eos": True})
                if r.usage.completion_tokens != 8 or r.choices[0].finish_reason != "length":
                    return "FAIL", f"tiny model: {r}", {}
                notes.append("tiny model (SmolLM2 absent): 8 tokens, no reference text")
            if smol:
                pieces = [ch.choices[0].delta.content or "" for ch in c.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "Say hello."}], max_tokens=12, temperature=0,
                    stream=True) if ch.choices]
                what = "chat"
            else:  # the tiny models have no chat template (a chat request is a 400 naming that)
                pieces = [ch.choices[0].text or "" for ch in c.completions.create(
                    model="m", prompt="abc", max_tokens=12, temperature=0, stream=True,
                    extra_body={"ignore_eos": True}) if ch.choices]
                what = "completion"
            if not "".join(pieces):
                return "FAIL", f"the streamed {what} is empty", {}
            notes.append(f"streamed {what} {len(pieces)} chunks")
            comm = next((ln[ln.find("all-reduce"):].split(";")[0] for ln in srv.output().splitlines()
                         if "all-reduce" in ln), "")
            return "PASS", "; ".join(notes) + f"; {comm}", {}
        finally:
            srv.kill()
            shutil.rmtree(d, ignore_errors=True)
    return fn


def sanitizer(tool):
    def fn():
        cs = shutil.which("compute-sanitizer") or (os.path.exists("/usr/local/cuda/bin/compute-sanitizer")
                                                   and "/usr/local/cuda/bin/compute-sanitizer")
        if not cs:
            return "FAIL", "compute-sanitizer not found (PATH, /usr/local/cuda/bin)", {}
        import refs
        path = refs.paths()[TINY]  # the same kernels as SmolLM2's, at a size racecheck gets through quickly
        # a singleton MPI_Init (no mpirun): compute-sanitizer follows the process it starts
        cmd = [cs, "--tool", tool, "--error-exitcode", "9", tpd_cli.tpd_bin(), "generate", "--model", path,
               "--backend", "cuda", "--prompt-ids", "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17", "-n", "4",
               "--temperature", "0", "--ids", "--ignore-eos", *DEBUG_FLAGS]
        p = subprocess.run(cmd, env=tpd_cli.mpirun_env(), capture_output=True, text=True, timeout=240)
        out = p.stdout + p.stderr
        summary = next((ln.strip() for ln in out.splitlines() if "SUMMARY" in ln), "no summary line")
        ok = p.returncode == 0 and ("0 errors" in summary or "0 hazards" in summary)
        return "PASS" if ok else "FAIL", f"exit {p.returncode}; {summary}" + ("" if ok else f": {out[-1500:]}"), {}
    return fn


def main():
    parts = [a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--only=")]
    parts = parts[0].split(",") if parts else ["startup", "preflight", "watchdog", "serve", "sanitizer"]
    plan = []
    if "preflight" in parts:
        plan.append(("preflight: a KV plan beyond the GPU's free memory is refused before the weights",
                     preflight_gpu_memory()))
    if "startup" in parts:
        plan += [(f"startup all-reduce tp2 one GPU {label}", startup(label)) for label in COMMS]
    if "watchdog" in parts:
        plan += [("watchdog: SIGSTOP rank 1 in decode, ipc, parallel.step_timeout_s",
                  watchdog(["--parallel.step_timeout_s", WATCHDOG_TIMEOUT, "--comm", "ipc"], {}, None,
                           "parallel.step_timeout_s")),
                 ("watchdog: SIGSTOP rank 1 in decode, nccl, parallel.comm_timeout_s",
                  watchdog(["--parallel.step_timeout_s", 300, "--comm", "nccl",
                            "--parallel.comm_timeout_s", WATCHDOG_TIMEOUT], NCCL_ENV, NCCL_RANK_ENV,
                           "parallel.comm_timeout_s") if BACKEND == "cuda" else
                  (lambda: ("SKIP", "dry run on the CPU backend: the all-reduce watchdog is the GPU communicator's",
                            {})))]
    if "serve" in parts:
        plan.append(("tpd serve tp2 on the GPU answers the openai client", serve_openai()))
    if "sanitizer" in parts:
        dry = BACKEND != "cuda"  # a dry run on the CPU backend has no device code to check
        plan += [(f"compute-sanitizer {t} tpd generate tp1",
                  (lambda: ("SKIP", "dry run on the CPU backend", {})) if dry else sanitizer(t))
                 for t in ("memcheck", "racecheck")]
    if not list_mode() and not gpu_present():
        for name, _ in plan:
            record(name, "SKIP", "no GPU")
        return 0
    return 1 if run_plan(plan, jobs=1) else 0


if __name__ == "__main__":
    sys.exit(main())
