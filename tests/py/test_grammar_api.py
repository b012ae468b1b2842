"""Structured output over the API, end to end on SmolLM2 (`tpd serve` on its Unix socket):
response_format json_schema / json_object and the guided_regex / guided_grammar extensions.

Independent references: outputs are parsed by Python's `json` and validated by the
`jsonschema` package (with its format checker), regex outputs by `re.fullmatch`, GBNF
outputs by the recogniser in tests/reference/gbnf_ref.py; the `openai` SDK's
`chat.completions.parse` turns the answer into a pydantic object.

The corpus (tests/data/grammar/corpus.py, >= 60 schemas x 3 prompts, 20 regexes, GBNF
grammars) runs in part here (every schema with one prompt of the three, rotating); the
whole of it with TPD_GRAMMAR_CORPUS=full (figures in tests/data/grammar/README.md)."""
import concurrent.futures
import json
import os
import re
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "reference"))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "data", "grammar"))
sys.path.insert(0, HERE)

import corpus  # noqa: E402
import gbnf_ref  # noqa: E402
from test_server_api import Server, client, oai, MODEL, sse_events  # noqa: E402
import tpd_cli  # noqa: E402

jsonschema = pytest.importorskip("jsonschema")
FULL = os.environ.get("TPD_GRAMMAR_CORPUS") == "full"
MAX_TOKENS = 384


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if tpd_cli.tpd_bin() is None:
        pytest.skip("tpd binary not built (set TPD_BIN)")
    if not os.path.exists(MODEL):
        pytest.skip(f"{MODEL} absent")
    s = Server(str(tmp_path_factory.mktemp("g") / "run" / "tpd.sock"))
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def http(server):
    with client(server.sock, timeout=3600) as c:
        yield c


def chat(http, content, **kw):
    body = {"messages": [{"role": "user", "content": content}], "temperature": 0, "max_tokens": MAX_TOKENS, **kw}
    r = http.post("/v1/chat/completions", json=body)
    return r


def run_all(jobs, fn, workers=8):
    """fn over jobs on `workers` threads (the server batches them); results as they finish."""
    with concurrent.futures.ThreadPoolExecutor(workers) as ex:
        for f in concurrent.futures.as_completed([ex.submit(fn, j) for j in jobs]):
            yield f.result()


def validator(schema):
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def test_schema_corpus(http):
    jobs = []  # prompt-major: every schema appears early
    for j in range(3):
        for k, (name, topic, schema) in enumerate(corpus.SCHEMAS):
            if FULL or k % 3 == j:
                jobs.append((name, schema, corpus.PROMPTS[j].format(topic=topic)))
    assert len(corpus.SCHEMAS) >= 60

    def one(job):
        name, schema, prompt = job
        t0 = time.time()
        extra = {"frequency_penalty": 1.0} if name in corpus.OPEN_ENDED else {}
        r = chat(http, prompt, response_format={"type": "json_schema",
                                               "json_schema": {"name": "x", "schema": schema, "strict": True}}, **extra)
        return name, prompt, r.status_code, r.json(), time.time() - t0

    bad, closed = [], []
    tokens = 0
    t0 = time.time()
    log = open(os.environ.get("TPD_GRAMMAR_LOG", os.devnull), "a")
    for name, prompt, status, body, secs in run_all(jobs, one, workers=16):
        log.write(json.dumps({"name": name, "prompt": prompt, "status": status, "body": body, "s": secs}) + "\n")
        log.flush()
        if status != 200:
            bad.append((name, prompt, status, body))
            continue
        ch = body["choices"][0]
        tokens += body["usage"]["completion_tokens"]
        schema = next(s for n, _, s in corpus.SCHEMAS if n == name)
        try:
            value = json.loads(ch["message"]["content"])
            errors = [e.message for e in validator(schema).iter_errors(value)]
        except json.JSONDecodeError as e:
            errors = [f"not JSON: {e}"]
        # every output is a valid document: the closer (on by default) ends one that would
        # run past max_tokens within it, finish "length" (the content was shortened to fit)
        if errors or ch["finish_reason"] not in ("stop", "length"):
            bad.append((name, prompt, ch["finish_reason"], ch["message"]["content"][:300], errors[:3]))
        elif ch["finish_reason"] == "length":
            closed.append((name, prompt))
    print(f"\nschema corpus: {len(jobs)} outputs, {tokens} tokens, {time.time() - t0:.1f} s, {len(bad)} bad, "
          f"{len(jobs) - len(bad)} parsed and valid, {len(closed)} closed by the budget: {closed}")
    assert not bad, bad


