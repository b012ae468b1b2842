"""launch/tpd-launch as an operator uses it: SIGTERM to its whole process group (what Ctrl-C
in a terminal, systemd's control-group kill or a job scheduler sends) drains every stream
to [DONE] and the job exits 0, and finds rank 0 every time (20 group signals to a job of
stand-in ranks under the real mpirun), a second signal ends it at once, and the Slurm
launcher builds an srun command (checked with a stand-in srun, since no Slurm is
installed here)."""
import os
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time

import pytest

from test_server_api import MODEL, client, sse_events, tpd_cli  # noqa: F401
from test_server_lifecycle import stream_to_done

ROOT = os.environ.get("TPD_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
LAUNCH = os.path.join(ROOT, "launch", "tpd-launch")


def write_config(d, sock, extra=""):
    path = os.path.join(d, "tpd.toml")
    with open(path, "w") as f:
        f.write(f'[model]\npath = "{MODEL}"\nmax_ctx = 1024\n[parallel]\ntp = 2\nthreads = 1\nbackend = "cpu"\n'
                f'[server]\nsocket = "{sock}"\ndrain_timeout_s = 60\n[launch]\nbind = "none"\n{extra}')
    return path


@pytest.fixture
def setup():
    if tpd_cli.tpd_bin() is None:
        pytest.skip("tpd binary not built (set TPD_BIN)")
    if not os.path.exists(MODEL):
        pytest.skip(f"{MODEL} absent (run ./launch/get-model smollm2)")
    d = tempfile.mkdtemp(prefix="tpd_launch_")
    sock = os.path.join(d, "run", "tpd.sock")
    env = tpd_cli.mpirun_env()
    env["TPD_BIN"] = tpd_cli.tpd_bin()
    return d, sock, env


def launch(d, sock, env):
    """tpd-launch in a session of its own (its process group is the one signals go to),
    once the daemon answers /health."""
    cfg = write_config(d, sock)
    log = os.path.join(d, "launch.log")
    with open(log, "w") as lf:
        proc = subprocess.Popen([LAUNCH, cfg], env=env, stdout=lf, stderr=subprocess.STDOUT, start_new_session=True)
    wait_healthy(proc, sock, log)
    return proc, log


def wait_healthy(proc, sock, log, timeout=180):
    t0 = time.time()
    while time.time() - t0 < timeout:
        assert proc.poll() is None, open(log).read()[-3000:]
        if os.path.exists(sock):
            try:
                with client(sock) as c:
                    if c.get("/health").status_code == 200:
                        return
            except Exception:
                pass
        time.sleep(0.2)
    raise AssertionError("daemon not healthy:\n" + open(log).read()[-3000:])


def test_group_sigterm_drains_and_exits_0(setup):
    d, sock, env = setup
    proc, log = launch(d, sock, env)
    try:
        results, started = {}, threading.Semaphore(0)
        threads = [threading.Thread(target=stream_to_done, args=(sock, i, started, results)) for i in range(4)]
        for t in threads:
            t.start()
        for _ in threads:
            assert started.acquire(timeout=120), "streams did not start"
        os.killpg(proc.pid, signal.SIGTERM)  # the whole group, as Ctrl-C or a service manager would
        for t in threads:
            t.join(120)
        rc = proc.wait(90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    out = open(log).read()
    assert rc == 0, out[-3000:]
    for i, body in results.items():
        events = sse_events(body)
        assert events and events[-1] == "[DONE]", f"stream {i} cut short: {body[-300:]}"
    assert not os.path.exists(sock)


# tpd as tpd-launch sees it: `config ... --get KEY` answers, and `serve` under mpirun as the
# ranks behave on a signal: rank 0 catches SIGTERM, drains (here: at once) and exits 0; the
# others ignore it and leave after rank 0. Killed by mpirun instead, the job exits non-zero.
STAND_IN = r"""#!/bin/bash
d=$(dirname "$0")
if [ "$1" = config ]; then
  for k; do :; done
  case "$k" in parallel.tp) echo 2 ;; parallel.pp) echo 1 ;; launch.bind) echo none ;; *) echo ;; esac
  exit 0
fi
if [ "${OMPI_COMM_WORLD_RANK:-}" = 0 ]; then
  trap 'touch "$d/drained"; exit 0' TERM INT
  touch "$d/started"
else
  trap '' TERM INT
fi
until [ -e "$d/drained" ]; do sleep 0.02; done
"""

# A tr that hands its output on line by line, as one preempted mid-output on a busy machine
# does: the launcher once read rank 0's environment through `tr | grep -q` under pipefail,
# and when grep had its match before tr was done, tr died of SIGPIPE, rank 0 was "not
# found" and the launcher stopped the whole job instead (issue 24: 1 run in 4).
SLOW_TR = r"""#!/usr/bin/env python3
import sys, time
data = sys.stdin.buffer.read().replace(b"\0", b"\n")
for line in data.splitlines(keepends=True):
    sys.stdout.buffer.write(line)
    sys.stdout.buffer.flush()
    time.sleep(0.005)
"""


def descendants(pid):
    """Every process below pid (pids)."""
    kids = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return [int(k) for k in kids] + [g for k in kids for g in descendants(int(k))]


def kill_tree(pid):
    """SIGKILL to pid and every process below it (mpirun runs in a session of its own, out
    of reach of a signal to the launcher's group)."""
    for p in [pid] + descendants(pid):
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_group_sigterm_finds_rank0_every_time(tmp_path):
    """20 group SIGTERMs, each to a fresh job (tpd-launch, the real mpirun, stand-in ranks):
    each must reach rank 0, which drains, and the job must exit 0."""
    if shutil.which("mpirun") is None:
        pytest.skip("mpirun not installed")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "tr").write_text(SLOW_TR)
    (bindir / "tr").chmod(0o755)
    env = tpd_cli.mpirun_env()
    env["PATH"] = f"{bindir}{os.pathsep}{env['PATH']}"
    cfg = tmp_path / "tpd.toml"
    cfg.write_text("")
    failures, t0 = [], time.monotonic()
    for i in range(20):
        d = tmp_path / f"run{i}"
        d.mkdir()
        (d / "tpd").write_text(STAND_IN)
        (d / "tpd").chmod(0o755)
        env["TPD_BIN"] = str(d / "tpd")
        log = open(d / "launch.log", "w")
        proc = subprocess.Popen([LAUNCH, str(cfg)], env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            deadline = time.monotonic() + 60
            while not (d / "started").exists():
                assert proc.poll() is None and time.monotonic() < deadline, (d / "launch.log").read_text()
                time.sleep(0.02)
            os.killpg(proc.pid, signal.SIGTERM)
            rc = proc.wait(60)
        finally:
            if proc.poll() is None:
                kill_tree(proc.pid)
            log.close()
        if rc != 0:  # (rank 0 drains either way: mpirun, signalled, passes SIGTERM on first)
            failures.append(f"run {i}: exit {rc}\n" + (d / "launch.log").read_text()[-1500:])
    print(f"20 group signals in {time.monotonic() - t0:.1f} s, {len(failures)} failed")
    assert not failures, "\n".join(failures)


def test_second_signal_stops_at_once(setup):
    d, sock, env = setup
    proc, log = launch(d, sock, env)
    try:
        with client(sock) as c:  # a long request keeps the drain busy
            threading.Thread(target=lambda: _ignore(c.post, "/v1/completions", json={
                "prompt": "Once", "max_tokens": 900, "ignore_eos": True}), daemon=True).start()
            time.sleep(1.0)
            os.killpg(proc.pid, signal.SIGTERM)
            time.sleep(0.5)
            t0 = time.time()
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(30)
        assert time.time() - t0 < 30
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError("the job outlived a second SIGTERM by 30 s")


def _ignore(fn, *a, **kw):
    try:
        fn(*a, **kw)
    except Exception:
        pass


def test_srun_launcher_command(setup):
    d, sock, env = setup
    cfg = write_config(d, sock, 'launcher = "srun"\nmpirun_args = "--partition=gpu"\n')
    bindir = os.path.join(d, "bin")
    os.makedirs(bindir)
    record = os.path.join(d, "srun.args")
    fake = os.path.join(bindir, "srun")
    with open(fake, "w") as f:  # records its arguments, then behaves like a finished job
        f.write(f'#!/bin/sh\nprintf "%s\\n" "$@" > "{record}"\nexit 0\n')
    os.chmod(fake, os.stat(fake).st_mode | stat.S_IXUSR)
    env["PATH"] = bindir + os.pathsep + env["PATH"]
    r = subprocess.run([LAUNCH, cfg, "--threads", "1"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    args = open(record).read().split("\n")[:-1]
    assert args[:2] == ["-n", "2"], args
    assert "--cpu-bind=none" in args and "--partition=gpu" in args, args
    i = args.index("serve")
    assert os.path.basename(args[i - 1]) == "tpd" and args[i + 1:] == ["--config", cfg, "--threads", "1"], args


def test_pipeline_ranks_stage_major(setup):
    """[parallel] tp 2, pp 2 with a hostfile: mpirun starts tp x pp = 4 ranks filling each
    host's slots in order (stage-major: a stage's TP group on one host)."""
    d, sock, env = setup
    hostfile = os.path.join(d, "hosts")
    with open(hostfile, "w") as f:
        f.write("node1 slots=2\nnode2 slots=2\n")
    cfg = write_config(d, sock, f'hostfile = "{hostfile}"\n')
    with open(cfg) as f:
        text = f.read().replace("[parallel]\n", "[parallel]\npp = 2\n")
    with open(cfg, "w") as f:
        f.write(text)
    bindir = os.path.join(d, "bin")
    os.makedirs(bindir, exist_ok=True)
    record = os.path.join(d, "mpirun.args")
    fake = os.path.join(bindir, "mpirun")
    with open(fake, "w") as f:
        f.write(f'#!/bin/sh\nprintf "%s\\n" "$@" > "{record}"\nexit 0\n')
    os.chmod(fake, os.stat(fake).st_mode | stat.S_IXUSR)
    env["PATH"] = bindir + os.pathsep + env["PATH"]
    r = subprocess.run([LAUNCH, cfg], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    args = open(record).read().split("\n")[:-1]
    assert args[:2] == ["-np", "4"], args
    assert args[args.index("--hostfile") + 1] == hostfile and args[args.index("--map-by") + 1] == "slot", args
    assert "--oversubscribe" not in args, args
    # a job that ends abnormally kills its ranks at once: they ignore SIGTERM, so Open MPI's
    # 1 s between SIGTERM and SIGKILL only delayed the end (issue 31)
    i = args.index("odls_base_sigkill_timeout")
    assert args[i - 1:i + 2] == ["--mca", "odls_base_sigkill_timeout", "0"], args
