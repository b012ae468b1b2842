"""`tpd serve` at tp 2 x pp 2 (4 ranks: two pipeline stages of two tensor-parallel ranks) on
SmolLM2-135M: the openai client against llama.cpp's greedy continuations
(tests/data/smollm2_greedy.json), 32 concurrent greedy requests each equal to the same
request alone, preemption in a small KV cache with unchanged outputs, a storm of
cancelled streams leaving nothing held, SIGTERM draining in-flight streams with every rank
exiting 0, and a dead (SIGKILL) or stopped (SIGSTOP) rank of the last stage ending the job.
The same checks run at pp 1 for a baseline where they are cheap (the `pp` parameter)."""
import json
import os
import signal
import socket
import subprocess
import threading
import time

import pytest

from test_server_api import FX, NAME, Server, client, metric, oai, reliable_prefix, sse_events
from test_server_lifecycle import stream_to_done, vanishing_client

PP2 = ["--parallel.tp", "2", "--pp", "2"]
NP = 4


def complete(c, prompt, n):
    r = c.post("/v1/completions", json={"prompt": prompt, "max_tokens": n, "temperature": 0, "ignore_eos": True})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["text"]


def concurrent(sock, prompts, n):
    out, errors = {}, []

    def worker(i):
        try:
            with client(sock) as c:
                out[i] = complete(c, prompts[i], n)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(f"{i}: {e!r}")
    ts = [threading.Thread(target=worker, args=(i,)) for i in range(len(prompts))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(300)
    assert not errors, errors[:5]
    return [out[i] for i in range(len(prompts))]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from test_server_api import MODEL
    import tpd_cli
    if tpd_cli.tpd_bin() is None:
        pytest.skip("tpd binary not built (set TPD_BIN)")
    if not os.path.exists(MODEL):
        pytest.skip(f"{MODEL} absent (run ./launch/get-model smollm2)")
    d = tmp_path_factory.mktemp("pps")
    os.chmod(d, 0o700)
    s = Server(os.path.join(str(d), "tpd.sock"), extra=PP2 + ["--max-running", "32"], np=NP)
    yield s
    assert s.stop() == 0, s.output()[-3000:]


def test_openai_client_greedy_matches_llamacpp(server):
    llama_cpp = pytest.importorskip("llama_cpp")
    from test_server_api import MODEL
    llama = llama_cpp.Llama(model_path=MODEL, vocab_only=True, verbose=False)
    c = oai(server.sock)
    checked = 0
    for case in FX["cases"]:
        ids = reliable_prefix(case)[:16]
        if len(ids) < 3:
            continue
        r = c.completions.create(model=NAME, prompt=case["prompt_ids"], max_tokens=len(ids), temperature=0,
                                 extra_body={"ignore_eos": True})
        assert r.choices[0].text == llama.detokenize(ids).decode(errors="replace"), case["name"]
        assert r.usage.completion_tokens == len(ids)
        checked += 1
    assert checked >= 3
    n = 0
    for ch in c.completions.create(model=NAME, prompt="List:", max_tokens=6, stream=True, temperature=0,
                                   extra_body={"ignore_eos": True}, stream_options={"include_usage": True}):
        if ch.usage:
            n = ch.usage.completion_tokens
    assert n == 6
    r = c.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "Say hi"}], max_tokens=5)
    assert 1 <= r.usage.completion_tokens <= 5


def test_32_concurrent_equal_alone(server):
    prompts = [f"Item {i}: the story of a {['cat', 'ship', 'town', 'tree'][i % 4]} that" for i in range(32)]
    with client(server.sock) as c:
        alone = [complete(c, p, 6) for p in prompts]
    together = concurrent(server.sock, prompts, 6)
    diff = [i for i in range(32) if together[i] != alone[i]]
    assert not diff, [(i, alone[i], together[i]) for i in diff[:4]]


def test_cancellation_storm_leaves_nothing_held(server):
    errors = []
    threads = [threading.Thread(target=vanishing_client, args=(server.sock, i, errors)) for i in range(48)]
    for t in threads:
        t.start()
        time.sleep(0.005)
    for t in threads:
        t.join(300)
    assert not errors, errors[:5]
    with client(server.sock) as c:
        deadline = time.time() + 60
        while time.time() < deadline:
            held = (metric(c, "tpd_kv_blocks_used"), metric(c, "tpd_running_sequences"), metric(c, "tpd_queue_depth"))
            if held == (0, 0, 0):
                break
            time.sleep(0.25)
        assert held == (0, 0, 0), f"after 48 disconnects: kv blocks used, running, queued = {held}"
        assert complete(c, "The sea is", 4)


