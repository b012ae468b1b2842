"""`tpd serve` end to end: `mpirun -np 2 tpd serve` on SmolLM2-135M-Instruct, spoken to over
its Unix socket by the `openai` Python client (httpx with a UDS transport), raw httpx, raw
sockets and `curl --unix-socket`.

Independent references: llama.cpp (llama-cpp-python) tokenizes and detokenizes, and its
greedy continuations are in tests/data/smollm2_greedy.json; jinja2 renders the model's chat
template read from the GGUF by the `gguf` package. Stop strings are checked against the
reference text cut by hand.
"""
import functools
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "reference"))

import tpd_cli  # noqa: E402

httpx = pytest.importorskip("httpx")
openai = pytest.importorskip("openai")

MODEL = os.path.join(os.environ.get("TPD_SOURCE_DIR", ROOT), "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
FIXTURE = os.path.join(ROOT, "tests", "data", "smollm2_greedy.json")
NAME = "smollm2"
CTX = 1024
NEAR_TIE = 0.75  # see test_smollm2_llamacpp.py: below this top-2 gap the argmax may flip

with open(FIXTURE) as _f:
    FX = json.load(_f)


# ------------------------------------------------------------------------------ harness

class Server:
    """One `mpirun -np 2 tpd serve` (np ranks); output goes to a file (read on failure)."""

    def __init__(self, sock, extra=(), wait=True, np=2):
        self.sock = sock
        self.stopped = False
        self.log = tempfile.NamedTemporaryFile(prefix="tpd_serve_", suffix=".log", delete=False)
        args = ["serve", "--model", MODEL, "--socket", sock, "--threads", 1, "--model-name", NAME,
                "--ctx", CTX, *extra]
        self.proc = subprocess.Popen(tpd_cli.mpirun_cmd(np, args), env=tpd_cli.mpirun_env(),
                                     stdout=self.log, stderr=subprocess.STDOUT)
        if wait:
            self.wait_healthy()

    def output(self):
        with open(self.log.name, errors="replace") as f:
            return f.read()

    def wait_healthy(self, timeout=180):
        t0 = time.time()
        while time.time() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tpd serve exited {self.proc.returncode}:\n{self.output()[-4000:]}")
            if os.path.exists(self.sock):
                try:
                    with client(self.sock) as c:
                        if c.get("/health").status_code == 200:
                            return
                except httpx.TransportError:
                    pass
            time.sleep(0.2)
        raise RuntimeError(f"tpd serve not healthy after {timeout} s:\n{self.output()[-4000:]}")

    def ranks(self):
        """{rank: pid} of the tpd processes mpirun started."""
        out = {}
        pids = subprocess.run(["pgrep", "-P", str(self.proc.pid)], capture_output=True, text=True).stdout.split()
        for pid in pids:
            r = tpd_cli.mpi_rank(pid)
            if r is not None:
                out[r] = int(pid)
        return out

    def terminate(self):
        """SIGTERM to rank 0, as a service manager would send it: it drains and every rank
        exits 0 (SIGTERM to mpirun itself makes mpirun kill the job and exit 1)."""
        pid = self.ranks().get(0)
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
        else:
            self.proc.send_signal(signal.SIGTERM)

    def stop(self, timeout=90):
        if self.stopped:
            return self.proc.returncode
        self.stopped = True
        if self.proc.poll() is None:
            self.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        out = self.output()
        # under the sanitizer build, a report in the daemon's output fails the test
        assert "Sanitizer" not in out and "runtime error:" not in out, out[-6000:]
        if os.environ.get("TPD_KEEP_LOGS") is None:
            os.unlink(self.log.name)
        return self.proc.returncode


def client(sock, timeout=120):
    return httpx.Client(transport=httpx.HTTPTransport(uds=sock), base_url="http://localhost", timeout=timeout)


def oai(sock):
    return openai.OpenAI(base_url="http://localhost/v1", api_key="unused", max_retries=0,
                         http_client=httpx.Client(transport=httpx.HTTPTransport(uds=sock), timeout=120))


def raw_http(sock, data, read_until_close=True, timeout=30):
    """Sends bytes on a fresh connection; returns (status, whole answer)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(sock)
    try:
        s.sendall(data)
    except (BrokenPipeError, ConnectionResetError):
        pass
    out = b""
    while True:
        try:
            b = s.recv(65536)
        except (ConnectionResetError, socket.timeout):
            break
        if not b:
            break
        out += b
    s.close()
    status = int(out.split(b" ", 2)[1]) if out.startswith(b"HTTP/1.1 ") else 0
    return status, out


def sse_events(text):
    """data: payloads of an SSE body, in order."""
    return [line[6:] for line in text.split("\n") if line.startswith("data: ")]


def metric(c, name):
    for line in c.get("/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise KeyError(name)


@pytest.fixture(scope="module")
def tmpdir_sock():
    d = tempfile.mkdtemp(prefix="tpd_srv_")
    yield d
    subprocess.run(["rm", "-rf", d])


@pytest.fixture(scope="module")
def server(tmpdir_sock):
    if tpd_cli.tpd_bin() is None:
        pytest.skip("tpd binary not built (set TPD_BIN)")
    if not os.path.exists(MODEL):
        pytest.skip(f"{MODEL} absent (run ./launch/get-model smollm2)")
    sock = os.path.join(tmpdir_sock, "run", "tpd.sock")
    s = Server(sock)
    yield s
    out = s.output()
    rc = s.stop()
    assert rc == 0, out[-4000:]
    assert not os.path.exists(sock), "socket file left behind"


@pytest.fixture(scope="module")
def http(server):
    with client(server.sock) as c:
        yield c


@pytest.fixture(scope="module")
def llama():
    llama_cpp = pytest.importorskip("llama_cpp")
    return llama_cpp.Llama(model_path=MODEL, vocab_only=True, verbose=False)


def reliable_prefix(case):
    """Greedy steps before the fixture's first near-tie (where any correct engine agrees)."""
    k = 0
    while k < len(case["generated_ids"]) and case["top2_gap"][k] >= NEAR_TIE:
        k += 1
    return case["generated_ids"][:k]


def good_request(http):
    r = http.post("/v1/completions", json={"prompt": "Hi", "max_tokens": 1})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 1


# ------------------------------------------------------------------------------ basics

def test_socket_permissions(server):
    st = os.lstat(server.sock)
    import stat
    assert stat.S_ISSOCK(st.st_mode)
    assert st.st_mode & 0o777 == 0o600
    assert os.stat(os.path.dirname(server.sock)).st_mode & 0o777 == 0o700


def test_models_and_health(server, http):
    models = oai(server.sock).models.list()
    assert [m.id for m in models.data] == [NAME]
    r = http.get("/health")
    assert r.status_code == 200
    r = http.get("/v1/models")
    assert r.json()["data"][0]["max_model_len"] == CTX


def test_curl(server):
    out = subprocess.run(["curl", "-s", "--unix-socket", server.sock, "http://localhost/v1/completions",
                          "-H", "Content-Type: application/json",
                          "-d", json.dumps({"prompt": "One, two,", "max_tokens": 4, "temperature": 0})],
                         capture_output=True, text=True, timeout=60)
    body = json.loads(out.stdout)
    assert body["object"] == "text_completion"
    # a 4-token prompt fills no whole KV block: nothing of it can come from the prefix cache
    assert body["usage"] == {"prompt_tokens": body["usage"]["prompt_tokens"], "completion_tokens": 4,
                             "total_tokens": body["usage"]["prompt_tokens"] + 4,
                             "prompt_tokens_details": {"cached_tokens": 0}}
    out = subprocess.run(["curl", "-sN", "--unix-socket", server.sock, "http://localhost/v1/chat/completions",
                          "-d", json.dumps({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3,
                                            "stream": True})],
                         capture_output=True, text=True, timeout=60)
    ev = sse_events(out.stdout)
    assert ev[-1] == "[DONE]"
    assert json.loads(ev[0])["choices"][0]["delta"]["role"] == "assistant"


# ------------------------------------------------------------------------------ tokenizer

TEXTS = ["Hello world", "  leading spaces and\ttabs\n\nnewlines", "naïve café — 日本語 🙂",
         "<|im_start|>user\nhi<|im_end|>", "x" * 300, "1234567890 3.14159"]


@pytest.mark.parametrize("text", TEXTS)
def test_tokenize_matches_llamacpp(http, llama, text):
    want = llama.tokenize(text.encode(), add_bos=False, special=True)
    r = http.post("/tokenize", json={"prompt": text})
    assert r.status_code == 200, r.text
    assert r.json()["tokens"] == want
    assert r.json()["count"] == len(want)
    r = http.post("/detokenize", json={"tokens": want})
    assert r.status_code == 200, r.text
    assert r.json()["prompt"] == llama.detokenize(want, special=True).decode()


@functools.lru_cache(maxsize=1)
def gguf_template():
    """(chat template, BOS text, EOS text) as the `gguf` package reads them."""
    gguf = pytest.importorskip("gguf")
    r = gguf.GGUFReader(MODEL)

    def field(name):
        f = r.fields[name]
        return f.parts[f.data[0]]
    tpl = bytes(field("tokenizer.chat_template")).decode()
    toks = r.fields["tokenizer.ggml.tokens"]
    bos = bytes(toks.parts[toks.data[int(field("tokenizer.ggml.bos_token_id")[0])]]).decode()
    eos = bytes(toks.parts[toks.data[int(field("tokenizer.ggml.eos_token_id")[0])]]).decode()
    return tpl, bos, eos


def chat_template_render(messages, add_generation_prompt=True):
    jinja2 = pytest.importorskip("jinja2")
    tpl, bos, eos = gguf_template()
    # HF's apply_chat_template settings
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(tpl).render(messages=messages, add_generation_prompt=add_generation_prompt,
                                       bos_token=bos, eos_token=eos)


CONVERSATIONS = [
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi there"}],
    [{"role": "system", "content": "S"}, {"role": "user", "content": "2+2?"},
     {"role": "assistant", "content": "4"}, {"role": "user", "content": "and 3+3? ünïcödé"}],
    [{"role": "user", "content": "No system prompt here"}],
]


def test_tokenizer_info(http, llama):
    """GET /tokenizer_info as vLLM answers it (lm-eval's remote tokenizer): the special tokens
    and chat template the GGUF holds (read by the `gguf` package), and the EOS id that
    client derives from /tokenize of the EOS text equal to llama.cpp's."""
    tpl, bos, eos = gguf_template()
    r = http.get("/tokenizer_info")
    assert r.status_code == 200, r.text
    info = r.json()
    assert info["bos_token"] == bos and info["eos_token"] == eos
    assert info["chat_template"] == tpl
    assert info["model_max_length"] > 0 and info["vocab_size"] == llama.n_vocab()
    ids = http.post("/tokenize", json={"prompt": info["eos_token"], "add_special_tokens": False}).json()["tokens"]
    assert ids == [llama.token_eos()]
    assert http.post("/tokenizer_info").status_code == 405


@pytest.mark.parametrize("conv", range(len(CONVERSATIONS)))
def test_chat_template_matches_jinja2(http, llama, conv):
    msgs = CONVERSATIONS[conv]
    text = chat_template_render(msgs)
    want = llama.tokenize(text.encode(), add_bos=False, special=True)
    r = http.post("/tokenize", json={"messages": msgs})
    assert r.status_code == 200, r.text
    assert r.json()["tokens"] == want, (text, llama.detokenize(r.json()["tokens"], special=True))
    # text parts are accepted as well as plain strings
    parts = [dict(m, content=[{"type": "text", "text": m["content"]}]) for m in msgs]
    assert http.post("/tokenize", json={"messages": parts}).json()["tokens"] == want
    # and without the generation prompt
    text = chat_template_render(msgs, add_generation_prompt=False)
    r = http.post("/tokenize", json={"messages": msgs, "add_generation_prompt": False})
    assert r.json()["tokens"] == llama.tokenize(text.encode(), add_bos=False, special=True)


# ------------------------------------------------------------------------------ generation

@pytest.mark.parametrize("case", FX["cases"], ids=lambda c: c["name"])
def test_greedy_completion_matches_llamacpp(server, llama, case):
    """Greedy text over the steps where llama.cpp's choice is not a near-tie."""
    ids = reliable_prefix(case)
    if len(ids) < 3:
        pytest.skip("near-tie within the first tokens")
    c = oai(server.sock)
    r = c.completions.create(model=NAME, prompt=case["prompt_ids"], max_tokens=len(ids), temperature=0,
                             extra_body={"ignore_eos": True})
    want = llama.detokenize(ids).decode(errors="replace")
    assert r.choices[0].text == want
    assert r.choices[0].finish_reason == "length"
    assert r.usage.prompt_tokens == len(case["prompt_ids"])
    assert r.usage.completion_tokens == len(ids)
    assert r.usage.total_tokens == len(ids) + len(case["prompt_ids"])
    # the same text as a prompt string tokenizes to the fixture's ids
    with client(server.sock) as tr:
        assert tr.post("/tokenize", json={"prompt": case["text"]}).json()["tokens"] == case["prompt_ids"]
    # streamed: the same text, piece by piece, no partial UTF-8 anywhere
    pieces, finish = [], None
    for ch in c.completions.create(model=NAME, prompt=case["prompt_ids"], max_tokens=len(ids), temperature=0,
                                   stream=True, extra_body={"ignore_eos": True}):
        pieces.append(ch.choices[0].text)
        finish = ch.choices[0].finish_reason or finish
    assert "".join(pieces) == want
    assert finish == "length"


def reference_text(llama):
    """The fixture case with the longest stretch free of near-ties, and its text."""
    case = max(FX["cases"], key=lambda c: len(reliable_prefix(c)))
    ids = reliable_prefix(case)
    return case, ids, llama.detokenize(ids).decode(errors="replace")


def test_stop_strings(server, llama):
    case, ids, text = reference_text(llama)
    if len(text) < 12:
        pytest.skip("reference text too short")
    c = oai(server.sock)
    # a stop that straddles token boundaries, somewhere in the middle
    mid = len(text) // 2
    stop = text[mid - 3:mid + 3]
    cut = text[:text.index(stop)]
    r = c.completions.create(model=NAME, prompt=case["prompt_ids"], max_tokens=len(ids), temperature=0,
                             stop=[stop, "never-happens"], extra_body={"ignore_eos": True})
    assert r.choices[0].text == cut
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.completion_tokens < len(ids)
    # streaming never sends text past the cut, and ends the same way
    got, finish = "", None
    for ch in c.completions.create(model=NAME, prompt=case["prompt_ids"], max_tokens=len(ids), temperature=0,
                                   stop=stop, stream=True, extra_body={"ignore_eos": True}):
        got += ch.choices[0].text
        assert cut.startswith(got)
        finish = ch.choices[0].finish_reason or finish
    assert got == cut and finish == "stop"
    # several stops: the one completed first in the text wins
    late = text[mid + 4:mid + 8]
    r = c.completions.create(model=NAME, prompt=case["prompt_ids"], max_tokens=len(ids), temperature=0,
                             stop=[late, stop], extra_body={"ignore_eos": True})
    assert r.choices[0].text == text[:min(text.index(stop), text.index(late))]


def test_stream_equals_nonstream_chat(server):
    c = oai(server.sock)
    msgs = [{"role": "user", "content": "Name three colors."}]
    r = c.chat.completions.create(model=NAME, messages=msgs, max_tokens=24, temperature=0)
    full = r.choices[0].message.content
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].finish_reason in ("stop", "length")
    assert len(full) > 0
    got, roles, usage, finish = "", [], None, None
    for ch in c.chat.completions.create(model=NAME, messages=msgs, max_tokens=24, temperature=0, stream=True,
                                        stream_options={"include_usage": True}):
        if ch.usage:
            usage = ch.usage
            assert ch.choices == []
            continue
        d = ch.choices[0].delta
        if d.role:
            roles.append(d.role)
        got += d.content or ""
        finish = ch.choices[0].finish_reason or finish
    assert roles == ["assistant"]
    assert got == full and finish == r.choices[0].finish_reason
    assert usage.completion_tokens == r.usage.completion_tokens
    assert usage.prompt_tokens == r.usage.prompt_tokens