def test_regex_corpus(http):
    def one(job):
        name, topic, pattern = job
        r = http.post("/v1/completions", json={"prompt": f"Here is {topic}: ", "max_tokens": 64, "temperature": 0,
                                               "guided_regex": pattern})
        return name, pattern, r.status_code, r.json()

    bad = []
    assert len(corpus.REGEXES) >= 20
    for name, pattern, status, body in run_all(corpus.REGEXES, one):
        if status != 200:
            bad.append((name, status, body))
            continue
        ch = body["choices"][0]
        if not re.fullmatch(pattern, ch["text"]) or ch["finish_reason"] != "stop":
            bad.append((name, pattern, ch["text"], ch["finish_reason"]))
    assert not bad, bad


def test_gbnf_corpus(http):
    def one(job):
        name, topic, text = job
        r = chat(http, f"Write {topic}.", guided_grammar=text, max_tokens=128)
        return name, text, r.status_code, r.json()

    bad = []
    for name, text, status, body in run_all(corpus.GBNF, one):
        if status != 200:
            bad.append((name, status, body))
            continue
        out = body["choices"][0]["message"]["content"]
        if not gbnf_ref.Grammar(text).matches(out) or body["choices"][0]["finish_reason"] != "stop":
            bad.append((name, out, body["choices"][0]["finish_reason"]))
    assert not bad, bad


def test_json_object_completions_stream_n_and_stop(http):
    """json_object on /v1/completions, streamed, n = 3 sampled choices (each its own grammar
    state), with logprobs: every choice parses as an object; the logprobs are of the
    constrained distribution (each chosen token's probability is at most 1 and the top
    alternatives are all allowed, so finite)."""
    r = http.post("/v1/completions", json={
        "prompt": "A JSON object describing a cat:", "max_tokens": 200, "n": 3, "temperature": 0.8, "seed": 5,
        "stream": True, "logprobs": 2, "response_format": {"type": "json_object"}})
    assert r.status_code == 200
    texts, finish = {}, {}
    for ev in sse_events(r.text):
        if ev == "[DONE]":
            continue
        for ch in json.loads(ev)["choices"]:
            texts[ch["index"]] = texts.get(ch["index"], "") + ch["text"]
            if ch.get("finish_reason"):
                finish[ch["index"]] = ch["finish_reason"]
            lp = ch.get("logprobs")
            if lp:
                for alts in lp["top_logprobs"] or []:
                    assert all(v > -1e9 for v in alts.values()), alts
    assert sorted(texts) == [0, 1, 2]
    for i, t in texts.items():
        assert finish[i] == "stop", (t, finish)
        assert isinstance(json.loads(t), dict), t
    # a stop string inside the constrained output ends it early, as without constraints
    r = chat(http, "Give me a person as JSON.", stop=['"age"'],
             response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": corpus.obj(
                 {"name": {"type": "string", "maxLength": 10}, "age": {"type": "integer"}})}})
    ch = r.json()["choices"][0]
    assert ch["finish_reason"] == "stop" and '"age"' not in ch["message"]["content"]
    assert ch["message"]["content"].startswith("{")


# A schema whose natural output is far longer than 48 tokens (a story in chapters); its
# shortest document, {"title":"","chapters":[""]}, is 28 bytes but about 10 tokens (the
# closer's need counts the fewest tokens that spell its literals).
LONG_SCHEMA = corpus.obj({"title": {"type": "string"}, "chapters": {"type": "array", "minItems": 1,
                                                                    "items": {"type": "string"}}})
LONG_PROMPT = "Write a long story in several chapters, as JSON."
LONG_MAX = 48


