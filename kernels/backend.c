#include "backend.h"

#include <assert.h>
#include <stddef.h>
#include <string.h>

#include "../util/err.h"
#include "cpu/backend_cpu.h"
#if TPD_HAVE_CUDA
#include "cuda/backend_cuda.h"
#endif

/* The op list and the struct agree slot for slot: each op sits at its index among the
 * function pointers that start at alloc, and those pointers end the struct. */
typedef void (*backend_fn)(void);
#define OPS_BASE offsetof(struct backend, alloc)
#define BACKEND_OP_SLOT(ID, field, flags) \
    static_assert(offsetof(struct backend, field) == \
                          OPS_BASE + BACKEND_OP_##ID * sizeof(backend_fn) && \
                      sizeof(((struct backend *)0)->field) == sizeof(backend_fn), \
                  "BACKEND_OPS and struct backend disagree on where " #field " sits");
BACKEND_OPS(BACKEND_OP_SLOT)
#undef BACKEND_OP_SLOT
static_assert(sizeof(struct backend) == OPS_BASE + BACKEND_OP_COUNT * sizeof(backend_fn),
              "struct backend has a function pointer BACKEND_OPS does not list (or a field "
              "after the ops)");

static const struct {
    const char *name;
    int flags;
    size_t offset;
} ops[] = {
#define BACKEND_OP_ROW(ID, field, flags) \
    [BACKEND_OP_##ID] = {#field, flags, offsetof(struct backend, field)},
    BACKEND_OPS(BACKEND_OP_ROW)
#undef BACKEND_OP_ROW
};

const char *backend_op_name(enum backend_op op) {
    return (unsigned)op < BACKEND_OP_COUNT ? ops[op].name : "?";
}

int backend_op_flags(enum backend_op op) {
    return (unsigned)op < BACKEND_OP_COUNT ? ops[op].flags : 0;
}

int backend_has_op(const struct backend *b, enum backend_op op) {
    backend_fn f = NULL;
    if ((unsigned)op < BACKEND_OP_COUNT) memcpy(&f, (const char *)b + ops[op].offset, sizeof f);
    return f != NULL;
}

int backend_check(const struct backend *b, char *err) {
    for (int op = 0; op < BACKEND_OP_COUNT; op++)
        if (!(ops[op].flags & BOP_OPTIONAL) && !backend_has_op(b, op))
            return err_set(err, "backend \"%s\": its op table has no %s", b->name ? b->name : "?",
                           ops[op].name);
    return 0;
}

static int open_kind(struct backend *b, const char *kind, int threads, int local_rank,
                     const struct backend_debug *dbg, char *err) {
    if (!kind) kind = "auto";
#if TPD_HAVE_CUDA
    if (!strcmp(kind, "cuda") || (!strcmp(kind, "auto") && backend_cuda_available()))
        return backend_cuda_init(b, local_rank, dbg, err);
#else
    (void)local_rank, (void)dbg;
    if (!strcmp(kind, "cuda"))
        return err_set(err, "backend \"cuda\": this build has no CUDA backend (built without nvcc "
                            "or without kernels/cuda sources)");
#endif
    if (strcmp(kind, "cpu") && strcmp(kind, "auto") && strcmp(kind, "cuda"))
        return err_set(err, "unknown backend \"%s\" (cpu, cuda, auto)", kind);
    backend_cpu_init(b, threads);
    return 0;
}

int backend_resolves_to_cpu(const char *kind) {
    if (kind && !strcmp(kind, "cpu")) return 1;
#if TPD_HAVE_CUDA
    return kind && !strcmp(kind, "auto") ? !backend_cuda_available() : 0;
#else
    return !kind || !strcmp(kind, "auto");
#endif
}

int backend_gpu_memory(const char *kind, int local_rank, struct backend_gpu_memory *m, char *err) {
    if (backend_resolves_to_cpu(kind)) return 1;
#if TPD_HAVE_CUDA
    size_t fr = 0, tot = 0;
    if (backend_cuda_memory(local_rank, &m->device, &m->n_devices, &fr, &tot, err)) return -1;
    m->free_bytes = fr;
    m->total_bytes = tot;
    return 0;
#else
    (void)local_rank, (void)m;
    return err_set(err, "backend \"%s\": this build has no CUDA backend", kind ? kind : "auto");
#endif
}

int backend_open(struct backend *b, const char *kind, int threads, int local_rank,
                 const struct backend_debug *dbg, char *err) {
    const struct backend_debug dflt = backend_debug_defaults();
    if (!dbg) dbg = &dflt;
    memset(b, 0, sizeof *b);
    int rc = open_kind(b, kind, threads, local_rank, dbg, err);
    if (!rc && backend_check(b, err)) {
        backend_close(b);
        return -1;
    }
    return rc;
}

void backend_close(struct backend *b) {
    if (b->destroy) b->destroy(b);
    memset(b, 0, sizeof *b);
}
