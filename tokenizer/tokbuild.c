#include "tokbuild.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/err.h"
#include "../util/fatal.h"

struct tokenizer *tokenizer_alloc(void) {
    struct tokenizer *t = xcalloc(1, sizeof(*t));
    t->bos = t->eos = t->eot = t->unk = t->pad = -1;
    t->bpe.unk = -1;
    pthread_mutex_init(&t->cache_lock, NULL);
    return t;
}

void tokenizer_free(struct tokenizer *t) {
    if (!t) return;
    if (t->dec)
        for (uint32_t i = 0; i < t->v.n; i++) free(t->dec[i]);
    free(t->dec);
    free(t->dec_len);
    for (size_t i = 0; i < t->n_added; i++) free(t->added[i].s);
    free(t->added);
    free(t->trie);
    free(t->prefix_ids);
    free(t->suffix_ids);
    free(t->eog);
    free(t->chat_template);
    free(t->bos_text);
    free(t->eos_text);
    vocab_free(&t->v);
    pretok_free(&t->pt);
    bpe_cache_free(t->cache);
    pthread_mutex_destroy(&t->cache_lock);
    free(t);
}

int tokenizer_add_token(struct tokenizer *t, int32_t id, const char *s, size_t len, int special,
                        int lstrip, int rstrip, int single_word, char *err) {
    if (id < 0 || (uint32_t)id >= t->v.n) return err_set(err, "added token id %d out of range", id);
    if (len == 0 || len > 4096) return err_set(err, "added token %d has length %zu", id, len);
    struct added_tok *a = t->added = xrealloc(t->added, (t->n_added + 1) * sizeof(*a));
    char *c = xstrndup(s, len);
    a[t->n_added++] = (struct added_tok){id,
                                         c,
                                         (uint32_t)len,
                                         (uint8_t) !!special,
                                         (uint8_t) !!lstrip,
                                         (uint8_t) !!rstrip,
                                         (uint8_t) !!single_word};
    return 0;
}

/* ---- added-token trie: leftmost-longest match at each position ---- */

static void trie_insert(struct tokenizer *t, size_t *cap, size_t idx) {
    const struct added_tok *a = &t->added[idx];
    uint32_t node = 0;
    for (uint32_t i = 0; i < a->len; i++) {
        uint8_t b = (uint8_t)a->s[i];
        uint32_t c = t->trie[node].child, last = 0;
        while (c && t->trie[c].byte != b) {
            last = c;
            c = t->trie[c].sibling;
        }
        if (!c) {
            if (t->n_trie == *cap) {
                size_t nc = *cap * 2;
                t->trie = xrealloc(t->trie, nc * sizeof(*t->trie));
                *cap = nc;
            }
            c = (uint32_t)t->n_trie++;
            t->trie[c] = (struct trie_node){-1, 0, 0, b};
            if (last) t->trie[last].sibling = c;
            else t->trie[node].child = c;
        }
        node = c;
    }
    /* the same text twice: the first entry wins, as in the references */
    if (t->trie[node].tok < 0) t->trie[node].tok = (int32_t)idx;
}

/* Texts that end generation when they are control tokens (llama.cpp's list). */
static const char *const eog_texts[] = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
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
    "<｜end▁of▁sentence｜>",
    NULL,
};

static void add_eog(struct tokenizer *t, int32_t id) {
    if (id < 0) return;
    for (size_t i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) return;
    t->eog = xrealloc(t->eog, (t->n_eog + 1) * sizeof(*t->eog));
    t->eog[t->n_eog++] = id;
}

/* Bytes a token stands for: byte-level tokens map back through the GPT-2 alphabet (raw
 * UTF-8 when a character is outside it), SentencePiece tokens turn U+2581 into a space and
 * <0xNN> into the byte; added tokens are their text. */
static void decode_entry(struct tokenizer *t, uint32_t id, int is_added) {
    const char *s = t->v.str[id];
    size_t n = t->v.len[id];
    char *o = xmalloc(n + 1);
    size_t k = 0;
    int byte_tok = t->v.attr[id] == TOK_BYTE ||
                   (!t->bpe.byte_level && n == 6 && !memcmp(s, "<0x", 3) && s[5] == '>' &&
                    t->v.byte_fallback[strtol(s + 3, NULL, 16) & 0xFF] == (int32_t)id);
    if (is_added) {
        memcpy(o, s, n);
        k = n;
    } else if (byte_tok && n == 6) {
        o[k++] = (char)strtol(s + 3, NULL, 16);
    } else if (t->bpe.byte_level) {
        int ok = 1;
        for (size_t i = 0; i < n;) {
            size_t l = utf8_valid_len((const uint8_t *)s + i, n - i);
            int b = l ? utf8_cp_to_byte(utf8_decode((const uint8_t *)s + i, l)) : -1;
            if (b < 0) {
                ok = 0;
                break;
            }
            o[k++] = (char)b;
            i += l;
        }
        if (!ok) {
            memcpy(o, s, n);
            k = n;
        }
    } else {
        for (size_t i = 0; i < n;) {
            if (i + 3 <= n && !memcmp(s + i, "\xe2\x96\x81", 3)) {
                o[k++] = ' ';
                i += 3;
            } else o[k++] = s[i++];
        }
    }
    o[k] = 0;
    t->dec[id] = o;
    t->dec_len[id] = (uint32_t)k;
}

void tokenizer_finish(struct tokenizer *t) {
    size_t cap = 256;
    t->trie = xcalloc(cap, sizeof(*t->trie));
    t->trie[0] = (struct trie_node){-1, 0, 0, 0};
    t->n_trie = 1;
    for (size_t i = 0; i < t->n_added; i++) trie_insert(t, &cap, i);
    for (uint32_t c = t->trie[0].child; c; c = t->trie[c].sibling)
        t->trie_root[t->trie[c].byte] = c;

    t->dec = xcalloc(t->v.n, sizeof(*t->dec));
    t->dec_len = xcalloc(t->v.n, sizeof(*t->dec_len));
    uint8_t *is_added = xcalloc(t->v.n, 1);
    for (size_t i = 0; i < t->n_added; i++) is_added[t->added[i].id] = 1;
    for (uint32_t id = 0; id < t->v.n; id++) {
        int a = is_added[id] || t->v.attr[id] == TOK_CONTROL || t->v.attr[id] == TOK_USER_DEFINED;
        decode_entry(t, id, a);
    }
    free(is_added);

    add_eog(t, t->eos);
    add_eog(t, t->eot);
    for (int i = 0; eog_texts[i]; i++) {
        int32_t id = vocab_find(&t->v, eog_texts[i], strlen(eog_texts[i]));
        if (id >= 0 && (id >= 0 && (uint32_t)id < t->v.n && t->v.attr[id] == TOK_CONTROL))
            add_eog(t, id);
    }
    t->cache = bpe_cache_new();
}