def test_raw_sse_framing(http):
    with http.stream("POST", "/v1/completions", json={"prompt": "Once upon", "max_tokens": 5, "stream": True,
                                                      "stream_options": {"include_usage": True}}) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        body = r.read().decode()
    assert body.endswith("data: [DONE]\n\n")
    ev = sse_events(body)
    chunks = [json.loads(e) for e in ev[:-1]]
    assert all(ch["object"] == "text_completion" for ch in chunks)
    assert len({ch["id"] for ch in chunks}) == 1
    assert chunks[-1]["usage"]["completion_tokens"] == 5 and chunks[-1]["choices"] == []
    assert all(ch["usage"] is None for ch in chunks[:-1])
    assert [ch["choices"][0]["finish_reason"] for ch in chunks[:-1]][-1] == "length"


def test_seed_and_n(server):
    c = oai(server.sock)
    kw = dict(model=NAME, prompt="The weather today is", max_tokens=12, temperature=1.0, top_p=0.95,
              extra_body={"ignore_eos": True})
    a = c.completions.create(n=3, seed=1234, **kw)
    b = c.completions.create(n=3, seed=1234, **kw)
    assert [ch.index for ch in a.choices] == [0, 1, 2]
    ta, tb = [ch.text for ch in a.choices], [ch.text for ch in b.choices]
    assert ta == tb, "same seed, different text"
    assert len(set(ta)) > 1, "n choices should use different seeds"
    assert a.usage.completion_tokens == 36 and all(ch.finish_reason == "length" for ch in a.choices)
    # choice i is the single request with seed + i
    one = c.completions.create(n=1, seed=1235, **kw)
    assert one.choices[0].text == ta[1]
    # streamed n=3 reassembles to the same texts
    texts = ["", "", ""]
    for ch in c.completions.create(n=3, seed=1234, stream=True, **kw):
        for x in ch.choices:
            texts[x.index] += x.text
    assert texts == ta
    # without a seed, repeated requests differ (a random seed is drawn per request)
    outs = {c.completions.create(**kw).choices[0].text for _ in range(3)}
    assert len(outs) > 1


