"""JSON Schema -> grammar, value by value (issue 27): for each schema, instances that the
`jsonschema` package (the independent reference, format checker on) calls valid must be
taken by the compiled grammar where listed under `ok`, and instances it calls invalid must
be refused (`bad`). Every verdict of the reference is asserted too, so a wrong test datum
fails here rather than passing silently. Schemas the converter must refuse (a keyword that
changes validity but is not implemented, a oneOf it cannot make exclusive) are compiled and
their error checked.

Runs the grammar module through tests/grammar/grammar_driver.c (`match` mode) over a
vocabulary of single bytes, so no model is needed; texts are matched whole, as the output
of a generation would be. Both readings of an object without additionalProperties are
checked: `ok` and `bad` with the specification's (open, kind `schema-open`), and `bad` again
with the default closed one (`schema`), which must refuse every invalid instance too."""
import json
import os
import re
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("TPD_BUILD_DIR", os.path.join(ROOT, "build"))
DRIVER = os.path.join(BUILD, "tests", "grammar_driver")
jsonschema = pytest.importorskip("jsonschema")

if not os.path.exists(DRIVER):
    pytest.skip("grammar_driver not built", allow_module_level=True)


class R(str):
    """An instance given as its exact text (key order, duplicate keys, whitespace)."""


def compact(v):
    return str(v) if isinstance(v, R) else json.dumps(v, separators=(",", ":"), ensure_ascii=False)


def validator(schema):
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def run_driver(schema, texts, tmp_path, mode="match", kind="schema-open"):
    sp, ip = tmp_path / "s.json", tmp_path / "i.txt"
    sp.write_text(json.dumps(schema) if not isinstance(schema, str) else schema)
    ip.write_text("".join(t.encode().hex() + "\n" for t in texts))
    args = [DRIVER, "-", kind, str(sp), mode] + ([str(ip)] if mode == "match" else [])
    r = subprocess.run(args, capture_output=True, text=True, timeout=120)
    return r


def matches(schema, texts, tmp_path, kind="schema-open"):
    r = run_driver(schema, texts, tmp_path, kind=kind)
    assert r.returncode == 0, r.stdout + r.stderr
    got = [l == "1" for l in r.stdout.split()]
    assert len(got) == len(texts)
    return got


def check(schema, ok, bad, tmp_path):
    v = validator(schema)
    texts = [compact(x) for x in ok + bad]
    for t in texts[:len(ok)]:
        assert v.is_valid(json.loads(t)), ("test datum not valid", t)
    for t in texts[len(ok):]:
        assert not v.is_valid(json.loads(t)), ("test datum not invalid", t)
    got = matches(schema, texts, tmp_path)
    wrong = [(t, "refused" if i < len(ok) else "accepted") for i, (t, g) in enumerate(zip(texts, got))
             if g != (i < len(ok))]
    assert not wrong, wrong
    # the specification's reading (a schema without type takes every type too): exact as well
    got = matches(schema, texts, tmp_path, kind="schema-spec")
    wrong = [(t, "refused" if i < len(ok) else "accepted") for i, (t, g) in enumerate(zip(texts, got))
             if g != (i < len(ok))]
    assert not wrong, ("schema-spec", wrong)
    if bad:  # closed objects: a subset of the open reading, so every invalid instance is refused too
        r = run_driver(schema, texts[len(ok):], tmp_path, kind="schema")
        if r.returncode == 0:
            closed = [l == "1" for l in r.stdout.split()]
            assert not any(closed), [t for t, g in zip(texts[len(ok):], closed) if g]
        else:  # a schema the closed reading cannot write at all must say why
            assert "unsatisfiable" in r.stdout or "minProperties" in r.stdout, r.stdout + r.stderr


