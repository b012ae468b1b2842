"""tpctl against a fake OpenAI-style server (Python's http.server over a Unix socket), so the
client is tested independently of the real daemon: the server checks every request tpctl
sends (method, path, headers, JSON body, conversation history) and answers with canned JSON
or chunked server-sent events, including slow, broken and hostile streams. The bench's
percentiles are recomputed with numpy from the samples it dumps."""
import http.server
import json
import os
import select
import shutil
import socket
import socketserver
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest

BUILD = os.environ.get("TPD_BUILD_DIR")

MODELS = ["fake-model", "second-model"]
METRICS = ("# HELP tpd_requests_total Finished HTTP requests.\n# TYPE tpd_requests_total counter\n"
           "tpd_requests_total{code=\"200\"} 7\n")
ERR_400 = "prompt too long: 99999 tokens > 2048"


@pytest.fixture(scope="session")
def tpctl():
    cands = [Path(BUILD) / "tpctl"] if BUILD else []
    cands.append(Path(__file__).resolve().parents[2] / "build" / "tpctl")
    for c in cands:
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    pytest.skip("tpctl is not built (set TPD_BUILD_DIR to the build folder)")


def reply_for_prompt(prompt):
    """What the fake model 'generates' for a completion prompt (non-ASCII on purpose)."""
    return "echo(" + prompt + ") → héllo 世界"


def reply_for_chat(messages):
    users = [m["content"] for m in messages if m["role"] == "user"]
    return f"turn {len(users)}: you said «{users[-1]}»"


def pieces_of(text):
    """Splits an answer into 'token' pieces of 1 to 3 characters."""
    out, i, k = [], 0, 0
    while i < len(text):
        n = 1 + k % 3
        out.append(text[i:i + n])
        i += n
        k += 1
    return out


class FakeServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, path):
        super().__init__(path, Handler)
        self.lock = threading.Lock()
        self.log = []           # (method, path, headers dict, parsed JSON body or None)
        self.connections = 0
        self.inflight = 0
        self.max_inflight = 0
        self.healthy = True
        self.ttft_delay = 0.0
        self.itl_delay = 0.0
        self.closing_chunk = False  # llama.cpp style: an empty chunk carries finish_reason
        self.send_usage = True
        self.cached_words = None  # a list: report, like a prefix cache, the words seen before
        self.release = threading.Event()  # the "slow" prompt waits for this
        self.chats = []         # answers given, in order

    def handle_error(self, request, client_address):
        pass  # tpctl hanging up mid-stream (timeout test) is expected, not a server bug


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def setup(self):
        super().setup()
        with self.server.lock:
            self.server.connections += 1

    # --- helpers ---
    def send_json(self, code, obj):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_text(self, code, text, ctype="text/plain; version=0.0.4"):
        data = text.encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def start_stream(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def chunk(self, data):
        if isinstance(data, str):
            data = data.encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def event(self, obj):
        self.chunk("data: " + (obj if isinstance(obj, str) else json.dumps(obj)) + "\n\n")

    def end_stream(self):
        self.chunk("data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")

    def record(self, body):
        hdrs = {k.lower(): v for k, v in self.headers.items()}
        with self.server.lock:
            self.server.log.append((self.command, self.path, hdrs, body))

    # --- endpoints ---
    def do_GET(self):
        self.record(None)
        if self.path == "/v1/models":
            self.send_json(200, {"object": "list", "data": [
                {"id": m, "object": "model", "owned_by": "test"} for m in MODELS]})
        elif self.path == "/health":
            if self.server.healthy:
                self.send_json(200, {"status": "ok"})
            else:
                self.send_json(503, {"status": "loading"})
        elif self.path == "/metrics":
            self.send_text(200, METRICS)
        else:
            self.send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(n)
        try:
            body = json.loads(raw)
        except ValueError:
            self.record(raw)
            self.send_json(400, {"error": {"message": "body is not JSON", "type": "invalid_request_error"}})
            return
        self.record(body)
        if self.headers.get("Content-Type") != "application/json":
            self.send_json(415, {"error": {"message": "want application/json"}})
        elif self.path == "/tokenize":
            self.send_json(200, {"tokens": [ord(c) for c in body["prompt"]], "count": len(body["prompt"])})
        elif self.path == "/v1/completions":
            self.completion(body)
        elif self.path == "/v1/chat/completions":
            self.chat(body)
        else:
            self.send_json(404, {"error": {"message": "no such endpoint"}})

    def completion(self, body):
        prompt = body["prompt"]
        if prompt == "trigger-400":
            self.send_json(400, {"error": {"message": ERR_400, "type": "invalid_request_error", "code": 400}})
            return
        if body.get("ignore_eos"):  # bench: exactly max_tokens tokens
            pieces = [f" t{i}" for i in range(body["max_tokens"])]
        else:
            pieces = pieces_of(reply_for_prompt(prompt))
        if not body.get("stream"):
            text = "".join(pieces)
            self.send_json(200, {"id": "cmpl-1", "object": "text_completion", "model": body.get("model"),
                                 "choices": [{"index": 0, "text": text, "finish_reason": "stop",
                                              "logprobs": None}],
                                 "usage": {"prompt_tokens": len(prompt.split()), "completion_tokens": len(pieces),
                                           "total_tokens": len(prompt.split()) + len(pieces)}})
            return
        srv = self.server
        with srv.lock:
            srv.inflight += 1
            srv.max_inflight = max(srv.max_inflight, srv.inflight)
        try:
            self.stream_completion(body, prompt, pieces)
        finally:
            with srv.lock:
                srv.inflight -= 1

    def stream_completion(self, body, prompt, pieces):
        srv = self.server
        self.start_stream()
        time.sleep(srv.ttft_delay)
        base = {"id": "cmpl-2", "object": "text_completion", "model": body.get("model")}
        for i, p in enumerate(pieces):
            if i:
                time.sleep(srv.itl_delay)
            last = i == len(pieces) - 1 and not srv.closing_chunk
            ev = dict(base, choices=[{"index": 0, "text": p, "logprobs": None,
                                      "finish_reason": "length" if last else None}])
            if prompt == "trigger-split" and i == 1:
                # one event split over two chunks, then two events in one chunk
                s = "data: " + json.dumps(ev) + "\n\n"
                self.chunk(s[:7])
                self.chunk(s[7:] + ": a comment line\n\n")
                continue
            self.event(ev)
            if prompt == "slow" and i == 0:
                srv.release.wait(10)
            if prompt == "trigger-midstream" and i == 2:
                self.event({"error": {"message": "engine died", "type": "server_error"}})
                self.end_stream()
                return
            if prompt == "trigger-badjson" and i == 1:
                self.event("{not json")
                self.end_stream()
                return
            if prompt == "trigger-cut" and i == 2:
                self.close_connection = True
                return  # no last chunk: the chunked body never ends
        if srv.closing_chunk:
            self.event(dict(base, choices=[{"index": 0, "text": "", "finish_reason": "length"}]))
        if prompt == "trigger-hang":
            time.sleep(3)
        if body.get("stream_options", {}).get("include_usage") and srv.send_usage:
            usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": len(pieces),
                     "total_tokens": len(prompt.split()) + len(pieces)}
            if srv.cached_words is not None:  # the longest word prefix of an earlier prompt
                words = prompt.split()
                with srv.lock:
                    hit = max([next((i for i, (x, y) in enumerate(zip(words, w)) if x != y), min(len(words), len(w)))
                               for w in srv.cached_words] or [0])
                    srv.cached_words.append(words)
                usage["prompt_tokens_details"] = {"cached_tokens": hit}
                srv.hits.append((hit, len(words)))
            self.event(dict(base, choices=[], usage=usage))
        self.end_stream()

    def chat(self, body):
        msgs = body["messages"]
        answer = reply_for_chat(msgs)
        with self.server.lock:
            self.server.chats.append(answer)
        if msgs[-1]["content"] == "trigger-400":
            self.send_json(400, {"error": {"message": ERR_400, "type": "invalid_request_error"}})
            return
        base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": body.get("model")}
        self.start_stream()
        self.event(dict(base, choices=[{"index": 0, "delta": {"role": "assistant", "content": ""},
                                        "finish_reason": None}]))
        for p in pieces_of(answer):
            self.event(dict(base, choices=[{"index": 0, "delta": {"content": p}, "finish_reason": None}]))
        self.event(dict(base, choices=[{"index": 0, "delta": {}, "finish_reason": "stop"}]))
        self.end_stream()


