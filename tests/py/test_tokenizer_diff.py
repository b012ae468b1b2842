"""Differential tests of tpd's tokenizer against HF tokenizers (tokenizer.json loader) and
llama.cpp through llama-cpp-python vocab_only (GGUF loader), on the 10,000-string corpus of
tests/reference/tok_corpus.py: ids identical for every string, decode equal to HF's decode,
decode(encode(x)) == x wherever the reference round-trips, and the streaming detokenizer's
concatenated output equal to the full decode. Large inputs are fetched by
tests/reference/tok_fetch.py into models/tok/ (git-ignored); without network the cases
that need them are skipped."""
import concurrent.futures
import copy
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile

import pytest

SRC = os.environ.get("TPD_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("TPD_BIN", "")
sys.path.insert(0, os.path.join(SRC, "tests", "reference"))
import tok_corpus  # noqa: E402
import tok_ref  # noqa: E402

TOK = os.path.join(SRC, "models", "tok")
SMOLLM = os.path.join(SRC, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
N_CORPUS = int(os.environ.get("TPD_TOK_CORPUS", "10000"))


def have_tokenize():
    if not BIN or not os.path.exists(BIN):
        return False
    p = subprocess.run([BIN, "tokenize", "--help"], capture_output=True)
    return p.returncode == 0


pytestmark = pytest.mark.skipif(not have_tokenize(), reason="TPD_BIN has no 'tokenize' command")


@pytest.fixture(scope="session")
def fetched():
    """Runs the fetch script once; skips when the inputs cannot be had (no network)."""
    if not os.path.exists(SMOLLM):
        subprocess.run([os.path.join(SRC, "launch", "get-model"), "smollm2"], capture_output=True)
    p = subprocess.run([sys.executable, os.path.join(SRC, "tests", "reference", "tok_fetch.py")],
                       capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip("tokenizer inputs not available: " + p.stderr[-500:])
    return TOK


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("tok") / "corpus.hex")
    strings = tok_corpus.make(N_CORPUS, 1234)
    with open(path, "w") as f:
        for b in strings:
            f.write(b.hex() + "\n")
    return path, strings


def test_corpus_covers_the_issue(corpus):
    _, strings = corpus
    assert len(strings) >= 10000 or N_CORPUS < 10000
    joined = b"\n".join(strings)
    for needle in ["你好", "Привет", "مرحبا", "नमस्ते", "👨‍👩‍👧‍👦", "don't", "<|im_start|>", "\t", "    ",
                   "12345678901234567890", "def f(x)"]:
        assert needle.encode() in joined, needle
    invalid = sum(1 for b in strings if not _valid_utf8(b))
    assert invalid >= 500


def _valid_utf8(b):
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def ours_start(path, corpus_path, flags):
    """tpd's tokenizer on the corpus, started to run beside the reference (its output to
    files: a pipe would stop it once full)."""
    out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
    cmd = [BIN, "tokenize", "--tokenizer", path, "--batch", corpus_path] + flags
    return subprocess.Popen(cmd, stdout=out, stderr=err, text=True), out, err


def ours_finish(run):
    p, out, err = run
    p.wait(timeout=1200)
    out.seek(0)
    err.seek(0)
    assert p.returncode == 0, err.read()[-2000:]
    return [json.loads(line) for line in out.read().splitlines()]


def reference(kind, path, strings, add, parse):
    """The reference's answers. llama.cpp's goes through Python one string at a time and is
    most of this test's time: the corpus is split over the CPUs (forked workers, each its own
    vocab-only model), in corpus order."""
    if kind == "hf":
        return tok_ref.hf_reference(path, strings, add, parse)
    n = max(1, min(os.cpu_count() or 1, 4))
    step = -(-len(strings) // n)
    parts = [strings[i:i + step] for i in range(0, len(strings), step)]
    ctx = multiprocessing.get_context("fork")
    with concurrent.futures.ProcessPoolExecutor(max_workers=len(parts) - 1 or 1, mp_context=ctx) as ex:
        futs = [ex.submit(tok_ref.llama_reference, path, part, add, parse) for part in parts[1:]]
        out = tok_ref.llama_reference(path, parts[0], add, parse)
        for f in futs:
            out += f.result()
    return out


def compare(kind, path, corpus, flags):
    corpus_path, strings = corpus
    add, parse = "--no-special" not in flags, "--no-parse-special" not in flags
    run = ours_start(path, corpus_path, flags)
    ref = reference(kind, path, strings, add, parse)
    got = ours_finish(run)
    assert len(got) == len(strings)
    mism, stream_bad, dec_bad, rt_bad, n_rt, skipped = [], 0, 0, 0, 0, 0
    for i, (b, r, o) in enumerate(zip(strings, ref, got)):
        dec, stream = bytes.fromhex(o["dec"]), bytes.fromhex(o["stream"])
        stream_bad += stream != dec
        if r is None:  # the reference itself cannot take this string (see tok_ref.llama_crashes)
            skipped += 1
            continue
        if r["ids"] != o["ids"]:
            mism.append((i, b[:60], r["ids"][:20], o["ids"][:20]))
        if kind == "hf" and r["dec"] != dec:
            dec_bad += 1
        if r["roundtrip"]:
            n_rt += 1
            rt_bad += dec != b.decode("utf-8", errors="replace").encode()
    identical = len(strings) - skipped - len(mism)
    print(f"{os.path.basename(path)} {flags}: {identical}/{len(strings) - skipped} identical "
          f"({skipped} skipped), round-trips {n_rt - rt_bad}/{n_rt}")
    assert not mism, f"{len(mism)} strings differ, first: {mism[:3]}"
    assert dec_bad == 0
    assert rt_bad == 0
    assert stream_bad == 0
    assert skipped <= len(strings) // 20


HF_NAMES = ["smollm2", "gpt-2", "llama-bpe", "qwen2", "llama-spm", "gemma3"]
FLAGS = [[], ["--no-special", "--no-parse-special"]]


@pytest.mark.parametrize("flags", FLAGS, ids=["special", "plain"])
@pytest.mark.parametrize("name", HF_NAMES)
def test_hf_tokenizer_json(fetched, corpus, name, flags):
    path = os.path.join(fetched, "hf", name, "tokenizer.json")
    if not os.path.exists(path):
        pytest.skip(f"{name}: no converted tokenizer.json")
    compare("hf", path, corpus, flags)


def _variant(fetched, tmp_path, base, edit):
    with open(os.path.join(fetched, "hf", base, "tokenizer.json")) as f:
        j = json.load(f)
    edit(j)
    path = str(tmp_path / "tokenizer.json")
    with open(path, "w") as f:
        json.dump(j, f, ensure_ascii=False)
    return path


def _smollm2_original(j):
    # SmolLM2's own tokenizer.json splits digits before the byte-level regex
    j["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]}


def _gpt2_nfkc(j):
    j["normalizer"] = {"type": "NFKC"}


def _gpt2_nfc_prefix(j):
    j["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "NFC"}]}
    j["pre_tokenizer"]["add_prefix_space"] = True


def _llama2_legacy(j):
    # the Llama 2 tokenizer.json of transformers' legacy converter: Prepend + Replace
    j["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "\u2581"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}
    j["pre_tokenizer"] = None


def _qwen2_nfd_contiguous(j):
    j["normalizer"] = {"type": "NFD"}
    j["pre_tokenizer"]["pretokenizers"].insert(0, {"type": "Digits", "individual_digits": False})


VARIANTS = {"smollm2-digits": ("smollm2", _smollm2_original), "gpt2-nfkc": ("gpt-2", _gpt2_nfkc),
            "gpt2-nfc-prefix": ("gpt-2", _gpt2_nfc_prefix), "llama2-legacy": ("llama-spm", _llama2_legacy),
            "qwen2-nfd-digits": ("qwen2", _qwen2_nfd_contiguous)}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_hf_pipeline_variants(fetched, corpus, tmp_path, variant):
    """Normalizers (NFC/NFD/NFKC, Prepend, Replace) and pre-tokenizers (Digits, ByteLevel
    prefix) that the converted files do not use, checked on edited copies."""
    base, edit = VARIANTS[variant]
    if not os.path.exists(os.path.join(fetched, "hf", base, "tokenizer.json")):
        pytest.skip("base tokenizer missing")
    compare("hf", _variant(fetched, tmp_path, base, edit), corpus, [])


GGUFS = ["SmolLM2", "gpt-2", "llama-bpe", "qwen2", "qwen35", "llama-spm", "phi-3", "baichuan",
         "starcoder", "refact", "command-r", "mpt", "gpt-neox", "aquila", "deepseek-coder", "gemma3"]


def gguf_path(fetched, name):
    if name == "SmolLM2":
        return SMOLLM
    if name == "gemma3":
        return os.path.join(fetched, "gemma-3-270m-q4_k_m.gguf")
    return os.path.join(fetched, "llama.cpp", f"ggml-vocab-{name}.gguf")


@pytest.mark.parametrize("flags", FLAGS, ids=["special", "plain"])
@pytest.mark.parametrize("name", GGUFS)
def test_gguf_vs_llama_cpp(fetched, corpus, name, flags):
    path = gguf_path(fetched, name)
    if not os.path.exists(path):
        pytest.skip(f"{path} missing")
    compare("llama", path, corpus, flags)