def test_preemption_keeps_outputs(sock_path):
    """A 256-token KV cache and 8 requests of ~70 tokens each: sequences are preempted and
    recomputed, and every output equals the same request alone."""
    srv = Server(sock_path, extra=PP2 + ["--kv-tokens", "256", "--block-size", "16", "--max-running", "8"], np=NP)
    try:
        prompts = [f"Tell me about number {i} and why" for i in range(8)]
        with client(sock_path) as c:
            alone = [complete(c, p, 56) for p in prompts]
            p0 = metric(c, "tpd_preemptions_total")
        together = concurrent(sock_path, prompts, 56)
        with client(sock_path) as c:
            assert metric(c, "tpd_preemptions_total") > p0, "no preemption happened: the test shows nothing"
        assert together == alone
    finally:
        assert srv.stop() == 0, srv.output()[-3000:]


def test_sigterm_drains_and_every_rank_exits_0(sock_path):
    srv = Server(sock_path, extra=PP2, np=NP)
    results, started = {}, threading.Semaphore(0)
    threads = [threading.Thread(target=stream_to_done, args=(sock_path, i, started, results)) for i in range(4)]
    for t in threads:
        t.start()
    for _ in threads:
        assert started.acquire(timeout=120), "streams did not start"
    srv.terminate()  # SIGTERM to rank 0
    for t in threads:
        t.join(120)
    for i, body in results.items():
        events = sse_events(body)
        assert events and events[-1] == "[DONE]", f"stream {i} cut short: {body[-500:]}"
        reasons = [json.loads(e)["choices"][0].get("finish_reason") for e in events[:-1]
                   if json.loads(e).get("choices")]
        assert "length" in reasons, f"stream {i} did not run to max_tokens"
    assert srv.proc.wait(60) == 0, srv.output()[-3000:]
    assert not os.path.exists(sock_path), "socket file left behind"
    srv.stop()


def _kill_all(srv, ranks):
    if srv.proc.poll() is None:
        for p in ranks.values():
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        srv.proc.kill()
    srv.stopped = True


def test_sigkill_of_last_stage_rank_ends_the_job_within_10s(sock_path):
    srv = Server(sock_path, extra=PP2, np=NP)
    ranks = srv.ranks()
    assert NP - 1 in ranks, ranks
    try:
        with client(sock_path) as c:  # busy when it dies
            threading.Thread(target=lambda: _try(c.post, "/v1/completions", json={
                "prompt": "Once", "max_tokens": 200, "ignore_eos": True}), daemon=True).start()
            time.sleep(0.5)
            t0 = time.time()
            os.kill(ranks[NP - 1], signal.SIGKILL)
            try:
                rc = srv.proc.wait(10)
            except subprocess.TimeoutExpired:
                raise AssertionError("the job was still running 10 s after the last stage's rank died")
        assert rc != 0
        assert time.time() - t0 < 10
    finally:
        _kill_all(srv, ranks)


@pytest.mark.parametrize("victim", [1, 3], ids=["stage0-tp1", "stage1-tp1"])
def test_stopped_rank_anywhere_ends_the_job(sock_path, victim):
    """SIGSTOP on a rank of an idle daemon: the heartbeat through the pipeline stalls, and
    within parallel.step_timeout_s + 5 s the job ends non-zero, saying why."""
    timeout = 5
    srv = Server(sock_path, extra=PP2 + ["--parallel.step_timeout_s", str(timeout)], np=NP)
    ranks = srv.ranks()
    try:
        os.kill(ranks[victim], signal.SIGSTOP)
        try:
            rc = srv.proc.wait(timeout + 5)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the job still runs {timeout + 5} s after rank {victim} stopped")
        assert rc != 0
        assert "did not finish within parallel.step_timeout_s" in srv.output(), srv.output()[-2000:]
    finally:
        _kill_all(srv, ranks)


def _try(fn, *a, **kw):
    try:
        fn(*a, **kw)
    except Exception:  # noqa: BLE001 - the daemon dies under it
        pass
