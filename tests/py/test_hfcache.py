"""--model ORG/NAME finds a model in the local Hugging Face cache laid out as huggingface_hub
lays it out (HF_HUB_CACHE, HF_HOME/hub; refs/REV -> snapshots/COMMIT), and an id the cache
does not hold is refused naming where it looked, before anything loads (issue 28). `tpd
config --get model.path` shows what the id resolved to; one `tpd generate` runs from it."""
import os
import subprocess

import pytest

from test_server_api import MODEL, tpd_cli

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def hub(tmp_path):
    if tpd_cli.tpd_bin() is None:
        pytest.skip("tpd binary not built (set TPD_BIN)")
    repo = tmp_path / "hub" / "models--HuggingFaceTB--SmolLM2-135M-Instruct"
    snap = repo / "snapshots" / COMMIT
    snap.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT + "\n")
    os.symlink(os.path.abspath(MODEL), snap / "SmolLM2-135M-Instruct.Q4_1.gguf")  # a GGUF-only repository
    return tmp_path


def tpd(args, env_extra, timeout=120):
    env = tpd_cli.mpirun_env()
    for k in ("HF_HUB_CACHE", "HF_HOME"):
        env.pop(k, None)
    env.update(env_extra)
    return subprocess.run([tpd_cli.tpd_bin()] + [str(a) for a in args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_id_found_by_hf_home_and_hub_cache(hub):
    snap_file = str(hub / "hub" / "models--HuggingFaceTB--SmolLM2-135M-Instruct" / "snapshots" / COMMIT /
                    "SmolLM2-135M-Instruct.Q4_1.gguf")
    for env in ({"HF_HOME": str(hub)}, {"HF_HUB_CACHE": str(hub / "hub")}, {"HOME": str(hub / "home")}):
        if "HOME" in env:  # ~/.cache/huggingface/hub
            os.makedirs(hub / "home" / ".cache" / "huggingface", exist_ok=True)
            if not os.path.exists(hub / "home" / ".cache" / "huggingface" / "hub"):
                os.symlink(hub / "hub", hub / "home" / ".cache" / "huggingface" / "hub")
            snap_file = snap_file.replace(str(hub / "hub"), str(hub / "home" / ".cache" / "huggingface" / "hub"))
        for model in ("HuggingFaceTB/SmolLM2-135M-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct@main",
                      f"HuggingFaceTB/SmolLM2-135M-Instruct@{COMMIT}"):
            p = tpd(["config", "--model", model, "--get", "model.path"], env)
            assert p.returncode == 0, p.stderr
            assert p.stdout.strip() == snap_file, (env, model, p.stdout)


def test_generate_from_an_id(hub):
    """The id gives what the file's own path gives."""
    out = []
    for model in ("HuggingFaceTB/SmolLM2-135M-Instruct", MODEL):
        p = tpd(["generate", "--model", model, "--prompt-ids", "1,2,3", "-n", 4, "--ids", "--temperature", 0,
                 "--threads", 1], {"HF_HOME": str(hub)})
        assert p.returncode == 0, p.stderr
        out.append(p.stdout.strip())
    assert out[0] == out[1] and len(out[0].split(",")) == 4


@pytest.mark.parametrize("model,says", [
    ("HuggingFaceTB/NoSuchModel", "is neither a file nor in the local Hugging Face cache"),
    ("HuggingFaceTB/SmolLM2-135M-Instruct@v9", 'revision "v9" is not in the local Hugging Face cache'),
])
def test_absent_id_refused(hub, model, says):
    p = tpd(["serve", "--model", model, "--socket", hub / "run" / "tpd.sock"], {"HF_HOME": str(hub)}, timeout=30)
    assert p.returncode != 0
    assert says in p.stderr and "models--HuggingFaceTB--" in p.stderr, p.stderr
    assert not os.path.exists(hub / "run" / "tpd.sock")


def test_paths_are_not_ids(hub, tmp_path):
    """A path that exists is used as is; a missing relative path is the loader's error, not an id's."""
    p = tpd(["config", "--model", os.path.relpath(MODEL), "--get", "model.path"], {"HF_HOME": str(hub)})
    assert p.returncode == 0 and p.stdout.strip() == os.path.relpath(MODEL)
    p = tpd(["config", "--model", "no/such/file.gguf", "--get", "model.path"], {"HF_HOME": str(hub)})
    assert p.returncode == 0 and p.stdout.strip() == "no/such/file.gguf"
    # one slash, as an id has, but a model file's name: a path (configs/cpu-demo.toml's form)
    for f in ["models/absent.gguf", "org/absent.safetensors", "org/config.json"]:
        p = tpd(["config", "--model", f, "--get", "model.path"], {"HF_HOME": str(hub)})
        assert p.returncode == 0 and p.stdout.strip() == f, p.stderr