def long_request(**kw):
    return {"messages": [{"role": "user", "content": LONG_PROMPT}], "temperature": 0, "max_tokens": LONG_MAX,
            "response_format": {"type": "json_schema", "json_schema": {"name": "c", "schema": LONG_SCHEMA}}, **kw}


def test_closer_ends_complete_within_max_tokens(http):
    """The budget-aware closer (on by default): a max_tokens too small for the model's
    natural answer still gives a complete, valid document, finish_reason "length" (the
    content was shortened to fit), within max_tokens; streamed the same; "guided_close":
    false restores the plain cut (the output does not parse)."""
    r = http.post("/v1/chat/completions", json=long_request())
    assert r.status_code == 200, r.text
    ch, usage = r.json()["choices"][0], r.json()["usage"]
    value = json.loads(ch["message"]["content"])
    validator(LONG_SCHEMA).validate(value)
    assert ch["finish_reason"] == "length" and usage["completion_tokens"] <= LONG_MAX, (ch, usage)
    # streamed: the same text and finish
    r2 = http.post("/v1/chat/completions", json=long_request(stream=True, stream_options={"include_usage": True}))
    text, finish, u2 = "", None, None
    for ev in sse_events(r2.text):
        if ev == "[DONE]":
            continue
        e = json.loads(ev)
        if e.get("usage"):
            u2 = e["usage"]
        for c in e["choices"]:
            text += c["delta"].get("content") or ""
            finish = c.get("finish_reason") or finish
    assert text == ch["message"]["content"] and finish == "length" and u2["completion_tokens"] <= LONG_MAX
    validator(LONG_SCHEMA).validate(json.loads(text))
    # opted out: cut at max_tokens as before, not a document
    r3 = http.post("/v1/chat/completions", json=long_request(guided_close=False))
    ch3 = r3.json()["choices"][0]
    assert ch3["finish_reason"] == "length" and r3.json()["usage"]["completion_tokens"] == LONG_MAX
    with pytest.raises(json.JSONDecodeError):
        json.loads(ch3["message"]["content"])
    # both follow the same greedy path until the closer steps in
    common = 0
    while common < min(len(text), len(ch3["message"]["content"])) and text[common] == ch3["message"]["content"][common]:
        common += 1
    assert common >= 10, (text, ch3["message"]["content"])
    # a budget below the shortest document is best effort: the shortest way on, cut as
    # without the closer, finish "length"
    r4 = http.post("/v1/chat/completions", json=long_request(max_tokens=3))
    assert r4.json()["choices"][0]["finish_reason"] == "length"
    r5 = http.post("/v1/chat/completions", json=long_request(guided_close="no"))
    assert r5.status_code == 400 and r5.json()["error"]["param"] == "guided_close", r5.text


def test_closer_leaves_fitting_and_unconstrained_requests_alone(http):
    """A constrained answer that fits its max_tokens, and an unconstrained one, come out the
    same with the closer as without it (token for token, finish "stop")."""
    fits = {"messages": [{"role": "user", "content": "Give me a point."}], "temperature": 0, "max_tokens": 64,
            "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": corpus.obj(
                {"x": {"type": "integer"}, "y": {"type": "integer"}})}}}
    free = {"messages": [{"role": "user", "content": "Name three colors."}], "temperature": 0, "max_tokens": 24}
    for body in (fits, free):
        a = http.post("/v1/chat/completions", json=body).json()
        b = http.post("/v1/chat/completions", json={**body, "guided_close": False}).json()
        assert a["choices"][0]["message"]["content"] == b["choices"][0]["message"]["content"]
        assert a["choices"][0]["finish_reason"] == b["choices"][0]["finish_reason"]
        assert a["usage"]["completion_tokens"] == b["usage"]["completion_tokens"]
    assert a["choices"][0]["finish_reason"] in ("stop", "length")  # unconstrained: whatever it was
    json.loads(http.post("/v1/chat/completions", json=fits).json()["choices"][0]["message"]["content"])


