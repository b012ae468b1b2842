/* Test driver for tests/py/test_quant_dequant.py: exposes cpu_dequant_row and cpu_matmul on
 * raw files, so that Python can compare them with the gguf package and numpy. Built by the
 * test itself against the static libraries in TPD_BUILD_DIR.
 *
 *   quant_driver dequant TYPE N IN OUT
 *   quant_driver matmul TYPE ROWS COLS T THREADS SCALAR W X Y
 *
 * TYPE is the GGML type id; IN / W hold the raw blocks, X holds T*COLS float32 and Y gets
 * T*ROWS float32 (row t of Y = W . row t of X), OUT gets N float32. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/matmul.h"
#include "util/threadpool.h"

static void *read_file(const char *path, size_t want) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(1);
    }
    void *p = malloc(want ? want : 1);
    if (!p || fread(p, 1, want, f) != want) {
        fprintf(stderr, "%s: expected %zu bytes\n", path, want);
        exit(1);
    }
    fclose(f);
    return p;
}

static void write_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
}

static enum dtype parse_type(const char *s) {
    long v = strtol(s, NULL, 10);
    if (!dtype_valid((uint32_t)v)) {
        fprintf(stderr, "unsupported type %s\n", s);
        exit(2);
    }
    return (enum dtype)v;
}

int main(int argc, char **argv) {
    if (argc == 6 && !strcmp(argv[1], "dequant")) {
        const enum dtype t = parse_type(argv[2]);
        const long n = atol(argv[3]);
        const int64_t bytes = dtype_row_bytes(t, n);
        if (n <= 0 || bytes < 0) return 2;
        void *src = read_file(argv[4], (size_t)bytes);
        float *dst = malloc(sizeof(float) * (size_t)n);
        cpu_dequant_row(t, src, dst, n);
        write_file(argv[5], dst, sizeof(float) * (size_t)n);
        free(src);
        free(dst);
        return 0;
    }
    if (argc == 11 && !strcmp(argv[1], "matmul")) {
        const enum dtype t = parse_type(argv[2]);
        const int rows = atoi(argv[3]), cols = atoi(argv[4]), T = atoi(argv[5]),
                  nth = atoi(argv[6]);
        const int64_t rb = dtype_row_bytes(t, cols);
        if (rows <= 0 || T <= 0 || rb < 0 || nth <= 0) return 2;
        void *W = read_file(argv[8], (size_t)(rb * rows));
        float *x = read_file(argv[9], sizeof(float) * (size_t)T * (size_t)cols);
        float *y = malloc(sizeof(float) * (size_t)T * (size_t)rows);
        struct threadpool *tp = threadpool_create(nth);
        cpu_matmul_force_scalar(atoi(argv[7]));
        cpu_matmul(y, rows, x, cols, T, W, t, rows, cols, tp);
        threadpool_free(tp);
        write_file(argv[10], y, sizeof(float) * (size_t)T * (size_t)rows);
        printf("%s\n", cpu_matmul_has_avx2() ? "avx2" : "scalar");
        free(W);
        free(x);
        free(y);
        return 0;
    }
    fprintf(stderr,
            "usage: %s dequant TYPE N IN OUT | matmul TYPE ROWS COLS T THREADS SCALAR W X Y\n",
            argv[0]);
    return 2;
}
