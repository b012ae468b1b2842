#define PCRE2_CODE_UNIT_WIDTH 8
#include "pretok.h"

#include <pcre2.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "../util/err.h"
#include "../util/fatal.h"
#include "../util/utf8.h"

static void grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    *p = xrealloc(*p, c * elem);
    *cap = c;
}

static pcre2_code *compile(const char *pattern, size_t len, char *err) {
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, len,
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &ec, &eo, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof(msg));
        err_set(err, "regex %.*s: %s at offset %zu", (int)(len > 200 ? 200 : len), pattern,
                (const char *)msg, (size_t)eo);
        return NULL;
    }
    /* JIT is an optimization: when it is unavailable the interpreter gives the same answer. */
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    return re;
}

static struct pt_step *new_step(struct pretok *pt) {
    struct pt_step *s = pt->steps = xrealloc(pt->steps, (pt->n_steps + 1) * sizeof(*s));
    memset(&s[pt->n_steps], 0, sizeof(*s));
    return &s[pt->n_steps++];
}

int pretok_add_regex(struct pretok *pt, const char *pattern, size_t len, enum pt_behavior b,
                     int invert, char *err) {
    pcre2_code *re = compile(pattern, len, err);
    if (!re) return -1;
    struct pt_step *s = new_step(pt);
    s->kind = PT_SPLIT_REGEX;
    s->re = re;
    s->behavior = b;
    s->invert = invert;
    return 0;
}

int pretok_add_literal(struct pretok *pt, const char *lit, size_t len, enum pt_behavior b,
                       int invert, char *err) {
    if (len == 0) return err_set(err, "empty split pattern");
    char *c = xstrndup(lit, len);
    struct pt_step *s = new_step(pt);
    s->kind = PT_SPLIT_LITERAL;
    s->lit = c;
    s->lit_len = len;
    s->behavior = b;
    s->invert = invert;
    return 0;
}

int pretok_add_metaspace(struct pretok *pt, const char *repl, size_t len, enum pt_prepend p,
                         int split, char *err) {
    if (len == 0 || len > 4) return err_set(err, "bad Metaspace replacement");
    char *c = xstrndup(repl, len);
    struct pt_step *s = new_step(pt);
    s->kind = PT_METASPACE;
    s->lit = c;
    s->lit_len = len;
    s->prepend = p;
    s->split = split;
    return 0;
}

int pretok_add_norm(struct pretok *pt, const struct nm_step *step, const char *regex, char *err) {
    struct nm_step *n = pt->nm = xrealloc(pt->nm, (pt->n_nm + 1) * sizeof(*n));
    struct nm_step *d = &n[pt->n_nm];
    *d = *step;
    d->re = NULL;
    d->pat = d->with = NULL;
    if (regex && !(d->re = compile(regex, strlen(regex), err))) return -1;
    if (step->pat) d->pat = xstrndup(step->pat, step->pat_len);
    if (step->with) d->with = xstrndup(step->with, step->with_len);
    pt->n_nm++;
    return 0;
}

void pretok_free(struct pretok *pt) {
    for (size_t i = 0; i < pt->n_steps; i++) {
        pcre2_code_free(pt->steps[i].re);
        free(pt->steps[i].lit);
    }
    for (size_t i = 0; i < pt->n_nm; i++) {
        pcre2_code_free(pt->nm[i].re);
        free(pt->nm[i].pat);
        free(pt->nm[i].with);
    }
    free(pt->steps);
    free(pt->nm);
    memset(pt, 0, sizeof(*pt));
}

void pt_work_free(struct pt_work *w) {
    free(w->buf);
    free(w->buf2);
    free(w->p);
    free(w->p2);
    pcre2_match_data_free(w->md);
    memset(w, 0, sizeof(*w));
}

/* ---- normalizers: rewrite w->buf[0..len) into buf2, then swap ---- */

static void out_bytes(struct pt_work *w, const void *s, size_t n) {
    if (n == 0) return;
    grow((void **)&w->buf2, &w->cap2, w->len2 + n + 1, 1);
    memcpy(w->buf2 + w->len2, s, n);
    w->len2 += n;
}