def test_logprobs(server):
    c = oai(server.sock)
    r = c.completions.create(model=NAME, prompt="The capital of France is", max_tokens=6, temperature=0,
                             logprobs=3)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 6
    for tok, l, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert l <= 0
        assert 1 <= len(top) <= 3
        # greedy: the chosen token is the most likely one
        assert abs(max(top.values()) - l) < 1e-4
    assert lp.text_offset[0] == 0 and lp.text_offset == sorted(lp.text_offset)
    assert "".join(lp.tokens) == r.choices[0].text
    r = c.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "Hi"}], max_tokens=4,
                                  temperature=0, logprobs=True, top_logprobs=2)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    for e in content:
        assert len(e.top_logprobs) == 2
        assert e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob
        assert abs(e.top_logprobs[0].logprob - e.logprob) < 1e-4
        assert bytes(e.bytes).decode(errors="replace") == e.token


def test_echo_and_logit_bias(server, llama):
    c = oai(server.sock)
    r = c.completions.create(model=NAME, prompt="Roses are red,", max_tokens=3, temperature=0, echo=True)
    assert r.choices[0].text.startswith("Roses are red,")
    # a huge bias forces a token: the greedy output is that token repeated
    tok = llama.tokenize(b" banana", add_bos=False)[0]
    r = c.completions.create(model=NAME, prompt="Roses are red,", max_tokens=3, temperature=0,
                             logit_bias={str(tok): 100})
    assert r.choices[0].text == llama.detokenize([tok] * 3).decode()


