/* AMX-BF16 GEMM building blocks (tdpbf16ps on 16 x 16 f32 tiles): the f32 GEMM contract of
 * gemm_internal.h with A and B rounded to bfloat16 while they are packed (bf16_pairs_avx512.h),
 * products of bf16 pairs accumulated in f32 -- the same rounding as the AVX512-BF16 kernel, so a
 * product may run on either. Preferred over that kernel for TB_GEMM_PRECISION_BF16 where CPUID, XCR0
 * and the OS permission (tb_cpu_amx_request) allow AMX, unless TORCHBURN_AMX=0 (gemm_bf16.c).
 *
 * Register tile 32 x 32: four C tiles (tmm0..3: rows 0-15 / 16-31 x columns 0-15 / 16-31), two A
 * tiles (tmm4, tmm5) and two B tiles (tmm6, tmm7) per 32-deep k chunk: four loads, four tdpbf16ps.
 *
 * Packed layouts, in the float-sized units the driver allocates (one 32-bit slot = two bf16, the even
 * k in the low half). k is padded with zeros to whole chunks of 32 (the table's k_tile; the driver
 * strides panels by tb_gemm_panel_depth). Chunk t (k in [32t, 32t + 32)) of a panel is 512 slots:
 *   A panel: slot[t * 512 + (i / 16) * 256 + (i % 16) * 16 + q] = (A[i, 32t + 2q], A[i, 32t + 2q + 1])
 *   B panel: slot[t * 512 + (j / 16) * 256 + q * 16 + (j % 16)] = (B[32t + 2q, j], B[32t + 2q + 1, j])
 * i.e. each 256-slot half is one 16-row x 64-byte tile exactly as tileloadd reads it (stride 64). */
#include <immintrin.h>
#include <stdalign.h>
#include <stdint.h>
#include <string.h>

#include "kernels/gemm_internal.h"
#include "kernels/x86_avx512/gemm_transpose_avx512.h"
#include "kernels/x86_avx512vnni/bf16_pairs_avx512.h"

enum {
    MR = 32,
    NR = 32,
    K_CHUNK = 32,              /* bf16 k values per tile row (64 bytes) */
    TILE_SLOTS = 256,          /* one 16 x 16-slot tile */
    CHUNK_SLOTS = 2 * TILE_SLOTS,
    TILE_STRIDE = 64           /* bytes between packed tile rows */
};

/* ---- tile configuration: palette 1, all eight tiles 16 rows x 64 bytes ---- */

typedef struct tile_config {
    uint8_t palette_id;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

/* A constant in memory: GCC's _tile_loadconfig tells the compiler it reads only a pointer's worth of
 * bytes, so a configuration built on the stack could lose its stores. */
static alignas(64) const tile_config all_tiles_16x64 = {
    .palette_id = 1,
    .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
    .rows = {16, 16, 16, 16, 16, 16, 16, 16},
};

/* Loaded once per GEMM cell (the driver's cell_begin), released after it (cell_end): nothing else
 * runs on this thread in between, so the configuration cannot be changed under the kernel. */
static void amx_cell_begin(void) { _tile_loadconfig(&all_tiles_16x64); }

static void amx_cell_end(void) { _tile_release(); }

/* ---- micro-kernel ---- */

static inline __mmask16 mask_first(int count) {
    return count >= 16 ? (__mmask16)0xFFFF : count <= 0 ? (__mmask16)0 : (__mmask16)((1u << count) - 1u);
}

/* The 32 x 32 product over kc (panels zero-padded to whole k chunks). Full tiles with alpha == 1 and
 * beta 0 or 1 go between the tiles and C directly; any other case goes through a 32 x 32 buffer. */
static void microkernel_amx(int64_t kc, const float *a_panel, const float *b_panel, float *c, int64_t ldc, int mr,
                            int nr, float alpha, float beta) {
    const bool direct = mr == MR && nr == NR && alpha == 1.0f && (beta == 0.0f || beta == 1.0f);
    const size_t c_stride = (size_t)ldc * sizeof(float);
    if (direct && beta == 1.0f) {
        _tile_loadd(0, c, c_stride);
        _tile_loadd(1, c + 16, c_stride);
        _tile_loadd(2, c + 16 * ldc, c_stride);
        _tile_loadd(3, c + 16 * ldc + 16, c_stride);
    } else {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
    }
    const char *a = (const char *)a_panel, *b = (const char *)b_panel;
    const int64_t chunks = (kc + K_CHUNK - 1) / K_CHUNK;
    for (int64_t t = 0; t < chunks; t++) {
        _tile_loadd(4, a, TILE_STRIDE);
        _tile_loadd(6, b, TILE_STRIDE);
        _tile_loadd(5, a + TILE_SLOTS * 4, TILE_STRIDE);
        _tile_loadd(7, b + TILE_SLOTS * 4, TILE_STRIDE);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
        a += CHUNK_SLOTS * 4;
        b += CHUNK_SLOTS * 4;
    }
    if (direct) {
        _tile_stored(0, c, c_stride);
        _tile_stored(1, c + 16, c_stride);
        _tile_stored(2, c + 16 * ldc, c_stride);
        _tile_stored(3, c + 16 * ldc + 16, c_stride);
        return;
    }
    alignas(64) float tile[MR * NR]; /* row i at tile + i * NR */
    _tile_stored(0, tile, NR * sizeof(float));
    _tile_stored(1, tile + 16, NR * sizeof(float));
    _tile_stored(2, tile + 16 * NR, NR * sizeof(float));
    _tile_stored(3, tile + 16 * NR + 16, NR * sizeof(float));
    const __mmask16 m0 = mask_first(nr), m1 = mask_first(nr - 16);
    const __m512 valpha = _mm512_set1_ps(alpha), vbeta = _mm512_set1_ps(beta);
    for (int i = 0; i < mr; i++) {
        float *row = c + i * ldc;
        __m512 r0 = _mm512_mul_ps(_mm512_load_ps(tile + i * NR), valpha);
        __m512 r1 = _mm512_mul_ps(_mm512_load_ps(tile + i * NR + 16), valpha);
        if (beta != 0.0f) {
            r0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m0, row), vbeta, r0);
            r1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m1, row + 16), vbeta, r1);
        }
        _mm512_mask_storeu_ps(row, m0, r0);
        _mm512_mask_storeu_ps(row + 16, m1, r1);
    }
}

