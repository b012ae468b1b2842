/* The floors the GPU benchmarks are measured against, in the same run: read-only streaming
 * bandwidth (a kernel that reads a buffer much larger than L2 and keeps only a sum), a
 * device-to-device copy beside it (bytes read + written), and cuBLAS BF16 GEMM throughput.
 * Prints one "BENCH key=value ..." line per result (tests/gpu/run collects them).
 *
 *   bench_gpu_bandwidth [--gib 4] [--gemm 8192] */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/check_cuda.h"

/* Each thread streams 16-byte loads, several in flight, and folds them into one value that
 * is written only if impossible, so the loads cannot be dropped. */
static __global__ void read_kernel(const uint4 *__restrict__ p, size_t n, unsigned *sink) {
    unsigned acc = 0;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        const uint4 a = p[i], b = p[i + stride], c = p[i + 2 * stride], d = p[i + 3 * stride];
        acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^
               d.z ^ d.w;
    }
    for (; i < n; i += stride) {
        const uint4 a = p[i];
        acc ^= a.x ^ a.y ^ a.z ^ a.w;
    }
    if (acc == 0x9e3779b9u) *sink = acc;
}

static __global__ void fill_kernel(__nv_bfloat16 *p, size_t n, float scale) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)(i * 2654435761u);
        p[i] = __float2bfloat16(((float)(h & 0xffff) / 32768.0f - 1.0f) * scale);
    }
}

static float time_ms(cudaStream_t s, cudaEvent_t a, cudaEvent_t b) {
    float ms = 0;
    CUDA_CHECK(cudaEventSynchronize(b));
    CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    (void)s;
    return ms;
}

int main(int argc, char **argv) {
    double gib = 4;
    int gemm_n = 8192;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--gib") && i + 1 < argc) gib = atof(argv[++i]);
        else if (!strcmp(argv[i], "--gemm") && i + 1 < argc) gemm_n = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_gpu_bandwidth [--gib 4] [--gemm 8192]\n");
            return 2;
        }
    }
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev < 1) {
        printf("skipped: no GPU\n");
        return 0;
    }
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, %d SMs, %.1f GiB\n", prop.name, prop.multiProcessorCount,
           prop.totalGlobalMem / 1073741824.0);
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreate(&s));
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));

    const size_t bytes = (size_t)(gib * 1073741824.0) & ~(size_t)4095;
    char *a = NULL, *b = NULL;
    unsigned *sink = NULL;
    CUDA_CHECK(cudaMalloc(&a, bytes));
    CUDA_CHECK(cudaMalloc(&b, bytes));
    CUDA_CHECK(cudaMalloc(&sink, sizeof(unsigned)));
    CUDA_CHECK(cudaMemset(a, 1, bytes));
    CUDA_CHECK(cudaMemset(b, 0, bytes));
    const int blocks = prop.multiProcessorCount * 8;
    const int reps = 10;
    /* streaming read */
    read_kernel<<<blocks, 512, 0, s>>>((const uint4 *)a, bytes / 16, sink);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaEventRecord(e0, s));
    for (int r = 0; r < reps; r++)
        read_kernel<<<blocks, 512, 0, s>>>((const uint4 *)a, bytes / 16, sink);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaEventRecord(e1, s));
    float ms = time_ms(s, e0, e1);
    printf("BENCH stream_read GBps=%.1f bytes=%zu\n", (double)bytes * reps / (ms * 1e-3) / 1e9,
           bytes);
    /* device-to-device copy: bytes read + bytes written */
    CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s));
    CUDA_CHECK(cudaEventRecord(e0, s));
    for (int r = 0; r < reps; r++)
        CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s));
    CUDA_CHECK(cudaEventRecord(e1, s));
    ms = time_ms(s, e0, e1);
    printf("BENCH d2d_copy GBps=%.1f bytes=%zu (read+write)\n",
           2.0 * bytes * reps / (ms * 1e-3) / 1e9, bytes);
    CUDA_CHECK(cudaFree(a));
    CUDA_CHECK(cudaFree(b));

    /* cuBLAS BF16 GEMM, f32 accumulation: C (n x n) = A^T B */
    const size_t nn = (size_t)gemm_n * gemm_n;
    __nv_bfloat16 *A = NULL, *B = NULL, *C = NULL;
    CUDA_CHECK(cudaMalloc(&A, nn * 2));
    CUDA_CHECK(cudaMalloc(&B, nn * 2));
    CUDA_CHECK(cudaMalloc(&C, nn * 2));
    fill_kernel<<<1024, 256, 0, s>>>(A, nn, 1.0f);
    fill_kernel<<<1024, 256, 0, s>>>(B, nn, 1.0f);
    CUDA_CHECK(cudaGetLastError());
    cublasHandle_t h;
    CUBLAS_CHECK(cublasCreate(&h));
    CUBLAS_CHECK(cublasSetStream(h, s));
    const float one = 1, zero = 0;
    for (int w = 0; w < 3; w++)
        CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, gemm_n, gemm_n, gemm_n, &one, A,
                                  CUDA_R_16BF, gemm_n, B, CUDA_R_16BF, gemm_n, &zero, C,
                                  CUDA_R_16BF, gemm_n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    CUDA_CHECK(cudaEventRecord(e0, s));
    for (int r = 0; r < reps; r++)
        CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, gemm_n, gemm_n, gemm_n, &one, A,
                                  CUDA_R_16BF, gemm_n, B, CUDA_R_16BF, gemm_n, &zero, C,
                                  CUDA_R_16BF, gemm_n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    CUDA_CHECK(cudaEventRecord(e1, s));
    ms = time_ms(s, e0, e1);
    printf("BENCH gemm_bf16 TFLOPs=%.1f n=%d\n",
           2.0 * gemm_n * (double)nn * reps / (ms * 1e-3) / 1e12, gemm_n);
    CUBLAS_CHECK(cublasDestroy(h));
    CUDA_CHECK(cudaFree(A));
    CUDA_CHECK(cudaFree(B));
    CUDA_CHECK(cudaFree(C));
    CUDA_CHECK(cudaFree(sink));
    return 0;
}
