#!/usr/bin/env python3
"""Reference tokenizations for the differential tests.
  hf:    HF tokenizers on a tokenizer.json; bytes become str with errors='replace' (the
         only way to hand HF bytes), special tokens in the text parsed unless no_parse
         (then encode_special_tokens=True).
  llama: llama.cpp's tokenizer through llama-cpp-python (vocab_only) on a GGUF, fed bytes.
Each returns, per corpus string: ids, and whether the reference round-trips it."""
import os


def read_corpus(path):
    with open(path) as f:
        return [bytes.fromhex(line.strip()) for line in f]


def hf_reference(tokenizer_json, corpus, add_special=True, parse_special=True):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(tokenizer_json)
    tok.encode_special_tokens = not parse_special
    out = []
    texts = [b.decode("utf-8", errors="replace") for b in corpus]
    encs = tok.encode_batch_fast(texts, add_special_tokens=add_special) if hasattr(tok, "encode_batch_fast") \
        else tok.encode_batch(texts, add_special_tokens=add_special)
    for text, enc in zip(texts, encs):
        ids = enc.ids
        dec = tok.decode(ids, skip_special_tokens=False)
        out.append({"ids": ids, "dec": dec.encode(), "roundtrip": dec == text})
    return out


_llama_cache = {}


def llama_model(gguf):
    if gguf not in _llama_cache:
        import llama_cpp
        _llama_cache[gguf] = llama_cpp.Llama(model_path=gguf, vocab_only=True, verbose=False)
    return _llama_cache[gguf]


def llama_crashes(b):
    """llama.cpp's lax UTF-8 decoder turns F4 90.. / F5-F7 sequences into codepoints above
    U+10FFFF, and re-encoding them throws an uncaught C++ exception (abort). Such strings
    cannot be given to the reference; the tests skip them (and count them)."""
    i, n = 0, len(b)
    while i < n:
        c = b[i]
        if c < 0x80 or (c & 0x40) == 0:
            i += 1
            continue
        ln = 2 if not c & 0x20 else 3 if not c & 0x10 else 4 if not c & 0x08 else 0
        if ln == 0 or i + ln > n or any((b[i + k] & 0xC0) != 0x80 for k in range(1, ln)):
            i += 1
            continue
        if ln == 4 and (((c & 7) << 18) | ((b[i + 1] & 0x3F) << 12)) > 0x10FFFF:
            return True
        i += ln
    return False


def llama_detokenize(m, ids):
    """llama_detokenize with a buffer large enough (Llama.detokenize cuts pieces at 32 bytes)."""
    import ctypes
    import llama_cpp
    arr = (llama_cpp.llama_token * max(1, len(ids)))(*ids)
    cap = 64 + 256 * len(ids)
    buf = ctypes.create_string_buffer(cap)
    n = llama_cpp.llama_detokenize(m._model.vocab, arr, len(ids), buf, cap, False, True)
    assert 0 <= n <= cap, n
    return buf.raw[:n]


def llama_reference(gguf, corpus, add_special=True, parse_special=True):
    m = llama_model(gguf)
    byte_level = m.metadata.get("tokenizer.ggml.model") == "gpt2"
    out = []
    for b in corpus:
        if byte_level and llama_crashes(b):
            out.append(None)
            continue
        ids = m.tokenize(b, add_bos=add_special, special=parse_special)
        dec = llama_detokenize(m, ids)
        out.append({"ids": ids, "dec": dec, "roundtrip": dec == b})
    return out


if __name__ == "__main__":
    import sys
    kind, path, corpus = sys.argv[1:4]
    c = read_corpus(corpus)
    r = (hf_reference if kind == "hf" else llama_reference)(path, c)
    for x in r[:5]:
        print(x)
    print(os.path.basename(path), len(r))