static void swap_bufs(struct pt_work *w) {
    char *b = w->buf;
    w->buf = w->buf2;
    w->buf2 = b;
    size_t c = w->cap;
    w->cap = w->cap2;
    w->cap2 = c;
    w->len = w->len2;
    w->len2 = 0;
}

/* Rust's char::is_whitespace (Unicode White_Space). */
static int is_ws(uint32_t c) {
    return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

static void ensure_md(struct pt_work *w) {
    if (!w->md && !(w->md = pcre2_match_data_create(4, NULL)))
        FATAL("out of memory for regex match data");
}

static int normalize(const struct nm_step *st, struct pt_work *w, char *err) {
    w->len2 = 0;
    switch (st->kind) {
    case NM_NFC:
    case NM_NFD:
    case NM_NFKC:
    case NM_NFKD: {
        int opt = UTF8PROC_STABLE;
        if (st->kind == NM_NFC || st->kind == NM_NFKC) opt |= UTF8PROC_COMPOSE;
        else opt |= UTF8PROC_DECOMPOSE;
        if (st->kind == NM_NFKC || st->kind == NM_NFKD) opt |= UTF8PROC_COMPAT;
        utf8proc_uint8_t *o = NULL;
        utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)w->buf,
                                          (utf8proc_ssize_t)w->len, &o, (utf8proc_option_t)opt);
        if (r < 0) {
            free(o);
            return err_set(err, "normalize: %s", utf8proc_errmsg(r));
        }
        out_bytes(w, o, (size_t)r);
        free(o);
        break;
    }
    case NM_LOWERCASE:
        for (size_t i = 0; i < w->len;) {
            size_t l = utf8_valid_len((const uint8_t *)w->buf + i, w->len - i);
            if (!l) l = 1;
            uint8_t u[4];
            uint32_t cp = l > 1 || (uint8_t)w->buf[i] < 0x80
                              ? utf8_decode((const uint8_t *)w->buf + i, l)
                              : 0xFFFD;
            cp = (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp);
            out_bytes(w, u, utf8_encode(cp, u));
            i += l;
        }
        break;
    case NM_PREPEND:
        if (w->len == 0) return 0; /* HF prepends only to non-empty text */
        out_bytes(w, st->with, st->with_len);
        out_bytes(w, w->buf, w->len);
        break;
    case NM_STRIP: {
        size_t a = 0, b = w->len;
        while (st->left && a < b) {
            size_t l = utf8_valid_len((const uint8_t *)w->buf + a, b - a);
            if (!l || !is_ws(utf8_decode((const uint8_t *)w->buf + a, l))) break;
            a += l;
        }
        while (st->right && b > a) {
            size_t k = b - 1;
            while (k > a && ((uint8_t)w->buf[k] & 0xC0) == 0x80) k--;
            size_t l = utf8_valid_len((const uint8_t *)w->buf + k, b - k);
            if (!l || !is_ws(utf8_decode((const uint8_t *)w->buf + k, l))) break;
            b = k;
        }
        out_bytes(w, w->buf + a, b - a);
        break;
    }
    case NM_REPLACE: {
        size_t i = 0;
        if (st->re) {
            ensure_md(w);
            pcre2_match_data *md = w->md;
            while (i <= w->len) {
                int rc = pcre2_match(st->re, (PCRE2_SPTR)w->buf, w->len, i, 0, md, NULL);
                if (rc < 0) break;
                PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
                if (ov[1] == ov[0]) { /* empty match: step over one character */
                    size_t l = ov[0] < w->len ? utf8_lead_len((uint8_t)w->buf[ov[0]]) : 1;
                    out_bytes(w, w->buf + i, ov[0] - i);
                    out_bytes(w, st->with, st->with_len);
                    if (ov[0] < w->len) out_bytes(w, w->buf + ov[0], l);
                    i = ov[0] + l;
                    continue;
                }
                out_bytes(w, w->buf + i, ov[0] - i);
                out_bytes(w, st->with, st->with_len);
                i = ov[1];
            }
        } else {
            while (i < w->len) {
                const char *f = st->pat_len ? memmem(w->buf + i, w->len - i, st->pat, st->pat_len)
                                            : NULL;
                if (!f) break;
                size_t at = (size_t)(f - w->buf);
                out_bytes(w, w->buf + i, at - i);
                out_bytes(w, st->with, st->with_len);
                i = at + st->pat_len;
            }
        }
        if (i < w->len) out_bytes(w, w->buf + i, w->len - i);
        break;
    }
    }
    swap_bufs(w);
    return 0;
}

