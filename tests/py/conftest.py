"""Shared pytest behaviour: a test file whose every case skipped exits with status 5, which
ctest (SKIP_RETURN_CODE 5) reports as skipped instead of passed."""

_outcomes = {"passed": 0, "failed": 0, "skipped": 0}


def pytest_runtest_logreport(report):
    if report.when == "call" or report.outcome != "passed":
        _outcomes[report.outcome] = _outcomes.get(report.outcome, 0) + 1


def pytest_sessionfinish(session, exitstatus):
    if exitstatus == 0 and _outcomes["skipped"] and not _outcomes["passed"] and not _outcomes["failed"]:
        session.exitstatus = 5


import os  # noqa: E402
import tempfile  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture
def sock_path():
    """A socket path in a fresh private directory, for tests that start `tpd serve`; skips
    when the binary or the model is missing."""
    import tpd_cli
    from test_server_api import MODEL
    if tpd_cli.tpd_bin() is None:
        pytest.skip("tpd binary not built (set TPD_BIN)")
    if not os.path.exists(MODEL):
        pytest.skip(f"{MODEL} absent (run ./launch/get-model smollm2)")
    d = tempfile.mkdtemp(prefix="tpd_test_")
    return os.path.join(d, "run", "tpd.sock")


@pytest.fixture(scope="module")
def tpd():
    """The tpd binary's path (tests/reference/tpd_cli.py finds it); skips when not built."""
    import tpd_cli
    b = tpd_cli.tpd_bin()
    if b is None:
        pytest.skip("tpd binary not built (set TPD_BIN)")
    return b
