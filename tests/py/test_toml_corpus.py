"""util/toml against the toml-test corpus (BurntSushi/toml's copy, TOML v1.0.0).

valid/*.toml must decode to the JSON next to it (toml-test's tagged form, compared
structurally: integers as numbers, floats numerically with nan/inf by name, date-times as
normalized values); invalid/*.toml must be refused with a "FILE:LINE: message" error.
The decoder is tools/toml_decode.c, built here against the libraries in TPD_BUILD_DIR
unless the build already has a toml_decode binary.
"""
import calendar
import glob
import json
import os
import re
import shutil
import subprocess
import tempfile
from decimal import Decimal
from pathlib import Path

import pytest

SRC = Path(os.environ.get("TPD_SOURCE_DIR", Path(__file__).resolve().parents[2]))
BUILD = os.environ.get("TPD_BUILD_DIR")
CORPUS = Path(os.environ.get(
    "TOML_TEST_DIR",
    "/usr/share/gocode/src/github.com/BurntSushi/toml/internal/toml-test/tests"))

# Cases of the corpus that are not TOML 1.0.0, with what 1.0.0 says instead. toml-test's own
# version table (version.go) excludes exactly this one for 1.0.0.
NOT_V1_0 = {
    "valid/string/escape-esc": "\\e is a TOML 1.1 escape; 1.0.0 refuses unknown escapes",
}


def corpus_cases(kind):
    if not CORPUS.is_dir():
        return []
    return sorted(str(p.relative_to(CORPUS))[:-5] for p in (CORPUS / kind).rglob("*.toml"))


VALID = [c for c in corpus_cases("valid") if c not in NOT_V1_0]
INVALID = corpus_cases("invalid") + sorted(NOT_V1_0)


def _find(name):
    hits = glob.glob(os.path.join(BUILD, "**", name), recursive=True)
    return hits[0] if hits else None


@pytest.fixture(scope="session")
def decoder():
    if not CORPUS.is_dir():
        pytest.skip(f"toml-test corpus not found at {CORPUS}")
    if not BUILD:
        pytest.skip("TPD_BUILD_DIR not set")
    built = _find("toml_decode")
    if built and os.access(built, os.X_OK) and os.path.isfile(built):
        yield built
        return
    libs = [_find("libtpd_toml.a"), _find("libtpd_util.a")]
    if None in libs:
        pytest.skip(f"libtpd_toml.a / libtpd_util.a not built in {BUILD}")
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler")
    # An Asan build's libraries need the sanitizer runtime at link time.
    flags = []
    cache = Path(BUILD, "CMakeCache.txt")
    if cache.exists() and re.search(r"^CMAKE_BUILD_TYPE:\w+=Asan$", cache.read_text(), re.M):
        flags = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer"]
    tmp = tempfile.mkdtemp(prefix="toml_decode")
    exe = os.path.join(tmp, "toml_decode")
    subprocess.run([cc, "-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror", *flags,
                    "-I", str(SRC), str(SRC / "tools/toml_decode.c"), *libs, "-lm", "-lpthread",
                    "-o", exe], check=True)
    yield exe
    shutil.rmtree(tmp, ignore_errors=True)


def decode(exe, path):
    return subprocess.run([exe, str(path)], capture_output=True, timeout=60)


_DT = re.compile(r"^(?:(\d{4})-(\d\d)-(\d\d))?[Tt ]?(?:(\d\d):(\d\d):(\d\d)(?:\.(\d+))?)?"
                 r"(?:([Zz])|([+-])(\d\d):(\d\d))?$")


def norm_datetime(kind, s):
    """A comparable value: the UTC instant for offset date-times, fields for the local kinds,
    the fraction as an exact decimal so trailing zeros do not matter."""
    m = _DT.match(s)
    assert m, f"not a date/time: {s!r}"
    y, mo, d, h, mi, sec, frac, z, sign, oh, om = m.groups()
    frac = Decimal("0." + (frac or "0"))
    if kind == "datetime":
        assert z or sign, f"offset date-time without offset: {s!r}"
        off = 0 if z else (1 if sign == "+" else -1) * (int(oh) * 60 + int(om))
        t = calendar.timegm((int(y), int(mo), int(d), int(h), int(mi), int(sec)))
        return (t - off * 60, frac)
    assert not (z or sign), f"local {kind} with an offset: {s!r}"
    if kind == "date-local":
        assert y and not h, s
    elif kind == "time-local":
        assert h and not y, s
    else:
        assert y and h, s
    return (y, mo, d, h, mi, sec, frac)


