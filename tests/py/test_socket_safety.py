"""`tpd serve` trusts no directory another user can change (the checks themselves are unit
tested in tests/test_api_http.c; these run the daemon end to end): a socket path directly in
/tmp is refused, every rank exits; SOCKET.pid is never written through a symlink nor over
a file that is not the daemon's, and a pid in that file is never signalled by anything
(launch/tpd-launch finds rank 0 among its own descendants).
"""
import os
import pwd
import signal
import stat
import subprocess
import tempfile
import time

import pytest

from test_server_api import Server, tpd_cli
from test_launch import descendants, kill_tree, launch


@pytest.fixture
def sock(sock_path):
    """sock_path (conftest) with its directory made (0700, ours)."""
    os.makedirs(os.path.dirname(sock_path), mode=0o700)
    return sock_path


@pytest.fixture
def bystander():
    """A process whose pid a forged pid file names: it must outlive everything."""
    p = subprocess.Popen(["sleep", "600"])
    yield p
    p.kill()
    p.wait()


def refused(sock, timeout=120):
    """Starts the daemon on sock; it must exit non-zero. Returns its output."""
    srv = Server(sock, wait=False)
    try:
        rc = srv.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        srv.proc.kill()
        raise AssertionError(f"tpd serve on {sock} still running after {timeout} s:\n{srv.output()[-3000:]}")
    srv.stopped = True
    out = srv.output()
    assert rc != 0, out[-3000:]
    assert not os.path.exists(sock), "the socket was left behind"
    return out


def test_socket_directly_in_tmp_refused(sock_path):
    sock = f"/tmp/tpd_safety_{os.getpid()}.sock"
    out = refused(sock)
    assert "the socket's directory /tmp is writable by everyone" in out, out[-3000:]
    assert "private directory such as /tmp/tpd/" in out, out[-3000:]


def test_pid_symlink_not_followed(sock):
    victim = os.path.join(tempfile.mkdtemp(prefix="tpd_victim_"), "victim")
    with open(victim, "w") as f:
        f.write("precious\n")
    os.symlink(victim, sock + ".pid")
    out = refused(sock)
    assert f"{sock}.pid exists and is not a pid file of ours (a symlink)" in out, out[-3000:]
    assert open(victim).read() == "precious\n"
    assert os.readlink(sock + ".pid") == victim  # left as it was


def test_foreign_pid_file_left_alone(sock, bystander):
    if os.geteuid() != 0:
        pytest.skip("needs root to give the pid file to another user")
    try:
        uid = pwd.getpwnam("tpdtest2").pw_uid
    except KeyError:
        if subprocess.run(["useradd", "-M", "tpdtest2"], capture_output=True).returncode:
            pytest.skip("cannot create the user tpdtest2 (useradd)")
        uid = pwd.getpwnam("tpdtest2").pw_uid
    with open(sock + ".pid", "w") as f:
        f.write(f"{bystander.pid}\n")
    os.chown(sock + ".pid", uid, -1)
    out = refused(sock)
    assert "tpd.sock.pid exists and is not a pid file of ours (owned by another user)" in out, out[-3000:]
    st = os.lstat(sock + ".pid")
    assert st.st_uid == uid and open(sock + ".pid").read() == f"{bystander.pid}\n"
    assert bystander.poll() is None


def rank0_pid(launcher_pid):
    """The tpd process with rank 0 among the launcher's descendants."""
    for p in descendants(launcher_pid):
        try:
            with open(f"/proc/{p}/environ", "rb") as f:
                if b"OMPI_COMM_WORLD_RANK=0\0" in f.read():
                    return p
        except OSError:
            pass
    return None


def test_stale_pid_file_replaced_forged_one_never_signalled(sock, bystander):
    """A stale pid file of ours (a crashed run, naming another process) is replaced by rank
    0's pid, 0600. A file put in its place while the daemon runs names a bystander: stopping
    through tpd-launch signals rank 0 only, and the daemon leaves that file (not its own)."""
    pid_path = sock + ".pid"
    with open(pid_path, "w") as f:
        f.write(f"{bystander.pid}\n")
    env = tpd_cli.mpirun_env()
    env["TPD_BIN"] = tpd_cli.tpd_bin()
    proc, log = launch(os.path.dirname(os.path.dirname(sock)), sock, env)
    try:
        st = os.lstat(pid_path)
        assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == os.geteuid()
        assert int(open(pid_path).read()) == rank0_pid(proc.pid), open(log).read()[-3000:]
        forged = pid_path + ".new"
        with open(forged, "w") as f:
            f.write(f"{bystander.pid}\n")
        os.rename(forged, pid_path)
        proc.send_signal(signal.SIGTERM)  # the launcher alone, as systemd's KillMode=mixed does
        rc = proc.wait(90)
    finally:
        if proc.poll() is None:
            kill_tree(proc.pid)
    out = open(log).read()
    assert rc == 0, out[-3000:]
    time.sleep(0.2)
    assert bystander.poll() is None, "the pid in the forged file was signalled"
    assert open(pid_path).read() == f"{bystander.pid}\n", "a pid file not the daemon's own was removed or rewritten"
    assert not os.path.exists(sock)


def test_own_pid_file_removed_at_exit(sock):
    srv = Server(sock)
    try:
        assert int(open(sock + ".pid").read()) == srv.ranks()[0]
    finally:
        assert srv.stop() == 0
    assert not os.path.exists(sock + ".pid") and not os.path.exists(sock)
