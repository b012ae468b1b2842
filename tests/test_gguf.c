// link: tpd_model
/* GGUF reader tests in the spirit of llama.cpp's test-gguf: small valid files written
 * here byte by byte must load with the right metadata and tensor infos; hand-made corrupt
 * variants (every truncation point, bad counts, lengths, types, offsets, duplicates) must
 * be refused with a message that names the file and the problem. The real SmolLM2 file
 * is compared against what the `gguf` Python package reads (tests/data/smollm2_q4_1.json).
 *
 * With TPD_GGUF_FILE and TPD_GGUF_EXPECT set, only the JSON comparison runs, on that
 * file (tests/py/test_modelfile_py.py uses this for files written by gguf.GGUFWriter). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/gguf.h"
#include "testutil.h"
#include "util/err.h"

/* ---- a tiny GGUF writer -------------------------------------------------------------- */

#define NT 10
/* Sizes from the GGML block layouts (Q8_0 34 B / 32, Q4_0 18 B / 32, Q4_1 20 B / 32,
 * Q4_K 144 B / 256, Q6_K 210 B / 256), worked out by hand. */
static const struct {
    const char *name;
    uint32_t type, n_dims;
    int64_t ne[4];
    uint64_t nbytes;
} TD[NT] = {
    {"t.f32", 0, 2, {4, 3, 1, 1}, 48},      {"t.f16", 1, 2, {8, 2, 1, 1}, 32},
    {"t.bf16", 30, 1, {6, 1, 1, 1}, 12},    {"t.q8_0", 8, 2, {64, 2, 1, 1}, 136},
    {"t.q4_0", 2, 2, {32, 3, 1, 1}, 54},    {"t.q4_1", 3, 1, {32, 1, 1, 1}, 20},
    {"t.q4_k", 12, 2, {256, 2, 1, 1}, 288}, {"t.q6_k", 14, 1, {256, 1, 1, 1}, 210},
    {"t.3d", 0, 3, {2, 3, 4, 1}, 96},       {"t.4d", 0, 4, {2, 2, 2, 2}, 64},
};

#define NKV 16
enum {
    KV_ARCH,
    KV_U8,
    KV_I8,
    KV_U16,
    KV_I16,
    KV_U32,
    KV_I32,
    KV_F32,
    KV_BOOL,
    KV_U64,
    KV_I64,
    KV_F64,
    KV_ARR_I32,
    KV_ARR_STR,
    KV_ARR_F32,
    KV_EMPTY
};

struct opts {
    uint32_t version;
    uint32_t alignment;      /* 0: no general.alignment key (default 32) */
    uint32_t alignment_type; /* GGUF type of the alignment value */
};

/* Where each field landed, for patching corrupt variants. */
struct marks {
    size_t version, n_tensors, n_kv;
    size_t key[NKV + 1], val[NKV + 1];
    size_t t_name[NT], t_ndims[NT], t_ne[NT], t_type[NT], t_off[NT];
    size_t header_end, data_start;
    uint64_t t_abs[NT];
};

static uint8_t pattern(int t, uint64_t j) { return (uint8_t)(t * 31 + j * 7 + 1); }