def sentences(schema, seeds, steps, tmp_path, kind="schema-open"):
    """The complete sentences met on random walks (random allowed bytes) through the grammar."""
    sp = tmp_path / "w.json"
    sp.write_text(json.dumps(schema))
    for seed in range(1, seeds + 1):
        r = subprocess.run([DRIVER, "-", kind, str(sp), "walk", str(seed), str(steps)], capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, r.stdout[-500:] + r.stderr
        for line in r.stdout.splitlines():
            st = json.loads(line)
            if st["can_end"]:
                yield bytes.fromhex(st["prefix"]).decode()


def walked_valid(schema, seeds, steps, tmp_path, kind="schema-open"):
    """How many complete sentences random walks met, each asserted valid for jsonschema."""
    v = validator(schema)
    seen = 0
    for text in sentences(schema, seeds, steps, tmp_path, kind):
        assert v.is_valid(json.loads(text)), text
        seen += 1
    return seen


def refused(schema, needle, tmp_path):
    r = run_driver(schema, [], tmp_path, mode="compile")
    assert r.returncode == 1 and needle in r.stdout, r.stdout + r.stderr


# (name, schema, ok, bad)
SOUNDNESS = [
    # a $ref by the root's own $id (JSONSchemaStore ninjs-1.3: its associations were never
    # written, "does not resolve"), and a percent-encoded pointer fragment (RFC 6901, 6)
    ("ref-by-root-id",
     {"$id": "http://x.org/s.json#", "type": "object",
      "properties": {"a": {"$ref": "http://x.org/s.json#/$defs/t"}, "b": {"$ref": "#/$defs/a%20b"},
                     "c": {"$ref": "http://x.org/s.json"}},
      "$defs": {"t": {"type": "integer"}, "a b": {"type": "string"}}},
     [{"a": 1}, {"b": "x"}, {"c": {"a": 2, "c": {"b": "y"}}}],
     [{"a": "x"}, {"b": 1}, {"c": {"a": "x"}}]),
    # an allOf subschema's then/else and min/maxContains come along with if and contains
    # (JSONSchemaStore shopware-project: {"type": "multi"} accepted without its "queries")
    ("allof-if-then",
     {"type": "object", "additionalProperties": False, "required": ["type"],
      "properties": {"type": {"type": "string", "enum": ["a", "multi"]}, "q": {"type": "integer"}},
      "allOf": [{"if": {"properties": {"type": {"const": "multi"}}}, "then": {"required": ["type", "q"]}}]},
     [{"type": "multi", "q": 1}], [{"type": "multi"}, {"type": "multi", "q": "x"}]),
    ("allof-minContains", {"type": "array", "allOf": [{"contains": {"const": 1}, "minContains": 2}]},
     [[1, 1], [1, 2, 1]], [[1], [1, 2], []]),
    # a declared property never comes out through the additionalProperties path
    ("declared-vs-additional-schema",
     {"properties": {"a": {"type": "string"}}, "additionalProperties": {"type": "integer"}},
     [{"a": "x"}, {"a": "x", "b": 1}, {"b": 1}, {}, {"ab": 2}, {"": 3}],
     [{"a": 1}, {"a": "x", "b": "y"}]),
    ("declared-vs-additional-true-dup",
     {"properties": {"a": {"type": "string"}}, "additionalProperties": True},
     [{"a": "x"}, {"a": "x", "b": 1}, {"aa": 1}, {"b": [1]}],
     [R('{"a":"x","a":1}'), R('{"a":1}'), R('{"b":1,"a":1}')]),
    ("declared-names-escaped",
     {"properties": {"a\"b": {"type": "integer"}, "\u00e9": {"type": "integer"}, "a/": {"type": "integer"}},
      "additionalProperties": {"type": "string"}},
     [R('{"a\\"b":1}'), {"\u00e9": 1}, {"x": "s"}, R('{"a\\\\":"s"}'), {"a": "s"}, {"\u00e9\u00e9": "s"}],
     [R('{"a\\"b":"s"}'), R('{"\\u00e9":"s"}'), R('{"a\\/":"s"}'), {"a/": "s"}]),
    ("declared-false-vs-additional",
     {"type": "object", "properties": {"a": False, "b": {"type": "integer"}}, "additionalProperties": True},
     [{"b": 1}, {"b": 1, "c": "z"}],
     [{"a": 1}, {"b": 1, "a": 1}]),
    ("required-undeclared-vs-additional",
     {"type": "object", "required": ["k"], "additionalProperties": {"type": "integer"}},
     [{"k": 1}, {"k": 1, "j": 2}],
     [R('{"k":1,"k":"x"}'), R('{"k":"x"}'), {"j": 2}]),
    # allOf keeps each subschema's additionalProperties: false
    ("allof-additional-false",
     {"type": "object", "allOf": [{"properties": {"a": {"type": "integer"}}, "additionalProperties": False}],
      "properties": {"b": {"type": "integer"}}},
     [{}, {"a": 1}],
     [{"b": 2}, {"a": 1, "b": 2}]),
    ("allof-additional-schema",
     {"allOf": [{"type": "object", "properties": {"a": {"type": "string"}},
                 "additionalProperties": {"type": "integer"}},
                {"properties": {"b": {"type": "integer", "minimum": 0}}}]},
     [{"a": "x"}, {"a": "x", "b": 3}],
     [{"b": -1}, {"a": "x", "b": "s"}]),
    # allOf combines bounds (the tighter), types and enums (those in both), items (both)
    ("allof-bounds-types",
     {"allOf": [{"type": ["integer", "null"], "minimum": 0, "maximum": 10},
                {"type": ["number", "string"], "minimum": 2, "maximum": 20}]},
     [2, 10, 5], [1, 11, None, "x", 2.5]),
    ("allof-enum-items",
     {"allOf": [{"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3},
                {"items": {"enum": ["b", "c", "d"]}, "maxItems": 2}]},
     [["b", "c"], []], [["a"], ["b", "c", "b"], ["d"]]),
    # oneOf: exclusive where tpd can tell
    ("oneof-types",
     {"oneOf": [{"type": "integer"}, {"type": "string"}, {"type": "null"}]},
     [1, "x", None], [1.5, True]),
    ("oneof-discriminator",
     {"oneOf": [{"type": "object", "properties": {"kind": {"const": "cat"}, "lives": {"type": "integer"}},
                 "required": ["kind"]},
                {"type": "object", "properties": {"kind": {"const": "dog"}, "bark": {"type": "boolean"}},
                 "required": ["kind"]}]},
     [{"kind": "cat", "lives": 9}, {"kind": "dog"}],
     [{"kind": "cow"}]),
    ("oneof-required-sharpened",
     {"oneOf": [{"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                 "required": ["a"]},
                {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                 "required": ["b"]}]},
     [{"a": 1}, {"b": 2}],
     [{"a": 1, "b": 2}, {}]),
    ("oneof-enums",
     {"oneOf": [{"enum": ["a", "b"]}, {"enum": ["c", 1]}, {"type": "boolean"}]},
     ["a", "c", 1, True], ["d"]),
    ("oneof-ranges",
     {"oneOf": [{"type": "integer", "maximum": 0}, {"type": "integer", "minimum": 1}]},
     [0, -5, 1, 7], [1.5]),
    # additionalProperties absent allows extra keys, as the specification says (JSONSchemaBench:
    # most valid Github instances refused had one); never a declared name, never twice
    ("open-by-default",
     {"type": "object", "properties": {"a": {"type": "integer"}, "b": False}, "required": ["a"]},
     [{"a": 1, "c": "x"}, {"a": 1, "c": {"d": [1]}, "e": None}, {"a": 1}],
     [{"a": "x"}, {"a": 1, "b": 2}, R('{"a":1,"a":"x"}'), R('{"a":1,"c":2,"a":"x"}'), {"c": 1}]),
    ("oneof-open-objects",
     {"oneOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                {"type": "object", "properties": {"b": {"type": "integer"}}, "required": ["b"]}]},
     [{"a": 1}, {"b": 2}, {"a": 1, "c": 3}],
     [{"a": 1, "b": 2}, {}, {"c": 3}, {"a": 1, "b": 2, "c": 3}]),
    # an undeclared name whose dependencies would need others is left out, not made to need them
    ("dependency-undeclared-trigger",
     {"type": "object", "properties": {"a": {"type": "integer"}}, "dependentRequired": {"z": ["a"]}},
     [{}, {"a": 1}, {"y": 1}, {"a": 1, "y": [2]}], [{"z": 1}, {"z": 1, "y": 2}]),
    # patternProperties' keys are written as extra keys (JSONSchemaBench: maps of ".*")
    ("pattern-keys-universal",
     {"type": "object", "properties": {"id": {"type": "integer"}},
      "patternProperties": {".*": {"type": ["integer", "string"]}}, "additionalProperties": False},
     [{"id": 1, "x": "s"}, {"x": 2, "y": "z"}, {"id": 1}, {"": 3}],
     [{"id": "s"}, {"x": None}, R('{"id":1,"id":"s"}'), {"x": [1]}]),
    ("pattern-keys-regex",
     {"type": "object", "properties": {"name": {"type": "string"}},
      "patternProperties": {"^x-[a-z]+$": {"type": "integer"}}, "additionalProperties": False},
     [{"name": "n", "x-ab": 1}, {"x-a": 2, "x-b": 3}, {}],
     [{"x-a": "s"}, {"y": 1}, {"x-A": 1}, {"name": 1, "x-a": 1}]),
    ("pattern-keys-one-line",
     {"type": "object", "properties": {"a": {"type": "string"}},
      "patternProperties": {"^.+$": {"type": "integer"}}, "additionalProperties": False},
     [{"b": 1}, {"bc": 2, "d": 3}, {}], [{"a": "s"}, {"b": "s"}, {"a": 1}, R('{"":1}')]),
    ("pattern-keys-two-schemas",
     {"type": "object", "patternProperties": {"^a": {"type": "integer"}, "b$": {"minimum": 0}},
      "additionalProperties": False},
     [{"ab": 1}, {"a": 2}, {"b": 3}, {}], [{"ab": -1}, {"a": "s"}, {"c": 1}, {"b": -2}]),
    ("pattern-keys-beside-open",
     {"type": "object", "properties": {"k": {"type": "string"}},
      "patternProperties": {"^[0-9]+$": {"type": "boolean"}}},
     [{"k": "v", "12": True}, {"3": False}], [{"12": 1}, {"k": 1}]),
    # an allOf side closed by additionalProperties false admits no key of the other's patterns
    ("pattern-keys-allof-closed",
     {"allOf": [{"patternProperties": {"^x": {"type": "integer"}}},
                {"properties": {"a": {}}, "additionalProperties": False}]},
     [{"a": 1}, {}], [{"x1": 1}, {"a": 1, "x": 1}]),
    ("pattern-keys-not-required",
     {"type": "object", "patternProperties": {".*": {"type": "integer"}}, "additionalProperties": False,
      "not": {"required": ["xa"]}},
     [{"xb": 1}, {}], [{"xa": 1}, {"xb": "s"}, {"xb": 1, "xa": 2}]),
    ("pattern-keys-dependency",
     {"type": "object", "properties": {"a": {"type": "integer"}},
      "patternProperties": {"^z": {"type": "integer"}}, "dependentRequired": {"z1": ["a"]}},
     [{"a": 1}, {}], [{"z1": 1}]),
    ("pattern-keys-minProperties",
     {"type": "object", "patternProperties": {"^[0-9]x$": {"type": "string"}}, "additionalProperties": False,
      "minProperties": 1},
     [{"1x": "a"}, {"2x": "b", "3x": "c"}], [{}, {"1x": 1}, {"y": "a"}]),
    ("pattern-keys-dependency-universal",
     {"type": "object", "properties": {"a": {"type": "integer"}},
      "patternProperties": {".*": {"type": "integer"}}, "dependentRequired": {"z1": ["a"], "a": ["z2"]}},
     [{"y": 3}, {"y": 3, "q": 4}], [{"z1": 1}, {"y": "s"}, {"a": 1}, {"z1": 1, "y": 2}]),
    # a dependentSchemas schema merged in brings its oneOf along (JSONSchemaBench o72203)
    ("dependency-schema-oneof",
     {"type": "object", "properties": {"k": {"enum": ["a", "b"]}}, "required": ["k"], "additionalProperties": True,
      "dependentSchemas": {"k": {"oneOf": [{"properties": {"k": {"const": "a"}, "v": {"type": "integer"}}},
                                           {"properties": {"k": {"const": "b"}, "v": {"type": "string"}}}]}}},
     [{"k": "a", "v": 1}, {"k": "b", "v": "s"}], [{"k": "a", "v": "s"}, {"k": "b", "v": 1}]),
    # more dependency schemas than are split both ways, each narrowing one shared enum
    # property: one branch per value of it, and one without it (JsonSchemaStore's mongodb-atlas)
    ("dependency-schemas-by-value",
     {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "additionalProperties": False,
      "properties": {"t": {"type": "string", "enum": ["a", "b", "c"]}, "w": {"type": "integer"},
                     "x": {"type": "integer"}, "y": {"type": "integer"}, "z": {"type": "integer"}},
      "dependencies": {"w": {"properties": {"t": {"enum": ["a"]}}}, "x": {"properties": {"t": {"enum": ["a", "b"]}}},
                       "y": {"properties": {"t": {"const": "b"}}}, "z": {"properties": {"t": {"enum": ["c"]}}}}},
     [{"t": "a", "w": 1, "x": 2}, {"w": 1, "x": 1, "y": 1, "z": 1}, {"t": "b", "x": 1, "y": 2}, {"t": "c", "z": 1},
      {}, {"t": "c"}],
     [{"t": "a", "y": 1}, {"t": "c", "x": 1}, {"t": "d"}, {"t": "b", "w": 1}, {"t": "a", "w": "s"}]),
    ("dependent-schemas-by-value-required",
     {"type": "object", "required": ["t"],
      "properties": {"t": {"enum": [1, 2]}, "w": {}, "x": {}, "y": {}, "z": {}},
      "dependentSchemas": {"w": {"properties": {"t": {"const": 1}}}, "x": {"properties": {"t": {"const": 1}}},
                           "y": {"properties": {"t": {"const": 2}}}, "z": {"properties": {"t": {"const": 2}}}}},
     [{"t": 1, "w": 0, "x": "s"}, {"t": 2, "y": None, "z": []}, {"t": 2, "q": 1}],
     [{"t": 1, "y": 0}, {"t": 2, "w": 0}, {"w": 0}, {"t": 3}]),
    # a schema that merges ($ref inside allOf, or beside anyOf/other keywords) met again inside
    # itself through its $ref is a recursive rule, not an endless merge (Github_medium o13135,
    # JsonSchemaStore resjson)
    ("recursive-allof-ref",
     {"$schema": "http://json-schema.org/draft-04/schema#", "type": "array", "items": {"allOf": [{"$ref": "#/d/i"}]},
      "d": {"i": {"type": "object", "additionalProperties": False, "required": ["v", "c"],
                  "properties": {"v": {"type": "string"}, "c": {"type": "array", "items": {"allOf": [
                      {"$ref": "#/d/i"}]}}}}}},
     [[{"v": "a", "c": [{"v": "b", "c": [{"v": "c", "c": []}]}]}], []],
     [[{"v": "a", "c": [{"v": "b", "c": [{"v": "c"}]}]}], [{"v": "a", "c": [{"v": 1, "c": []}]}]]),
    ("recursive-anyof-siblings",
     {"type": "object", "additionalProperties": {"minProperties": 1, "anyOf": [{"type": "string"}, {"$ref": "#/$defs/r"}]},
      "$defs": {"r": {"type": "object", "additionalProperties": {
          "minProperties": 1, "anyOf": [{"type": "string"}, {"$ref": "#/$defs/r"}]}}}},
     [{"a": "s", "b": {"c": "t", "d": {"e": "u"}}}, {}],
     [{"a": {}}, {"a": {"b": {}}}, {"a": 5}, {"a": {"b": {"c": 1}}}]),
    ("recursive-ref-beside-type",
     {"$ref": "#/$defs/p", "$defs": {"p": {"properties": {"c": {"type": ["array", "object"],
      "additionalProperties": {"type": ["boolean", "object"], "$ref": "#/$defs/p"}}}}}},
     [{"c": {"x": True, "y": {"c": {"z": False}}}}, {"c": []}],
     [{"c": {"x": True, "y": {"c": {"z": 3}}}}, {"c": {"x": "s"}}]),
    # such a schema's own rule written while an outer one is (an anyOf branch written at once,
    # the if/then lowering): its body, not a rule that is only itself (JsonSchemaStore pulumi)
    ("recursive-merge-in-branch",
     {"$schema": "http://json-schema.org/draft-07/schema#", "$ref": "#/$defs/c", "$defs": {
         "s": {"enum": ["string", "integer", "array"]},
         "c": {"type": "object", "required": ["type"], "properties": {
             "type": {"oneOf": [{"$ref": "#/$defs/s"}, {"$ref": "#/$defs/c"}]}, "items": {"$ref": "#/$defs/c"}},
             "if": {"properties": {"type": {"const": "array"}}}, "then": {}}}},
     [{"type": "string"}, {"type": {"type": "integer"}}, {"type": "array", "items": {"type": "string"}},
      {"type": {"type": {"type": "array"}}}],
     [{"type": "object"}, {}, {"type": {}}, {"type": 5}, {"type": "array", "items": {"type": 1}}]),
    # keywords of one type without "type": their type is written (JSONSchemaBench o82151)
    ("untyped-patternProperties",
     {"type": "object", "properties": {"m": {"patternProperties": {".*": {"type": "integer"}}}}},
     [{"m": {"a": 1}}, {"m": {}}], [{"m": {"a": "s"}}]),
    # an anyOf branch no value meets is left out
    ("anyof-unsatisfiable-branch",
     {"anyOf": [{"type": "string", "minLength": 3, "maxLength": 2}, {"type": "integer"}]}, [1], ["abc", 1.5]),
    # oneOf against a branch that has its own oneOf: narrowed by the names those require
    ("oneof-nested-branches",
     {"oneOf": [{"$ref": "#/$defs/c"}, {"$ref": "#/$defs/e"}],
      "$defs": {"c": {"type": "object", "required": ["s"], "properties": {"s": {"type": "string"}},
                      "oneOf": [{"required": ["x"], "properties": {"x": {"type": "integer"}}},
                                {"required": ["y"], "properties": {"y": {"type": "integer"}}}]},
                "e": {"type": "object", "required": ["s", "m"], "properties": {"s": {"type": "string"},
                                                                               "m": {"type": "string"}}}}},
     [{"s": "c", "x": 1}, {"s": "c", "y": 2}, {"s": "e", "m": "z"}],
     [{"s": "c", "x": 1, "y": 2}, {"s": "e"}, {"s": "e", "m": "z", "x": 1}]),
]

# unknown keywords and annotations are ignored, as the specification says
COVERAGE = [
    ("unknown-keywords",
     {"id": "http://x/y", "type": "object", "x-vendor": {"a": 1}, "readonly": True, "links": [{"rel": "self"}],
      "example": {"a": 1}, "examples": [{"a": 2}], "self": {"vendor": "v"}, "javaType": "com.x.Y",
      "nullable": True, "then": {"type": "string"}, "additionalItems": False, "$anchor": "top",
      "properties": {"a": {"type": "integer", "x-go-type": "int64", "format": "int64"}}, "required": ["a"]},
     [{"a": 1}], [{"a": "x"}, {}]),
    # oneOf branches told apart by a discriminator each optional branch is narrowed to write
    # (JSONSchemaStore schema.json's targets), and by patterns beside enums (machine.schema.json)
    ("oneof-require-discriminator",
     {"oneOf": [{"type": "object", "properties": {"b": {"type": "string", "not": {"enum": ["x", "y"]}}},
                 "required": ["b"]},
                {"type": "object", "properties": {"b": {"const": "x"}, "o": {"type": "integer"}}},
                {"type": "object", "properties": {"b": {"const": "y"}}}]},
     [{"b": "z"}, {"b": "x"}, {"b": "y"}, {"b": "x", "o": 1}], [{}, {"b": "x", "o": "s"}, {"o": 1}]),
    ("oneof-pattern-discriminator",
     {"oneOf": [{"type": "object", "properties": {"t": {"enum": ["atomic", "final"], "pattern": "atomic"}, "on": {}},
                 "required": ["t", "on"]},
                {"type": "object", "properties": {"t": {"enum": ["atomic", "final"], "pattern": "final"}},
                 "required": ["t"]}]},
     [{"t": "final"}, {"t": "atomic", "on": 1}, {"t": "final", "on": 1}], [{"t": "x"}, {"t": "atomic"}]),
]

# keywords lowered to a narrower schema (docs/structured-output.md)
D7 = "http://json-schema.org/draft-07/schema#"
KEYWORDS = [
    ("additionalItems-false", {"$schema": D7, "type": "array", "items": [{"type": "integer"}, {"type": "string"}],
                               "additionalItems": False},
     [[1, "a"], [1], []], [[1, "a", 2], ["a"]]),
    ("additionalItems-schema", {"$schema": D7, "type": "array", "items": [{"type": "integer"}],
                                "additionalItems": {"type": "boolean"}},
     [[1, True, False], [1]], [[1, 3]]),
    ("if-then", {"type": "object", "properties": {"k": {"type": "string"}, "x": {"type": "integer"}},
                 "if": {"properties": {"k": {"const": "a"}}}, "then": {"required": ["x"]}, "else": {"maxProperties": 0}},
     [{"k": "a", "x": 1}, {"x": 1}], [{"k": "a"}, {"k": "b", "x": 1}]),
    # if/then/else as the union (if and then) or (not if and else), where not if is written:
    # JSONSchemaStore sounds.json (an array with an object item takes the else branch)
    ("if-items-else", {"type": "array", "if": {"items": {"type": "string"}},
                       "then": {"items": {"pattern": "^a"}},
                       "else": {"items": {"type": "object", "properties": {"name": {"type": "string"}}}}},
     [[{}], ["ab"], [], [{"name": "x"}, {}]], [["b"], [{"name": 1}], ["a", {}]]),
    ("if-discriminator-else", {"type": "object", "properties": {"kind": {"type": "string"}, "a": {"type": "integer"},
                                                                "b": {"type": "integer"}},
                               "if": {"properties": {"kind": {"const": "a"}}, "required": ["kind"]},
                               "then": {"required": ["a"]}, "else": {"required": ["b"]}},
     [{"kind": "a", "a": 1}, {"kind": "x", "b": 1}, {"b": 2}, {"kind": "a", "a": 1, "b": 2}, {"kind": "", "b": 0}],
     [{"kind": "a", "b": 1}, {"kind": "x", "a": 1}, {"a": 1}, {}]),
    ("if-then-no-else", {"type": "object", "properties": {"kind": {"enum": ["a", "b", "c"]}, "x": {"type": "integer"}},
                         "if": {"properties": {"kind": {"const": "a"}}}, "then": {"required": ["x"]}},
     [{"kind": "a", "x": 1}, {"kind": "b"}, {"kind": "c", "x": 2}, {"x": 1}], [{"kind": "a"}, {}, {"kind": "d"}]),
    ("if-else-no-then", {"if": {"type": "string"}, "else": {"type": "integer"}},
     ["x", "", 3, -1], [None, [1], 2.5, {}, True]),
    ("if-nested-in-else", {"type": "object", "required": ["v"], "properties": {"v": {"enum": ["a", "b", "c"]}},
                           "if": {"properties": {"v": {"const": "a"}}}, "then": {"required": ["x"]},
                           "else": {"if": {"properties": {"v": {"const": "b"}}}, "then": {"required": ["y"]},
                                    "else": {"required": ["z"]}}},
     [{"v": "a", "x": 1}, {"v": "b", "y": 1}, {"v": "c", "z": 1}, {"v": "c", "z": 2, "y": 1}],
     [{"v": "c", "y": 1}, {"v": "a"}, {"v": "b", "z": 1}, {"v": "a", "z": 1}]),
    ("if-bounds-else", {"type": "integer", "if": {"minimum": 10}, "then": {"maximum": 100},
                        "else": {"minimum": 0}},
     [0, 9, 10, 55, 100], [-1, 105, 101]),
    # not if not written (a pattern): the subset if and then, still sound
    ("if-not-unwritable", {"type": "string", "if": {"pattern": "^a"}, "then": {"maxLength": 3},
                           "else": {"minLength": 2}},
     ["a", "abc"], ["abcd", "b", ""]),
    ("dependentRequired", {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                           "dependentRequired": {"a": ["b"]}},
     [{"a": 1, "b": 2}, {"b": 2}], [{"a": 1}]),
    # a property with dependencies is written only beside its names, the others stay optional
    # (JSONSchemaBench WashingtonPost address, docker-compose's memswap_limit)
    ("dependencies-optional", {"$schema": D7, "type": "object", "additionalProperties": False,
                               "properties": {"street": {"type": "string"}, "box": {"type": "string"},
                                              "mem": {"type": "integer"}, "swap": {"type": "integer"},
                                              "x": {"type": "integer"}, "y": {"type": "integer"}},
                               "dependencies": {"box": ["street"], "mem": ["x"], "swap": ["mem"],
                                                "y": ["x"]}},
     [{}, {"street": "a"}, {"mem": 1, "x": 2}, {"x": 1}, {"street": "a", "box": "b"},
      {"mem": 1, "swap": 2, "x": 3, "y": 4}],
     [{"box": "b"}, {"swap": 1}, {"mem": 1}, {"swap": 1, "x": 2}, {"mem": 1, "swap": 2}, {"y": 1}]),
    # a pattern of one class that matches a declared name: its other keys are still written
    # (JSONSchemaBench WashingtonPost labels, editions)
    ("pattern-class-beside-name",
     {"type": "object", "additionalProperties": False,
      "properties": {"basic": {"type": "object", "properties": {"t": {"type": "string"}}, "required": ["t"]}},
      "patternProperties": {"^[a-zA-Z0-9_]*$": {"type": "object", "required": ["t"]},
                            "^-": {"type": "object", "required": ["u"]}}},
     [{"basic": {"t": "x"}, "custom_label": {"t": "y"}}, {"basic_": {"t": 1}}, {"Basic": {"t": 1}},
      {"-a": {"u": 2}}, {}],
     [{"custom-label": {"t": "y"}}, {"basic": {"t": 1}}, {"x": {}}, {"basic": {"u": 1}}, {"-a": {"t": 1}}]),
    # the value of a pattern's key meets only the patterns that may match it (^/ and ^[^/]
    # never match one key; JSONSchemaBench Github_hard o60038)
    ("pattern-values-disjoint",
     {"type": "object", "properties": {"C": {"type": "object"}},
      "patternProperties": {"^/": {"type": "string", "pattern": "^/"}, "^[^/]": {"type": "object"}}},
     [{"C": {}, "/": "/a"}, {"/x": "/b", "y": {}}, {}], [{"/": "a"}, {"x": "s"}, {"C": 1}]),
    # keys that match no pattern take additionalProperties (absent: anything), where tpd can
    # tell them: a first character no pattern starts with (JSONSchemaBench Github_hard
    # o14390, o55668; Github_medium o47158)
    ("pattern-unmatched-keys",
     {"type": "object", "properties": {"w": {"type": "integer"}},
      "patternProperties": {"^x_": {"type": "string"}, "^[a-f0-9]+$": {"type": "integer"}},
      "additionalProperties": {"type": "boolean"}},
     [{"w": 1, "x_a": "s", "ab": 3, "zz": True}, {"Q": False, "qq": True}, {"project1": True}],
     [{"zz": 1}, {"x_": 1}, {"ab": True}, {"w": True}, {"x_b": True}]),
    ("pattern-unmatched-open",
     {"type": "object", "properties": {"m": {"type": "object", "patternProperties": {"^w": {"type": "integer"}}}}},
     [{"m": {"width": 1, "height": "any"}}, {"m": {"h": None}}], [{"m": {"w": "s"}}, {"m": {"width": "s", "h": 1}}]),
    # patternProperties read by an automaton of the patterns and the declared names: an
    # unanchored pattern is searched (JSONSchemaBench Github_hard o57432 'sdkrel:.*'), its
    # keys and the others' (additionalProperties) told apart wherever the match is
    ("pattern-unanchored",
     {"type": "object", "patternProperties": {"sdkrel:.*": {"type": "integer"}},
      "additionalProperties": {"type": "string"}},
     [{"sdkrel:a": 1, "other": "s", "x-sdkrel:": 2}, {"sdkrel": "s", "sdkrel:": 3}],
     [{"sdkrel:a": "s"}, {"other": 1}, {"x-sdkrel:b": "s"}, {"sdkrel": 1}]),
    # groups, repeated groups and alternatives with anchors inside them (Github_medium o67371)
    ("pattern-grouped",
     {"type": "object", "patternProperties": {"^(/[^/]+)+$": {"type": "integer"}}, "additionalProperties": False},
     [{"/a/b": 1, "/c": 2}, {}], [{"/": 1}, {"/a/": 1}, {"a": 1}, {"//a": 1}, {"/a": "s"}]),
    ("pattern-grouped-unmatched",
     {"type": "object", "patternProperties": {"^(/[^/]+)+$": {"type": "integer"}},
      "additionalProperties": {"type": "string"}},
     [{"/a/b": 1, "a": "s", "/": "s", "/a/": "t", "//a": "u"}], [{"/a": "s"}, {"/": 1}, {"/a/": 1}]),
    ("pattern-alternation-anchors",
     {"type": "object", "patternProperties": {"(^x)|(^y)": {"type": "integer"}},
      "additionalProperties": {"type": "boolean"}},
     [{"xa": 1, "y": 2, "z": True, "ax": False}], [{"z": 1}, {"xa": True}, {"ax": 1}]),
    # a key two patterns match meets both schemas; one only one matches meets only its own
    ("pattern-two-match",
     {"type": "object", "patternProperties": {"^a.*": {"minimum": 0}, "z$": {"maximum": 10}},
      "additionalProperties": False},
     [{"az": 5}, {"a": 11}, {"z": -3}, {"bz": 10}], [{"az": 11}, {"az": -1}, {"b": 1}, {"a": -1}]),
    # a declared name that a pattern matches meets both; the pattern's other keys are written
    ("pattern-matches-declared",
     {"type": "object", "properties": {"ab": {"type": "integer"}}, "patternProperties": {"^a": {"minimum": 0}},
      "additionalProperties": False},
     [{"ab": 1, "ac": 5.5}, {"a": 0}], [{"ab": -1}, {"ab": 1.5}, {"ac": -1}, {"b": 1}]),
    # a key that starts like a pattern's keys but is not one takes additionalProperties
    ("pattern-prefix-unmatched",
     {"type": "object", "properties": {"x-id": {"minimum": 0}},
      "patternProperties": {"^x-[a-z]+$": {"type": "integer"}}, "additionalProperties": {"type": "string"}},
     [{"x-id": 3, "x-": "s", "x-1": "t", "x-ab": 1, "y": "s"}, {"x-abC": "u"}],
     [{"x-ab": "s"}, {"x-": 1}, {"x-id": -1}, {"x-id": "s"}, {"x-abc1": 1}]),
    ("pattern-prefix-closed",
     {"type": "object", "patternProperties": {"^x-[a-z]+$": {"type": "integer"}}, "additionalProperties": False},
     [{"x-ab": 1}], [{"x-": 1}, {"x-1": 1}, {"x-ab1": 1}]),
    # a pattern no value of which can be written: its keys are not written, the others' are
    ("pattern-value-unsatisfiable",
     {"type": "object", "patternProperties": {"^a": {"allOf": [{"type": "string"}, {"type": "integer"}]},
                                              "^b": {"type": "integer"}}, "additionalProperties": False},
     [{"b": 1, "bc": 2}, {}], [{"a": 1}, {"a": "s"}, {"b": "s"}]),
    # a pattern the automaton cannot read (lookahead) may match any key or none: its schema
    # joins every key's, and a key no other pattern matches needs additionalProperties too
    # (JSONSchemaStore vars.json, browser.i18n.json)
    ("pattern-unknown-closed",
     {"type": "object", "patternProperties": {"^(?!(if|class)$)[a-z_]\\w*$": {}}, "additionalProperties": False},
     [{}], [{"if": 1}, {"class": "x"}, {"Ab": 1}]),
    ("pattern-unknown-beside-known",
     {"type": "object", "patternProperties": {"^(?!x)": {"type": "integer"}, "^a": {"minimum": 0}},
      "additionalProperties": False},
     [{"ab": 1}, {}], [{"ab": -1}, {"ab": 1.5}, {"xa": 1}]),
    ("pattern-unknown-open",
     {"type": "object", "patternProperties": {"^(?!x)": {"type": "integer"}}, "additionalProperties": {"type": "integer", "minimum": 0}},
     [{"ab": 1, "xb": 2}], [{"xb": -1}, {"ab": "s"}, {"xb": 1.5}]),
    # a string pattern with anchors inside, read by the same automaton (JSONSchemaBench
    # Github_hard o21072: `(^[a-z]+$)|(^$)`-like alternatives)
    ("pattern-string-anchors-inside", {"type": "string", "pattern": "(^a)|(b$)|(^(/[^/]+)+$)"},
     ["a", "ab", "xb", "b", "a\"", "/x/y"], ["x", "ba", "c", "", "/x/", "\u00e9"]),
    # beside a minLength that bounds nothing (Github_hard o21072: "^$|(^(?:\S+\s+){0,99}\S+$)")
    ("pattern-string-anchors-minLength-0", {"type": "string", "minLength": 0, "pattern": "^$|(^(?:\\S+\\s+){0,3}\\S+$)"},
     ["", "a", "a b", "a b c d"], [" ", "a ", "a b c d e", " a"]),
    # keys with non-ASCII and escaped characters (written raw or with JSON's escapes)
    ("pattern-key-characters",
     {"type": "object", "patternProperties": {"^\u00e9": {"type": "integer"}, "\"": {"type": "string"}},
      "additionalProperties": {"type": "boolean"}},
     [{"\u00e9a": 1, "a\"b": "s", "a\\b": True, "\u00f1": True, "a\nb": True}],
     [{"\u00e9a": "s"}, {"q\"": 1}, {"\u00f1": 1}, {"\u00e9\"": "s"}, {"\u00e9\"": 1}]),
    # drafts 4-7 ignore the keywords beside $ref (JSONSchemaBench Github_medium o14421: a
    # "type": "string" beside a $ref to an object); 2019-09 on apply them
    ("ref-siblings-draft4", {"$schema": "http://json-schema.org/draft-04/schema", "type": "object",
                             "properties": {"s": {"type": "string", "$ref": "#/definitions/d"}},
                             "definitions": {"d": {"type": "object", "properties": {"a": {"type": "integer"}}}}},
     [{"s": {"a": 1}}, {"s": {}}, {}], [{"s": "x"}, {"s": {"a": "x"}}]),
    ("ref-siblings-draft7-allof", {"$schema": D7, "allOf": [{"$ref": "#/definitions/d", "required": ["b"]},
                                                            {"required": ["a"]}],
                                   "definitions": {"d": {"type": "object", "properties": {"a": {"type": "integer"}}}}},
     [{"a": 1}], [{"a": "x"}, {}, {"b": 1}, "s"]),
    ("ref-siblings-2020", {"type": "object", "properties": {"s": {"$ref": "#/$defs/d", "required": ["a"]}},
                           "$defs": {"d": {"type": "object", "properties": {"a": {"type": "integer"}}}}},
     [{"s": {"a": 1}}, {}], [{"s": {}}, {"s": {"a": "x"}}]),
    # an enum of more values than grammar.max_stacks is written as a trie of its texts, so
    # that a parse holds one branch per prefix (JSONSchemaBench Github_medium o20234: 1554
    # codes, refused while matching); values that share a character's first byte only
    ("enum-large-trie", {"type": "object", "properties": {"k": {"enum": [f"005-{i:04d}" for i in range(1500)]},
                                                          "n": {"enum": list(range(40)) + [100, 1000, 1.5]}}},
     [{"k": "005-0000"}, {"k": "005-1499"}, {"n": 1}, {"n": 10}, {"n": 100}, {"n": 1000}, {"n": 1.5}],
     [{"k": "005-1500"}, {"k": "005-"}, {"k": "005-00000"}, {"n": 1001}, {"n": 40}, {"n": 2.5}]),
    ("enum-unicode-trie", {"enum": ["é", "è", "éa", "èa", "ê", "ë", "ē", "中文", "中国", "日本", "a", "ab", "abc", "b",
                                    "😀", "😁", "😀x", "z"]},
     ["é", "è", "éa", "èa", "中文", "中国", "😀", "😁", "😀x", "ab", "a"],
     ["e", "éb", "中", "😂", "abcd", "中文x", "ê2"]),
    ("dependencies-draft7", {"$schema": D7, "type": "object", "properties": {"a": {}, "b": {"type": "string"}},
                             "dependencies": {"a": ["b"], "c": {"required": ["a"]}}},
     [{"a": 1, "b": "x"}, {"b": "x"}], [{"a": 1}]),
    ("dependentSchemas", {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                          "required": ["a"], "dependentSchemas": {"a": {"properties": {"b": {"minimum": 5}}},
                                                                  "b": {"required": ["zz"]}}},
     [{"a": 1}], [{"a": 1, "b": 2}, {"a": 1, "b": 7}]),
    # an optional property's dependency schema: objects with and without it (issue 27)
    ("dependentSchemas-optional", {"type": "object",
                                   "properties": {"k": {"enum": ["a", "b"]}, "x": {"type": "integer"},
                                                  "y": {"type": "string"}},
                                   "dependentSchemas": {"x": {"properties": {"k": {"const": "a"}}, "required": ["k"]},
                                                        "y": {"properties": {"x": {"minimum": 3}}}}},
     [{"k": "a", "x": 1}, {"k": "b"}, {"y": "s"}, {"k": "a", "x": 3, "y": "s"}, {}],
     [{"k": "b", "x": 1}, {"x": 1}, {"k": "a", "x": 1, "y": "s"}]),
    ("dependencies-optional-oneOf", {"$schema": D7, "type": "object", "required": ["t"],
                                     "properties": {"t": {"enum": ["v1", "v2"]}, "d": {"type": "integer"},
                                                    "s": {"type": "integer"}},
                                     "dependencies": {"d": {"properties": {"t": {"const": "v1"}}},
                                                      "s": {"properties": {"t": {"const": "v2"}}}},
                                     "oneOf": [{"properties": {"t": {"const": "v1"}}, "required": ["d"]},
                                               {"properties": {"t": {"const": "v2"}}, "required": ["s"]}],
                                     "additionalProperties": False},
     [{"t": "v1", "d": 1}, {"t": "v2", "s": 2}],
     [{"t": "v1", "d": 1, "s": 2}, {"t": "v2", "d": 1, "s": 1}, {"t": "v1"}, {"t": "v2", "d": 1}]),
    # propertyNames of one pattern: its keys are the extra keys; of strings only: no limit
    ("propertyNames-pattern-extras", {"type": "object", "propertyNames": {"pattern": "^[1-9][0-9]*$"},
                                      "additionalProperties": {"type": "string"}},
     [{"64": "a"}, {"64": "a", "128": "b"}, {}], [{"a": "x"}, {"64": 1}, {"064": "a"}]),
    ("propertyNames-type-string", {"type": "object", "propertyNames": {"type": "string"},
                                   "additionalProperties": {"type": "integer"}},
     [{"/x": 1}, {}], [{"a": "s"}]),
    ("propertyNames-pattern-declared", {"type": "object", "properties": {"ab": {"type": "integer"},
                                                                        "zz": {"type": "integer"}},
                                        "propertyNames": {"pattern": "^a"}},
     [{"ab": 1}, {"ac": "s"}, {}], [{"zz": 1}, {"b": 1}, {"ab": "s"}]),
    ("propertyNames-ref", {"$defs": {"tok": {"type": "string", "pattern": "^[a-z-]+$"}}, "type": "object",
                           "propertyNames": {"$ref": "#/$defs/tok"}, "additionalProperties": {"type": "array"}},
     [{"another-service": []}], [{"Another": []}, {"a": 1}]),
    # keywords that say nothing (additionalProperties true, minLength 0, properties {}) infer no type
    ("untyped-trivial-keywords", {"type": "object", "patternProperties": {"^_": {"additionalProperties": True}},
                                  "properties": {"a": {"minLength": 0, "properties": {}},
                                                 "b": {"additionalProperties": False}, "c": {"minimum": 0}}},
     [{"_c": 1}, {"_c": "s"}, {"_c": {}}, {"a": 5}, {"a": "x"}, {"a": None}, {"b": {}}, {"c": 1}],
     [{"b": {"x": 1}}, {"c": -1}]),
    # keywords the root's $schema draft does not have are ignored, as its validators do
    ("draft4-ignores-later-keywords", {"$schema": "http://json-schema.org/draft-04/schema#", "type": "object",
                                       "properties": {"a": {"type": "integer", "const": 3}, "b": {"type": "string"}},
                                       "if": {"required": ["a"]}, "then": {"required": ["b"]},
                                       "propertyNames": {"maxLength": 1}},
     [{"a": 4}, {"a": 1, "c": 1}, {"abc": 1}], [{"a": "x"}, {"b": 1}]),
    ("draft7-ignores-2019-keywords", {"$schema": D7, "type": "object", "properties": {"a": {"type": "integer"}},
                                      "dependentRequired": {"a": ["b"]}, "if": {"required": ["a"]},
                                      "then": {"properties": {"a": {"minimum": 2}}}},
     [{"a": 2}], [{"a": 1}, {"a": "x"}]),
    # an optional property's dependency on a name no property declares: that name is written
    # beside it (and may come alone), other objects need not carry it (Glaiveai2K
    # calculate_area: every object was made to carry "triangle")
    ("dependency-on-undeclared", {"$schema": D7, "type": "object", "required": ["length"],
                                  "properties": {"base": {"type": "number"}, "length": {"type": "number"}},
                                  "dependencies": {"base": ["triangle"]}},
     [{"length": 1}, {"base": 1, "length": 2, "triangle": 3}, {"length": 1, "triangle": 0}],
     [{"base": 1, "length": 2}, {"base": 1}]),
    ("draft2020-ignores-dependencies", {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
                                        "properties": {"a": {"type": "integer"}}, "dependencies": {"a": ["b"]},
                                        "dependentRequired": {"a": ["c"]}},
     [{"a": 1, "c": 0}], [{"a": 1}, {"a": "x", "c": 0}]),
    ("minProperties", {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                       "minProperties": 1},
     [{"a": 1}, {"a": 1, "b": 2}], [{}]),
    ("maxProperties", {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"},
                                                        "c": {"type": "integer"}},
                       "maxProperties": 2, "additionalProperties": True},
     [{"a": 1, "b": 2}, {}], [{"a": 1, "b": 2, "c": 3}]),
    ("patternProperties", {"type": "object", "properties": {"x-a": {"type": "integer"}, "b": {"type": "integer"}},
                           "patternProperties": {"^x-": {"minimum": 0}}, "additionalProperties": {"type": "string"}},
     [{"x-a": 1, "b": 2}], [{"x-a": -1}, {"b": 1, "c": 1}]),
    ("patternProperties-required", {"type": "object", "required": ["x-k"],
                                    "patternProperties": {"^x-": {"type": "integer"}}, "additionalProperties": False},
     [{"x-k": 1}], [{"x-k": "s"}, {}]),
    ("enum-beside-type", {"type": "string", "enum": ["a", 1, "a", None, "bcd"], "maxLength": 2},
     ["a"], [1, None, "bcd"]),
    ("const-beside-type", {"type": ["integer", "null"], "enum": [1, 2.5, None], "minimum": 1},
     [1, None], [2.5]),
    # numbers inside an enum's objects and arrays with zeros after their digits: equal values
    # (JSONSchemaBench Synthesized's {"a": 0.0}, written by cJSON as {"a":0})
    ("enum-nested-numbers", {"enum": [{"a": 0.0, "b": [1.5, 2, "x", {"c": None}]}, [3]]},
     [R('{"a":0.0,"b":[1.5,2,"x",{"c":null}]}'), R('{"a":0,"b":[1.50,2.0,"x",{"c":null}]}'), R('[3.0]'), [3]],
     [R('{"a":0.1,"b":[1.5,2,"x",{"c":null}]}'), R('[3.01]'), R('{"a":0,"b":[1.5,2,"x",{"c":0}]}')]),
    ("uniqueItems-enum", {"type": "array", "items": {"enum": ["a", "b", "c", "a"]}, "uniqueItems": True,
                          "minItems": 1},
     [["a"], ["a", "c"], ["a", "b", "c"]], [["a", "a"], [], ["a", "b", "c", "a"]]),
    ("uniqueItems-bool", {"type": "array", "items": {"type": "boolean"}, "uniqueItems": True, "maxItems": 1},
     [[True], [], [False]], [[True, True], [True, False]]),
    ("pattern-maxLength", {"type": "string", "pattern": "^[a-z0-9-]+$", "maxLength": 5},
     ["a", "ab-9z"], ["", "abcdef", "A"]),
    ("pattern-lengths", {"type": "string", "pattern": "^[A-Z][a-z]*[0-9]{2}$", "minLength": 5, "maxLength": 8},
     ["Abc12", "Abcde12"], ["Ab12", "Abcdefg12", "abc12"]),
    ("pattern-search-length", {"type": "string", "pattern": "x", "minLength": 2, "maxLength": 3},
     ["xb", "xbc"], ["x", "abcd", "ab"]),
    # any other pattern the automaton reads, with a count of the characters beside it
    # (JSONSchemaBench: 39 Github_hard, 22 Github_medium, 19 Snowplow schemas; ui5.yaml)
    ("pattern-automaton-lengths",
     {"type": "string", "minLength": 3, "maxLength": 8, "pattern": "^(?:@[0-9a-z-_.]+\\/)?[a-z][0-9a-z-_.]*$"},
     ["abc", "abcdefgh", "@x/abcd", "@x/a"], ["ab", "abcdefghi", "Abc", "@x/", "@xyzw/abc"]),
    ("pattern-group-length", {"type": "string", "pattern": "^(ab)+$", "maxLength": 4}, ["ab", "abab"],
     ["ababab", "", "a", "aba"]),
    ("pattern-group-minLength", {"type": "string", "pattern": "^(ab)+$", "minLength": 5}, ["ababab", "abababab"],
     ["abab", "ab", "ababa"]),
    ("pattern-anchors-inside-lengths", {"type": "string", "pattern": "^a$|^bc+$", "minLength": 2, "maxLength": 3},
     ["bc", "bcc"], ["a", "b", "bcccc", "xbc"]),
    ("pattern-search-automaton-lengths", {"type": "string", "pattern": "(ab|cd)e", "minLength": 4, "maxLength": 5},
     ["xabe", "cdexy", "abe!"], ["abe", "xxxxxx", "abcde!", "xxxx"]),
    # oneOf told apart by lengths that a pattern narrows (its least, and anchored, most
    # characters; Github_medium o64878, o59664); a format only on the side tpd writes
    ("oneof-lengths-unknown-format", {"type": "string", "oneOf": [{"maxLength": 0},
                                                                 {"format": "html-selector", "minLength": 1}]},
     ["", "x", "a b"], [5]),
    ("oneof-lengths-pattern", {"type": "string", "oneOf": [{"pattern": "^[0-9]+\\.[0-9]+\\.[0-9]+$"},
                                                          {"maxLength": 0}]},
     ["1.2.3", "", "10.20.30"], ["1.2", "x", "1.2.3x"]),
    # an anyOf branch its siblings rule out (two different consts) is left out, not the whole
    # schema refused (JsonSchemaStore accelerator's dataType)
    ("anyof-branch-sibling-unsat", {"allOf": [{"anyOf": [{"const": "string"}, {"const": "number"},
                                                         {"type": "array", "items": {"const": "string"}}]},
                                              {"const": "string"}]},
     ["string"], ["number", ["string"], "x"]),
    ("anyof-branch-sibling-unsat-property",
     {"type": "object", "properties": {"d": {"anyOf": [{"const": "a"}, {"const": "b"}]}},
      "anyOf": [{"properties": {"d": {"const": "a"}}}]},
     [{"d": "a"}, {}], [{"d": "b"}, {"d": "c"}]),
    # an optional property no value meets is left out, not the whole schema refused (88
    # JSONSchemaBench Github schemas: an enum of strings under type array)
    ("optional-unsatisfiable-property", {"type": "object", "properties": {
        "scope": {"type": "array", "enum": ["openid", "email"]}, "b": {"type": "integer"}}},
     [{"b": 1}, {}], [{"scope": "openid"}, {"scope": ["openid"]}, {"b": 1, "scope": "email"}]),
    # minProperties 1 with no declared properties: one extra key at least (JSONSchemaBench)
    ("minProperties-1-map", {"type": "object", "minProperties": 1, "additionalProperties": {"type": "string"}},
     [{"a": "x"}, {"a": "x", "b": "y"}], [{}, {"a": 1}]),
    ("minProperties-1-open", {"type": "object", "minProperties": 1}, [{"a": 1}, {"a": [], "b": None}], [{}]),
    # any pattern whose strings all meet the lengths (JSONSchemaBench: Snowplow, WashingtonPost)
    ("pattern-within-lengths", {"type": "string", "pattern": "^[0-9]{4}-(0[1-9]|1[0-2])$", "minLength": 7,
                                "maxLength": 7}, ["2024-01", "1999-12"], ["2024-13", "2024-1", "12024-01"]),
    ("multipleOf-7", {"type": "integer", "multipleOf": 7}, [0, 7, -14, 700, 7 * 123456789], [1, -8, 701, 3.5]),
    ("multipleOf-number-10", {"type": "number", "multipleOf": 10}, [0, 10, -20, 1000], [5, 15.5]),
    # multipleOf 1 or 0.1 ... 0.000001 beside bounds: integers (exact for 1; for 0.01 a subset:
    # jsonschema's float division calls 0.07 no multiple of 0.01); an integer multipleOf
    # between two bounds: its multiples there (JSONSchemaBench: 41 schemas)
    ("multipleOf-1-bounds", {"type": "number", "multipleOf": 1, "minimum": 0, "maximum": 100000},
     [0, 5, 100000, R("5.0")], [5.5, -3, 100001]),
    ("multipleOf-cents", {"type": "number", "multipleOf": 0.01, "minimum": 0.5}, [1, 12, 99999], [0.001, -1, 0.4]),
    ("multipleOf-cents-open", {"type": ["number", "null"], "multipleOf": 0.01}, [1, -12, None], [0.001, "1"]),
    ("multipleOf-between", {"type": "integer", "multipleOf": 16, "minimum": 0, "maximum": 4096},
     [0, 16, 4096], [20, 4112, -16]),
    ("multipleOf-between-exclusive", {"type": "number", "multipleOf": 10, "exclusiveMaximum": 100, "minimum": -10},
     [90, 0, -10], [100, 95, -20]),
    ("propertyNames", {"type": "object", "properties": {"ab": {"type": "integer"}, "ABC": {"type": "integer"}},
                       "propertyNames": {"pattern": "^[a-z]+$", "maxLength": 5}},
     [{"ab": 1}], [{"ABC": 1}]),
]

# minProperties / maxProperties counted over every key written: declared, pattern and extra ones
# (JSONSchemaBench Github_medium/Github_hard); one extra key at most toward minProperties
COUNTS = [
    ("min1-optional-open", {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
                            "minProperties": 1, "additionalProperties": {"type": "boolean"}},
     [{"b": "x"}, {"a": 1}, {"z": True}, {"a": 1, "b": "x", "z": False}], [{}, {"z": 1}, {"a": "x"}]),
    ("min2-optional-open", {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                            "minProperties": 2},
     [{"a": 1, "b": 2}, {"b": 2, "c": None}, {"a": 1, "c": [], "d": {}}],
     [{}, {"a": 1}, {"b": 2}, {"c": 3}, R('{"c":1,"c":2}')]),
    ("min-beside-required", {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                             "required": ["a"], "minProperties": 2, "additionalProperties": False},
     [{"a": 1, "b": 2}], [{"a": 1}, {"b": 2}, {"a": 1, "c": 2}]),
    ("max1-additional", {"type": "object", "properties": {"a": {"type": "integer"}},
                         "additionalProperties": {"type": "string"}, "maxProperties": 1},
     [{}, {"a": 1}, {"z": "s"}], [{"a": 1, "z": "s"}, {"y": "s", "z": "t"}, {"z": 1}]),
    ("max2-pattern", {"type": "object", "patternProperties": {"^x[0-9]$": {"type": "integer"}},
                      "additionalProperties": False, "maxProperties": 2},
     [{}, {"x1": 1}, {"x1": 1, "x2": 2}], [{"x1": 1, "x2": 2, "x3": 3}, {"y": 1}]),
    ("min1-max1-map", {"type": "object", "minProperties": 1, "maxProperties": 1,
                       "additionalProperties": {"type": "integer"}},
     [{"k": 1}], [{}, {"k": 1, "l": 2}, {"k": "s"}]),
    ("max0", {"type": "object", "properties": {"a": {}}, "maxProperties": 0}, [{}], [{"a": 1}, {"b": 2}]),
    ("max-closed-vacuous", {"type": "object", "properties": {"a": {}, "b": {}}, "additionalProperties": False,
                            "maxProperties": 5},
     [{"a": 1, "b": 2}, {}], [{"c": 1}]),
    ("max-with-dependency", {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"},
                                                              "c": {"type": "integer"}},
                             "dependentRequired": {"a": ["c"]}, "maxProperties": 1},
     [{}, {"b": 1}, {"c": 1}], [{"a": 1}, {"a": 1, "c": 2}, {"b": 1, "c": 2}]),
    # i needs k (after it), k needs j (before it): writing i without j leads nowhere valid; main wrote {"i": 1}
    ("dependency-chain-dead-end", {"type": "object", "properties": {"j": {"type": "integer"}, "i": {"type": "integer"},
                                                                    "k": {"type": "integer"}},
                                   "dependentRequired": {"i": ["k"], "k": ["j"]}},
     [{}, {"j": 1}, {"j": 1, "k": 2}, {"j": 1, "i": 1, "k": 2}], [{"i": 1}, {"i": 1, "k": 2}, {"k": 2}]),
    ("min-in-allOf", {"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "minProperties": 1},
                                {"maxProperties": 2}]},
     [{"a": 1}, {"q": 1}, {"a": 1, "q": 2}], [{}, {"a": 1, "q": 2, "r": 3}]),
]

# not, contains, unevaluatedProperties / unevaluatedItems (exact where compiled)
NOT_CONTAINS = [
    ("not-type", {"not": {"type": "string"}}, [1, None, {"a": "x"}, [1], True, 2.5], ["x", ""]),
    ("not-types-beside", {"type": ["string", "integer", "null"], "not": {"type": ["string", "null"]}},
     [1, -3], ["x", None, 1.5]),
    ("not-integer", {"not": {"type": "integer"}}, ["x", None, [], {}], [1, 0]),
    ("not-enum-strings", {"type": "string", "not": {"enum": ["a", "bc", "\u00e9"]}},
     ["", "b", "ab", "bcd", "abc", "b\"c", "\u00e9\u00e9"], ["a", "bc", "\u00e9"]),
    ("not-const-enum", {"enum": ["a", "b", 1, None], "not": {"const": "b"}}, ["a", 1, None], ["b", "c"]),
    ("not-const-array", {"enum": [["a"], ["b"], "a", 1], "not": {"const": ["a"]}}, [["b"], "a", 1], [["a"]]),
    ("not-enum-bool-null", {"type": ["boolean", "null"], "not": {"enum": [False, None]}}, [True],
     [False, None]),
    ("not-enum-typed", {"type": ["string", "null"], "not": {"type": "null", "enum": ["x", None]}},
     ["x", "y"], [None, 1]),
    ("not-enum-open", {"not": {"enum": ["x", "yz"]}}, ["", "y", 1, None, [], {"x": 1}], ["x", "yz"]),
    ("not-required", {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                      "not": {"required": ["a", "b"]}},
     [{"a": 1}, {"b": 2}, {}], [{"a": 1, "b": 2}, "x"]),
    ("not-required-open", {"not": {"required": ["a"]}}, [{}, {"b": 1}], [{"a": 1}, 3, "s"]),
    ("not-object-required", {"not": {"type": "object", "required": ["a"]}}, [{"b": 1}, 3, "s"], [{"a": 1}]),
    ("not-anyof-required", {"type": "object", "properties": {"a": {}, "b": {}, "c": {}},
                            "not": {"anyOf": [{"required": ["a"]}, {"required": ["b"]}]}},
     [{"c": 1}, {}], [{"a": 1}, {"b": 1}, {"a": 1, "c": 2}]),
    ("not-ref", {"$defs": {"s": {"type": "string"}}, "type": ["string", "boolean"], "not": {"$ref": "#/$defs/s"}},
     [True, False], ["x"]),
    ("contains-const", {"type": "array", "contains": {"const": 1}}, [[1], [2, 1, 3], [1, 1], ["a", 1]],
     [[], [2, 3], ["1"]]),
    ("contains-items", {"type": "array", "items": {"type": "integer"}, "contains": {"minimum": 5}},
     [[5], [1, 7, 2], [6, 6]], [[1, 2], [], [7, "x"], ["x"]]),
    ("contains-min", {"type": "array", "contains": {"type": "string"}, "minContains": 2},
     [["a", "b"], [1, "a", 2, "b", 3], ["a", "b", "c"]], [["a"], [1, "a", 2], []]),
    ("contains-max", {"type": "array", "items": {"type": ["string", "integer"]}, "contains": {"type": "string"},
                      "minContains": 1, "maxContains": 2},
     [["a"], [1, "a", 2, "b", 3], ["a", "b"]], [[1], ["a", "b", "c"], [], [None]]),
    ("contains-min0-max", {"type": "array", "contains": {"const": "x"}, "minContains": 0, "maxContains": 1},
     [[], ["x"], [1, 2], ["y", "x", "z"]], [["x", "x"], ["x", 1, "x"]]),
    ("uneval-props-allof", {"type": "object", "properties": {"a": {"type": "integer"}},
                            "allOf": [{"properties": {"b": {"type": "string"}}}, {"$ref": "#/$defs/c"}],
                            "$defs": {"c": {"properties": {"c": {"type": "boolean"}}}},
                            "unevaluatedProperties": False},
     [{"a": 1}, {"a": 1, "b": "x", "c": True}, {}], [{"d": 1}, {"a": 1, "e": None}, {"b": 1}]),
    ("uneval-props-additional", {"type": "object", "allOf": [{"additionalProperties": {"type": "integer"}}],
                                 "unevaluatedProperties": False}, [{"x": 1}, {}], [{"x": "s"}]),
    ("uneval-props-true", {"type": "object", "properties": {"a": {"type": "integer"}},
                           "unevaluatedProperties": True}, [{"a": 1}], [{"a": "x"}]),
    ("uneval-items", {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}],
                      "unevaluatedItems": False}, [[1, "a"], [1], []], [[1, "a", 2], ["a"]]),
    ("uneval-items-items", {"type": "array", "items": {"type": "integer"}, "unevaluatedItems": False},
     [[1, 2], []], [["a"]]),
    ("uneval-items-none", {"type": "array", "unevaluatedItems": False}, [[]], [[1]]),
    # not of a conjunction: the union of its keywords' complements
    ("not-properties", {"not": {"properties": {"a": {"type": "string"}}}},
     [{"a": 1}, {"a": None, "b": 2}, {"a": [], "b": 1}], [{}, {"a": "x"}, {"b": 1}, 3, "s"]),
    ("not-properties-required", {"type": "object", "properties": {"k": {"type": "string"}, "x": {}},
                                 "not": {"properties": {"k": {"const": "a"}}, "required": ["k"]}},
     [{}, {"k": "b"}, {"x": 1}, {"k": ""}], [{"k": "a"}, {"k": "a", "x": 2}]),
    ("not-typed-object", {"type": ["object", "string"], "not": {"type": "object", "properties": {"a": {"const": 1}}}},
     ["x", {"a": 2}, {"a": "1"}], [{}, {"a": 1}, {"b": 2}]),
    ("not-items", {"type": "array", "not": {"items": {"type": "string"}}},
     [[1], ["a", 2], [None]], [[], ["a"], ["a", "b"]]),
    ("not-bounds", {"type": "integer", "not": {"minimum": 5}}, [4, -1, 0], [5, 7]),
    ("not-lengths", {"type": "string", "not": {"maxLength": 2}}, ["abc", "abcd"], ["ab", "", "a"]),
    ("not-not", {"type": ["string", "integer"], "not": {"not": {"type": "integer"}}}, [1, -3], ["x"]),
    ("not-anyof-union", {"type": "object", "properties": {"k": {"enum": ["a", "b", "c"]}}, "required": ["k"],
                         "not": {"anyOf": [{"properties": {"k": {"const": "a"}}}, {"properties": {"k": {"const": "b"}}}]}},
     [{"k": "c"}], [{"k": "a"}, {"k": "b"}, {}]),
    ("not-numbers", {"type": "integer", "not": {"enum": [1, 2]}}, [0, 3, -5, R("3.0")], [1, 2, R("2.0"), 1.5]),
    ("not-numbers-typed", {"type": ["number", "string"], "not": {"enum": [1, 2.5, None]}},
     [0, 2, 2.4, R("2.51"), "y"], [1, 2.5, R("2.50"), R("1.0"), None]),
    ("contains-max-union", {"type": "array", "contains": {"type": "string", "maxLength": 2}, "maxContains": 1},
     [["ab"], [1, "abc", "x"]], [["a", "b"], [], [1], ["abc"]]),
]

