/* GGUF v2/v3 reader. The whole file is mapped read-only; the header is parsed with a
 * bounded cursor and strings keep pointing into the mapping until gguf_close. */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../util/err.h"
#include "../util/fatal.h"

/* Caps on untrusted counts: far above any real model, low enough that a hostile header
 * cannot make us allocate gigabytes before the file runs out. */
#define GGUF_MAX_TENSORS (1ull << 20)
#define GGUF_MAX_KV (1ull << 20)
#define GGUF_MAX_STR (1ull << 30)
#define GGUF_MAX_ARR (1ull << 28)
#define GGUF_MAX_NAME 256
#define GGUF_DEFAULT_ALIGNMENT 32

struct gguf_kv {
    struct gguf_str key;
    enum gguf_vtype type;
    union {
        uint64_t u;          /* UINT8/16/32/64, BOOL */
        int64_t i;           /* INT8/16/32/64 */
        double f;            /* FLOAT32/64 */
        struct gguf_str str; /* STRING */
        struct {
            enum gguf_vtype type;
            uint64_t n;
            void *data; /* heap copy (aligned) of numbers, or n struct gguf_str */
        } arr;
    } v;
};

struct gguf_file {
    char *path;
    int fd;
    const uint8_t *base; /* mapping (or caller's buffer) */
    uint64_t size;
    int mapped;
    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset;
    uint64_t n_kv;
    struct gguf_kv *kv;
    struct gguf_kv **kv_sorted; /* by key, for lookups */
    uint64_t n_tensors;
    struct gguf_tensor_info *tensors;
    struct gguf_tensor_info **t_sorted; /* by name */
};

/* A bounded reader over the file image. `what` describes the item being read so that a
 * truncated file says where it broke. */
struct cursor {
    const uint8_t *base;
    uint64_t pos, size;
    const char *path;
    char *err;
    char what[160];
};

static int cur_take(struct cursor *c, uint64_t n, const uint8_t **p) {
    if (n > c->size - c->pos)
        return err_set(c->err,
                       "%s: file truncated: %s at byte %llu needs %llu bytes but the file "
                       "is %llu bytes",
                       c->path, c->what, (unsigned long long)c->pos, (unsigned long long)n,
                       (unsigned long long)c->size);
    *p = c->base + c->pos;
    c->pos += n;
    return 0;
}

static int cur_read(struct cursor *c, void *dst, uint64_t n) {
    const uint8_t *p = NULL;
    if (cur_take(c, n, &p)) return -1;
    if (n) memcpy(dst, p, n);
    return 0;
}

static int cur_u32(struct cursor *c, uint32_t *v) { return cur_read(c, v, 4); }
static int cur_u64(struct cursor *c, uint64_t *v) { return cur_read(c, v, 8); }

static int cur_str(struct cursor *c, struct gguf_str *s) {
    uint64_t len;
    if (cur_u64(c, &len)) return -1;
    if (len > GGUF_MAX_STR)
        return err_set(c->err, "%s: %s: string length %llu exceeds the limit of %llu bytes",
                       c->path, c->what, (unsigned long long)len, (unsigned long long)GGUF_MAX_STR);
    const uint8_t *p = NULL;
    if (cur_take(c, len, &p)) return -1;
    s->len = len;
    s->s = (const char *)p;
    return 0;
}

static int vtype_valid(uint32_t t) { return t <= GGUF_FLOAT64; }

/* Bytes of one scalar of type t; 0 for STRING and ARRAY. */
static uint64_t vtype_size(enum gguf_vtype t) {
    switch (t) {
    case GGUF_UINT8:
    case GGUF_INT8:
    case GGUF_BOOL: return 1;
    case GGUF_UINT16:
    case GGUF_INT16: return 2;
    case GGUF_UINT32:
    case GGUF_INT32:
    case GGUF_FLOAT32: return 4;
    case GGUF_UINT64:
    case GGUF_INT64:
    case GGUF_FLOAT64: return 8;
    case GGUF_STRING:
    case GGUF_ARRAY: return 0;
    }
    return 0;
}

