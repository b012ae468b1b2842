/* safetensors reader: one file's JSON header parsed as untrusted input (length bounded by
 * the file and a cap, each tensor's dtype, shape and byte range checked, duplicates and
 * overlapping ranges refused). Used by modelfile for Hugging Face directories. */
#ifndef TPD_SAFETENSORS_H
#define TPD_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "../util/dtype.h"

#define SAFETENSORS_MAX_DIMS 8
#define SAFETENSORS_MAX_HEADER (100u << 20)

struct safetensors_tensor {
    char *name;     /* as in the file, e.g. "model.layers.0.self_attn.q_proj.weight" */
    char dtype[12]; /* the file's dtype string, e.g. "BF16", "I64" */
    int supported;  /* 1 for F32, F16, BF16: `type` is then meaningful */
    enum dtype type;
    int n_dims;                          /* 0..SAFETENSORS_MAX_DIMS */
    int64_t shape[SAFETENSORS_MAX_DIMS]; /* outermost first, as in the file */
    uint64_t offset;                     /* absolute byte offset in the file */
    uint64_t nbytes;
};

struct safetensors_file {
    char *path;
    int fd;        /* -1 for an in-memory image */
    uint64_t size; /* file size */
    int n_tensors;
    struct safetensors_tensor *tensors; /* sorted by name */
};

/* Tensors with dtypes safetensors defines but we cannot compute with directly (I64, F64,
 * F8_*, ...) are listed with supported = 0 so that a caller may ignore them (modelfile takes
 * F8_E4M3 weights of FP8 checkpoints through model/fp8w.h); dtypes safetensors does not
 * define are refused. */
int safetensors_open(struct safetensors_file *f, const char *path, char *err);
/* The same over a whole file image in memory (fuzzing, tests); data is not kept. */
int safetensors_open_buf(struct safetensors_file *f, const void *data, size_t size,
                         const char *name, char *err);
void safetensors_close(struct safetensors_file *f);
/* NULL if absent. */
const struct safetensors_tensor *safetensors_find(const struct safetensors_file *f,
                                                  const char *name);

#endif
