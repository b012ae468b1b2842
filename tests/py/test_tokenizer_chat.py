"""Chat templates rendered by tpd's Jinja engine against transformers' own renderer
(jinja2 sandbox with HF's settings), byte for byte, for every template available: the
templates vendored with llama.cpp in the llama-cpp-python sdist and those inside the GGUF
files; conversations with system/user/assistant turns and tool calls, with and without the
generation prompt. A case the reference refuses (raise_exception, type errors) must be
refused by tpd too. Also checks `tpd tokenize --chat` against apply_chat_template."""
import glob
import json
import os
import subprocess
import sys

import pytest

SRC = os.environ.get("TPD_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("TPD_BIN", "")
sys.path.insert(0, os.path.join(SRC, "tests", "reference"))
import tok_chat_ref  # noqa: E402

TOK = os.path.join(SRC, "models", "tok")
SMOLLM = os.path.join(SRC, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def have_tokenize():
    if not BIN or not os.path.exists(BIN):
        return False
    return subprocess.run([BIN, "tokenize", "--help"], capture_output=True).returncode == 0


pytestmark = pytest.mark.skipif(not have_tokenize(), reason="TPD_BIN has no 'tokenize' command")


@pytest.fixture(scope="session")
def templates(tmp_path_factory):
    p = subprocess.run([sys.executable, os.path.join(SRC, "tests", "reference", "tok_fetch.py"),
                        "--no-gemma", "--no-convert"], capture_output=True, text=True)
    paths = sorted(glob.glob(os.path.join(TOK, "llama.cpp", "templates", "*.jinja")))
    d = tmp_path_factory.mktemp("tpl")
    for g in [SMOLLM] + sorted(glob.glob(os.path.join(TOK, "llama.cpp", "ggml-vocab-*.gguf"))):
        if not os.path.exists(g):
            continue
        tpl = tok_chat_ref.gguf_chat_template(g)
        if tpl is not None:
            out = d / (os.path.basename(g) + ".jinja")
            out.write_text(tpl)
            paths.append(str(out))
    if p.returncode != 0 and not paths:
        pytest.skip("no chat templates available: " + p.stderr[-300:])
    return paths


def test_templates_match_transformers(templates, tmp_path):
    cases = list(tok_chat_ref.cases(templates))
    batch = tmp_path / "batch.jsonl"
    with open(batch, "w") as f:
        for c in cases:
            f.write(json.dumps({"template": c["template"], "context": c["context"]}) + "\n")
    p = subprocess.run([BIN, "tokenize", "--render-batch", str(batch)], capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    got = [json.loads(line) for line in p.stdout.splitlines()]
    assert len(got) == len(cases)
    bad, same, refused = [], 0, 0
    for c, o in zip(cases, got):
        if c["ok"]:
            if o["ok"] and o["text"] == c["text"]:
                same += 1
            else:
                bad.append((c["name"], o.get("error"), (c["text"][:200], o.get("text", "")[:200])))
        else:
            if o["ok"]:
                bad.append((c["name"], "rendered but the reference refused: " + c["error"], None))
            else:
                refused += 1
    n_tpl = len(templates)
    print(f"{n_tpl} templates, {len(cases)} cases: {same} identical, {refused} refused by both")
    assert n_tpl >= 3
    assert not bad, f"{len(bad)} cases differ, first: {bad[:3]}"
    assert same >= len(cases) // 2


def test_engine_constructs(tmp_path):
    """Constructs real templates use, each checked against jinja2 through transformers."""
    tpls = [
        "{% for m in messages %}{{ loop.index }}/{{ loop.length }}{{ '|' if not loop.last }}{% endfor %}",
        "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}",
        "{{ messages[0]['content'][1:4] }}{{ messages[0].content[::-1] }}{{ messages[-1].role }}",
        "{{ '  x  ' | trim }}|{{ 'a,b' .split(',') | join('-') }}|{{ messages | length }}|{{ 'Hi' | upper }}",
        "{% if messages[0].role == 'system' %}S{% elif messages[0].role == 'user' %}U{% else %}?{% endif %}",
        "{{ messages | tojson }}|{{ {'a': [1, 2.5, none, true]} | tojson(indent=2) }}",
        "{%- for m in messages -%}\n  {{- m.role }}\n{% endfor -%}\n",
        "{% macro f(x, y='d') %}[{{ x }}{{ y }}]{% endmacro %}{{ f(1) }}{{ f(2, y='e') }}",
        "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ 2 ** 10 }} {{ 1 / 4 }} {{ 'a' ~ 1 ~ none }}",
        "{{ messages | map(attribute='role') | list }} {{ messages | selectattr('role', 'equalto', 'user') | list | length }}",
        "{{ 'x' if add_generation_prompt else 'y' }}{{ bos_token }}{{ undefined_thing is defined }}",
        "{% for k, v in {'b': 1, 'a': 2} | dictsort %}{{ k }}={{ v }};{% endfor %}{{ range(3) | list }}",
        "{{ 'abc'.startswith('a') }}{{ 'Hello World'.lower().title() }}{{ '%s' | length }}{{ 'a-b'.replace('-', '+') }}",
        "{% for m in messages if m.role != 'system' %}{{ m.role[0] }}{% else %}none{% endfor %}",
        "{{ raise_exception('stop') if messages | length > 100 else 'ok' }}",
        "{% set x %}block {{ 1 + 1 }}{% endset %}{{ x | trim }}|{{ x | indent(2, true) }}",
        "{{ \"'q'\" }}{{ [1, 'two', none] }}{{ {'k': 'v'} }}{{ 3.0 }}{{ 1e20 }}{{ 0.1 + 0.2 }}",
        "{% for i in range(5) %}{% if i == 3 %}{% break %}{% endif %}{% if i == 1 %}{% continue %}{% endif %}{{ i }}{% endfor %}",
        # HF's tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
        "{{ {'k\u00e9': 'caf\u00e9 \x7f \U0001F600 \x01'} | tojson(ensure_ascii=True) }}|{{ 'caf\u00e9 \x7f' | tojson }}"
        "|{{ [1, {'b': 2, 'a': 'x'}] | tojson(true, 2, none, true) }}|{{ messages[0] | tojson(indent=1, sort_keys=true) }}",
    ]
    ctx = {"messages": [{"role": "system", "content": "You are nice."}, {"role": "user", "content": "Hello there"}],
           "add_generation_prompt": True, "bos_token": "<s>", "eos_token": "</s>"}
    batch = tmp_path / "b.jsonl"
    with open(batch, "w") as f:
        for t in tpls:
            f.write(json.dumps({"template": t, "context": ctx}) + "\n")
    p = subprocess.run([BIN, "tokenize", "--render-batch", str(batch)], capture_output=True, text=True)
    got = [json.loads(line) for line in p.stdout.splitlines()]
    for t, o in zip(tpls, got):
        ref = tok_chat_ref.render(t, ctx)
        assert ref["ok"], (t, ref)
        assert o["ok"], (t, o)
        assert o["text"] == ref["text"], t


def test_load_errors_are_clear(tmp_path):
    bad = ["{% for x in y %}no end", "{{ 1 + }}", "{% unknowntag %}", "{{ 'unterminated }}", "{% if %}{% endif %}"]
    batch = tmp_path / "b.jsonl"
    with open(batch, "w") as f:
        for t in bad:
            f.write(json.dumps({"template": t, "context": {}}) + "\n")
    p = subprocess.run([BIN, "tokenize", "--render-batch", str(batch)], capture_output=True, text=True)
    got = [json.loads(line) for line in p.stdout.splitlines()]
    assert len(got) == len(bad)
    for t, o in zip(bad, got):
        assert not o["ok"] and "template line" in o["error"], (t, o)


def test_cli_chat_matches_apply_chat_template(tmp_path):
    hf = os.path.join(TOK, "hf", "smollm2")
    if not os.path.exists(os.path.join(hf, "tokenizer.json")) or not os.path.exists(SMOLLM):
        pytest.skip("converted SmolLM2 tokenizer missing (tok_fetch.py)")
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(hf)
    msgs = [{"role": "user", "content": "Hi there"}, {"role": "assistant", "content": "Hello!"},
            {"role": "user", "content": "What is 17 * 23?"}]
    mpath = tmp_path / "m.json"
    mpath.write_text(json.dumps(msgs))
    ref_text = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    ref_ids = tok(ref_text, add_special_tokens=False)["input_ids"]
    for path in (SMOLLM, hf):
        text = subprocess.run([BIN, "tokenize", "--tokenizer", path, "--chat", str(mpath),
                               "--add-generation-prompt", "--print-prompt"], capture_output=True, text=True)
        assert text.returncode == 0, text.stderr
        assert text.stdout == ref_text
        ids = subprocess.run([BIN, "tokenize", "--tokenizer", path, "--chat", str(mpath),
                              "--add-generation-prompt"], capture_output=True, text=True)
        assert json.loads(ids.stdout) == ref_ids


def test_cli_tokenize_like_llama_tokenize(tmp_path):
    if not os.path.exists(SMOLLM):
        pytest.skip("SmolLM2 GGUF missing")
    import llama_cpp
    m = llama_cpp.Llama(model_path=SMOLLM, vocab_only=True, verbose=False)
    text = "Hello <|im_start|>world 123 😀"
    for flags, add, special in (([], True, True), (["--no-special"], False, True),
                                (["--no-special", "--no-parse-special"], False, False)):
        p = subprocess.run([BIN, "tokenize", "--tokenizer", SMOLLM, "--text", text] + flags,
                           capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        assert json.loads(p.stdout) == m.tokenize(text.encode(), add_bos=add, special=special)
    f = tmp_path / "t.txt"
    f.write_bytes(b"bytes \xff\xfe invalid \xe2\x82")
    p = subprocess.run([BIN, "tokenize", "--tokenizer", SMOLLM, "--file", str(f)], capture_output=True, text=True)
    assert json.loads(p.stdout) == m.tokenize(f.read_bytes(), add_bos=True, special=True)
    p = subprocess.run([BIN, "tokenize", "--tokenizer", str(tmp_path / "nope.json"), "--text", "x"],
                       capture_output=True, text=True)
    assert p.returncode != 0 and "nope.json" in p.stderr