def test_context_limit(http):
    r = http.post("/v1/completions", json={"prompt": [1] * (CTX - 10), "max_tokens": 20})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["param"] == "max_tokens" and str(CTX) in err["message"]
    r = http.post("/v1/completions", json={"prompt": "word " * (CTX + 5)})
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt"
    # exactly filling the context is fine (the stream is dropped once it started)
    with http.stream("POST", "/v1/completions", json={"prompt": [1, 2, 3], "max_tokens": CTX - 3,
                                                      "stream": True}) as r:
        assert r.status_code == 200
        next(r.iter_raw())
    good_request(http)


def test_metrics_count_requests_and_tokens(http):
    def codes():
        out = {}
        for line in http.get("/metrics").text.splitlines():
            if line.startswith("tpd_requests_total{code="):
                out[line.split('"')[1]] = float(line.split()[-1])
        return out
    # an earlier test's dropped stream may still be running (its cancellation is seen at the
    # next step): count from a server with nothing in flight
    t0 = time.time()
    while (metric(http, "tpd_running_sequences") or metric(http, "tpd_queue_depth")) \
            and time.time() - t0 < 10:
        time.sleep(0.02)
    assert metric(http, "tpd_running_sequences") == 0 and metric(http, "tpd_queue_depth") == 0
    gen0 = None
    while gen0 != metric(http, "tpd_generation_tokens_total") and time.time() - t0 < 10:
        gen0 = metric(http, "tpd_generation_tokens_total")
        time.sleep(0.2)
    before = codes()
    ttft0 = metric(http, "tpd_time_to_first_token_seconds_count")
    r = http.post("/v1/completions", json={"prompt": "Count:", "max_tokens": 7, "ignore_eos": True})
    assert r.status_code == 200
    http.post("/v1/completions", json={"prompt": "x", "temperature": 9})
    after = codes()
    assert after.get("200", 0) >= before.get("200", 0) + 1
    assert after.get("400", 0) == before.get("400", 0) + 1
    t0 = time.time()  # the step loop counts a request's tokens just after it finished it
    while metric(http, "tpd_generation_tokens_total") != gen0 + 7 and time.time() - t0 < 2:
        time.sleep(0.02)
    assert metric(http, "tpd_generation_tokens_total") == gen0 + 7
    assert metric(http, "tpd_time_to_first_token_seconds_count") == ttft0 + 1
    text = http.get("/metrics").text
    for name in ("tpd_queue_depth", "tpd_running_sequences", "tpd_kv_blocks_used", "tpd_kv_blocks_free",
                 "tpd_prompt_tokens_total", "tpd_preemptions_total", "tpd_inter_token_latency_seconds_count"):
        assert f"\n{name} " in text, name


