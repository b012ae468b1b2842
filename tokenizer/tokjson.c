#include "tokjson.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "../util/err.h"
#include "../util/fatal.h"
#include "tokbuild.h"

#define GPT2_REGEX \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

static const char *jstr(const cJSON *o, const char *k) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(x) ? x->valuestring : NULL;
}

static int jbool(const cJSON *o, const char *k, int def) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    if (cJSON_IsBool(x)) return cJSON_IsTrue(x);
    return def;
}

static int parse_behavior(const cJSON *o, enum pt_behavior *b, char *err) {
    const char *s = jstr(o, "behavior");
    if (!s) return err_set(err, "Split without behavior");
    if (!strcmp(s, "Removed")) *b = PT_REMOVED;
    else if (!strcmp(s, "Isolated")) *b = PT_ISOLATED;
    else if (!strcmp(s, "MergedWithPrevious")) *b = PT_MERGED_PREV;
    else if (!strcmp(s, "MergedWithNext")) *b = PT_MERGED_NEXT;
    else if (!strcmp(s, "Contiguous")) *b = PT_CONTIGUOUS;
    else return err_set(err, "unknown split behavior '%s'", s);
    return 0;
}

static int load_normalizer(struct tokenizer *t, const cJSON *n, char *err) {
    if (!n || cJSON_IsNull(n)) return 0;
    const char *type = jstr(n, "type");
    if (!type) return err_set(err, "normalizer without a type");
    struct nm_step st = {0};
    if (!strcmp(type, "Sequence")) {
        const cJSON *x;
        cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(
                                  n, "normalizers")) if (load_normalizer(t, x, err)) return -1;
        return 0;
    }
    if (!strcmp(type, "NFC")) st.kind = NM_NFC;
    else if (!strcmp(type, "NFD")) st.kind = NM_NFD;
    else if (!strcmp(type, "NFKC")) st.kind = NM_NFKC;
    else if (!strcmp(type, "NFKD")) st.kind = NM_NFKD;
    else if (!strcmp(type, "Lowercase")) st.kind = NM_LOWERCASE;
    else if (!strcmp(type, "Strip")) {
        st.kind = NM_STRIP;
        st.left = jbool(n, "strip_left", 1);
        st.right = jbool(n, "strip_right", 1);
    } else if (!strcmp(type, "Prepend")) {
        const char *p = jstr(n, "prepend");
        if (!p) return err_set(err, "Prepend normalizer without text");
        st.kind = NM_PREPEND;
        st.with = (char *)p;
        st.with_len = strlen(p);
    } else if (!strcmp(type, "Replace")) {
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(n, "pattern");
        const char *content = jstr(n, "content");
        if (!pat || !content) return err_set(err, "Replace normalizer without pattern/content");
        st.kind = NM_REPLACE;
        st.with = (char *)content;
        st.with_len = strlen(content);
        const char *ps = jstr(pat, "String"), *pr = jstr(pat, "Regex");
        if (ps) {
            st.pat = (char *)ps;
            st.pat_len = strlen(ps);
        } else if (pr) {
            return pretok_add_norm(&t->pt, &st, pr, err);
        } else {
            return err_set(err, "Replace normalizer pattern is neither String nor Regex");
        }
    } else {
        return err_set(err, "unsupported normalizer '%s'", type);
    }
    return pretok_add_norm(&t->pt, &st, NULL, err);
}