static struct tu_buf build(const struct opts *o, struct marks *mk) {
    struct tu_buf b = {0};
    uint32_t align = o->alignment ? o->alignment : 32;
    memset(mk, 0, sizeof *mk);
    tu_put(&b, "GGUF", 4);
    mk->version = b.n;
    tu_put_u32(&b, o->version ? o->version : 3);
    mk->n_tensors = b.n;
    tu_put_u64(&b, NT);
    mk->n_kv = b.n;
    tu_put_u64(&b, NKV + (o->alignment ? 1 : 0));
#define KEY(i, k, t) \
    mk->key[i] = b.n; \
    tu_put_str(&b, k); \
    tu_put_u32(&b, t); \
    mk->val[i] = b.n;
    KEY(KV_ARCH, "general.architecture", GGUF_STRING) tu_put_str(&b, "llama");
    KEY(KV_U8, "k.u8", GGUF_UINT8) tu_put_u8(&b, 200);
    KEY(KV_I8, "k.i8", GGUF_INT8) tu_put_u8(&b, (uint8_t)-100);
    KEY(KV_U16, "k.u16", GGUF_UINT16) tu_put_u16(&b, 60000);
    KEY(KV_I16, "k.i16", GGUF_INT16) tu_put_u16(&b, (uint16_t)-30000);
    KEY(KV_U32, "k.u32", GGUF_UINT32) tu_put_u32(&b, 4000000000u);
    KEY(KV_I32, "k.i32", GGUF_INT32) tu_put_u32(&b, (uint32_t)-2000000000);
    KEY(KV_F32, "k.f32", GGUF_FLOAT32) tu_put_f32(&b, 1.5f);
    KEY(KV_BOOL, "k.bool", GGUF_BOOL) tu_put_u8(&b, 1);
    KEY(KV_U64, "k.u64", GGUF_UINT64) tu_put_u64(&b, (1ull << 40) | 5);
    KEY(KV_I64, "k.i64", GGUF_INT64) tu_put_u64(&b, (uint64_t) - (1ll << 40));
    KEY(KV_F64, "k.f64", GGUF_FLOAT64) tu_put_f64(&b, -2.25);
    KEY(KV_ARR_I32, "k.arr_i32", GGUF_ARRAY) tu_put_u32(&b, GGUF_INT32);
    tu_put_u64(&b, 5);
    for (int i = 0; i < 5; i++) tu_put_u32(&b, (uint32_t)(i % 2 ? -i * 1000 : i * 1000));
    KEY(KV_ARR_STR, "k.arr_str", GGUF_ARRAY) tu_put_u32(&b, GGUF_STRING);
    tu_put_u64(&b, 3);
    tu_put_str(&b, "a");
    tu_put_str(&b, "bc");
    tu_put_str(&b, "");
    KEY(KV_ARR_F32, "k.arr_f32", GGUF_ARRAY) tu_put_u32(&b, GGUF_FLOAT32);
    tu_put_u64(&b, 2);
    tu_put_f32(&b, 0.5f);
    tu_put_f32(&b, -1.5f);
    KEY(KV_EMPTY, "k.empty", GGUF_ARRAY) tu_put_u32(&b, GGUF_UINT8);
    tu_put_u64(&b, 0);
    if (o->alignment) {
        KEY(NKV, "general.alignment", o->alignment_type ? o->alignment_type : GGUF_UINT32)
        if (o->alignment_type == GGUF_UINT64) tu_put_u64(&b, o->alignment);
        else tu_put_u32(&b, o->alignment);
    }
#undef KEY
    uint64_t rel = 0;
    for (int i = 0; i < NT; i++) {
        mk->t_name[i] = b.n;
        tu_put_str(&b, TD[i].name);
        mk->t_ndims[i] = b.n;
        tu_put_u32(&b, TD[i].n_dims);
        mk->t_ne[i] = b.n;
        for (uint32_t d = 0; d < TD[i].n_dims; d++) tu_put_u64(&b, (uint64_t)TD[i].ne[d]);
        mk->t_type[i] = b.n;
        tu_put_u32(&b, TD[i].type);
        mk->t_off[i] = b.n;
        tu_put_u64(&b, rel);
        mk->t_abs[i] = rel; /* made absolute below */
        rel = (rel + TD[i].nbytes + align - 1) / align * align;
    }
    mk->header_end = b.n;
    while (b.n % align) tu_put_u8(&b, 0);
    mk->data_start = b.n;
    for (int i = 0; i < NT; i++) {
        mk->t_abs[i] += mk->data_start;
        while (b.n < mk->t_abs[i]) tu_put_u8(&b, 0);
        for (uint64_t j = 0; j < TD[i].nbytes; j++) tu_put_u8(&b, pattern(i, j));
    }
    return b;
}

/* ---- valid files ---------------------------------------------------------------------- */

