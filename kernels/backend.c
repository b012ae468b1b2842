#include "backend.h"

#include <string.h>

#include "../util/env.h"
#include "../util/err.h"
#include "cpu/backend_cpu.h"
#include "profile.h"
#if TPD_HAVE_CUDA
#include "cuda/backend_cuda.h"
#endif

static int open_kind(struct backend *b, const char *kind, int threads, int local_rank, char *err) {
    if (!kind) kind = "auto";
#if TPD_HAVE_CUDA
    if (!strcmp(kind, "cuda") || (!strcmp(kind, "auto") && backend_cuda_available()))
        return backend_cuda_init(b, local_rank, err);
#else
    (void)local_rank;
    if (!strcmp(kind, "cuda")) return err_set(err, "backend \"cuda\": this build has no CUDA backend (built without nvcc or without kernels/cuda sources)");
#endif
    if (strcmp(kind, "cpu") && strcmp(kind, "auto") && strcmp(kind, "cuda"))
        return err_set(err, "unknown backend \"%s\" (cpu, cuda, auto)", kind);
    backend_cpu_init(b, threads);
    return 0;
}

/* TPD_PROFILE_OPS=1: every op timed (kernels/profile.h), a table at exit */
int backend_open(struct backend *b, const char *kind, int threads, int local_rank, char *err) {
    memset(b, 0, sizeof *b);
    int rc = open_kind(b, kind, threads, local_rank, err);
    if (!rc && env_flag("TPD_PROFILE_OPS")) backend_profile_wrap(b);
    return rc;
}

void backend_close(struct backend *b) {
    if (b->destroy) b->destroy(b);
    memset(b, 0, sizeof *b);
}