# ------------------------------------------------------------------------------ bad requests

BAD = [
    # (path, body, status, param)
    ("/v1/completions", b"not json", 400, None),
    ("/v1/completions", b"[1,2]", 400, None),
    ("/v1/completions", b'{"prompt": "x"} extra', 400, None),
    ("/v1/completions", b'{"prompt": "\xff\xfe"}', 400, None),
    ("/v1/completions", b'{"prompt": "\\ud800"}', 400, None),
    ("/v1/completions", b"{}", 400, "prompt"),
    ("/v1/completions", b'{"prompt": ""}', 400, "prompt"),
    ("/v1/completions", b'{"prompt": [1, 49152]}', 400, "prompt"),
    ("/v1/completions", b'{"prompt": ["a", 5]}', 400, "prompt"),  # a list of prompts is fine, a mix is not
    ("/v1/completions", b'{"prompt": "x", "temperature": 2.5}', 400, "temperature"),
    ("/v1/completions", b'{"prompt": "x", "top_p": 0}', 400, "top_p"),
    ("/v1/completions", b'{"prompt": "x", "top_k": -5}', 400, "top_k"),
    ("/v1/completions", b'{"prompt": "x", "min_p": 2}', 400, "min_p"),
    ("/v1/completions", b'{"prompt": "x", "repetition_penalty": 0}', 400, "repetition_penalty"),
    ("/v1/completions", b'{"prompt": "x", "presence_penalty": 3}', 400, "presence_penalty"),
    ("/v1/completions", b'{"prompt": "x", "frequency_penalty": "a"}', 400, "frequency_penalty"),
    ("/v1/completions", b'{"prompt": "x", "max_tokens": 0}', 400, "max_tokens"),
    ("/v1/completions", b'{"prompt": "x", "max_tokens": 5000}', 400, "max_tokens"),
    ("/v1/completions", b'{"prompt": "x", "n": 17}', 400, "n"),
    ("/v1/completions", b'{"prompt": "x", "stop": [""]}', 400, "stop"),
    ("/v1/completions", b'{"prompt": "x", "stop": {"a": 1}}', 400, "stop"),
    ("/v1/completions", b'{"prompt": "x", "logprobs": 50}', 400, "logprobs"),
    ("/v1/completions", b'{"prompt": "x", "logit_bias": {"x": 1}}', 400, "logit_bias"),
    ("/v1/completions", b'{"prompt": "x", "logit_bias": {"5": 101}}', 400, "logit_bias"),
    ("/v1/completions", b'{"prompt": "x", "seed": "s"}', 400, "seed"),
    ("/v1/completions", b'{"prompt": "x", "stream": 1}', 400, "stream"),
    ("/v1/completions", b'{"prompt": "x", "stream_options": {"include_usage": true}}', 400, "stream_options"),
    ("/v1/completions", b'{"prompt": "x", "model": "gpt-4o"}', 404, "model"),
    ("/v1/chat/completions", b'{"messages": []}', 400, "messages"),
    ("/v1/chat/completions", b'{"messages": [{"role": "robot", "content": "x"}]}', 400, "messages[0].role"),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": 1}]}', 400, "messages[0].content"),
    ("/v1/chat/completions",
     b'{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}',
     400, "messages[0].content[0]"),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}', 400,
     "top_logprobs"),
    ("/tokenize", b'{"prompt": 5}', 400, "prompt"),
    ("/detokenize", b'{"tokens": [-1]}', 400, "tokens"),
]


