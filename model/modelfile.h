/* A model on disk, GGUF file or Hugging Face directory, opened as untrusted input: the
 * hyperparameters plus a directory of tensors (name, type, shape, byte range) with
 * GGUF-style names. Every rank opens it and reads only the byte ranges it needs. */
#ifndef TPD_MODELFILE_H
#define TPD_MODELFILE_H

#include <stdint.h>

#include "../util/dtype.h"
#include "fp8cfg.h"
#include "int4cfg.h"
#include "hparams.h"
#include "tensors.h"

struct gguf_file;

/* One tensor. Names follow GGUF ("token_embd.weight", "blk.3.attn_q.weight", ...);
 * HF names are mapped on open. ne[0] is the innermost (contiguous) dimension, so a
 * weight matrix of `rows` outputs by `cols` inputs has ne[0] = cols, ne[1] = rows,
 * stored row after row. */
struct mf_tensor {
    char *name;
    enum dtype type;
    int n_dims;
    int64_t ne[4];   /* unused dims are 1 */
    int file;        /* index into model_file.paths */
    uint64_t offset; /* absolute byte offset of the data in that file */
    uint64_t nbytes;
    char *src_name;  /* name in the source file when it differs (HF), else NULL */
    int fp8;         /* HF F8_E4M3 codes: the file holds ne[0] bytes a row, type is the
                      * DT_F8_E4M3_S32 they become on load (fp8w_read), and the scale
                      * is the tensor "<name>.scale" */
    int int4;        /* enum int4w_part of an INT4 checkpoint's tensor: INT4W_PACKED for
                      * the packed weight (ne the [in, out] it stands for, type the
                      * DT_I4_S32 it becomes on load: int4w_read), or one of its parts
                      * "<name><int4w_part_suffix>"; 0 otherwise */
    char qdtype[12]; /* the file's dtype string of an INT4 tensor or part ("I32", "F16") */
};

struct model_file {
    struct model_hparams hp;
    int n_tensors;
    struct mf_tensor *tensors;
    int n_files;
    char **paths;
    int *fds;
    struct gguf_file *gguf; /* non-NULL when opened from a GGUF file (metadata for the tokenizer) */
    char *hf_dir;           /* non-NULL when opened from an HF directory */
    struct fp8w_config fp8; /* config.json's quantization_config (HF): FP8 */
    struct int4w_config int4; /* or INT4 (at most one of them is set) */
    int *by_name;             /* tensor indices sorted by name, for modelfile_find */
};

/* path: a .gguf file, or a directory with config.json and *.safetensors. On success the
 * hyperparameters are validated and every tensor of model/tensors.h's table the forward pass
 * needs exists with its shape and a type its role allows (see modelfile.c: validate). When
 * hp.tied_embeddings is set the LM head is token_embd.weight (an output.weight may still
 * be listed); otherwise output.weight exists. A GGUF llama3 model carries its rope scaling
 * as the optional F32 tensor "rope_freqs.weight" (head_dim/2 frequency divisors). On
 * failure m is left zeroed and needs no close. */
int modelfile_open(struct model_file *m, const char *path, char *err);
void modelfile_close(struct model_file *m);
/* NULL if absent. */
const struct mf_tensor *modelfile_find(const struct model_file *m, const char *name);
/* Row id of the tensor table (model/tensors.h) for layer `layer` (ignored by model-wide
 * rows); NULL if absent. */
const struct mf_tensor *modelfile_tensor(const struct model_file *m, enum tensor_id id, int layer);
/* Expert `expert` of an expert row (tensors.h) of layer `layer`: the 3-D tensor of every
 * expert with *row0 the first row of this one's matrix (GGUF), or this expert's own tensor
 * with *row0 = 0 (HF); NULL if absent. */
const struct mf_tensor *modelfile_expert(const struct model_file *m, enum tensor_id id, int layer,
                                         int expert, int64_t *row0);
/* Reads len bytes starting off bytes into tensor t; -1 (with err) if outside the tensor
 * or on a short read. */
/* Bytes the tensors take once loaded: FP8 and INT4 weights as the F8_E4M3_S32 / I4_S32
 * blocks they become (their scales, zero points and g_idx inside them), the rest as in
 * the file. What the memory plan counts. */
uint64_t modelfile_held_bytes(const struct model_file *m);
int modelfile_read(const struct model_file *m, const struct mf_tensor *t, uint64_t off,
                   uint64_t len, void *dst, char *err);

#endif
