#!/usr/bin/env python3
"""JSON Schema coverage and soundness of tpd's grammar compiler (issue 27).

    .venv/bin/python bench/bench_schema.py [--data DIR | --corpus] [--build BUILD] [-v]

Per subset: schemas compiled / tried (coverage), valid instances the grammar refuses (and
how many of those only for their key order: accepted once their keys follow the schema's
properties order), invalid instances it accepts (must be 0), and compile time (p50, p99,
max). Instance labels come from the `jsonschema` package (format checker on), not from the
data.

JSONSchemaBench runs when its data is in bench/data/jsonschemabench/ (ignored by git; never
commit the data set) or the folder --data names: its subsets as JSON lines, one file per
subset (Github_easy.jsonl, Kubernetes.jsonl ...), one object per line with "schema" (an
object) or "json_schema" (its text, as the Hugging Face dataset epfl-dlab/JSONSchemaBench
has it) and, for MaskBench's instances, "tests": [{"data": ..., "valid": bool}]. MaskBench's
own layout is read too: its maskbench/data/*.json files (one schema with its "tests" per file,
the subset named before "---" in the file name), in --data or any folder below it. Without
the data the script says where to put it and runs bench/schema_corpus.py instead, a small
hand-written stand-in shaped like the benchmark's subsets (--corpus: the stand-in even when
the data is there). Fetching it where the hub is reachable, for example:

    python -c 'import datasets; [datasets.load_dataset("epfl-dlab/JSONSchemaBench", s,
        split="test").to_json(f"bench/data/jsonschemabench/{s}.jsonl") for s in
        ["Github_easy", "Github_medium", "Github_hard", "Kubernetes", "Snowplow",
         "WashingtonPost", "Glaiveai2K", "JsonSchemaStore"]]'


The grammar is matched through tests/grammar/grammar_driver (compile and match modes, a
vocabulary of single bytes), so no model is needed. Schemas are read as the specification
reads them (kind schema-spec, the daemon's grammar.open_objects = true and grammar.infer_types
= false): objects without additionalProperties take other keys, a schema without type takes
every type; the valid instances need both. The daemon's default reading (--closed: kind
schema, closed objects, a typeless schema written as the one type its keywords imply) takes a
subset."""
import argparse
import collections
import glob
import json
import multiprocessing
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DATA = os.path.join(HERE, "data", "jsonschemabench")
sys.path.insert(0, HERE)
import jsonschema  # noqa: E402
import schema_corpus  # noqa: E402


def text_of(v):
    return str(v) if isinstance(v, schema_corpus.RawText) else json.dumps(v, separators=(",", ":"),
                                                                         ensure_ascii=False)


DRAFTS_REF_ALONE = tuple(f"http://json-schema.org/draft-0{d}/schema" for d in (3, 4, 6, 7))


def ref_alone(root):
    """1 when root's $schema names draft 3, 4, 6 or 7, whose $ref ignores its siblings (as
    tpd's grammar/schema_draft.c reads it: the URI, with or without an empty fragment)."""
    d = root.get("$schema") if isinstance(root, dict) else None
    return isinstance(d, str) and d.rstrip("#") in DRAFTS_REF_ALONE and d.count("#") <= 1


def resolve(root, s, hops=0):
    """s with its local $ref followed (with siblings, where the draft keeps them: allOf of
    them and the target)."""
    while isinstance(s, dict) and isinstance(s.get("$ref"), str) and s["$ref"].startswith("#") and hops < 32:
        cur = root
        try:
            for tok in s["$ref"][1:].split("/")[1:]:
                tok = tok.replace("~1", "/").replace("~0", "~")
                cur = cur[int(tok)] if isinstance(cur, list) else cur[tok]
        except (KeyError, IndexError, ValueError, TypeError):
            return s
        if not isinstance(cur, dict):
            return s
        sib = {} if ref_alone(root) else {k: x for k, x in s.items() if k != "$ref"}
        s, hops = ({"allOf": [sib, cur]} if sib else cur), hops + 1  # as tpd merges them
    return s


