"""/metrics checked by the real tools (issue 28): `promtool check metrics` passes on it after
traffic, a Prometheus server (Debian's `prometheus` package) scrapes a running daemon over
the loopback TCP port, and launch/grafana/tpd-dashboard.json refers only to metric and label
names the daemon exports. Skips the Prometheus parts when the package is not installed."""
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request

import pytest

from test_server_api import ROOT, Server, client

DASHBOARD = os.path.join(ROOT, "launch", "grafana", "tpd-dashboard.json")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A daemon on a socket and a loopback TCP port, after a little traffic; its /metrics."""
    sock = str(tmp_path_factory.mktemp("tpd_met") / "run" / "tpd.sock")
    from test_server_api import tpd_cli
    if tpd_cli.tpd_bin() is None:
        pytest.skip("tpd binary not built (set TPD_BIN)")
    port = free_port()
    srv = Server(sock, extra=["--port", port])
    with client(sock) as c:
        for body in ({"prompt": "Hello", "max_tokens": 3}, {"prompt": "Hello", "max_tokens": 3, "logprobs": 2},
                     {"prompt": "x", "temperature": 9}):
            c.post("/v1/completions", json=body)
        text = c.get("/metrics").text
    yield srv, port, text
    assert srv.stop() == 0


def exported(text):
    """Metric names of the samples (histograms with their _bucket/_sum/_count) and label names."""
    names, labels = set(), set()
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})?\s", line)
        assert m, line
        names.add(m.group(1))
        for kv in re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="', m.group(3) or ""):
            labels.add(kv)
    return names, labels


def test_promtool_check_metrics(served):
    if not shutil.which("promtool"):
        pytest.skip("promtool not installed (Debian package prometheus)")
    _, _, text = served
    p = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr


def test_prometheus_scrapes_the_daemon(served, tmp_path):
    if not shutil.which("prometheus"):
        pytest.skip("prometheus not installed (Debian package prometheus)")
    _, port, _ = served
    web = free_port()
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text("global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: tpd\n    static_configs:\n"
                   f"      - targets: ['127.0.0.1:{port}']\n")
    log = open(tmp_path / "prometheus.log", "w")
    p = subprocess.Popen(["prometheus", f"--config.file={cfg}", f"--storage.tsdb.path={tmp_path / 'data'}",
                          f"--web.listen-address=127.0.0.1:{web}"], stdout=log, stderr=subprocess.STDOUT)
    try:
        def query(q):
            url = f"http://127.0.0.1:{web}/api/v1/query?" + urllib.parse.urlencode({"query": q})
            with urllib.request.urlopen(url, timeout=5) as r:
                return json.load(r)["data"]["result"]
        deadline, up, reqs = time.time() + 60, [], []
        while time.time() < deadline:
            try:
                up = query('up{job="tpd"}')
                reqs = query('tpd_requests_total{job="tpd"}')
                if up and up[0]["value"][1] == "1" and reqs:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        assert up and up[0]["value"][1] == "1", open(tmp_path / "prometheus.log").read()[-3000:]
        assert {r["metric"]["code"] for r in reqs} >= {"200", "400"}
    finally:
        p.terminate()
        p.wait(30)
        log.close()


def test_grafana_dashboard_uses_exported_names(served):
    _, _, text = served
    names, labels = exported(text)
    with open(DASHBOARD) as f:
        dash = json.load(f)
    exprs = [(t["expr"], t.get("legendFormat", "")) for p in dash["panels"] for t in p["targets"]]
    assert len(exprs) >= 10
    used = set()
    for expr, legend in exprs:
        for name in re.findall(r"\btpd_[a-z0-9_]+", expr):
            used.add(name)
            assert name in names, f"{name} (in {expr}) is not exported; exported: {sorted(names)}"
        for group in re.findall(r"\bby \(([^)]*)\)", expr):
            for label in group.split(","):
                assert label.strip() in labels, f"label {label.strip()} in {expr}"
        for label in re.findall(r"\{\{(\w+)\}\}", legend):
            assert label in labels, f"legend label {label} of {expr}"
    # the main families are on the dashboard
    for family in ("tpd_requests_total", "tpd_time_to_first_token_seconds_bucket", "tpd_generation_tokens_total",
                   "tpd_kv_blocks_used", "tpd_queue_depth"):
        assert family in used
