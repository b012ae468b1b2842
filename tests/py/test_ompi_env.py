"""launch/ompi-env and tests/reference/tpd_cli.mpirun_env: on a machine without an executable
ssh or rsh (the lent GPU machine) Open MPI gets an rsh agent (else even a singleton MPI_Init
aborts, "plm_rsh_agent ... FORCE-TERMINATE") and on-node transports; where ssh or rsh is
there (clusters, multi-node jobs) and for variables the user has set, nothing changes.
The machine is simulated with PATH: a folder with or without an executable `ssh`."""
import os
import stat
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))

import tpd_cli  # noqa: E402

KEYS = ("OMPI_MCA_plm_rsh_agent", "OMPI_MCA_pml", "OMPI_MCA_btl", "OMPI_MCA_mtl", "OMPI_MCA_osc",
        "OMPI_MCA_btl_vader_single_copy_mechanism")


def shell_env(path, extra=None):
    """OMPI_MCA_* after sourcing launch/ompi-env and calling tpd_ompi_env with this PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OMPI_MCA_")}
    env.update(extra or {})
    script = f'PATH={path}; . "{ROOT}/launch/ompi-env" && tpd_ompi_env && /usr/bin/env'
    out = subprocess.run(["/bin/bash", "-c", script], env=env, capture_output=True, text=True, check=True).stdout
    return {k: v for k, v in (ln.split("=", 1) for ln in out.splitlines() if "=" in ln) if k.startswith("OMPI_MCA_")}


def python_env(path, extra, monkeypatch):
    for k in list(os.environ):
        if k.startswith("OMPI_MCA_"):
            monkeypatch.delenv(k)
    for k, v in (extra or {}).items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("PATH", path)
    return {k: v for k, v in tpd_cli.mpirun_env().items() if k in KEYS}


def make_bin(tmp_path, name=None, executable=True):
    d = tmp_path / ("with_" + name if name else "empty")
    d.mkdir()
    if name:
        f = d / name
        f.write_text("#!/bin/sh\n")
        f.chmod(stat.S_IRWXU if executable else stat.S_IRUSR)
    return str(d)


def test_lone_machine_gets_an_agent_and_on_node_transports(tmp_path, monkeypatch):
    d = make_bin(tmp_path)
    for got in (shell_env(d), python_env(d, None, monkeypatch)):
        assert os.path.isabs(got["OMPI_MCA_plm_rsh_agent"]) and got["OMPI_MCA_plm_rsh_agent"].endswith("false")
        assert got["OMPI_MCA_pml"] == "ob1"
        assert got["OMPI_MCA_btl"] == "self,vader"
        assert "ucx" in got["OMPI_MCA_osc"] and "ofi" in got["OMPI_MCA_mtl"]


def test_a_non_executable_ssh_counts_as_none(tmp_path, monkeypatch):
    d = make_bin(tmp_path, "ssh", executable=False)
    assert "OMPI_MCA_plm_rsh_agent" in shell_env(d)
    assert "OMPI_MCA_plm_rsh_agent" in python_env(d, None, monkeypatch)


def test_machines_with_ssh_or_rsh_are_left_alone(tmp_path, monkeypatch):
    for name in ("ssh", "rsh"):
        d = make_bin(tmp_path, name)
        assert shell_env(d) == {}
        assert python_env(d, None, monkeypatch) == {}


def test_user_settings_win(tmp_path, monkeypatch):
    d = make_bin(tmp_path)
    mine = {"OMPI_MCA_plm_rsh_agent": "", "OMPI_MCA_btl": "self,tcp"}
    for got in (shell_env(d, mine), python_env(d, mine, monkeypatch)):
        assert got["OMPI_MCA_plm_rsh_agent"] == ""  # set, even empty: kept
        assert got["OMPI_MCA_btl"] == "self,tcp"
        assert got["OMPI_MCA_pml"] == "ob1"  # the others still filled in