def meets(root, s, v):
    """1 when v is valid under the subschema s of root (its $refs resolved against root)."""
    try:
        cls = jsonschema.validators.validator_for(root, default=jsonschema.Draft202012Validator)
        return cls(root).evolve(schema=s).is_valid(v)
    except Exception:
        return True


def branch_parts(root, s, v, else_first=False):
    """The anyOf/oneOf branches of s (given the value v, only those v meets: the grammar
    writes v through one of them) and the sides of its if/then/else (the one v takes; on the
    else side with `if`'s names, before or after else's: two readings)."""
    out = []
    for k in ("anyOf", "oneOf"):
        xs = s.get(k, []) if isinstance(s.get(k), list) else []
        if v is not None and any(meets(root, x, v) for x in xs):
            xs = [x for x in xs if meets(root, x, v)]
        out += xs
    ks = ("if", "then", "else")
    if v is not None and isinstance(s.get("if"), (dict, bool)):  # the branch v takes; on the
        # else side tpd writes the names `if` constrains too (a `not` of them: present, failing)
        ks = ("if", "then") if meets(root, s["if"], v) else ("else", "if") if else_first else ("if", "else")
    return out + [s[k] for k in ks if isinstance(s.get(k), dict)]


def parts(root, s, depth=0, v=None, bfs=False, ef=False):
    """s and the subschemas whose properties tpd merges into it (allOf, $ref, anyOf/oneOf
    branches, if/then/else), in the order it merges them: depth first, or with bfs each
    level of allOf before the allOfs inside it (as grammar/schema_merge.c's sc_flat merges a
    nested allOf after its siblings' keywords)."""
    s = resolve(root, s)
    if not isinstance(s, dict) or depth > 16:
        return []
    if not bfs:
        out = [s]
        for x in s.get("allOf", []) if isinstance(s.get("allOf"), list) else []:
            out += parts(root, x, depth + 1, v, False, ef)
        for x in branch_parts(root, s, v, ef):
            out += parts(root, x, depth + 1, v, False, ef)
        return out
    out, level = [], [s]
    while level and depth <= 16:
        nxt = []
        for x in level:
            x = resolve(root, x)
            if isinstance(x, dict):
                out.append(x)
                nxt += x["allOf"] if isinstance(x.get("allOf"), list) else []
        level, depth = nxt, depth + 1
    for x in list(out):
        for b in branch_parts(root, x, v, ef):
            out += parts(root, b, depth + 1, v, bfs, ef)
    return out


def schema_order(schema, v, root=None, bfs=False, ef=False):
    """v with every object's keys in the order of its schema's properties (best effort:
    through $ref, allOf/anyOf/oneOf, patternProperties, additionalProperties and items)."""
    root = schema if root is None else root
    ps = parts(root, schema, 0, v, bfs, ef)
    if isinstance(v, dict):
        names = []
        for p in ps:
            props = p.get("properties") if isinstance(p.get("properties"), dict) else {}
            names += [k for k in props if k not in names]
        for p in ps:  # then required names no properties declare (grammar/schema_object.c)
            req = p.get("required") if isinstance(p.get("required"), list) else []
            names += [k for k in req if isinstance(k, str) and k not in names]

        def sub(k):
            for p in ps:
                if isinstance(p.get("properties"), dict) and k in p["properties"]:
                    return p["properties"][k]
            for p in ps:
                for pat, x in (p.get("patternProperties") or {}).items() if isinstance(
                        p.get("patternProperties"), dict) else []:
                    try:
                        if re.search(pat, k):
                            return x
                    except re.error:
                        pass
            for p in ps:
                if isinstance(p.get("additionalProperties"), dict):
                    return p["additionalProperties"]
            return {}
        keys = [k for k in names if k in v] + [k for k in v if k not in names]
        return {k: schema_order(sub(k), v[k], root, bfs, ef) for k in keys}
    if isinstance(v, list):
        items = next((p["items"] for p in ps if isinstance(p.get("items"), (dict, list))), {})
        prefix = next((p["prefixItems"] for p in ps if isinstance(p.get("prefixItems"), list)), None)
        if isinstance(items, list):
            prefix, items = items, {}
        prefix = prefix or []
        return [schema_order(prefix[i] if i < len(prefix) else items, x, root, bfs, ef) for i, x in enumerate(v)]
    return v


