"""Numpy quantizers for the GGML K-quant types the `gguf` package can only dequantize
(Q4_K, Q6_K). Rounding is simple (no search for the best scales); what matters is that
the blocks are valid: the tests use the dequantized values of exactly these bytes, and
make_tiny checks the round trip through gguf.quants.dequantize."""
import numpy as np

QK_K = 256


def _f16(x):
    return np.asarray(x, dtype=np.float16)


def quantize_q4_k(x):
    """x: [rows, cols] float32, cols % 256 == 0 -> uint8 [rows, cols/256*144]."""
    rows, cols = x.shape
    assert cols % QK_K == 0
    b = x.astype(np.float32).reshape(-1, 8, 32)  # blocks of 8 sub-blocks of 32
    lo = np.minimum(b.min(axis=-1), 0.0)
    hi = np.maximum(b.max(axis=-1), 0.0)
    scale = (hi - lo) / 15.0                      # [nb, 8]
    mn = -lo                                      # >= 0
    d = _f16(scale.max(axis=-1) / 63.0)           # [nb]
    dmin = _f16(mn.max(axis=-1) / 63.0)
    df = d.astype(np.float32)[:, None]
    dmf = dmin.astype(np.float32)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(df > 0, np.rint(scale / df), 0).clip(0, 63).astype(np.uint8)
        m = np.where(dmf > 0, np.rint(mn / dmf), 0).clip(0, 63).astype(np.uint8)
        eff_s = (df * sc)[..., None]
        eff_m = (dmf * m)[..., None]
        q = np.where(eff_s > 0, np.rint((b + eff_m) / eff_s), 0).clip(0, 15).astype(np.uint8)
    nb = b.shape[0]
    scales = np.zeros((nb, 12), dtype=np.uint8)
    scales[:, 0:4] = (sc[:, 0:4] & 63) | ((sc[:, 4:8] >> 4) << 6)
    scales[:, 4:8] = (m[:, 0:4] & 63) | ((m[:, 4:8] >> 4) << 6)
    scales[:, 8:12] = (sc[:, 4:8] & 0xF) | ((m[:, 4:8] & 0xF) << 4)
    q = q.reshape(nb, 4, 2, 32)  # 64-element chunks: low nibble first 32, high nibble next 32
    qs = (q[:, :, 0, :] | (q[:, :, 1, :] << 4)).reshape(nb, 128)
    out = np.concatenate([
        d.reshape(nb, 1).view(np.uint8).reshape(nb, 2),
        dmin.reshape(nb, 1).view(np.uint8).reshape(nb, 2),
        scales, qs], axis=1)
    return out.reshape(rows, cols // QK_K * 144)


def quantize_q6_k(x):
    """x: [rows, cols] float32, cols % 256 == 0 -> uint8 [rows, cols/256*210]."""
    rows, cols = x.shape
    assert cols % QK_K == 0
    b = x.astype(np.float32).reshape(-1, 16, 16)  # blocks of 16 sub-blocks of 16
    nb = b.shape[0]
    amax = np.abs(b).max(axis=-1)                 # [nb, 16]
    s = amax / 31.0
    d = _f16(s.max(axis=-1) / 127.0)
    df = d.astype(np.float32)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(df > 0, np.rint(s / df), 0).clip(-128, 127).astype(np.int8)
        eff = (df * sc.astype(np.float32))[..., None]
        q = np.where(eff > 0, np.rint(b / eff), 0).clip(-32, 31).astype(np.int16) + 32
    q = q.astype(np.uint8).reshape(nb, 2, 4, 32)  # [block, half, quarter, l]
    q1, q2, q3, q4 = q[:, :, 0], q[:, :, 1], q[:, :, 2], q[:, :, 3]
    ql = np.concatenate([(q1 & 0xF) | ((q3 & 0xF) << 4), (q2 & 0xF) | ((q4 & 0xF) << 4)], axis=-1)
    qh = (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6)
    out = np.concatenate([
        ql.reshape(nb, 128), qh.reshape(nb, 64), sc.view(np.uint8).reshape(nb, 16),
        d.reshape(nb, 1).view(np.uint8).reshape(nb, 2)], axis=1)
    return out.reshape(rows, cols // QK_K * 210)
