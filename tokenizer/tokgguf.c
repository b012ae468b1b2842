#include "tokgguf.h"

#include <stdlib.h>
#include <string.h>

#include "../model/gguf.h"
#include "../util/err.h"
#include "../util/fatal.h"
#include "tokbuild.h"

/* llama.cpp's pre-tokenizer regex lists, by tokenizer.ggml.pre name. Each list is applied
 * in order, every regex splitting the pieces the previous one left (Isolated). */
#define R_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define R_CONTRACT "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
#define R_LLAMA3 \
    R_CONTRACT "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| " \
               "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define R_QWEN2 \
    R_CONTRACT "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| " \
               "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define R_QWEN35 \
    R_CONTRACT "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| " \
               "?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

struct pre_entry {
    const char *names; /* '|'-separated tokenizer.ggml.pre values */
    const char *regex[5];
    int ignore_merges;
    int add_bos;
};

static const struct pre_entry pre_table[] = {
    {"llama3|llama-v3|llama-bpe|falcon3|falcon-h1|pixtral|midm-2.0|lfm2", {R_LLAMA3}, 1, 1},
    {"dbrx|smaug-bpe", {R_LLAMA3}, 0, 0},
    {"starcoder|refact|command-r|smollm|codeshell|exaone|minerva-7b|mellum2",
     {"\\p{N}", R_GPT2},
     0,
     0},
    {"gpt-2|phi-2|jina-es|jina-de|gigachat|jina-v2-es|jina-v2-de|a.x-4.0|mellum|modern-bert|"
     "exaone4|"
     "mpt|olmo|jais|trillion|granite-docling|jina-v1-en|jina-v2-code|roberta-bpe",
     {R_GPT2},
     0,
     0},
    {"qwen2|deepseek-r1-qwen|kormo|f2llmv2|megrez|stablelm2|hunyuan|solar-open", {R_QWEN2}, 0, 0},
    {"qwen35", {R_QWEN35}, 0, 0},
    {"chatglm-bpe", {R_LLAMA3}, 0, 0},
    {"glm4|glm5", {R_LLAMA3}, 1, 0},
    {"deepseek-coder",
     {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[一-龥ࠀ-一가-퟿]+", "\\p{N}"},
     0,
     0},
    {"default", {"[\\p{P}\\$\\+<=>\\^~\\|]+", R_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}, 0, 0},
    {NULL, {NULL}, 0, 0},
};

static int name_in(const char *list, const char *name, size_t len) {
    for (const char *p = list; *p;) {
        const char *e = strchr(p, '|');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == len && !memcmp(p, name, len)) return 1;
        if (!e) break;
        p = e + 1;
    }
    return 0;
}

/* Texts llama.cpp turns into control tokens whatever the file says (its end-of-generation,
 * end-of-turn and fill-in-the-middle auto-detection); they also end generation. */
static const char *const forced_control[] = {"<|eot_id|>",
                                             "<|im_end|>",
                                             "<|end|>",
                                             "<|return|>",
                                             "<|call|>",
                                             "<|flush|>",
                                             "<|calls|>",
                                             "<end_of_turn>",
                                             "<|endoftext|>",
                                             "</s>",
                                             "<|eom_id|>",
                                             "<EOT>",
                                             "_<EOT>",
                                             "[EOT]",
                                             "[EOS]",
                                             "<|end_of_text|>",
                                             "<end_of_utterance>",
                                             "<eos>",
                                             "<turn|>",
                                             "<|tool_response>",
                                             "<｜end▁of▁sentence｜>",
                                             "[e~[",
                                             NULL};