static const char *vtype_name(uint32_t t) {
    static const char *names[] = {"uint8",  "int8",    "uint16", "int16",  "uint32",
                                  "int32",  "float32", "bool",   "string", "array",
                                  "uint64", "int64",   "float64"};
    return t <= GGUF_FLOAT64 ? names[t] : "?";
}

/* Names of GGML types we do not support, so a refusal says what the file holds. */
static const char *ggml_type_name(uint32_t t) {
    static const char *names[] = {
        "F32",      "F16",      "Q4_0",    "Q4_1",  "Q4_2",   "Q4_3",  "Q5_0",  "Q5_1",
        "Q8_0",     "Q8_1",     "Q2_K",    "Q3_K",  "Q4_K",   "Q5_K",  "Q6_K",  "Q8_K",
        "IQ2_XXS",  "IQ2_XS",   "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS",
        "I8",       "I16",      "I32",     "I64",   "F64",    "IQ1_M", "BF16",  "Q4_0_4_4",
        "Q4_0_4_8", "Q4_0_8_8", "TQ1_0",   "TQ2_0"};
    return t < sizeof names / sizeof names[0] ? names[t] : "unknown";
}

/* Reads one scalar value of type t into kv->v. */
static int read_scalar(struct cursor *c, enum gguf_vtype t, struct gguf_kv *kv) {
    uint8_t b[8] = {0};
    if (t == GGUF_STRING) return cur_str(c, &kv->v.str);
    if (cur_read(c, b, vtype_size(t))) return -1;
    switch (t) {
    case GGUF_UINT8:
    case GGUF_BOOL: kv->v.u = b[0]; break;
    case GGUF_INT8: kv->v.i = (int8_t)b[0]; break;
    case GGUF_UINT16: {
        uint16_t x;
        memcpy(&x, b, 2);
        kv->v.u = x;
        break;
    }
    case GGUF_INT16: {
        int16_t x;
        memcpy(&x, b, 2);
        kv->v.i = x;
        break;
    }
    case GGUF_UINT32: {
        uint32_t x;
        memcpy(&x, b, 4);
        kv->v.u = x;
        break;
    }
    case GGUF_INT32: {
        int32_t x;
        memcpy(&x, b, 4);
        kv->v.i = x;
        break;
    }
    case GGUF_FLOAT32: {
        float x;
        memcpy(&x, b, 4);
        kv->v.f = x;
        break;
    }
    case GGUF_UINT64: memcpy(&kv->v.u, b, 8); break;
    case GGUF_INT64: memcpy(&kv->v.i, b, 8); break;
    case GGUF_FLOAT64: memcpy(&kv->v.f, b, 8); break;
    case GGUF_STRING:
    case GGUF_ARRAY: break;
    }
    return 0;
}

static int read_array(struct cursor *c, struct gguf_kv *kv) {
    uint32_t et;
    uint64_t n;
    if (cur_u32(c, &et)) return -1;
    if (!vtype_valid(et))
        return err_set(c->err, "%s: %s: unknown array element type %u", c->path, c->what, et);
    if (et == GGUF_ARRAY)
        return err_set(c->err, "%s: %s: nested arrays are not supported", c->path, c->what);
    if (cur_u64(c, &n)) return -1;
    uint64_t left = c->size - c->pos;
    /* Every element takes at least its size in the file (8 bytes for a string's length),
     * which bounds n before anything is allocated. */
    uint64_t min_elem = et == GGUF_STRING ? 8 : vtype_size(et);
    if (n > GGUF_MAX_ARR)
        return err_set(c->err, "%s: %s: array of %llu elements exceeds the limit of %llu", c->path,
                       c->what, (unsigned long long)n, (unsigned long long)GGUF_MAX_ARR);
    if (n > left / min_elem)
        return err_set(c->err,
                       "%s: %s: array of %llu %s elements does not fit in the %llu bytes left "
                       "in the file (truncated or corrupt)",
                       c->path, c->what, (unsigned long long)n, vtype_name(et),
                       (unsigned long long)left);
    kv->v.arr.type = et;
    kv->v.arr.n = n;
    if (et == GGUF_STRING) {
        struct gguf_str *s = calloc(n ? n : 1, sizeof *s);
        if (!s) return err_set(c->err, "%s: %s: out of memory", c->path, c->what);
        kv->v.arr.data = s;
        for (uint64_t i = 0; i < n; i++)
            if (cur_str(c, &s[i])) return -1;
        return 0;
    }
    uint64_t bytes = n * min_elem; /* cannot overflow: bounded by left */
    /* A heap copy: array data in the file is not aligned for its element type. */
    void *d = malloc(bytes ? bytes : 1);
    if (!d) return err_set(c->err, "%s: %s: out of memory", c->path, c->what);
    kv->v.arr.data = d;
    return cur_read(c, d, bytes);
}

