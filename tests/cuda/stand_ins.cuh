/* Stand-ins for backend_cuda.cu's helpers, for the CUDA tests that compile one kernel file in
 * (tests/cuda/test_cuda_*.cu) without the backend's graph bookkeeping: the launch check and
 * the workspace. Include after the kernel file, in one translation unit. */
#ifndef TPD_TESTS_CUDA_STAND_INS_CUH
#define TPD_TESTS_CUDA_STAND_INS_CUH

/* Outside timing and capture every launch is synchronized, so that a fault names its kernel. */
static int sync_launches = 1;

void cuda_launch_check(cudaStream_t s, const char *kernel, const char *file, int line) {
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess && sync_launches) e = cudaStreamSynchronize(s);
    if (e != cudaSuccess)
        fatal_exit(file, line, "%s: %s (%s)", kernel, cudaGetErrorString(e), cudaGetErrorName(e));
}

void *cuda_ws(struct cuda_ctx *c, size_t bytes) {
    if (bytes <= c->ws_bytes) return c->ws;
    if (c->capturing)
        fatal_exit(__FILE__, __LINE__, "cuda_ws grew during a capture (%zu bytes)", bytes);
    if (c->ws) {
        CUDA_CHECK(cudaDeviceSynchronize());
        CUDA_CHECK(cudaFree(c->ws));
    }
    CUDA_CHECK(cudaMalloc(&c->ws, bytes));
    c->ws_bytes = bytes;
    return c->ws;
}

#endif
