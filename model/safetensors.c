/* safetensors reader: an 8-byte little-endian header length N, N bytes of JSON, then the
 * data section that the JSON's data_offsets index. */
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../util/err.h"
#include "../util/fatal.h"

#define ST_MAX_TENSORS (1 << 20)
#define ST_MAX_NAME 1024

static const struct {
    const char *name;
    int bytes;
    int type; /* enum dtype, or -1 when we cannot compute with it */
} st_dtypes[] = {
    {"F32", 4, DT_F32}, {"F16", 2, DT_F16}, {"BF16", 2, DT_BF16}, {"F64", 8, -1},
    {"I64", 8, -1},     {"U64", 8, -1},     {"I32", 4, -1},       {"U32", 4, -1},
    {"I16", 2, -1},     {"U16", 2, -1},     {"I8", 1, -1},        {"U8", 1, -1},
    {"BOOL", 1, -1},    {"F8_E4M3", 1, -1}, {"F8_E5M2", 1, -1},   {"F8_E8M0", 1, -1},
};

/* JSON numbers arrive as doubles: accept only whole numbers 0..2^53, where a double is
 * exact. */
static int json_uint(const cJSON *j, uint64_t *out) {
    if (!cJSON_IsNumber(j)) return -1;
    double d = j->valuedouble;
    if (!isfinite(d) || d < 0 || d > 9007199254740992.0 || floor(d) != d) return -1;
    *out = (uint64_t)d;
    return 0;
}

static int name_cmp(const void *a, const void *b) {
    return strcmp(((const struct safetensors_tensor *)a)->name,
                  ((const struct safetensors_tensor *)b)->name);
}

static int off_cmp(const void *a, const void *b) {
    const struct safetensors_tensor *x = *(const struct safetensors_tensor *const *)a;
    const struct safetensors_tensor *y = *(const struct safetensors_tensor *const *)b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

static int parse_entry(struct safetensors_file *f, const cJSON *e, struct safetensors_tensor *t,
                       uint64_t data_start, char *err) {
    const char *name = e->string;
    if (!cJSON_IsObject(e))
        return err_set(err, "%s: tensor '%s': entry is not a JSON object", f->path, name);
    if (!name[0] || strlen(name) > ST_MAX_NAME)
        return err_set(err, "%s: tensor name '%.64s' is empty or too long", f->path, name);
    t->name = xstrdup(name);

    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    if (!cJSON_IsString(dt))
        return err_set(err, "%s: tensor '%s': missing or non-string \"dtype\"", f->path, name);
    int bytes = 0;
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (!strcmp(dt->valuestring, st_dtypes[i].name)) {
            bytes = st_dtypes[i].bytes;
            t->supported = st_dtypes[i].type >= 0;
            t->type = t->supported ? (enum dtype)st_dtypes[i].type : DT_F32;
            snprintf(t->dtype, sizeof t->dtype, "%s", st_dtypes[i].name);
        }
    if (!bytes)
        return err_set(err, "%s: tensor '%s': unknown dtype \"%.32s\"", f->path, name,
                       dt->valuestring);

    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    if (!cJSON_IsArray(shape))
        return err_set(err, "%s: tensor '%s': missing or non-array \"shape\"", f->path, name);
    int nd = cJSON_GetArraySize(shape);
    if (nd > SAFETENSORS_MAX_DIMS)
        return err_set(err, "%s: tensor '%s': %d dimensions (at most %d)", f->path, name, nd,
                       SAFETENSORS_MAX_DIMS);
    t->n_dims = nd;
    uint64_t expect = (uint64_t)bytes;
    int d = 0, ovf = 0;
    for (const cJSON *x = shape->child; x; x = x->next, d++) {
        uint64_t v;
        if (json_uint(x, &v))
            return err_set(err, "%s: tensor '%s': shape[%d] is not a non-negative integer", f->path,
                           name, d);
        t->shape[d] = (int64_t)v;
        ovf |= size_mul(expect, v, &expect);
    }
    if (ovf)
        return err_set(err, "%s: tensor '%s': shape is too large (byte size overflows)", f->path,
                       name);

    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    uint64_t begin, end;
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 || json_uint(offs->child, &begin) ||
        json_uint(offs->child->next, &end))
        return err_set(err,
                       "%s: tensor '%s': \"data_offsets\" must be two non-negative "
                       "integers",
                       f->path, name);
    if (begin > end)
        return err_set(err, "%s: tensor '%s': data_offsets [%llu, %llu] end before they begin",
                       f->path, name, (unsigned long long)begin, (unsigned long long)end);
    uint64_t data_size = f->size - data_start;
    if (end > data_size)
        return err_set(err,
                       "%s: tensor '%s': data_offsets end %llu is past the end of the "
                       "data section (%llu bytes)",
                       f->path, name, (unsigned long long)end, (unsigned long long)data_size);
    if (end - begin != expect)
        return err_set(err,
                       "%s: tensor '%s': data_offsets span %llu bytes but shape and dtype "
                       "%s need %llu",
                       f->path, name, (unsigned long long)(end - begin), t->dtype,
                       (unsigned long long)expect);
    t->offset = data_start + begin;
    t->nbytes = end - begin;
    return 0;
}