# short items, so that random walks complete arrays with two matches
WALKED_NOT = [{"type": "array", "items": {"enum": ["a", 1]}, "contains": {"type": "string"}, "minContains": 2}
              if c[0] == "contains-min" else
              {"type": "array", "items": {"enum": ["ab", "abc", 1]}, "contains": {"type": "string", "maxLength": 2},
               "maxContains": 1} if c[0] == "contains-max-union" else c[1]
              for c in NOT_CONTAINS]


@pytest.mark.parametrize("name,schema,ok,bad", NOT_CONTAINS, ids=[c[0] for c in NOT_CONTAINS])
def test_not_contains_unevaluated(name, schema, ok, bad, tmp_path):
    check(schema, ok, bad, tmp_path)


@pytest.mark.parametrize("k", range(len(WALKED_NOT)), ids=[c[0] for c in NOT_CONTAINS])
def test_not_contains_sentences_valid(k, tmp_path):
    """Random byte walks: every complete sentence is valid for jsonschema."""
    assert walked_valid(WALKED_NOT[k], 24, 80, tmp_path) >= 1


# numbers with bounds: decimals in the range, exactly
NUMBERS = [
    ("unit-interval", {"type": "number", "minimum": 0, "maximum": 1},
     [0, 1, 0.5, R("0.999"), R("1.0"), R("0.0"), R("1.00000")], [1.01, -0.1, 2, R("1.00001")]),
    ("exclusive", {"type": "number", "exclusiveMinimum": 0.1, "maximum": 2.75},
     [0.11, 2.75, 1, 2.7499, R("0.1000000000001")], [0.1, R("0.10"), 2.76, 2.750001, 0]),
    ("negative", {"type": "number", "minimum": -1.5, "maximum": -0.25},
     [-1.5, -1, -0.25, -0.3, R("-1.50")], [-0.2, -1.6, 0, R("-0"), -1.5000001]),
    ("across-zero", {"type": "number", "minimum": -2.5, "exclusiveMaximum": 10.5},
     [-2.5, 0, R("-0.5"), 10.4999, 9, R("10")], [10.5, -2.51, 11]),
    ("draft4-exclusive", {"$schema": "http://json-schema.org/draft-04/schema#", "type": "number", "minimum": 0,
                          "exclusiveMinimum": True, "maximum": 1, "exclusiveMaximum": True},
     [0.5, R("0.000001")], [0, 1]),
    ("integer-draft4", {"$schema": "http://json-schema.org/draft-04/schema#", "type": "integer", "minimum": 0,
                        "exclusiveMinimum": True, "maximum": 3},
     [1, 3], [0, 4, R("1.5")]),
    ("huge-bounds", {"type": "number", "minimum": -1e300, "maximum": 1e300}, [0, -12.5, R("100000000000000"), R("-99999999999999.9")], []),
    ("only-min", {"type": "number", "minimum": 0.25}, [0.25, 7, R("1000000000000")], [0.2, -1]),
    # integers: a zero fraction from draft 6 on (draft 4: none), more than 16 digits
    ("integer-zero-fraction-draft7", {"$schema": "http://json-schema.org/draft-07/schema#", "type": "integer"},
     [2, R("2.0"), R("-3.00")], [R("2.5"), R("2.01")]),
    ("integer-zero-fraction-bounded", {"type": "integer", "minimum": 1, "maximum": 3}, [R("2.0"), R("3.000")],
     [R("4.0"), R("0.0"), R("2.5")]),
    ("integer-zero-fraction-draft4", {"$schema": "http://json-schema.org/draft-04/schema#", "type": "integer"},
     [2, -3], [R("2.0"), R("2.5")]),
    ("integer-20-digits", {"type": "integer"}, [R("12345678901234567890"), R("-99999999999999999999")],
     [R("1.5"), R("12345678901234567.5e-1")]),
    ("integer-20-digits-min", {"type": "integer", "minimum": 0}, [R("12345678901234567890"), 7],
     [R("-12345678901234567890"), -1]),
    ("integer-20-digits-bounded", {"type": "integer", "minimum": 0, "maximum": 100}, [5],
     [R("12345678901234567890"), R("100000000000000000000")]),
    ("number-20-digits", {"type": "object"}, [{"v": R("234567890123456789")}], []),
    # exponents beside bounds: exact at the bound's own exponent
    ("exponent-maximum", {"type": "number", "maximum": 1e3},
     [R("1e3"), R("9.99e2"), R("1E+3"), R("-2.5e10"), R("1e-06")], [R("1.0001e3"), R("1e4"), R("1.5E3")]),
    ("exponent-minimum", {"type": "number", "minimum": 0}, [R("1e-06"), R("3.5E+20"), R("0")],
     [R("-1e-06"), R("-2E3")]),
    ("exponent-exclusive", {"type": "number", "exclusiveMinimum": 0.25, "exclusiveMaximum": 1000},
     [R("2.500001e-1"), R("9.99999e2"), R("5E1")], [R("2.5e-1"), R("1e3"), R("2.4e-1"), R("1.0e3")]),
    ("exponent-negative", {"type": "number", "minimum": -1.5, "maximum": -0.001},
     [R("-1e-3"), R("-1.5e0"), R("-1.2e-2")], [R("-1.51e0"), R("-9e-4"), R("1e-3")]),
    # enum numbers: equal spellings (2.0 for 2)
    ("enum-number-spellings", {"enum": [2, 2.5, "a"]}, [R("2.0"), R("2.50"), 2], [R("2.05"), R("2.51"), 3]),
]