def test_unique_strings_when_the_model_repeats(http):
    """uniqueItems over strings through the daemon: asked to repeat one word, greedy SmolLM2
    is kept from closing a repeated item (it writes another string instead), so every output,
    plain and streamed, is valid, within max_tokens; the same prompts without uniqueItems
    do give repeats."""
    schema = {"type": "object", "properties": {"words": {"type": "array", "items": {"type": "string"},
                                                         "uniqueItems": True, "minItems": 4, "maxItems": 4}},
              "required": ["words"], "additionalProperties": False}
    rf = {"type": "json_schema", "json_schema": {"name": "w", "schema": schema, "strict": True}}
    stops = repeats = 0
    for prompt in ("Write the list: cat, cat, cat, cat.", 'Output ["a","a","a","a"]', "List 'x' four times.",
                   "Say hello four times."):
        r = chat(http, prompt, response_format=rf, max_tokens=160)
        assert r.status_code == 200, r.text
        ch = r.json()["choices"][0]
        print("unique:", prompt, ch["finish_reason"], ch["message"]["content"].replace("\n", " ")[:120])
        value = json.loads(ch["message"]["content"])
        validator(schema).validate(value)
        # the budget closer ends a model that keeps lengthening its item (finish "length")
        assert ch["finish_reason"] in ("stop", "length") and r.json()["usage"]["completion_tokens"] <= 160, ch
        stops += ch["finish_reason"] == "stop"
        free = dict(schema, properties={"words": {**schema["properties"]["words"], "uniqueItems": False}})
        r3 = chat(http, prompt, max_tokens=160, response_format={
            "type": "json_schema", "json_schema": {"name": "w", "schema": free, "strict": True}})
        words = json.loads(r3.json()["choices"][0]["message"]["content"])["words"]
        repeats += len(set(words)) < len(words)
        r2 = chat(http, prompt, response_format=rf, max_tokens=160, stream=True)
        text = "".join(c["delta"].get("content") or "" for ev in sse_events(r2.text) if ev != "[DONE]"
                       for c in json.loads(ev)["choices"])
        assert text == ch["message"]["content"]
    assert stops >= 2 and repeats >= 3, (stops, repeats)  # without uniqueItems it repeats


def test_openai_sdk_parse(server):
    pydantic = pytest.importorskip("pydantic")

    class City(pydantic.BaseModel):
        name: str = pydantic.Field(max_length=20)
        country: str = pydantic.Field(max_length=20)
        population: int

    class Cities(pydantic.BaseModel):
        cities: list[City] = pydantic.Field(max_length=2)

    c = oai(server.sock)
    done = c.chat.completions.parse(model="smollm2", temperature=0, max_tokens=MAX_TOKENS, response_format=Cities,
                                    messages=[{"role": "user", "content": "Name two big cities."}])
    parsed = done.choices[0].message.parsed
    assert isinstance(parsed, Cities) and all(isinstance(x, City) for x in parsed.cities)


def test_schema_reading_keys(http, tmp_path):
    """grammar.open_objects and grammar.infer_types through the daemon: two schemas the
    default reading cannot write (closed objects: the second key minProperties asks for has no
    name; the string a typeless minLength > maxLength implies does not exist) are a 400 there,
    and with the specification's reading (both keys flipped) give output that jsonschema
    accepts: an object with an undeclared key, a value of another type than string."""
    schemas = [{"type": "object", "properties": {"a": {"const": 1}}, "required": ["a"], "minProperties": 2,
                "maxProperties": 2},
               {"minLength": 5, "maxLength": 2}]
    rf = [{"type": "json_schema", "json_schema": {"name": "x", "schema": s}} for s in schemas]
    for f, needle in zip(rf, ["minProperties/maxProperties", "unsatisfiable"]):
        r = chat(http, "hi", response_format=f, max_tokens=8)
        assert r.status_code == 400 and needle in r.json()["error"]["message"], r.text
    spec = Server(str(tmp_path / "run" / "tpd.sock"),
                  extra=["--grammar.open_objects", "true", "--grammar.infer_types", "false"])
    try:
        with client(spec.sock, timeout=600) as c:
            for s, f in zip(schemas, rf):
                r = c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "Write JSON."}],
                                                          "temperature": 0, "max_tokens": 64, "response_format": f})
                assert r.status_code == 200, r.text
                ch = r.json()["choices"][0]  # complete within max_tokens (the closer), if not "stop"
                v = json.loads(ch["message"]["content"])
                validator(s).validate(v)
                assert (len(v) >= 2 and "a" in v) if "properties" in s else not isinstance(v, str), v
    finally:
        assert spec.stop() == 0