static int parse_header(struct safetensors_file *f, const char *json, uint64_t n, char *err) {
    const char *stop = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, n, &stop, 0);
    if (!root)
        return err_set(err, "%s: header is not valid JSON (error near byte %lld of %llu)", f->path,
                       stop ? (long long)(stop - json) : -1LL, (unsigned long long)n);
    int rc = 0;
    /* The spec allows trailing spaces as padding; anything else means a bad length. */
    for (const char *p = stop; p && p < json + n && !rc; p++)
        if (*p != ' ' && *p != '\n' && *p != '\t' && *p != '\r')
            rc = err_set(err, "%s: header has trailing bytes after the JSON object", f->path);
    if (!rc && !cJSON_IsObject(root)) rc = err_set(err, "%s: header is not a JSON object", f->path);
    int count = 0;
    for (const cJSON *e = rc ? NULL : root->child; e; e = e->next)
        count += strcmp(e->string, "__metadata__") != 0;
    if (!rc && count > ST_MAX_TENSORS)
        rc = err_set(err, "%s: %d tensors (limit %d)", f->path, count, ST_MAX_TENSORS);
    if (!rc) {
        f->tensors = calloc(count ? (size_t)count : 1, sizeof *f->tensors);
        if (!f->tensors) rc = err_set(err, "%s: out of memory", f->path);
    }
    uint64_t data_start = 8 + n;
    for (const cJSON *e = rc ? NULL : root->child; e && !rc; e = e->next) {
        if (!strcmp(e->string, "__metadata__")) continue;
        rc = parse_entry(f, e, &f->tensors[f->n_tensors++], data_start, err);
    }
    cJSON_Delete(root);
    if (rc) return -1;

    qsort(f->tensors, (size_t)f->n_tensors, sizeof *f->tensors, name_cmp);
    for (int i = 1; i < f->n_tensors; i++)
        if (!strcmp(f->tensors[i - 1].name, f->tensors[i].name))
            return err_set(err, "%s: duplicate tensor name '%s'", f->path, f->tensors[i].name);
    const struct safetensors_tensor **by_off = xmalloc((f->n_tensors ? (size_t)f->n_tensors : 1) *
                                                       sizeof *by_off);
    for (int i = 0; i < f->n_tensors; i++) by_off[i] = &f->tensors[i];
    qsort(by_off, (size_t)f->n_tensors, sizeof *by_off, off_cmp);
    const struct safetensors_tensor *prev = NULL;
    for (int i = 0; i < f->n_tensors && !rc; i++) {
        const struct safetensors_tensor *t = by_off[i];
        if (t->nbytes == 0) continue;
        if (prev && prev->offset + prev->nbytes > t->offset)
            rc = err_set(err, "%s: tensors '%s' and '%s' have overlapping data_offsets", f->path,
                         prev->name, t->name);
        prev = t;
    }
    free(by_off);
    return rc;
}