static int load_pretok(struct tokenizer *t, const cJSON *p, char *err) {
    if (!p || cJSON_IsNull(p)) return 0;
    const char *type = jstr(p, "type");
    if (!type) return err_set(err, "pre_tokenizer without a type");
    if (t->bpe.byte_level)
        return err_set(err, "pre-tokenizer '%s' after ByteLevel is not supported", type);
    if (!strcmp(type, "Sequence")) {
        const cJSON *x;
        cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(
                                  p, "pretokenizers")) if (load_pretok(t, x, err)) return -1;
        return 0;
    }
    if (!strcmp(type, "Split")) {
        enum pt_behavior b = PT_ISOLATED;
        if (parse_behavior(p, &b, err)) return -1;
        int inv = jbool(p, "invert", 0);
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(p, "pattern");
        const char *ps = jstr(pat, "String"), *pr = jstr(pat, "Regex");
        if (pr) return pretok_add_regex(&t->pt, pr, strlen(pr), b, inv, err);
        if (ps) return pretok_add_literal(&t->pt, ps, strlen(ps), b, inv, err);
        return err_set(err, "Split pattern is neither String nor Regex");
    }
    if (!strcmp(type, "Digits")) {
        int ind = jbool(p, "individual_digits", 0);
        /* Rust's char::is_numeric is the Unicode N categories */
        return pretok_add_regex(&t->pt, "\\p{N}", 5, ind ? PT_ISOLATED : PT_CONTIGUOUS, 0, err);
    }
    if (!strcmp(type, "ByteLevel")) {
        if (jbool(p, "add_prefix_space", 0)) {
            if (t->pt.n_steps)
                return err_set(
                    err, "ByteLevel add_prefix_space after other pre-tokenizers is not supported");
            t->pt.byte_level_prefix = 1;
        }
        if (jbool(p, "use_regex", 1) &&
            pretok_add_regex(&t->pt, GPT2_REGEX, strlen(GPT2_REGEX), PT_ISOLATED, 0, err))
            return -1;
        t->bpe.byte_level = 1;
        return 0;
    }
    if (!strcmp(type, "Metaspace")) {
        const char *r = jstr(p, "replacement");
        if (!r) r = "\xe2\x96\x81";
        const char *scheme = jstr(p, "prepend_scheme");
        enum pt_prepend ps = PT_PREPEND_ALWAYS;
        if (scheme) {
            if (!strcmp(scheme, "first")) ps = PT_PREPEND_FIRST;
            else if (!strcmp(scheme, "never")) ps = PT_PREPEND_NEVER;
            else if (strcmp(scheme, "always"))
                return err_set(err, "unknown prepend_scheme '%s'", scheme);
        } else if (!jbool(p, "add_prefix_space", 1)) {
            ps = PT_PREPEND_NEVER;
        }
        return pretok_add_metaspace(&t->pt, r, strlen(r), ps, jbool(p, "split", 1), err);
    }
    return err_set(err, "unsupported pre_tokenizer '%s'", type);
}

static int32_t special_id(const cJSON *specials, const char *name, int which, char *err) {
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(specials, name);
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(s, "ids");
    const cJSON *x = cJSON_GetArrayItem(ids, which);
    if (!cJSON_IsNumber(x)) {
        err_set(err, "post-processor special token '%s' has no id", name);
        return -1;
    }
    return (int32_t)x->valuedouble;
}

static void push_id(int32_t **v, size_t *n, int32_t id) {
    *v = xrealloc(*v, (*n + 1) * sizeof(**v));
    (*v)[(*n)++] = id;
}

