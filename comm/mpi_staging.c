#include "mpi_staging.h"

#if TPD_HAVE_CUDA

#include <cuda_runtime_api.h>

#include "../util/check_cuda.h"

void mpi_staging_allreduce(struct mpi_staging *s, struct comm *c, float *buf, size_t n,
                           void *stream) {
    cudaStream_t st = (cudaStream_t)stream;
    if (n > s->cap) {
        if (s->host) CUDA_CHECK(cudaFreeHost(s->host));
        s->host = NULL;
        CUDA_CHECK(cudaMallocHost((void **)&s->host, n * sizeof(float)));
        s->cap = n;
    }
    CUDA_CHECK(cudaMemcpyAsync(s->host, buf, n * sizeof(float), cudaMemcpyDeviceToHost, st));
    CUDA_CHECK(cudaStreamSynchronize(st));
    comm_allreduce_host(c, s->host, n);
    CUDA_CHECK(cudaMemcpyAsync(buf, s->host, n * sizeof(float), cudaMemcpyHostToDevice, st));
}

void mpi_staging_free(struct mpi_staging *s) {
    if (s->host) cudaFreeHost(s->host);
    cudaGetLastError();
    s->host = NULL;
    s->cap = 0;
}

#endif