static const char *const forced_control_fim[] = {
    "<|fim_prefix|>",  "<fim-prefix>",    "<fim_prefix>",
    "<PRE>",           "▁<PRE>",          "<|code_prefix|>",
    "<|prefix|>",      "<|fim_suffix|>",  "<fim-suffix>",
    "<fim_suffix>",    "<SUF>",           "▁<SUF>",
    "<|code_suffix|>", "<|suffix|>",      "<|fim_middle|>",
    "<fim-middle>",    "<fim_middle>",    "<MID>",
    "▁<MID>",          "<|code_middle|>", "<|middle|>",
    "<|fim_pad|>",     "<fim-pad>",       "<fim_pad>",
    "<PAD>",           "[PAD]",           "<|fim_repo|>",
    "<|repo_name|>",   "<fim-repo>",      "<REPO>",
    "<reponame>",      "<|file_sep|>",    NULL};

static void force_control(struct vocab *v, const char *const *list) {
    for (int i = 0; list[i]; i++) {
        int32_t id = vocab_find(v, list[i], strlen(list[i]));
        if (id >= 0 && v->attr[id] != TOK_CONTROL) v->attr[id] = TOK_CONTROL;
    }
}

static int32_t get_id(const struct gguf_file *g, const char *key, uint32_t n) {
    uint32_t v;
    if (gguf_get_u32(g, key, &v) || v >= n) return -1;
    return (int32_t)v;
}

/* tokgguf_load's vocabulary step: the token strings, their types and scores, the index and
 * the byte tables, and llama.cpp's forced control tokens. */
static int load_vocab(struct tokenizer *t, const struct gguf_file *g, char *err) {
    enum gguf_vtype et;
    uint64_t n;
    const void *data;
    if (gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n, &data) || et != GGUF_STRING)
        return err_set(err, "GGUF has no tokenizer.ggml.tokens string array");
    if (n == 0 || n > (1u << 30))
        return err_set(err, "GGUF vocabulary of %llu tokens", (unsigned long long)n);
    if (vocab_init(&t->v, (uint32_t)n, err)) return -1;
    const struct gguf_str *toks = data;
    for (uint64_t i = 0; i < n; i++)
        if (vocab_set(&t->v, (uint32_t)i, toks[i].s, (size_t)toks[i].len, err)) return -1;

    uint64_t nt;
    if (!gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &nt, &data)) {
        if (nt != n || (et != GGUF_INT32 && et != GGUF_UINT32))
            return err_set(err, "token_type array does not match the vocabulary");
        for (uint64_t i = 0; i < n; i++) {
            int32_t ty;
            memcpy(&ty, (const char *)data + i * 4, 4);
            switch (ty) {
            case 2: t->v.attr[i] = TOK_UNKNOWN; break;
            case 3: t->v.attr[i] = TOK_CONTROL; break;
            case 4: t->v.attr[i] = TOK_USER_DEFINED; break;
            case 5: t->v.attr[i] = TOK_UNUSED; break;
            case 6: t->v.attr[i] = TOK_BYTE; break;
            default: t->v.attr[i] = TOK_NORMAL; break;
            }
        }
    }
    if (!gguf_get_arr(g, "tokenizer.ggml.scores", &et, &nt, &data)) {
        if (nt != n || et != GGUF_FLOAT32)
            return err_set(err, "scores array does not match the vocabulary");
        t->v.score = xmalloc(n * sizeof(float));
        memcpy(t->v.score, data, n * sizeof(float));
    }
    if (vocab_index(&t->v, err)) return -1;
    vocab_byte_tables(&t->v);
    force_control(&t->v, forced_control);
    force_control(&t->v, forced_control_fim);
    return 0;
}

