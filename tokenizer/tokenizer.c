#include "tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "../util/err.h"
#include "../util/fatal.h"
#include "../util/sbuf.h"

uint32_t tokenizer_n_vocab(const struct tokenizer *t) { return t->v.n; }

int tokenizer_is_eog(const struct tokenizer *t, int32_t id) {
    for (size_t i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) return 1;
    return 0;
}

int tokenizer_is_special(const struct tokenizer *t, int32_t id) {
    if (id < 0 || (uint32_t)id >= t->v.n) return 0;
    return t->v.attr[id] == TOK_CONTROL;
}

int32_t tokenizer_role_id(const struct tokenizer *t, enum tok_role role) {
    int32_t id = role == TOK_ROLE_BOS ? t->bos : role == TOK_ROLE_EOS ? t->eos : t->pad;
    return id >= 0 && (uint32_t)id < t->v.n ? id : -1;
}

int32_t tokenizer_find(const struct tokenizer *t, const char *text, size_t len) {
    return vocab_find(&t->v, text, len);
}

const char *tokenizer_token_bytes(const struct tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || (uint32_t)id >= t->v.n) {
        *len = 0;
        return "";
    }
    *len = t->dec_len[id];
    return t->dec[id];
}

/* ---- encode ---- */

static int is_word_char(const char *s, size_t n, size_t at, int before) {
    /* HF single_word: the neighbouring character is alphanumeric or '_' */
    size_t i = at;
    if (before) {
        if (at == 0) return 0;
        i = at - 1;
        while (i > 0 && ((uint8_t)s[i] & 0xC0) == 0x80) i--;
    } else if (at >= n) {
        return 0;
    }
    size_t l = utf8_valid_len((const uint8_t *)s + i, n - i);
    if (!l) return 0;
    uint32_t c = utf8_decode((const uint8_t *)s + i, l);
    if (c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
        return 1;
    if (c < 128) return 0;
    /* non-ASCII: letters and digits by Unicode category */
    utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)c);
    return (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
           (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
}

static int is_space_byte(char c) { return c == ' ' || (c >= 9 && c <= 13); }

/* Index of the first of the sorted, disjoint spans that ends after a (n if none). */
static size_t span_after(const struct tok_span *sp, size_t n, size_t a) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (sp[mid].off + sp[mid].len <= a) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* Whether [a, b) overlaps one of the spans. */
static int overlaps(const struct tok_span *sp, size_t n, size_t a, size_t b) {
    size_t k = span_after(sp, n, a);
    return k < n && sp[k].off < b;
}

/* Whether [a, b) lies within one of the spans. */
static int inside(const struct tok_span *sp, size_t n, size_t a, size_t b) {
    size_t k = span_after(sp, n, a);
    return k < n && sp[k].off <= a && b <= sp[k].off + sp[k].len;
}

/* Finds the next added token at or after pos. Returns 1 with [*a, *b) the span to replace
 * (grown by lstrip/rstrip) and *tok its index, or 0.
 * plain: spans where special tokens are text whatever parse_special says; a special token
 * is parsed only when none of its bytes lie in one. */
static int next_added(const struct tokenizer *t, const char *s, size_t n, size_t pos,
                      int parse_special, const struct tok_span *plain, size_t n_plain, size_t *a,
                      size_t *b, int32_t *tok) {
    if (t->n_added == 0) return 0;
    for (size_t i = pos; i < n; i++) {
        uint32_t node = t->trie_root[(uint8_t)s[i]];
        if (!node) continue;
        int32_t best = -1;
        size_t best_end = 0;
        for (size_t j = i; j < n; j++) {
            if (j > i) {
                uint32_t c = t->trie[node].child;
                while (c && t->trie[c].byte != (uint8_t)s[j]) c = t->trie[c].sibling;
                if (!c) break;
                node = c;
            }
            int32_t k = t->trie[node].tok;
            if (k < 0) continue;
            const struct added_tok *at = &t->added[k];
            /* llama.cpp leaves control tokens out of the search entirely when not parsing
             * special tokens; HF finds them and then skips the match. */
            if (t->from_gguf && at->special &&
                !(parse_special && !overlaps(plain, n_plain, i, j + 1)))
                continue;
            best = k;
            best_end = j + 1;
        }
        if (best < 0) continue;
        const struct added_tok *at = &t->added[best];
        if (at->special && !(parse_special && !overlaps(plain, n_plain, i, best_end))) {
            /* HF: the match is consumed, text stays text; but one that runs from a plain span
             * into the template's text must not swallow a marker starting there */
            if (!parse_special || inside(plain, n_plain, i, best_end)) i = best_end - 1;
            continue;
        }
        if (at->single_word && (is_word_char(s, n, i, 1) || is_word_char(s, n, best_end, 0)))
            continue;
        size_t sa = i, sb = best_end;
        if (at->lstrip)
            while (sa > pos && is_space_byte(s[sa - 1])) sa--;
        if (at->rstrip)
            while (sb < n && is_space_byte(s[sb])) sb++;
        *a = sa;
        *b = sb;
        *tok = best;
        return 1;
    }
    return 0;
}

static int encode_text(struct tokenizer *t, struct pt_work *w, struct bpe_cache *cache,
                       const char *s, size_t n, int at_start, int after_special, struct idbuf *out,
                       char *err) {
    if (t->spm_escape) {
        /* llama.cpp SentencePiece: optional " " prefix, spaces escaped, no pre-tokenizer */
        size_t extra = t->spm_space_prefix && after_special ? 1 : 0;
        size_t cap = (n + extra) * 3 + 1;
        char *e = xmalloc(cap);
        size_t k = 0;
        for (size_t i = 0; i < n + extra; i++) {
            char c = i < extra ? ' ' : s[i - extra];
            if (c == ' ') {
                memcpy(e + k, "\xe2\x96\x81", 3);
                k += 3;
            } else e[k++] = c;
        }
        bpe_encode(&t->v, &t->bpe, NULL, e, k, out);
        free(e);
        return 0;
    }
    /* llama.cpp lets UTF-8-encoded surrogates through; the regexes run on a copy where
     * they are masked, the model on the original bytes (no normalizer: same offsets). */
    const char *src = NULL;
    if (t->utf8 == UTF8_LLAMA && t->pt.n_nm == 0 && memmem(s, n, "\xed", 1)) {
        char *m = xmalloc(n ? n : 1);
        memcpy(m, s, n);
        if (utf8_mask_surrogates(m, n)) src = s;
        int rc = pretok_run(&t->pt, w, m, n, at_start, err);
        free(m);
        if (rc) return -1;
    } else if (pretok_run(&t->pt, w, s, n, at_start, err)) {
        return -1;
    }
    const char *base = src ? src : w->buf;
    for (size_t i = 0; i < w->n; i++)
        bpe_encode(&t->v, &t->bpe, cache, base + w->p[i].off, w->p[i].len, out);
    return 0;
}

int tokenizer_encode(struct tokenizer *t, const char *text, size_t len, int flags, int32_t **ids,
                     size_t *n_ids, char *err) {
    return tokenizer_encode_spans(t, text, len, flags, NULL, 0, ids, n_ids, err);
}

/* Repairs UTF-8 span by span so the spans keep pointing at the same text (a repair may
 * change lengths); *out_sp is malloc'd. */
static void sanitize_spans(const struct tokenizer *t, const char *text, size_t len,
                           const struct tok_span *sp, size_t n_sp, char **out, size_t *out_len,
                           struct tok_span **out_sp, size_t *n_out) {
    struct sbuf o = {0};
    struct tok_span *ns = xmalloc((n_sp ? n_sp : 1) * sizeof(*ns));
    size_t k = 0, pos = 0;
    for (size_t i = 0; i <= n_sp; i++) {
        size_t a = i < n_sp ? sp[i].off : len, b = i < n_sp ? sp[i].off + sp[i].len : len;
        if (a > len) a = len;
        if (b > len) b = len;
        if (a < pos) a = pos;
        for (int piece = 0; piece < 2; piece++) {
            size_t from = piece ? a : pos, to = piece ? b : a;
            if (to <= from) continue;
            char *c;
            size_t cn;
            utf8_sanitize((const uint8_t *)text + from, to - from, t->utf8, &c, &cn);
            if (piece && cn) {
                ns[k].off = o.len;
                ns[k].len = cn;
                k++;
            }
            sbuf_add(&o, c, cn);
            free(c);
        }
        if (b > pos) pos = b;
    }
    sbuf_add(&o, "", 0);
    *out = o.p;
    *out_len = o.len;
    *out_sp = ns;
    *n_out = k;
}

int tokenizer_encode_spans(struct tokenizer *t, const char *text, size_t len, int flags,
                           const struct tok_span *plain, size_t n_plain, int32_t **ids,
                           size_t *n_ids, char *err) {
    *ids = NULL;
    *n_ids = 0;
    char *s;
    size_t n;
    struct tok_span *sp = NULL;
    if (n_plain) sanitize_spans(t, text, len, plain, n_plain, &s, &n, &sp, &n_plain);
    else utf8_sanitize((const uint8_t *)text, len, t->utf8, &s, &n);
    struct idbuf out = {0};
    struct pt_work w = {0};
    int rc = -1;
    /* The word cache is shared; a thread that finds it busy simply runs without it. */
    struct bpe_cache *cache = pthread_mutex_trylock(&t->cache_lock) == 0 ? t->cache : NULL;

    if (flags & TOK_ADD_SPECIAL)
        for (size_t i = 0; i < t->n_prefix; i++) idbuf_push(&out, t->prefix_ids[i]);

    size_t pos = 0;
    int after_special = 1; /* llama.cpp SPM: text at the very start counts as after a special */
    while (pos < n) {
        size_t a, b;
        int32_t k;
        int found = next_added(t, s, n, pos, flags & TOK_PARSE_SPECIAL, sp, n_plain, &a, &b, &k);
        size_t end = found ? a : n;
        if (end > pos) {
            if (encode_text(t, &w, cache, s + pos, end - pos, pos == 0, after_special, &out, err))
                goto done;
            after_special = 0;
        }
        if (!found) break;
        idbuf_push(&out, t->added[k].id);
        after_special = 1;
        pos = b;
    }

    if (flags & TOK_ADD_SPECIAL)
        for (size_t i = 0; i < t->n_suffix; i++) idbuf_push(&out, t->suffix_ids[i]);
    rc = 0;
    *ids = out.v;
    *n_ids = out.n;
    out.v = NULL;
done:
    if (cache) pthread_mutex_unlock(&t->cache_lock);
    idbuf_free(&out);
    pt_work_free(&w);
    free(s);
    free(sp);
    return rc;
}

/* ---- decode ---- */

int tokenizer_decode(const struct tokenizer *t, const int32_t *ids, size_t n, int flags,
                     char **text, size_t *len, char *err) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || (uint32_t)ids[i] >= t->v.n)
            return err_set(err, "token id %d out of range (vocabulary %u)", ids[i], t->v.n);
        total += t->dec_len[ids[i]];
    }
    char *raw = xmalloc(total + 1);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if ((flags & TOK_SKIP_SPECIAL) && t->v.attr[ids[i]] == TOK_CONTROL) continue;
        memcpy(raw + k, t->dec[ids[i]], t->dec_len[ids[i]]);
        k += t->dec_len[ids[i]];
    }
    size_t skip = t->dec_strip_space && k > 0 && raw[0] == ' ' ? 1 : 0;
    struct sbuf o = {0};
    utf8_lossy_append((const uint8_t *)raw + skip, k - skip, &o);
    free(raw);
    sbuf_add(&o, "", 0); /* empty text still gets a buffer */
    *text = o.p;
    *len = o.len;
    return 0;
}

