/* libFuzzer target for the safetensors header parser: any byte string must be accepted
 * with every tensor inside the input, or refused with an error naming the file. Build and
 * run: see fuzz/README.md. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/safetensors.h"
#include "util/err.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct safetensors_file f;
    char err[ERR_LEN];
    if (safetensors_open_buf(&f, data, size, "fuzz.safetensors", err)) {
        if (!strstr(err, "fuzz.safetensors: ")) abort();
        return 0;
    }
    for (int i = 0; i < f.n_tensors; i++) {
        const struct safetensors_tensor *t = &f.tensors[i];
        if (t->offset > size || t->nbytes > size - t->offset) abort();
        if (safetensors_find(&f, t->name) != t) abort();
    }
    safetensors_close(&f);
    return 0;
}
