/* The float-vector API (8 lanes of AVX2 + FMA + F16C) that the shared kernel bodies in ../simd/ are
 * written against. Everything is static inline and this header is included only by AVX2 translation
 * units. Masks are vectors of all-ones / all-zeros lanes. */
#ifndef TB_SIMD_API_AVX2_H
#define TB_SIMD_API_AVX2_H

#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define VF_LANES 8
#define VF_ISA_SUFFIX "avx2"

typedef __m256 vf;  /* 8 floats */
typedef __m256i vi; /* 8 int32 */
typedef __m256 vm;  /* lane mask: all bits set or clear */
typedef struct vd { /* 8 double accumulators, lane i of a vf goes to lane i here */
    __m256d lo, hi;
} vd;

/* ---- loads and stores; *_part touch only the first n lanes (0 <= n <= VF_LANES) and read zeros
 * for the others (masked loads do not fault on masked-off lanes). */
static inline __m256i vm_first_i(int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0));
}
static inline vm vm_first(int64_t n) { return _mm256_castsi256_ps(vm_first_i(n)); }
static inline vf vf_load(const float *p) { return _mm256_loadu_ps(p); }
static inline void vf_store(float *p, vf v) { _mm256_storeu_ps(p, v); }
static inline vf vf_load_part(const float *p, int64_t n) { return _mm256_maskload_ps(p, vm_first_i(n)); }
static inline void vf_store_part(float *p, vf v, int64_t n) { _mm256_maskstore_ps(p, vm_first_i(n), v); }

/* ---- arithmetic (IEEE, single rounding; fmadd etc. are fused) */
static inline vf vf_set1(float x) { return _mm256_set1_ps(x); }
static inline vf vf_zero(void) { return _mm256_setzero_ps(); }
static inline vf vf_add(vf a, vf b) { return _mm256_add_ps(a, b); }
static inline vf vf_sub(vf a, vf b) { return _mm256_sub_ps(a, b); }
static inline vf vf_mul(vf a, vf b) { return _mm256_mul_ps(a, b); }
static inline vf vf_div(vf a, vf b) { return _mm256_div_ps(a, b); }
static inline vf vf_sqrt(vf a) { return _mm256_sqrt_ps(a); }
static inline vf vf_fmadd(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }   /* a*b + c */
static inline vf vf_fmsub(vf a, vf b, vf c) { return _mm256_fmsub_ps(a, b, c); }   /* a*b - c */
static inline vf vf_fnmadd(vf a, vf b, vf c) { return _mm256_fnmadd_ps(a, b, c); } /* c - a*b */
/* even lanes a*b - c, odd lanes a*b + c */
static inline vf vf_fmaddsub(vf a, vf b, vf c) { return _mm256_fmaddsub_ps(a, b, c); }
/* x86 semantics: when either operand is NaN, or both are zeros, the result is b. */
static inline vf vf_max(vf a, vf b) { return _mm256_max_ps(a, b); }
static inline vf vf_min(vf a, vf b) { return _mm256_min_ps(a, b); }
static inline vf vf_round(vf a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
/* p * 2^n for integral n (as float) with |p| in [0.5, 2) and n in [-152, 130]: two exact-range factors
 * so that overflow gives inf and underflow is gradual with a single rounding. */
static inline vf vf_scale2(vf p, vf n) {
    __m256i ni = _mm256_cvtps_epi32(n);
    __m256i n1 = _mm256_srai_epi32(ni, 1);
    __m256i n2 = _mm256_sub_epi32(ni, n1);
    __m256 f1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, _mm256_set1_epi32(127)), 23));
    __m256 f2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, _mm256_set1_epi32(127)), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, f1), f2);
}

/* ---- bits */
static inline vf vf_and(vf a, vf b) { return _mm256_and_ps(a, b); }
static inline vf vf_or(vf a, vf b) { return _mm256_or_ps(a, b); }
static inline vf vf_xor(vf a, vf b) { return _mm256_xor_ps(a, b); }
static inline vf vf_andnot(vf a, vf b) { return _mm256_andnot_ps(a, b); } /* ~a & b */
static inline vf vf_abs(vf a) { return _mm256_and_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff))); }
static inline vf vf_neg(vf a) { return _mm256_xor_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u))); }
static inline vf vf_signbit(vf a) { return _mm256_and_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u))); }

