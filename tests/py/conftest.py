"""Shared pytest behaviour: a test file whose every case skipped exits with status 5, which
ctest (SKIP_RETURN_CODE 5) reports as skipped instead of passed."""

_outcomes = {"passed": 0, "failed": 0, "skipped": 0}


def pytest_runtest_logreport(report):
    if report.when == "call" or report.outcome != "passed":
        _outcomes[report.outcome] = _outcomes.get(report.outcome, 0) + 1


def pytest_sessionfinish(session, exitstatus):
    if exitstatus == 0 and _outcomes["skipped"] and not _outcomes["passed"] and not _outcomes["failed"]:
        session.exitstatus = 5