REFUSED = [
    ("allof-disjoint-types", {"allOf": [{"type": "string"}, {"type": "integer"}]}, "unsatisfiable"),
    ("pattern-group-length-large", {"type": "string", "pattern": "^(ab)+$", "maxLength": 5000}, "8192"),
    ("pattern-lengths-unsat", {"type": "string", "pattern": "^(ab|c)$", "minLength": 3}, "unsatisfiable"),
    ("oneof-if-accepts-all", {"oneOf": [{"type": "integer"}, {"if": {"type": "string"}, "then": {"type": "string"}}]},
     "oneOf"),
    ("enum-beside-properties", {"enum": [{"a": 1}], "properties": {"a": {"type": "string"}}}, "enum/const beside"),
    ("multipleOf-bounded", {"type": "integer", "multipleOf": 3, "minimum": 0}, "multipleOf"),
    ("oneof-format-accepting-side", {"type": "string", "oneOf": [{"maxLength": 3}, {"format": "date"}]}, "oneOf"),
    ("multipleOf-between-none", {"type": "integer", "multipleOf": 7, "minimum": 1, "maximum": 6}, "unsatisfiable"),
    ("multipleOf-between-many", {"type": "integer", "multipleOf": 3, "minimum": 0, "maximum": 4000}, "1024"),
    ("not-integer-of-number", {"type": "number", "not": {"type": "integer"}}, "not integers"),
    ("not-strings-pattern", {"type": "string", "pattern": "^a", "not": {"const": "ab"}},
     "not: excluding strings"),
    ("not-everything", {"not": {}}, "unsatisfiable"),
    ("not-pattern", {"type": "string", "not": {"pattern": "^a"}}, "not: only"),
    ("contains-max-not-exact", {"type": "array", "contains": {"pattern": "^a"}, "maxContains": 1}, "not: only"),
    ("not-const-array-open", {"not": {"const": ["a"]}}, "not: excluding objects or arrays"),
    ("contains-maxItems", {"type": "array", "contains": {"const": 1}, "maxItems": 3}, "contains beside"),
    # two extra keys could be one key written twice, which a validator counts once
    ("minProperties-extras", {"type": "object", "minProperties": 2}, "minProperties"),
    ("maxProperties-below-required", {"type": "object", "required": ["a", "b"], "maxProperties": 1},
     "unsatisfiable"),
    ("uniqueItems-open", {"type": "array", "items": {"type": "string", "maxLength": 8}, "uniqueItems": True},
     "uniqueItems"),
    ("multipleOf-fraction", {"type": "number", "multipleOf": 0.5}, "multipleOf"),
    ("unevaluatedProperties-anyOf", {"type": "object", "unevaluatedProperties": False,
                                     "anyOf": [{"properties": {"a": {}}}, {"properties": {"b": {}}}]},
     "unevaluatedProperties/unevaluatedItems beside 'anyOf'"),
    ("unevaluatedProperties-nested", {"allOf": [{"properties": {"a": {}}, "unevaluatedProperties": False}],
                                      "properties": {"b": {}}}, "in an allOf or $ref subschema"),
    ("unevaluatedProperties-schema", {"type": "object", "unevaluatedProperties": {"type": "string"}},
     "other than true or false"),
    ("oneof-overlap", {"oneOf": [{"type": "string"}, {"type": "string", "maxLength": 3}]}, "oneOf"),
    ("oneof-overlap-number", {"oneOf": [{"type": "number"}, {"type": "integer"}]}, "oneOf"),
    ("oneof-untyped", {"oneOf": [{"type": "string"}, {"description": "anything"}]}, "oneOf"),
    # a pattern whose automaton would be too large (2^13 states: the 13th character from the end)
    ("pattern-automaton-too-large",
     {"type": "object", "patternProperties": {"(a|b)*a(a|b){12}$": {"type": "integer"}}, "additionalProperties": False},
     "patternProperties: pattern '(a|b)*a(a|b){12}$' needs more than 1000 automaton states"),
]