static void check_valid(const struct gguf_file *f, const struct marks *mk, uint32_t align) {
    assert_int_equal(gguf_n_kv(f), NKV + (align != 32 ? 1 : 0));
    assert_int_equal(gguf_alignment(f), align);
    assert_int_equal(gguf_data_offset(f), mk->data_start);
    assert_int_equal(gguf_data_offset(f) % align, 0);
    const struct gguf_str *s = gguf_get_str(f, "general.architecture");
    assert_non_null(s);
    assert_int_equal(s->len, 5);
    assert_memory_equal(s->s, "llama", 5);
    uint32_t u32;
    int64_t i64;
    uint64_t u64;
    float f32;
    double f64;
    int b;
    assert_int_equal(gguf_get_u32(f, "k.u8", &u32), 0);
    assert_int_equal(u32, 200);
    assert_int_equal(gguf_get_i64(f, "k.i8", &i64), 0);
    assert_int_equal(i64, -100);
    assert_int_equal(gguf_get_u32(f, "k.u16", &u32), 0);
    assert_int_equal(u32, 60000);
    assert_int_equal(gguf_get_i64(f, "k.i16", &i64), 0);
    assert_int_equal(i64, -30000);
    assert_int_equal(gguf_get_u32(f, "k.u32", &u32), 0);
    assert_int_equal(u32, 4000000000u);
    assert_int_equal(gguf_get_i64(f, "k.i32", &i64), 0);
    assert_int_equal(i64, -2000000000);
    assert_int_equal(gguf_get_f32(f, "k.f32", &f32), 0);
    assert_true(f32 == 1.5f);
    assert_int_equal(gguf_get_bool(f, "k.bool", &b), 0);
    assert_int_equal(b, 1);
    assert_int_equal(gguf_get_u64(f, "k.u64", &u64), 0);
    assert_int_equal(u64, (1ull << 40) | 5);
    assert_int_equal(gguf_get_i64(f, "k.u64", &i64), 0);
    assert_int_equal(i64, (1ll << 40) | 5);
    assert_int_equal(gguf_get_i64(f, "k.i64", &i64), 0);
    assert_int_equal(i64, -(1ll << 40));
    assert_int_equal(gguf_get_f64(f, "k.f64", &f64), 0);
    assert_true(f64 == -2.25);
    /* Values that do not fit the asked type, wrong types, absent keys. */
    assert_int_equal(gguf_get_u32(f, "k.i8", &u32), -1);
    assert_int_equal(gguf_get_u32(f, "k.u64", &u32), -1);
    assert_int_equal(gguf_get_u64(f, "k.i64", &u64), -1);
    assert_int_equal(gguf_get_f32(f, "k.u8", &f32), -1);
    assert_int_equal(gguf_get_bool(f, "k.u8", &b), -1);
    assert_null(gguf_get_str(f, "k.u32"));
    assert_int_equal(gguf_get_u32(f, "no.such.key", &u32), -1);
    assert_int_equal(gguf_has_key(f, "no.such.key"), 0);
    assert_int_equal(gguf_has_key(f, "k.f64"), 1);
    assert_int_equal(gguf_key_type(f, "k.f64"), GGUF_FLOAT64);
    assert_int_equal(gguf_key_type(f, "nope"), -1);
    /* Iteration in file order. */
    const struct gguf_str *k = gguf_kv_key(f, KV_I16);
    assert_int_equal(k->len, 5);
    assert_memory_equal(k->s, "k.i16", 5);
    assert_int_equal(gguf_kv_type(f, KV_ARR_STR), GGUF_ARRAY);

    enum gguf_vtype et;
    uint64_t n;
    const void *data;
    assert_int_equal(gguf_get_arr(f, "k.arr_i32", &et, &n, &data), 0);
    assert_int_equal(et, GGUF_INT32);
    assert_int_equal(n, 5);
    for (int i = 0; i < 5; i++)
        assert_int_equal(((const int32_t *)data)[i], i % 2 ? -i * 1000 : i * 1000);
    assert_int_equal(gguf_get_arr(f, "k.arr_str", &et, &n, &data), 0);
    assert_int_equal(et, GGUF_STRING);
    assert_int_equal(n, 3);
    const struct gguf_str *ss = data;
    assert_int_equal(ss[0].len, 1);
    assert_memory_equal(ss[0].s, "a", 1);
    assert_int_equal(ss[1].len, 2);
    assert_memory_equal(ss[1].s, "bc", 2);
    assert_int_equal(ss[2].len, 0);
    assert_int_equal(gguf_get_arr(f, "k.arr_f32", &et, &n, &data), 0);
    assert_int_equal(n, 2);
    assert_true(((const float *)data)[1] == -1.5f);
    assert_int_equal(gguf_get_arr(f, "k.empty", &et, &n, &data), 0);
    assert_int_equal(et, GGUF_UINT8);
    assert_int_equal(n, 0);
    assert_int_equal(gguf_get_arr(f, "k.u8", &et, &n, &data), -1);

    assert_int_equal(gguf_n_tensors(f), NT);
    for (int i = 0; i < NT; i++) {
        const struct gguf_tensor_info *t = gguf_tensor(f, (uint64_t)i);
        assert_int_equal(t->name.len, strlen(TD[i].name));
        assert_memory_equal(t->name.s, TD[i].name, t->name.len);
        assert_int_equal(t->n_dims, TD[i].n_dims);
        for (int d = 0; d < 4; d++) assert_int_equal(t->ne[d], TD[i].ne[d]);
        assert_int_equal(t->type, TD[i].type);
        assert_int_equal(t->offset, mk->t_abs[i]);
        assert_int_equal(t->offset % align, 0);
        assert_int_equal(t->nbytes, TD[i].nbytes);
        assert_ptr_equal(gguf_find_tensor(f, TD[i].name), t);
    }
    assert_null(gguf_tensor(f, NT));
    assert_null(gguf_find_tensor(f, "t.none"));
}

static void test_valid(void **state) {
    (void)state;
    struct marks mk;
    struct opts o = {0};
    struct tu_buf b = build(&o, &mk);
    const char *path = tu_write_tmp("valid.gguf", b.p, b.n);
    struct gguf_file *f;
    char err[ERR_LEN] = "";
    assert_int_equal(gguf_open(&f, path, err), 0);
    assert_int_equal(gguf_version(f), 3);
    assert_true(gguf_fd(f) >= 0);
    check_valid(f, &mk, 32);
    /* The data really is where the infos say. */
    for (int i = 0; i < NT; i++) {
        const struct gguf_tensor_info *t = gguf_tensor(f, (uint64_t)i);
        uint8_t got[512];
        assert_int_equal(pread(gguf_fd(f), got, t->nbytes, (off_t)t->offset), (ssize_t)t->nbytes);
        for (uint64_t j = 0; j < t->nbytes; j++) assert_int_equal(got[j], pattern(i, j));
    }
    gguf_close(f);
    /* Same image from memory. */
    assert_int_equal(gguf_open_buf(&f, b.p, b.n, "mem.gguf", err), 0);
    assert_int_equal(gguf_fd(f), -1);
    check_valid(f, &mk, 32);
    gguf_close(f);
    free(b.p);
}