@pytest.fixture
def server():
    d = tempfile.mkdtemp(prefix="tpctl")
    path = os.path.join(d, "tpd.sock")
    srv = FakeServer(path)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    srv.path = path
    yield srv
    srv.release.set()
    srv.shutdown()
    srv.server_close()
    shutil.rmtree(d, ignore_errors=True)


def run(tpctl, srv, *args, stdin=None, env=None, timeout=60):
    cmd = [tpctl] + (["--socket", srv.path] if srv is not None else []) + list(args)
    p = subprocess.run(cmd, input=stdin, capture_output=True, timeout=timeout, env=env)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def posts(srv, path):
    return [(h, b) for (m, p, h, b) in srv.log if m == "POST" and p == path]


# --- simple commands ---

def test_models_health_metrics(tpctl, server):
    rc, out, err = run(tpctl, server, "models")
    assert rc == 0, err
    assert out == "fake-model\nsecond-model\n"
    rc, out, _ = run(tpctl, server, "models", "--json")
    assert rc == 0 and [m["id"] for m in json.loads(out)["data"]] == MODELS
    rc, out, _ = run(tpctl, server, "health")
    assert rc == 0 and out.startswith("ok (200)")
    server.healthy = False
    rc, out, _ = run(tpctl, server, "health")
    assert rc == 1 and "503" in out and "loading" in out
    rc, out, _ = run(tpctl, server, "metrics")
    assert rc == 0 and out == METRICS
    (m, p, h, b) = server.log[-1]
    assert (m, p, b) == ("GET", "/metrics", None)
    assert h["host"] == "localhost" and "content-length" not in h


def test_tokenize(tpctl, server):
    rc, out, err = run(tpctl, server, "tokenize", "héllo")
    assert rc == 0, err
    assert json.loads(out) == [ord(c) for c in "héllo"]
    assert posts(server, "/tokenize")[0][1] == {"prompt": "héllo"}


# --- completions ---

def test_complete_plain_and_streamed(tpctl, server):
    prompt = 'Say "hi"\n\tand \\ more'
    want = reply_for_prompt(prompt)
    rc, out, err = run(tpctl, server, "complete", prompt, "-n", "17", "--temperature", "0.5", "--seed", "42")
    assert rc == 0, err
    assert out == want + "\n"
    h, b = posts(server, "/v1/completions")[0]
    assert b == {"model": "fake-model", "max_tokens": 17, "temperature": 0.5, "seed": 42, "prompt": prompt}
    assert h["content-type"] == "application/json"

    rc, out, err = run(tpctl, server, "complete", prompt, "--stream", "--model", "second-model", "-v")
    assert rc == 0, err
    assert out == want + "\n"
    assert "finish: length" in err and f"completion {len(pieces_of(want))} tokens" in err
    _, b = posts(server, "/v1/completions")[1]
    assert b["stream"] is True and b["stream_options"] == {"include_usage": True}
    assert b["model"] == "second-model" and "max_tokens" not in b and "temperature" not in b


def test_complete_from_stdin_and_split_events(tpctl, server):
    rc, out, err = run(tpctl, server, "complete", "-", "--stream", stdin=b"trigger-split")
    assert rc == 0, err
    assert out == reply_for_prompt("trigger-split") + "\n"


