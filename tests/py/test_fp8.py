"""util/fp8.h (the FP8 E4M3 KV cache's conversions) against ml_dtypes' float8_e4m3fn.

A small C driver (tests/py/fp8_driver.c, header-only code) is compiled here and run on
binary files:
- decode: all 256 codes, bit for bit (NaN codes 0x7f, 0xff decode to NaN);
- encode: a dense sweep of float32 (every 2^10th bit pattern over the whole range), every
  exact tie between neighbouring E4M3 values and its two float32 neighbours, the subnormal
  range densely, overflow (448 up to FLT_MAX and infinity) and NaN. ml_dtypes rounds to
  nearest even but turns overflow into NaN; tpd saturates to +-448 (as CUDA's
  __NV_SATFINITE), so the expected code is ml_dtypes' of the input clipped to +-448.
- rows: the per-row power-of-two scale: the exponent is the smallest e with
  max|x| <= 448 * 2^e (0 for a zero or non-finite row) and the codes are those of x / 2^e.
"""
import os
import shutil
import subprocess

import numpy as np
import pytest

ml_dtypes = pytest.importorskip("ml_dtypes")
E4M3 = ml_dtypes.float8_e4m3fn

SRC = os.environ.get("TPD_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    exe = str(tmp_path_factory.mktemp("drv") / "fp8_driver")
    cmd = [cc, "-O1", "-std=gnu11", "-Wall", "-Werror", "-I", SRC,
           os.path.join(SRC, "tests", "py", "fp8_driver.c"), "-lm", "-o", exe]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, f"building the driver failed: {' '.join(cmd)}\n{r.stderr}"
    return exe


def run(driver, args, data=b""):
    r = subprocess.run([driver, *args], input=data, capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def expected_codes(x):
    """ml_dtypes' codes of x with tpd's saturation: clip finite and infinite values to 448."""
    x = np.asarray(x, dtype=np.float32)
    c = np.where(np.isnan(x), x, np.clip(x, -448.0, 448.0)).astype(np.float32)
    with np.errstate(invalid="ignore"):  # NaN inputs
        return c.astype(E4M3).view(np.uint8)


def test_decode_all_codes(driver):
    ours = np.frombuffer(run(driver, ["decode"]), dtype=np.float32)
    ref = np.arange(256, dtype=np.uint8).view(E4M3).astype(np.float32)
    assert ours.shape == (256,)
    nan = np.isnan(ref)
    assert np.array_equal(np.isnan(ours), nan)
    assert sorted(np.flatnonzero(nan)) == [0x7f, 0xff]
    assert np.array_equal(ours[~nan].view(np.uint32), ref[~nan].view(np.uint32))  # -0.0 included
    assert ours[0x7e] == 448.0 and ours[0x01] == 2.0 ** -9


def sweep():
    """The float32 inputs of the encode check."""
    parts = [np.arange(0, 2 ** 32, 2 ** 10, dtype=np.uint64).astype(np.uint32).view(np.float32)]
    vals = np.arange(256, dtype=np.uint8).view(E4M3).astype(np.float32)
    pos = np.unique(vals[np.isfinite(vals) & (vals >= 0)])  # 0 .. 448, sorted
    mids = ((pos[:-1].astype(np.float64) + pos[1:]) / 2).astype(np.float32)  # exact in float32
    assert np.array_equal(mids.astype(np.float64), (pos[:-1].astype(np.float64) + pos[1:]) / 2)
    ties = np.concatenate([mids, np.nextafter(mids, np.float32(0)), np.nextafter(mids, np.float32(np.inf)),
                           [np.float32(464.0)]])  # 464: halfway from 448 to where 480 would be
    parts += [ties, -ties, pos, -pos]
    parts.append(np.linspace(0, 2.0 ** -5, 200001, dtype=np.float32))  # subnormals and the first normals
    parts.append(np.float32(2.0) ** np.arange(-160, 128, dtype=np.float32))  # powers of two, float subnormals too
    over = np.array([448.0, 448.0001, 463.99, 464.0, 464.01, 479.0, 480.0, 1e4, 3e38, np.finfo(np.float32).max,
                     np.inf], dtype=np.float32)
    parts += [over, -over, np.array([np.nan, -np.nan], dtype=np.float32)]
    return np.concatenate([np.asarray(p, dtype=np.float32) for p in parts])


def test_encode_sweep(driver):
    x = sweep()
    ours = np.frombuffer(run(driver, ["encode"], x.tobytes()), dtype=np.uint8)
    assert ours.shape == x.shape
    nan = np.isnan(x)
    assert np.all(ours[nan] & 0x7f == 0x7f), "NaN must encode to a NaN code"
    ref = expected_codes(x)
    bad = np.flatnonzero((ours != ref) & ~nan)
    assert bad.size == 0, (f"{bad.size} of {x.size} differ, e.g. x={x[bad[:8]]!r} "
                           f"ours={ours[bad[:8]]} ml_dtypes={ref[bad[:8]]}")
    # saturation, not NaN, above 448: infinities too
    big = np.isfinite(x) & (np.abs(x) >= 448) | np.isinf(x)
    assert np.all(ours[big] & 0x7f == 0x7e)
    print(f"\nencode: {x.size} floats agree with ml_dtypes (clipped to +-448); "
          f"{int(np.sum(~nan & (np.abs(x) < 2 ** -6)))} of them below 2^-6 (E4M3 subnormals and zero)")


def test_rows(driver):
    rng = np.random.default_rng(7)
    hd = 64
    rows = []
    for mag in [0.0, 1e-40, 1e-30, 2.0 ** -9, 1e-3, 0.5, 1.0, 447.0, 448.0, 449.0, 1e4, 3e37]:
        rows.append(rng.uniform(-1, 1, hd).astype(np.float32) * np.float32(mag))
    for _ in range(500):
        rows.append((rng.standard_normal(hd) * 10.0 ** rng.uniform(-6, 6)).astype(np.float32))
    r = rng.standard_normal(hd).astype(np.float32)
    r[3] = np.inf
    rows.append(r)
    r = rng.standard_normal(hd).astype(np.float32)
    r[5] = np.nan
    rows.append(r)
    r = np.zeros(hd, np.float32)
    r[0] = 448.0 * 2.0 ** 20  # exactly representable at e = 20
    rows.append(r)
    x = np.stack(rows)
    out = np.frombuffer(run(driver, ["rows", str(hd)], x.tobytes()), dtype=np.uint8).reshape(len(rows), hd + 1)
    exps, codes = out[:, 0].view(np.int8).astype(int), out[:, 1:]
    for i, row in enumerate(x):
        finite = row[np.isfinite(row)]
        amax = float(np.max(np.abs(row))) if np.all(np.isfinite(row)) else (
            np.inf if np.any(np.isinf(row)) else float(np.max(np.abs(finite))))
        if amax == 0 or not np.isfinite(amax):
            e = 0
        else:
            e = int(np.ceil(np.log2(amax / 448.0)))
            while amax > 448.0 * 2.0 ** e:  # guard log2's rounding
                e += 1
            while amax <= 448.0 * 2.0 ** (e - 1):
                e -= 1
            e = max(-100, min(100, e))
        assert exps[i] == e, f"row {i}: amax {amax!r}: exponent {exps[i]}, want {e}"
        scaled = (row.astype(np.float64) / 2.0 ** e).astype(np.float32)
        ref = expected_codes(scaled)
        nan = np.isnan(row)
        assert np.array_equal(codes[i][~nan], ref[~nan]), f"row {i}: codes differ"
        if amax and np.isfinite(amax) and -100 < e < 100 and not nan.any():
            top = np.abs(codes[i].view(E4M3).astype(np.float32)).max()
            assert 224 <= top <= 448, f"row {i}: largest code {top} outside [224, 448]"
    dec = codes.view(E4M3).astype(np.float64) * 2.0 ** exps[:, None]
    ok = np.all(np.isfinite(x), axis=1) & (np.abs(x).max(axis=1) > 1e-20) & (np.abs(x).max(axis=1) < 1e30)
    rel = np.abs(dec[ok] - x[ok]) / np.abs(x[ok]).max(axis=1, keepdims=True)
    # half an ulp of 3 mantissa bits: 2^-4 of the element for normals; subnormals (below
    # 2^-6 of the scale, i.e. < 2^-13 of max|x|) err by at most 2^-10 of the scale
    print(f"\nrows: max |decoded - x| / max|x| = {rel.max():.4f} (E4M3 bound 2^-4 = 0.0625)")
    assert rel.max() <= 2.0 ** -4
