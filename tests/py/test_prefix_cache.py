"""Automatic prefix caching through `tpd serve` (the scheduler-level checks on SmolLM2 at tp 1
are tests/test_prefix_cache.c).

- Greedy output with `cache.prefix_caching` on equals output with it off, for 32 requests
  sharing prefixes in every pattern (identical prompts, a shared system prompt with
  different questions, multi-turn conversations that resend the answer, a prefix ending
  mid-block, requests arriving together with the same new prefix), at tp 1, 2 and 3 on a
  tiny generated model (qwen2: 9 query / 3 KV heads); each response's
  usage.prompt_tokens_details.cached_tokens is what the access pattern predicts, and the
  Prometheus counters add up to it.
- Under cache pressure (a KV cache of 960 tokens, 100 requests with distinct 200-token
  prefixes, 16 at a time, with preemption), every request returns the text it returns alone
  with the cache off, no block leaks (the gauges return to idle), and a second pass that
  asks about each of ten long-evicted prefixes twice hits exactly on the second ask. The
  SmolLM2 version with 1,000-token prefixes and a 4,096-token cache is
  bench/prefix_cache/pressure.py (on demand: too slow for CI on 2 cores).
- On SmolLM2 at tp 2: chat and completions, streamed (include_usage) or not, report the
  cached tokens of a repeated long system prompt.
"""
import concurrent.futures as cf
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "reference"))

import tpd_cli  # noqa: E402

httpx = pytest.importorskip("httpx")

