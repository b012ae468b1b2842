#!/usr/bin/env python3
"""SmolLM2-135M-Instruct as a Hugging Face FP8 checkpoint, from its GGUF: the tensors are
dequantized (gguf package, weights.load_gguf), Q/K unpermuted to HF order, then the
attention and MLP matrices quantized to E4M3 by make_fp8.py's scheme (the other tensors
BF16). For greedy-text checks and CPU tokens/s beside the GGUF; tpd reads the tokenizer
from the GGUF (--tokenizer).

Usage: make_smollm2_fp8.py IN.gguf OUTDIR [fp8_block|ct_channel|ct_tensor]
"""
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import make_fp8  # noqa: E402
import weights as W  # noqa: E402


def convert(src, out, scheme="fp8_block"):
    config, w, _ = W.load_gguf(src)
    config = dict(config)
    config["architectures"] = ["LlamaForCausalLM"]
    config["model_type"] = "llama"
    config["torch_dtype"] = "bfloat16"
    config["quantization_config"] = make_fp8.quant_config(scheme)
    import gguf
    r = gguf.GGUFReader(src)
    for k in ("bos", "eos"):
        v = W._field(r, f"tokenizer.ggml.{k}_token_id")
        if v is not None:
            config[f"{k}_token_id"] = int(v)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    tensors, dtypes = {}, {}
    for n, a in w.items():
        a = np.asarray(a, np.float32)
        if n.split(".")[-2] in make_fp8.FP8_MATRICES:
            codes, s, sdt, suffix = make_fp8.quantize(a, scheme)
            tensors[n], dtypes[n] = codes, "F8_E4M3"
            tensors[n[: -len("weight")] + suffix] = s
            dtypes[n[: -len("weight")] + suffix] = sdt
        else:
            tensors[n], dtypes[n] = a, "BF16"
    W.write_safetensors(os.path.join(out, "model.safetensors"), tensors, dtypes, {"format": "pt"})
    return out


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    print(convert(sys.argv[1], sys.argv[2], *(sys.argv[3:4])))
