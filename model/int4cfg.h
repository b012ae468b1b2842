/* INT4 weight-only Hugging Face checkpoints' config.json quantization_config (GPTQ, AWQ
 * GEMM, compressed-tensors pack-quantized) and the names and shapes of their packed tensors'
 * parts: what modelfile needs to list the tensors (int4w.h checks and reads them). */
#ifndef TPD_INT4CFG_H
#define TPD_INT4CFG_H

#include <stddef.h>
#include <stdint.h>

/* DT_I4_S32: 32 codes and their group's f32 scale and zero point a block; the largest
 * group and packed tensor read */
enum { I4_ELEMS = 32, I4_BLOCK_BYTES = 24, I4_MAX_GROUP = 1 << 16, I4_MAX_STORED = 1 << 28 };

enum int4w_format {
    INT4W_NONE, /* no INT4 quantization_config (maybe an FP8 one: model/fp8w.h) */
    INT4W_CT,   /* compressed-tensors pack-quantized: weight_packed [out, in/8] */
    INT4W_GPTQ, /* qweight [in/8, out], qzeros [groups, out/8], scales [groups, out] */
    INT4W_AWQ,  /* qweight [in, out/8] in AWQ's nibble order, qzeros, scales as GPTQ */
};

struct int4w_config {
    enum int4w_format format;
    int group;       /* input columns per group; 0: one group per output row (channel) */
    int sym;         /* compressed-tensors symmetric: no zero point tensor (zero 0) */
    int zero_offset; /* GPTQ v1 ("gptq" checkpoint_format): stored zero + 1 */
    char method[32]; /* quant_method, for messages */
};

/* The parts of one quantized matrix, as tensors "<GGUF name of the weight><suffix>". */
enum int4w_part { INT4W_NOT, INT4W_PACKED, INT4W_SCALE, INT4W_ZERO, INT4W_GIDX, INT4W_SHAPE };
extern const char *const int4w_part_suffix[]; /* "", ".qscale", ".qzero", ".gidx", ".qshape" */

/* Reads quantization_config from the config.json text: format NONE (and nothing else
 * checked) when there is none or its method is not an INT4 one (then model/fp8w.h decides).
 * Refuses, naming the file and the scheme: bits other than 4, group sizes that are not a
 * multiple of 32, activation quantization, AWQ without zero points or in GEMV packing,
 * compressed-tensors config groups with different weight schemes. */
int int4w_config_parse(struct int4w_config *q, const char *json, size_t len, const char *path,
                       char *err);
/* Which part of a quantized matrix HF tensor `name` is (INT4W_NOT: none), and the HF name
 * of its weight ("<prefix>.weight") into out. */
enum int4w_part int4w_part_of(const struct int4w_config *q, const char *name, char *out, size_t n);
/* The [in, out] (ne order) a packed tensor of file shape shape[0..n_dims) stands for; -1
 * when it is not 2-D or too large. */
int int4w_logical_shape(const struct int4w_config *q, const int64_t *shape, int n_dims,
                        int64_t ne[2]);

#endif
