"""The grammar module's token masks against brute force: at states reached by random walks
through allowed tokens (tests/grammar/grammar_driver.c), the mask must equal the set of tokens
whose bytes, appended to the output so far, keep it a prefix of the grammar's language, and
the end-of-generation tokens must be allowed exactly where the output is a whole sentence.

Independent references: the `regex` package's partial full-matching (ASCII regexes over the
SmolLM2 vocabulary), and a GBNF parser + Earley recogniser written for these tests
(tests/reference/gbnf_ref.py) for GBNF grammars and for the GBNF our JSON Schema converter
emits (the converter itself is checked by the corpus test with `jsonschema`)."""
import json
import os
import random
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "reference"))
import gbnf_ref  # noqa: E402

regex = pytest.importorskip("regex")
BUILD = os.environ.get("TPD_BUILD_DIR", os.path.join(ROOT, "build"))
DRIVER = os.path.join(BUILD, "tests", "grammar_driver")
MODEL = os.path.join(os.environ.get("TPD_SOURCE_DIR", ROOT), "models", "SmolLM2-135M-Instruct.Q4_1.gguf")

if not os.path.exists(DRIVER):
    pytest.skip("grammar_driver not built", allow_module_level=True)


def driver(tok, kind, text, *args, tmp):
    path = os.path.join(tmp, "g.txt")
    with open(path, "w") as f:
        f.write(text)
    r = subprocess.run([DRIVER, tok, kind, path, *map(str, args)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return r.stdout


def walk(tok, kind, text, seed, steps, tmp):
    return [json.loads(l) for l in driver(tok, kind, text, "walk", seed, steps, tmp=tmp).splitlines()]


@pytest.fixture(scope="module")
def smol_vocab(tmp_path_factory):
    if not os.path.exists(MODEL):
        pytest.skip("SmolLM2 model absent")
    out = driver(MODEL, "json", "", "vocab", tmp=str(tmp_path_factory.mktemp("v")))
    toks, ends = {}, set()
    for line in out.splitlines():
        p = line.split()
        i, usable, end = int(p[0]), p[1] == "1", p[2] == "1"
        if usable:
            toks[i] = bytes.fromhex(p[3]) if len(p) > 3 else b""
        if end:
            ends.add(i)
    return toks, ends


ASCII_REGEXES = [
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}",
    r"(cat|dog)s? (and|or) [a-z]+",
    r"\w+@\w+\.(com|org|net)",
    r"[A-Z][a-z]{2,8}( [A-Z][a-z]{2,8}){0,2}",
    r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?",
    r"(\(\d{3}\) |\d{3}-)\d{3}-\d{4}",
    r"[^\n\"\u0080-\U0010FFFF]{0,12}\.",
]


@pytest.mark.parametrize("pattern", ASCII_REGEXES)
def test_regex_masks_vs_regex_partial_match(smol_vocab, pattern, tmp_path):
    toks, ends = smol_vocab
    states = 0
    for seed in (1,):
        for st in walk(MODEL, "regex", pattern, seed, 12, str(tmp_path)):
            prefix = bytes.fromhex(st["prefix"])
            text = prefix.decode("ascii")
            want = set()
            for i, b in toks.items():
                if b and max(b) < 0x80 and regex.fullmatch(pattern, text + b.decode("ascii"), partial=True):
                    want.add(i)
            got = set(st["allowed"])
            full = regex.fullmatch(pattern, text) is not None
            assert (got & ends == ends) == full, (pattern, text)
            got -= ends
            assert got == want, (pattern, text, sorted(got - want)[:10], sorted(want - got)[:10])
            states += 1
    assert states >= 2


GBNF_CASES = {
    "arith": r'''
root ::= expr
expr ::= term (("+" | "-") term)*
term ::= factor (("*" | "/") factor)*
factor ::= [0-9]+ | "(" expr ")" | "-" factor
''',
    "list": r'''
root ::= "[" ws (item ("," ws item)*)? "]"
item ::= "\"" [a-zé∑😀]{1,5} "\"" | [0-9]{1,3} | "null"
ws ::= " "?
''',
    "unicode": r'''
root ::= greeting " " name "!"?
greeting ::= "héllo" | "こんにちは" | "привет"
name ::= [^ !\x00-\x1F]{1,6}
''',
    "nullable": r'''
root ::= a b c "x"
a ::= "a"?
b ::= ("b" | ) c
c ::= "c"*
''',
}

SCHEMA_CASES = {
    "nested": {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 6},
        "n": {"type": "integer", "minimum": -20, "maximum": 350},
        "tags": {"type": "array", "items": {"enum": ["a", "b\"c", 1, None]}, "maxItems": 2},
        "sub": {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}},
        "required": ["name", "sub"]},
    "recursive": {"$defs": {"node": {"type": "object", "properties": {
        "v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}},
        "required": ["v"]}}, "$ref": "#/$defs/node"},
    # patternProperties' keys: one rule per state of an automaton, classes of code points
    "pattern-keys": {"type": "object", "properties": {"ab": {"type": "integer"}},
                     "patternProperties": {"^a": {"minimum": 0}, "x(y|\u00e9)+$": {"type": "string"}},
                     "additionalProperties": {"type": "boolean"}},
}