static int str_cmp(const struct gguf_str *a, const struct gguf_str *b) {
    uint64_t n = a->len < b->len ? a->len : b->len;
    int r = n ? memcmp(a->s, b->s, n) : 0;
    if (r) return r;
    return a->len < b->len ? -1 : a->len > b->len;
}

static int kv_cmp(const void *a, const void *b) {
    return str_cmp(&(*(struct gguf_kv *const *)a)->key, &(*(struct gguf_kv *const *)b)->key);
}

static int tname_cmp(const void *a, const void *b) {
    return str_cmp(&(*(struct gguf_tensor_info *const *)a)->name,
                   &(*(struct gguf_tensor_info *const *)b)->name);
}

static int toff_cmp(const void *a, const void *b) {
    const struct gguf_tensor_info *x = *(struct gguf_tensor_info *const *)a;
    const struct gguf_tensor_info *y = *(struct gguf_tensor_info *const *)b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

static int read_kvs(struct gguf_file *f, struct cursor *c) {
    for (uint64_t i = 0; i < f->n_kv; i++) {
        struct gguf_kv *kv = &f->kv[i];
        uint32_t t;
        snprintf(c->what, sizeof c->what, "key of metadata entry %llu", (unsigned long long)i);
        if (cur_str(c, &kv->key)) return -1;
        /* Keys are looked up as C strings: a NUL inside would make one unreachable. */
        if (kv->key.len && memchr(kv->key.s, 0, kv->key.len))
            return err_set(c->err, "%s: metadata entry %llu: key contains a NUL byte", f->path,
                           (unsigned long long)i);
        snprintf(c->what, sizeof c->what, "metadata '%.*s'",
                 (int)(kv->key.len > 96 ? 96 : kv->key.len), kv->key.s);
        if (cur_u32(c, &t)) return -1;
        if (!vtype_valid(t))
            return err_set(c->err, "%s: %s: unknown value type %u", f->path, c->what, t);
        kv->type = t;
        if (t == GGUF_ARRAY) {
            if (read_array(c, kv)) return -1;
        } else if (read_scalar(c, t, kv)) {
            return -1;
        }
    }
    for (uint64_t i = 0; i < f->n_kv; i++) f->kv_sorted[i] = &f->kv[i];
    qsort(f->kv_sorted, f->n_kv, sizeof *f->kv_sorted, kv_cmp);
    for (uint64_t i = 1; i < f->n_kv; i++)
        if (!str_cmp(&f->kv_sorted[i - 1]->key, &f->kv_sorted[i]->key))
            return err_set(c->err, "%s: duplicate metadata key '%.*s'", f->path,
                           (int)(f->kv_sorted[i]->key.len > 96 ? 96 : f->kv_sorted[i]->key.len),
                           f->kv_sorted[i]->key.s);
    return 0;
}

static struct gguf_kv *kv_find(const struct gguf_file *f, const char *key) {
    struct gguf_kv k = {.key = {strlen(key), key}};
    struct gguf_kv *kp = &k;
    struct gguf_kv **r = f->n_kv ? bsearch(&kp, f->kv_sorted, f->n_kv, sizeof *f->kv_sorted, kv_cmp)
                                 : NULL;
    return r ? *r : NULL;
}

static int read_alignment(struct gguf_file *f, char *err) {
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    struct gguf_kv *kv = kv_find(f, "general.alignment");
    if (!kv) return 0;
    if (kv->type != GGUF_UINT32)
        return err_set(err, "%s: general.alignment must be a uint32 (found %s)", f->path,
                       vtype_name(kv->type));
    if (kv->v.u == 0 || (kv->v.u & (kv->v.u - 1)))
        return err_set(err, "%s: general.alignment %llu is not a power of two", f->path,
                       (unsigned long long)kv->v.u);
    f->alignment = (uint32_t)kv->v.u;
    return 0;
}

static int read_tensor_infos(struct gguf_file *f, struct cursor *c) {
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        struct gguf_tensor_info *t = &f->tensors[i];
        snprintf(c->what, sizeof c->what, "name of tensor %llu", (unsigned long long)i);
        if (cur_str(c, &t->name)) return -1;
        int nl = (int)(t->name.len > 96 ? 96 : t->name.len);
        if (t->name.len == 0 || t->name.len >= GGUF_MAX_NAME || memchr(t->name.s, 0, t->name.len))
            return err_set(c->err,
                           "%s: tensor %llu: bad name '%.*s' (empty, NUL byte or "
                           "longer than %d bytes)",
                           f->path, (unsigned long long)i, nl, t->name.s, GGUF_MAX_NAME - 1);
        snprintf(c->what, sizeof c->what, "tensor '%.*s'", nl, t->name.s);
        if (cur_u32(c, &t->n_dims)) return -1;
        if (t->n_dims < 1 || t->n_dims > 4)
            return err_set(c->err, "%s: tensor '%.*s': n_dims %u is not in 1..4", f->path, nl,
                           t->name.s, t->n_dims);
        int64_t nelem = 1;
        for (int d = 0; d < 4; d++) {
            uint64_t ne = 1;
            if ((uint32_t)d < t->n_dims && cur_u64(c, &ne)) return -1;
            if (ne > INT64_MAX)
                return err_set(c->err, "%s: tensor '%.*s': dimension %d is negative (%lld)",
                               f->path, nl, t->name.s, d, (long long)ne);
            t->ne[d] = (int64_t)ne;
            if (__builtin_mul_overflow(nelem, t->ne[d], &nelem))
                return err_set(c->err, "%s: tensor '%.*s': element count overflows", f->path, nl,
                               t->name.s);
        }
        uint32_t type;
        if (cur_u32(c, &type)) return -1;
        if (!dtype_valid(type))
            return err_set(c->err, "%s: tensor '%.*s': type %u (%s) is not supported", f->path, nl,
                           t->name.s, type, ggml_type_name(type));
        t->type = type;
        if (t->ne[0] % dtype_block_elems(t->type))
            return err_set(c->err,
                           "%s: tensor '%.*s': ne[0] = %lld is not a multiple of the "
                           "%s block size %d",
                           f->path, nl, t->name.s, (long long)t->ne[0], dtype_name(t->type),
                           dtype_block_elems(t->type));
        int64_t row = dtype_row_bytes(t->type, t->ne[0]);
        if (row < 0)
            return err_set(c->err, "%s: tensor '%.*s': byte size overflows", f->path, nl,
                           t->name.s);
        uint64_t nbytes = (uint64_t)row;
        for (int d = 1; d < 4; d++)
            if (size_mul(nbytes, (uint64_t)t->ne[d], &nbytes))
                return err_set(c->err, "%s: tensor '%.*s': byte size overflows", f->path, nl,
                               t->name.s);
        t->nbytes = nbytes;
        if (cur_u64(c, &t->offset)) return -1; /* relative for now */
    }
    return 0;
}

