/* Latency of the GPU all-reduce (comm/gpu_comm.c) for the message sizes of a decode step:
 * each size is reduced `iters` times back to back on the backend's stream, then checked.
 * Prints one "BENCH allreduce ..." line per size (tests/gpu/run collects them).
 *
 *   mpirun -np 2 bench_gpu_allreduce [--comm ipc] [--sizes 16384,1048576] [--iters 200] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "comm/gpu_comm.h"
#include "kernels/backend.h"
#include "util/clock.h"
#include "util/err.h"
#include "util/fatal.h"
#if TPD_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

int main(int argc, char **argv) {
    struct comm c;
    comm_init(&c, &argc, &argv);
    const char *mode = NULL, *sizes_s = "16384,1048576";
    int iters = 200;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--comm")) mode = argv[i + 1];
        else if (!strcmp(argv[i], "--sizes")) sizes_s = argv[i + 1];
        else if (!strcmp(argv[i], "--iters")) iters = atoi(argv[i + 1]);
    }
#if !TPD_HAVE_CUDA
    (void)mode, (void)sizes_s, (void)iters;
    if (c.rank == 0) printf("skipped: built without CUDA\n");
#else
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev < 1) {
        if (c.rank == 0) printf("skipped: no GPU\n");
        comm_finalize(&c);
        return 0;
    }
    if (c.size < 2) {
        if (c.rank == 0) printf("skipped: run under mpirun -np 2 or more\n");
        comm_finalize(&c);
        return 0;
    }
    char err[ERR_LEN] = "";
    struct backend be;
    if (backend_open(&be, "cuda", 0, c.local_rank, NULL, err)) FATAL("backend: %s", err);
    const struct comm_opts co = {.mode = mode};
    struct monitor *mon = monitor_start(c.rank, c.size);
    if (gpu_comm_init(&c, &be, &co, mon, err)) FATAL("communicator: %s", err);
    if (c.rank == 0)
        printf("%d ranks, %d GPU(s) visible, communicator %s\n", c.size, n_dev,
               gpu_comm_describe(&c));
    for (const char *p = sizes_s; *p;) {
        char *end;
        long bytes = strtol(p, &end, 10);
        if (end == p || bytes < 4) FATAL("--sizes: bad list '%s'", sizes_s);
        p = *end == ',' ? end + 1 : end;
        size_t n = (size_t)bytes / 4;
        float *h = xmalloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++) h[i] = (float)(c.rank + 1);
        float *d = be.alloc(be.ctx, n * sizeof(float));
        for (int w = 0; w < 10; w++) comm_allreduce_sum(&c, d, n); /* warm-up (zeros stay zeros) */
        be.sync(be.ctx);
        comm_barrier(&c);
        double t0 = clock_now();
        for (int it = 0; it < iters; it++) comm_allreduce_sum(&c, d, n);
        be.sync(be.ctx);
        double t = (clock_now() - t0) / iters;
        be.upload(be.ctx, d, h, n * sizeof(float));
        comm_allreduce_sum(&c, d, n);
        be.download(be.ctx, h, d, n * sizeof(float));
        const float want = (float)c.size * (c.size + 1) / 2;
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) bad += h[i] != want;
        if (c.rank == 0) {
            char name[64]; /* one word for the BENCH line: "ipc (host sync)" -> "ipc_host_sync" */
            size_t k = 0;
            for (const char *q = gpu_comm_describe(&c); *q && k + 1 < sizeof name; q++)
                if (*q != '(' && *q != ')') name[k++] = *q == ' ' ? '_' : *q;
            name[k] = 0;
            /* bus bandwidth as nccl-tests defines it: 2 (n-1)/n of the bytes per rank */
            double busbw = (double)bytes * 2.0 * (c.size - 1) / c.size / t / 1e9;
            printf("BENCH allreduce comm=%s ranks=%d bytes=%ld us=%.2f busbw_GBps=%.2f check=%s\n",
                   name, c.size, bytes, t * 1e6, busbw, bad ? "FAIL" : "ok");
            fflush(stdout);
        }
        be.free(be.ctx, d);
        free(h);
        if (!comm_all_ok(&c, bad == 0)) FATAL("all-reduce of %ld bytes returned wrong sums", bytes);
    }
    gpu_comm_free(&c);
    monitor_free(mon);
    backend_close(&be);
#endif
    comm_finalize(&c);
    return 0;
}
