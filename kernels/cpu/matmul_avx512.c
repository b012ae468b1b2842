/* The tiles of matmul_avx2.c compiled once more for CPUs with AVX-512 (F, BW, VL, VNNI): Q4_1
 * takes 512-bit vpdpbusd over all four rows of a tile at once (tile_q4_1_512), the other
 * types the VNNI tiles with the 256-bit EVEX vpdpbusd (so CPUs without AVX-VNNI, such as AMD
 * Zen 4, take them too). mm_rows_avx512 gives mm_rows_avx2's bits. Picked at run time
 * (cpu_matmul_has_avx512). */
#define TPD_MM_VNNI 1
#define TPD_MM_AVX512 1
#include "matmul_avx2.c"