BAD = [
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "array", "contains": {"const": 1},
                                                                      "maxItems": 3}}}, "contains beside"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "strin"}}}, "unknown type 'strin'"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "array", "minItems": 3, "maxItems": 2}}},
     "unsatisfiable"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "#/$defs/a", "$defs": {
        "a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}}}}, "refers to itself"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "#/$defs/nope"}}}, "does not resolve"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "properties": {
        "a": {"$ref": "#"}}, "required": ["a"]}}}, "unsatisfiable"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string", "pattern": "(a"}}},
     "missing ')'"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string", "format": "uri",
                                                                      "pattern": "^h"}}}, "format and pattern"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"oneOf": [{"type": "string"}, {}]}}},
     "oneOf: branches 0 and 1"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "integer", "minimum": 5,
                                                                      "maximum": 1}}}, "unsatisfiable"),
    ({"type": "json_schema", "json_schema": {"schema": {}}}, "name"),
    ({"type": "xml"}, "response_format.type"),
]


@pytest.mark.parametrize("rf,needle", BAD)
def test_bad_response_format(http, rf, needle):
    t0 = time.time()
    r = chat(http, "hi", response_format=rf, max_tokens=4)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert needle in err["message"], err
    assert err["param"].startswith("response_format")
    assert time.time() - t0 < 10


@pytest.mark.parametrize("field,value,needle", [
    ("guided_regex", "a(b", "missing ')'"),
    ("guided_regex", "(a)\\1", "backreferences"),
    ("guided_regex", "(?=a)b", "lookaround"),
    ("guided_grammar", "root ::= foo", "'foo' is used but not defined"),
    ("guided_grammar", "root ::= \"a\" (", "line 1 column"),
    ("guided_grammar", "root ::= x \"a\"\nx ::= root | \"b\"", "left recursion"),
    ("guided_grammar", "rot ::= \"a\"", "no start rule 'root'"),
])
def test_bad_regex_and_grammar(http, field, value, needle):
    r = chat(http, "hi", max_tokens=4, **{field: value})
    assert r.status_code == 400, r.text
    assert needle in r.json()["error"]["message"] and r.json()["error"]["param"] == field


def test_huge_and_deep_schemas_refused_quickly_then_service_continues(http):
    # a ~1 MB schema (the body limit is 1 MiB; texts may be 4 MiB): its 6500 optional
    # properties are refused by the cost limit, named
    big = {"type": "object", "properties": {f"p{i}": {"type": "string", "description": "x" * 100} for i in range(6500)}}
    t0 = time.time()
    r = chat(http, "hi", max_tokens=4, response_format={"type": "json_schema", "json_schema": {"name": "x",
                                                                                               "schema": big}})
    assert r.status_code == 400 and "grammar.max_stacks" in r.json()["error"]["message"], r.text[:500]
    # deeply nested schema and a long chain of $refs
    deep = {"type": "integer"}
    for _ in range(200):
        deep = {"type": "object", "properties": {"a": deep}}
    r = chat(http, "hi", max_tokens=4, response_format={"type": "json_schema", "json_schema": {"name": "x",
                                                                                               "schema": deep}})
    assert r.status_code == 400 and "nested deeper" in r.json()["error"]["message"], r.text[:500]
    chain = {"$defs": {f"d{i}": {"type": "object", "properties": {"n": {"$ref": f"#/$defs/d{i + 1}"}}}
                       for i in range(2000)}, "$ref": "#/$defs/d0"}
    chain["$defs"]["d2000"] = {"type": "integer"}
    r = chat(http, "A JSON value:", max_tokens=40, response_format={"type": "json_schema", "json_schema": {
        "name": "x", "schema": chain}})
    assert r.status_code == 200, r.text[:500]  # 2000 $refs compile (one rule each), and generate
    ch = r.json()["choices"][0]
    if ch["finish_reason"] == "stop":
        jsonschema.validate(json.loads(ch["message"]["content"]), chain)
    assert time.time() - t0 < 60
    # and a good request still works
    r = chat(http, "Give me a point.", response_format={"type": "json_schema", "json_schema": {
        "name": "p", "schema": corpus.obj({"x": {"type": "integer"}, "y": {"type": "integer"}})}})
    assert r.status_code == 200
    v = json.loads(r.json()["choices"][0]["message"]["content"])
    assert isinstance(v["x"], int) and isinstance(v["y"], int)