/* ---- comparisons (ordered: false when either is NaN, except vf_ne) and masks */
static inline vm vf_eq(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_EQ_OQ); }
static inline vm vf_ne(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_NEQ_UQ); }
static inline vm vf_lt(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
static inline vm vf_le(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_LE_OQ); }
static inline vm vf_gt(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
static inline vm vf_ge(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_GE_OQ); }
static inline vm vf_isnan(vf a) { return _mm256_cmp_ps(a, a, _CMP_UNORD_Q); }
static inline vm vm_and(vm a, vm b) { return _mm256_and_ps(a, b); }
static inline vm vm_or(vm a, vm b) { return _mm256_or_ps(a, b); }
static inline vm vm_andnot(vm a, vm b) { return _mm256_andnot_ps(a, b); } /* ~a & b */
static inline vm vm_none(void) { return _mm256_setzero_ps(); }
static inline bool vm_any(vm m) { return _mm256_movemask_ps(m) != 0; }
static inline unsigned vm_bits(vm m) { return (unsigned)_mm256_movemask_ps(m); }
static inline vf vf_select(vm m, vf a, vf b) { return _mm256_blendv_ps(b, a, m); } /* m ? a : b */

/* ---- int32 lanes */
static inline vi vi_set1(int32_t x) { return _mm256_set1_epi32(x); }
static inline vi vf_as_vi(vf a) { return _mm256_castps_si256(a); }
static inline vf vi_as_vf(vi a) { return _mm256_castsi256_ps(a); }
static inline vi vf_to_vi(vf a) { return _mm256_cvtps_epi32(a); } /* round to nearest even */
static inline vf vi_to_vf(vi a) { return _mm256_cvtepi32_ps(a); }
static inline vi vi_add(vi a, vi b) { return _mm256_add_epi32(a, b); }
static inline vi vi_sub(vi a, vi b) { return _mm256_sub_epi32(a, b); }
static inline vi vi_and(vi a, vi b) { return _mm256_and_si256(a, b); }
static inline vi vi_or(vi a, vi b) { return _mm256_or_si256(a, b); }
static inline vi vi_shl(vi a, int n) { return _mm256_sll_epi32(a, _mm_cvtsi32_si128(n)); }
static inline vi vi_shr(vi a, int n) { return _mm256_srl_epi32(a, _mm_cvtsi32_si128(n)); } /* logical */
static inline vm vi_gt(vi a, vi b) { return _mm256_castsi256_ps(_mm256_cmpgt_epi32(a, b)); }
static inline vi vi_select(vm m, vi a, vi b) { return _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(b), _mm256_castsi256_ps(a), m)); }
static inline vi vi_iota(void) { return _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0); }
static inline void vi_store(int32_t *p, vi v) { _mm256_storeu_si256((__m256i *)p, v); }

/* ---- coefficient tables: VF_TABLE_SIZE floats held in a register, looked up per lane by the low
 * log2(VF_TABLE_SIZE) bits of an int32 index (one vpermps). Eight entries, not sixteen: a 16-entry table
 * costs two vpermps and a blend per lookup, and the permute port bounds the GELU polynomial on Zen 3 */
#define VF_TABLE_SIZE 8
typedef struct vtable {
    __m256 entries;
} vtable;
static inline vtable vtable_load(const float *entries) {
    vtable t = {_mm256_loadu_ps(entries)};
    return t;
}
static inline vf vtable_lookup(vtable t, vi index) { return _mm256_permutevar8x32_ps(t.entries, index); }
static inline vi vf_to_vi_trunc(vf a) { return _mm256_cvttps_epi32(a); } /* toward zero */

