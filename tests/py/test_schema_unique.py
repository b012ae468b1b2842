"""uniqueItems over strings (issue 27): arrays of strings that only a minLength bounds are
written with the unique quote (grammar/uniq.h), which closes an item only where it differs
from the array's earlier items as a decoded value. Checked three ways:

- instance by instance against the `jsonschema` package (the reference: its verdict on every
  datum is asserted too), with escapes that spell the same string, whitespace, and commas,
  brackets and escaped quotes inside items to mislead a reader of the text;
- the token masks after adversarial prefixes, over SmolLM2's real vocabulary (tokens such as
  `",` close an item and open the next in one step), against a recogniser of the prefix
  language written here (every token made only of letters, digits, '"', ',' and ']');
- random walks through allowed tokens: every complete sentence is valid for `jsonschema`.

Runs tests/grammar/grammar_driver.c; no daemon is needed."""
import json
import os
import subprocess

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("TPD_BUILD_DIR", os.path.join(ROOT, "build"))
DRIVER = os.path.join(BUILD, "tests", "grammar_driver")
MODEL = os.path.join(os.environ.get("TPD_SOURCE_DIR", ROOT), "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
jsonschema = pytest.importorskip("jsonschema")

if not os.path.exists(DRIVER):
    pytest.skip("grammar_driver not built", allow_module_level=True)

STRINGS = {"type": "array", "items": {"type": "string"}, "uniqueItems": True}


def validator(schema):
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def driver(tok, kind, schema, mode, *args, tmp):
    sp = os.path.join(tmp, "s.json")
    with open(sp, "w") as f:
        json.dump(schema, f)
    r = subprocess.run([DRIVER, tok, kind, sp, mode, *map(str, args)], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return r.stdout


def lines_file(tmp, texts):
    p = os.path.join(tmp, "i.txt")
    with open(p, "w") as f:
        f.write("".join(t.encode().hex() + "\n" for t in texts))
    return p


# (schema, valid texts, invalid texts): exact texts, as a model would write them
CASES = [
    (STRINGS,
     ['[]', '["a"]', '["a","b"]', '["a","ab","b"]', '[ "a" , "b" ]', '["", "x"]', '["a,b","a","b"]',
      '["\\"","\\\\"]', '["a\\\\","a"]', '["é","e"]', '["\\u00e9x","\\u00e9"]', '["\\n","n"]'],
     ['["a","a"]', '["a","b","a"]', '["","" ]', '["a","\\u0061"]', '["é","\\u00e9"]', '["/","\\/"]',
      '["\\n","\\u000a"]', '["a,\\"b","a,\\"b"]', '[ "x" ,\n  "y", "x"]', '["\\\\","\\\\"]',
      '["\\ud83d\\ude00","😀"]', '["a","b","c","d","e","f","g","h","c"]']),
    ({"type": "object", "properties": {"tags": {**STRINGS, "items": {"type": "string", "minLength": 2},
                                                "minItems": 2, "maxItems": 3}},
      "required": ["tags"], "additionalProperties": False},
     ['{"tags":["ab","cd"]}', '{"tags":["ab","abc","abcd"]}'],
     ['{"tags":["ab","ab"]}', '{"tags":["ab"]}', '{"tags":["a","bc"]}', '{"tags":["ab","cd","ef","gh"]}',
      '{"tags":["ab","cd","ab"]}']),
    # a pattern every match of which can be made longer (JSONSchemaStore chisel-slices)
    ({**STRINGS, "items": {"type": "string", "pattern": "^[a-z0-9][a-z0-9+\\-\\._]+$"}},
     ['["libc6_libs","ca-certificates_data"]', '["ab","ab1","ab.1"]'],
     ['["ab","ab"]', '["ab","cd","ab"]', '["a"]', '["Ab"]']),
    ({**STRINGS, "items": {"type": "string", "pattern": "x"}},
     ['["x","ax","xa"]'], ['["x","x"]', '["a"]']),
    # arrays of such arrays: each inner array on its own
    ({"type": "array", "items": STRINGS},
     ['[["a","b"],["a","b"]]', '[["a"],[],["a"]]'],
     ['[["a","b"],["b","b"]]', '[["x"],["y","y"]]']),
]


@pytest.mark.parametrize("k", range(len(CASES)))
@pytest.mark.parametrize("kind", ["schema-open", "schema"])
def test_instances(k, kind, tmp_path):
    schema, ok, bad = CASES[k]
    v = validator(schema)
    for t in ok:
        assert v.is_valid(json.loads(t)), ("test datum not valid", t)
    for t in bad:
        assert not v.is_valid(json.loads(t)), ("test datum not invalid", t)
    out = driver("-", kind, schema, "match", lines_file(str(tmp_path), ok + bad), tmp=str(tmp_path)).split()
    got = [x == "1" for x in out]
    wrong = [(t, "refused" if i < len(ok) else "accepted") for i, (t, g) in enumerate(zip(ok + bad, got))
             if g != (i < len(ok))]
    assert not wrong, wrong


def test_still_refused_where_not_exact(tmp_path):
    """Strings with a format or a maxLength, or a pattern some match of which cannot be made
    longer (or that a lookaround or word boundary could bound), may run out of distinct
    values (a dead end): still refused, naming uniqueItems."""
    for items in ({"type": "string", "maxLength": 3}, {"type": "string", "pattern": "^[ab]$"},
                  {"type": "string", "format": "date"}, {"type": ["string", "number"]},
                  {"type": "string", "pattern": "^a|b+$"}, {"type": "string", "pattern": "^(ab)+$"},
                  {"type": "string", "pattern": "^(?!.{4})[a-z]+$"}, {"type": "string", "pattern": "x$"},
                  {"type": "string", "pattern": "^[a-z]{2,5}$"}, {"type": "string", "pattern": "^\\w+\\b$"},
                  {"type": "string", "pattern": "^a+$", "minLength": 2}):
        out = subprocess.run([DRIVER, "-", "schema-open", "/dev/stdin", "compile"], capture_output=True, text=True,
                             input=json.dumps({**STRINGS, "items": items}), timeout=60)
        assert out.returncode == 1 and "uniqueItems" in out.stdout, (items, out.stdout)


def ref_prefix_ok(text):
    """Whether text can be continued into an array of distinct strings (STRINGS, written as
    tpd writes it: no whitespace after the array). A recogniser written for this test."""
    i, items, n = 0, [], len(text)

    def ws(i):
        while i < n and text[i] in " \t\n\r":
            i += 1
        return i
    if n == 0:
        return True
    if text[0] != "[":
        return False
    i = ws(1)
    if i < n and text[i] == "]":
        return i == n - 1
    while True:
        if i == n:
            return True
        if text[i] != '"':
            return False
        j = i + 1
        while j < n and text[j] != '"':
            if text[j] == "\\":
                j += 1
            j += 1
        if j >= n:  # inside the item: it can always be made new
            return True
        value = json.loads(text[i:j + 1])
        if value in items:
            return False
        items.append(value)
        i = ws(j + 1)
        if i == n:
            return True
        if text[i] == "]":
            return i == n - 1
        if text[i] != ",":
            return False
        i = ws(i + 1)


@pytest.fixture(scope="module")
def smol_tokens(tmp_path_factory):
    if not os.path.exists(MODEL):
        pytest.skip("SmolLM2 model absent")
    out = driver(MODEL, "json", {}, "vocab", tmp=str(tmp_path_factory.mktemp("v")))
    toks = {}
    for line in out.splitlines():
        p = line.split()
        if p[1] == "1" and len(p) > 3:
            toks[int(p[0])] = bytes.fromhex(p[3])
    simple = {i: b.decode() for i, b in toks.items()
              if b and all(chr(c).isalnum() and c < 128 or chr(c) in '",]' for c in b)}
    assert sum('"' in t for t in simple.values()) >= 5, "too few quote tokens"
    return simple


PREFIXES = ['[', '["a","b","', '["ab","a', '["',  '["a","ab","a', '["",', '["\\u0061","',
            '[ "x" , "y" ,"x', '["a\\\\","a', '["é","\\u00e9', '["he","the","', '["a,\\"b","a,\\"',
            '["1","2","12","']


def test_masks_vs_reference(smol_tokens, tmp_path):
    """The plain mask and the closer's near-budget mask after each prefix: over the simple
    tokens, plain allows exactly those the recogniser accepts; near is part of plain."""
    out = driver(MODEL, "schema-open", STRINGS, "masks", lines_file(str(tmp_path), PREFIXES),
                 tmp=str(tmp_path)).splitlines()
    assert len(out) == len(PREFIXES)
    closers = 0
    for prefix, line in zip(PREFIXES, out):
        assert line != "refused", prefix
        plain_s, near_s = line.split(" near")
        plain, near = set(map(int, plain_s.split()[1:])), set(map(int, near_s.split()))
        want = {i for i, t in smol_tokens.items() if ref_prefix_ok(prefix + t)}
        got = plain & set(smol_tokens)
        assert got == want, (prefix, sorted(smol_tokens[i] for i in got - want),
                             sorted(smol_tokens[i] for i in want - got))
        assert near <= plain and near, prefix
        closers += sum('"' in smol_tokens[i] for i in set(smol_tokens) - want)
    assert closers >= 10  # tokens refused for closing a repeat, not only for syntax


def test_random_walks_valid(tmp_path):
    """Random walks over single bytes (600 steps, a few items each): every complete sentence
    met is valid for jsonschema, and the walks do meet some (no dead end on the way)."""
    schema = {"type": "array", "items": {"type": "string"}, "uniqueItems": True, "minItems": 3}
    v, seen = validator(schema), 0
    for seed in range(1, 13):
        for line in driver("-", "schema-open", schema, "walk", seed, 600, tmp=str(tmp_path)).splitlines():
            st = json.loads(line)
            if st["can_end"]:
                text = bytes.fromhex(st["prefix"]).decode()
                assert v.is_valid(json.loads(text)), text
                seen += 1
    assert seen >= 3


def test_masks_equal_acceptance_on_every_token(smol_tokens, tmp_path):
    """Over the vocabulary (every token with a quote or a backslash, every 40th other: UTF-8
    pieces and whitespace included): a token is in
    the plain mask after a prefix exactly when the grammar takes the prefix and the token's
    bytes one by one (`where` mode), the path the mask's shortcuts must agree with."""
    out = driver(MODEL, "schema-open", STRINGS, "vocab", tmp=str(tmp_path))
    toks = {}
    for line in out.splitlines():
        p = line.split()
        if p[1] == "1" and len(p) > 3:
            toks[int(p[0])] = bytes.fromhex(p[3])
    masks = driver(MODEL, "schema-open", STRINGS, "masks", lines_file(str(tmp_path), PREFIXES),
                   tmp=str(tmp_path)).splitlines()
    ids = [i for i in sorted(toks) if b'"' in toks[i] or b"\\" in toks[i] or i % 40 == 0]
    for prefix, line in zip(PREFIXES, masks):
        plain = set(map(int, line.split(" near")[0].split()[1:]))
        p = os.path.join(str(tmp_path), "w.txt")
        with open(p, "w") as f:
            f.write("".join((prefix.encode() + toks[i]).hex() + "\n" for i in ids))
        where = driver("-", "schema-open", STRINGS, "where", p, tmp=str(tmp_path)).split()
        taken = {i for i, w in zip(ids, where) if int(w) in (-1, len(prefix.encode()) + len(toks[i]))}
        assert plain & set(ids) == taken, (prefix, [toks[i] for i in sorted(plain ^ taken)[:10]])