/* ---- splitting ---- */

struct span {
    uint32_t a, b;
    int m;
};

static void push_piece(struct pt_work *w, uint32_t off, uint32_t len, int at_start) {
    if (len == 0) return; /* HF drops empty pieces */
    grow((void **)&w->p2, &w->cap_p2, w->n2 + 1, sizeof(*w->p2));
    w->p2[w->n2++] = (struct pt_piece){off, len, at_start};
}

/* Applies HF's delimiter behaviour to the match list of one piece. */
static void emit_spans(struct pt_work *w, const struct pt_piece *pc, struct span *sp, size_t ns,
                       enum pt_behavior b, int invert) {
    if (invert)
        for (size_t i = 0; i < ns; i++) sp[i].m = !sp[i].m;
    size_t base = pc->off;
#define START(x) ((x) == 0 && pc->at_start)
    switch (b) {
    case PT_REMOVED:
        for (size_t i = 0; i < ns; i++)
            if (!sp[i].m)
                push_piece(w, (uint32_t)(base + sp[i].a), sp[i].b - sp[i].a, START(sp[i].a));
        break;
    case PT_ISOLATED:
        for (size_t i = 0; i < ns; i++)
            push_piece(w, (uint32_t)(base + sp[i].a), sp[i].b - sp[i].a, START(sp[i].a));
        break;
    case PT_CONTIGUOUS:
    case PT_MERGED_PREV: {
        /* MergedWithPrevious: a match joins the piece before it. Contiguous: consecutive
         * matches join each other. Both folded into a list of [a, b) spans. */
        size_t k = 0;
        int prev_m = 0;
        for (size_t i = 0; i < ns; i++) {
            int join = b == PT_MERGED_PREV ? (sp[i].m && !prev_m && k > 0)
                                           : (sp[i].m && prev_m && k > 0);
            if (join) sp[k - 1].b = sp[i].b;
            else sp[k++] = sp[i];
            prev_m = sp[i].m;
        }
        for (size_t i = 0; i < k; i++)
            push_piece(w, (uint32_t)(base + sp[i].a), sp[i].b - sp[i].a, START(sp[i].a));
        break;
    }
    case PT_MERGED_NEXT: {
        /* walk backwards: a match joins the piece after it */
        size_t k = ns;
        int prev_m = 0;
        for (size_t i = ns; i-- > 0;) {
            if (sp[i].m && !prev_m && k < ns) sp[k].a = sp[i].a;
            else sp[--k] = sp[i];
            prev_m = sp[i].m;
        }
        for (size_t i = k; i < ns; i++)
            push_piece(w, (uint32_t)(base + sp[i].a), sp[i].b - sp[i].a, START(sp[i].a));
        break;
    }
    }
#undef START
}

struct spans {
    struct span *v;
    size_t n, cap;
};

static void add_span(struct spans *s, size_t a, size_t b, int m) {
    grow((void **)&s->v, &s->cap, s->n + 1, sizeof(*s->v));
    s->v[s->n++] = (struct span){(uint32_t)a, (uint32_t)b, m};
}

/* Match list of one piece: alternating gaps and matches, as HF's find_matches. */
static int find_matches(const struct pt_step *st, struct pt_work *w, const char *s, size_t n,
                        struct spans *out) {
    out->n = 0;
    size_t prev = 0, i = 0;
    if (st->kind == PT_SPLIT_REGEX) {
        ensure_md(w);
        while (i <= n) {
            int rc = pcre2_match(st->re, (PCRE2_SPTR)s, n, i, 0, w->md, NULL);
            if (rc < 0) {
                if (rc == PCRE2_ERROR_NOMATCH) break;
                return -1;
            }
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(w->md);
            size_t a = ov[0], b = ov[1];
            if (a == b) { /* empty match: never a piece; step one character */
                if (a >= n) break;
                i = a + utf8_lead_len((uint8_t)s[a]);
                continue;
            }
            if (a > prev) add_span(out, prev, a, 0);
            add_span(out, a, b, 1);
            prev = i = b;
        }
    } else {
        while (i < n) {
            const char *f = memmem(s + i, n - i, st->lit, st->lit_len);
            if (!f) break;
            size_t a = (size_t)(f - s);
            if (a > prev) add_span(out, prev, a, 0);
            add_span(out, a, a + st->lit_len, 1);
            prev = i = a + st->lit_len;
        }
    }
    if (prev < n) add_span(out, prev, n, 0);
    return 0;
}

