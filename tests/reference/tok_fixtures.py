#!/usr/bin/env python3
"""Derives the small committed fixtures in tests/data/tok/ used by tests/test_tokenizer.c:
two tiny BPE tokenizers trained with HF tokenizers on generated text (byte-level like
GPT-2/SmolLM2, and SentencePiece-style with byte fallback like Llama 2/Gemma), the ids HF
gives for a set of strings, and chat-template renderings by transformers' jinja2 setup.
Usage: tok_fixtures.py [OUT_DIR]   (default tests/data/tok)"""
import json
import os
import sys

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

sys.path.insert(0, os.path.dirname(__file__))
import tok_chat_ref  # noqa: E402
import tok_corpus  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def training_text():
    return [b.decode("utf-8", errors="replace") for b in tok_corpus.make(3000, 99)]


def byte_level():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=600, special_tokens=SPECIALS,
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(training_text(), tr)
    tok.add_tokens([AddedToken("<think>", normalized=False, special=False)])
    return tok


def sentencepiece_style():
    tok = Tokenizer(models.BPE(byte_fallback=True, fuse_unk=True, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=False)
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    specials = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
    tr = trainers.BpeTrainer(vocab_size=700, special_tokens=specials, show_progress=False)
    tok.train_from_iterator(training_text(), tr)
    # byte tokens are ordinary vocabulary entries in SentencePiece vocabularies
    j = json.loads(tok.to_str())
    j["added_tokens"] = [a for a in j["added_tokens"] if not a["content"].startswith("<0x")]
    tok = Tokenizer.from_str(json.dumps(j))
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", 1)])
    return tok


TEXTS = ["Hello world", " Hello  world ", "", "it's 2024!", "你好，世界", "Привет мир", "😀👍🏽",
         "<|im_start|>user\nhi<|im_end|>", "<s>x</s>", "tabs\tand\nnewlines\r\n", "a" * 50,
         "x <think> y", "   ", "\u00e9\u0301 combining", "mixed 123 and 4567890"]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tests", "data", "tok")
    os.makedirs(out, exist_ok=True)
    expected = {}
    for name, tok in (("bytelevel", byte_level()), ("spm", sentencepiece_style())):
        path = os.path.join(out, f"{name}.json")
        tok.save(path)
        tok = Tokenizer.from_file(path)
        cases = []
        for t in TEXTS:
            special = tok.encode(t).ids
            tok.encode_special_tokens = True
            plain = tok.encode(t, add_special_tokens=False).ids
            tok.encode_special_tokens = False
            cases.append({"text": t, "ids": special, "ids_plain": plain,
                          "decoded": tok.decode(special, skip_special_tokens=False)})
        expected[name] = cases
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(expected, f, ensure_ascii=False, indent=1)
    tpl_cases = []
    smol = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
            "{{ '<|im_start|>system\\nYou are a helpful AI assistant<|im_end|>\\n' }}{% endif %}"
            "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
            "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
    for i, c in enumerate(tok_chat_ref.CONVERSATIONS[:3]):
        for gen in (False, True):
            ctx = {"messages": c, "add_generation_prompt": gen, "bos_token": "<s>", "eos_token": "</s>"}
            r = tok_chat_ref.render(smol, ctx)
            tpl_cases.append({"template": smol, "context": ctx, "text": r["text"]})
    with open(os.path.join(out, "templates.json"), "w") as f:
        json.dump(tpl_cases, f, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()
