/* Element types of tensors as stored in model files (GGML numbering, so GGUF type ids
 * map directly). Block size and bytes per block for every supported type. */
#ifndef TPD_DTYPE_H
#define TPD_DTYPE_H

#include <stdint.h>

enum dtype {
    DT_F32 = 0,
    DT_F16 = 1,
    DT_Q4_0 = 2,
    DT_Q4_1 = 3,
    DT_Q8_0 = 8,
    DT_Q4_K = 12,
    DT_Q6_K = 14,
    DT_BF16 = 30,
    /* tpd's weight type for Hugging Face FP8 E4M3 checkpoints, made on load (model/fp8w.h):
     * blocks of 32 E4M3 codes with the f32 scale that multiplies them (the checkpoint's
     * per-tensor, per-row or 128x128 block scale, whichever covers those 32 elements).
     * No GGML id: a number GGML does not use, refused in GGUF files by dtype_valid. */
    DT_F8_E4M3_S32 = 240,
    /* tpd's weight type for Hugging Face INT4 weight-only checkpoints (GPTQ, AWQ,
     * compressed-tensors pack-quantized), made on load (model/int4w.h): blocks of 32 4-bit
     * codes with the f32 scale and zero point of the group that covers them; value
     * (q - z) * d, exact. No GGML id either. */
    DT_I4_S32 = 241,
};

/* tpd's own type for the KV cache only (FP8 E4M3 codes with a power-of-two scale per row,
 * util/fp8.h): never in a model file (dtype_valid refuses it), so it is no enumerator and
 * the weight code's switches over the GGML types need no case for it. */
#define DT_F8_E4M3 ((enum dtype)1000)

/* 1 for supported types, 0 otherwise (the value came from an untrusted file). */
int dtype_valid(uint32_t t);
/* 1 for every type a weight matrix may have in memory: dtype_valid's, DT_F8_E4M3_S32
 * and DT_I4_S32. */
int dtype_weight_ok(enum dtype t);
const char *dtype_name(enum dtype t);
int dtype_block_elems(enum dtype t); /* elements per block: 1, 32 or 256 */
int dtype_block_bytes(enum dtype t); /* bytes per block */
/* Bytes of a row of n elements; -1 if n is not a whole number of blocks or overflows. */
int64_t dtype_row_bytes(enum dtype t, int64_t n);

#endif
