/* Internal to kernels/cuda: the per-rank context, the check macros every CUDA / cuBLAS call
 * goes through (util/check_cuda.h), the launch check each launcher ends with, and small
 * device helpers. */
#ifndef TPD_CUDA_COMMON_CUH
#define TPD_CUDA_COMMON_CUH

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "../backend.h"
#include "../../util/dtype.h"
#include "../../util/fatal.h"
}
#include "../../util/check_cuda.h"

/* After every <<<>>>: a bad configuration shows here; with debug.cuda_sync the stream is
 * also synchronized so a fault names the kernel that made it. */
void cuda_launch_check(cudaStream_t s, const char *kernel, const char *file, int line);
#define CUDA_LAUNCH_CHECK(stream, name) cuda_launch_check((stream), (name), __FILE__, __LINE__)

/* One rank's device state. Work is queued on `stream` only, so the ops need no other
 * synchronization; `ws` is scratch that any op may use for the length of its own work
 * (stream order keeps users apart), grown on demand. */
enum { CUDA_GRAPH_SLOTS = 16, CUDA_RETIRED_MAX = 8 };

/* One captured step (cu_graph_run): the key the caller gave, the executable graph (NULL
 * until captured), the epoch it was captured in, whether the key has been seen uncaptured. */
struct cuda_graph_slot {
    uint64_t key;
    cudaGraphExec_t exec;
    unsigned epoch;
    int used, seen;
    long last_use;
};

struct cuda_ctx {
    int device;
    int n_sm;
    int cc;           /* compute capability, major * 10 + minor (89: FP8 tensor cores) */
    int w8a8_refused; /* the W8A8 product's fallback has been logged (matmul_w8a8.cu) */
    cudaStream_t stream;
    cublasHandle_t cublas;
    void *ws;
    size_t ws_bytes;
    void *host_pinned; /* small pinned staging for results the host waits on */
    size_t host_pinned_bytes;
    /* Graphs: a captured graph holds the addresses of ws and of the caller's buffers as they
     * were; growing ws or freeing any device memory starts a new epoch, and graphs of an
     * older one are not replayed. A ws outgrown during a capture
     * is kept (the captured work uses it) in retired until the stream is idle. */
    unsigned epoch;
    int capturing, capture_spoiled;
    void *retired[CUDA_RETIRED_MAX];
    int n_retired;
    struct cuda_graph_slot graphs[CUDA_GRAPH_SLOTS];
    long graph_clock;
    struct backend_debug dbg; /* the [debug] switches the kernels' launchers read */
    struct cuda_lt *lt;       /* cuBLASLt, its workspace, the GEMM tuning table (gemm_lt.cu) */
    char gpu_name[256];
};

/* Scratch of at least `bytes` on the device, valid until the next call. */
void *cuda_ws(struct cuda_ctx *c, size_t bytes);
/* Pinned host scratch of at least `bytes`. */
void *cuda_host_scratch(struct cuda_ctx *c, size_t bytes);

static inline unsigned cuda_blocks(int64_t n, int per) { return (unsigned)((n + per - 1) / per); }

/* ---- device helpers ---- */

static __device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

static __device__ __forceinline__ int warp_sum_int(int v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Sum over a block of blockDim.x threads (a multiple of 32, at most 1024); every thread
 * gets the result. `red` is 32 floats of shared memory. */
static __device__ __forceinline__ float block_sum(float v, float *red) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads(); /* red may still be read by a previous call */
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = lane < nw ? red[lane] : 0.0f;
    return warp_sum(v);
}

static __device__ __forceinline__ float ld_f16(const void *p, int64_t i) {
    return __half2float(((const __half *)p)[i]);
}
static __device__ __forceinline__ float ld_bf16(const void *p, int64_t i) {
    return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
}

#endif
