"""The include graph follows the layering README.md's "Layout" section lists: a production
source (everything but tests/, bench/, fuzz/) includes headers of its own top-level folder or of
an earlier layer, never of a later one or of one beside it; and no chain of headers includes
itself. Reads only the sources (no build needed)."""
import os
import re
import subprocess

SRC = os.environ.get("TPD_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
FREE = {"tests", "bench", "fuzz"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layers():
    """{folder: layer number} from README.md's numbered list under "## Layout"."""
    with open(os.path.join(SRC, "README.md")) as f:
        text = f.read()
    layout = text.split("## Layout", 1)[1].split("\n## ", 1)[0]
    out = {}
    for n, rest in re.findall(r"^(\d+)\. (.+)$", layout, re.M):
        for folder in re.findall(r"`([a-z_]+)`", rest):
            out[folder] = int(n)
    assert len(out) >= 10, "README.md's layer list not found: %s" % out
    return out


def sources():
    out = subprocess.run(["git", "-C", SRC, "ls-files", "*.c", "*.h", "*.cu", "*.cuh"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert len(out) > 200
    return out


def includes(rel, known):
    """The tracked files rel includes, resolved as the compiler would (its folder, then the root)."""
    with open(os.path.join(SRC, rel), errors="replace") as f:
        text = f.read()
    for name in INCLUDE.findall(text):
        for cand in (os.path.normpath(os.path.join(os.path.dirname(rel), name)),
                     os.path.normpath(name)):
            if cand in known:
                yield cand
                break


def top(rel):
    return rel.split("/")[0] if "/" in rel else "."


def layering_violations(files, order):
    known = set(files)
    bad = []
    for rel in files:
        a = top(rel)
        if a in FREE:
            continue
        if a not in order:
            bad.append("%s: folder %s is not in README.md's layer list" % (rel, a))
            continue
        for tgt in includes(rel, known):
            b = top(tgt)
            if b == a:
                continue
            if b not in order or order[b] >= order[a]:
                bad.append("%s (layer %d) includes %s (layer %s)" % (rel, order[a], tgt,
                                                                   order.get(b, "none")))
    return bad


def cycles(files):
    known = set(files)
    graph = {rel: sorted(set(includes(rel, known))) for rel in files}
    found, state = [], {}

    def visit(node, path):
        state[node] = 1
        for nxt in graph.get(node, ()):
            if state.get(nxt) == 1:
                found.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for rel in files:
        if rel not in state:
            visit(rel, [rel])
    return found


def test_includes_follow_the_layers():
    bad = layering_violations(sources(), layers())
    assert not bad, "\n".join(bad)


def test_no_include_cycles():
    found = cycles(sources())
    assert not found, found


def test_the_checks_catch_violations(tmp_path, monkeypatch):
    """Both checks on a made-up tree: util including sched, and two headers including each other."""
    files = {"util/a.h": '#include "sched/b.h"\n', "sched/b.h": '#include "util/c.h"\n',
             "util/c.h": '#include "d.h"\n', "util/d.h": '#include "c.h"\n'}
    for rel, text in files.items():
        os.makedirs(tmp_path / os.path.dirname(rel), exist_ok=True)
        (tmp_path / rel).write_text(text)
    monkeypatch.setattr(__import__(__name__), "SRC", str(tmp_path))
    bad = layering_violations(sorted(files), {"util": 1, "sched": 5})
    assert bad == ["util/a.h (layer 1) includes sched/b.h (layer 5)"], bad
    found = cycles(sorted(files))
    assert any(set(c) == {"util/c.h", "util/d.h"} for c in found), found


# Sizes (issue 25): outside kernels/ (kernels and their tables), no function over 120 lines and
# no file over 800 lines. A function is counted from its definition line (at
# column 0, ending in "{") to its closing brace at column 0, as clang-format lays them out.
MAX_FUNCTION = 120
MAX_FILE = 800
SIZE_FREE = FREE | {"kernels"}
DEFINITION = re.compile(r"^(?!typedef|struct|enum|union|static const|const)[A-Za-z_].*\)\s*\{$")


def functions(text):
    """[(first line number, length, name)] of the function definitions in a C source."""
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        if DEFINITION.match(lines[i]) and "=" not in lines[i].split("(")[0]:
            j = i + 1
            while j < len(lines) and lines[j] != "}":
                j += 1
            name = re.search(r"(\w+)\s*\(", lines[i])
            out.append((i + 1, j - i + 1, name.group(1) if name else lines[i]))
            i = j
        i += 1
    return out


def test_functions_and_files_stay_small():
    long_functions, long_files = [], []
    for rel in sources():
        if top(rel) in SIZE_FREE or not rel.endswith((".c", ".cu")):
            continue
        with open(os.path.join(SRC, rel), errors="replace") as f:
            text = f.read()
        if text.count("\n") > MAX_FILE:
            long_files.append("%s: %d lines" % (rel, text.count("\n")))
        long_functions += ["%s:%d %s: %d lines" % (rel, n, name, size)
                           for n, size, name in functions(text) if size > MAX_FUNCTION]
    assert not long_functions and not long_files, long_functions + long_files


def test_function_sizes_are_counted():
    text = "static int f(int a) {\n" + "    a++;\n" * 130 + "    return a;\n}\n" \
           "int g(void) { return 1; }\nint h(void) {\n    return 2;\n}\n"
    sizes = {name: size for _, size, name in functions(text)}
    assert sizes == {"f": 133, "h": 3}, sizes