/* tokgguf_load's merges step (byte-level BPE): tokenizer.ggml.merges into merge ranks. */
static int load_merges(struct tokenizer *t, const struct gguf_file *g, char *err) {
    enum gguf_vtype et;
    uint64_t nt;
    const void *data;
    if (gguf_get_arr(g, "tokenizer.ggml.merges", &et, &nt, &data) || et != GGUF_STRING)
        return err_set(err, "GGUF BPE tokenizer has no merges");
    if (nt > (1u << 28)) return err_set(err, "too many merges");
    if (vocab_merges_init(&t->v, (uint32_t)nt, err)) return -1;
    const struct gguf_str *m = data;
    char *buf = NULL;
    size_t cap = 0;
    for (uint64_t i = 0; i < nt; i++) {
        /* "left right", split at the first space after the first byte (llama.cpp) */
        const char *s = m[i].s;
        size_t l = (size_t)m[i].len, sp = 1;
        while (sp < l && s[sp] != ' ') sp++;
        if (sp >= l) {
            t->v.n_merges++;
            continue;
        } /* keeps later ranks aligned */
        if (l + 1 > cap) {
            cap = l * 2 + 16;
            buf = xrealloc(buf, cap);
        }
        memcpy(buf, s, sp);
        memcpy(buf + sp, s + sp + 1, l - sp - 1);
        int32_t a = vocab_find(&t->v, s, sp), b = vocab_find(&t->v, s + sp + 1, l - sp - 1);
        int32_t r = vocab_find(&t->v, buf, l - 1);
        if (a < 0 || b < 0 || r < 0) {
            t->v.n_merges++;
            continue;
        }
        vocab_merge_add(&t->v, (uint32_t)a, (uint32_t)b, (uint32_t)r);
    }
    free(buf);
    return 0;
}

/* tokgguf_load's byte-level BPE step: the pre-tokenizer named by tokenizer.ggml.pre (its
 * add_bos default into *add_bos), then the merges. */
static int load_bpe(struct tokenizer *t, const struct gguf_file *g, int *add_bos, char *err) {
    t->bpe.byte_level = 1;
    t->utf8 = UTF8_LLAMA;
    const struct gguf_str *pre = gguf_get_str(g, "tokenizer.ggml.pre");
    const char *pname = pre ? pre->s : "default";
    size_t plen = pre ? (size_t)pre->len : 7;
    const struct pre_entry *e = pre_table;
    while (e->names && !name_in(e->names, pname, plen)) e++;
    if (!e->names)
        return err_set(err, "unsupported pre-tokenizer '%.*s'", (int)(plen > 64 ? 64 : plen),
                       pname);
    for (int i = 0; i < 5 && e->regex[i]; i++)
        if (pretok_add_regex(&t->pt, e->regex[i], strlen(e->regex[i]), PT_ISOLATED, 0, err))
            return -1;
    t->bpe.ignore_merges = e->ignore_merges;
    *add_bos = e->add_bos;
    return load_merges(t, g, err);
}

/* tokgguf_load's special ids step: bos/eos/eot/unk/pad (with SentencePiece's defaults) and
 * the ids added before and after every encoded text. */
static void load_special_ids(struct tokenizer *t, const struct gguf_file *g, int spm, int add_bos) {
    int add_eos = 0;
    uint32_t nv = t->v.n;
    t->bos = get_id(g, "tokenizer.ggml.bos_token_id", nv);
    t->eos = get_id(g, "tokenizer.ggml.eos_token_id", nv);
    t->eot = get_id(g, "tokenizer.ggml.eot_token_id", nv);
    t->unk = get_id(g, "tokenizer.ggml.unknown_token_id", nv);
    t->pad = get_id(g, "tokenizer.ggml.padding_token_id", nv);
    if (spm) {
        /* llama.cpp's SentencePiece defaults when the file does not say */
        if (t->bos < 0 && gguf_key_type(g, "tokenizer.ggml.bos_token_id") < 0)
            t->bos = nv > 1 ? 1 : -1;
        if (t->eos < 0 && gguf_key_type(g, "tokenizer.ggml.eos_token_id") < 0)
            t->eos = nv > 2 ? 2 : -1;
        if (t->unk < 0 && gguf_key_type(g, "tokenizer.ggml.unknown_token_id") < 0) t->unk = 0;
    }
    int b;
    if (!gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b)) add_bos = b;
    if (!gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &b)) add_eos = b;
    if (!gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &b)) t->spm_space_prefix = spm && b;
    t->dec_strip_space = spm && t->spm_space_prefix;
    if (add_bos && t->bos >= 0) {
        t->prefix_ids = xmalloc(sizeof(int32_t));
        t->prefix_ids[0] = t->bos;
        t->n_prefix = 1;
    }
    if (add_eos && t->eos >= 0) {
        t->suffix_ids = xmalloc(sizeof(int32_t));
        t->suffix_ids[0] = t->eos;
        t->n_suffix = 1;
    }
}

