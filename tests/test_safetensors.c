// link: tpd_model
/* safetensors reader tests: a valid file written here byte by byte loads with the right
 * dtypes, shapes and absolute offsets; corrupt variants (header length beyond the file or
 * the cap, bad JSON, unknown dtype, size mismatch, overlapping or out-of-range offsets,
 * duplicates) are each refused with a message naming the file and the problem. Files
 * written by the `safetensors` Python package are checked in tests/py/test_modelfile_py.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/safetensors.h"
#include "testutil.h"
#include "util/err.h"

/* 8-byte length, the JSON, then data_len bytes of data (byte j = j * 3 + 1). */
static uint8_t *image(const char *json, size_t data_len, size_t *n) {
    size_t jl = strlen(json);
    *n = 8 + jl + data_len;
    uint8_t *p = malloc(*n);
    uint64_t len = jl;
    memcpy(p, &len, 8);
    memcpy(p + 8, json, jl);
    for (size_t j = 0; j < data_len; j++) p[8 + jl + j] = (uint8_t)(j * 3 + 1);
    return p;
}

static const char VALID[] =
    "{\"__metadata__\":{\"format\":\"pt\"},"
    "\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
    "\"b\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[24,32]},"
    "\"s\":{\"dtype\":\"F16\",\"shape\":[],\"data_offsets\":[32,34]},"
    "\"i\":{\"dtype\":\"I64\",\"shape\":[1,1],\"data_offsets\":[40,48]},"
    "\"z\":{\"dtype\":\"F32\",\"shape\":[0,5],\"data_offsets\":[48,48]}}     ";

static void check_valid(const struct safetensors_file *f) {
    uint64_t base = 8 + strlen(VALID);
    assert_int_equal(f->n_tensors, 5);
    const struct safetensors_tensor *t = safetensors_find(f, "w");
    assert_non_null(t);
    assert_true(t->supported);
    assert_int_equal(t->type, DT_F32);
    assert_string_equal(t->dtype, "F32");
    assert_int_equal(t->n_dims, 2);
    assert_int_equal(t->shape[0], 2);
    assert_int_equal(t->shape[1], 3);
    assert_int_equal(t->offset, base);
    assert_int_equal(t->nbytes, 24);
    t = safetensors_find(f, "b");
    assert_int_equal(t->type, DT_BF16);
    assert_int_equal(t->offset, base + 24);
    assert_int_equal(t->nbytes, 8);
    t = safetensors_find(f, "s");
    assert_int_equal(t->type, DT_F16);
    assert_int_equal(t->n_dims, 0);
    assert_int_equal(t->nbytes, 2);
    t = safetensors_find(f, "i");
    assert_false(t->supported);
    assert_string_equal(t->dtype, "I64");
    assert_int_equal(t->offset, base + 40);
    t = safetensors_find(f, "z");
    assert_int_equal(t->nbytes, 0);
    assert_null(safetensors_find(f, "__metadata__"));
    assert_null(safetensors_find(f, "x"));
    for (int i = 1; i < f->n_tensors; i++)
        assert_true(strcmp(f->tensors[i - 1].name, f->tensors[i].name) < 0);
}

static void test_valid(void **state) {
    (void)state;
    size_t n;
    uint8_t *p = image(VALID, 48, &n);
    struct safetensors_file f;
    char err[ERR_LEN] = "";
    const char *path = tu_write_tmp("f.safetensors", p, n);
    assert_int_equal(safetensors_open(&f, path, err), 0);
    check_valid(&f);
    /* The offsets point at the bytes written for them. */
    const struct safetensors_tensor *t = safetensors_find(&f, "b");
    uint8_t got[8];
    assert_int_equal(pread(f.fd, got, 8, (off_t)t->offset), 8);
    for (int j = 0; j < 8; j++) assert_int_equal(got[j], (uint8_t)((24 + j) * 3 + 1));
    safetensors_close(&f);
    assert_int_equal(safetensors_open_buf(&f, p, n, "mem", err), 0);
    check_valid(&f);
    safetensors_close(&f);
    free(p);
}

static const struct {
    const char *desc, *json;
    size_t data_len;
    const char *msg;
} CORRUPT[] = {
    {"not JSON", "{\"w\": {\"dtype\": \"F32\", ", 0, "header is not valid JSON"},
    {"not an object", "[1, 2, 3]", 0, "header is not a JSON object"},
    {"trailing garbage", "{}  xyz", 0, "trailing bytes"},
    {"unknown dtype", "{\"w\":{\"dtype\":\"Q7\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
     "tensor 'w': unknown dtype \"Q7\""},
    {"dtype not a string", "{\"w\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
     "tensor 'w': missing or non-string \"dtype\""},
    {"entry not an object", "{\"w\":[1]}", 0, "tensor 'w': entry is not a JSON object"},
    {"shape mismatch", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}", 24,
     "tensor 'w': data_offsets span 20 bytes but shape and dtype F32 need 24"},
    {"negative dim", "{\"w\":{\"dtype\":\"F32\",\"shape\":[-2,3],\"data_offsets\":[0,24]}}", 24,
     "tensor 'w': shape[0] is not a non-negative integer"},
    {"fractional dim", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,1.5],\"data_offsets\":[0,12]}}", 24,
     "shape[1] is not a non-negative integer"},
    {"shape overflow",
     "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}", 4,
     "byte size overflows"},
    {"too many dims",
     "{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4,
     "9 dimensions"},
    {"offsets past end", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 8,
     "tensor 'w': data_offsets end 12 is past the end of the data section (8 bytes)"},
    {"offsets reversed", "{\"w\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,4]}}", 8,
     "end before they begin"},
    {"three offsets", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 8,
     "\"data_offsets\" must be two non-negative integers"},
    {"missing offsets", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", 8, "\"data_offsets\" must be"},
    {"huge offsets", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[1e300,1e300]}}", 8,
     "\"data_offsets\" must be"},
    {"overlap",
     "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
     "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
     12, "tensors 'a' and 'b' have overlapping data_offsets"},
    {"duplicate name",
     "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
     "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
     8, "duplicate tensor name 'a'"},
    {"empty name", "{\"\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
     "is empty or too long"},
    {"tiny header", "{", 0, "too small for a JSON object"},
};

