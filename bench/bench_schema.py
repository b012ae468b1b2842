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
has it) and, for MaskBench's instances, "tests": [{"data": ..., "valid": bool}]. Without
the data the script says where to put it and runs bench/schema_corpus.py instead, a small
hand-written stand-in shaped like the benchmark's subsets (--corpus: the stand-in even when
the data is there). Fetching it where the hub is reachable, for example:

    python -c 'import datasets; [datasets.load_dataset("epfl-dlab/JSONSchemaBench", s,
        split="test").to_json(f"bench/data/jsonschemabench/{s}.jsonl") for s in
        ["Github_easy", "Github_medium", "Github_hard", "Kubernetes", "Snowplow",
         "WashingtonPost", "Glaiveai2K", "JsonSchemaStore"]]'


The grammar is matched through tests/grammar/grammar_driver (compile and match modes, a
vocabulary of single bytes), so no model is needed."""
import argparse
import glob
import json
import os
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


def schema_order(schema, v):
    """v with every object's keys in the order of its schema's properties (best effort)."""
    if isinstance(v, dict) and isinstance(schema, dict):
        props = schema.get("properties", {}) if isinstance(schema.get("properties"), dict) else {}
        keys = [k for k in props if k in v] + [k for k in v if k not in props]
        return {k: schema_order(props.get(k, {}), v[k]) for k in keys}
    if isinstance(v, list) and isinstance(schema, dict) and isinstance(schema.get("items"), dict):
        return [schema_order(schema["items"], x) for x in v]
    return v


def run(driver, schema, texts, tmp):
    sp, ip = os.path.join(tmp, "s.json"), os.path.join(tmp, "i.txt")
    with open(sp, "w") as f:
        json.dump(schema, f)
    r = subprocess.run([driver, "-", "schema", sp, "compile"], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        return None, float(r.stdout.split()[-1]), r.stdout.splitlines()[0]
    ms = float(r.stdout.split()[1])
    with open(ip, "w") as f:
        f.write("".join(t.encode().hex() + "\n" for t in texts))
    r = subprocess.run([driver, "-", "schema", sp, "match", ip], capture_output=True, text=True, timeout=300)
    return [l == "1" for l in r.stdout.split()], ms, ""


def load_data(d):
    out = []
    for path in sorted(glob.glob(os.path.join(d, "*.jsonl"))):
        subset = os.path.splitext(os.path.basename(path))[0]
        for i, line in enumerate(open(path)):
            e = json.loads(line)
            tests = e.get("tests", [])
            schema = e["schema"] if "schema" in e else json.loads(e["json_schema"])
            out.append((subset, f"{subset}:{i}", schema, [t["data"] for t in tests if t.get("valid")],
                        [t["data"] for t in tests if not t.get("valid")]))
    return out


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * (len(xs) - 1) + 0.5))] if xs else 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=DATA, help=f"JSONSchemaBench's subsets (default {DATA})")
    ap.add_argument("--corpus", action="store_true", help="the stand-in corpus, data or not")
    ap.add_argument("--build", default=os.environ.get("TPD_BUILD_DIR", os.path.join(ROOT, "build")))
    ap.add_argument("-v", action="store_true", help="print each refused schema and wrong verdict")
    a = ap.parse_args()
    driver = os.path.join(a.build, "tests", "grammar_driver")
    have = not a.corpus and glob.glob(os.path.join(a.data, "*.jsonl"))
    if not have and not a.corpus:
        print(f"JSONSchemaBench not found: put its subsets as {a.data}/<subset>.jsonl (see this "
              "script's docstring for the format and how to fetch them); running the stand-in "
              "corpus bench/schema_corpus.py instead\n")
    entries = load_data(a.data) if have else schema_corpus.CORPUS
    stats = {}
    with tempfile.TemporaryDirectory() as tmp:
        for subset, name, schema, valid, invalid in entries:
            s = stats.setdefault(subset, {"tried": 0, "compiled": 0, "valid": 0, "valid_rejected": 0,
                                          "order_only": 0, "invalid": 0, "invalid_accepted": 0, "ms": []})
            s["tried"] += 1
            cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
            v = cls(schema, format_checker=cls.FORMAT_CHECKER)
            val = lambda x: v.is_valid(json.loads(text_of(x)))  # noqa: E731
            bad_labels = [x for x in valid if not val(x)] + [x for x in invalid if val(x)]
            if bad_labels:
                sys.exit(f"{name}: jsonschema disagrees with the labels of {bad_labels[:3]}")
            texts = [text_of(x) for x in valid + invalid]
            reordered = [text_of(schema_order(schema, json.loads(t))) for t in texts[:len(valid)]]
            got, ms, err = run(driver, schema, texts + reordered, tmp)
            s["ms"].append(ms)
            if got is None:
                if a.v:
                    print(f"refused {name}: {err}")
                continue
            s["compiled"] += 1
            s["valid"] += len(valid)
            s["invalid"] += len(invalid)
            for i, t in enumerate(texts):
                ok = got[i]
                if i < len(valid) and not ok:
                    s["valid_rejected"] += 1
                    s["order_only"] += got[len(texts) + i]
                    if a.v and not got[len(texts) + i]:
                        print(f"valid rejected {name}: {t[:200]}")
                elif i >= len(valid) and ok:
                    s["invalid_accepted"] += 1
                    print(f"INVALID ACCEPTED {name}: {t[:200]}")
    print("| subset | coverage | valid rejected (key order only) | invalid accepted | compile ms p50 / p99 / max |")
    print("|---|---|---|---|---|")
    total_bad = 0
    for subset, s in stats.items():
        total_bad += s["invalid_accepted"]
        print(f"| {subset} | {s['compiled']}/{s['tried']} = {s['compiled'] / s['tried']:.2f} | "
              f"{s['valid_rejected']}/{s['valid']} ({s['order_only']}) | {s['invalid_accepted']}/{s['invalid']} | "
              f"{pct(s['ms'], 0.5):.2f} / {pct(s['ms'], 0.99):.2f} / {max(s['ms']):.2f} |")
    return 1 if total_bad else 0


if __name__ == "__main__":
    sys.exit(main())
