#include "dtype.h"

int dtype_valid(uint32_t t) {
    switch (t) {
    case DT_F32:
    case DT_F16:
    case DT_Q4_0:
    case DT_Q4_1:
    case DT_Q8_0:
    case DT_Q4_K:
    case DT_Q6_K:
    case DT_BF16: return 1;
    default: return 0;
    }
}

int dtype_weight_ok(enum dtype t) {
    return t == DT_F8_E4M3_S32 || t == DT_I4_S32 || dtype_valid((uint32_t)t);
}

const char *dtype_name(enum dtype t) {
    if (t == DT_F8_E4M3) return "F8_E4M3";
    switch (t) {
    case DT_F32: return "F32";
    case DT_F16: return "F16";
    case DT_Q4_0: return "Q4_0";
    case DT_Q4_1: return "Q4_1";
    case DT_Q8_0: return "Q8_0";
    case DT_Q4_K: return "Q4_K";
    case DT_Q6_K: return "Q6_K";
    case DT_BF16: return "BF16";
    case DT_F8_E4M3_S32: return "F8_E4M3_S32";
    case DT_I4_S32: return "I4_S32";
    }
    return "?";
}

int dtype_block_elems(enum dtype t) {
    switch (t) {
    case DT_F32:
    case DT_F16:
    case DT_BF16: return 1;
    case DT_Q4_0:
    case DT_Q4_1:
    case DT_Q8_0:
    case DT_F8_E4M3_S32:
    case DT_I4_S32: return 32;
    case DT_Q4_K:
    case DT_Q6_K: return 256;
    }
    return 0;
}

int dtype_block_bytes(enum dtype t) {
    switch (t) {
    case DT_F32: return 4;
    case DT_F16:
    case DT_BF16: return 2;
    case DT_Q4_0: return 18;        /* f16 d + 16 bytes of nibbles */
    case DT_Q4_1: return 20;        /* f16 d, f16 m + 16 bytes */
    case DT_Q8_0: return 34;        /* f16 d + 32 int8 */
    case DT_Q4_K: return 144;       /* f16 d, dmin + 12 scale bytes + 128 nibble bytes */
    case DT_Q6_K: return 210;       /* 128 ql + 64 qh + 16 scales + f16 d */
    case DT_F8_E4M3_S32: return 36; /* f32 scale + 32 E4M3 codes */
    case DT_I4_S32: return 24;      /* f32 scale, f32 zero point + 16 bytes of nibbles */
    }
    return 0;
}

int64_t dtype_row_bytes(enum dtype t, int64_t n) {
    int be = dtype_block_elems(t);
    if (be <= 0 || n < 0 || n % be) return -1;
    int64_t r;
    if (__builtin_mul_overflow(n / be, (int64_t)dtype_block_bytes(t), &r)) return -1;
    return r;
}
