/* INT4 weight-only (W4A16) Hugging Face checkpoints: config.json's quantization_config
 * (GPTQ, AWQ GEMM, compressed-tensors pack-quantized), the packed tensors' names and shapes,
 * and each rank's shard of a weight read with its scales and zero points into tpd's
 * DT_I4_S32 blocks (32 codes + the f32 scale and zero point of their group). Called by
 * modelfile_open and the weight loader on every rank. */
#ifndef TPD_INT4W_H
#define TPD_INT4W_H

#include <stddef.h>
#include <stdint.h>

struct model_file;
struct mf_tensor;

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
/* After modelfile has listed the tensors: every packed weight is a column- or row-parallel
 * matrix of whole 32-column blocks with scales (and zero points, g_idx, weight_shape) of
 * the shapes and types its format gives; every part has its packed weight. */
int int4w_check(const struct model_file *m, char *err);
/* How this rank stores columns [col0, col0 + ncols) of packed weight t (col0 on a group
 * boundary): *gather NULL and *kp = ncols when each of their 32-column blocks lies in one
 * group (no g_idx, or one that moves whole blocks), else GPTQ act-order's scattered groups:
 * the columns sorted by group (stably), each group's run padded to whole 32-column blocks,
 * as *gather[*kp] (xmalloc'd): the slice column each stored column takes (0-based from
 * col0), or -1 for padding (struct bweight's gather). Reads g_idx whole and refuses entries
 * outside the groups and groups without their group_size columns (the last group: the rest),
 * naming the tensor, on every rank whatever its slice. */
int int4w_order(const struct model_file *m, const struct mf_tensor *t, int64_t col0, int64_t ncols,
                int32_t **gather, int64_t *kp, char *err);
/* Rows [row0, row0 + nrows) x columns [col0, col0 + ncols) of packed weight t (col0 and
 * ncols multiples of 32, col0 on a group boundary) as DT_I4_S32 rows of kp columns into dst
 * (nrows * kp / 32 * 24 bytes) in the order int4w_order gave (gather and kp; gather NULL:
 * kp = ncols, as they are), padding columns holding their block's zero point where a code
 * can (each one's activation is 0 anyway): reads only those codes and the scales and zero
 * points of their groups. Refuses scales that are not finite, g_idx entries outside the
 * groups and a stored block whose columns g_idx puts in several groups. */
int int4w_read(const struct model_file *m, const struct mf_tensor *t, int64_t row0, int64_t nrows,
               int64_t col0, int64_t ncols, const int32_t *gather, int64_t kp, uint8_t *dst,
               char *err);
/* The largest |value| in bytes of DT_I4_S32 blocks (struct bweight's amax: whether the
 * CUDA backend's prefill copy of the matrix fits F16 or takes BF16). */
float int4w_amax(const uint8_t *blocks, size_t bytes);

#endif
