/* FP8 E4M3 weights of Hugging Face checkpoints (their quantization_config: fp8cfg.h): the
 * scale tensors' shapes, and each rank's shard of a weight read with its scales into tpd's
 * DT_F8_E4M3_S32 blocks (32 codes + the f32 scale that covers them). Called by
 * checkpoint_open and the weight loader on every rank. */
#ifndef TPD_FP8W_H
#define TPD_FP8W_H

#include <stddef.h>
#include <stdint.h>

#include "fp8cfg.h"

struct model_file;
struct mf_tensor;

/* After modelfile has listed the tensors: every FP8 weight is a column- or row-parallel
 * matrix with a whole number of 32-element blocks per row and its scale tensor
 * ("<gguf name>.scale") of the shape the scheme gives; every scale has its FP8 weight. */
int fp8w_check(const struct model_file *m, char *err);
/* Rows [row0, row0 + nrows) x columns [col0, col0 + ncols) of FP8 weight t (col0 and
 * ncols multiples of 32) as DT_F8_E4M3_S32 rows into dst (nrows * ncols / 32 * 36 bytes):
 * reads only those codes and the scales that cover them. Refuses NaN codes and scales that
 * are not finite. */
int fp8w_read(const struct model_file *m, const struct mf_tensor *t, int64_t row0, int64_t nrows,
              int64_t col0, int64_t ncols, uint8_t *dst, char *err);

/* The largest |weight| of `bytes` bytes of DT_F8_E4M3_S32 blocks (what the CUDA backend
 * needs to pick an F16 or a BF16 copy). */
float fp8w_amax(const uint8_t *blocks, size_t bytes);
/* 1 when every block of each of the rows of `bytes` bytes of DT_F8_E4M3_S32 blocks (cols
 * elements a row) has the same scale bits as the row's first block (per-tensor and
 * per-channel checkpoints), else 0 (128x128 block scales that differ along a row); struct
 * bweight's row_scaled. */
int fp8w_row_scaled(const uint8_t *blocks, size_t bytes, int64_t cols);

#endif
