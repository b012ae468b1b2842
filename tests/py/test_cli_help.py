"""`tpd --help`, `tpd help [COMMAND]` and `tpd COMMAND --help` print usage generated from the
options table on stdout and exit 0; an unknown command exits 2 with usage on stderr; serve
and generate take the same shared options. Runs the binary directly (a singleton MPI
process) and once under mpirun to see that only rank 0 prints."""
import os
import shutil
import subprocess
import sys

import pytest

SRC = os.environ.get("TPD_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(SRC, "tests", "reference"))
import tpd_cli  # noqa: E402

BIN = tpd_cli.tpd_bin()
pytestmark = pytest.mark.skipif(BIN is None, reason="tpd not built (TPD_BIN)")

COMMANDS = ["serve", "config", "generate", "eval", "tokenize"]


def tpd(*args, timeout=60):
    return subprocess.run([BIN] + [str(a) for a in args], env=tpd_cli.mpirun_env(), capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.parametrize("args", [["--help"], ["-h"], ["help"]])
def test_general_help(args):
    p = tpd(*args)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("usage:")
    for c in COMMANDS:
        assert f"\n  {c} " in p.stdout
    for flag in ["--model", "--comm", "--kv-type", "--prompt-ids", "--seqs", "--no-special", "--get"]:
        assert flag in p.stdout


# flags each command's usage must show (from the table: shared keys under one name)
SHOWN = {
    "generate": ["--model", "--prompt", "--prompt-ids", "--chat", "--system", "-n", "--temperature", "--top-k",
                 "--top-p", "--seed", "--ids", "--ignore-eos", "--kv-type", "--block-size", "--ctx", "--synthetic",
                 "--comm", "--chunk", "--config", "--generate.temperature"],
    "serve": ["--config", "--model", "--socket", "--threads", "--comm", "--kv-type", "--block-size", "--ctx",
              "--synthetic", "--server.socket_mode"],
    "eval": ["--model", "--seqs", "--out", "--chunk", "--separate", "--kv-type", "--comm"],
    "tokenize": ["--tokenizer", "--text", "--file", "--no-special", "--chat", "--batch", "--render-batch"],
    "config": ["--config", "--get", "--comm"],
}


@pytest.mark.parametrize("cmd", COMMANDS)
def test_command_help(cmd):
    for args in ([cmd, "--help"], [cmd, "-h"], ["help", cmd], [cmd, "--model", "m", "--help"]):
        if cmd == "tokenize" and "--model" in args:
            continue
        p = tpd(*args)
        assert p.returncode == 0, (args, p.stderr)
        assert p.stdout.startswith("usage:"), (args, p.stdout[:200])
        assert f"tpd {cmd} " in p.stdout.splitlines()[0]
        for flag in SHOWN[cmd]:
            assert f"{flag} " in p.stdout or f"{flag}," in p.stdout or f"{flag}\n" in p.stdout, (cmd, flag)
    assert "--socket" not in tpd("generate", "--help").stdout


def test_unknown_command():
    for args in (["bogus"], ["help", "bogus"], []):
        p = tpd(*args)
        assert p.returncode == 2, args
        assert p.stdout == ""
        assert "usage:" in p.stderr
    assert "unknown command 'bogus'" in tpd("bogus").stderr


def test_help_is_not_a_value():
    # "--help" as --prompt's text is a prompt: generate then wants a model
    p = tpd("generate", "--prompt", "--help")
    assert p.returncode == 2 and "usage:" not in p.stdout
    assert "--model" in p.stderr


def test_shared_options_agree():
    cfg = os.path.join(SRC, "configs", "cpu-demo.toml")
    p = tpd("config", "--config", cfg, "--comm", "nccl", "--kv-type", "f32", "--ctx", "64", "--get", "parallel.comm")
    assert p.returncode == 0, p.stderr
    assert p.stdout == "nccl\n"
    p = tpd("config", "--config", cfg, "--parallel.comm", "ipc", "--get", "parallel.comm")
    assert p.stdout == "ipc\n"
    p = tpd("serve", "--model", "m", "--comm", "bogus")
    assert p.returncode == 2 and "parallel.comm" in p.stderr
    p = tpd("generate", "--model", "m", "--prompt-ids", "1", "--kv-type", "q4")
    assert p.returncode == 2 and "cache.type" in p.stderr
    p = tpd("generate", "--model", "m", "--socket", "/tmp/x")
    assert p.returncode == 2 and "--socket" in p.stderr
    p = tpd("eval", "--threads", "-1")
    assert p.returncode == 2 and "parallel.threads" in p.stderr


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="no mpirun")
def test_help_under_mpirun_prints_once():
    p = subprocess.run(tpd_cli.mpirun_cmd(2, ["generate", "--help"]), env=tpd_cli.mpirun_env(), capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("usage:") == 1


def test_configuration_doc_lists_every_key():
    """docs/configuration.md describes every key `tpd config` prints, under its section, and
    no key that does not exist: the document stays true to the one options table."""
    import re
    src = os.environ.get("TPD_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
    bin_ = tpd_cli.tpd_bin()
    if bin_ is None:
        pytest.skip("tpd binary not built (set TPD_BIN)")
    r = subprocess.run([bin_, "config", "--model", "x"], capture_output=True, text=True, timeout=60,
                       env=tpd_cli.mpirun_env())
    assert r.returncode == 0, r.stderr
    keys, section = set(), None
    for line in r.stdout.splitlines():
        m = re.fullmatch(r"\[(\w+)\]", line)
        if m:
            section = m.group(1)
        elif "=" in line and not line.startswith("#"):  # comments: the memory plan
            keys.add(f"{section}.{line.split('=')[0].strip()}")
    documented, section = set(), None
    with open(os.path.join(src, "docs", "configuration.md")) as f:
        for line in f:
            m = re.match(r"### `\[(\w+)\]`", line)
            if m:
                section = m.group(1)
            m = re.match(r"\| `(\w+)` \|", line)
            if m and section:
                documented.add(f"{section}.{m.group(1)}")
    assert keys - documented == set(), f"keys missing from docs/configuration.md: {sorted(keys - documented)}"
    assert documented - keys == set(), f"documented keys that do not exist: {sorted(documented - keys)}"


def test_version():
    """`tpd --version` and `tpctl --version` name the version, the commit and the backends."""
    import re
    pat = r"^%s \d+\.\d+\.\d+ \(commit ([0-9a-f]{7,}(-dirty)?|unknown), backends: cpu(, cuda \(archs [0-9,]+\))?\)$"
    p = tpd("--version")
    assert p.returncode == 0 and re.match(pat % "tpd", p.stdout.strip()), (p.stdout, p.stderr)
    tpctl = os.path.join(os.path.dirname(BIN), "tpctl")
    if os.path.exists(tpctl):
        q = subprocess.run([tpctl, "--version"], capture_output=True, text=True, timeout=30)
        assert q.returncode == 0 and re.match(pat % "tpctl", q.stdout.strip()), q.stdout


def test_profile_ops_table_at_exit():
    """`--debug.profile_ops true` (the engine wraps the backend with kernels/profile.h): the
    op table comes to stderr at exit, with the ops a forward runs; without it, no table."""
    model = os.path.join(SRC, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(model):
        pytest.skip("SmolLM2 model absent")
    on = tpd("generate", "--model", model, "--prompt", "Hi", "--debug.profile_ops", "true", timeout=300)
    off = tpd("generate", "--model", model, "--prompt", "Hi", timeout=300)
    assert on.returncode == 0 and off.returncode == 0, on.stderr[-2000:] + off.stderr[-2000:]
    rows = [l for l in on.stderr.splitlines() if "calls" in l and "ms/step" in l]
    assert any(l.split()[0] == "rmsnorm" for l in rows) and len(rows) >= 5, on.stderr[-2000:]
    assert not any("ms/step" in l for l in off.stderr.splitlines()), off.stderr[-2000:]