/* Checks the length prefix against the file size and the cap; fills *n. */
static int check_len(struct safetensors_file *f, const uint8_t prefix[8], uint64_t *n, char *err) {
    uint64_t len = 0;
    for (int i = 7; i >= 0; i--) len = len << 8 | prefix[i];
    if (len > f->size - 8)
        return err_set(err, "%s: header length %llu is larger than the file (%llu bytes)", f->path,
                       (unsigned long long)len, (unsigned long long)f->size);
    if (len > SAFETENSORS_MAX_HEADER)
        return err_set(err, "%s: header length %llu exceeds the %u MB limit", f->path,
                       (unsigned long long)len, SAFETENSORS_MAX_HEADER >> 20);
    if (len < 2)
        return err_set(err, "%s: header length %llu is too small for a JSON object", f->path,
                       (unsigned long long)len);
    *n = len;
    return 0;
}

static void init(struct safetensors_file *f, const char *name) {
    memset(f, 0, sizeof *f);
    f->fd = -1;
    f->path = xstrdup(name);
}

int safetensors_open_buf(struct safetensors_file *f, const void *data, size_t size,
                         const char *name, char *err) {
    init(f, name);
    f->size = size;
    uint64_t n;
    if (size < 8) {
        err_set(err, "%s: file truncated: %zu bytes, too short for the header length", name, size);
        goto fail;
    }
    if (check_len(f, data, &n, err) || parse_header(f, (const char *)data + 8, n, err)) goto fail;
    return 0;
fail:
    safetensors_close(f);
    return -1;
}

/* pread that loops on short reads; -1 with errno, or the bytes read before EOF. */
static int64_t pread_full(int fd, void *dst, uint64_t len, uint64_t off) {
    uint64_t done = 0;
    while (done < len) {
        ssize_t r = pread(fd, (char *)dst + done, len - done, (off_t)(off + done));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) break;
        done += (uint64_t)r;
    }
    return (int64_t)done;
}

int safetensors_open(struct safetensors_file *f, const char *path, char *err) {
    init(f, path);
    char *json = NULL;
    uint8_t prefix[8];
    uint64_t n;
    struct stat st;
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0) {
        err_set(err, "%s: cannot open: %s", path, strerror(errno));
        goto fail;
    }
    if (fstat(f->fd, &st) || !S_ISREG(st.st_mode)) {
        err_set(err, "%s: not a regular file", path);
        goto fail;
    }
    f->size = (uint64_t)st.st_size;
    if (f->size < 8) {
        err_set(err, "%s: file truncated: %llu bytes, too short for the header length", path,
                (unsigned long long)f->size);
        goto fail;
    }
    if (pread_full(f->fd, prefix, 8, 0) != 8) {
        err_set(err, "%s: cannot read the header length: %s", path, strerror(errno));
        goto fail;
    }
    if (check_len(f, prefix, &n, err)) goto fail;
    json = malloc(n);
    if (!json) {
        err_set(err, "%s: out of memory for a %llu-byte header", path, (unsigned long long)n);
        goto fail;
    }
    if (pread_full(f->fd, json, n, 8) != (int64_t)n) {
        err_set(err, "%s: cannot read the %llu-byte header", path, (unsigned long long)n);
        goto fail;
    }
    if (parse_header(f, json, n, err)) goto fail;
    free(json);
    return 0;
fail:
    free(json);
    safetensors_close(f);
    return -1;
}

void safetensors_close(struct safetensors_file *f) {
    for (int i = 0; f->tensors && i < f->n_tensors; i++) free(f->tensors[i].name);
    free(f->tensors);
    if (f->fd >= 0) close(f->fd);
    free(f->path);
    memset(f, 0, sizeof *f);
    f->fd = -1;
}

const struct safetensors_tensor *safetensors_find(const struct safetensors_file *f,
                                                  const char *name) {
    if (!f->n_tensors) return NULL;
    struct safetensors_tensor k = {.name = (char *)name};
    return bsearch(&k, f->tensors, (size_t)f->n_tensors, sizeof k, name_cmp);
}