def same(want, have, path="$"):
    """Structural equality of toml-test JSON; returns None or a description of the difference."""
    if isinstance(want, list):
        if not isinstance(have, list) or len(want) != len(have):
            return f"{path}: want array of {len(want)}, have {have!r:.200}"
        for i, (w, h) in enumerate(zip(want, have)):
            if (d := same(w, h, f"{path}[{i}]")):
                return d
        return None
    assert isinstance(want, dict)
    if not isinstance(have, dict):
        return f"{path}: want a table or value, have {have!r:.200}"
    if set(want) == {"type", "value"} and isinstance(want["type"], str) and \
            not isinstance(want["value"], (dict, list)):
        if set(have) != {"type", "value"} or have["type"] != want["type"]:
            return f"{path}: want {want}, have {have!r:.200}"
        t, w, h = want["type"], want["value"], have["value"]
        if t == "integer":
            ok = int(w) == int(h)
        elif t == "float":
            if "nan" in w or "nan" in h:
                ok = "nan" in w and "nan" in h
            else:
                ok = float(w) == float(h)
        elif t in ("datetime", "datetime-local", "date-local", "time-local"):
            ok = norm_datetime(t, w) == norm_datetime(t, h)
        else:
            ok = w == h
        return None if ok else f"{path}: want {want}, have {have}"
    if set(want) != set(have):
        return f"{path}: keys differ: want {sorted(want)}, have {sorted(have)}"
    for k in want:
        if (d := same(want[k], have[k], f"{path}.{k}")):
            return d
    return None


@pytest.mark.parametrize("case", VALID)
def test_valid(decoder, case):
    r = decode(decoder, CORPUS / f"{case}.toml")
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    assert r.stderr == b""
    have = json.loads(r.stdout)
    want = json.loads((CORPUS / f"{case}.json").read_text(encoding="utf-8"))
    diff = same(want, have)
    assert diff is None, diff


@pytest.mark.parametrize("case", INVALID)
def test_invalid(decoder, case):
    path = CORPUS / f"{case}.toml"
    r = decode(decoder, path)
    err = r.stderr.decode(errors="replace")
    # 1 is a clean refusal; anything else (a crash, a sanitizer report) is a failure.
    assert r.returncode == 1, f"rc={r.returncode} stdout={r.stdout[:200]!r} stderr={err}"
    assert r.stdout == b""
    m = re.match(rf"^{re.escape(str(path))}:(\d+): \S.*\n$", err)
    assert m, f"error not in FILE:LINE: form: {err!r}"
    lines = path.read_bytes().count(b"\n") + 1
    assert 1 <= int(m.group(1)) <= lines, err


def test_corpus_counts():
    """The corpus is the one this test was written against: 100 valid, 234 invalid files."""
    if not CORPUS.is_dir():
        pytest.skip(f"toml-test corpus not found at {CORPUS}")
    assert len(VALID) + len(NOT_V1_0) >= 100 and len(INVALID) - len(NOT_V1_0) >= 234


def test_same_detects_differences():
    """The comparison itself must be able to fail."""
    v = lambda t, x: {"type": t, "value": x}
    assert same({"a": v("integer", "1")}, {"a": v("integer", "01")}) is None
    assert same({"a": v("integer", "1")}, {"a": v("integer", "2")})
    assert same({"a": v("integer", "1")}, {"a": v("float", "1")})
    assert same({"a": v("float", "0.1")}, {"a": v("float", "0.10000000000000001")}) is None
    assert same({"a": v("float", "nan")}, {"a": v("float", "inf")})
    assert same({"a": v("datetime", "1987-07-05T17:45:00Z")},
                {"a": v("datetime", "1987-07-05T10:45:00-07:00")}) is None
    assert same({"a": v("datetime", "1987-07-05T17:45:00Z")},
                {"a": v("datetime", "1987-07-05T17:45:00+07:00")})
    assert same({"a": v("time-local", "07:32:00.5")}, {"a": v("time-local", "07:32:00.50")}) is None
    assert same({"a": v("time-local", "07:32:00.5")}, {"a": v("time-local", "07:32:00.05")})
    assert same({"a": [v("string", "x")]}, {"a": [v("string", "x"), v("string", "y")]})
    assert same({"a": {}}, {"a": {}, "b": {}})