@pytest.mark.parametrize("i", range(len(BAD)))
def test_bad_request_then_good(http, i):
    path, body, status, param = BAD[i]
    r = http.post(path, content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    if param:
        assert err["param"] == param and param in err["message"]
    good_request(http)


def test_http_level_errors_then_good(server, http):
    assert http.get("/v1/nothing").status_code == 404
    r = http.get("/v1/chat/completions")
    assert r.status_code == 405 and "POST" in r.headers.get("allow", "")
    assert http.delete("/v1/models").status_code == 405
    good_request(http)
    # a 10 MB body
    r = http.post("/v1/completions", content=b"x" * (10 << 20))
    assert r.status_code == 413
    assert r.json()["error"]["type"] == "invalid_request_error"
    good_request(http)
    # the same streamed in chunks without a length
    r = http.post("/v1/completions", content=iter([b"y" * (1 << 20)] * 10))
    assert r.status_code == 413
    good_request(http)
    # conflicting transfer encodings, and an unsupported one
    body = b'{"prompt": "x"}'
    st, out = raw_http(server.sock, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n"
                       b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\nf\r\n%s\r\n0\r\n\r\n" % (len(body), body))
    assert st == 400, out
    good_request(http)
    st, out = raw_http(server.sock, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                       b"Transfer-Encoding: identity\r\nConnection: close\r\n\r\n0\r\n\r\n")
    assert st == 400, out
    st, out = raw_http(server.sock, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n"
                       b"Content-Length: 15\r\nConnection: close\r\n\r\n" + body)
    assert st == 400, out
    # garbage instead of HTTP
    st, out = raw_http(server.sock, b"garbage with spaces here\r\n\r\n")
    assert st == 400, out
    st, out = raw_http(server.sock, b"GET /health HTTP/7.0\r\n\r\n")
    assert st == 505, out
    good_request(http)
    # a valid chunked request works
    st, out = raw_http(server.sock, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                       b"Connection: close\r\n\r\n5\r\n{\"pro\r\na\r\nmpt\": \"x\"}\r\n0\r\n\r\n")
    assert st == 200, out


# ------------------------------------------------------------------------------ disconnects

def idle(http, timeout=3):
    """Waits until nothing runs or waits. (The step loop publishes its counts after the
    step in which a request finished, a moment after the client may have its answer.)"""
    t0 = time.time()
    while metric(http, "tpd_running_sequences") + metric(http, "tpd_queue_depth") > 0:
        assert time.time() - t0 < timeout, "requests still running"
        time.sleep(0.02)


def test_disconnect_cancels_stream(server, http):
    idle(http)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(server.sock)
    body = json.dumps({"prompt": "Tell me a long story.", "max_tokens": 900, "ignore_eos": True,
                       "stream": True}).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    got = b""
    while got.count(b"data: ") < 4:
        got += s.recv(4096)
    assert metric(http, "tpd_running_sequences") == 1
    s.close()
    t0 = time.time()
    while metric(http, "tpd_running_sequences") != 0:
        assert time.time() - t0 < 3, "cancelled stream still running"
        time.sleep(0.05)
    assert metric(http, "tpd_kv_blocks_used") == 0
    good_request(http)


def test_disconnect_cancels_nonstream(server, http):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(server.sock)
    body = json.dumps({"prompt": "Tell me a long story.", "max_tokens": 900, "ignore_eos": True}).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    t0 = time.time()
    while metric(http, "tpd_running_sequences") != 1:
        assert time.time() - t0 < 10
        time.sleep(0.02)
    s.close()
    t0 = time.time()
    while metric(http, "tpd_running_sequences") != 0:
        assert time.time() - t0 < 3, "abandoned request still running"
        time.sleep(0.05)
    good_request(http)


def test_openai_client_concurrent(server):
    """Several clients at once, streaming and not: all complete with consistent usage."""
    errors = []

    def worker(i):
        try:
            c = oai(server.sock)
            if i % 2:
                n = 0
                for ch in c.completions.create(model=NAME, prompt=f"List {i}:", max_tokens=8, stream=True,
                                               seed=i, extra_body={"ignore_eos": True},
                                               stream_options={"include_usage": True}):
                    if ch.usage:
                        n = ch.usage.completion_tokens
                assert n == 8
            else:
                r = c.chat.completions.create(model=NAME, messages=[{"role": "user", "content": f"Say {i}"}],
                                              max_tokens=8, seed=i)
                assert r.usage.completion_tokens <= 8
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))
    ts = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert not errors, errors