/* Data section placement: alignment of each offset, bounds, no overlap, no duplicates. */
static int check_tensors(struct gguf_file *f, char *err) {
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        struct gguf_tensor_info *t = &f->tensors[i];
        int nl = (int)(t->name.len > 96 ? 96 : t->name.len);
        if (t->offset % f->alignment)
            return err_set(err,
                           "%s: tensor '%.*s': offset %llu is not a multiple of the "
                           "alignment %u",
                           f->path, nl, t->name.s, (unsigned long long)t->offset, f->alignment);
        uint64_t begin, end;
        int ovf = size_add(f->data_offset, t->offset, &begin) || size_add(begin, t->nbytes, &end);
        if (ovf || end > f->size)
            return err_set(err,
                           "%s: tensor '%.*s': data ends at byte %s%llu past end of file "
                           "(%llu bytes)",
                           f->path, nl, t->name.s, ovf ? "> " : "",
                           ovf ? (unsigned long long)UINT64_MAX : (unsigned long long)end,
                           (unsigned long long)f->size);
        t->offset = begin;
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) f->t_sorted[i] = &f->tensors[i];
    qsort(f->t_sorted, f->n_tensors, sizeof *f->t_sorted, tname_cmp);
    for (uint64_t i = 1; i < f->n_tensors; i++)
        if (!tname_cmp(&f->t_sorted[i - 1], &f->t_sorted[i]))
            return err_set(err, "%s: duplicate tensor name '%.*s'", f->path,
                           (int)f->t_sorted[i]->name.len, f->t_sorted[i]->name.s);
    /* Overlap check on a copy sorted by offset; t_sorted stays sorted by name. */
    struct gguf_tensor_info **by_off = xmalloc((f->n_tensors ? f->n_tensors : 1) * sizeof *by_off);
    memcpy(by_off, f->t_sorted, f->n_tensors * sizeof *by_off);
    qsort(by_off, f->n_tensors, sizeof *by_off, toff_cmp);
    const struct gguf_tensor_info *prev = NULL;
    int rc = 0;
    for (uint64_t i = 0; i < f->n_tensors && !rc; i++) {
        const struct gguf_tensor_info *t = by_off[i];
        if (t->nbytes == 0) continue;
        if (prev && prev->offset + prev->nbytes > t->offset)
            rc = err_set(
                err,
                "%s: tensors '%.*s' (bytes %llu..%llu) and '%.*s' (bytes "
                "%llu..%llu) overlap",
                f->path, (int)prev->name.len, prev->name.s, (unsigned long long)prev->offset,
                (unsigned long long)(prev->offset + prev->nbytes), (int)t->name.len, t->name.s,
                (unsigned long long)t->offset, (unsigned long long)(t->offset + t->nbytes));
        prev = t;
    }
    free(by_off);
    return rc;
}