static void test_corrupt(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof CORRUPT / sizeof CORRUPT[0]; i++) {
        size_t n;
        uint8_t *p = image(CORRUPT[i].json, CORRUPT[i].data_len, &n);
        const char *path = tu_write_tmp("f.safetensors", p, n);
        struct safetensors_file f;
        char err[ERR_LEN] = "", err2[ERR_LEN] = "";
        if (safetensors_open(&f, path, err) != -1) fail_msg("%s: accepted", CORRUPT[i].desc);
        if (!strstr(err, CORRUPT[i].msg) || !strstr(err, path))
            fail_msg("%s: message \"%s\" lacks \"%s\"", CORRUPT[i].desc, err, CORRUPT[i].msg);
        print_message("  %-20s -> %s\n", CORRUPT[i].desc, err);
        assert_int_equal(f.fd, -1);
        assert_null(f.tensors);
        assert_int_equal(safetensors_open_buf(&f, p, n, path, err2), -1);
        assert_string_equal(err, err2);
        free(p);
    }
}

static void test_header_length(void **state) {
    (void)state;
    size_t n;
    uint8_t *p = image("{}", 0, &n);
    struct safetensors_file f;
    char err[ERR_LEN];
    /* Length larger than the file, and 2^63. */
    uint64_t lens[] = {100, 1ull << 63, UINT64_MAX};
    for (size_t i = 0; i < 3; i++) {
        memcpy(p, &lens[i], 8);
        const char *path = tu_write_tmp("f.safetensors", p, n);
        assert_int_equal(safetensors_open(&f, path, err), -1);
        assert_non_null(strstr(err, "is larger than the file (10 bytes)"));
        assert_non_null(strstr(err, path));
        assert_int_equal(safetensors_open_buf(&f, p, n, "m", err), -1);
        assert_non_null(strstr(err, "m: header length"));
    }
    /* Shorter than the length prefix. */
    for (size_t cut = 0; cut < 8; cut++) {
        const char *path = tu_write_tmp("f.safetensors", p, cut);
        assert_int_equal(safetensors_open(&f, path, err), -1);
        assert_non_null(strstr(err, "file truncated"));
        assert_int_equal(safetensors_open_buf(&f, p, cut, "m", err), -1);
        assert_non_null(strstr(err, "file truncated"));
    }
    free(p);
    /* Over the cap in a (sparse) file that is large enough to hold it. */
    const char *path = tu_tmp_path("big.safetensors");
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
    assert_true(fd >= 0);
    uint64_t len = (uint64_t)SAFETENSORS_MAX_HEADER + 1;
    assert_int_equal(write(fd, &len, 8), 8);
    assert_int_equal(ftruncate(fd, (off_t)len + 64), 0);
    close(fd);
    assert_int_equal(safetensors_open(&f, path, err), -1);
    assert_non_null(strstr(err, "exceeds the 100 MB limit"));
    /* Every truncation of a valid file is refused. */
    p = image(VALID, 48, &n);
    for (size_t cut = 0; cut < n; cut++) {
        uint8_t *copy = malloc(cut ? cut : 1);
        memcpy(copy, p, cut);
        if (safetensors_open_buf(&f, copy, cut, "cut", err) != -1)
            fail_msg("cut %zu accepted", cut);
        assert_non_null(strstr(err, "cut: "));
        free(copy);
    }
    free(p);
}

static void test_missing_file(void **state) {
    (void)state;
    struct safetensors_file f;
    char err[ERR_LEN];
    assert_int_equal(safetensors_open(&f, "/nonexistent/a.safetensors", err), -1);
    assert_non_null(strstr(err, "/nonexistent/a.safetensors: cannot open"));
    assert_int_equal(safetensors_open(&f, tu_tmpdir, err), -1);
    assert_non_null(strstr(err, "not a regular file"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid),
        cmocka_unit_test(test_corrupt),
        cmocka_unit_test(test_header_length),
        cmocka_unit_test(test_missing_file),
    };
    return cmocka_run_group_tests(tests, tu_tmpdir_setup, tu_tmpdir_teardown);
}