def test_stream_is_printed_as_it_arrives(tpctl, server):
    """The first piece must reach stdout while the server still holds back the rest."""
    p = subprocess.Popen([tpctl, "--socket", server.path, "complete", "slow", "--stream"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = pieces_of(reply_for_prompt("slow"))[0].encode()
    got = b""
    deadline = time.time() + 10
    while len(got) < len(first) and time.time() < deadline:
        r, _, _ = select.select([p.stdout], [], [], 0.5)
        if r:
            got += os.read(p.stdout.fileno(), 100)
    assert got == first, "nothing streamed before the server released the rest"
    server.release.set()
    out, err = p.communicate(timeout=20)
    assert p.returncode == 0, err
    assert (got + out).decode() == reply_for_prompt("slow") + "\n"


def test_http_error_message(tpctl, server):
    rc, out, err = run(tpctl, server, "complete", "trigger-400")
    assert rc == 1
    assert "400" in err and ERR_400 in err


@pytest.mark.parametrize("prompt,msg", [("trigger-midstream", "engine died"),
                                        ("trigger-badjson", "malformed JSON"),
                                        ("trigger-cut", "chunked body")])
def test_broken_streams(tpctl, server, prompt, msg):
    rc, out, err = run(tpctl, server, "complete", prompt, "--stream")
    assert rc == 1, out
    assert msg in err
    # what arrived before the failure was printed
    assert out.startswith(pieces_of(reply_for_prompt(prompt))[0])


def test_timeout(tpctl, server):
    t0 = time.time()
    rc, out, err = run(tpctl, server, "complete", "trigger-hang", "--stream", "--timeout", "0.5")
    assert rc == 1 and "timeout" in err
    assert time.time() - t0 < 2.5


# --- chat ---

def test_chat_once(tpctl, server):
    rc, out, err = run(tpctl, server, "chat", "--once", "What is 2+2?", "--system", "Be brief.",
                       "-n", "5", "--temperature", "0")
    assert rc == 0, err
    assert out == reply_for_chat([{"role": "user", "content": "What is 2+2?"}]) + "\n"
    _, b = posts(server, "/v1/chat/completions")[0]
    assert b["messages"] == [{"role": "system", "content": "Be brief."},
                             {"role": "user", "content": "What is 2+2?"}]
    assert b["model"] == "fake-model" and b["max_tokens"] == 5 and b["temperature"] == 0
    assert b["stream"] is True


def test_chat_pipe_keeps_history(tpctl, server):
    lines = "hello\n\nhow are you?\r\n/reset\nagain\n"
    rc, out, err = run(tpctl, server, "chat", "--system", "sys", stdin=lines.encode())
    assert rc == 0, err
    a1, a2, a3 = server.chats
    assert out == f"{a1}\n{a2}\n{a3}\n"
    bodies = [b for _, b in posts(server, "/v1/chat/completions")]
    assert len(bodies) == 3
    assert bodies[1]["messages"] == [
        {"role": "system", "content": "sys"}, {"role": "user", "content": "hello"},
        {"role": "assistant", "content": a1}, {"role": "user", "content": "how are you?"}]
    # after /reset only the system prompt remains
    assert bodies[2]["messages"] == [{"role": "system", "content": "sys"}, {"role": "user", "content": "again"}]
    assert a2 == "turn 2: you said «how are you?»"


def test_chat_slash_commands(tpctl, server):
    """/help, /system, /temperature, /reset and unknown commands are commands, never sent;
    //TEXT sends /TEXT."""
    lines = ("/help\n/system Be brief.\n/temperature 0.3\nhello\n/temperature 7\n/bogus x\n"
             "//etc/passwd\n/reset\n/system\n/temperature\nagain\n/quit\nnot sent\n")
    rc, out, err = run(tpctl, server, "chat", "--system", "sys", stdin=lines.encode())
    assert rc == 0, err
    for c in ("/help", "/reset", "/system [TEXT]", "/temperature [T]", "/quit"):
        assert c in err, err
    assert '/temperature: "7" is not a number from 0 to 2' in err
    assert "unknown command /bogus" in err
    bodies = [b for _, b in posts(server, "/v1/chat/completions")]
    assert len(bodies) == 3
    a1, a2, _ = server.chats
    assert bodies[0]["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello"}]
    assert bodies[0]["temperature"] == 0.3
    assert bodies[1]["messages"][-1] == {"role": "user", "content": "/etc/passwd"}
    assert bodies[1]["temperature"] == 0.3
    # /reset kept the system message, /system removed it, /temperature went back to the default
    assert bodies[2]["messages"] == [{"role": "user", "content": "again"}]
    assert "temperature" not in bodies[2]


def test_chat_help_states_default_sampling(tpctl):
    rc, out, err = run(tpctl, None, "--help")
    assert rc == 0 and "temperature 1" in out and "/help" in out


def test_chat_error_keeps_going(tpctl, server):
    rc, out, err = run(tpctl, server, "chat", stdin=b"one\ntrigger-400\ntwo\n")
    assert rc == 1
    assert ERR_400 in err
    bodies = [b for _, b in posts(server, "/v1/chat/completions")]
    # the failed question is not part of the history
    assert [m["content"] for m in bodies[2]["messages"]] == ["one", server.chats[0], "two"]
    assert out == f"{server.chats[0]}\n{server.chats[2]}\n"


# --- daemon not there ---

def test_no_daemon(tpctl):
    d = tempfile.mkdtemp(prefix="tpctl")
    try:
        missing = os.path.join(d, "nothing.sock")
        p = subprocess.run([tpctl, "--socket", missing, "chat", "--once", "hi"], capture_output=True, text=True)
        assert p.returncode == 1
        assert missing in p.stderr and "daemon running" in p.stderr
        # a socket file nobody listens on: connection refused
        dead = os.path.join(d, "dead.sock")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(dead)
        s.close()
        env = dict(os.environ, TPD_SOCKET=dead)
        p = subprocess.run([tpctl, "models"], capture_output=True, text=True, env=env)
        assert p.returncode == 1
        assert dead in p.stderr and "refused" in p.stderr and "daemon running" in p.stderr
        p = subprocess.run([tpctl, "health"], capture_output=True, text=True, env=env)
        assert p.returncode == 1
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_usage_errors(tpctl):
    for args in (["frobnicate"], ["complete"], ["models", "--stream"], ["complete", "x", "-n", "0"],
                 ["complete", "x", "--temperature", "nan"], ["bench", "--concurrency", "0"],
                 ["bench", "--concurrency", "1,x"], []):
        p = subprocess.run([tpctl] + args, capture_output=True, text=True)
        assert p.returncode == 2, args
        assert p.stderr, args


# --- bench ---

def test_bench_sweep(tpctl, server, tmp_path):
    server.ttft_delay = 0.03
    server.itl_delay = 0.005
    samples = tmp_path / "samples.json"
    M, N, P = 8, 8, 20
    rc, out, err = run(tpctl, server, "bench", "--concurrency", "1,4", "--requests", str(N), "--prompt-len", str(P),
                       "--max-tokens", str(M), "--json", "--samples", str(samples), timeout=120)
    assert rc == 0, err
    levels = [json.loads(line) for line in out.splitlines()]
    assert [lv["concurrency"] for lv in levels] == [1, 4]
    dump = json.loads(samples.read_text())
    for lv, sm in zip(levels, dump):
        assert lv["requests"] == N and lv["errors"] == 0
        assert lv["output_tokens"] == N * M
        assert lv["prompt_tokens_mean"] == P
        assert lv["req_per_s"] == pytest.approx(N / lv["wall_s"], rel=1e-9)
        assert lv["output_tok_per_s"] == pytest.approx(N * M / lv["wall_s"], rel=1e-9)
        ttft, itl = np.array(sm["ttft_s"]), np.array(sm["itl_s"])
        assert len(ttft) == N and len(itl) == N * (M - 1)
        for q in (50, 99):
            assert lv[f"ttft_p{q}_ms"] == pytest.approx(1e3 * np.percentile(ttft, q), rel=1e-9)
            assert lv[f"itl_p{q}_ms"] == pytest.approx(1e3 * np.percentile(itl, q), rel=1e-9)
        # the server waited 30 ms before the first token and 5 ms between tokens
        assert ttft.min() >= 0.03 and lv["ttft_p50_ms"] < 1000
        assert lv["itl_p50_ms"] >= 4.0 and lv["itl_p50_ms"] < 500
    # every request: streamed, ignore_eos, max_tokens, about P words of prompt
    bench = [b for _, b in posts(server, "/v1/completions")]
    assert len(bench) == 1 + 2 * N  # one warm-up
    for b in bench:
        assert b["stream"] is True and b["ignore_eos"] is True and b["max_tokens"] == M
        assert b["stream_options"] == {"include_usage": True} and b["model"] == "fake-model"
        assert len(b["prompt"].split()) == P
    assert len({b["prompt"] for b in bench}) == len(bench)  # no prompt repeats
    # one connection per thread, kept alive: warm-up 1 + level 1 + level 4 (+ GET /v1/models)
    assert server.connections == 1 + 1 + 1 + 4
    assert server.max_inflight == 4


def test_bench_shared_prefix(tpctl, server):
    """--shared-prefix W --turns T: every prompt starts with one W-word system prompt; a
    conversation's turn resends the turn before and its answer; the hit rate is the servers'
    cached_tokens over its prompt_tokens."""
    server.cached_words, server.hits = [], []
    W, T, P, M = 30, 3, 4, 2
    rc, out, err = run(tpctl, server, "bench", "--concurrency", "2", "--requests", "6", "--shared-prefix", str(W),
                       "--turns", str(T), "--prompt-len", str(P), "--max-tokens", str(M), "--warmup", "0", "--json",
                       timeout=60)
    assert rc == 0, err
    lv = json.loads(out)
    prompts = [b["prompt"] for _, b in posts(server, "/v1/completions")]
    assert len(prompts) == 6 and lv["requests"] == 6
    system = prompts[0].split()[:W]
    assert all(p.split()[:W] == system for p in prompts)
    # two conversations of three turns: each turn = the one before + its answer + P words
    firsts = [p for p in prompts if len(p.split()) == W + P]
    assert len(firsts) == 2
    for f in firsts:
        chain = [f]
        while True:
            nxt = [p for p in prompts if p.startswith(chain[-1] + " t0 t1 ") and len(p.split()) == len(chain[-1].split()) + M + P]
            if not nxt:
                break
            chain.append(nxt[0])
        assert len(chain) == T
    hit, total = sum(h for h, _ in server.hits), sum(n for _, n in server.hits)
    assert lv["cached_tokens"] == hit and lv["prefix_hit_rate"] == pytest.approx(hit / total, rel=1e-9)
    rc, out, err = run(tpctl, server, "bench", "--concurrency", "1", "--requests", "2", "--shared-prefix", "5",
                       "--max-tokens", "2", "--prompt-len", "3", "--warmup", "0")
    assert rc == 0, err
    row = [ln.split() for ln in out.splitlines() if not ln.startswith("#")][1]
    assert row[-5].endswith("%")  # the hit column beside TTFT


def test_bench_counts_tokens_without_usage(tpctl, server):
    """No usage chunk and a separate empty closing chunk: tokens are counted from the chunks
    that carry text, and the closing chunk is not an inter-token gap."""
    server.closing_chunk = True
    server.send_usage = False
    rc, out, err = run(tpctl, server, "bench", "--concurrency", "2", "--requests", "3", "--max-tokens", "5",
                       "--prompt-len", "4", "--json", "--warmup", "0", timeout=60)
    assert rc == 0, err
    lv = json.loads(out)
    assert lv["requests"] == 3 and lv["output_tokens"] == 15 and "prompt_tokens_mean" not in lv


def test_bench_table_and_failures(tpctl, server):
    rc, out, err = run(tpctl, server, "bench", "--concurrency", "1", "--requests", "2", "--max-tokens", "3",
                       "--prompt-len", "5")
    assert rc == 0, err
    rows = [ln.split() for ln in out.splitlines() if not ln.startswith("#")]
    assert rows[0][:5] == ["conc", "reqs", "errs", "req/s", "out"]
    assert rows[1][:3] == ["1", "2", "0"]
    # a server that refuses everything: the bench fails with the server's message
    d = tempfile.mkdtemp(prefix="tpctl")
    try:
        p = subprocess.run([tpctl, "--socket", os.path.join(d, "x.sock"), "bench", "--model", "m"],
                           capture_output=True, text=True)
        assert p.returncode == 1 and "daemon running" in p.stderr
    finally:
        shutil.rmtree(d, ignore_errors=True)
