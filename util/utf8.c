#include "utf8.h"

#include <stdlib.h>
#include <string.h>

#include "sbuf.h"

/* For a lead byte of a multi-byte sequence (RFC 3629 table 3-7): the sequence length and
 * the allowed range of the second byte; 0 when b cannot start one. */
static size_t lead_info(uint8_t b, uint8_t *lo, uint8_t *hi) {
    *lo = 0x80;
    *hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) return 2;
    if (b == 0xE0) {
        *lo = 0xA0;
        return 3;
    }
    if (b == 0xED) {
        *hi = 0x9F;
        return 3;
    }
    if (b >= 0xE1 && b <= 0xEF) return 3;
    if (b == 0xF0) {
        *lo = 0x90;
        return 4;
    }
    if (b == 0xF4) {
        *hi = 0x8F;
        return 4;
    }
    if (b >= 0xF1 && b <= 0xF3) return 4;
    return 0;
}

size_t utf8_valid_len(const uint8_t *s, size_t n) {
    if (n == 0) return 0;
    if (s[0] < 0x80) return 1;
    uint8_t lo, hi;
    size_t len = lead_info(s[0], &lo, &hi);
    if (len == 0 || n < len) return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < len; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    return len;
}

int utf8_valid(const char *str, size_t n) {
    const uint8_t *s = (const uint8_t *)str;
    for (size_t i = 0, k; i < n; i += k)
        if (!(k = utf8_valid_len(s + i, n - i))) return 0;
    return 1;
}

/* Number of bytes of the maximal subpart at s (>= 1): the lead byte plus the continuation
 * bytes that could still belong to a valid sequence. */
static size_t utf8_subpart_len(const uint8_t *s, size_t n) {
    uint8_t lo, hi;
    size_t len = lead_info(s[0], &lo, &hi);
    if (len == 0) return 1;
    size_t i = 1;
    if (i < n && i < len && s[i] >= lo && s[i] <= hi) i++;
    else return 1;
    while (i < n && i < len && (s[i] & 0xC0) == 0x80) i++;
    return i;
}

size_t utf8_incomplete_tail(const uint8_t *s, size_t n) {
    /* A valid sequence is at most 4 bytes, so only the last 3 can be an incomplete start. */
    for (size_t k = n < 3 ? n : 3; k >= 1; k--) {
        const uint8_t *t = s + n - k;
        if (*t < 0xC0) continue;
        size_t sub = utf8_subpart_len(t, k);
        size_t need = utf8_lead_len(*t);
        if (sub == k && k < need && (*t >= 0xC2 && *t <= 0xF4)) return k;
    }
    return 0;
}

uint32_t utf8_decode(const uint8_t *s, size_t len) {
    switch (len) {
    case 1: return s[0];
    case 2: return ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
    case 3: return ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    default:
        return ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
               ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
    }
}

size_t utf8_encode(uint32_t cp, uint8_t *out) {
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | (cp >> 6));
        out[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | (cp >> 12));
        out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | (cp >> 18));
    out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

size_t utf8_lead_len(uint8_t b) {
    static const uint8_t lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lookup[b >> 4];
}

void utf8_lossy_append(const uint8_t *s, size_t n, struct sbuf *out) {
    size_t i = 0, run = 0; /* s[run..i) is valid and not yet appended */
    while (i < n) {
        size_t l = utf8_valid_len(s + i, n - i);
        if (l) {
            i += l;
            continue;
        }
        sbuf_add(out, (const char *)s + run, i - run);
        sbuf_add(out, "\xEF\xBF\xBD", 3);
        i += utf8_subpart_len(s + i, n - i);
        run = i;
    }
    sbuf_add(out, (const char *)s + run, n - run);
}

/* llama.cpp's decoder: only the lead byte's high bits and the continuation bytes' top two
 * bits are checked (overlong forms and surrogates decode); anything else is one U+FFFD and
 * a one-byte step. The codepoint is then re-encoded, so an overlong form comes out short. */
static size_t llama_decode_one(const uint8_t *s, size_t n, uint32_t *cp) {
    uint8_t b = s[0];
    if (!(b & 0x80)) {
        *cp = b;
        return 1;
    }
    size_t len;
    if (!(b & 0x40)) return 0;
    else if (!(b & 0x20)) len = 2;
    else if (!(b & 0x10)) len = 3;
    else if (!(b & 0x08)) len = 4;
    else return 0;
    if (len > n) return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    *cp = utf8_decode(s, len);
    return len;
}

void utf8_sanitize(const uint8_t *s, size_t n, enum utf8_policy policy, char **out,
                   size_t *out_len) {
    struct sbuf b = {0};
    if (policy == UTF8_KEEP) {
        sbuf_add(&b, (const char *)s, n);
    } else if (policy == UTF8_SUBPART) {
        utf8_lossy_append(s, n, &b);
    } else {
        for (size_t i = 0; i < n;) {
            uint32_t cp;
            size_t l = llama_decode_one(s + i, n - i, &cp);
            /* Surrogates pass through re-encoded, as in llama.cpp (the regexes then see
             * invalid UTF-8, which PCRE2 never matches). llama.cpp aborts on codepoints above
             * U+10FFFF; they become U+FFFD here. */
            if (l == 0 || cp > 0x10FFFF) {
                i += l ? l : 1;
                cp = 0xFFFD;
            } else {
                i += l;
            }
            uint8_t u[4];
            sbuf_add(&b, (const char *)u, utf8_encode(cp, u));
        }
    }
    sbuf_add(&b, "", 0); /* empty text still gets a buffer */
    *out = b.p;
    *out_len = b.len;
}

/* GPT-2 keeps printable Latin-1 bytes as themselves and moves the other 68 bytes to
 * U+0100.. in byte order, so every byte is a visible character in the vocabulary. */
static int byte_printable(unsigned b) {
    return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
}

uint32_t utf8_byte_to_cp(uint8_t b) {
    if (byte_printable(b)) return b;
    if (b <= 32) return 256u + b; /* 33 control bytes and space */
    if (b >= 127 && b <= 160) return 289u + (b - 127u);
    return 323; /* 173, the soft hyphen */
}

int utf8_cp_to_byte(uint32_t cp) {
    if (cp < 256) return byte_printable(cp) ? (int)cp : -1;
    if (cp <= 288) return (int)(cp - 256);
    if (cp <= 322) return (int)(cp - 289 + 127);
    if (cp == 323) return 173;
    return -1;
}

size_t utf8_mask_surrogates(char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i + 2 < n; i++) {
        uint8_t *u = (uint8_t *)s + i;
        if (u[0] == 0xED && u[1] >= 0xA0 && u[1] <= 0xBF && (u[2] & 0xC0) == 0x80) {
            u[0] = 0xEE;
            u[1] = 0x80;
            u[2] = 0x80;
            i += 2;
            k++;
        }
    }
    return k;
}
