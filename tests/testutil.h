/* Helpers shared by the C tests (cmocka programs, single-threaded): a temp directory per
 * program, whole-file reads and writes, paths under the source tree, and a growable byte
 * buffer for writing binary formats by hand. A write that fails, or running out of memory,
 * fails the test. Built into every tests/test_*.c program (tests/CMakeLists.txt). */
#ifndef TPD_TESTUTIL_H
#define TPD_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

/* The program's temp directory: tu_tmpdir_setup makes it and tu_tmpdir_teardown removes
 * it with everything inside (use them as the cmocka group setup and teardown). */
extern char tu_tmpdir[64];
int tu_tmpdir_setup(void **state);
int tu_tmpdir_teardown(void **state);
/* tu_tmpdir/name, in a static buffer that the next call overwrites. */
const char *tu_tmp_path(const char *name);
/* Writes n bytes to tu_tmpdir/name and returns that path (as tu_tmp_path does). */
const char *tu_write_tmp(const char *name, const void *p, size_t n);
/* Writes n bytes to path (created or truncated). */
void tu_write_file(const char *path, const void *p, size_t n);
/* Removes dir and everything below it (symlinks are removed, not followed). */
void tu_rm_tree(const char *dir);

/* $TPD_SOURCE_DIR/rel (./rel without it) into out; returns out. */
char *tu_source_path(char *out, size_t size, const char *rel);
/* The whole file, malloc'd and NUL-terminated (its length in *len when len is not NULL),
 * or NULL when it cannot be read. */
char *tu_read_file(const char *path, size_t *len);
/* tu_read_file of $TPD_SOURCE_DIR/rel (test data such as tests/data/tok/spm.json). */
char *tu_read_source(const char *rel, size_t *len);

/* A seeded generator for a test's own random choices (splitmix64): the next 64 bits of
 * the stream *x, a number in [0, n), and one in [0, 1). */
uint64_t tu_rand(uint64_t *x);
int tu_rand_int(uint64_t *x, int n);
double tu_rand_unit(uint64_t *x);

/* Bytes built up by hand (GGUF and safetensors images, JSON text); free(b.p) when done. */
struct tu_buf {
    uint8_t *p;
    size_t n, cap;
};
void tu_put(struct tu_buf *b, const void *d, size_t n);
void tu_put_u8(struct tu_buf *b, uint8_t v);
void tu_put_u16(struct tu_buf *b, uint16_t v);
void tu_put_u32(struct tu_buf *b, uint32_t v);
void tu_put_u64(struct tu_buf *b, uint64_t v);
void tu_put_f32(struct tu_buf *b, float v);
void tu_put_f64(struct tu_buf *b, double v);
/* A GGUF string: u64 length, then the bytes (no NUL). */
void tu_put_str(struct tu_buf *b, const char *s);
/* printf-formatted text, at most 1023 bytes per call. */
void tu_putf(struct tu_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