def run(driver, schema, texts, tmp, limit, kind="schema-spec"):
    sp, ip = os.path.join(tmp, "s.json"), os.path.join(tmp, "i.txt")
    with open(sp, "w") as f:
        json.dump(schema, f)
    r = subprocess.run([driver, "-", kind, sp, "compile"], capture_output=True, text=True,
                       timeout=limit)
    if r.returncode != 0 or not r.stdout.startswith("ok"):
        if not r.stdout.startswith("error"):
            return None, 0.0, f"error: grammar_driver exit {r.returncode} (crash?)"
        return None, float(r.stdout.split()[-1]), r.stdout.splitlines()[0]
    ms = float(r.stdout.split()[1])
    with open(ip, "w") as f:
        f.write("".join(t.encode().hex() + "\n" for t in texts))
    r = subprocess.run([driver, "-", kind, sp, "match", ip], capture_output=True, text=True,
                       timeout=limit)
    got = [l == "1" for l in r.stdout.split()]
    if r.returncode != 0 or len(got) != len(texts):
        return None, ms, f"error: grammar_driver match exit {r.returncode} (crash?)"
    return got, ms, ""


def entry(subset, name, e):
    tests = e.get("tests", [])
    schema = e["schema"] if "schema" in e else json.loads(e["json_schema"])
    return (subset, name, schema, [t["data"] for t in tests if t.get("valid")],
            [t["data"] for t in tests if not t.get("valid")])


def load_data(d, only):
    out = []
    for path in sorted(glob.glob(os.path.join(d, "*.jsonl"))):
        subset = os.path.splitext(os.path.basename(path))[0]
        if not only or subset in only:
            out += [entry(subset, f"{subset}:{i}", json.loads(line)) for i, line in enumerate(open(path))]
    for path in sorted(glob.glob(os.path.join(d, "**", "*.json"), recursive=True)):
        base = os.path.basename(path)
        subset = base.split("---")[0] if "---" in base else base.rsplit("_", 1)[0]
        if not only or subset in only:
            out.append(entry(subset, base, json.load(open(path))))
    return out


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * (len(xs) - 1) + 0.5))] if xs else 0.0


def check(job):
    """One schema: (subset, name, compiled, ms, err, counts, lines to print)."""
    (subset, name, schema, valid, invalid), driver, verbose, limit, kind = job
    c = {"valid": 0, "valid_rejected": 0, "order_only": 0, "invalid": 0, "invalid_accepted": 0,
         "unlabelled": 0}
    msgs = []
    try:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        v = cls(schema, format_checker=cls.FORMAT_CHECKER)
        val = lambda x: v.is_valid(json.loads(text_of(x)))  # noqa: E731
        # labels from jsonschema; an instance it labels otherwise than the data is left out
        keep_v, keep_i = [x for x in valid if val(x)], [x for x in invalid if not val(x)]
    except Exception:  # a schema jsonschema cannot evaluate (remote $ref, bad regex ...)
        keep_v, keep_i = [], []
    c["unlabelled"] = len(valid) + len(invalid) - len(keep_v) - len(keep_i)
    valid, invalid = keep_v, keep_i
    texts = [text_of(x) for x in valid + invalid]
    # readings of the order tpd merges allOf in (depth first, level by level) and an else
    # side's names (if's before or after else's)
    readings = [(False, False), (True, False), (False, True), (True, True)]
    reordered = [text_of(schema_order(schema, json.loads(t), bfs=b, ef=e)) for b, e in readings
                 for t in texts[:len(valid)]]
    with tempfile.TemporaryDirectory() as tmp:
        try:
            got, ms, err = run(driver, schema, texts + reordered, tmp, limit, kind)
        except subprocess.TimeoutExpired:
            return subset, name, False, limit * 1000.0, "error: timeout", c, msgs
    if got is None:
        if verbose:
            msgs.append(f"refused {name}: {err}")
        return subset, name, False, ms, err, c, msgs
    c["valid"], c["invalid"] = len(valid), len(invalid)
    for i, t in enumerate(texts):
        ok = got[i]
        if i < len(valid) and not ok:
            c["valid_rejected"] += 1
            order_only = any(got[len(texts) + r * len(valid) + i] for r in range(len(readings)))
            c["order_only"] += order_only
            if verbose and not order_only:
                msgs.append(f"valid rejected {name}: {t[:200]}")
        elif i >= len(valid) and ok:
            c["invalid_accepted"] += 1
            msgs.append(f"INVALID ACCEPTED {name}: {t[:200]}")
    return subset, name, True, ms, "", c, msgs


