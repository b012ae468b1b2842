"""Connection exhaustion (issue 15, item 1): `mpirun -np 2 tpd serve` on SmolLM2 at tp 2 on
the CPU, attacked by one local user holding 10,000 idle connections and 1,000 slowloris
connections (a header byte a second, never complete).

While they are held, a legitimate 4-token completion completes within 1 s (on a loaded
machine: within 4x its time with nothing else connected, measured first) and /health
answers 200; rank 0 runs a bounded number of threads; /metrics counts the connections per
uid. The server closes every slowloris connection within the header timeout. With the
attacker at its uid's share, its next connection gets a 503 at once while a second user
(created here, as test_socket_safety.py does) is still served; at the global limit a new
connection gets a 503 at once.

The client side is cheap: non-blocking sockets and one selector. Independent checks: the
kernel's view of the sockets (EOF seen by the client), /proc for rank 0's threads, and the
raw HTTP bytes.
"""
import json
import os
import pwd
import resource
import selectors
import socket
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from test_server_api import Server  # noqa: E402

N_IDLE = 10_000
N_SLOW = 1_000
PER_UID = N_IDLE + N_SLOW + 50   # the attacker's share: room for its own legitimate requests
MAX_CONN = PER_UID + 10          # the global limit: 10 more for everyone else
HEADER_TIMEOUT_S = 3
SLACK_S = 2.0                    # the server's deadline tick, plus a loaded machine
USER = "tpdtest2"
COMPLETION = {"prompt": "The capital of France is", "max_tokens": 4, "temperature": 0}
SLOW_HEADER = b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n" * 4


@pytest.fixture(scope="module")
def fd_room():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = MAX_CONN + 500
    if hard != resource.RLIM_INFINITY and hard < need:
        pytest.skip(f"the open-file hard limit {hard} is below the {need} this test needs")
    resource.setrlimit(resource.RLIMIT_NOFILE, (need if hard == resource.RLIM_INFINITY else hard, hard))
    return need


def second_user():
    """The second user's passwd entry, or None when this test cannot act as one (not root)."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(USER)
    except KeyError:
        if subprocess.run(["useradd", "-M", USER], capture_output=True).returncode:
            return None
        return pwd.getpwnam(USER)


def open_many(sock, n, deadline_s=60.0):
    """n connected non-blocking sockets; a full listen backlog (EAGAIN) is retried."""
    out = []
    t0 = time.monotonic()
    while len(out) < n:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setblocking(False)
        while True:
            try:
                s.connect(sock)
                break
            except BlockingIOError:
                assert time.monotonic() - t0 < deadline_s, f"only {len(out)} of {n} connections in {deadline_s} s"
                time.sleep(0.002)
        out.append(s)
    return out


def http(sock, method, path, body=None, timeout=10.0):
    """One request on a fresh blocking connection: (status, headers+body bytes, seconds)."""
    t0 = time.monotonic()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(sock)
    data = json.dumps(body).encode() if body is not None else b""
    req = (f"{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
           f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n").encode() + data
    try:
        s.sendall(req)
    except (BrokenPipeError, ConnectionResetError):
        pass
    raw = b""
    while True:
        try:
            b = s.recv(65536)
        except ConnectionResetError:
            break
        if not b:
            break
        raw += b
    s.close()
    status = int(raw.split(b" ", 2)[1]) if raw.startswith(b"HTTP/1.1 ") else 0
    return status, raw, time.monotonic() - t0


def body_json(raw):
    return json.loads(raw.split(b"\r\n\r\n", 1)[1])


def metric(text, name):
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return None


def threads_of(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return -1


def all_closed_by_server(socks, within_s):
    """Waits until the server closed every socket (EOF or reset); returns those still open."""
    sel = selectors.DefaultSelector()
    for s in socks:
        sel.register(s, selectors.EVENT_READ)
    t_end = time.monotonic() + within_s
    left = len(socks)
    while left and time.monotonic() < t_end:
        for key, _ in sel.select(timeout=max(0.0, t_end - time.monotonic())):
            try:
                b = key.fileobj.recv(4096)
            except BlockingIOError:
                continue
            except ConnectionResetError:
                b = b""
            if b == b"":
                sel.unregister(key.fileobj)
                left -= 1
    open_ = [k.fileobj for k in sel.get_map().values()]
    sel.close()
    return open_


# As the second user: its own connections, to show it is served while the attacker holds its
# share, and then refused at the global limit.
SECOND_USER_CLIENT = r"""
import json, socket, sys, time
sock, n_hold = sys.argv[1], int(sys.argv[2])
def req(method, path, body=b""):
    t0 = time.monotonic()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.settimeout(20); s.connect(sock)
    try:  # at the limit the server answers 503 on accept and closes: the send may meet a closed peer
        s.sendall((f"{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n"
                   f"Content-Length: {len(body)}\r\n\r\n").encode() + body)
    except (BrokenPipeError, ConnectionResetError):
        pass
    raw = b""
    while True:
        try: b = s.recv(65536)
        except ConnectionResetError: break
        if not b: break
        raw += b
    s.close()
    return {"status": int(raw.split(b" ", 2)[1]) if raw.startswith(b"HTTP/1.1 ") else 0,
            "s": time.monotonic() - t0, "raw": raw.decode(errors="replace")[:600]}