BS = 16
TINY = "qwen2-gguf-q8_0"
SMOLLM2 = os.path.join(os.environ.get("TPD_SOURCE_DIR", ROOT), "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


class Daemon:
    """`mpirun -np tp tpd serve` on a model, with prefix caching on or off."""

    def __init__(self, model, tp, caching, kv_tokens=4096, ctx=256, extra=()):
        if tpd_cli.tpd_bin() is None:
            pytest.skip("tpd binary not built (set TPD_BIN)")
        self.dir = tempfile.mkdtemp(prefix="tpd_pfx_")
        self.sock = os.path.join(self.dir, "tpd.sock")
        self.log = open(os.path.join(self.dir, "log"), "w+")
        args = ["serve", "--model", model, "--socket", self.sock, "--threads", 1, "--ctx", ctx,
                "--kv-tokens", kv_tokens, "--cache.prefix_caching", "true" if caching else "false",
                "--model-name", "m", *extra]
        self.proc = subprocess.Popen(tpd_cli.mpirun_cmd(tp, args), env=tpd_cli.mpirun_env(),
                                     stdout=self.log, stderr=subprocess.STDOUT)
        t0 = time.time()
        while time.time() - t0 < 180:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tpd serve exited {self.proc.returncode}:\n{self.output()}")
            if os.path.exists(self.sock):
                try:
                    if self.client().get("/health").status_code == 200:
                        return
                except httpx.TransportError:
                    pass
            time.sleep(0.1)
        raise RuntimeError(f"tpd serve not healthy:\n{self.output()}")

    def output(self):
        self.log.seek(0)
        return self.log.read()[-4000:]

    def client(self):
        return httpx.Client(transport=httpx.HTTPTransport(uds=self.sock), base_url="http://localhost", timeout=300)

    def complete(self, prompt, max_tokens=8, **kw):
        with self.client() as c:
            r = c.post("/v1/completions", json={"prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                                                "ignore_eos": True, **kw})
        assert r.status_code == 200, r.text
        return r.json()

    def tokenize(self, text):
        with self.client() as c:
            r = c.post("/tokenize", json={"prompt": text, "add_special_tokens": False})
        assert r.status_code == 200, r.text
        return r.json()["tokens"]

    def metrics(self):
        with self.client() as c:
            text = c.get("/metrics").text
        return {m.group(1): float(m.group(2)) for m in re.finditer(r"^(tpd_[a-z_]+) ([0-9.e+-]+)$", text, re.M)}

    def stop(self):
        if self.proc.poll() is None:
            pid = None
            for p in subprocess.run(["pgrep", "-P", str(self.proc.pid)], capture_output=True,
                                    text=True).stdout.split():
                try:
                    with open(f"/proc/{p}/environ", "rb") as f:
                        if b"OMPI_COMM_WORLD_RANK=0\0" in f.read():
                            pid = int(p)
                except OSError:
                    pass
            os.kill(pid or self.proc.pid, 15)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        out = self.output()
        assert "Sanitizer" not in out and "runtime error:" not in out, out


@pytest.fixture(scope="module")
def tiny():
    import make_tiny
    return make_tiny.ensure()[TINY]


def ids(seed, n, vocab=500):
    """n token ids from a seed (distinct seeds share no block). Ids stay clear of the tiny
    model's special tokens (256+)."""
    x, out = seed * 2654435761 + 1, []
    for _ in range(n):
        x = (x * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        out.append((x >> 33) % 250 + 1)
    return out


def blocks_before_last(n):
    """Prompt tokens a fully cached prefix can supply: whole blocks, never the last token's."""
    return (n - 1) // BS * BS


def run_patterns(d):
    """The 32 requests; returns ({name: text}, {name: cached}, {name: (lo, hi) expected})."""
    text, cached, expect = {}, {}, {}

    def go(name, prompt, lo, hi=None):
        r = d.complete(prompt)
        text[name] = r["choices"][0]["text"]
        cached[name] = r["usage"]["prompt_tokens_details"]["cached_tokens"]
        assert r["usage"]["prompt_tokens"] == len(prompt)
        expect[name] = (lo, lo if hi is None else hi)
        return r

    sys_p, mid, fresh = ids(7, 48), ids(8, 37), ids(9, 70)
    same = ids(1, 40)
    # phase 1: the first of each shared kind, alone
    go("same0", same, 0)
    go("sys0", sys_p + ids(100, 9), 0)
    go("mid0", mid + ids(200, 3), 0)
    # phase 2: 21 requests at once: repeats of those, and a new 70-token prefix 8 times
    jobs = [("same%d" % i, same, blocks_before_last(40)) for i in range(1, 4)]
    jobs += [("sys%d" % i, sys_p + ids(100 + i, 9 + i), 48) for i in range(1, 8)]
    jobs += [("mid%d" % i, mid + ids(200 + i, 3 + 2 * i), 32) for i in range(1, 4)]
    with cf.ThreadPoolExecutor(21) as ex:
        futs = [ex.submit(go, n, p, lo) for n, p, lo in jobs]
        # arriving together: a later one may find blocks an earlier one already filled
        futs += [ex.submit(go, "fresh%d" % i, fresh + ids(300 + i, 4), 0, 64) for i in range(8)]
        for f in futs:
            f.result()
    # phase 3: two conversations of four turns, each resending the last prompt, its answer
    # (as the server tokenizes it) and new words
    convs = [ids(400, 30), ids(401, 39)]
    prev_len = [0, 0]  # the previous turn's prompt: its whole blocks are cached
    for t in range(4):
        def turn(c):
            prompt = convs[c]
            lo = prev_len[c] // BS * BS
            r = go(f"conv{c}.{t}", prompt, lo, blocks_before_last(len(prompt)) if t else 0)
            prev_len[c] = len(prompt)
            return prompt + d.tokenize(r["choices"][0]["text"]) + ids(500 + 10 * t + c, 7)
        with cf.ThreadPoolExecutor(2) as ex:
            convs = list(ex.map(turn, range(2)))
    assert len(text) == 32
    return text, cached, expect


def idle(d):
    """The metrics once the step loop has published the end of the last request (a response
    can arrive just before the gauges are updated)."""
    for _ in range(100):
        m = d.metrics()
        if m["tpd_kv_blocks_used"] == 0 and m["tpd_running_sequences"] == 0:
            return m
        time.sleep(0.1)
    raise AssertionError(f"not idle: {m}")


@pytest.mark.parametrize("tp", [1, 2, 3])
def test_cached_equals_uncached(tiny, tp):
    d = Daemon(tiny, tp, caching=False)
    try:
        off, off_cached, _ = run_patterns(d)
        m = idle(d)
        assert m["tpd_prefix_cache_hits_total"] == 0 and m["tpd_prefix_cache_blocks"] == 0
    finally:
        d.stop()
    assert set(off_cached.values()) == {0}
    d = Daemon(tiny, tp, caching=True)
    try:
        on, cached, expect = run_patterns(d)
        m = idle(d)
    finally:
        d.stop()
    for name in on:
        lo, hi = expect[name]
        assert lo <= cached[name] <= hi, (name, cached[name], expect[name])
    assert sum(cached.values()) >= 3 * 32 + 7 * 48 + 3 * 32  # the repeats of phase 2 at least
    assert m["tpd_prefix_cache_hits_total"] == sum(cached.values())
    assert m["tpd_prompt_tokens_computed_total"] == m["tpd_prefix_cache_queries_total"] - sum(cached.values())
    assert m["tpd_kv_blocks_free"] == 4096 // BS  # idle cached blocks are reclaimable
    assert m["tpd_prefix_cache_blocks"] > 0
    assert on == off


KV = 960


def test_pressure(tiny):
    """100 distinct 200-token prefixes through a 960-token cache, 16 at a time: four fit when
    admitted (13 blocks each of 60) and grow to 16 blocks as they generate, so some are
    preempted."""
    prompts = [ids(1000 + i, 200) + ids(5000 + i, 6) for i in range(100)]
    d = Daemon(tiny, 1, caching=False, kv_tokens=KV)
    try:
        alone = [d.complete(p, max_tokens=40)["choices"][0]["text"] for p in prompts]
    finally:
        d.stop()
    d = Daemon(tiny, 1, caching=True, kv_tokens=KV, extra=["--max-running", 16])
    try:
        with cf.ThreadPoolExecutor(16) as ex:
            res = list(ex.map(lambda p: d.complete(p, max_tokens=40), prompts))
        assert [r["choices"][0]["text"] for r in res] == alone
        assert all(r["usage"]["prompt_tokens_details"]["cached_tokens"] == 0 for r in res)  # all distinct
        m = idle(d)
        assert m["tpd_preemptions_total"] > 0  # the pressure was real
        assert m["tpd_kv_blocks_free"] == KV // BS  # nothing leaked
        assert m["tpd_prefix_cache_hits_total"] == 0
        # ten of the first prefixes, evicted long ago, each asked about twice in a row: the
        # first ask misses, the second finds the prefix's 12 whole blocks
        hits = []
        for i in range(10):
            for k in range(2):
                r = d.complete(prompts[i][:200] + ids(7000 + 2 * i + k, 6))
                hits.append(r["usage"]["prompt_tokens_details"]["cached_tokens"])
        assert hits == [0, 200 // BS * BS] * 10
        m2 = idle(d)
        assert m2["tpd_prefix_cache_hits_total"] == sum(hits)
        assert m2["tpd_kv_blocks_free"] == KV // BS
    finally:
        d.stop()


def test_usage_reports_cached_tokens_smollm2():
    if not os.path.exists(SMOLLM2):
        pytest.skip(f"{SMOLLM2} absent (run ./launch/get-model smollm2)")
    d = Daemon(SMOLLM2, 2, caching=True, ctx=1024)
    try:
        system = "You are a careful assistant. " + " ".join(f"Rule {i}: answer briefly and politely." for i in range(30))
        with d.client() as c:
            def chat(q, stream):
                body = {"model": "m", "messages": [{"role": "system", "content": system},
                                                   {"role": "user", "content": q}],
                        "max_tokens": 4, "temperature": 0}
                if not stream:
                    r = c.post("/v1/chat/completions", json=body)
                    assert r.status_code == 200, r.text
                    return r.json()["usage"]
                body.update(stream=True, stream_options={"include_usage": True})
                usage = None
                with c.stream("POST", "/v1/chat/completions", json=body) as r:
                    for line in r.iter_lines():
                        if line.startswith("data: {"):
                            usage = json.loads(line[6:]).get("usage") or usage
                return usage
            u1 = chat("What is 2+2?", False)
            u2 = chat("Name a colour.", True)
            u3 = chat("Name a colour.", False)
        assert u1["prompt_tokens_details"]["cached_tokens"] == 0
        n_sys = u1["prompt_tokens"]  # the shared part is at most the system message's tokens
        assert 0 < u2["prompt_tokens_details"]["cached_tokens"] <= n_sys
        assert u2["prompt_tokens_details"]["cached_tokens"] >= (u1["prompt_tokens"] - 20) // BS * BS
        assert u3["prompt_tokens_details"]["cached_tokens"] == blocks_before_last(u3["prompt_tokens"])
        r = d.complete("Once upon a time, " * 20, max_tokens=2)
        r2 = d.complete("Once upon a time, " * 20, max_tokens=2, stream=False)
        assert r["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        assert r2["usage"]["prompt_tokens_details"]["cached_tokens"] == blocks_before_last(r2["usage"]["prompt_tokens"])
    finally:
        d.stop()
