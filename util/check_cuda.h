/* The check every CUDA runtime, cuBLAS and NCCL call goes through: on failure the statement,
 * file:line and the library's own error string, then the job ends (fatal_exit). For .c and
 * .cu files of builds with CUDA only; CUBLAS_CHECK and NCCL_CHECK need cublas_v2.h / nccl.h. */
#ifndef TPD_CHECK_CUDA_H
#define TPD_CHECK_CUDA_H

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif
#include "fatal.h"
#ifdef __cplusplus
}
#endif

#define CUDA_CHECK(call) \
    do { \
        cudaError_t e_ = (call); \
        if (e_ != cudaSuccess) \
            fatal_exit(__FILE__, __LINE__, "%s failed: %s (%s)", #call, cudaGetErrorString(e_), \
                       cudaGetErrorName(e_)); \
    } while (0)

#define CUBLAS_CHECK(call) \
    do { \
        cublasStatus_t s_ = (call); \
        if (s_ != CUBLAS_STATUS_SUCCESS) \
            fatal_exit(__FILE__, __LINE__, "%s failed: %s (%s)", #call, cublasGetStatusString(s_), \
                       cublasGetStatusName(s_)); \
    } while (0)

/* ncclGetLastError ignores its communicator argument: NULL serves every call. */
#define NCCL_CHECK(call) \
    do { \
        ncclResult_t r_ = (call); \
        if (r_ != ncclSuccess) \
            fatal_exit(__FILE__, __LINE__, "%s failed: %s (%s)", #call, ncclGetErrorString(r_), \
                       ncclGetLastError(NULL)); \
    } while (0)

#endif