out = {"health": req("GET", "/health"),
       "completion": req("POST", "/v1/completions",
                         json.dumps({"prompt": "The capital of France is", "max_tokens": 4,
                                     "temperature": 0}).encode())}
held = []
for _ in range(n_hold):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.connect(sock); held.append(s)
time.sleep(0.5)  # the server's accept thread counts them
out["at_limit"] = req("GET", "/health")
print(json.dumps(out))
"""


def test_connection_exhaustion(sock_path, fd_room):
    user = second_user()
    # the socket is reachable by the second user: directories 0711 (ours, written by nobody
    # else, as the daemon demands) and the socket 0666
    run_dir = os.path.dirname(sock_path)
    os.makedirs(run_dir, mode=0o711)
    os.chmod(os.path.dirname(run_dir), 0o711)
    os.chmod(run_dir, 0o711)
    srv = Server(sock_path, extra=[
        "--server.max_connections", str(MAX_CONN), "--server.max_connections_per_uid", str(PER_UID),
        "--server.header_timeout_s", str(HEADER_TIMEOUT_S), "--server.idle_timeout_s", "600",
        "--server.socket_mode", "0666"])
    idle, slow, extra = [], [], []
    try:
        rank0 = srv.ranks()[0]
        threads_before = threads_of(rank0)
        # the same request with nothing else connected, for a busy machine's step time:
        # under attack it must take under 1 s, or (on a loaded machine) under 4x this
        solo = []
        for _ in range(3):
            status, raw, took = http(sock_path, "POST", "/v1/completions", COMPLETION)
            assert status == 200, raw[:600]
            solo.append(took)
        bound = max(1.0, 4 * min(solo))

        # ---- 10,000 idle connections and 1,000 slowloris ones
        idle = open_many(sock_path, N_IDLE)
        slow = open_many(sock_path, N_SLOW)
        deadline = time.monotonic() + 30
        while True:  # the server's accept thread has taken them all
            status, raw, _ = http(sock_path, "GET", "/metrics")
            text = raw.split(b"\r\n\r\n", 1)[1].decode()
            if metric(text, "tpd_connections_open") >= N_IDLE + N_SLOW:
                break
            assert time.monotonic() < deadline, text[-2000:]
            time.sleep(0.2)
        assert metric(text, 'tpd_uid_connections_open{uid="%d"}' % os.geteuid()) >= N_IDLE + N_SLOW
        t_first_byte = time.monotonic()
        for s in slow:
            s.send(SLOW_HEADER[:1])
        pos = 1
        # ---- while they are held: a legitimate request and /health, from the same user
        status, raw, took = http(sock_path, "POST", "/v1/completions", COMPLETION)
        assert status == 200, raw[:600]
        assert body_json(raw)["usage"]["completion_tokens"] == 4
        assert took < bound, f"a 4-token completion took {took:.2f} s beside {N_IDLE} idle + {N_SLOW} " \
                             f"slowloris (alone: {min(solo):.2f} s)"
        print(f"\nheld {N_IDLE} idle + {N_SLOW} slowloris: a 4-token completion took {took:.3f} s "
              f"(alone {min(solo):.3f} s)", end="")
        status, raw, took = http(sock_path, "GET", "/health")
        assert status == 200 and took < 1.0, (status, took, raw[:300])
        print(f", /health {took:.3f} s", end="")
        threads = threads_of(rank0)
        assert threads < threads_before + 16, f"rank 0 runs {threads} threads (idle: {threads_before})"
        print(f"; rank 0 threads {threads_before} idle, {threads} under attack")

        # ---- slowloris: a byte a second, never a whole header; each closed by the server
        # within the header timeout of its first byte (the idle ones stay)
        while time.monotonic() - t_first_byte < HEADER_TIMEOUT_S - 0.5:
            time.sleep(1.0)
            for s in slow:
                try:
                    s.send(SLOW_HEADER[pos:pos + 1])
                except OSError:
                    pass
            pos += 1
        left = all_closed_by_server(slow, HEADER_TIMEOUT_S + SLACK_S - (time.monotonic() - t_first_byte))
        assert not left, f"{len(left)} of {N_SLOW} slowloris connections still open " \
                         f"{time.monotonic() - t_first_byte:.1f} s after their first byte"
        print(f"all slowloris closed by {time.monotonic() - t_first_byte:.2f} s after their first byte")
        assert all_closed_by_server(idle[:200], 0.2) == idle[:200], "idle connections were closed"
        status, raw, _ = http(sock_path, "GET", "/metrics")
        text = raw.split(b"\r\n\r\n", 1)[1].decode()
        assert metric(text, 'tpd_connections_timed_out_total{reason="header"}') >= N_SLOW, text[-1500:]

        # ---- the attacker at its uid's share: its next connection gets a fast 503
        extra = open_many(sock_path, PER_UID - N_IDLE)
        time.sleep(0.5)  # the accept thread counts them
        status, raw, took = http(sock_path, "GET", "/health")
        assert status == 503 and took < 1.0, (status, took, raw[:300])
        assert b"Retry-After: 1" in raw and body_json(raw)["error"]["code"] == "too_many_connections"
        print(f"at the uid's share: 503 in {took:.3f} s")

        # ---- a second user is still served, until the global limit
        if user is None:
            pytest.skip("the second-user part needs root (useradd, acting as another uid); the rest passed")
        pw = user
        py = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
        r = subprocess.run([py, "-c", SECOND_USER_CLIENT, sock_path, str(MAX_CONN - PER_UID)],
                           user=pw.pw_uid, group=pw.pw_gid, extra_groups=[], cwd="/", capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0, r.stderr[-2000:]
        out = json.loads(r.stdout)
        assert out["health"]["status"] == 200 and out["health"]["s"] < 1.0, out["health"]
        assert out["completion"]["status"] == 200 and out["completion"]["s"] < bound, out["completion"]
        assert out["at_limit"]["status"] == 503 and out["at_limit"]["s"] < 1.0, out["at_limit"]
        assert "connection limit" in out["at_limit"]["raw"], out["at_limit"]
        print("second uid: /health %.3f s, completion %.3f s, at the global limit 503 in %.3f s" % (
            out["health"]["s"], out["completion"]["s"], out["at_limit"]["s"]))

        status, raw, _ = http(sock_path, "GET", "/metrics")
        assert status == 503  # still at the attacker's share

        # ---- everything released: served again, and the daemon drains and exits 0
        for s in idle + slow + extra:
            s.close()
        deadline = time.monotonic() + 10
        while http(sock_path, "GET", "/health")[0] != 200:
            assert time.monotonic() < deadline, "not served again after the connections closed"
            time.sleep(0.2)
        status, raw, _ = http(sock_path, "GET", "/metrics")
        text = raw.split(b"\r\n\r\n", 1)[1].decode()
        assert metric(text, 'tpd_connections_refused_total{reason="uid_share"}') >= 1
        assert metric(text, 'tpd_connections_refused_total{reason="limit"}') >= 1
        assert srv.stop() == 0, srv.output()[-3000:]
    finally:
        for s in idle + slow + extra:
            s.close()
        srv.stop()


def test_streams_outlive_the_timeouts(sock_path):
    """The header and idle timeouts (1 s each here) never cut a request under way: a stream
    and a non-streamed generation of 1000 tokens are both still open 4 s later (waiting for
    their first token or receiving tokens); a kept-alive connection is closed once idle for 1 s."""
    srv = Server(sock_path, extra=["--server.header_timeout_s", "1", "--server.idle_timeout_s", "1"])
    hold_s = 4.0
    try:
        def start(stream, max_tokens):
            body = json.dumps({"prompt": "Tell me a long story about the sea.", "max_tokens": max_tokens,
                               "temperature": 0, "ignore_eos": True, "stream": stream}).encode()
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(sock_path)
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                      b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            return s

        streamed, plain = start(True, 1000), start(False, 1000)
        t0 = time.monotonic()
        raw, last_token = b"", None
        while time.monotonic() - t0 < hold_s:
            streamed.settimeout(max(0.01, hold_s - (time.monotonic() - t0)))
            try:
                b = streamed.recv(65536)
            except socket.timeout:
                break
            assert b, f"the stream was closed after {time.monotonic() - t0:.2f} s: {raw[-300:]}"
            raw += b
            if b'"text"' in b:
                last_token = time.monotonic() - t0
        assert raw.startswith(b"HTTP/1.1 200 "), raw[:300]
        assert b"data: [DONE]" not in raw, raw[-300:]
        plain.settimeout(0.2)
        try:
            got = plain.recv(65536)
            raise AssertionError(f"the non-streamed request was answered or closed: {got[:300]!r}")
        except socket.timeout:
            pass
        print(f"\nafter {hold_s:.0f} s with timeouts of 1 s: the stream open (last token at "
              f"{'none yet' if last_token is None else f'{last_token:.1f} s'}), the non-streamed request open")
        streamed.close()
        plain.close()

        # a kept-alive connection: answered, then closed by the server after 1 s idle
        s = start(False, 1)
        s.settimeout(60)
        raw = b""
        while b'"completion_tokens":1' not in raw:
            b = s.recv(65536)
            assert b, raw
            raw += b
        t0 = time.monotonic()
        s.settimeout(10)
        assert s.recv(65536) == b""
        idle = time.monotonic() - t0
        s.close()
        assert 0.5 < idle < 3.0, f"kept-alive connection closed after {idle:.2f} s idle"
        print(f"kept-alive connection closed after {idle:.2f} s idle")
        assert srv.stop() == 0, srv.output()[-3000:]
    finally:
        srv.stop()
