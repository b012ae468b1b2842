"""The test cluster of tests/cluster/ from Python: nodes started and stopped with
tests/cluster/start and stop (network, UTS and mount namespaces on this machine), a tpd job
launched on node0 by launch/tpd-launch with a hostfile, as a user on a cluster's first node
would, and the helpers the cluster tests and tests/cluster/run-all share (HTTP over the job's
socket, the ranks of each node)."""
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))

import tpd_cli  # noqa: E402

DIR = os.environ.get("TPD_CLUSTER_DIR", "/run/tpd-cluster")
SMOLLM2 = os.path.join(os.environ.get("TPD_SOURCE_DIR", ROOT), "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
# what a user passes to mpirun on a cluster: the remote agent (ssh there, the namespace
# entering script here), TCP between nodes and shared memory inside one, on the nodes'
# interface, and TCP keepalive on the runtime's own connections (oob_tcp_keepalive_*: with a
# link cut, mpirun and the far node's orted learn it within ~4 s and end the job on both
# sides; by default they would wait 300 s + 9 x 20 s, and the far node's ranks outlive the job)
MPIRUN_ARGS = (f"--mca plm_rsh_agent {HERE}/agent --mca btl self,vader,tcp "
               "--mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 "
               "--mca oob_tcp_keepalive_time 2 --mca oob_tcp_keepalive_intvl 1 --mca oob_tcp_keepalive_probes 2 "
               # the test's nodes share this machine's cores: a rank waiting on the network
               # yields its core (a real node's slots are its own, and Open MPI spins there)
               "--mca mpi_yield_when_idle 1")


class Skip(Exception):
    """The cluster cannot be made here (not root, no namespaces): the reason."""


def start(nodes=2, slots=1, delay_ms=0):
    """Starts the nodes (with delay_ms added to every packet between them: tests/cluster/
    delay-relay); raises Skip with start's reason when namespaces cannot be made."""
    if os.geteuid() != 0:
        raise Skip("needs root for network, UTS and mount namespaces")
    p = subprocess.run([os.path.join(HERE, "start"), "--nodes", str(nodes), "--slots", str(slots), "--dir", DIR,
                        "--delay-ms", str(delay_ms)], capture_output=True, text=True, timeout=120)
    if p.returncode == 77:
        raise Skip(p.stderr.strip())
    if p.returncode != 0:
        raise RuntimeError(f"tests/cluster/start failed ({p.returncode}): {p.stderr}")


def stop():
    subprocess.run([os.path.join(HERE, "stop"), "--dir", DIR], timeout=120)


def rtt_ms(node="node0", address="10.77.0.2", n=20):
    """Median round trip from a node to an address, in ms: a TCP connect to a closed port
    (SYN out, RST back; the nodes have no ping)."""
    code = ("import socket,statistics,time\nts=[]\nfor i in range(%d):\n s=socket.socket();t=time.perf_counter()\n"
            " try: s.connect((%r,9))\n except ConnectionRefusedError: pass\n"
            " ts.append(time.perf_counter()-t);s.close()\nprint(statistics.median(ts)*1000)" % (n, address))
    p = subprocess.run([os.path.join(HERE, "on"), node, sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60)
    return float(p.stdout.strip())


def leftovers():
    """What the cluster left behind: namespaces, links, processes in them (empty: nothing)."""
    out = []
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    out += [ln.split()[0] for ln in ns.splitlines() if ln.startswith("tpdc-")]
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    out += [ln.split(": ")[1].split("@")[0] for ln in links.splitlines() if ": tpdc-" in ln]
    relay = subprocess.run(["pgrep", "-f", "tests/cluster/delay-relay"], capture_output=True, text=True).stdout
    out += [f"delay-relay pid {p}" for p in relay.split()]
    return out


def node_pids(node, comm=None):
    """Processes inside a node (its network namespace), optionally only those named comm."""
    p = subprocess.run(["ip", "netns", "pids", f"tpdc-{node}"], capture_output=True, text=True)
    pids = [int(x) for x in p.stdout.split()]
    if comm is None:
        return pids
    out = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() == comm:
                    out.append(pid)
        except OSError:
            pass
    return out


def rank_pids(node):
    """{world rank: pid} of the tpd ranks on a node."""
    out = {}
    for pid in node_pids(node, "tpd"):
        r = tpd_cli.mpi_rank(pid)
        if r is not None:
            out[r] = pid
    return out


def hostfile(slots, nodes=2, addresses=None):
    """A hostfile in the cluster's folder: nodes by name (or by the addresses given), `slots` each."""
    path = os.path.join(DIR, "hostfile.job")
    names = addresses or [f"node{k}" for k in range(nodes)]
    with open(path, "w") as f:
        f.writelines(f"{n} slots={slots}\n" for n in names)
    return path


def write_config(model, tp, pp, hosts, step_timeout_s=5, extra=""):
    path = os.path.join(DIR, "job.toml")
    with open(path, "w") as f:
        f.write(f'[model]\npath = "{model}"\nname = "m"\nmax_ctx = 1024\n'
                f"[parallel]\ntp = {tp}\npp = {pp}\nthreads = 1\nstep_timeout_s = {step_timeout_s}\n"
                f'[server]\nsocket = "/tmp/tpd/tpd.sock"\ndrain_timeout_s = 5\n'
                f'[cache]\nkv_tokens = 4096\n'
                f'[launch]\nbind = "none"\nhostfile = "{hosts}"\nmpirun_args = "{MPIRUN_ARGS}"\n{extra}')
    return path


class Job:
    """launch/tpd-launch CONFIG run on node0; its output in DIR/job.log; the socket, as node0
    has it at /tmp/tpd/tpd.sock, reached from here through node0's /tmp folder."""

    def __init__(self, config, wait=True, timeout=120):
        self.sock = os.path.join(DIR, "node0", "tmp", "tpd", "tpd.sock")
        self.log_path = os.path.join(DIR, "job.log")
        self.log = open(self.log_path, "w")
        env = tpd_cli.mpirun_env()
        env["TPD_BIN"] = tpd_cli.tpd_bin()
        self.t0 = time.time()
        self.proc = subprocess.Popen([os.path.join(HERE, "on"), "node0", os.path.join(ROOT, "launch", "tpd-launch"),
                                      config], env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.ready_s = None
        if wait:
            self.wait_healthy(timeout)

    def output(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def wait_healthy(self, timeout=120):
        while time.time() - self.t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the job exited {self.proc.returncode}:\n{self.output()[-4000:]}")
            if os.path.exists(self.sock):
                try:
                    if request(self.sock, "GET", "/health", timeout=2)[0] == 200:
                        self.ready_s = time.time() - self.t0
                        return
                except OSError:
                    pass
            time.sleep(0.1)
        raise RuntimeError(f"the job was not healthy after {timeout} s:\n{self.output()[-4000:]}")

    def wait_exit(self, timeout):
        """The job's exit status, or None when it still runs after timeout seconds."""
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        return self.proc.returncode

    def stop(self, timeout=60):
        """SIGTERM to tpd-launch (rank 0 drains), then SIGKILL to its session."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


class _UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


def request(sock, method, path, body=None, timeout=120):
    """(status, parsed JSON or text) of one request over the job's socket."""
    c = _UnixHTTP(sock, timeout)
    try:
        c.request(method, path, body=json.dumps(body) if body is not None else None,
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read().decode(errors="replace")
        try:
            return r.status, json.loads(data)
        except ValueError:
            return r.status, data
    finally:
        c.close()


def stream(sock, body, on_event=None, timeout=120):
    """Streams a completion: (list of SSE data payloads, error or None). An error is how the
    stream ended without [DONE]: a connection cut, a timeout. on_event(i, payload) per event."""
    events = []
    c = _UnixHTTP(sock, timeout)
    try:
        c.request("POST", "/v1/completions", body=json.dumps(dict(body, stream=True)),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            return events, f"status {r.status}: {r.read()[:300]!r}"
        while True:
            line = r.fp.readline()
            if not line:
                return events, "connection closed before [DONE]"
            line = line.decode(errors="replace").rstrip("\r\n")
            if line.startswith("data: "):
                events.append(line[6:])
                if on_event:
                    on_event(len(events) - 1, line[6:])
                if line[6:] == "[DONE]":
                    return events, None
    except (OSError, http.client.HTTPException) as e:
        return events, f"{type(e).__name__}: {e}"
    finally:
        c.close()


def reference_ids(model, prompt_ids, n):
    """Greedy ids of `tpd generate` at tp 1 on this machine (no cluster): the reference."""
    ids, _ = tpd_cli.generate(model, prompt_ids, n, tp=1, threads=1, timeout=300)
    return ids


def cluster_generate(model, prompt_ids, n, tp, pp, hosts):
    """Greedy ids of `tpd generate` over the cluster (mpirun on node0 with the hostfile)."""
    env = tpd_cli.mpirun_env()
    cmd = [os.path.join(HERE, "on"), "node0", shutil.which("mpirun"), "--allow-run-as-root", "--bind-to", "none",
           "--hostfile", hosts, "--map-by", "slot", "-np", str(tp * pp)] + MPIRUN_ARGS.split() + [
           tpd_cli.tpd_bin(), "generate", "--model", model, "--prompt-ids", ",".join(map(str, prompt_ids)),
           "-n", str(n), "--temperature", "0", "--ids", "--threads", "1", "--pp", str(pp)]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise RuntimeError(f"cluster generate failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")
    lines = [ln.strip() for ln in p.stdout.splitlines() if ln.strip()]
    return [int(x) for x in lines[-1].split(",")]