def test_strict_false_drops_refused_keywords(http):
    """"strict": false: the keywords tpd refuses are dropped (a property named like one
    stays), the reply names them in X-Tpd-Schema-Dropped; strict (the default) is a 400 that
    says so."""
    schema = {"type": "object", "additionalProperties": False, "required": ["not"],
              "properties": {"not": {"type": "array", "items": {"type": "string", "maxLength": 5},
                                     "uniqueItems": True, "maxItems": 2},
                             "n": {"type": "integer", "multipleOf": 3, "minimum": 1}}}
    for strict in (True, None):
        js = {"name": "x", "schema": schema, **({"strict": strict} if strict is not None else {})}
        r = chat(http, "hi", max_tokens=4, response_format={"type": "json_schema", "json_schema": js})
        assert r.status_code == 400 and '"strict": false' in r.json()["error"]["message"], r.text
        assert "X-Tpd-Schema-Dropped" not in r.headers
    r = chat(http, "A list of fruits as JSON.", max_tokens=60, response_format={
        "type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": False}})
    assert r.status_code == 200, r.text
    assert r.headers["X-Tpd-Schema-Dropped"] == "uniqueItems, multipleOf", r.headers
    ch = r.json()["choices"][0]
    if ch["finish_reason"] == "stop":
        v = json.loads(ch["message"]["content"])
        assert isinstance(v["not"], list) and len(v["not"]) <= 2 and set(v) <= {"not", "n"}, v
    # still 400 where dropping cannot help
    r = chat(http, "hi", max_tokens=4, response_format={"type": "json_schema", "json_schema": {
        "name": "x", "strict": False, "schema": {"type": "array", "minItems": 3, "maxItems": 2}}})
    assert r.status_code == 400 and "unsatisfiable" in r.json()["error"]["message"], r.text


def test_generate_cli_json_schema_and_grammar(tmp_path):
    """`tpd generate --json-schema FILE` prints JSON valid for the schema; `--grammar FILE`
    output matches the grammar (independent recogniser); a bad grammar exits 2 naming it."""
    if tpd_cli.tpd_bin() is None or not os.path.exists(MODEL):
        pytest.skip("tpd or the model absent")
    import subprocess
    schema = corpus.obj({"city": {"type": "string", "maxLength": 20}, "rank": {"type": "integer", "minimum": 1,
                                                                                 "maximum": 10}})
    sf = tmp_path / "s.json"
    sf.write_text(json.dumps(schema))
    gf = tmp_path / "g.gbnf"
    gf.write_text(corpus.GBNF[0][2])
    base = ["generate", "--model", MODEL, "--chat", "--threads", "1", "-n", "96"]
    for extra, check in [(["--prompt", "Name a big city as JSON.", "--json-schema", str(sf)],
                          lambda out: jsonschema.validate(json.loads(out), schema)),
                         (["--prompt", "Write an arithmetic expression.", "--grammar", str(gf)],
                          lambda out: gbnf_ref.Grammar(corpus.GBNF[0][2]).matches(out) or pytest.fail(out))]:
        p = subprocess.run(tpd_cli.mpirun_cmd(2, base + extra), env=tpd_cli.mpirun_env(), capture_output=True,
                           text=True, timeout=600)
        assert p.returncode == 0, p.stderr[-2000:]
        check(p.stdout.rstrip("\n"))
    gf.write_text("root ::= \"x\" (\n")
    p = subprocess.run(tpd_cli.mpirun_cmd(2, base + ["--prompt", "hi", "--grammar", str(gf)]), env=tpd_cli.mpirun_env(),
                       capture_output=True, text=True, timeout=600)
    assert p.returncode != 0 and "GBNF parse error at line 2 column 1" in p.stderr, p.stderr[-2000:]
