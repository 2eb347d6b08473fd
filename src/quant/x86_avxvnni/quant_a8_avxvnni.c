/* AVX-VNNI W8A8 / W4A8 kernels: the 256-bit kernels of quant/quant_a8_ymm.h with vpdpbusd (VEX form). */
#include <immintrin.h>

/* vpdpbusd (VEX) through inline asm: with the intrinsic GCC 12 copies the accumulator around every
 * call and spills tiles to the stack (measured 2x slower on the 512-bit twin of these kernels). */
static inline __m256i tb_quant_dot_avxvnni(__m256i acc, __m256i u8, __m256i s8) {
    __asm__("%{vex%} vpdpbusd %2, %1, %0" : "+x"(acc) : "x"(u8), "xm"(s8));
    return acc;
}
#define TB_QUANT_YMM_DOT(acc, u8, s8) tb_quant_dot_avxvnni((acc), (u8), (s8))

#include "quant/quant_a8_ymm.h"

const tb_quant_impl *tb_quant_impl_avxvnni(tb_quant_type type, tb_quant_act act) {
    if (act != TB_QUANT_ACT_INT8)
        return NULL; /* A32 at this level runs the AVX2 kernels (see tb_quant_kernel_resolve) */
    return type == TB_QUANT_INT8 ? &ymm_int8_a8 : &ymm_int4_a8;
}
