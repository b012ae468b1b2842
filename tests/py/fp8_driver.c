/* util/fp8.h on stdin/stdout for tests/py/test_fp8.py:
 *   fp8_driver decode      256 float32: the value of every code
 *   fp8_driver encode      float32s in -> one code byte per float out
 *   fp8_driver rows HD     rows of HD float32s in -> per row its exponent (int8), then HD codes */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/fp8.h"

int main(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "decode")) {
        for (int b = 0; b < 256; b++) {
            float f = fp8_e4m3_to_f32((uint8_t)b);
            fwrite(&f, sizeof f, 1, stdout);
        }
        return 0;
    }
    if (argc >= 2 && !strcmp(argv[1], "encode")) {
        float f;
        while (fread(&f, sizeof f, 1, stdin) == 1) putchar(fp8_e4m3_from_f32(f));
        return 0;
    }
    if (argc >= 3 && !strcmp(argv[1], "rows")) {
        const int hd = atoi(argv[2]);
        if (hd < 1 || hd > 4096) return 2;
        float *x = malloc(sizeof(float) * (size_t)hd);
        uint8_t *q = malloc((size_t)hd);
        while (fread(x, sizeof(float), (size_t)hd, stdin) == (size_t)hd) {
            putchar((uint8_t)(int8_t)fp8_encode_row(q, x, hd));
            fwrite(q, 1, (size_t)hd, stdout);
        }
        free(x);
        free(q);
        return 0;
    }
    fprintf(stderr, "usage: fp8_driver decode | encode | rows HD\n");
    return 2;
}
