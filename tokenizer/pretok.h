/* Normalizers and pre-tokenizers (the HF tokenizers pipeline, and llama.cpp's regex lists
 * expressed in it): a segment of text is normalized, then cut into pieces by a list of
 * steps (regex or literal splits with HF's five delimiter behaviours, digit splits,
 * Metaspace). Regexes run in PCRE2 with JIT exactly as the tokenizer wrote them.
 * Built at load time; running needs a per-call struct pt_work (any thread). */
#ifndef TPD_TOK_PRETOK_H
#define TPD_TOK_PRETOK_H

#include <stddef.h>
#include <stdint.h>

enum pt_behavior { PT_REMOVED, PT_ISOLATED, PT_MERGED_PREV, PT_MERGED_NEXT, PT_CONTIGUOUS };
enum pt_kind { PT_SPLIT_REGEX, PT_SPLIT_LITERAL, PT_METASPACE };
enum pt_prepend { PT_PREPEND_NEVER, PT_PREPEND_FIRST, PT_PREPEND_ALWAYS };

struct pt_step {
    enum pt_kind kind;
    enum pt_behavior behavior;
    int invert;
    void *re;  /* pcre2_code_8 * */
    char *lit; /* literal pattern, or Metaspace replacement */
    size_t lit_len;
    enum pt_prepend prepend; /* Metaspace */
    int split;               /* Metaspace: split on the replacement */
};

enum nm_kind { NM_NFC, NM_NFD, NM_NFKC, NM_NFKD, NM_LOWERCASE, NM_REPLACE, NM_PREPEND, NM_STRIP };

struct nm_step {
    enum nm_kind kind;
    void *re;         /* NM_REPLACE with a regex pattern */
    char *pat, *with; /* NM_REPLACE literal pattern / content; NM_PREPEND text */
    size_t pat_len, with_len;
    int left, right; /* NM_STRIP */
};

struct pretok {
    struct nm_step *nm;
    size_t n_nm;
    struct pt_step *steps;
    size_t n_steps;
    int byte_level;        /* pieces are then mapped through the GPT-2 byte alphabet */
    int byte_level_prefix; /* ByteLevel add_prefix_space */
};

struct pt_piece {
    uint32_t off, len;
    int at_start; /* begins at offset 0 of the original text (Metaspace "first") */
};

struct pt_work {
    char *buf, *buf2;
    size_t len, cap, len2, cap2;
    struct pt_piece *p, *p2;
    size_t n, cap_p, n2, cap_p2;
    void *md; /* pcre2_match_data_8 * */
};

/* Adds a regex split step; pattern is compiled with UTF and Unicode properties. */
int pretok_add_regex(struct pretok *pt, const char *pattern, size_t len, enum pt_behavior b,
                     int invert, char *err);
int pretok_add_literal(struct pretok *pt, const char *s, size_t len, enum pt_behavior b, int invert,
                       char *err);
int pretok_add_metaspace(struct pretok *pt, const char *repl, size_t len, enum pt_prepend p,
                         int split, char *err);
int pretok_add_norm(struct pretok *pt, const struct nm_step *step, const char *regex, char *err);
void pretok_free(struct pretok *pt);

/* Normalizes s[0..n) (valid UTF-8) into w->buf and cuts it into w->p[0..w->n).
 * at_start: the segment begins the original text. Returns 0, or -1 with err. */
int pretok_run(const struct pretok *pt, struct pt_work *w, const char *s, size_t n, int at_start,
               char *err);
void pt_work_free(struct pt_work *w);

#endif