/* ---- horizontal reductions (vf_hmax/vf_hmin ignore NaN handling: callers track NaN themselves) */
static inline float vf_hsum(vf v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
static inline float vf_hmax(vf v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
static inline float vf_hmin(vf v) {
    __m128 s = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_min_ps(s, _mm_movehl_ps(s, s));
    s = _mm_min_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* ---- double accumulators for long sums */
static inline vd vd_zero(void) { vd r = {_mm256_setzero_pd(), _mm256_setzero_pd()}; return r; }
static inline vd vd_load(const double *p) { vd r = {_mm256_loadu_pd(p), _mm256_loadu_pd(p + 4)}; return r; }
static inline void vd_store(double *p, vd v) { _mm256_storeu_pd(p, v.lo); _mm256_storeu_pd(p + 4, v.hi); }
static inline vd vd_add_vf(vd acc, vf v) {
    acc.lo = _mm256_add_pd(acc.lo, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
    acc.hi = _mm256_add_pd(acc.hi, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
    return acc;
}
static inline vd vd_fmadd_vf(vd acc, vf mul, vf add) { /* acc * mul + add, in double */
    acc.lo = _mm256_fmadd_pd(acc.lo, _mm256_cvtps_pd(_mm256_castps256_ps128(mul)), _mm256_cvtps_pd(_mm256_castps256_ps128(add)));
    acc.hi = _mm256_fmadd_pd(acc.hi, _mm256_cvtps_pd(_mm256_extractf128_ps(mul, 1)), _mm256_cvtps_pd(_mm256_extractf128_ps(add, 1)));
    return acc;
}
static inline double vd_hsum(vd acc) {
    __m256d s = _mm256_add_pd(acc.lo, acc.hi);
    __m128d h = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
    return _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
}
static inline vf vd_to_vf(vd acc) { /* lane-wise rounding back to float */
    return _mm256_set_m128(_mm256_cvtpd_ps(acc.hi), _mm256_cvtpd_ps(acc.lo));
}

/* ---- bytes: masks from 0/1 condition bytes (nonzero = true) and masks to 0/1 bytes */
static inline vm vm_from_u64_bytes(uint64_t bytes) {
    __m256i w = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)bytes));
    return _mm256_castsi256_ps(_mm256_xor_si256(_mm256_cmpeq_epi32(w, _mm256_setzero_si256()), _mm256_set1_epi32(-1)));
}
static inline vm vm_load_bytes(const uint8_t *p) { uint64_t b; memcpy(&b, p, 8); return vm_from_u64_bytes(b); }
static inline vm vm_load_bytes_part(const uint8_t *p, int64_t n) { uint64_t b = 0; memcpy(&b, p, (size_t)n); return vm_from_u64_bytes(b); }
static inline void vm_store_bytes(uint8_t *p, vm m) { uint64_t b = _pdep_u64(vm_bits(m), 0x0101010101010101ull); memcpy(p, &b, 8); }
static inline void vm_store_bytes_part(uint8_t *p, vm m, int64_t n) { uint64_t b = _pdep_u64(vm_bits(m), 0x0101010101010101ull); memcpy(p, &b, (size_t)n); }

/* ---- 16-bit element loads/stores: IEEE half through F16C (round to nearest even), and raw uint16
 * lanes (zero-extended / truncated) for bfloat16 bit manipulation. */
static inline vf vf_load_f16(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
static inline vf vf_load_f16_part(const uint16_t *p, int64_t n) { __m128i t = _mm_setzero_si128(); memcpy(&t, p, (size_t)n * 2); return _mm256_cvtph_ps(t); }
static inline void vf_store_f16(uint16_t *p, vf v) { _mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)); }
static inline void vf_store_f16_part(uint16_t *p, vf v, int64_t n) { __m128i t = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); memcpy(p, &t, (size_t)n * 2); }
static inline vi vi_load_u16(const uint16_t *p) { return _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)); }
static inline vi vi_load_u16_part(const uint16_t *p, int64_t n) { __m128i t = _mm_setzero_si128(); memcpy(&t, p, (size_t)n * 2); return _mm256_cvtepu16_epi32(t); }
static inline __m128i vi_pack_u16(vi v) { /* lanes hold values < 65536 */
    __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
    return _mm_packus_epi32(lo, hi);
}
static inline void vi_store_u16(uint16_t *p, vi v) { _mm_storeu_si128((__m128i *)p, vi_pack_u16(v)); }
static inline void vi_store_u16_part(uint16_t *p, vi v, int64_t n) { __m128i t = vi_pack_u16(v); memcpy(p, &t, (size_t)n * 2); }

/* ---- pairs (interleaved rotary): [p0 p0 p1 p1 ...] from VF_LANES/2 floats, and swapping lanes 2i, 2i+1 */
static inline vf vf_dup_pairs_128(__m128 half) {
    return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(half), _mm256_set_epi32(3, 3, 2, 2, 1, 1, 0, 0));
}
static inline vf vf_load_dup_pairs(const float *p) { return vf_dup_pairs_128(_mm_loadu_ps(p)); }
static inline vf vf_load_dup_pairs_part(const float *p, int64_t npairs) {
    __m128 half = _mm_maskload_ps(p, _mm_cmpgt_epi32(_mm_set1_epi32((int)npairs), _mm_set_epi32(3, 2, 1, 0)));
    return vf_dup_pairs_128(half);
}
static inline vf vf_swap_pairs(vf v) { return _mm256_permute_ps(v, 0xB1); }

#endif
