/* One hexadecimal digit's value. */
#ifndef TPD_UTIL_HEX_H
#define TPD_UTIL_HEX_H

/* The value of hexadecimal digit c (0-9, a-f, A-F), -1 for any other character. */
static inline int hex_digit(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

#endif