static void test_version2(void **state) {
    (void)state;
    struct marks mk;
    struct opts o = {.version = 2};
    struct tu_buf b = build(&o, &mk);
    struct gguf_file *f;
    char err[ERR_LEN] = "";
    assert_int_equal(gguf_open(&f, tu_write_tmp("v2.gguf", b.p, b.n), err), 0);
    assert_int_equal(gguf_version(f), 2);
    check_valid(f, &mk, 32);
    gguf_close(f);
    free(b.p);
}

static void test_alignment(void **state) {
    (void)state;
    struct marks mk;
    struct opts o = {.alignment = 64};
    struct tu_buf b = build(&o, &mk);
    struct gguf_file *f;
    char err[ERR_LEN] = "";
    assert_int_equal(gguf_open_buf(&f, b.p, b.n, "a64.gguf", err), 0);
    check_valid(f, &mk, 64);
    gguf_close(f);
    free(b.p);

    static const struct {
        uint32_t a, type;
        const char *msg;
    } bad[] = {
        {48, GGUF_UINT32, "general.alignment 48 is not a power of two"},
        {96, GGUF_UINT32, "general.alignment 96 is not a power of two"},
        {64, GGUF_UINT64, "general.alignment must be a uint32"},
        {64, GGUF_INT32, "general.alignment must be a uint32"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        o.alignment = bad[i].a;
        o.alignment_type = bad[i].type;
        b = build(&o, &mk);
        f = (struct gguf_file *)1;
        assert_int_equal(gguf_open_buf(&f, b.p, b.n, "abad.gguf", err), -1);
        assert_null(f);
        assert_non_null(strstr(err, bad[i].msg));
        assert_non_null(strstr(err, "abad.gguf"));
        free(b.p);
    }
    /* Alignment 0 cannot be laid out by the writer; patch it in. */
    o.alignment = 64;
    o.alignment_type = GGUF_UINT32;
    b = build(&o, &mk);
    memset(b.p + mk.val[NKV], 0, 4);
    assert_int_equal(gguf_open_buf(&f, b.p, b.n, "a0.gguf", err), -1);
    assert_non_null(strstr(err, "general.alignment 0 is not a power of two"));
    free(b.p);
}

/* ---- truncation at every byte --------------------------------------------------------- */

static void test_truncated_everywhere(void **state) {
    (void)state;
    struct marks mk;
    struct opts o = {0};
    struct tu_buf b = build(&o, &mk);
    char err[ERR_LEN];
    for (size_t cut = 0; cut < b.n; cut++) {
        /* An exact-size copy, so that ASan catches any read past the end. */
        uint8_t *copy = malloc(cut ? cut : 1);
        memcpy(copy, b.p, cut);
        struct gguf_file *f;
        err[0] = 0;
        int rc = gguf_open_buf(&f, copy, cut, "cut.gguf", err);
        if (rc != -1) fail_msg("cut at %zu of %zu was accepted", cut, b.n);
        assert_non_null(strstr(err, "cut.gguf: "));
        if (cut < mk.header_end) {
            if (!strstr(err, "truncated")) fail_msg("cut %zu: %s", cut, err);
        } else if (!strstr(err, "past end of file")) {
            fail_msg("cut %zu: %s", cut, err);
        }
        free(copy);
    }
    /* A few of them through real files and mmap, including an empty file. */
    size_t cuts[] = {0,
                     3,
                     4,
                     23,
                     mk.val[KV_ARR_STR] + 5,
                     mk.header_end - 1,
                     mk.header_end,
                     mk.data_start + 1,
                     b.n - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        struct gguf_file *f;
        const char *path = tu_write_tmp("trunc.gguf", b.p, cuts[i]);
        assert_int_equal(gguf_open(&f, path, err), -1);
        assert_non_null(strstr(err, path));
        assert_true(strstr(err, "truncated") || strstr(err, "past end of file"));
    }
    free(b.p);
}

/* ---- corrupt variants ----------------------------------------------------------------- */

enum patch_kind { P_U32, P_U64, P_BYTES };

struct corrupt {
    const char *desc;
    enum patch_kind kind;
    int where;     /* which mark (see field_pos) */
    int index;     /* tensor / kv index, or dimension for W_NE */
    int64_t delta; /* added to the mark */
    uint64_t value;
    const char *bytes;
    const char *msg; /* substring the error must contain */
};

enum { W_MAGIC, W_VERSION, W_NT, W_NKV, W_KEY, W_VAL, W_TNAME, W_TNDIMS, W_TNE, W_TTYPE, W_TOFF };

static size_t field_pos(const struct marks *mk, int where, int index) {
    switch (where) {
    case W_MAGIC: return 0;
    case W_VERSION: return mk->version;
    case W_NT: return mk->n_tensors;
    case W_NKV: return mk->n_kv;
    case W_KEY: return mk->key[index];
    case W_VAL: return mk->val[index];
    case W_TNAME: return mk->t_name[index];
    case W_TNDIMS: return mk->t_ndims[index];
    case W_TNE: return mk->t_ne[index];
    case W_TTYPE: return mk->t_type[index];
    case W_TOFF: return mk->t_off[index];
    }
    return 0;
}

static const struct corrupt CORRUPT[] = {
    {"bad magic", P_BYTES, W_MAGIC, 0, 0, 0, "GGUX", "not a GGUF file (bad magic"},
    {"version 1", P_U32, W_VERSION, 0, 0, 1, NULL, "GGUF version 1 is not supported"},
    {"version 99", P_U32, W_VERSION, 0, 0, 99, NULL, "unsupported GGUF version 99"},
    {"big-endian", P_U32, W_VERSION, 0, 0, 0x03000000, NULL, "big-endian"},
    {"tensor count 2^63", P_U64, W_NT, 0, 0, 1ull << 63, NULL,
     "tensor count 9223372036854775808 is too large"},
    {"tensor count 2^20+1", P_U64, W_NT, 0, 0, (1ull << 20) + 1, NULL,
     "tensor count 1048577 is too large"},
    {"tensor count beyond file", P_U64, W_NT, 0, 0, 100000, NULL,
     "file truncated or corrupt: 100000 tensors and 16 metadata entries need at least"},
    {"kv count 2^63", P_U64, W_NKV, 0, 0, 1ull << 63, NULL,
     "metadata count 9223372036854775808 is too large"},
    {"kv count 2^40", P_U64, W_NKV, 0, 0, 1ull << 40, NULL,
     "metadata count 1099511627776 is too large"},
    {"kv count beyond file", P_U64, W_NKV, 0, 0, 1000, NULL,
     "10 tensors and 1000 metadata entries need at least"},
    {"key length 2^63", P_U64, W_KEY, KV_U8, 0, 1ull << 63, NULL,
     "string length 9223372036854775808 exceeds the limit"},
    {"key length past end", P_U64, W_KEY, KV_U8, 0, 1ull << 29, NULL,
     "file truncated: key of metadata entry 1"},
    {"string value length 2^63", P_U64, W_VAL, KV_ARCH, 0, 1ull << 63, NULL,
     "metadata 'general.architecture': string length"},
    {"string value past end", P_U64, W_VAL, KV_ARCH, 0, 1000000, NULL,
     "file truncated: metadata 'general.architecture'"},
    {"unknown value type", P_U32, W_VAL, KV_U8, -4, 13, NULL,
     "metadata 'k.u8': unknown value type 13"},
    {"nested array", P_U32, W_VAL, KV_ARR_I32, 0, GGUF_ARRAY, NULL, "nested arrays"},
    {"unknown array type", P_U32, W_VAL, KV_ARR_I32, 0, 77, NULL, "unknown array element type 77"},
    {"array length huge", P_U64, W_VAL, KV_ARR_I32, 4, 1ull << 62, NULL,
     "metadata 'k.arr_i32': array of 4611686018427387904 elements exceeds the limit"},
    {"array length past end", P_U64, W_VAL, KV_ARR_I32, 4, 100000, NULL, "array of 100000 int32"},
    {"string array length huge", P_U64, W_VAL, KV_ARR_STR, 4, 1ull << 61, NULL,
     "array of 2305843009213693952 elements exceeds"},
    {"string array length past end", P_U64, W_VAL, KV_ARR_STR, 4, 1000, NULL,
     "array of 1000 string elements does not fit"},
    {"string in array 2^63", P_U64, W_VAL, KV_ARR_STR, 12, 1ull << 63, NULL, "string length"},
    {"NUL in key", P_BYTES, W_KEY, KV_U8, 9, 0, "\0", "metadata entry 1: key contains a NUL byte"},
    {"duplicate key", P_BYTES, W_KEY, KV_U8, 8, 0, "k.i8", "duplicate metadata key 'k.i8'"},
    {"n_dims 5", P_U32, W_TNDIMS, 1, 0, 5, NULL, "tensor 't.f16': n_dims 5 is not in 1..4"},
    {"n_dims 0", P_U32, W_TNDIMS, 1, 0, 0, NULL, "n_dims 0 is not in 1..4"},
    {"negative ne", P_U64, W_TNE, 0, 8, (uint64_t)-4, NULL,
     "tensor 't.f32': dimension 1 is negative"},
    {"ne product overflow", P_U64, W_TNE, 9, 0, 1ull << 61, NULL,
     "tensor 't.4d': element count overflows"},
    {"ne[0] not whole blocks", P_U64, W_TNE, 3, 0, 48, NULL,
     "tensor 't.q8_0': ne[0] = 48 is not a multiple of the Q8_0 block size 32"},
    {"bytes overflow", P_U64, W_TNE, 0, 8, 1ull << 60, NULL, "tensor 't.f32': byte size overflows"},
    {"row bytes overflow", P_U64, W_TNE, 2, 0, 1ull << 62, NULL,
     "tensor 't.bf16': byte size overflows"},
    {"unknown type", P_U32, W_TTYPE, 0, 0, 13, NULL,
     "tensor 't.f32': type 13 (Q5_K) is not supported"},
    {"unknown type 1000", P_U32, W_TTYPE, 0, 0, 1000, NULL, "type 1000 (unknown) is not supported"},
    {"offset past end", P_U64, W_TOFF, 7, 0, 1ull << 40, NULL,
     "tensor 't.q6_k': data ends at byte"},
    {"offset wraps", P_U64, W_TOFF, 7, 0, (uint64_t)-64, NULL,
     "tensor 't.q6_k': data ends at byte > "},
    {"misaligned offset", P_U64, W_TOFF, 3, 0, 33, NULL,
     "tensor 't.q8_0': offset 33 is not a multiple of the alignment 32"},
    {"overlap same start", P_U64, W_TOFF, 1, 0, 0, NULL, "overlap"},
    {"overlap partial", P_U64, W_TOFF, 2, 0, 32, NULL, "tensors 't.f32' (bytes"},
    {"duplicate name", P_BYTES, W_TNAME, 1, 8, 0, "t.f32", "duplicate tensor name 't.f32'"},
    {"NUL in name", P_BYTES, W_TNAME, 1, 9, 0, "\0", "tensor 1: bad name"},
    {"empty name", P_U64, W_TNAME, 1, 0, 0, NULL, "tensor 1: bad name"},
};

static void test_corrupt(void **state) {
    (void)state;
    struct marks mk;
    struct opts o = {0};
    struct tu_buf b = build(&o, &mk);
    for (size_t i = 0; i < sizeof CORRUPT / sizeof CORRUPT[0]; i++) {
        const struct corrupt *c = &CORRUPT[i];
        uint8_t *p = malloc(b.n);
        memcpy(p, b.p, b.n);
        size_t pos = field_pos(&mk, c->where, c->index) + (size_t)c->delta;
        if (c->kind == P_U32) {
            uint32_t v = (uint32_t)c->value;
            memcpy(p + pos, &v, 4);
        } else if (c->kind == P_U64) {
            memcpy(p + pos, &c->value, 8);
        } else {
            memcpy(p + pos, c->bytes, c->bytes[0] ? strlen(c->bytes) : 1);
        }
        char err[ERR_LEN] = "";
        struct gguf_file *f = NULL;
        const char *path = tu_write_tmp("corrupt.gguf", p, b.n);
        if (gguf_open(&f, path, err) != -1) fail_msg("%s: accepted", c->desc);
        assert_null(f);
        if (!strstr(err, c->msg) || !strstr(err, path))
            fail_msg("%s: message \"%s\" lacks \"%s\"", c->desc, err, c->msg);
        print_message("  %-26s -> %s\n", c->desc, err);
        /* The in-memory path gives the same verdict. */
        char err2[ERR_LEN] = "";
        assert_int_equal(gguf_open_buf(&f, p, b.n, path, err2), -1);
        assert_string_equal(err, err2);
        free(p);
    }
    free(b.p);
}

static void test_not_a_file(void **state) {
    (void)state;
    struct gguf_file *f;
    char err[ERR_LEN];
    assert_int_equal(gguf_open(&f, "/nonexistent/x.gguf", err), -1);
    assert_non_null(strstr(err, "/nonexistent/x.gguf: cannot open"));
    assert_int_equal(gguf_open(&f, tu_tmpdir, err), -1);
    assert_non_null(strstr(err, "not a regular file"));
}

/* A header with a large string array (like a tokenizer) parses and stays consistent. */
static void test_large_array(void **state) {
    (void)state;
    struct tu_buf b = {0};
    const uint64_t n = 200000;
    tu_put(&b, "GGUF", 4);
    tu_put_u32(&b, 3);
    tu_put_u64(&b, 0);
    tu_put_u64(&b, 1);
    tu_put_str(&b, "tokenizer.ggml.tokens");
    tu_put_u32(&b, GGUF_ARRAY);
    tu_put_u32(&b, GGUF_STRING);
    tu_put_u64(&b, n);
    char tok[32];
    for (uint64_t i = 0; i < n; i++) {
        snprintf(tok, sizeof tok, "tok%llu", (unsigned long long)i);
        tu_put_str(&b, tok);
    }
    struct gguf_file *f;
    char err[ERR_LEN] = "";
    assert_int_equal(gguf_open(&f, tu_write_tmp("big.gguf", b.p, b.n), err), 0);
    enum gguf_vtype et;
    uint64_t got;
    const void *data;
    assert_int_equal(gguf_get_arr(f, "tokenizer.ggml.tokens", &et, &got, &data), 0);
    assert_int_equal(got, n);
    const struct gguf_str *s = data;
    assert_int_equal(s[123456].len, 9);
    assert_memory_equal(s[123456].s, "tok123456", 9);
    assert_int_equal(gguf_n_tensors(f), 0);
    gguf_close(f);
    free(b.p);
}

/* ---- comparison with the gguf Python package ----------------------------------------- */

static const char *expect_file, *expect_json;

static uint64_t json_u64(const cJSON *o, const char *key) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsString(j)) fail_msg("expectation: \"%s\" missing", key);
    return strtoull(j->valuestring, NULL, 10);
}