/* ---- loading ---- */

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../model/gguf.h"
#include "tokgguf.h"
#include "tokjson.h"

#define MAX_JSON_BYTES (1u << 30)

static char *read_file(const char *path, size_t *len, int optional, char *err) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (!optional) err_set(err, "%s: cannot open", path);
        return NULL;
    }
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 65536 + 1 > cap) {
            cap = cap ? cap * 2 : 1 << 20;
            if (cap > MAX_JSON_BYTES) {
                err_set(err, "%s: too large", path);
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = xrealloc(buf, cap);
        }
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        err_set(err, "%s: read error", path);
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

int tokenizer_load_json(struct tokenizer **out, const char *json, size_t len,
                        const char *config_json, size_t config_len, char *err) {
    struct tokenizer *t = tokenizer_alloc();
    if (tokjson_load(t, json, len, config_json, config_len, err)) {
        tokenizer_free(t);
        return -1;
    }
    tokenizer_finish(t);
    *out = t;
    return 0;
}

int tokenizer_load_gguf(struct tokenizer **out, const struct gguf_file *g, char *err) {
    struct tokenizer *t = tokenizer_alloc();
    if (tokgguf_load(t, g, err)) {
        tokenizer_free(t);
        return -1;
    }
    tokenizer_finish(t);
    *out = t;
    return 0;
}

/* The tokenizer needs the metadata only. The file is mapped privately and its tensor
 * count patched to zero in the (copy-on-write) header, so that a model whose tensor types
 * this build cannot run still yields its tokenizer. */
static int load_gguf_path(struct tokenizer **out, const char *path, char *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return err_set(err, "%s: cannot open", path);
    struct stat st;
    if (fstat(fd, &st) || st.st_size < 24) {
        close(fd);
        return err_set(err, "%s: not a GGUF file", path);
    }
    size_t size = (size_t)st.st_size;
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return err_set(err, "%s: mmap failed", path);
    memset((char *)p + 8, 0, 8); /* tensor count (GGUF v2/v3) */
    struct gguf_file *g;
    int rc = gguf_open_buf(&g, p, size, path, err);
    if (rc == 0) {
        rc = tokenizer_load_gguf(out, g, err);
        gguf_close(g);
    }
    munmap(p, size);
    return rc;
}

int tokenizer_load(struct tokenizer **out, const char *path, char *err) {
    struct stat st;
    if (stat(path, &st)) return err_set(err, "%s: no such file or directory", path);
    char dir[4096];
    char p[4200];
    if (S_ISDIR(st.st_mode)) {
        snprintf(dir, sizeof(dir), "%s", path);
        snprintf(p, sizeof(p), "%s/tokenizer.json", dir);
    } else {
        FILE *f = fopen(path, "rb");
        char magic[4] = {0};
        if (!f) return err_set(err, "%s: cannot open", path);
        size_t r = fread(magic, 1, 4, f);
        fclose(f);
        if (r == 4 && !memcmp(magic, "GGUF", 4)) return load_gguf_path(out, path, err);
        snprintf(p, sizeof(p), "%s", path);
        snprintf(dir, sizeof(dir), "%s", path);
        char *slash = strrchr(dir, '/');
        if (slash) *slash = 0;
        else snprintf(dir, sizeof(dir), ".");
    }
    size_t jl, cl = 0, tl = 0;
    char *json = read_file(p, &jl, 0, err);
    if (!json) return -1;
    char cp[4200], tp[4200];
    snprintf(cp, sizeof(cp), "%s/tokenizer_config.json", dir);
    snprintf(tp, sizeof(tp), "%s/chat_template.jinja", dir);
    char *cfg = read_file(cp, &cl, 1, err);
    int rc = tokenizer_load_json(out, json, jl, cfg, cl, err);
    free(json);
    free(cfg);
    if (rc == 0) {
        /* newer checkpoints keep the template in its own file, which then wins */
        char *tpl = read_file(tp, &tl, 1, err);
        if (tpl) {
            free((*out)->chat_template);
            (*out)->chat_template = tpl;
        }
    }
    return rc;
}