static int load_post(struct tokenizer *t, const cJSON *p, char *err) {
    if (!p || cJSON_IsNull(p)) return 0;
    const char *type = jstr(p, "type");
    if (!type) return err_set(err, "post_processor without a type");
    if (!strcmp(type, "Sequence")) {
        const cJSON *x;
        cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(
                                  p, "processors")) if (load_post(t, x, err)) return -1;
        return 0;
    }
    if (!strcmp(type, "ByteLevel")) return 0; /* offsets only */
    if (!strcmp(type, "TemplateProcessing")) {
        const cJSON *specials = cJSON_GetObjectItemCaseSensitive(p, "special_tokens");
        int seen_seq = 0;
        const cJSON *x;
        cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(p, "single")) {
            const cJSON *sp = cJSON_GetObjectItemCaseSensitive(x, "SpecialToken");
            if (cJSON_GetObjectItemCaseSensitive(x, "Sequence")) {
                seen_seq = 1;
                continue;
            }
            const char *name = jstr(sp, "id");
            if (!name)
                return err_set(err, "TemplateProcessing item is neither Sequence nor SpecialToken");
            const cJSON *ids = cJSON_GetObjectItemCaseSensitive(
                cJSON_GetObjectItemCaseSensitive(specials, name), "ids");
            int n = cJSON_GetArraySize(ids);
            for (int i = 0; i < n; i++) {
                int32_t id = special_id(specials, name, i, err);
                if (id < 0 || (uint32_t)id >= t->v.n)
                    return err_set(err, "post-processor id out of range");
                if (seen_seq) push_id(&t->suffix_ids, &t->n_suffix, id);
                else push_id(&t->prefix_ids, &t->n_prefix, id);
            }
        }
        return 0;
    }
    if (!strcmp(type, "RobertaProcessing") || !strcmp(type, "BertProcessing")) {
        const cJSON *cls = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(p, "cls"), 1);
        const cJSON *sep = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(p, "sep"), 1);
        if (!cJSON_IsNumber(cls) || !cJSON_IsNumber(sep))
            return err_set(err, "%s without cls/sep", type);
        push_id(&t->prefix_ids, &t->n_prefix, (int32_t)cls->valuedouble);
        push_id(&t->suffix_ids, &t->n_suffix, (int32_t)sep->valuedouble);
        return 0;
    }
    return err_set(err, "unsupported post_processor '%s'", type);
}

/* Only decoders whose effect our per-token byte table reproduces are accepted. */
static int load_decoder(struct tokenizer *t, const cJSON *d, char *err) {
    if (!d || cJSON_IsNull(d)) return 0;
    const char *type = jstr(d, "type");
    if (!type) return err_set(err, "decoder without a type");
    if (!strcmp(type, "Sequence")) {
        const cJSON *x;
        cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(
                                  d, "decoders")) if (load_decoder(t, x, err)) return -1;
        return 0;
    }
    if (!strcmp(type, "ByteLevel")) {
        if (!t->bpe.byte_level)
            return err_set(err, "ByteLevel decoder without ByteLevel pre-tokenizer");
        return 0;
    }
    if (!strcmp(type, "ByteFallback") || !strcmp(type, "Fuse")) return 0;
    if (!strcmp(type, "Replace")) {
        const char *ps = jstr(cJSON_GetObjectItemCaseSensitive(d, "pattern"), "String");
        const char *c = jstr(d, "content");
        if (!ps || !c || strcmp(ps, "\xe2\x96\x81") || strcmp(c, " "))
            return err_set(err, "unsupported Replace decoder (only U+2581 -> space)");
        return 0;
    }
    if (!strcmp(type, "Strip")) {
        const char *c = jstr(d, "content");
        const cJSON *start = cJSON_GetObjectItemCaseSensitive(d, "start");
        const cJSON *stop = cJSON_GetObjectItemCaseSensitive(d, "stop");
        if (!c || strcmp(c, " ") || !cJSON_IsNumber(start) || start->valuedouble > 1 ||
            !cJSON_IsNumber(stop) || stop->valuedouble != 0)
            return err_set(err, "unsupported Strip decoder");
        t->dec_strip_space = start->valuedouble == 1;
        return 0;
    }
    if (!strcmp(type, "Metaspace")) {
        const char *scheme = jstr(d, "prepend_scheme");
        int prepend = scheme ? strcmp(scheme, "never") != 0 : jbool(d, "add_prefix_space", 1);
        t->dec_strip_space = prepend;
        return 0;
    }
    return err_set(err, "unsupported decoder '%s'", type);
}