static void metaspace(const struct pt_step *st, struct pt_work *w) {
    /* Rewrites every piece into buf2: ' ' -> replacement, optional prepend, optional split
     * before each replacement (MergedWithNext). */
    w->len2 = 0;
    w->n2 = 0;
    for (size_t k = 0; k < w->n; k++) {
        const struct pt_piece *pc = &w->p[k];
        const char *s = w->buf + pc->off;
        size_t start = w->len2;
        int starts = pc->len >= st->lit_len && !memcmp(s, st->lit, st->lit_len);
        if (!starts && pc->len > 0 && s[0] == ' ') starts = 1;
        int prep = st->prepend == PT_PREPEND_ALWAYS ||
                   (st->prepend == PT_PREPEND_FIRST && pc->at_start);
        if (prep && !starts) out_bytes(w, st->lit, st->lit_len);
        for (size_t i = 0; i < pc->len; i++) {
            if (s[i] == ' ') out_bytes(w, st->lit, st->lit_len);
            else out_bytes(w, s + i, 1);
        }
        size_t end = w->len2;
        if (!st->split) {
            push_piece(w, (uint32_t)start, (uint32_t)(end - start), pc->at_start);
            continue;
        }
        size_t a = start;
        for (size_t i = start; i < end;) {
            if (i > a && i + st->lit_len <= end && !memcmp(w->buf2 + i, st->lit, st->lit_len)) {
                push_piece(w, (uint32_t)a, (uint32_t)(i - a), pc->at_start && a == start);
                a = i;
            }
            i += (i + st->lit_len <= end && !memcmp(w->buf2 + i, st->lit, st->lit_len))
                     ? st->lit_len
                     : 1;
        }
        push_piece(w, (uint32_t)a, (uint32_t)(end - a), pc->at_start && a == start);
    }
    swap_bufs(w);
}

int pretok_run(const struct pretok *pt, struct pt_work *w, const char *s, size_t n, int at_start,
               char *err) {
    if (n > UINT32_MAX / 4) return err_set(err, "text segment of %zu bytes is too long", n);
    grow((void **)&w->buf, &w->cap, n + 1, 1);
    memcpy(w->buf, s, n);
    w->len = n;
    for (size_t i = 0; i < pt->n_nm; i++)
        if (normalize(&pt->nm[i], w, err)) return -1;
    if (pt->byte_level_prefix && w->len && w->buf[0] != ' ') {
        /* ByteLevel add_prefix_space */
        w->len2 = 0;
        out_bytes(w, " ", 1);
        out_bytes(w, w->buf, w->len);
        swap_bufs(w);
    }
    if (w->len > UINT32_MAX / 4) return err_set(err, "normalized text too long");
    w->n = 0;
    grow((void **)&w->p, &w->cap_p, 1, sizeof(*w->p));
    if (w->len) w->p[w->n++] = (struct pt_piece){0, (uint32_t)w->len, at_start};

    struct spans sp = {0};
    for (size_t k = 0; k < pt->n_steps; k++) {
        const struct pt_step *st = &pt->steps[k];
        if (st->kind == PT_METASPACE) {
            metaspace(st, w);
        } else {
            w->n2 = 0;
            for (size_t i = 0; i < w->n; i++) {
                struct pt_piece pc = w->p[i];
                if (find_matches(st, w, w->buf + pc.off, pc.len, &sp)) {
                    free(sp.v);
                    return err_set(err, "pre-tokenizer failed (regex match limit)");
                }
                emit_spans(w, &pc, sp.v, sp.n, st->behavior, st->invert);
            }
        }
        struct pt_piece *p = w->p;
        w->p = w->p2;
        w->p2 = p;
        size_t c = w->cap_p;
        w->cap_p = w->cap_p2;
        w->cap_p2 = c;
        w->n = w->n2;
    }
    free(sp.v);
    return 0;
}
