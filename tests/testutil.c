#include "testutil.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

char tu_tmpdir[64];

int tu_tmpdir_setup(void **state) {
    (void)state;
    snprintf(tu_tmpdir, sizeof tu_tmpdir, "/tmp/tpd_test_XXXXXX");
    return mkdtemp(tu_tmpdir) ? 0 : -1;
}

int tu_tmpdir_teardown(void **state) {
    (void)state;
    tu_rm_tree(tu_tmpdir);
    return 0;
}

const char *tu_tmp_path(const char *name) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", tu_tmpdir, name);
    return path;
}

const char *tu_write_tmp(const char *name, const void *p, size_t n) {
    const char *path = tu_tmp_path(name);
    tu_write_file(path, p, n);
    return path;
}

void tu_write_file(const char *path, const void *p, size_t n) {
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(n ? fwrite(p, 1, n, fp) : 0, n);
    fclose(fp);
}

void tu_rm_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char path[512];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (!lstat(path, &st) && S_ISDIR(st.st_mode)) tu_rm_tree(path);
        else unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

char *tu_source_path(char *out, size_t size, const char *rel) {
    const char *src = getenv("TPD_SOURCE_DIR");
    snprintf(out, size, "%s/%s", src ? src : ".", rel);
    return out;
}

char *tu_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = n < 0 ? NULL : malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (!b) return NULL;
    b[n] = 0;
    if (len) *len = (size_t)n;
    return b;
}

char *tu_read_source(const char *rel, size_t *len) {
    char path[4096];
    return tu_read_file(tu_source_path(path, sizeof path, rel), len);
}

void tu_put(struct tu_buf *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    if (n) memcpy(b->p + b->n, d, n);
    b->n += n;
}

void tu_put_u8(struct tu_buf *b, uint8_t v) { tu_put(b, &v, 1); }
void tu_put_u16(struct tu_buf *b, uint16_t v) { tu_put(b, &v, 2); }
void tu_put_u32(struct tu_buf *b, uint32_t v) { tu_put(b, &v, 4); }
void tu_put_u64(struct tu_buf *b, uint64_t v) { tu_put(b, &v, 8); }
void tu_put_f32(struct tu_buf *b, float v) { tu_put(b, &v, 4); }
void tu_put_f64(struct tu_buf *b, double v) { tu_put(b, &v, 8); }

void tu_put_str(struct tu_buf *b, const char *s) {
    tu_put_u64(b, strlen(s));
    tu_put(b, s, strlen(s));
}

void tu_putf(struct tu_buf *b, const char *fmt, ...) {
    char tmp[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    assert_true(n >= 0 && n < (int)sizeof tmp);
    tu_put(b, tmp, (size_t)n);
}

uint64_t tu_rand(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

int tu_rand_int(uint64_t *x, int n) { return (int)(tu_rand(x) % (uint64_t)n); }

double tu_rand_unit(uint64_t *x) { return (double)(tu_rand(x) >> 11) * 0x1.0p-53; }