@pytest.mark.parametrize("name,schema,ok,bad", SOUNDNESS, ids=[c[0] for c in SOUNDNESS])
def test_soundness(name, schema, ok, bad, tmp_path):
    check(schema, ok, bad, tmp_path)


@pytest.mark.parametrize("name,schema,ok,bad", COVERAGE, ids=[c[0] for c in COVERAGE])
def test_coverage(name, schema, ok, bad, tmp_path):
    check(schema, ok, bad, tmp_path)


@pytest.mark.parametrize("name,schema,ok,bad", KEYWORDS, ids=[c[0] for c in KEYWORDS])
def test_keywords(name, schema, ok, bad, tmp_path):
    check(schema, ok, bad, tmp_path)


@pytest.mark.parametrize("name,schema,ok,bad", COUNTS, ids=[c[0] for c in COUNTS])
def test_counts(name, schema, ok, bad, tmp_path):
    check(schema, ok, bad, tmp_path)


@pytest.mark.parametrize("name,schema,ok,bad", NUMBERS, ids=[c[0] for c in NUMBERS])
def test_numbers(name, schema, ok, bad, tmp_path):
    check(schema, ok, bad, tmp_path)


@pytest.mark.parametrize("name,schema,needle", REFUSED, ids=[c[0] for c in REFUSED])
def test_refused(name, schema, needle, tmp_path):
    refused(schema, needle, tmp_path)