static int parse(struct gguf_file *f, char *err) {
    struct cursor c = {.base = f->base, .size = f->size, .path = f->path, .err = err};
    char magic[4];
    snprintf(c.what, sizeof c.what, "magic");
    if (cur_read(&c, magic, 4)) return -1;
    if (memcmp(magic, "GGUF", 4))
        return err_set(err, "%s: not a GGUF file (bad magic %02x %02x %02x %02x)", f->path,
                       (uint8_t)magic[0], (uint8_t)magic[1], (uint8_t)magic[2], (uint8_t)magic[3]);
    snprintf(c.what, sizeof c.what, "version");
    if (cur_u32(&c, &f->version)) return -1;
    if (f->version == 1)
        return err_set(err,
                       "%s: GGUF version 1 is not supported (only versions 2 and 3); "
                       "re-convert the model",
                       f->path);
    if (f->version != 2 && f->version != 3) {
        if ((f->version & 0xffff) == 0)
            return err_set(err, "%s: unsupported GGUF version %u (a big-endian file?)", f->path,
                           f->version);
        return err_set(err, "%s: unsupported GGUF version %u (only versions 2 and 3)", f->path,
                       f->version);
    }
    snprintf(c.what, sizeof c.what, "tensor count");
    if (cur_u64(&c, &f->n_tensors)) return -1;
    snprintf(c.what, sizeof c.what, "metadata count");
    if (cur_u64(&c, &f->n_kv)) return -1;
    /* A metadata entry takes at least 13 bytes, a tensor info at least 32: counts beyond
     * what the file can hold are refused before allocating. */
    uint64_t left = c.size - c.pos;
    if (f->n_tensors > GGUF_MAX_TENSORS)
        return err_set(err, "%s: tensor count %llu is too large (limit %llu)", f->path,
                       (unsigned long long)f->n_tensors, (unsigned long long)GGUF_MAX_TENSORS);
    if (f->n_kv > GGUF_MAX_KV)
        return err_set(err, "%s: metadata count %llu is too large (limit %llu)", f->path,
                       (unsigned long long)f->n_kv, (unsigned long long)GGUF_MAX_KV);
    uint64_t need = f->n_tensors * 32 + f->n_kv * 13; /* < 2^26: cannot overflow */
    if (need > left)
        return err_set(err,
                       "%s: file truncated or corrupt: %llu tensors and %llu metadata "
                       "entries need at least %llu bytes but only %llu remain",
                       f->path, (unsigned long long)f->n_tensors, (unsigned long long)f->n_kv,
                       (unsigned long long)need, (unsigned long long)left);
    f->kv = calloc(f->n_kv ? f->n_kv : 1, sizeof *f->kv);
    f->kv_sorted = calloc(f->n_kv ? f->n_kv : 1, sizeof *f->kv_sorted);
    f->tensors = calloc(f->n_tensors ? f->n_tensors : 1, sizeof *f->tensors);
    f->t_sorted = calloc(f->n_tensors ? f->n_tensors : 1, sizeof *f->t_sorted);
    if (!f->kv || !f->kv_sorted || !f->tensors || !f->t_sorted)
        return err_set(err, "%s: out of memory", f->path);
    if (read_kvs(f, &c) || read_alignment(f, err) || read_tensor_infos(f, &c)) return -1;
    uint64_t a = f->alignment;
    if (size_add(c.pos, a - 1, &f->data_offset))
        return err_set(err, "%s: data section offset overflows", f->path);
    f->data_offset -= f->data_offset % a;
    return check_tensors(f, err);
}

