/* The float-vector API (16 lanes of AVX-512) that the shared kernel bodies in ../simd/ are written
 * against. Everything is static inline and this header is included only by AVX-512 translation units,
 * so no AVX-512 instruction can leak into code that runs on a lesser CPU. */
#ifndef TB_SIMD_API_AVX512_H
#define TB_SIMD_API_AVX512_H

#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define VF_LANES 16
#define VF_ISA_SUFFIX "avx512"

typedef __m512 vf;   /* 16 floats */
typedef __m512i vi;  /* 16 int32 */
typedef __mmask16 vm; /* one bit per lane */
typedef struct vd {  /* 16 double accumulators, lane i of a vf goes to lane i here */
    __m512d lo, hi;
} vd;

/* ---- loads and stores; *_part touch only the first n lanes (0 <= n <= VF_LANES) and read zeros
 * for the others, so they never fault past the end of a buffer. */
static inline vm vm_first(int64_t n) { return (vm)((1u << n) - 1u); }
static inline vf vf_load(const float *p) { return _mm512_loadu_ps(p); }
static inline void vf_store(float *p, vf v) { _mm512_storeu_ps(p, v); }
static inline vf vf_load_part(const float *p, int64_t n) { return _mm512_maskz_loadu_ps(vm_first(n), p); }
static inline void vf_store_part(float *p, vf v, int64_t n) { _mm512_mask_storeu_ps(p, vm_first(n), v); }

/* ---- arithmetic (IEEE, single rounding; fmadd etc. are fused) */
static inline vf vf_set1(float x) { return _mm512_set1_ps(x); }
static inline vf vf_zero(void) { return _mm512_setzero_ps(); }
static inline vf vf_add(vf a, vf b) { return _mm512_add_ps(a, b); }
static inline vf vf_sub(vf a, vf b) { return _mm512_sub_ps(a, b); }
static inline vf vf_mul(vf a, vf b) { return _mm512_mul_ps(a, b); }
static inline vf vf_div(vf a, vf b) { return _mm512_div_ps(a, b); }
static inline vf vf_sqrt(vf a) { return _mm512_sqrt_ps(a); }
static inline vf vf_fmadd(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }   /* a*b + c */
static inline vf vf_fmsub(vf a, vf b, vf c) { return _mm512_fmsub_ps(a, b, c); }   /* a*b - c */
static inline vf vf_fnmadd(vf a, vf b, vf c) { return _mm512_fnmadd_ps(a, b, c); } /* c - a*b */
/* even lanes a*b - c, odd lanes a*b + c */
static inline vf vf_fmaddsub(vf a, vf b, vf c) { return _mm512_fmaddsub_ps(a, b, c); }
/* x86 semantics: when either operand is NaN, or both are zeros, the result is b. */
static inline vf vf_max(vf a, vf b) { return _mm512_max_ps(a, b); }
static inline vf vf_min(vf a, vf b) { return _mm512_min_ps(a, b); }
static inline vf vf_round(vf a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
/* p * 2^n for integral n (as float), with IEEE overflow to inf and gradual underflow (one rounding). */
static inline vf vf_scale2(vf p, vf n) { return _mm512_scalef_ps(p, n); }

/* ---- bits */
static inline vf vf_and(vf a, vf b) { return _mm512_and_ps(a, b); }
static inline vf vf_or(vf a, vf b) { return _mm512_or_ps(a, b); }
static inline vf vf_xor(vf a, vf b) { return _mm512_xor_ps(a, b); }
static inline vf vf_andnot(vf a, vf b) { return _mm512_andnot_ps(a, b); } /* ~a & b */
static inline vf vf_abs(vf a) { return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(a), _mm512_set1_epi32(0x7fffffff))); }
static inline vf vf_neg(vf a) { return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(a), _mm512_set1_epi32((int)0x80000000u))); }
static inline vf vf_signbit(vf a) { return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(a), _mm512_set1_epi32((int)0x80000000u))); }