/* ---- packing: one 16-line x 32-k piece of a chunk at a time ----
 * A "line" is a row of A or a column of B; lines past `lines` and k past kc are zero. The source is
 * f32 (rounded to bf16 here) or already bf16 (bf16 tensors: copied bit for bit). Each gatherer yields
 * 16 vectors of 16 pair slots indexed by line; an A tile wants them so, a B tile indexed by k pair,
 * which a transpose gives. */

typedef struct source {
    const char *base;
    bool bf16;      /* elements are bfloat16 bits (uint16_t), else float */
    size_t element; /* bytes per element */
} source;

static inline const char *element_at(const source *x, int64_t index) { return x->base + index * (int64_t)x->element; }

/* Element `index` as bf16 bits. */
static inline uint16_t bf16_bits_at(const source *x, int64_t index) {
    const char *p = element_at(x, index);
    if (x->bf16) {
        uint16_t bits;
        memcpy(&bits, p, sizeof bits);
        return bits;
    }
    float value;
    memcpy(&value, p, sizeof value);
    return tb_f32_to_bf16(value);
}

/* Lines contiguous in k (line l, k p at element l * line_stride + p): v[l] = pair slots q of line l. */
static void gather_k_contiguous(const source *x, int64_t line_stride, int lines, int64_t k_left, __m512 v[16]) {
    int count = k_left < K_CHUNK ? (int)k_left : K_CHUNK;
    __mmask16 lo = mask_first(count), hi = mask_first(count - 16);
    __mmask32 both = count >= 32 ? (__mmask32)0xFFFFFFFFu : (__mmask32)((1u << count) - 1u);
    for (int l = 0; l < 16; l++) {
        if (l >= lines) {
            v[l] = _mm512_setzero_ps();
        } else if (x->bf16) {
            v[l] = _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(both, element_at(x, l * line_stride)));
        } else {
            const float *src = (const float *)element_at(x, l * line_stride);
            v[l] = tb_bf16_pairs_of_consecutive(_mm512_maskz_loadu_ps(lo, src), _mm512_maskz_loadu_ps(hi, src + 16));
        }
    }
}

/* Any strides: v[l] = pair slots of line l (indexed like gather_k_contiguous). */
static void gather_generic(const source *x, int64_t line_stride, int64_t k_stride, int lines, int64_t k_left,
                           __m512 v[16]) {
    alignas(64) uint32_t slots[16][16];
    for (int l = 0; l < 16; l++)
        for (int q = 0; q < 16; q++) {
            bool in = l < lines;
            uint32_t even = in && 2 * q < k_left ? bf16_bits_at(x, l * line_stride + 2 * q * k_stride) : 0;
            uint32_t odd = in && 2 * q + 1 < k_left ? bf16_bits_at(x, l * line_stride + (2 * q + 1) * k_stride) : 0;
            slots[l][q] = even | odd << 16;
        }
    for (int l = 0; l < 16; l++)
        v[l] = _mm512_load_ps((const float *)slots[l]);
}

static void store_tile(float *tile, const __m512 v[16]) {
    for (int r = 0; r < 16; r++)
        _mm512_storeu_ps(tile + r * 16, v[r]);
}

/* Pair slots (row_even[t], row_odd[t]) of 16 lines from two k rows (NULL: a k past kc, zeros). */
static inline __m512 pair_rows(const source *x, const char *even, const char *odd, __mmask16 m) {
    if (x->bf16) {
        __m512i e = even ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, even)) : _mm512_setzero_si512();
        __m512i o = odd ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, odd)) : _mm512_setzero_si512();
        return _mm512_castsi512_ps(_mm512_or_si512(e, _mm512_slli_epi32(o, 16)));
    }
    __m512 zero = _mm512_setzero_ps();
    return tb_bf16_pairs_of_rows(even ? _mm512_maskz_loadu_ps(m, even) : zero,
                                 odd ? _mm512_maskz_loadu_ps(m, odd) : zero);
}

