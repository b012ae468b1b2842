"""Two nodes on one machine (tests/cluster/start: network, UTS and mount namespaces joined by
veths; Open MPI reaching node1 through tests/cluster/agent; TCP between the nodes, shared
memory inside one): `launch/tpd-launch` with a hostfile serves SmolLM2 at tp 1 x pp 2, one
stage per node. The startup log places the ranks on their nodes (MPI_COMM_TYPE_SHARED across
namespaces), one greedy request equals tp 1 on one machine, and a SIGKILL of node1's rank
ends the job within parallel.step_timeout_s + 5 s, naming the rank and its node, leaving no
process on either node. A SIGSTOP of node1's rank ends a second job the same way, and its
streams in flight get an error event (the step deadline on rank 0 tells them first). The fixture removes the cluster even when a test fails. Skips (with
the reason) when not root or namespaces cannot be made. The longer checks: tests/cluster/run-all."""
import json
import os
import signal
import sys
import threading
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import cluster as C  # noqa: E402

STEP_TIMEOUT_S = 5


@pytest.fixture(scope="module")
def nodes():
    if not os.path.exists(C.SMOLLM2):
        pytest.skip(f"{C.SMOLLM2} absent (run ./launch/get-model smollm2)")
    if C.tpd_cli.tpd_bin() is None:
        pytest.skip("tpd binary not built (set TPD_BIN)")
    try:
        C.start(nodes=2, slots=1)
    except C.Skip as e:
        pytest.skip(str(e))
    try:
        yield
    finally:
        C.stop()
        assert not C.leftovers(), f"left behind: {C.leftovers()}"


@pytest.fixture(scope="module")
def job(nodes):
    j = C.Job(C.write_config(C.SMOLLM2, tp=1, pp=2, hosts=C.hostfile(1), step_timeout_s=STEP_TIMEOUT_S))
    try:
        yield j
    finally:
        j.stop()
        assert_no_sanitizer_report(j)


def assert_no_sanitizer_report(job):
    """Under the sanitizer build, a report in the job's output fails the test."""
    out = job.output()
    assert "Sanitizer" not in out and "runtime error:" not in out, out[-6000:]


def prompt_case():
    with open(os.path.join(C.ROOT, "tests", "data", "smollm2_greedy.json")) as f:
        return json.load(f)["cases"][0]["prompt_ids"]


def test_placement_in_startup_log(job):
    out = job.output()
    assert "placement: 2 nodes: node0: rank 0; node1: rank 1" in out, out[-3000:]
    assert "spans" not in out  # each TP group (one rank) is on one node


def test_greedy_equals_tp1_on_one_node(job):
    prompt = prompt_case()
    want = C.reference_ids(C.SMOLLM2, prompt, 12)
    status, text = C.request(job.sock, "POST", "/detokenize", {"tokens": want})
    assert status == 200, text
    status, r = C.request(job.sock, "POST", "/v1/completions",
                          {"prompt": prompt, "max_tokens": 12, "temperature": 0, "ignore_eos": True})
    assert status == 200, r
    assert r["choices"][0]["text"] == text["prompt"], (r, text)


def stream_in_flight(job):
    """A long greedy stream, once its first tokens came: (its thread, {events, error} once it ends)."""
    started = threading.Event()
    result = {}

    def client():
        result["events"], result["error"] = C.stream(
            job.sock, {"prompt": "Once upon a time", "max_tokens": 900, "temperature": 0, "ignore_eos": True},
            on_event=lambda i, e: started.set() if i >= 4 else None, timeout=60)
    t = threading.Thread(target=client)
    t.start()
    assert started.wait(60), "the stream did not start"
    return t, result


def test_sigkill_of_node1_rank_ends_the_job(job):
    ranks = C.rank_pids("node1")
    assert list(ranks) == [1], ranks
    t, result = stream_in_flight(job)
    t0 = time.time()
    os.kill(ranks[1], signal.SIGKILL)
    rc = job.wait_exit(STEP_TIMEOUT_S + 5)
    took = time.time() - t0
    print(f"SIGKILL of node1's rank: job exit after {took:.2f} s (rc {rc})")
    assert rc is not None, f"the job still runs {STEP_TIMEOUT_S + 5} s after node1's rank died"
    assert rc != 0
    out = job.output()
    assert "rank 1" in out and "node1" in out, out[-3000:]
    t.join(30)
    assert not t.is_alive(), "the client still waits after the job ended"
    assert result["error"] is not None and result["events"][-1:] != ["[DONE]"], "the cut stream ended as if complete"
    for node in ("node0", "node1"):
        deadline = time.time() + 5
        while time.time() < deadline and (C.node_pids(node, "tpd") or C.node_pids(node, "orted")):
            time.sleep(0.1)
        assert not C.node_pids(node, "tpd"), f"a rank still runs on {node}"
        assert not C.node_pids(node, "orted"), f"orted still runs on {node}"


def test_sigstop_of_node1_rank_sends_an_error_event(nodes):
    job = C.Job(C.write_config(C.SMOLLM2, tp=1, pp=2, hosts=C.hostfile(1), step_timeout_s=STEP_TIMEOUT_S))
    try:
        t, result = stream_in_flight(job)
        t0 = time.time()
        os.kill(C.rank_pids("node1")[1], signal.SIGSTOP)
        rc = job.wait_exit(STEP_TIMEOUT_S + 5)
        print(f"SIGSTOP of node1's rank: job exit after {time.time() - t0:.2f} s (rc {rc})")
        assert rc is not None and rc != 0, f"the job still runs {STEP_TIMEOUT_S + 5} s after node1's rank stopped"
        assert "did not finish within parallel.step_timeout_s" in job.output(), job.output()[-3000:]
        t.join(30)
        last = json.loads(result["events"][-1])
        assert last.get("error", {}).get("code") == "job_failed", result["events"][-3:]
        assert_no_sanitizer_report(job)
    finally:
        job.stop(5)
        for p in C.node_pids("node1", "tpd"):
            os.kill(p, signal.SIGKILL)