static struct gguf_file *file_new(const char *name) {
    struct gguf_file *f = xcalloc(1, sizeof *f);
    f->fd = -1;
    f->path = xstrdup(name ? name : "(null)");
    return f;
}

int gguf_open_buf(struct gguf_file **out, const void *data, size_t size, const char *name,
                  char *err) {
    *out = NULL;
    struct gguf_file *f = file_new(name);
    f->base = data;
    f->size = size;
    if (parse(f, err)) {
        gguf_close(f);
        return -1;
    }
    *out = f;
    return 0;
}

int gguf_open(struct gguf_file **out, const char *path, char *err) {
    *out = NULL;
    struct gguf_file *f = file_new(path);
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0) {
        err_set(err, "%s: cannot open: %s", path, strerror(errno));
        gguf_close(f);
        return -1;
    }
    struct stat st;
    if (fstat(f->fd, &st) || !S_ISREG(st.st_mode)) {
        err_set(err, "%s: not a regular file", path);
        gguf_close(f);
        return -1;
    }
    f->size = (uint64_t)st.st_size;
    if (f->size > 0) {
        void *p = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, f->fd, 0);
        if (p == MAP_FAILED) {
            err_set(err, "%s: mmap failed: %s", path, strerror(errno));
            gguf_close(f);
            return -1;
        }
        f->base = p;
        f->mapped = 1;
    }
    if (parse(f, err)) {
        gguf_close(f);
        return -1;
    }
    *out = f;
    return 0;
}

void gguf_close(struct gguf_file *f) {
    if (!f) return;
    for (uint64_t i = 0; f->kv && i < f->n_kv; i++)
        if (f->kv[i].type == GGUF_ARRAY) free(f->kv[i].v.arr.data);
    free(f->kv);
    free(f->kv_sorted);
    free(f->tensors);
    free(f->t_sorted);
    if (f->mapped) munmap((void *)f->base, f->size);
    if (f->fd >= 0) close(f->fd);
    free(f->path);
    free(f);
}

uint32_t gguf_version(const struct gguf_file *f) { return f->version; }
int gguf_fd(const struct gguf_file *f) { return f->fd; }
const char *gguf_path(const struct gguf_file *f) { return f->path; }
uint32_t gguf_alignment(const struct gguf_file *f) { return f->alignment; }
uint64_t gguf_data_offset(const struct gguf_file *f) { return f->data_offset; }
uint64_t gguf_n_tensors(const struct gguf_file *f) { return f->n_tensors; }

const struct gguf_tensor_info *gguf_tensor(const struct gguf_file *f, uint64_t i) {
    return i < f->n_tensors ? &f->tensors[i] : NULL;
}

const struct gguf_tensor_info *gguf_find_tensor(const struct gguf_file *f, const char *name) {
    if (!f->n_tensors) return NULL;
    struct gguf_tensor_info k = {.name = {strlen(name), name}};
    struct gguf_tensor_info *kp = &k;
    struct gguf_tensor_info **r = bsearch(&kp, f->t_sorted, f->n_tensors, sizeof *f->t_sorted,
                                          tname_cmp);
    return r ? *r : NULL;
}

