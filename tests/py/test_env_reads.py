"""No knobs outside the configuration: production sources (everything but tests/, bench/ and
fuzz/) read environment variables only from the short list below, each documented in
docs/configuration.md's "Environment" section. A new tunable is a key in daemon/config.c's
options table, not a getenv. Reads only the sources (no build needed)."""
import os
import re

SRC = os.environ.get("TPD_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
SKIP_DIRS = {"tests", "bench", "fuzz", "models", "launch", "configs", "docs"}
EXTS = (".c", ".h", ".cu", ".cuh", ".cc", ".cpp")

# (source file, variable): why production code may read it
ALLOWED = {
    ("tools/tpctl.c", "TPD_SOCKET"): "the client's default socket path",
    ("comm/gpu_comm.c", "NCCL_HOSTID"): "NCCL's own variable: ranks sharing a GPU look like separate hosts",
    ("model/hfcache.c", "HF_HUB_CACHE"): "Hugging Face's own: where --model ORG/NAME is looked up",
    ("model/hfcache.c", "HF_HOME"): "Hugging Face's own: its hub cache is HF_HOME/hub",
    ("model/hfcache.c", "HOME"): "the hub cache's default place, ~/.cache/huggingface/hub",
}

# a read of the environment: getenv / secure_getenv with its argument, the old util/env.h
# helpers, or environ itself
READ = re.compile(r"\b(?:secure_)?getenv\s*\(\s*([^)]*)\)|\benv_(?:flag|seconds|bytes)\s*\(\s*([^,)]*)|\benviron\b")


def production_sources():
    for top in sorted(os.listdir(SRC)):
        path = os.path.join(SRC, top)
        if top.startswith(".") or top.startswith("build") or top in SKIP_DIRS or not os.path.isdir(path):
            continue
        for d, dirs, files in os.walk(path):
            dirs[:] = sorted(x for x in dirs if not x.startswith("."))
            for f in sorted(files):
                if f.endswith(EXTS):
                    yield os.path.relpath(os.path.join(d, f), SRC)


def env_reads(rel):
    """[(line number, variable or the unparsed argument)] of one file."""
    with open(os.path.join(SRC, rel), errors="replace") as f:
        text = f.read()
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)  # comments out
    text = re.sub(r"//[^\n]*", "", text)
    out = []
    for m in READ.finditer(text):
        arg = (m.group(1) or m.group(2) or "environ").strip()
        lit = re.fullmatch(r'"([A-Za-z0-9_]+)"', arg)
        out.append((text.count("\n", 0, m.start()) + 1, lit.group(1) if lit else arg))
    return out


def test_sources_are_found():
    files = list(production_sources())
    assert "daemon/config.c" in files and "comm/gpu_comm.c" in files and "kernels/backend.c" in files
    assert not any(f.startswith(("tests/", "bench/", "fuzz/")) for f in files)


def test_no_environment_reads_outside_the_allow_list():
    bad, seen = [], set()
    for rel in production_sources():
        for line, var in env_reads(rel):
            if (rel, var) in ALLOWED:
                seen.add((rel, var))
            else:
                bad.append(f"{rel}:{line}: reads {var}")
    assert not bad, ("environment reads in production code (make each a key of daemon/config.c's options "
                     "table, or document it in docs/configuration.md and add it to ALLOWED):\n" + "\n".join(bad))
    assert seen == set(ALLOWED), f"allowed reads no longer in the code (drop them): {sorted(set(ALLOWED) - seen)}"


def test_allowed_variables_are_documented():
    with open(os.path.join(SRC, "docs", "configuration.md")) as f:
        doc = f.read()
    env = doc[doc.index("## Environment"):]
    for _, var in ALLOWED:
        assert f"`{var}`" in env, f"{var} is read by production code but not in docs/configuration.md's Environment"


def test_the_check_sees_a_read():
    """The pattern finds the forms it must (a check that could never fail proves nothing)."""
    import tempfile
    global SRC
    old = SRC
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "kernels"))
        with open(os.path.join(d, "kernels", "x.cu"), "w") as f:
            f.write('/* getenv("NOT_ME") */\nint a = env_flag("TPD_A");\nconst char *b = getenv( "TPD_B" );\n'
                    'const char *c = secure_getenv(name);\n')
        SRC = d
        try:
            assert env_reads("kernels/x.cu") == [(2, "TPD_A"), (3, "TPD_B"), (4, "name")]
        finally:
            SRC = old