static void hex_decode(const char *hex, uint8_t *out, size_t *n) {
    size_t len = strlen(hex) / 2;
    for (size_t i = 0; i < len; i++) {
        unsigned v;
        sscanf(hex + 2 * i, "%2x", &v);
        out[i] = (uint8_t)v;
    }
    *n = len;
}

static void check_str(const struct gguf_str *s, const cJSON *j, const char *what) {
    assert_true(cJSON_IsString(j));
    size_t len = strlen(j->valuestring) / 2;
    uint8_t *want = malloc(len + 1);
    hex_decode(j->valuestring, want, &len);
    if (s->len != len || (len && memcmp(s->s, want, len))) fail_msg("%s: string differs", what);
    free(want);
}

/* One element of a numeric array or one scalar, against its JSON rendering. */
static void check_num(enum gguf_vtype t, const uint8_t *p, const cJSON *j, const char *what) {
    int64_t iv = 0;
    uint64_t uv = 0;
    switch (t) {
    case GGUF_UINT8: uv = p[0]; break;
    case GGUF_INT8: iv = (int8_t)p[0]; break;
    case GGUF_UINT16: {
        uint16_t x;
        memcpy(&x, p, 2);
        uv = x;
        break;
    }
    case GGUF_INT16: {
        int16_t x;
        memcpy(&x, p, 2);
        iv = x;
        break;
    }
    case GGUF_UINT32: {
        uint32_t x;
        memcpy(&x, p, 4);
        uv = x;
        break;
    }
    case GGUF_INT32: {
        int32_t x;
        memcpy(&x, p, 4);
        iv = x;
        break;
    }
    case GGUF_UINT64: memcpy(&uv, p, 8); break;
    case GGUF_INT64: memcpy(&iv, p, 8); break;
    case GGUF_FLOAT32: {
        float x;
        memcpy(&x, p, 4);
        if (!cJSON_IsNumber(j) || (double)x != j->valuedouble) fail_msg("%s: float differs", what);
        return;
    }
    case GGUF_FLOAT64: {
        double x;
        memcpy(&x, p, 8);
        if (!cJSON_IsNumber(j) || x != j->valuedouble) fail_msg("%s: double differs", what);
        return;
    }
    case GGUF_BOOL:
        if (!cJSON_IsBool(j) || (p[0] != 0) != cJSON_IsTrue(j)) fail_msg("%s: bool differs", what);
        return;
    default: fail_msg("%s: unexpected type %d", what, t);
    }
    if (!cJSON_IsString(j)) fail_msg("%s: expected an integer string", what);
    if (t == GGUF_UINT8 || t == GGUF_UINT16 || t == GGUF_UINT32 || t == GGUF_UINT64) {
        if (uv != strtoull(j->valuestring, NULL, 10))
            fail_msg("%s: %llu != %s", what, (unsigned long long)uv, j->valuestring);
    } else if (iv != strtoll(j->valuestring, NULL, 10)) {
        fail_msg("%s: %lld != %s", what, (long long)iv, j->valuestring);
    }
}

