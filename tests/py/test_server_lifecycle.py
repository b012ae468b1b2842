"""The daemon under stress and at the end of its life, over the Unix socket with
`mpirun -np 2 tpd serve`: 200 clients that vanish mid-prefill and mid-decode leave no KV
block, sequence or queue entry behind (read from /metrics); SIGTERM under load finishes
the in-flight streams, refuses new work, every rank exits 0 and the socket is gone;
killing rank 1 ends the job with a non-zero status within 10 seconds."""
import json
import os
import signal
import socket
import threading
import time


from test_server_api import Server, client, metric, sse_events


def request_bytes(prompt, max_tokens, stream=True):
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": stream,
                       "ignore_eos": True}).encode()
    return (b"POST /v1/completions HTTP/1.1\r\nHost: tpd\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


def stream_to_done(sock, i, started, results):
    """A streaming greedy request of 48 tokens; releases `started` at its first event and
    stores the whole answer in results[i] once [DONE] (or the end of the connection) came."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(120)
    s.connect(sock)
    s.sendall(request_bytes(f"Count to twenty: {i}", 48))
    data, signalled = b"", False
    while True:
        b = s.recv(65536)
        if not b:
            break
        data += b
        if not signalled and b"data: " in data:
            signalled = True
            started.release()
        if b"data: [DONE]" in data:
            break
    s.close()
    results[i] = data.decode(errors="replace")


def vanishing_client(sock, i, errors):
    """Sends a streaming request and hangs up: even ones right after sending (the request
    is queued or in prefill), odd ones after the first streamed token (decode)."""
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(240)
        s.connect(sock)
        prompt = "tell me a long story about the sea " * (1 + (i % 16))
        s.sendall(request_bytes(prompt, 400))
        if i % 2:
            got = b""
            while b"data: " not in got:
                b = s.recv(4096)
                if not b:
                    break
                got += b
        s.close()
    except OSError as e:  # a refused connection would be a failure too
        errors.append(f"client {i}: {e}")


def test_200_disconnects_leave_nothing_held(sock_path):
    srv = Server(sock_path, extra=["--max-running", "32", "--step-tokens", "64"])
    try:
        errors = []
        threads = [threading.Thread(target=vanishing_client, args=(sock_path, i, errors)) for i in range(200)]
        for t in threads:
            t.start()
            time.sleep(0.005)
        for t in threads:
            t.join(300)
        assert not errors, errors[:5]
        with client(sock_path) as c:
            deadline = time.time() + 60
            while time.time() < deadline:
                held = (metric(c, "tpd_kv_blocks_used"), metric(c, "tpd_running_sequences"), metric(c, "tpd_queue_depth"))
                if held == (0, 0, 0):
                    break
                time.sleep(0.25)
            assert held == (0, 0, 0), f"after 200 disconnects: kv blocks used, running, queued = {held}"
            # and the daemon still answers
            r = c.post("/v1/completions", json={"prompt": "The sea is", "max_tokens": 4, "temperature": 0})
            assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 4
    finally:
        assert srv.stop() == 0, srv.output()[-3000:]


def test_sigterm_under_load_drains_then_all_ranks_exit_0(sock_path):
    srv = Server(sock_path)
    results, started = {}, threading.Semaphore(0)

    threads = [threading.Thread(target=stream_to_done, args=(sock_path, i, started, results)) for i in range(4)]
    for t in threads:
        t.start()
    for _ in threads:
        assert started.acquire(timeout=120), "streams did not start"
    srv.terminate()  # SIGTERM to rank 0
    time.sleep(0.5)
    refused = False
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(sock_path)
        s.close()
    except OSError:
        refused = True
    assert refused, "a new connection was accepted after SIGTERM"
    for t in threads:
        t.join(120)
    for i, body in results.items():
        events = sse_events(body)
        assert events and events[-1] == "[DONE]", f"stream {i} cut short: {body[-500:]}"
        chunks = [json.loads(e) for e in events[:-1]]
        reasons = [c["choices"][0].get("finish_reason") for c in chunks if c.get("choices")]
        assert "length" in reasons, f"stream {i} did not run to max_tokens: {reasons[-3:]}"
    assert srv.proc.wait(60) == 0, srv.output()[-3000:]
    assert not os.path.exists(sock_path), "socket file left behind"
    srv.stop()


def test_killing_rank1_ends_the_job_nonzero_within_10s(sock_path):
    srv = Server(sock_path)
    ranks = srv.ranks()
    assert 1 in ranks, ranks
    with client(sock_path) as c:  # busy when it dies
        threading.Thread(target=lambda: _ignore(c.post, "/v1/completions",
                                                json={"prompt": "Once", "max_tokens": 200, "ignore_eos": True}),
                         daemon=True).start()
        time.sleep(0.5)
        t0 = time.time()
        os.kill(ranks[1], signal.SIGKILL)
        try:
            rc = srv.proc.wait(10)
        except Exception:
            srv.proc.kill()
            raise AssertionError("the job was still running 10 s after rank 1 died")
    assert rc != 0
    assert time.time() - t0 < 10
    srv.stopped = True


def _ignore(fn, *a, **kw):
    try:
        fn(*a, **kw)
    except Exception:
        pass