# ------------------------------------------------------------------------------ lifecycle

@pytest.fixture
def lifecycle(tmpdir_sock):
    if tpd_cli.tpd_bin() is None:
        pytest.skip("tpd binary not built (set TPD_BIN)")
    if not os.path.exists(MODEL):
        pytest.skip(f"{MODEL} absent")
    started = []

    def start(sock, extra=(), wait=True):
        s = Server(sock, extra, wait)
        started.append(s)
        return s
    yield start
    for s in started:
        s.stop()


def test_second_daemon_refused_and_stale_socket_replaced(lifecycle, tmpdir_sock):
    sock = os.path.join(tmpdir_sock, "life", "tpd.sock")
    a = lifecycle(sock)
    b = lifecycle(sock, wait=False)
    assert b.proc.wait(180) != 0
    assert "already listening" in b.output()
    with client(sock) as c:
        assert c.get("/health").status_code == 200  # the first one is untouched
    # kill -9 of the ranks leaves a stale socket file behind; a new daemon replaces it
    ranks = a.ranks()
    assert sorted(ranks) == [0, 1]
    for pid in ranks.values():
        os.kill(pid, signal.SIGKILL)
    a.proc.wait(60)
    assert os.path.exists(sock)
    with pytest.raises(ConnectionRefusedError):
        socket.socket(socket.AF_UNIX).connect(sock)
    c2 = lifecycle(sock)
    with client(sock) as c:
        assert c.get("/health").status_code == 200
    assert c2.stop() == 0
    assert not os.path.exists(sock)