/* ---- comparisons (ordered: false when either is NaN, except vf_ne) and masks */
static inline vm vf_eq(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
static inline vm vf_ne(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_NEQ_UQ); }
static inline vm vf_lt(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
static inline vm vf_le(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_LE_OQ); }
static inline vm vf_gt(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
static inline vm vf_ge(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ); }
static inline vm vf_isnan(vf a) { return _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q); }
static inline vm vm_and(vm a, vm b) { return (vm)(a & b); }
static inline vm vm_or(vm a, vm b) { return (vm)(a | b); }
static inline vm vm_andnot(vm a, vm b) { return (vm)(~a & b); }
static inline vm vm_none(void) { return 0; }
static inline bool vm_any(vm m) { return m != 0; }
static inline unsigned vm_bits(vm m) { return m; }
static inline vf vf_select(vm m, vf a, vf b) { return _mm512_mask_blend_ps(m, b, a); } /* m ? a : b */

/* ---- int32 lanes */
static inline vi vi_set1(int32_t x) { return _mm512_set1_epi32(x); }
static inline vi vf_as_vi(vf a) { return _mm512_castps_si512(a); }
static inline vf vi_as_vf(vi a) { return _mm512_castsi512_ps(a); }
static inline vi vf_to_vi(vf a) { return _mm512_cvtps_epi32(a); } /* round to nearest even */
static inline vf vi_to_vf(vi a) { return _mm512_cvtepi32_ps(a); }
static inline vi vi_add(vi a, vi b) { return _mm512_add_epi32(a, b); }
static inline vi vi_sub(vi a, vi b) { return _mm512_sub_epi32(a, b); }
static inline vi vi_and(vi a, vi b) { return _mm512_and_si512(a, b); }
static inline vi vi_or(vi a, vi b) { return _mm512_or_si512(a, b); }
static inline vi vi_shl(vi a, int n) { return _mm512_sll_epi32(a, _mm_cvtsi32_si128(n)); }
static inline vi vi_shr(vi a, int n) { return _mm512_srl_epi32(a, _mm_cvtsi32_si128(n)); } /* logical */
static inline vm vi_gt(vi a, vi b) { return _mm512_cmpgt_epi32_mask(a, b); }
static inline vi vi_select(vm m, vi a, vi b) { return _mm512_mask_blend_epi32(m, b, a); }
static inline vi vi_iota(void) { return _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0); }
static inline void vi_store(int32_t *p, vi v) { _mm512_storeu_si512(p, v); }

/* ---- coefficient tables: VF_TABLE_SIZE floats held in registers, looked up per lane by the low
 * log2(VF_TABLE_SIZE) bits of an int32 index (vpermt2ps over two registers) */
#define VF_TABLE_SIZE 32
typedef struct vtable {
    __m512 lo, hi;
} vtable;
static inline vtable vtable_load(const float *entries) {
    vtable t = {_mm512_loadu_ps(entries), _mm512_loadu_ps(entries + 16)};
    return t;
}
static inline vf vtable_lookup(vtable t, vi index) { return _mm512_permutex2var_ps(t.lo, index, t.hi); }
static inline vi vf_to_vi_trunc(vf a) { return _mm512_cvttps_epi32(a); } /* toward zero */

/* ---- horizontal reductions (vf_hmax/vf_hmin ignore NaN handling: callers track NaN themselves) */
static inline float vf_hsum(vf v) { return _mm512_reduce_add_ps(v); }
static inline float vf_hmax(vf v) { return _mm512_reduce_max_ps(v); }
static inline float vf_hmin(vf v) { return _mm512_reduce_min_ps(v); }

