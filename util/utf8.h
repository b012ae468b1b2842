/* UTF-8 helpers (tokenizer, chat templates, request validation): strict decoding, the invalid-input
 * replacement policies the reference tokenizers follow, and GPT-2's byte <-> printable codepoint
 * mapping. Pure functions; any thread. */
#ifndef TPD_TOK_UTF8_H
#define TPD_TOK_UTF8_H

#include <stddef.h>
#include <stdint.h>

#include "sbuf.h"

/* How invalid UTF-8 in user text is turned into valid UTF-8 before tokenizing. */
enum utf8_policy {
    UTF8_KEEP = 0,    /* leave bytes as they are (SentencePiece byte fallback sees them) */
    UTF8_SUBPART = 1, /* one U+FFFD per maximal invalid subpart (Python, WHATWG, Rust) */
    UTF8_LLAMA = 2,   /* llama.cpp: lax decoder, one U+FFFD per byte it cannot decode */
};

/* Length of the valid UTF-8 sequence at s (1..4), or 0 if s does not start one. */
size_t utf8_valid_len(const uint8_t *s, size_t n);
/* 1 if the whole buffer is strict UTF-8 (RFC 3629: no overlongs, surrogates or code
 * points past U+10FFFF), else 0. */
int utf8_valid(const char *s, size_t n);
/* Decodes one valid sequence (caller checked with utf8_valid_len). */
uint32_t utf8_decode(const uint8_t *s, size_t len);
/* Writes cp (<= 0x10FFFF) as UTF-8 into out (4 bytes room); returns the length. */
size_t utf8_encode(uint32_t cp, uint8_t *out);
/* Sequence length announced by a lead byte, as SentencePiece and llama.cpp count it. */
size_t utf8_lead_len(uint8_t b);
/* Length of the longest prefix of s that is a possible start of a valid sequence but is
 * incomplete at the end of the buffer (0 if the tail is complete or invalid). */
size_t utf8_incomplete_tail(const uint8_t *s, size_t n);

/* Applies policy to s[0..n) and writes the result to *out (malloc'd, NUL-terminated),
 * *out_len its length. For UTF8_KEEP it copies. */
void utf8_sanitize(const uint8_t *s, size_t n, enum utf8_policy policy, char **out,
                   size_t *out_len);

/* Rewrites each UTF-8-encoded surrogate (ED A0..BF xx) in place as U+E000 (EE 80 80), a
 * codepoint of the same length and the same regex classes llama.cpp gives surrogates (not
 * a letter, number or space). Returns how many it rewrote. */
size_t utf8_mask_surrogates(char *s, size_t n);

/* Appends s to out with each maximal invalid subpart replaced by U+FFFD. */
void utf8_lossy_append(const uint8_t *s, size_t n, struct sbuf *out);

/* GPT-2 byte-level alphabet: byte -> codepoint and back (-1 when cp is not in it). */
uint32_t utf8_byte_to_cp(uint8_t b);
int utf8_cp_to_byte(uint32_t cp);

#endif
