/* libFuzzer target for the GGUF header parser: any byte string must be either accepted
 * with consistent tensor infos or refused with an error, never crash or read out of
 * bounds. Build and run: see fuzz/README.md. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf.h"
#include "util/err.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct gguf_file *f;
    char err[ERR_LEN];
    if (gguf_open_buf(&f, data, size, "fuzz.gguf", err)) {
        if (!strstr(err, "fuzz.gguf: ")) abort(); /* every error names the file */
        return 0;
    }
    /* Accepted: every tensor must lie inside the input, aligned. */
    for (uint64_t i = 0; i < gguf_n_tensors(f); i++) {
        const struct gguf_tensor_info *t = gguf_tensor(f, i);
        if (t->offset > size || t->nbytes > size - t->offset) abort();
        if (t->offset % gguf_alignment(f)) abort();
        if (gguf_find_tensor(f, "") == t) abort();
    }
    /* Touch every metadata entry through the getters. */
    for (uint64_t i = 0; i < gguf_n_kv(f); i++) {
        const struct gguf_str *k = gguf_kv_key(f, i);
        char key[256];
        if (k->len >= sizeof key) continue;
        memcpy(key, k->s, k->len);
        key[k->len] = 0;
        if (gguf_key_type(f, key) < 0) abort();
        enum gguf_vtype et;
        uint64_t n;
        const void *arr;
        if (!gguf_get_arr(f, key, &et, &n, &arr) && et == GGUF_STRING) {
            const struct gguf_str *s = arr;
            for (uint64_t j = 0; j < n; j++)
                if (s[j].len && ((const uint8_t *)s[j].s < data ||
                                 (const uint8_t *)s[j].s + s[j].len > data + size))
                    abort();
        }
    }
    gguf_close(f);
    return 0;
}