/* Lines contiguous across (line l, k p at element p * k_stride + l): both halves of a chunk at once,
 * so each k row is read as one run. Tile half h's row q is then pair q of lines 16h..16h+15, which is
 * what a B tile wants (by_line false); an A tile (by_line) gets each half transposed. */
static void pack_lines_contiguous(const source *x, int64_t k_stride, int lines, int64_t kc, bool by_line,
                                  float *panel) {
    const __mmask16 m0 = mask_first(lines), m1 = mask_first(lines - 16);
    const int64_t half = 16 * (int64_t)x->element;
    for (int64_t p0 = 0, t = 0; p0 < kc; p0 += K_CHUNK, t++) {
        __m512 v0[16], v1[16];
        for (int q = 0; q < 16; q++) {
            int64_t k_even = p0 + 2 * q, k_odd = k_even + 1;
            const char *even = k_even < kc ? element_at(x, k_even * k_stride) : NULL;
            const char *odd = k_odd < kc ? element_at(x, k_odd * k_stride) : NULL;
            v0[q] = pair_rows(x, even, odd, m0);
            v1[q] = pair_rows(x, even ? even + half : NULL, odd ? odd + half : NULL, m1);
        }
        if (by_line) {
            tb_transpose16_avx512(v0);
            tb_transpose16_avx512(v1);
        }
        store_tile(panel + t * CHUNK_SLOTS, v0);
        store_tile(panel + t * CHUNK_SLOTS + TILE_SLOTS, v1);
    }
}

/* Packs `lines` (<= 32) lines x kc of x into a panel; by_line: tile rows are lines (A), else k pairs (B).
 * Line l, k p is element l * line_stride + p * k_stride. */
static void pack_panel(source x, int64_t line_stride, int64_t k_stride, int lines, int64_t kc, bool by_line,
                       float *panel) {
    if (line_stride == 1 && k_stride != 1) {
        pack_lines_contiguous(&x, k_stride, lines, kc, by_line, panel);
        return;
    }
    for (int64_t p0 = 0, t = 0; p0 < kc; p0 += K_CHUNK, t++) {
        for (int half = 0; half < 2; half++) {
            int here = lines - 16 * half;
            here = here < 0 ? 0 : here > 16 ? 16 : here;
            source piece = x;
            piece.base = element_at(&x, 16 * half * line_stride + p0 * k_stride);
            __m512 v[16];
            if (here == 0) {
                for (int r = 0; r < 16; r++)
                    v[r] = _mm512_setzero_ps();
            } else if (k_stride == 1) {
                gather_k_contiguous(&piece, line_stride, here, kc - p0, v);
            } else {
                gather_generic(&piece, line_stride, k_stride, here, kc - p0, v);
            }
            if (!by_line) /* both gatherers index by line */
                tb_transpose16_avx512(v);
            store_tile(panel + t * CHUNK_SLOTS + half * TILE_SLOTS, v);
        }
    }
}

static source f32_source(const float *x) { return (source){(const char *)x, false, sizeof(float)}; }
static source bf16_source(const uint16_t *x) { return (source){(const char *)x, true, sizeof(uint16_t)}; }

static void pack_a_amx(const float *a, int64_t row_stride, int64_t col_stride, int rows, int64_t kc, float *a_panel) {
    pack_panel(f32_source(a), row_stride, col_stride, rows, kc, true, a_panel);
}

static void pack_b_amx(const float *b, int64_t row_stride, int64_t col_stride, int cols, int64_t kc, float *b_panel) {
    pack_panel(f32_source(b), col_stride, row_stride, cols, kc, false, b_panel);
}

static void pack_a_amx_bf16(const uint16_t *a, int64_t row_stride, int64_t col_stride, int rows, int64_t kc,
                            float *a_panel) {
    pack_panel(bf16_source(a), row_stride, col_stride, rows, kc, true, a_panel);
}

static void pack_b_amx_bf16(const uint16_t *b, int64_t row_stride, int64_t col_stride, int cols, int64_t kc,
                            float *b_panel) {
    pack_panel(bf16_source(b), col_stride, row_stride, cols, kc, false, b_panel);
}

const tb_gemm_microkernel tb_gemm_microkernel_amx_bf16 = {
    .isa_name = "amx_bf16",
    .mr = MR,
    .nr = NR,
    .packed_bytes = 2,
    .k_tile = K_CHUNK,
    .kc = 2048, /* without CPUID cache facts: deep k blocks, panels in a 2 MiB L2 (gemm_blocking.c) */
    .mc = MR * 4,
    .nc = NR * 64,
    .kernel = microkernel_amx,
    .pack_a = pack_a_amx,
    .pack_b = pack_b_amx,
    .pack_a_bf16 = pack_a_amx_bf16,
    .pack_b_bf16 = pack_b_amx_bf16,
    .epilogue = tb_gemm_epilogue_avx512,
    .small_m = NULL, /* few rows go through the packed path too, so every product rounds alike */
    .cell_begin = amx_cell_begin,
    .cell_end = amx_cell_end,
};
