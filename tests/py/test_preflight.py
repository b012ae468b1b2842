"""`tpd serve` checks what needs no weights before it reads any (issue 28, item 1): a bad
socket directory, a missing shard, a missing tokenizer and a memory plan that cannot fit end
the job within a
second of a run that fails on its options, naming the problem, with a model of a few GB
(a sparse file: its bytes cost nothing until read) that the old order read in full first.
"""
import json
import os
import re
import struct
import subprocess
import tempfile
import time

import pytest

from test_server_api import MODEL, tpd_cli
from hf_layout import hf_shapes

# a llama of about 2.1 GB in F16: reading it takes each rank seconds
GEOM = {"architectures": ["LlamaForCausalLM"], "hidden_size": 2048, "num_hidden_layers": 16,
        "num_attention_heads": 16, "num_key_value_heads": 4, "intermediate_size": 8192,
        "vocab_size": 32000, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0, "tie_word_embeddings": True, "bos_token_id": 1, "eos_token_id": 2}


def write_sparse_safetensors(path, shapes):
    """F16 tensors whose data is a hole in the file; returns the file's size."""
    hdr, off = {}, 0
    for name, shape in shapes.items():
        n = 2
        for s in shape:
            n *= s
        hdr[name] = {"dtype": "F16", "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        f.truncate(8 + len(h) + off)
    return 8 + len(h) + off


@pytest.fixture(scope="module")
def big_model(tmp_path_factory):
    if tpd_cli.tpd_bin() is None:
        pytest.skip("tpd binary not built (set TPD_BIN)")
    d = str(tmp_path_factory.mktemp("tpd_big"))  # pytest keeps only its last few runs
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(GEOM, f)
    size = write_sparse_safetensors(os.path.join(d, "model.safetensors"), hf_shapes(GEOM))
    assert size > 2e9
    return d


def run_serve(model, sock, extra=(), timeout=120, tries=3):
    """Runs `mpirun -np 2 tpd serve`, which must fail; (the shortest of its tries' seconds:
    the machine may be busy with other work, output)."""
    args = ["serve", "--model", model, "--socket", sock, "--threads", 1, *extra]
    best = None
    for _ in range(tries):
        t0 = time.monotonic()
        p = subprocess.run(tpd_cli.mpirun_cmd(2, args), env=tpd_cli.mpirun_env(), capture_output=True,
                           text=True, timeout=timeout)
        dt = time.monotonic() - t0
        out = p.stdout + p.stderr
        assert p.returncode != 0, out[-3000:]
        best = dt if best is None else min(best, dt)
    return best, out


@pytest.fixture(scope="module")
def baseline(big_model):
    """How long the job takes to start and fail on its options alone (mpirun, MPI_Init)."""
    d = tempfile.mkdtemp(prefix="tpd_pre_")
    dt, out = run_serve(big_model, os.path.join(d, "run", "tpd.sock"), ["--no-such-option", 1])
    assert "no-such-option" in out, out[-3000:]
    return dt


def test_bad_socket_dir_before_weights(big_model, baseline):
    d = tempfile.mkdtemp(prefix="tpd_pre_")
    bad = os.path.join(d, "open")
    os.mkdir(bad)
    os.chmod(bad, 0o777)
    dt, out = run_serve(big_model, os.path.join(bad, "tpd.sock"))
    assert f"the socket's directory {bad} is writable by everyone" in out, out[-3000:]
    assert dt - baseline < 1.0, f"{dt:.2f} s against {baseline:.2f} s for a bad option:\n{out[-3000:]}"
    assert not os.path.exists(os.path.join(bad, "tpd.sock"))


def test_missing_shard_before_weights(big_model, baseline):
    d = tempfile.mkdtemp(prefix="tpd_shards_")
    os.symlink(os.path.join(big_model, "config.json"), os.path.join(d, "config.json"))
    os.symlink(os.path.join(big_model, "model.safetensors"), os.path.join(d, "model-00001-of-00002.safetensors"))
    wm = {k: "model-00001-of-00002.safetensors" for k in hf_shapes(GEOM)}
    wm["model.norm.weight"] = "model-00002-of-00002.safetensors"
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": wm}, f)
    dt, out = run_serve(d, os.path.join(tempfile.mkdtemp(prefix="tpd_pre_"), "run", "tpd.sock"))
    assert "model-00002-of-00002.safetensors" in out, out[-3000:]
    assert dt - baseline < 1.0, f"{dt:.2f} s against {baseline:.2f} s for a bad option:\n{out[-3000:]}"


def test_missing_tokenizer_before_weights(big_model, baseline):
    """The sparse model has no tokenizer.json: rank 0 finds out before reading a weight."""
    dt, out = run_serve(big_model, os.path.join(tempfile.mkdtemp(prefix="tpd_pre_"), "run", "tpd.sock"))
    assert "tpd serve: rank 0: tokenizer: " in out and "tokenizer.json" in out, out[-3000:]
    assert dt - baseline < 1.0, f"{dt:.2f} s against {baseline:.2f} s for a bad option:\n{out[-3000:]}"


def test_memory_plan_that_cannot_fit(big_model, baseline):
    dt, out = run_serve(big_model, os.path.join(tempfile.mkdtemp(prefix="tpd_pre_"), "run", "tpd.sock"),
                        ["--kv-tokens", 1 << 28])
    assert "memory plan: the 2 rank(s) on this node need at least" in out, out[-3000:]
    assert "cache.kv_tokens" in out, out[-3000:]
    assert dt - baseline < 1.0, f"{dt:.2f} s against {baseline:.2f} s for a bad option:\n{out[-3000:]}"


def test_context_too_long_before_weights(big_model, baseline):
    dt, out = run_serve(big_model, os.path.join(tempfile.mkdtemp(prefix="tpd_pre_"), "run", "tpd.sock"),
                        ["--ctx", 8192])
    assert "context 8192 is longer than the model's trained context 4096" in out, out[-3000:]
    assert "loading weights" not in out
    assert dt - baseline < 1.0, f"{dt:.2f} s against {baseline:.2f} s for a bad option:\n{out[-3000:]}"


def test_unservable_split_before_weights(big_model, baseline, tmp_path):
    """One query head cannot be split over 2 ranks: the shard plan, made from the tensor
    directory alone, refuses it on every rank before a weight is read."""
    geom = dict(GEOM, num_attention_heads=1, num_key_value_heads=1, head_dim=128)
    d = str(tmp_path)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(geom, f)
    write_sparse_safetensors(os.path.join(d, "model.safetensors"), hf_shapes(geom))
    dt, out = run_serve(d, os.path.join(tempfile.mkdtemp(prefix="tpd_pre_"), "run", "tpd.sock"))
    assert "tensor-parallel size 2 cannot serve this model: it has 1 query heads" in out, out[-3000:]
    assert "loading weights" not in out
    assert dt - baseline < 1.0, f"{dt:.2f} s against {baseline:.2f} s for a bad option:\n{out[-3000:]}"


def test_start_banner_and_whole_config(sock_path):
    """A good start-up passes the checks (the pid file's check does not stop its writing);
    the effective configuration, over 4 KB here, is logged whole (a 1 KB line limit cut it
    mid-word), and the banner says what runs and where."""
    from test_server_api import Server, client
    long_args = "--x=" + "y" * 4500
    srv = Server(sock_path, extra=["--launch.mpirun_args", long_args])
    try:
        with client(sock_path) as c:
            assert c.get("/health").status_code == 200
        assert os.path.exists(sock_path + ".pid")
        out = srv.output()
    finally:
        assert srv.stop() == 0
    cfg = out[out.index("effective configuration:"):]
    cfg = cfg[:cfg.index("(cmd_serve.c:")]
    assert f'mpirun_args = "{long_args}"' in cfg, cfg[-500:]
    assert "all_ranks = false" in cfg and len(cfg) > 4500, cfg[-500:]
    # the job's loading progress (its last line at least), each rank's end and each rank's load
    assert re.search(r"loading weights: [0-9.]+ of [0-9.]+ GiB \(100%; (\d+) of \1 bytes\) "
                     r"on 2 ranks, 2 done", out)
    assert re.search(r"loading weights: rank 1 finished: [0-9.]+ GiB \(\d+ bytes\) in", out)
    assert re.search(r"weights loaded: rank 0 [0-9.]+ GiB \(\d+ bytes\) in [0-9.]+ s \([0-9.]+ GB/s\); "
                     r"rank 1 [0-9.]+ GiB", out)
    banner = [l for l in out.splitlines() if " serving smollm2: " in l]
    assert len(banner) == 1, out[-3000:]
    b = banner[0]
    for field in ("tpd 0.1.0 (commit ", "backends: cpu", "tp 2 x pp 1", "backend cpu", "all-reduce ",
                  "weights ", "KV cache ", " tokens), context 1024", f"socket {sock_path} (mode 0600)",
                  "tcp off", f"pid file {sock_path}.pid"):
        assert field in b, (field, b)
