#!/usr/bin/env python3
"""Writes small seed inputs for the fuzz targets: fuzz/make_seeds.py OUTDIR
(OUTDIR/gguf/* from gguf.GGUFWriter, OUTDIR/safetensors/* from safetensors.numpy)."""
import os
import sys

import numpy as np
import gguf
from safetensors.numpy import save_file

out = sys.argv[1]
os.makedirs(f"{out}/gguf", exist_ok=True)
os.makedirs(f"{out}/safetensors", exist_ok=True)
rng = np.random.default_rng(0)
Q = gguf.GGMLQuantizationType
for i, align in enumerate([None, 64]):
    w = gguf.GGUFWriter(f"{out}/gguf/seed{i}.gguf", "llama")
    if align:
        w.add_custom_alignment(align)
    w.add_block_count(1)
    w.add_uint64("k.u64", 5)
    w.add_float32("k.f32", 0.5)
    w.add_bool("k.b", True)
    w.add_token_list(["a", "bc", "<s>"])
    w.add_array("k.ints", [1, 2, 3])
    w.add_tensor("w", rng.standard_normal((2, 4)).astype(np.float32))
    w.add_tensor("h", rng.standard_normal((3,)).astype(np.float16))
    w.add_tensor("q", rng.integers(0, 256, (2, 34), dtype=np.uint8), raw_dtype=Q.Q8_0)
    w.add_tensor("k", rng.integers(0, 256, (1, 144), dtype=np.uint8), raw_dtype=Q.Q4_K)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
save_file({"a": np.ones((2, 3), np.float32), "b": np.zeros(4, np.float16)},
          f"{out}/safetensors/seed0.safetensors", metadata={"format": "pt"})
save_file({"model.norm.weight": np.ones(8, np.float32)}, f"{out}/safetensors/seed1.safetensors")