/* tokgguf_load's special tokens step: control, user-defined and unknown tokens are matched in
 * the text before the model, longest first (llama.cpp's special-token cache); control and
 * unknown ones only when parsing special tokens. */
static int load_special_tokens(struct tokenizer *t, const struct gguf_file *g, char *err) {
    /* llama.cpp's by-name fix-up: Phi-3's special tokens swallow the whitespace after them,
     * except <unk>, <s> and <|endoftext|>. */
    int phi3 = 0;
    const struct gguf_str *gname = gguf_get_str(g, "general.name");
    if (gname) {
        char lower[256];
        size_t l = gname->len < sizeof(lower) - 1 ? (size_t)gname->len : sizeof(lower) - 1;
        for (size_t i = 0; i < l; i++)
            lower[i] = (char)((gname->s[i] >= 'A' && gname->s[i] <= 'Z') ? gname->s[i] + 32
                                                                         : gname->s[i]);
        lower[l] = 0;
        phi3 = strstr(lower, "phi-3") || strstr(lower, "phi3");
    }
    uint32_t nv = t->v.n;
    for (uint32_t i = 0; i < nv; i++) {
        uint8_t a = t->v.attr[i];
        if ((a != TOK_CONTROL && a != TOK_USER_DEFINED && a != TOK_UNKNOWN) || t->v.len[i] == 0)
            continue;
        const char *txt = t->v.str[i];
        int rstrip = phi3 && strcmp(txt, "<unk>") && strcmp(txt, "<s>") &&
                     strcmp(txt, "<|endoftext|>");
        if (tokenizer_add_token(t, (int32_t)i, txt, t->v.len[i], a != TOK_USER_DEFINED, 0, rstrip,
                                0, err))
            return -1;
    }
    return 0;
}

int tokgguf_load(struct tokenizer *t, const struct gguf_file *g, char *err) {
    const struct gguf_str *model = gguf_get_str(g, "tokenizer.ggml.model");
    if (!model) return err_set(err, "GGUF has no tokenizer.ggml.model");
    int spm;
    if (model->len == 4 && !memcmp(model->s, "gpt2", 4)) spm = 0;
    else if (model->len == 5 && !memcmp(model->s, "llama", 5)) spm = 1;
    else
        return err_set(err, "unsupported tokenizer model '%.*s' (gpt2 and llama are)",
                       (int)(model->len > 64 ? 64 : model->len), model->s);
    if (load_vocab(t, g, err)) return -1;

    int add_bos = 0; /* set by both branches */
    if (spm) {
        t->bpe.scored = 1;
        t->spm_escape = 1;
        t->spm_space_prefix = 1;
        t->utf8 = UTF8_KEEP; /* SentencePiece sees raw bytes; invalid ones fall back to <0xNN> */
        add_bos = 1;
        if (vocab_merges_init(&t->v, 0, err)) return -1;
    } else if (load_bpe(t, g, &add_bos, err)) {
        return -1;
    }

    t->from_gguf = 1;
    load_special_ids(t, g, spm, add_bos);
    if (load_special_tokens(t, g, err)) return -1;

    const struct gguf_str *ct = gguf_get_str(g, "tokenizer.chat_template");
    if (ct) {
        t->chat_template = xstrndup(ct->s, (size_t)ct->len);
    }
    if (t->bos >= 0) t->bos_text = xstrdup(t->v.str[t->bos]);
    if (t->eos >= 0) t->eos_text = xstrdup(t->v.str[t->eos]);
    return 0;
}
