#include "version.h"

#include <stdio.h>

#include "tpd_build_info.h" /* TPD_GIT_COMMIT, written at each build (cmake/build_info.cmake) */

const char *version_number(void) { return TPD_VERSION; }
const char *version_commit(void) { return TPD_GIT_COMMIT; }

const char *version_backends(void) {
#if TPD_HAVE_CUDA
    return "cpu, cuda (archs " TPD_CUDA_ARCHS ")";
#else
    return "cpu";
#endif
}

void version_line(const char *program, char *buf, unsigned long len) {
    snprintf(buf, len, "%s %s (commit %s, backends: %s)", program, version_number(),
             version_commit(), version_backends());
}