static int load_model(struct tokenizer *t, const cJSON *m, const cJSON *added, char *err) {
    const char *type = jstr(m, "type");
    if (type && strcmp(type, "BPE"))
        return err_set(err, "unsupported model type '%s' (only BPE)", type);
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(m, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(m, "merges");
    if (!cJSON_IsObject(vocab)) return err_set(err, "model.vocab missing");
    const char *cs = jstr(m, "continuing_subword_prefix"), *ew = jstr(m, "end_of_word_suffix");
    if ((cs && *cs) || (ew && *ew)) return err_set(err, "BPE subword prefix/suffix not supported");
    const cJSON *drop = cJSON_GetObjectItemCaseSensitive(m, "dropout");
    if (cJSON_IsNumber(drop) && drop->valuedouble > 0)
        return err_set(err, "BPE dropout not supported");

    /* vocabulary size: the largest id among model and added tokens, plus one */
    double max_id = -1;
    const cJSON *x;
    cJSON_ArrayForEach(x, vocab) {
        if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble > (1 << 30))
            return err_set(err, "vocab entry '%.64s' has a bad id", x->string);
        if (x->valuedouble > max_id) max_id = x->valuedouble;
    }
    cJSON_ArrayForEach(x, added) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(x, "id");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble > (1 << 30) ||
            !jstr(x, "content"))
            return err_set(err, "added token without a valid id/content");
        if (id->valuedouble > max_id) max_id = id->valuedouble;
    }
    if (max_id < 0) return err_set(err, "empty vocabulary");
    /* ids are dense in real files; a huge id with few tokens would only allocate holes */
    double entries = cJSON_GetArraySize(vocab) + cJSON_GetArraySize(added);
    if (max_id >= entries + 65536)
        return err_set(err, "token id %.0f is far beyond the %.0f tokens defined", max_id, entries);
    uint32_t n = (uint32_t)max_id + 1;
    if (vocab_init(&t->v, n, err)) return -1;
    cJSON_ArrayForEach(x, vocab) if (vocab_set(&t->v, (uint32_t)x->valuedouble, x->string,
                                               strlen(x->string), err)) return -1;
    cJSON_ArrayForEach(x, added) {
        uint32_t id = (uint32_t)cJSON_GetObjectItemCaseSensitive(x, "id")->valuedouble;
        const char *c = jstr(x, "content");
        if (!t->v.str[id] && vocab_set(&t->v, id, c, strlen(c), err)) return -1;
        t->v.attr[id] = jbool(x, "special", 0) ? TOK_CONTROL : TOK_USER_DEFINED;
    }
    for (uint32_t i = 0; i < n; i++) {
        if (!t->v.str[i]) {
            /* a hole in the id space: unreachable from text */
            if (vocab_set(&t->v, i, "", 0, err)) return -1;
            t->v.attr[i] = TOK_UNUSED;
        }
    }
    if (vocab_index(&t->v, err)) return -1;
    vocab_byte_tables(&t->v);

    int nm = cJSON_GetArraySize(merges);
    if (vocab_merges_init(&t->v, (uint32_t)(nm > 0 ? nm : 0), err)) return -1;
    char *buf = NULL;
    size_t cap = 0;
    cJSON_ArrayForEach(x, merges) {
        const char *a, *b;
        size_t la, lb;
        if (cJSON_IsString(x)) {
            const char *s = x->valuestring;
            const char *sp = strchr(s, ' ');
            if (!sp) {
                free(buf);
                return err_set(err, "merge '%.64s' has no space", s);
            }
            a = s;
            la = (size_t)(sp - s);
            b = sp + 1;
            lb = strlen(b);
        } else if (cJSON_IsArray(x) && cJSON_GetArraySize(x) == 2 &&
                   cJSON_IsString(cJSON_GetArrayItem(x, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(x, 1))) {
            a = cJSON_GetArrayItem(x, 0)->valuestring;
            la = strlen(a);
            b = cJSON_GetArrayItem(x, 1)->valuestring;
            lb = strlen(b);
        } else {
            free(buf);
            return err_set(err, "bad merge entry");
        }
        if (la + lb + 1 > cap) {
            cap = (la + lb + 1) * 2;
            buf = xrealloc(buf, cap);
        }
        memcpy(buf, a, la);
        memcpy(buf + la, b, lb);
        int32_t ia = vocab_find(&t->v, a, la), ib = vocab_find(&t->v, b, lb);
        int32_t ir = vocab_find(&t->v, buf, la + lb);
        if (ia < 0 || ib < 0 || ir < 0) {
            free(buf);
            return err_set(err, "merge '%.*s %.*s' uses a token missing from the vocabulary",
                           (int)(la > 64 ? 64 : la), a, (int)(lb > 64 ? 64 : lb), b);
        }
        vocab_merge_add(&t->v, (uint32_t)ia, (uint32_t)ib, (uint32_t)ir);
    }
    free(buf);

    t->bpe.byte_fallback = jbool(m, "byte_fallback", 0);
    t->bpe.fuse_unk = jbool(m, "fuse_unk", 0);
    t->bpe.ignore_merges = jbool(m, "ignore_merges", 0);
    const char *unk = jstr(m, "unk_token");
    if (unk) {
        t->bpe.unk = vocab_find(&t->v, unk, strlen(unk));
        if (t->bpe.unk < 0) return err_set(err, "unk_token '%.64s' not in the vocabulary", unk);
        t->unk = t->bpe.unk;
    }
    return 0;
}