def reason(err):
    """A compile error with its names and numbers taken out, to count refusals by kind."""
    err = re.sub(r"'[^']*'|\"[^\"]*\"|`[^`]*`", "_", err)
    return re.sub(r"[0-9]+", "N", err)[:120]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=DATA, help=f"JSONSchemaBench's subsets (default {DATA})")
    ap.add_argument("--corpus", action="store_true", help="the stand-in corpus, data or not")
    ap.add_argument("--build", default=os.environ.get("TPD_BUILD_DIR", os.path.join(ROOT, "build")))
    ap.add_argument("--subset", default="", help="comma-separated subsets to run (default: all)")
    ap.add_argument("--jobs", type=int, default=1, help="schemas checked at once")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per schema and step")
    ap.add_argument("--reasons", type=int, default=0, help="print the N most common refusals")
    ap.add_argument("--closed", action="store_true",
                    help="the daemon's default reading: objects without additionalProperties closed "
                         "(valid instances with other keys are then refused by design)")
    ap.add_argument("-v", action="store_true", help="print each refused schema and wrong verdict")
    a = ap.parse_args()
    driver = os.path.join(a.build, "tests", "grammar_driver")
    only = set(filter(None, a.subset.split(",")))
    entries = [] if a.corpus else load_data(a.data, only)
    if not entries:
        if not a.corpus:
            print(f"JSONSchemaBench not found: put its subsets as {a.data}/<subset>.jsonl (see this "
                  "script's docstring for the format and how to fetch them); running the stand-in "
                  "corpus bench/schema_corpus.py instead\n")
        entries = [e for e in schema_corpus.CORPUS if not only or e[0] in only]
    stats, reasons = {}, collections.Counter()
    jobs = [(e, driver, a.v, a.timeout, "schema" if a.closed else "schema-spec") for e in entries]
    with multiprocessing.Pool(a.jobs) as pool:
        for subset, name, ok, ms, err, c, msgs in pool.imap(check, jobs, chunksize=4):
            s = stats.setdefault(subset, {"tried": 0, "compiled": 0, "ms": [],
                                          **{k: 0 for k in c}})
            s["tried"] += 1
            s["compiled"] += ok
            s["ms"].append(ms)
            for k in c:
                s[k] += c[k]
            if not ok:
                reasons[reason(err)] += 1
            for m in msgs:
                print(m, flush=True)
    print("| subset | coverage | valid rejected (key order only) | invalid accepted | "
          "compile ms p50 / p99 / max |")
    print("|---|---|---|---|---|")
    total_bad = 0
    for subset, s in sorted(stats.items()):
        total_bad += s["invalid_accepted"]
        print(f"| {subset} | {s['compiled']}/{s['tried']} = {s['compiled'] / s['tried']:.2f} | "
              f"{s['valid_rejected']}/{s['valid']} ({s['order_only']}) | "
              f"{s['invalid_accepted']}/{s['invalid']} | "
              f"{pct(s['ms'], 0.5):.2f} / {pct(s['ms'], 0.99):.2f} / {max(s['ms']):.2f} |")
    unl = sum(s["unlabelled"] for s in stats.values())
    if unl:
        print(f"\n{unl} instances left out: jsonschema labels them otherwise than the data, "
              "or cannot evaluate their schema")
    for r, n in reasons.most_common(a.reasons):
        print(f"{n:6d}  {r}")
    return 1 if total_bad else 0


if __name__ == "__main__":
    sys.exit(main())
