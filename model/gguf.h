/* GGUF v2/v3 reader. The file is untrusted input: every count, length, offset and size
 * is bounds- and overflow-checked, duplicates and bad alignment are refused, and errors
 * name the file and the problem. Metadata stays available for the tokenizer. */
#ifndef TPD_GGUF_H
#define TPD_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "../util/dtype.h"

enum gguf_vtype {
    GGUF_UINT8 = 0,
    GGUF_INT8 = 1,
    GGUF_UINT16 = 2,
    GGUF_INT16 = 3,
    GGUF_UINT32 = 4,
    GGUF_INT32 = 5,
    GGUF_FLOAT32 = 6,
    GGUF_BOOL = 7,
    GGUF_STRING = 8,
    GGUF_ARRAY = 9,
    GGUF_UINT64 = 10,
    GGUF_INT64 = 11,
    GGUF_FLOAT64 = 12,
};

struct gguf_str {
    uint64_t len;
    const char *s; /* not NUL-terminated in general */
};

struct gguf_tensor_info {
    struct gguf_str name;
    uint32_t n_dims;
    int64_t ne[4];
    enum dtype type;
    uint64_t offset; /* absolute offset in the file */
    uint64_t nbytes;
};

struct gguf_file;

int gguf_open(struct gguf_file **out, const char *path, char *err);
void gguf_close(struct gguf_file *f);
uint32_t gguf_version(const struct gguf_file *f);
int gguf_fd(const struct gguf_file *f);

uint64_t gguf_n_tensors(const struct gguf_file *f);
const struct gguf_tensor_info *gguf_tensor(const struct gguf_file *f, uint64_t i);

/* Metadata lookups: return 0 and fill *out, or -1 when the key is absent or its type does
 * not fit (integer getters accept any integer type whose value fits). */
int gguf_has_key(const struct gguf_file *f, const char *key);
int gguf_get_u32(const struct gguf_file *f, const char *key, uint32_t *out);
int gguf_get_i64(const struct gguf_file *f, const char *key, int64_t *out);
int gguf_get_f32(const struct gguf_file *f, const char *key, float *out);
int gguf_get_bool(const struct gguf_file *f, const char *key, int *out);
/* Returns the string or NULL. */
const struct gguf_str *gguf_get_str(const struct gguf_file *f, const char *key);
/* Arrays: *elem_type, *n and *data. Numeric elements are contiguous little-endian values
 * (a heap copy, aligned for the element type; BOOL elements are one byte each); for
 * GGUF_STRING elements, data points to n struct gguf_str. Strings point into the file's
 * mapping: all of it stays valid until gguf_close. */
int gguf_get_arr(const struct gguf_file *f, const char *key, enum gguf_vtype *elem_type,
                 uint64_t *n, const void **data);

/* Extensions (modelfiles): */

/* Parses a GGUF image already in memory (fuzzing, tests). data must outlive the handle;
 * name is used in error messages; gguf_fd() returns -1. */
int gguf_open_buf(struct gguf_file **out, const void *data, size_t size, const char *name,
                  char *err);
const char *gguf_path(const struct gguf_file *f);
uint32_t gguf_alignment(const struct gguf_file *f);
uint64_t gguf_data_offset(const struct gguf_file *f); /* absolute start of the data section */
/* NULL if absent. */
const struct gguf_tensor_info *gguf_find_tensor(const struct gguf_file *f, const char *name);

/* Metadata iteration, in file order. */
uint64_t gguf_n_kv(const struct gguf_file *f);
const struct gguf_str *gguf_kv_key(const struct gguf_file *f, uint64_t i);
enum gguf_vtype gguf_kv_type(const struct gguf_file *f, uint64_t i);
int gguf_get_u64(const struct gguf_file *f, const char *key, uint64_t *out);
int gguf_get_f64(const struct gguf_file *f, const char *key, double *out);
/* Type of a key's value, or -1 when absent. */
int gguf_key_type(const struct gguf_file *f, const char *key);

#endif
