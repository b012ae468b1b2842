"""cpu_dequant_row and cpu_matmul against the `gguf` Python package and numpy.

A small C driver (tests/py/quant_driver.c) is compiled here against the static libraries in
TPD_BUILD_DIR and run on files.
- dequantization: blocks made by gguf.quants.quantize where it can (and random bytes, for
  every type, including the K-quants it cannot quantize), dequantized by both; must be equal
  bit for bit.
- matmul, tight: against a numpy model of what llama.cpp's x86 CPU backend computes
  (activations quantized per row as ggml's AVX2 quantize_row_q8_0/q8_1 and
  quantize_row_q8_K_ref do, integer block dots, float scales); only float summation order
  may differ.
- matmul, loose: against float64 dequant(W) @ x, within the error bound implied by the
  activation quantization.
"""
import glob
import os
import subprocess

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as Q  # noqa: E402
from gguf import quants  # noqa: E402

SRC = os.environ.get("TPD_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("TPD_BUILD_DIR", "")

TYPES = [Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q4_K, Q.Q6_K]
QUANTIZABLE = {Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1}  # gguf.quants.quantize supports these


def find_lib(name):
    hits = sorted(glob.glob(os.path.join(BUILD, "**", name), recursive=True))
    return hits[0] if hits else None


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    if not BUILD:
        pytest.skip("TPD_BUILD_DIR not set")
    kern, util = find_lib("libtpd_kernels.a"), find_lib("libtpd_util.a")
    if not kern or not util:
        pytest.skip("libtpd_kernels.a / libtpd_util.a not built in TPD_BUILD_DIR")
    flags = ["-O1", "-std=gnu11"]
    cache = os.path.join(BUILD, "CMakeCache.txt")
    if os.path.exists(cache) and "CMAKE_BUILD_TYPE:STRING=Asan" in open(cache).read():
        flags += ["-fsanitize=address,undefined"]  # the libraries were built with it
    exe = str(tmp_path_factory.mktemp("drv") / "quant_driver")
    cmd = ["cc", *flags, "-I", SRC, os.path.join(SRC, "tests", "py", "quant_driver.c"), kern, util,
           "-lpthread", "-lm", "-o", exe]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, f"building the driver failed: {' '.join(cmd)}\n{r.stderr}"
    return exe


def block_info(t):
    return quants.GGML_QUANT_SIZES[t]  # (elements, bytes) per block


def f16_bytes(v):
    return np.atleast_1d(np.asarray(v, dtype=np.float16)).view(np.uint8)


def random_blocks(rng, t, nblocks, sane=True):
    """Random bytes; with sane=True the scales are set to reasonable fp16 values."""
    be, bb = block_info(t)
    b = rng.integers(0, 256, size=(nblocks, bb), dtype=np.uint8)
    if not sane:
        return b
    if t == Q.F32:
        return rng.uniform(-1, 1, size=nblocks).astype(np.float32).view(np.uint8).reshape(nblocks, 4)
    if t == Q.F16:
        return rng.uniform(-1, 1, size=nblocks).astype(np.float16).view(np.uint8).reshape(nblocks, 2)
    if t == Q.BF16:
        return (rng.uniform(-1, 1, size=nblocks).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16) \
            .view(np.uint8).reshape(nblocks, 2)
    d = rng.uniform(0.002, 0.02, size=nblocks)
    if t in (Q.Q8_0, Q.Q4_0):
        b[:, 0:2] = f16_bytes(d).reshape(nblocks, 2)
    elif t == Q.Q4_1:
        b[:, 0:2] = f16_bytes(d).reshape(nblocks, 2)
        b[:, 2:4] = f16_bytes(rng.uniform(-0.1, 0.1, size=nblocks)).reshape(nblocks, 2)
    elif t == Q.Q4_K:
        b[:, 0:2] = f16_bytes(d / 10).reshape(nblocks, 2)
        b[:, 2:4] = f16_bytes(rng.uniform(0, 0.001, size=nblocks)).reshape(nblocks, 2)
    elif t == Q.Q6_K:
        b[:, 208:210] = f16_bytes(d / 10).reshape(nblocks, 2)
    return b


def make_weights(rng, t, rows, cols, how):
    be, bb = block_info(t)
    nb = rows * cols // be
    if how == "quantize":
        data = rng.normal(0, 0.05, size=(rows, cols)).astype(np.float32)
        data[::3] *= 10  # rows of different magnitude
        w = quants.quantize(data, t)
        return np.ascontiguousarray(w).view(np.uint8).reshape(rows, -1)
    return random_blocks(rng, t, nb, sane=(how == "sane")).reshape(rows, -1)


def run_dequant(driver, tmp_path, t, raw, n):
    src, dst = tmp_path / "in.bin", tmp_path / "out.bin"
    src.write_bytes(raw.tobytes())
    subprocess.run([driver, "dequant", str(int(t)), str(n), str(src), str(dst)], check=True)
    return np.fromfile(dst, dtype=np.float32)


def run_matmul(driver, tmp_path, t, w, x, threads=2, scalar=False):
    rows = w.shape[0]
    T, cols = x.shape
    wp, xp, yp = tmp_path / "w.bin", tmp_path / "x.bin", tmp_path / "y.bin"
    wp.write_bytes(np.ascontiguousarray(w).tobytes())
    xp.write_bytes(np.ascontiguousarray(x, dtype=np.float32).tobytes())
    r = subprocess.run([driver, "matmul", str(int(t)), str(rows), str(cols), str(T), str(threads),
                        "1" if scalar else "0", str(wp), str(xp), str(yp)],
                       check=True, capture_output=True, text=True)
    return np.fromfile(yp, dtype=np.float32).reshape(T, rows), r.stdout.strip()


def gguf_dequant(w, t):
    with np.errstate(all="ignore"):
        return quants.dequantize(np.ascontiguousarray(w).reshape(-1), t).astype(np.float32).reshape(w.shape[0], -1)


# ---------------------------------------------------------------- dequantization

@pytest.mark.parametrize("t", TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("how", ["quantize", "sane", "random"])
def test_dequant_matches_gguf(driver, tmp_path, t, how):
    if how == "quantize" and t not in QUANTIZABLE:
        pytest.skip(f"gguf cannot quantize {t.name}")
    rng = np.random.default_rng(int(t) * 7 + len(how))
    be, _ = block_info(t)
    cols = 256 * 3 if be == 256 else 32 * 24
    w = make_weights(rng, t, 16, cols, how)
    ours = run_dequant(driver, tmp_path, t, w, w.shape[0] * cols).reshape(w.shape[0], cols)
    ref = gguf_dequant(w, t)
    if how == "random":  # NaN payloads may differ; values and NaN positions may not
        np.testing.assert_array_equal(ours, ref)
    else:
        assert np.isfinite(ref).all()
        assert np.array_equal(ours.view(np.uint32), ref.view(np.uint32)), \
            f"max diff {np.abs(ours - ref).max()}"


# ---------------------------------------------------------------- a numpy model of ggml's arithmetic

def f16r(v):
    return np.asarray(v, dtype=np.float32).astype(np.float16).astype(np.float32)


def ggml_q8_blocks(x):
    """ggml's AVX2 quantize_row_q8_0 / q8_1: per 32: d = amax/127 (stored fp16), q = rint(x*127/amax)."""
    xb = x.reshape(-1, 32).astype(np.float32)
    amax = np.abs(xb).max(axis=1).astype(np.float32)
    with np.errstate(divide="ignore"):
        idv = np.where(amax != 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
    q = np.rint(xb * idv[:, None]).astype(np.int32)  # half to even, like _mm256_round_ps
    d = (amax / np.float32(127)).astype(np.float32)
    s = f16r(d * q.sum(axis=1).astype(np.float32))
    return q, f16r(d), s


def ggml_q8_K_blocks(x):
    """ggml's quantize_row_q8_K_ref: per 256: iscale = -127/max (max = signed value of largest |x|)."""
    xb = x.reshape(-1, 256).astype(np.float32)
    idx = np.abs(xb).argmax(axis=1)
    mx = xb[np.arange(len(xb)), idx]
    with np.errstate(divide="ignore"):
        iscale = np.where(mx != 0, np.float32(-127) / mx, np.float32(0)).astype(np.float32)
    q = np.minimum(np.rint(xb * iscale[:, None]), 127).astype(np.int32)
    with np.errstate(divide="ignore"):
        d = np.where(mx != 0, np.float32(1) / iscale, np.float32(0)).astype(np.float32)
    return q, d


def unit_quants(w, t):
    """The integer quants of every block (and the scales) through gguf's own dequantization of
    blocks whose scales are replaced by 1 and offsets by 0."""
    be, bb = block_info(t)
    blocks = np.ascontiguousarray(w).reshape(-1, bb).copy()
    one, zero = f16_bytes(1.0), f16_bytes(0.0)
    if t in (Q.Q8_0, Q.Q4_0):
        scales = blocks[:, 0:2].copy().view(np.float16).astype(np.float32).ravel()
        blocks[:, 0:2] = one
        return gguf_dequant(blocks, t).reshape(-1, be).astype(np.int32), scales
    if t == Q.Q4_1:
        d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32).ravel()
        m = blocks[:, 2:4].copy().view(np.float16).astype(np.float32).ravel()
        blocks[:, 0:2], blocks[:, 2:4] = one, zero
        return gguf_dequant(blocks, t).reshape(-1, be).astype(np.int32), (d, m)
    if t == Q.Q4_K:
        d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32).ravel()
        dmin = blocks[:, 2:4].copy().view(np.float16).astype(np.float32).ravel()
        sc, mn = quants.Q4_K.get_scale_min(blocks[:, 4:16].copy())
        blocks[:, 0:2], blocks[:, 2:4] = one, zero
        blocks[:, 4:8], blocks[:, 8:12], blocks[:, 12:16] = 1, 0, 1  # every scale 1, every min 0
        return gguf_dequant(blocks, t).reshape(-1, be).astype(np.int32), (d, dmin, sc.astype(np.int32), mn.astype(np.int32))
    if t == Q.Q6_K:
        d = blocks[:, 208:210].copy().view(np.float16).astype(np.float32).ravel()
        sc = blocks[:, 192:208].copy().view(np.int8).astype(np.int32)
        blocks[:, 208:210], blocks[:, 192:208] = one, 1
        return gguf_dequant(blocks, t).reshape(-1, be).astype(np.int32), (d, sc)
    raise ValueError(t)


def ggml_model(w, t, x):
    """(expected y, sum of |terms|) for every row and token, float64 sums of float32 terms."""
    rows = w.shape[0]
    T, cols = x.shape
    y = np.zeros((T, rows))
    mag = np.zeros((T, rows))
    if t in (Q.F32, Q.F16, Q.BF16):
        wf = gguf_dequant(w, t).astype(np.float64)
        if t == Q.F16:
            xr = f16r(x)
        elif t == Q.BF16:
            xr = gguf_dequant(quants.quantize(x.astype(np.float32), Q.BF16), Q.BF16).reshape(x.shape)
        else:
            xr = x
        xr = xr.astype(np.float64)
        return xr @ wf.T, np.abs(xr) @ np.abs(wf).T
    be, _ = block_info(t)
    nb = cols // be
    q, sc = unit_quants(w, t)
    q = q.reshape(rows, nb, be)
    for ti in range(T):
        if be == 32:
            qa, da, sa = ggml_q8_blocks(x[ti])
            if t == Q.Q4_1:
                d, m = sc
                d, m = d.reshape(rows, nb), m.reshape(rows, nb)
                sumi = np.einsum("rbk,bk->rb", q, qa).astype(np.float32)
                terms = (d * da[None, :]).astype(np.float32) * sumi
                mterms = (m * sa[None, :]).astype(np.float32)
                y[ti] = terms.astype(np.float64).sum(1) + mterms.astype(np.float64).sum(1)
                mag[ti] = np.abs(terms).sum(1) + np.abs(mterms).sum(1)
            else:
                d = sc.reshape(rows, nb)
                sumi = np.einsum("rbk,bk->rb", q, qa).astype(np.float32)
                terms = (d * da[None, :]).astype(np.float32) * sumi
                y[ti] = terms.astype(np.float64).sum(1)
                mag[ti] = np.abs(terms).sum(1)
        else:
            qa, da = ggml_q8_K_blocks(x[ti])
            if t == Q.Q4_K:
                d, dmin, scs, mns = sc
                d, dmin = d.reshape(rows, nb), dmin.reshape(rows, nb)
                scs, mns = scs.reshape(rows, nb, 8), mns.reshape(rows, nb, 8)
                sub = np.einsum("rbsk,bsk->rbs", q.reshape(rows, nb, 8, 32), qa.reshape(nb, 8, 32))
                sumi = (scs * sub).sum(2).astype(np.float32)
                gs = qa.reshape(nb, 8, 32).sum(2)
                summ = (mns * gs[None]).sum(2).astype(np.float32)
                t1 = (da[None, :] * d).astype(np.float32) * sumi
                t2 = (-da[None, :] * dmin).astype(np.float32) * summ
                y[ti] = t1.astype(np.float64).sum(1) + t2.astype(np.float64).sum(1)
                mag[ti] = np.abs(t1).sum(1) + np.abs(t2).sum(1)
            else:
                d, scs = sc
                d, scs = d.reshape(rows, nb), scs.reshape(rows, nb, 16)
                sub = np.einsum("rbgk,bgk->rbg", q.reshape(rows, nb, 16, 16), qa.reshape(nb, 16, 16))
                sumi = (scs * sub).sum(2).astype(np.float32)
                t1 = (da[None, :] * d).astype(np.float32) * sumi
                y[ti] = t1.astype(np.float64).sum(1)
                mag[ti] = np.abs(t1).sum(1)
    return y, mag


def shapes_for(t):
    be, _ = block_info(t)
    return [(37, 1536, 3), (5, 768, 1)] if be == 256 else [(37, 576, 3), (70, 160, 2), (3, 32, 1)]


@pytest.mark.parametrize("t", TYPES, ids=lambda t: t.name)
def test_matmul_mimics_ggml(driver, tmp_path, t):
    """Same quantized activations, integer dots and float scales as llama.cpp's CPU backend."""
    rng = np.random.default_rng(100 + int(t))
    for rows, cols, T in shapes_for(t):
        w = make_weights(rng, t, rows, cols, "quantize" if t in QUANTIZABLE else "sane")
        x = rng.normal(0, 1, size=(T, cols)).astype(np.float32)
        x[:, 32:64] = 0  # a zero block
        # a token of exact ties: with amax = 127 every x * 127/amax is k + 0.5, where rounding
        # half to even (ggml's AVX2 and Q8_K rule) and half away from zero differ
        ties = (rng.integers(-127, 127, size=cols) + 0.5).astype(np.float32)
        ties[::32] = 127.0
        x = np.vstack([x, ties[None, :]])
        T = T + 1
        want, mag = ggml_model(w, t, x)
        nterms = cols if t in (Q.F32, Q.F16, Q.BF16) else 2 * cols // block_info(t)[0]
        tol = (nterms + 16) * 2.0 ** -22 * mag + 1e-30
        for scalar in (False, True):
            got, path = run_matmul(driver, tmp_path, t, w, x, threads=3, scalar=scalar)
            err = np.abs(got - want)
            assert (err <= tol).all(), \
                f"{t.name} {rows}x{cols} T={T} {path}: worst err/tol {np.max(err / tol):.3g}"


@pytest.mark.parametrize("t", TYPES, ids=lambda t: t.name)
def test_matmul_vs_dequantized_numpy(driver, tmp_path, t):
    """Against float64 dequant(W) @ x: the only differences allowed are those of quantizing the
    activations (a bound per element: half a quantization step plus the fp16 rounding of the
    scale) and float summation."""
    rng = np.random.default_rng(200 + int(t))
    be, _ = block_info(t)
    for rows, cols, T in shapes_for(t):
        w = make_weights(rng, t, rows, cols, "quantize" if t in QUANTIZABLE else "sane")
        x = rng.uniform(-1, 1, size=(T, cols)).astype(np.float32)
        wf = gguf_dequant(w, t).astype(np.float64)
        ref = x.astype(np.float64) @ wf.T
        # per element error of the activation the kernel uses
        if t == Q.F32:
            e = np.zeros_like(x, dtype=np.float64)
        elif t == Q.F16:
            e = np.maximum(np.abs(x) * 2.0 ** -11, 2.0 ** -25)
        elif t == Q.BF16:
            e = np.abs(x) * 2.0 ** -8
        else:
            amax = np.abs(x.reshape(T, -1, be)).max(axis=2).astype(np.float64)
            d = amax / 127
            eb = d * (0.5 + 1e-4) + (0 if be == 256 else 127 * (d * 2.0 ** -11 + 2.0 ** -25))
            e = np.repeat(eb, be, axis=1)
        # offsets applied through activation sums (Q4_1's m, Q4_K's dmin*min) meet the sum of
        # the errors of their 32 elements (plus, for Q4_1, the fp16 rounding of s)
        off = np.zeros_like(wf)
        if t in (Q.Q4_1, Q.Q4_K):
            z = np.ascontiguousarray(w).reshape(-1, block_info(t)[1]).copy()
            if t == Q.Q4_1:
                z[:, 4:] = 0
            else:
                z[:, 16:] = 0
            off = gguf_dequant(z, t).reshape(rows, cols).astype(np.float64)
        bound = e @ (np.abs(wf) + np.abs(off)).T
        if t in (Q.Q4_1, Q.Q4_K):
            eg = e.reshape(T, -1, 32).sum(2)
            if t == Q.Q4_1:
                ag = np.abs(x.reshape(T, -1, 32)).max(2).astype(np.float64)
                eg = eg + ag / 127 * 32 * 127 * 2.0 ** -11 + 2.0 ** -25
            bound += eg @ np.abs(off[:, ::32]).T
        mag = (np.abs(x) + e) @ (np.abs(wf) + 2 * np.abs(off)).T
        bound += (cols + 16) * 2.0 ** -22 * mag
        got, path = run_matmul(driver, tmp_path, t, w, x, threads=2)
        err = np.abs(got - ref)
        assert (err <= bound).all(), f"{t.name} {rows}x{cols} {path}: worst err/bound {np.max(err / bound):.3g}"
        # and the bound is not vacuous: well under the size of the result itself
        assert np.median(bound) < 0.1 * np.median(np.abs(x) @ np.abs(wf).T)