def check_bytes_masks(text_gbnf, states):
    g = gbnf_ref.Grammar(text_gbnf)
    for st in states:
        prefix = bytes.fromhex(st["prefix"])
        ref = g.state(prefix)
        assert ref is not None, prefix
        want = {b for b in range(256) if g.extend(ref, bytes([b])) is not None}
        got = set(st["allowed"])
        full = not ref[1] and g.complete(ref[0])
        assert (256 in got) == full, prefix
        got.discard(256)
        assert got == want, (prefix, sorted(got - want), sorted(want - got))


@pytest.mark.parametrize("name", sorted(GBNF_CASES))
def test_gbnf_byte_masks_vs_earley(name, tmp_path):
    text = GBNF_CASES[name]
    for seed in (1, 2, 3):
        check_bytes_masks(text, walk("-", "gbnf", text, seed, 40, str(tmp_path)))


@pytest.mark.parametrize("name", sorted(SCHEMA_CASES))
def test_schema_byte_masks_vs_earley(name, tmp_path):
    schema = json.dumps(SCHEMA_CASES[name])
    gbnf = driver("-", "schema", schema, "gbnf", tmp=str(tmp_path))
    for seed in (1, 2):
        check_bytes_masks(gbnf, walk("-", "schema", schema, seed, 60, str(tmp_path)))


@pytest.mark.parametrize("kind,name", [("gbnf", "list"), ("gbnf", "unicode"), ("schema", "nested")])
def test_token_masks_vs_earley(smol_vocab, kind, name, tmp_path):
    """Real tokens (multi-byte, partial UTF-8): a sample of the vocabulary plus a sample of
    what the mask allows, each checked through the Earley recogniser."""
    toks, ends = smol_vocab
    text = GBNF_CASES[name] if kind == "gbnf" else json.dumps(SCHEMA_CASES[name])
    gbnf = text if kind == "gbnf" else driver("-", "schema", text, "gbnf", tmp=str(tmp_path))
    g = gbnf_ref.Grammar(gbnf)
    rnd = random.Random(7)
    ids = sorted(toks)
    checked = 0
    for st in walk(MODEL, kind, text, 5, 10, str(tmp_path)):
        prefix = bytes.fromhex(st["prefix"])
        ref = g.state(prefix)
        assert ref is not None
        got = set(st["allowed"])
        full = not ref[1] and g.complete(ref[0])
        assert (got & ends == ends) == full
        allowed = sorted(got - ends)
        sample = set(rnd.sample(ids, 600)) | set(rnd.sample(allowed, min(150, len(allowed))))
        for i in sample:
            ok = g.extend(ref, toks[i]) is not None
            assert ok == (i in got), (prefix, toks[i], ok)
            checked += 1
    assert checked > 3000