@pytest.mark.parametrize("schema", [{"type": "object", "properties": {"a": {"type": "integer"}}},
                                    {"type": "array", "items": {"type": "string"}}, {"type": "string"},
                                    {"type": "number"}, {"enum": ["x", 2]}, {}])
def test_ending(schema, tmp_path):
    """Once the root value is complete only the end may follow: no trailing whitespace (a
    model would fill its budget with it and finish "length"), while whitespace inside the
    value keeps llama.cpp's policy."""
    inner = {"object": R('{ "a" :\n  1 }'), "array": R('[ "x" ,\n\t"y" ]')}
    value = {"object": R('{"a":1}'), "array": R('["x"]'), "string": R('"x"'), "number": R("2.5")}
    t = schema.get("type", "enum" if "enum" in schema else "object")
    text = value.get(t, R('2'))
    texts = [text, text + " ", text + "\n", text + "\n  ", text + "\t"] + ([inner[t]] if t in inner else [])
    got = matches(schema, texts, tmp_path)
    assert got == [True, False, False, False, False] + [True] * (t in inner), list(zip(texts, got))
    if t == "object":
        r = subprocess.run([DRIVER, "-", "json", str(tmp_path / "s.json"), "match", str(tmp_path / "i.txt")],
                           capture_output=True, text=True, timeout=60)
        assert r.stdout.split() == ["1", "0", "0", "0", "0", "1"], r.stdout  # json_object too


