/* INT4 weight-only (W4A16) Hugging Face checkpoints (their quantization_config and tensor
 * names: int4cfg.h): the packed tensors' checks, and each rank's shard of a weight read with
 * its scales and zero points into tpd's DT_I4_S32 blocks (32 codes + the f32 scale and zero
 * point of their group). Called by checkpoint_open and the weight loader on every rank. */
#ifndef TPD_INT4W_H
#define TPD_INT4W_H

#include <stddef.h>
#include <stdint.h>

#include "int4cfg.h"

struct model_file;
struct mf_tensor;

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
