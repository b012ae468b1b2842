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

#define CK(call)                                                                                          \
    do {                                                                                                  \
        cudaError_t e_ = (call);                                                                          \
        if (e_ != cudaSuccess) {                                                                          \
            fprintf(stderr, "%s:%d: %s failed: %s (%s)\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_), \
                    cudaGetErrorName(e_));                                                                \
            exit(1);                                                                                      \
        }                                                                                                 \
    } while (0)
#define CKB(call)                                                                                         \
    do {                                                                                                  \
        cublasStatus_t s_ = (call);                                                                       \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                                \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, cublasGetStatusString(s_)); \
            exit(1);                                                                                      \
        }                                                                                                 \
    } while (0)

/* Each thread streams 16-byte loads, several in flight, and folds them into one value that
 * is written only if impossible, so the loads cannot be dropped. */
static __global__ void read_kernel(const uint4 *__restrict__ p, size_t n, unsigned *sink) {
    unsigned acc = 0;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        const uint4 a = p[i], b = p[i + stride], c = p[i + 2 * stride], d = p[i + 3 * stride];
        acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
    }
    for (; i < n; i += stride) {
        const uint4 a = p[i];
        acc ^= a.x ^ a.y ^ a.z ^ a.w;
    }
    if (acc == 0x9e3779b9u) *sink = acc;
}

static __global__ void fill_kernel(__nv_bfloat16 *p, size_t n, float scale) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)(i * 2654435761u);
        p[i] = __float2bfloat16(((float)(h & 0xffff) / 32768.0f - 1.0f) * scale);
    }
}

static float time_ms(cudaStream_t s, cudaEvent_t a, cudaEvent_t b) {
    float ms = 0;
    CK(cudaEventSynchronize(b));
    CK(cudaEventElapsedTime(&ms, a, b));
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
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, %d SMs, %.1f GiB\n", prop.name, prop.multiProcessorCount, prop.totalGlobalMem / 1073741824.0);
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));

    const size_t bytes = (size_t)(gib * 1073741824.0) & ~(size_t)4095;
    char *a = NULL, *b = NULL;
    unsigned *sink = NULL;
    CK(cudaMalloc(&a, bytes));
    CK(cudaMalloc(&b, bytes));
    CK(cudaMalloc(&sink, sizeof(unsigned)));
    CK(cudaMemset(a, 1, bytes));
    CK(cudaMemset(b, 0, bytes));
    const int blocks = prop.multiProcessorCount * 8;
    const int reps = 10;
    /* streaming read */
    read_kernel<<<blocks, 512, 0, s>>>((const uint4 *)a, bytes / 16, sink);
    CK(cudaGetLastError());
    CK(cudaEventRecord(e0, s));
    for (int r = 0; r < reps; r++) read_kernel<<<blocks, 512, 0, s>>>((const uint4 *)a, bytes / 16, sink);
    CK(cudaGetLastError());
    CK(cudaEventRecord(e1, s));
    float ms = time_ms(s, e0, e1);
    printf("BENCH stream_read GBps=%.1f bytes=%zu\n", (double)bytes * reps / (ms * 1e-3) / 1e9, bytes);
    /* device-to-device copy: bytes read + bytes written */
    CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s));
    CK(cudaEventRecord(e0, s));
    for (int r = 0; r < reps; r++) CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s));
    CK(cudaEventRecord(e1, s));
    ms = time_ms(s, e0, e1);
    printf("BENCH d2d_copy GBps=%.1f bytes=%zu (read+write)\n", 2.0 * bytes * reps / (ms * 1e-3) / 1e9, bytes);
    CK(cudaFree(a));
    CK(cudaFree(b));

    /* cuBLAS BF16 GEMM, f32 accumulation: C (n x n) = A^T B */
    const size_t nn = (size_t)gemm_n * gemm_n;
    __nv_bfloat16 *A = NULL, *B = NULL, *C = NULL;
    CK(cudaMalloc(&A, nn * 2));
    CK(cudaMalloc(&B, nn * 2));
    CK(cudaMalloc(&C, nn * 2));
    fill_kernel<<<1024, 256, 0, s>>>(A, nn, 1.0f);
    fill_kernel<<<1024, 256, 0, s>>>(B, nn, 1.0f);
    CK(cudaGetLastError());
    cublasHandle_t h;
    CKB(cublasCreate(&h));
    CKB(cublasSetStream(h, s));
    const float one = 1, zero = 0;
    for (int w = 0; w < 3; w++)
        CKB(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, gemm_n, gemm_n, gemm_n, &one, A, CUDA_R_16BF, gemm_n, B,
                         CUDA_R_16BF, gemm_n, &zero, C, CUDA_R_16BF, gemm_n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    CK(cudaEventRecord(e0, s));
    for (int r = 0; r < reps; r++)
        CKB(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, gemm_n, gemm_n, gemm_n, &one, A, CUDA_R_16BF, gemm_n, B,
                         CUDA_R_16BF, gemm_n, &zero, C, CUDA_R_16BF, gemm_n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    CK(cudaEventRecord(e1, s));
    ms = time_ms(s, e0, e1);
    printf("BENCH gemm_bf16 TFLOPs=%.1f n=%d\n", 2.0 * gemm_n * (double)nn * reps / (ms * 1e-3) / 1e12, gemm_n);
    CKB(cublasDestroy(h));
    CK(cudaFree(A));
    CK(cudaFree(B));
    CK(cudaFree(C));
    CK(cudaFree(sink));
    return 0;
}
