"""The layout of every C and CUDA source is the one .clang-format describes (CONTRIBUTING.md
"Style"): `clang-format --dry-run -Werror` over the tracked sources must print nothing. The
check is tied to the clang-format launch/setup installs (Debian's clang-format 14); another
major version lays some constructs out differently, so there the case is skipped and says so.
Reformat with `clang-format -i $(git ls-files '*.c' '*.h' '*.cu' '*.cuh')`.
Reads only the sources (no build needed)."""
import os
import re
import shutil
import subprocess

import pytest

SRC = os.environ.get("TPD_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
MAJOR = 14


def sources():
    out = subprocess.run(["git", "-C", SRC, "ls-files", "*.c", "*.h", "*.cu", "*.cuh"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert len(out) > 200, "git ls-files found too few sources: %d" % len(out)
    return out


def clang_format():
    exe = shutil.which("clang-format")
    if exe is None:
        pytest.fail("clang-format is missing: launch/setup installs it (Debian package clang-format)")
    ver = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
    m = re.search(r"version (\d+)\.", ver)
    if not m or int(m.group(1)) != MAJOR:
        pytest.skip("clang-format %s is not version %d, which .clang-format was checked with"
                    % (ver.strip(), MAJOR))
    return exe


def test_sources_follow_clang_format():
    exe = clang_format()
    files = sources()
    bad = []
    for i in range(0, len(files), 64):
        r = subprocess.run([exe, "--dry-run", "-Werror", *files[i:i + 64]], cwd=SRC,
                           capture_output=True, text=True)
        bad += sorted({line.split(":")[0] for line in r.stderr.splitlines()
                       if "error:" in line or "warning:" in line})
        assert r.returncode == 0 or bad, r.stderr[-2000:]
    assert not bad, "not in .clang-format's layout (run clang-format -i on them): %s" % bad


def test_the_check_catches_a_misformatted_file(tmp_path):
    """The check itself: a file laid out against the configuration is reported."""
    exe = clang_format()
    with open(os.path.join(SRC, ".clang-format")) as f:
        (tmp_path / ".clang-format").write_text(f.read())
    (tmp_path / "good.c").write_text("int f(int a) { return a + 1; }\n")
    (tmp_path / "bad.c").write_text("int  f( int a ){\n  return a+1 ;}\n")
    for name, ok in (("good.c", True), ("bad.c", False)):
        r = subprocess.run([exe, "--dry-run", "-Werror", name], cwd=tmp_path,
                           capture_output=True, text=True)
        assert (r.returncode == 0) == ok, (name, r.stderr)


def test_lines_fit_100_columns():
    """Code lines fit in 100 columns; a trailing comment may run over (clang-format leaves them)."""
    long_code = []
    for rel in sources():
        with open(os.path.join(SRC, rel), errors="replace") as f:
            for n, line in enumerate(f, 1):
                line = line.rstrip("\n")
                if len(line) > 100 and not re.match(r"^\s*(\*|/\*|//)", line) and \
                        "/*" not in line[:101] and "//" not in line[:101]:
                    long_code.append("%s:%d" % (rel, n))
    assert not long_code, long_code