/* ---- double accumulators for long sums */
static inline vd vd_zero(void) { vd r = {_mm512_setzero_pd(), _mm512_setzero_pd()}; return r; }
static inline vd vd_load(const double *p) { vd r = {_mm512_loadu_pd(p), _mm512_loadu_pd(p + 8)}; return r; }
static inline void vd_store(double *p, vd v) { _mm512_storeu_pd(p, v.lo); _mm512_storeu_pd(p + 8, v.hi); }
static inline vd vd_add_vf(vd acc, vf v) {
    acc.lo = _mm512_add_pd(acc.lo, _mm512_cvtps_pd(_mm512_castps512_ps256(v)));
    acc.hi = _mm512_add_pd(acc.hi, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
    return acc;
}
static inline __m512d vd_lo_of(vf v) { return _mm512_cvtps_pd(_mm512_castps512_ps256(v)); }
static inline __m512d vd_hi_of(vf v) { return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))); }
static inline vd vd_fmadd_vf(vd acc, vf mul, vf add) { /* acc * mul + add, in double */
    acc.lo = _mm512_fmadd_pd(acc.lo, vd_lo_of(mul), vd_lo_of(add));
    acc.hi = _mm512_fmadd_pd(acc.hi, vd_hi_of(mul), vd_hi_of(add));
    return acc;
}
static inline double vd_hsum(vd acc) { return _mm512_reduce_add_pd(_mm512_add_pd(acc.lo, acc.hi)); }
static inline vf vd_to_vf(vd acc) { /* lane-wise rounding back to float */
    __m256 lo = _mm512_cvtpd_ps(acc.lo), hi = _mm512_cvtpd_ps(acc.hi);
    return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
}

/* ---- bytes: masks from 0/1 condition bytes (nonzero = true) and masks to 0/1 bytes */
static inline vm vm_load_bytes(const uint8_t *p) { __m128i c = _mm_loadu_si128((const __m128i *)p); return _mm_test_epi8_mask(c, c); }
static inline vm vm_load_bytes_part(const uint8_t *p, int64_t n) { __m128i c = _mm_maskz_loadu_epi8(vm_first(n), p); return _mm_test_epi8_mask(c, c); }
static inline void vm_store_bytes(uint8_t *p, vm m) { _mm_storeu_si128((__m128i *)p, _mm_maskz_mov_epi8(m, _mm_set1_epi8(1))); }
static inline void vm_store_bytes_part(uint8_t *p, vm m, int64_t n) { _mm_mask_storeu_epi8(p, vm_first(n), _mm_maskz_mov_epi8(m, _mm_set1_epi8(1))); }

/* ---- 16-bit element loads/stores: IEEE half through the hardware converter (round to nearest even),
 * and raw uint16 lanes (zero-extended / truncated) for bfloat16 bit manipulation. */
static inline vf vf_load_f16(const uint16_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
static inline vf vf_load_f16_part(const uint16_t *p, int64_t n) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(vm_first(n), p)); }
static inline void vf_store_f16(uint16_t *p, vf v) { _mm256_storeu_si256((__m256i *)p, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)); }
static inline void vf_store_f16_part(uint16_t *p, vf v, int64_t n) { _mm256_mask_storeu_epi16(p, vm_first(n), _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)); }
static inline vi vi_load_u16(const uint16_t *p) { return _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)); }
static inline vi vi_load_u16_part(const uint16_t *p, int64_t n) { return _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(vm_first(n), p)); }
static inline void vi_store_u16(uint16_t *p, vi v) { _mm256_storeu_si256((__m256i *)p, _mm512_cvtepi32_epi16(v)); }
static inline void vi_store_u16_part(uint16_t *p, vi v, int64_t n) { _mm256_mask_storeu_epi16(p, vm_first(n), _mm512_cvtepi32_epi16(v)); }

/* ---- pairs (interleaved rotary): [p0 p0 p1 p1 ...] from VF_LANES/2 floats, and swapping lanes 2i, 2i+1 */
static inline vf vf_load_dup_pairs_part(const float *p, int64_t npairs) {
    __m512 half = _mm512_castps256_ps512(_mm256_maskz_loadu_ps((__mmask8)((1u << npairs) - 1u), p));
    return _mm512_permutexvar_ps(_mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0), half);
}
static inline vf vf_load_dup_pairs(const float *p) {
    __m512 half = _mm512_castps256_ps512(_mm256_loadu_ps(p));
    return _mm512_permutexvar_ps(_mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0), half);
}
static inline vf vf_swap_pairs(vf v) { return _mm512_permute_ps(v, 0xB1); }

#endif
