/* tests/cuda: the CUDA and CPU backends opened side by side for a CUDA-vs-CPU check
 * (test_cuda_quant, test_cuda_w8a8). */
#ifndef TPD_TESTS_CUDA_BACKEND_PAIR_H
#define TPD_TESTS_CUDA_BACKEND_PAIR_H

#include <stdio.h>

#include "../../kernels/backend.h"
#include "../../kernels/cuda/backend_cuda.h"

/* 1: both open (the caller closes them); 0: no GPU, "<what>: skipped: no GPU" printed; -1:
 * one failed to open, "FAIL: backend_open: ..." printed and nothing left open. */
static inline int backend_pair_open(struct backend *gpu, struct backend *cpu, const char *what) {
    if (!backend_cuda_available()) {
        printf("%s: skipped: no GPU\n", what);
        return 0;
    }
    char err[256];
    if (backend_open(gpu, "cuda", 0, 0, NULL, err)) {
        printf("FAIL: backend_open: %s\n", err);
        return -1;
    }
    if (backend_open(cpu, "cpu", 2, 0, NULL, err)) {
        backend_close(gpu);
        printf("FAIL: backend_open: %s\n", err);
        return -1;
    }
    return 1;
}

#endif