static char *config_token(const cJSON *cfg, const char *key) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(cfg, key);
    const char *s = cJSON_IsString(x) ? x->valuestring : jstr(x, "content");
    return s ? xstrdup(s) : NULL;
}

static int load_config(struct tokenizer *t, const char *config, size_t len, char *err) {
    cJSON *cfg = cJSON_ParseWithLength(config, len);
    if (!cfg) return err_set(err, "tokenizer_config.json is not valid JSON");
    int rc = -1;
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
    if (cJSON_IsString(ct)) {
        t->chat_template = xstrdup(ct->valuestring);
    } else if (cJSON_IsArray(ct)) {
        const cJSON *x;
        cJSON_ArrayForEach(x, ct) {
            const char *name = jstr(x, "name"), *tpl = jstr(x, "template");
            if (name && tpl && !strcmp(name, "default")) t->chat_template = xstrdup(tpl);
        }
    }
    t->bos_text = config_token(cfg, "bos_token");
    t->eos_text = config_token(cfg, "eos_token");
    if (t->bos_text) t->bos = vocab_find(&t->v, t->bos_text, strlen(t->bos_text));
    if (t->eos_text) t->eos = vocab_find(&t->v, t->eos_text, strlen(t->eos_text));
    rc = 0;
    cJSON_Delete(cfg);
    return rc;
}

int tokjson_load(struct tokenizer *t, const char *json, size_t len, const char *config,
                 size_t config_len, char *err) {
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root) return err_set(err, "tokenizer.json is not valid JSON");
    int rc = -1;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    if (!cJSON_IsObject(model)) {
        err_set(err, "tokenizer.json has no model");
        goto done;
    }
    if (load_model(t, model, added, err)) goto done;
    if (load_normalizer(t, cJSON_GetObjectItemCaseSensitive(root, "normalizer"), err)) goto done;
    if (load_pretok(t, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), err)) goto done;
    if (load_post(t, cJSON_GetObjectItemCaseSensitive(root, "post_processor"), err)) goto done;
    if (load_decoder(t, cJSON_GetObjectItemCaseSensitive(root, "decoder"), err)) goto done;
    const cJSON *x;
    cJSON_ArrayForEach(x, added) {
        uint32_t id = (uint32_t)cJSON_GetObjectItemCaseSensitive(x, "id")->valuedouble;
        const char *c = jstr(x, "content");
        if (tokenizer_add_token(t, (int32_t)id, c, strlen(c), jbool(x, "special", 0),
                                jbool(x, "lstrip", 0), jbool(x, "rstrip", 0),
                                jbool(x, "single_word", 0), err))
            goto done;
    }
    /* Python hands HF a str, so invalid bytes were replaced before it saw them. */
    t->utf8 = UTF8_SUBPART;
    if (config && load_config(t, config, config_len, err)) goto done;
    rc = 0;
done:
    cJSON_Delete(root);
    return rc;
}