WALKED = [{"type": "number", "minimum": 0, "maximum": 1}, {"type": "number", "exclusiveMinimum": -0.3,
                                                           "exclusiveMaximum": 0.7},
          {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": {"type": "string"}},
          {"oneOf": [{"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                      "required": ["a"]}, {"type": "object", "properties": {"b": {"type": "integer"}},
                                           "required": ["b"]}]},
          {"type": "object", "properties": {"a": {"enum": [1, 2]}, "b": {"enum": [1]}},
           "patternProperties": {"^x[0-9]$": {"type": "boolean"}}, "additionalProperties": False,
           "minProperties": 2, "maxProperties": 3},
          {"type": "object", "properties": {"ab": {"type": "integer"}},
           "patternProperties": {"^a": {"minimum": 0}, "b$": {"type": "string"}, "(^x)|(^y)": {"type": "boolean"}},
           "additionalProperties": {"type": "null"}},
          {"oneOf": [{"required": ["a"], "properties": {"a": {"type": "integer"}}}, {"required": ["b"]}]},
          {"type": "array", "items": {"minLength": 2, "maximum": 5}},
          {"type": "array", "items": {"type": "string", "pattern": "(ab|c)+x?$", "minLength": 3, "maxLength": 6}},
          {"type": "array", "items": {"type": "number", "multipleOf": 0.01, "minimum": -5, "maximum": 20}}]


@pytest.mark.parametrize("k", range(len(WALKED)))
@pytest.mark.parametrize("kind", ["schema-open", "schema", "schema-spec"])
def test_random_sentences_valid(k, kind, tmp_path):
    """Random walks through the grammar (random allowed bytes): every complete sentence met
    on the way is valid for jsonschema, with objects open and closed."""
    assert walked_valid(WALKED[k], 24, 60, tmp_path, kind) >= 5


# (name, schema, what both readings take, what only the specification's takes, invalid)
EVERY_TYPE = [
    ("properties", {"properties": {"a": {"type": "string"}}, "required": ["a"]},
     [{"a": "x"}], ["x", 5, 2.5, None, True, [1]], [{"a": 1}, {}]),
    ("minLength", {"minLength": 2}, ["ab"], [5, {}, [], False, None], ["a", ""]),
    ("items", {"items": {"type": "integer"}, "minItems": 1}, [[1], [1, 2]], ["s", {"a": 1}, 0], [[], ["x"]]),
    ("two-types", {"minLength": 2, "minimum": 3}, ["ab"], [3, 4.5, {}, None], ["a", 2, 2.9]),
    # oneOf: a type two branches leave free matches both, so no value of it is valid
    ("oneof-free-types", {"oneOf": [{"required": ["a"]}, {"required": ["b"]}]},
     [{"a": 1}, {"b": 2}], [], [5, "s", None, [], {"a": 1, "b": 2}, {}]),
    ("oneof-free-in-one", {"oneOf": [{"required": ["a"]}, {"required": ["b"]}, {"type": "string"}]},
     [{"a": 1}, {"b": 2}], [], [5, "s", None, {"a": 1, "b": 2}]),
    ("not", {"not": {"minLength": 2}}, ["a", ""], [], ["ab", 5, {}]),
    # drafts 3-7: the keywords beside $ref are ignored, so the referenced schema alone applies
    ("ref-siblings", {"$schema": "http://json-schema.org/draft-07/schema#",
                      "properties": {"c": {"type": ["boolean", "object"], "$ref": "#/definitions/p"}},
                      "definitions": {"p": {"properties": {"d": {"type": "string"}}}}, "type": "object"},
     [{"c": {"d": "x"}}], [{"c": True}, {"c": 5}, {"c": "s"}], [{"c": {"d": 1}}]),
]


@pytest.mark.parametrize("name,schema,both,spec_only,bad", EVERY_TYPE, ids=[c[0] for c in EVERY_TYPE])
def test_every_type(name, schema, both, spec_only, bad, tmp_path):
    """A schema without type whose keywords belong to one type: the default writes values of
    that type only (grammar.infer_types true; a subset), the specification's reading
    (infer_types false, kind schema-spec) takes every type, those keywords constraining
    theirs; neither takes an invalid value. jsonschema labels every instance."""
    v = validator(schema)
    texts = [compact(x) for x in both + spec_only + bad]
    assert [v.is_valid(json.loads(t)) for t in texts] == [True] * (len(both) + len(spec_only)) + [False] * len(bad)
    assert matches(schema, texts, tmp_path, kind="schema-spec") == [True] * (len(both) + len(spec_only)) + \
        [False] * len(bad)
    if name == "oneof-free-in-one":  # the default reading cannot tell the string branch from the others
        r = run_driver(schema, [], tmp_path, mode="compile")
        assert r.returncode == 1 and "oneOf: branches" in r.stdout, r.stdout + r.stderr
        return
    assert matches(schema, texts, tmp_path) == [True] * len(both) + [False] * (len(spec_only) + len(bad))


def test_every_type_oneof_refused(tmp_path):
    """Where one branch leaves a type free and another constrains it, some of its values
    match both: the specification's reading refuses what it cannot make exclusive."""
    r = run_driver({"oneOf": [{"required": ["a"]}, {"type": "string", "minLength": 2}]}, [], tmp_path,
                   mode="compile", kind="schema-spec")
    assert r.returncode == 1 and "oneOf: branches" in r.stdout, r.stdout + r.stderr


CLOSED = [  # (schema, what only the open reading takes, what both take)
    ({"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}}},
     [{"x": 1, "y": 2, "yw": 10}, {"z": "s"}], [{"x": 1, "y": 2}, {}, {"y": 3}]),
    ({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a", "b"]},
     [{"a": "x", "b": 1, "c": 2}], [{"a": "x", "b": 1}, {"a": "x", "b": [None]}]),
    ({"type": "object", "allOf": [{"properties": {"a": {"type": "integer"}}},
                                  {"properties": {"b": {"type": "integer"}}}]},
     [{"a": 1, "c": 3}], [{"a": 1, "b": 2}, {"b": 2}]),
    ({"properties": {"a": {"type": "integer"}}, "patternProperties": {"^x-": {"type": "string"}}},
     [], [{"a": 1, "x-k": "v"}, {"x-": ""}]),
    ({"type": "object", "properties": {"o": {"type": "object", "properties": {"p": {"const": 1}}}}},
     [{"o": {"p": 1, "q": 2}}, {"o": {}, "r": 0}], [{"o": {"p": 1}}]),
]


@pytest.mark.parametrize("k", range(len(CLOSED)))
def test_closed_objects(k, tmp_path):
    """The default (grammar.open_objects false): an object with properties and no
    additionalProperties takes its declared and required keys (with their schemas, the
    pattern keys of patternProperties, allOf's merged properties) and no other; the open
    reading takes the others too. Every text is valid for jsonschema."""
    schema, open_only, both = CLOSED[k]
    v = validator(schema)
    texts = [compact(x) for x in open_only + both]
    assert all(v.is_valid(json.loads(t)) for t in texts)
    assert matches(schema, texts, tmp_path) == [True] * len(texts)
    assert matches(schema, texts, tmp_path, kind="schema") == [False] * len(open_only) + [True] * len(both)


# ---- formats: jsonschema's checker where it has one (date, email, ipv4, ipv6, uuid,
# idn-*, regex), else a check written from the RFC here
def _rfc_checks():
    import base64
    import datetime
    import re
    import urllib.parse
    label = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
    host = rf"(?=.{{1,253}}$){label}(\.{label})*"
    time = r"([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d+)?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)"
    dur = (r"P((\d+D|\d+M(\d+D)?|\d+Y(\d+M(\d+D)?)?)(T(\d+H(\d+M(\d+S)?)?|\d+M(\d+S)?|\d+S))?"
           r"|T(\d+H(\d+M(\d+S)?)?|\d+M(\d+S)?|\d+S)|\d+W)")
    uri_chars = re.compile(r"([A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=]|%[0-9A-Fa-f]{2})*")

    def uri(s, ref=False):
        if not uri_chars.fullmatch(s):
            return False
        p = urllib.parse.urlsplit(s)
        if not p.scheme:
            return ref
        return re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", p.scheme) is not None

    def date_time(s):
        d, _, t = s.partition("T")
        datetime.date.fromisoformat(d)
        return re.fullmatch(time, t) is not None

    def b64(s):
        base64.b64decode(s, validate=True)
        return len(s) % 4 == 0

    return {"time": lambda s: re.fullmatch(time, s) is not None, "date-time": date_time,
            "hostname": lambda s: re.fullmatch(host, s) is not None, "duration": lambda s: re.fullmatch(dur, s),
            "uri": uri, "iri": uri, "uri-reference": lambda s: uri(s, True), "iri-reference": lambda s: uri(s, True),
            "byte": b64, "json-pointer": lambda s: re.fullmatch(r"(/([^/~]|~[01])*)*", s),
            "relative-json-pointer": lambda s: re.fullmatch(r"(0|[1-9]\d*)(#|(/([^/~]|~[01])*)*)", s)}


RFC = _rfc_checks()
FORMATS = ["date", "time", "date-time", "uuid", "email", "idn-email", "hostname", "idn-hostname", "ipv4", "ipv6",
           "uri", "uri-reference", "iri", "iri-reference", "byte", "duration", "json-pointer",
           "relative-json-pointer", "regex", "uri-template"]


def format_ok(fmt, s):
    try:
        return bool(RFC[fmt](s)) if fmt in RFC else True
    except ValueError:
        return False


def test_ref_to_another_uri_refused(tmp_path):
    refused({"$id": "http://x.org/s.json", "properties": {"a": {"$ref": "http://y.org/s.json#/x"}}},
            "does not resolve", tmp_path)


def checker_bug(fmt, s):
    """jsonschema's relative-json-pointer check refuses any digit after a 0 ("100#", "79801#"),
    where the draft refuses only a leading 0; the draft's reading decides those."""
    return fmt == "relative-json-pointer" and re.fullmatch(r"[1-9][0-9]*0[0-9]+(#|/.*)?", s) is not None


@pytest.mark.parametrize("fmt", FORMATS)
def test_format_sentences_valid(fmt, tmp_path):
    """Random byte walks through each format's grammar: every complete string is valid for
    jsonschema's format checker and for the RFC's syntax."""
    schema = {"type": "string", "format": fmt}
    v = validator(schema)
    seen = 0
    for text in sentences(schema, 24, 60, tmp_path):
        value = json.loads(text)
        assert (v.is_valid(value) or checker_bug(fmt, value)) and format_ok(fmt, value), (fmt, value)
        seen += 1
    assert seen >= 3, fmt


def test_regex_format_reads_in_ecma262(tmp_path):
    """Every regex the format's grammar writes (random walks) also compiles in ECMA-262, with
    and without the u flag (node's RegExp), as JSON Schema validators in JavaScript read it;
    Python's re reads them too (test_format_sentences_valid, jsonschema's checker)."""
    import shutil
    node = shutil.which("node") or shutil.which("nodejs")
    if node is None:
        pytest.skip("node absent (launch/setup installs nodejs)")
    texts = [json.loads(t) for t in sentences({"type": "string", "format": "regex"}, 48, 80, tmp_path)]
    assert len(texts) >= 20 and any(len(t) > 8 for t in texts), texts
    js = ("const xs = JSON.parse(require('fs').readFileSync(0, 'utf8')); const bad = [];"
          "for (const x of xs) for (const f of ['', 'u']) { try { new RegExp(x, f); } catch (e) { bad.push([x, f]); } }"
          "console.log(JSON.stringify(bad));")
    r = subprocess.run([node, "-e", js], input=json.dumps(texts), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and json.loads(r.stdout) == [], r.stdout + r.stderr


FORMAT_CASES = [
    ("date", ["2024-02-29", "2023-01-31", "2000-02-29", "0001-12-30", "2023-11-30"],
     ["2023-02-29", "1900-02-29", "2023-04-31", "0000-01-01", "2023-13-01"]),
    ("email", ["a@b.c", "first.last@example.com", "x+tag@mail.example.org"], []),
    ("ipv4", ["0.0.0.0", "255.255.255.255", "10.1.2.3"], ["256.1.1.1", "01.1.1.1"]),
    ("ipv6", ["::", "::1", "fe80::1:2", "1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7::"], ["1:2:3:4:5:6:7:8:9", "1::2::3"]),
    ("hostname", ["localhost", "a.b.c", "my-host.example.com", "a.b.c.d.example.com"], []),
    ("uri", ["https://example.com/a/b?x=1#f", "ftp://10.0.0.1:21/", "urn1://h", "http://maps.wien.gv.at/wmts",
             "http://www.ebi.ac.uk/cellline/CL:0002222", "s:", "file:///C:/Users/x", "mailto:a@b.c",
             "urn:isbn:0451450523", "http://[::1]:8080/x", "a:/b", "x://:80",
             "ecdsa-koblitz-pubkey:14RZvYazz9H2DC2skBfpPVxax54g4yabxe"],
     ["a", "//h", "1a:b", "/a", "a b:c"]),
    ("uri-reference", ["#", "#/definitions/Person", "/a/b?x=1", "https://example.com/a", "", "./src", "a/b",
                       "../x?y#z", "//host/p", "a:b:c", "?q"], ["a b", "%zz", "//h h"]),
    ("duration", ["P1D", "PT5M", "P1Y2M3DT4H5M6S", "P2W"], []),
    # MCPspec CompleteRequest's "http://example.com/resource/{" was accepted as an annotation
    ("uri-template", ["", "http://x/{a}", "{+path}/x{?q,r*}", "{a.b:3}", "%41{b}", "{#a}{.b}{/c,d}{;e}{&f}"],
     ["http://example.com/resource/{", "{=a}", "{}", "{a:1000}", "{a:3*}", "a}"]),
    ("byte", ["", "QUJD", "QUI=", "QQ=="], []),
    # Github_easy o66309, Github_hard o53084
    ("regex", ["^[a-zA-Z0-9_]{3,16}$", "^[a-zA-Z0-9]+$", "^example$", "", "(ab|c)*x", "a.b??", "[^A-Z0-9]{0,12}",
               "^value1|value2$", "a|"],
     ["[z-a]", "(", "*a", "a**", "[", "a)"]),
    ("unknown-format", ["anything at all"], []),
]


@pytest.mark.parametrize("fmt,ok,bad", FORMAT_CASES, ids=[c[0] for c in FORMAT_CASES])
def test_format_instances(fmt, ok, bad, tmp_path):
    schema = {"type": "string", "format": fmt}
    v = validator(schema)
    for s in ok:
        assert v.is_valid(s) and format_ok(fmt, s), s
    for s in bad:
        assert not v.is_valid(s) or not format_ok(fmt, s), s
    got = matches(schema, [json.dumps(s) for s in ok + bad], tmp_path)
    assert got == [True] * len(ok) + [False] * len(bad), list(zip(ok + bad, got))


def test_format_lengths(tmp_path):
    """A format keeps its lengths where every string of it meets them; maxLength up to 10^6
    is a bound (1000-character chunks), exact at its edges."""
    check({"type": "string", "format": "date", "maxLength": 10}, ["2024-02-29"], [], tmp_path)
    check({"type": "string", "format": "email", "maxLength": 320}, ["a@b.c"], [], tmp_path)
    refused({"type": "string", "format": "uri", "maxLength": 100}, "maxLength", tmp_path)
    s = {"type": "string", "maxLength": 2500, "minLength": 2}
    check(s, ["ab", "x" * 999, "x" * 1000, "x" * 1001, "x" * 2000, "x" * 2500], ["x", "x" * 2501], tmp_path)


# stars over groups that can match "" (a left-recursive rule once, refused)
NULLABLE_PATTERNS = [("^(a*)*$", ["", "a", "aaa"], ["b"]), ("^(a|b?)+$", ["", "ab", "bba"], ["c"]),
                     ("^(x?y?)*z$", ["z", "xyz", "yyxz"], ["zz"]), ("^((a|)b?){2,}$", ["", "ab", "bbb"], ["c"]),
                     ("^(a*)+b(c?)*$", ["b", "aabcc"], ["a"]), ("^(?:\\s*,?\\s*[a-z]+)*$", ["", "ab, cd"], [","])]


@pytest.mark.parametrize("pattern,ok,bad", NULLABLE_PATTERNS, ids=[p[0] for p in NULLABLE_PATTERNS])
def test_nullable_star_patterns(pattern, ok, bad, tmp_path):
    schema = {"type": "string", "pattern": pattern}
    check(schema, ok, bad, tmp_path)
    v = validator(schema)
    n = 0
    for text in sentences(schema, 8, 30, tmp_path):
        assert v.is_valid(json.loads(text)), text
        n += 1
    assert n >= 3


def test_large_schema(tmp_path):
    """A schema of ~300 KB (above the old 256 KiB text limit) whose grammar is above 1.28 MB
    (the size of the largest Kubernetes schema's) compiles and matches exactly."""
    defs = {f"d{i}": {"type": "object", "additionalProperties": False,
                      "description": "d" * 200,
                      "properties": {f"p{j}": {"enum": [f"v{k}_{j}" for k in range(8)]} for j in range(12)}}
            for i in range(260)}
    schema = {"$defs": defs, "type": "object", "properties": {f"q{i}": {"$ref": f"#/$defs/d{i}"} for i in range(260)}}
    assert len(json.dumps(schema)) > 256 << 10
    r = run_driver(schema, [], tmp_path, mode="gbnf")
    assert r.returncode == 0 and len(r.stdout) > 1280000, r.stdout[:300]
    check(schema, [{"q0": {"p0": "v3_0"}, "q199": {"p1": "v0_1", "p11": "v7_11"}}, {}],
          [{"q0": {"p0": "v3_1"}}, {"q5": {"x": 1}}], tmp_path)


def test_bench_corpus_sound():
    """bench/bench_schema.py over its stand-in corpus: every label agrees with jsonschema and
    no invalid instance is accepted (the script exits 1 otherwise)."""
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "bench_schema.py"), "--corpus",
                        "--build", BUILD],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "| github |" in r.stdout


# patterns of patternProperties against Python's `re` (what jsonschema uses), key by key
KEY_PATTERNS = ["sdkrel:.*", "^(/[^/]+)+$", "(^a)|(^b)", "^a.*z$", "a|b$", "[A-Za-z0-9]+", "^\\w[-\\w_]*$", "^$",
                "^.{2,3}$", "(ab)*c", "^label(\\.[a-z]{2}){0,1}$", "a{2}|b{1,2}c?$", "^(?:a|bc)+$", "[\\]]", "\\\\",
                "\"", "\u00e9+", "^[^/#]+/[^/#]+#[0-9]+$"]


def keys_vs_re(pattern, tmp_path, extra=(), complete=True):
    """Every key is written with the value of its pattern where `re.search` matches it and
    with additionalProperties' where not, never the other way round; when complete, keys of
    printable ASCII (no characters the engines read differently) are all written. Keys: random
    ones over a small alphabet and the characters of extra, and extra themselves."""
    import random
    import re
    rnd = random.Random(7)
    alpha = sorted(set("abcz/x-qr19_.#$]\\\" " + "".join(extra))) + ["\u00e9", "\n", "\t"]
    keys = sorted({""} | {"".join(rnd.choice(alpha) for _ in range(n)) for n in range(1, 5) for _ in range(60)}
                  | {"sdkrel:x", "/a/b", "az", "label.en", "bcbc", "aab", "a/b#12"} | set(extra))
    schema = {"type": "object", "patternProperties": {pattern: {"const": 1}}, "additionalProperties": {"const": 2}}
    texts = [compact({k: v}) for k in keys for v in (1, 2)]
    got = matches(schema, texts, tmp_path)
    for i, k in enumerate(keys):
        want = 1 if re.search(pattern, k) else 2
        assert not got[2 * i + (2 - want)], ("wrong value taken", k)
        if complete and all(" " <= ch < "\x7f" for ch in k):
            assert got[2 * i + want - 1], ("key not written", k)


@pytest.mark.parametrize("pattern", KEY_PATTERNS)
def test_pattern_keys_vs_re(pattern, tmp_path):
    keys_vs_re(pattern, tmp_path)


PY_KEYWORDS = ("False|None|True|and|any_errors_fatal|as|assert|async|await|become|become_exe|become_flags|"
               "become_method|become_user|break|check_mode|class|collections|connection|continue|debugger|def|del|"
               "diff|elif|else|environment|except|fact_path|finally|for|force_handlers|from|gather_facts|"
               "gather_subset|gather_timeout|global|handlers|hosts|if|ignore_errors|ignore_unreachable|import|in|"
               "is|lambda|max_fail_percentage|module_defaults|name|no_log|nonlocal|not|or|order|pass|port|"
               "post_tasks|pre_tasks|raise|remote_user|return|roles|run_once|serial|strategy|tags|tasks|throttle|"
               "timeout|try|vars|vars_files|vars_prompt|while|with|yield")
# lookaheads at the start of ^-anchored patterns (JsonSchemaStore's browser.i18n, vars, gradle-enterprise,
# mongodb-atlas-search, ci; then several lookaheads, X with and without $, X matching the empty string)
LOOKAHEAD_PATTERNS = [
    ("^(?!@@)[@a-zA-Z0-9_-]+$", ["@@", "@@a", "a@", "@", "@a@@", "A_-9"]),
    ("^(?!(" + PY_KEYWORDS + ")$)[a-zA-Z_][\\w]*$",
     ["True", "Truex", "and", "an", "yield", "yields", "_", "in", "is1", "x y", "vars_files", "vars_file"]),
    ("^(?=[^=]+$)(?!\\s+$)(.|\\n)+$", ["=", "a=b", "  ", " \t", " a", "ab"]),
    ("^(?!^lucene\\.|builtin\\.|mongodb\\.).*", ["lucene.x", "lucene", "builtin.", "mongodb.a", "xbuiltin."]),
    ("^(?!.*\\/)^(.*[^.]+.*)$", ["..", ".a.", "a/b", "a"]),
    ("^(?=[a-c])(?!ab)(?=.*z$)[a-z/]*", ["abz", "acz", "az", "bz", "abcz", "a/z", "za", "cz/"]),
    ("^(?=(a|b)c)(?=.*c$)", ["ac", "bc", "acbc", "acb", "cc"]),
    ("^(?!x*)a", ["a", "xa", "ab"]),
    ("^(?!a?$)", ["", "a", "aa", "b"]),
    ("^(?!(?:a(b|c)+)+/)[a-z]+/.*", ["ab/", "abcacb/", "a/", "abx/", "acab/x", "b/"]),
    ("^(?=.*/)", ["/", "a/b", "ab"]),
    ("^(?!tag|category)$", ["", "tag", "t"]),
]


@pytest.mark.parametrize("pattern,extra", LOOKAHEAD_PATTERNS)
def test_lookahead_keys_vs_re(pattern, extra, tmp_path):
    keys_vs_re(pattern, tmp_path, extra)


# lookarounds the key automaton does not read (behind, not at the start, unanchored, guarding one branch,
# quantified, nested): such a pattern may match any key, and the grammar must stay sound
UNREAD_LOOKAROUNDS = ["(?<=a)b", "^a(?!b)", "(?!a)b", "^(?!a)b|c", "^(?=a)*b", "^(?=a(?=b))", "^((?!ab).)*$",
                      "^(?!.*://)(?=.{1,255}$)((.{1,63}\\.){1,127}(?![0-9]*$)[a-z0-9-]+\\.?)$"]


@pytest.mark.parametrize("pattern", UNREAD_LOOKAROUNDS)
def test_unread_lookaround_keys_sound(pattern, tmp_path):
    keys_vs_re(pattern, tmp_path, ["ab", "ac", "b", "c", "a.b"], complete=False)


@pytest.mark.parametrize("pattern,ok,bad", [
    ("^(?!ab)[a-z]+$", ["a", "acb", "b", "ba", "aab"], ["ab", "abc", "", "A", "a1"]),
    ("^(?=.{2,4}$)(?!.*--)[a-z-]+$", ["ab", "a-b", "-ab-"], ["a", "abcde", "a--b", "--", "a_b"]),
    ("^(?!(" + PY_KEYWORDS + ")$)[a-zA-Z_][\\w]*$", ["x", "Truex", "an", "_1"], ["True", "yield", "1a", ""]),
])
def test_lookahead_string_pattern(pattern, ok, bad, tmp_path):
    check({"type": "string", "pattern": pattern}, ok, bad, tmp_path)


def test_lookahead_names_closed(tmp_path):
    """browser.i18n's shape: keys under a lookahead pattern, none other allowed; and propertyNames
    with a lookahead (its keys become the extra keys)."""
    schema = {"type": "object", "patternProperties": {"^(?!@@)[@a-zA-Z0-9_-]+$": {"type": "integer"}},
              "additionalProperties": False}
    check(schema, [{}, {"a": 1}, {"a@": 1, "@": 2}, {"@x@": 3}],
          [{"@@": 1}, {"@@x": 1}, {"a": "s"}, {"a b": 1}, {"": 1}], tmp_path)
    schema = {"type": "object", "propertyNames": {"pattern": "^(?!x)[a-z]+$"}, "additionalProperties": {"type": "integer"}}
    check(schema, [{}, {"a": 1}, {"ax": 1, "b": 2}], [{"x": 1}, {"xa": 1}, {"a": "s"}, {"": 1}], tmp_path)


def test_unread_lookaround_string_pattern_refused(tmp_path):
    refused({"type": "string", "pattern": "^a(?!b)"}, "pattern", tmp_path)