static size_t elem_size(enum gguf_vtype t) {
    switch (t) {
    case GGUF_UINT8:
    case GGUF_INT8:
    case GGUF_BOOL: return 1;
    case GGUF_UINT16:
    case GGUF_INT16: return 2;
    case GGUF_UINT32:
    case GGUF_INT32:
    case GGUF_FLOAT32: return 4;
    default: return 8;
    }
}

static void check_array_elem(enum gguf_vtype et, const void *data, uint64_t i, const cJSON *j,
                             const char *key) {
    char what[160];
    snprintf(what, sizeof what, "%s[%llu]", key, (unsigned long long)i);
    if (et == GGUF_STRING) check_str(&((const struct gguf_str *)data)[i], j, what);
    else check_num(et, (const uint8_t *)data + i * elem_size(et), j, what);
}

static void test_compare_reference(void **state) {
    (void)state;
    if (access(expect_file, R_OK) || access(expect_json, R_OK)) {
        print_message("skipped: %s or %s absent\n", expect_file, expect_json);
        skip();
    }
    char *text = tu_read_file(expect_json, NULL);
    cJSON *root = cJSON_Parse(text);
    free(text);
    assert_non_null(root);
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(root, "gguf");
    const cJSON *tensors = cJSON_GetObjectItemCaseSensitive(root, "tensors");
    assert_non_null(g);
    struct gguf_file *f;
    char err[ERR_LEN] = "";
    if (gguf_open(&f, expect_file, err)) fail_msg("%s", err);
    assert_int_equal(gguf_version(f), json_u64(g, "version"));
    assert_int_equal(gguf_alignment(f), json_u64(g, "alignment"));
    assert_int_equal(gguf_data_offset(f), json_u64(g, "data_offset"));

    const cJSON *kvs = cJSON_GetObjectItemCaseSensitive(g, "kv");
    assert_int_equal(gguf_n_kv(f), (uint64_t)cJSON_GetArraySize(kvs));
    uint64_t i = 0;
    for (const cJSON *e = kvs->child; e; e = e->next, i++) {
        const char *key = cJSON_GetObjectItemCaseSensitive(e, "key")->valuestring;
        const struct gguf_str *k = gguf_kv_key(f, i);
        if (k->len != strlen(key) || memcmp(k->s, key, k->len))
            fail_msg("key %llu differs (%s)", (unsigned long long)i, key);
        int type = cJSON_GetObjectItemCaseSensitive(e, "type")->valueint;
        assert_int_equal(gguf_kv_type(f, i), type);
        assert_int_equal(gguf_key_type(f, key), type);
        if (type == GGUF_ARRAY) {
            enum gguf_vtype et;
            uint64_t n;
            const void *data;
            assert_int_equal(gguf_get_arr(f, key, &et, &n, &data), 0);
            assert_int_equal(et, cJSON_GetObjectItemCaseSensitive(e, "array_type")->valueint);
            assert_int_equal(n, json_u64(e, "n"));
            const cJSON *head = cJSON_GetObjectItemCaseSensitive(e, "head");
            const cJSON *tail = cJSON_GetObjectItemCaseSensitive(e, "tail");
            uint64_t j = 0;
            for (const cJSON *x = head->child; x; x = x->next, j++)
                check_array_elem(et, data, j, x, key);
            j = n - (uint64_t)cJSON_GetArraySize(tail);
            for (const cJSON *x = tail->child; x; x = x->next, j++)
                check_array_elem(et, data, j, x, key);
        } else if (type == GGUF_STRING) {
            const struct gguf_str *s = gguf_get_str(f, key);
            assert_non_null(s);
            check_str(s, cJSON_GetObjectItemCaseSensitive(e, "value"), key);
        } else {
            /* Re-encode the value through the typed getters. */
            uint8_t raw[8] = {0};
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, "value");
            if (type == GGUF_FLOAT32) {
                float x;
                assert_int_equal(gguf_get_f32(f, key, &x), 0);
                memcpy(raw, &x, 4);
            } else if (type == GGUF_FLOAT64) {
                double x;
                assert_int_equal(gguf_get_f64(f, key, &x), 0);
                memcpy(raw, &x, 8);
            } else if (type == GGUF_BOOL) {
                int x;
                assert_int_equal(gguf_get_bool(f, key, &x), 0);
                raw[0] = (uint8_t)x;
            } else if (type == GGUF_UINT8 || type == GGUF_UINT16 || type == GGUF_UINT32 ||
                       type == GGUF_UINT64) {
                uint64_t x;
                assert_int_equal(gguf_get_u64(f, key, &x), 0);
                memcpy(raw, &x, 8);
                type = GGUF_UINT64;
            } else {
                int64_t x;
                assert_int_equal(gguf_get_i64(f, key, &x), 0);
                memcpy(raw, &x, 8);
                type = GGUF_INT64;
            }
            check_num((enum gguf_vtype)type, raw, v, key);
        }
    }

    assert_int_equal(gguf_n_tensors(f), (uint64_t)cJSON_GetArraySize(tensors));
    i = 0;
    for (const cJSON *e = tensors->child; e; e = e->next, i++) {
        const struct gguf_tensor_info *t = gguf_tensor(f, i);
        const char *name = cJSON_GetObjectItemCaseSensitive(e, "name")->valuestring;
        if (t->name.len != strlen(name) || memcmp(t->name.s, name, t->name.len))
            fail_msg("tensor %llu: name differs (%s)", (unsigned long long)i, name);
        assert_int_equal(t->type, cJSON_GetObjectItemCaseSensitive(e, "type")->valueint);
        const cJSON *ne = cJSON_GetObjectItemCaseSensitive(e, "ne");
        assert_int_equal(t->n_dims, (uint32_t)cJSON_GetArraySize(ne));
        int d = 0;
        for (const cJSON *x = ne->child; x; x = x->next, d++)
            assert_int_equal(t->ne[d], strtoll(x->valuestring, NULL, 10));
        for (; d < 4; d++) assert_int_equal(t->ne[d], 1);
        assert_int_equal(t->offset, json_u64(e, "offset"));
        assert_int_equal(t->nbytes, json_u64(e, "nbytes"));
        assert_ptr_equal(gguf_find_tensor(f, name), t);
    }
    gguf_close(f);
    cJSON_Delete(root);
}

int main(void) {
    static char file[4096], json[4096];
    tu_source_path(file, sizeof file, "models/SmolLM2-135M-Instruct.Q4_1.gguf");
    tu_source_path(json, sizeof json, "tests/data/smollm2_q4_1.json");
    expect_file = getenv("TPD_GGUF_FILE") ? getenv("TPD_GGUF_FILE") : file;
    expect_json = getenv("TPD_GGUF_EXPECT") ? getenv("TPD_GGUF_EXPECT") : json;
    const struct CMUnitTest only_compare[] = {cmocka_unit_test(test_compare_reference)};
    if (getenv("TPD_GGUF_FILE")) return cmocka_run_group_tests(only_compare, NULL, NULL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid),       cmocka_unit_test(test_version2),
        cmocka_unit_test(test_alignment),   cmocka_unit_test(test_truncated_everywhere),
        cmocka_unit_test(test_corrupt),     cmocka_unit_test(test_not_a_file),
        cmocka_unit_test(test_large_array), cmocka_unit_test(test_compare_reference),
    };
    return cmocka_run_group_tests(tests, tu_tmpdir_setup, tu_tmpdir_teardown);
}
