/* The AVX2 tiles of matmul_avx2.c compiled once more with AVX-VNNI (vpdpbusd) for the 4-bit
 * weight types: mm_rows_avxvnni, the same bits as mm_rows_avx2 (see matmul_avx2.c), about a
 * third fewer multiply-port uops a block, which matters where several tokens share each
 * weight pass (prefill, speculative verify steps). Picked at run time
 * (cpu_matmul_has_vnni). */
#define TPD_MM_VNNI 1
#include "matmul_avx2.c"
