/* FP8 E4M3 Hugging Face checkpoints' config.json quantization_config (which scheme, which
 * scales) and the names of their scale tensors: what modelfile needs to list the tensors
 * (fp8w.h checks and reads them). */
#ifndef TPD_FP8CFG_H
#define TPD_FP8CFG_H

#include <stddef.h>

/* DT_F8_E4M3_S32: 32 codes and their f32 scale a block; the largest scale tile read */
enum { FP8W_ELEMS = 32, FP8W_BLOCK_BYTES = 36, FP8W_MAX_SCALE_BLOCK = 1 << 16 };

enum fp8w_scheme {
    FP8W_NONE,    /* no quantization_config: F8_E4M3 tensors are refused */
    FP8W_TENSOR,  /* one scale per matrix (compressed-tensors strategy "tensor") */
    FP8W_CHANNEL, /* one scale per output row (compressed-tensors "channel", fbgemm_fp8) */
    FP8W_BLOCK,   /* one scale per block_rows x block_cols tile ("fp8" weight_block_size,
                   * compressed-tensors "block") */
};

struct fp8w_config {
    enum fp8w_scheme scheme;
    int block_rows, block_cols; /* FP8W_BLOCK */
    char method[32];            /* quant_method, for messages */
    const char *scale_suffix;   /* "weight_scale" or "weight_scale_inv" (same meaning:
                                 * dequantized weight = code * scale) */
};

/* Reads quantization_config from the config.json text (len bytes, path for messages):
 * scheme NONE when there is none. Activations: dynamic schemes (per token, per tensor or
 * per group, computed at run time) run as weight-only math (W8A16: weights dequantized
 * exactly, activations kept in f32, as transformers runs these checkpoints on a CPU);
 * static activation scales, output or KV-cache quantization, other methods and formats,
 * and weights that are not 8-bit float are refused with the scheme named. */
int fp8w_config_parse(struct fp8w_config *q, const char *json, size_t len, const char *path,
                      char *err);
/* The scale tensor of an HF name that ends in ".<suffix>" (q's suffix): 1 and the name of
 * its weight ("<prefix>.weight") into out; 0 when name is no scale tensor. */
int fp8w_scale_of(const struct fp8w_config *q, const char *name, char *out, size_t n);

#endif
