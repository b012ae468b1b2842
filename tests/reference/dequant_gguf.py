#!/usr/bin/env python3
"""Writes a GGUF whose quantized tensors are dequantized (by the `gguf` package, llama.cpp's
own Python reader) to F16 or F32, every other tensor and every metadata key copied as they
are. Used to make a full-precision target for speculative decoding with the quantized
file as its draft model (same weights up to quantization, same tokenizer).

Usage: dequant_gguf.py IN.gguf OUT.gguf [f16|f32|q8_0]   (q8_0: dequantized, then requantized)
From Python: ensure(src, out, typ) writes out unless it is newer than src and this script.
"""
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q


def convert(src, out, typ="f16"):
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    r = gguf.GGUFReader(src)
    arch = str(bytes(r.fields["general.architecture"].parts[-1]), "utf-8")
    w = gguf.GGUFWriter(out + ".tmp", arch)
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        vt = f.types[0]
        if vt == gguf.GGUFValueType.ARRAY:
            sub = f.types[-1]
            if sub == gguf.GGUFValueType.STRING:
                val = [bytes(f.parts[i]) for i in f.data]
            else:
                val = [f.parts[i].tolist()[0] for i in f.data]
            w.add_key_value(name, val, vt, sub_type=sub)
        elif vt == gguf.GGUFValueType.STRING:
            w.add_key_value(name, bytes(f.parts[-1]), vt)
        else:
            w.add_key_value(name, f.parts[-1].tolist()[0], vt)
    want = {"f16": Q.F16, "f32": Q.F32, "q8_0": Q.Q8_0}[typ]
    for t in r.tensors:
        shape = [int(x) for x in reversed(t.shape.tolist())]  # numpy order: outermost first
        if t.tensor_type in (Q.F32, Q.F16) or len(shape) < 2:
            data = np.asarray(t.data)
            w.add_tensor(t.name, data.reshape(shape) if data.ndim == 1 and len(shape) > 1 else data,
                         raw_dtype=t.tensor_type)
            continue
        x = gguf.quants.dequantize(t.data, t.tensor_type).reshape(shape)
        if want == Q.Q8_0:  # requantized by the gguf package (a Q8_0 twin for benchmarks)
            w.add_tensor(t.name, gguf.quants.quantize(x.astype(np.float32), Q.Q8_0), raw_dtype=Q.Q8_0)
            continue
        w.add_tensor(t.name, x.astype(np.float16 if want == Q.F16 else np.float32), raw_dtype=want)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(out + ".tmp", out)


def ensure(src, out, typ="f16"):
    me = os.path.abspath(__file__)
    if not os.path.exists(out) or os.path.getmtime(out) < max(os.path.getmtime(src), os.path.getmtime(me)):
        convert(src, out, typ)
    return out


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    convert(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) == 4 else "f16")