uint64_t gguf_n_kv(const struct gguf_file *f) { return f->n_kv; }

const struct gguf_str *gguf_kv_key(const struct gguf_file *f, uint64_t i) {
    return i < f->n_kv ? &f->kv[i].key : NULL;
}

enum gguf_vtype gguf_kv_type(const struct gguf_file *f, uint64_t i) {
    return i < f->n_kv ? f->kv[i].type : GGUF_UINT8;
}

int gguf_has_key(const struct gguf_file *f, const char *key) { return kv_find(f, key) != NULL; }

int gguf_key_type(const struct gguf_file *f, const char *key) {
    const struct gguf_kv *kv = kv_find(f, key);
    return kv ? (int)kv->type : -1;
}

static int is_unsigned(enum gguf_vtype t) {
    return t == GGUF_UINT8 || t == GGUF_UINT16 || t == GGUF_UINT32 || t == GGUF_UINT64;
}
static int is_signed(enum gguf_vtype t) {
    return t == GGUF_INT8 || t == GGUF_INT16 || t == GGUF_INT32 || t == GGUF_INT64;
}

int gguf_get_u32(const struct gguf_file *f, const char *key, uint32_t *out) {
    const struct gguf_kv *kv = kv_find(f, key);
    if (!kv) return -1;
    if (is_unsigned(kv->type) && kv->v.u <= UINT32_MAX) {
        *out = (uint32_t)kv->v.u;
        return 0;
    }
    if (is_signed(kv->type) && kv->v.i >= 0 && kv->v.i <= (int64_t)UINT32_MAX) {
        *out = (uint32_t)kv->v.i;
        return 0;
    }
    return -1;
}

int gguf_get_i64(const struct gguf_file *f, const char *key, int64_t *out) {
    const struct gguf_kv *kv = kv_find(f, key);
    if (!kv) return -1;
    if (is_unsigned(kv->type) && kv->v.u <= INT64_MAX) {
        *out = (int64_t)kv->v.u;
        return 0;
    }
    if (is_signed(kv->type)) {
        *out = kv->v.i;
        return 0;
    }
    return -1;
}

int gguf_get_u64(const struct gguf_file *f, const char *key, uint64_t *out) {
    const struct gguf_kv *kv = kv_find(f, key);
    if (!kv) return -1;
    if (is_unsigned(kv->type)) {
        *out = kv->v.u;
        return 0;
    }
    if (is_signed(kv->type) && kv->v.i >= 0) {
        *out = (uint64_t)kv->v.i;
        return 0;
    }
    return -1;
}

int gguf_get_f64(const struct gguf_file *f, const char *key, double *out) {
    const struct gguf_kv *kv = kv_find(f, key);
    if (!kv || (kv->type != GGUF_FLOAT32 && kv->type != GGUF_FLOAT64)) return -1;
    *out = kv->v.f;
    return 0;
}

int gguf_get_f32(const struct gguf_file *f, const char *key, float *out) {
    const struct gguf_kv *kv = kv_find(f, key);
    if (!kv || (kv->type != GGUF_FLOAT32 && kv->type != GGUF_FLOAT64)) return -1;
    *out = (float)kv->v.f;
    return 0;
}

int gguf_get_bool(const struct gguf_file *f, const char *key, int *out) {
    const struct gguf_kv *kv = kv_find(f, key);
    if (!kv || kv->type != GGUF_BOOL) return -1;
    *out = kv->v.u != 0;
    return 0;
}

const struct gguf_str *gguf_get_str(const struct gguf_file *f, const char *key) {
    const struct gguf_kv *kv = kv_find(f, key);
    return kv && kv->type == GGUF_STRING ? &kv->v.str : NULL;
}

int gguf_get_arr(const struct gguf_file *f, const char *key, enum gguf_vtype *elem_type,
                 uint64_t *n, const void **data) {
    const struct gguf_kv *kv = kv_find(f, key);
    if (!kv || kv->type != GGUF_ARRAY) return -1;
    *elem_type = kv->v.arr.type;
    *n = kv->v.arr.n;
    *data = kv->v.arr.data;
    return 0;
}