def test_non_socket_file_is_kept(lifecycle, tmpdir_sock):
    d = os.path.join(tmpdir_sock, "keep")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "tpd.sock")
    with open(path, "w") as f:
        f.write("precious")
    s = lifecycle(path, wait=False)
    assert s.proc.wait(180) != 0
    assert "not a socket" in s.output()
    with open(path) as f:
        assert f.read() == "precious"


def test_queue_full_is_429(lifecycle, tmpdir_sock):
    sock = os.path.join(tmpdir_sock, "q", "tpd.sock")
    lifecycle(sock, ["--max-running", 1, "--max-queue", 1])
    results = []
    socks = []
    body = json.dumps({"prompt": "Go on:", "max_tokens": 400, "ignore_eos": True, "stream": True}).encode()
    for _ in range(5):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(sock)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        socks.append(s)
    for s in socks:
        s.settimeout(30)
        head = s.recv(4096)
        results.append(int(head.split(b" ", 2)[1]))
        if results[-1] == 429:
            assert b"\r\nRetry-After: 1\r\n" in head, head  # the client may come back
            assert b"queue" in head or b"queue" in s.recv(4096)
    for s in socks:
        s.close()
    assert results.count(429) >= 3 and results.count(200) >= 1, results
    with client(sock) as c:
        t0 = time.time()
        while metric(c, "tpd_running_sequences") + metric(c, "tpd_queue_depth") > 0:
            assert time.time() - t0 < 5
            time.sleep(0.05)
        good_request(c)


def test_drain_finishes_inflight(lifecycle, tmpdir_sock):
    sock = os.path.join(tmpdir_sock, "drain", "tpd.sock")
    srv = lifecycle(sock)
    keep = client(sock)
    assert keep.get("/health").status_code == 200  # a kept-alive connection
    out = {}

    def stream():
        try:
            with client(sock) as c:
                with c.stream("POST", "/v1/completions", json={"prompt": "Story:", "max_tokens": 60,
                                                               "ignore_eos": True, "stream": True}) as r:
                    out["body"] = r.read().decode()
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            out["error"] = repr(e)
    t = threading.Thread(target=stream)
    t.start()
    t0 = time.time()
    while True:
        with client(sock) as c:
            if metric(c, "tpd_running_sequences") == 1:
                break
        assert time.time() - t0 < 30
        time.sleep(0.02)
    srv.terminate()
    t0 = time.time()
    while True:  # the socket stays; new requests are told the server is going
        with client(sock) as c:
            r = c.get("/health")
        if r.status_code == 503:
            break
        assert time.time() - t0 < 10
        time.sleep(0.02)
    assert "draining" in r.json()["error"]["message"] and r.headers["retry-after"] == "1"
    r = keep.get("/health")
    assert r.status_code == 503 and "draining" in r.json()["error"]["message"]
    r = keep.post("/v1/completions", json={"prompt": "x", "max_tokens": 1})
    assert r.status_code == 503
    t.join(120)
    assert "body" in out, out
    ev = sse_events(out["body"])
    assert ev[-1] == "[DONE]"
    assert json.loads(ev[-2])["choices"][0]["finish_reason"] == "length"
    assert "".join(json.loads(e)["choices"][0]["text"] for e in ev[:-1])
    keep.close()
    assert srv.proc.wait(60) == 0
    assert not os.path.exists(sock), "socket file left behind"
