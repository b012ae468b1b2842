#!/usr/bin/env python3
"""Reference renderings of chat templates for the differential test: transformers' own
template compiler (jinja2 sandbox, trim_blocks, lstrip_blocks, loopcontrols, its tojson,
raise_exception, {% generation %}) over a fixed set of conversations, with and without
the generation prompt. Usage: tok_chat_ref.py OUT_CASES.jsonl TEMPLATE.jinja...
Writes one JSON line per case: {"name", "template", "context", "ok", "text"|"error"}."""
import json
import sys

CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "You are a helpful assistant."},
     {"role": "user", "content": "What is 2+2?"}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
     {"role": "user", "content": "Tell me a joke."}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "One"},
     {"role": "assistant", "content": "Two"}, {"role": "user", "content": "Three"},
     {"role": "assistant", "content": "Four"}],
    [{"role": "user", "content": "  Spaces, \"quotes\", 'apostrophes', \\backslash\\\n\tand tabs.  "},
     {"role": "assistant", "content": "Unicode: héllo 你好 🙂 <|im_end|> {{ not a tag }}"}],
    [{"role": "system", "content": "System only\nwith two lines"},
     {"role": "user", "content": "Q"}, {"role": "assistant", "content": "A"}],
]


TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather for a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}}]

TOOL_CONVERSATIONS = [
    [{"role": "user", "content": "Weather in Paris?"}],
    [{"role": "system", "content": "You can call tools."},
     {"role": "user", "content": "Weather in Paris?"},
     {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function", "function": {
         "name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]},
     {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "{\"temp\": 21}"},
     {"role": "assistant", "content": "It is 21 degrees in Paris."}],
]


def gguf_chat_template(path):
    """tokenizer.chat_template of a GGUF file, or None: a minimal metadata scan (the gguf
    package parses every array and is slow on 150k-token vocabularies)."""
    import struct
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    with open(path, "rb") as f:
        data = f.read(64 << 20)
    if data[:4] != b"GGUF":
        return None
    pos = 8
    _n_tensors, n_kv = struct.unpack_from("<QQ", data, pos)
    pos += 16

    def rstr(p):
        n = struct.unpack_from("<Q", data, p)[0]
        return data[p + 8:p + 8 + n], p + 8 + n

    for _ in range(n_kv):
        key, pos = rstr(pos)
        t = struct.unpack_from("<I", data, pos)[0]
        pos += 4
        if t == 8:
            val, pos = rstr(pos)
            if key == b"tokenizer.chat_template":
                return val.decode("utf-8")
        elif t == 9:
            et, n = struct.unpack_from("<IQ", data, pos)
            pos += 12
            if et == 8:
                for _ in range(n):
                    pos += 8 + struct.unpack_from("<Q", data, pos)[0]
            else:
                pos += sizes[et] * n
        else:
            pos += sizes[t]
    return None


def render(template, ctx):
    from transformers.utils.chat_template_utils import _compile_jinja_template
    try:
        return {"ok": True, "text": _compile_jinja_template(template).render(**ctx)}
    except Exception as e:  # the template refuses (raise_exception) or jinja2 fails
        return {"ok": False, "error": f"{type(e).__name__}: {e}"}


def cases(paths):
    for path in paths:
        with open(path) as f:
            template = f.read()
        name = path.rsplit("/", 1)[-1]
        convs = [(c, None) for c in CONVERSATIONS] + [(c, TOOLS) for c in TOOL_CONVERSATIONS]
        for ci, (conv, tools) in enumerate(convs):
            for gen in (False, True):
                ctx = {"messages": conv, "tools": tools, "documents": None,
                       "add_generation_prompt": gen, "bos_token": "<s>", "eos_token": "</s>"}
                yield {"name": f"{name}#{ci}{'g' if gen else ''}", "template": template, "context": ctx,
                       **render(template, ctx)}


def main():
    out, paths = sys.argv[1], sys.argv[2:]
    with open(out, "w") as f:
        for c in cases(paths):
            f.write(json.dumps(c, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
