/* The ISA-independent loop of the multi-row int8-activation kernels (AVX2 rows, AVX-512 VNNI rows and
 * batched decode rows): weight rows in blocks of up to nr_max, activation rows in blocks of up to mb_max,
 * one `dots` call per (weight block, activation block), then the int8 row scale (int4 folds its group
 * scales into the dots) and the bias. Plain C, static inline: each ISA file compiles its own copy, so no
 * code built for one ISA is shared with another (STYLE.md, principle 4). */
#ifndef TORCHBURN_LLM_ROW_BLOCKS_H
#define TORCHBURN_LLM_ROW_BLOCKS_H

#include "llm/llm_internal.h"

enum { TB_LLM_ROW_BLOCK_MAX = 8 }; /* the largest nr_max and mb_max of any kernel (AVX2: mb_max 8) */

/* dots[i * nr_max + r] = the dot of activation row i (< mb) with weight row r (< nr_max): `rows` and
 * `scales` name nr_max weight rows (a short block repeats its last row; those results are dropped). */
typedef void (*tb_llm_block_dots_fn)(const tb_quant_weight *w, const uint8_t *const *rows,
                                     const float *const *scales, const unsigned char *act, int64_t ld_act,
                                     int64_t mb, float *dots);

/* y rows [0, run->m) x columns [n_begin, n_end) of run (contract of tb_llm_qkernels.rows). */
static inline void tb_llm_row_blocks(const tb_llm_qrun *run, int64_t n_begin, int64_t n_end, int nr_max, int mb_max,
                                     tb_llm_block_dots_fn dots_fn) {
    const tb_quant_weight *w = run->w;
    const bool int4 = w->type == TB_QUANT_INT4;
    for (int64_t n = n_begin; n < n_end; n += nr_max) {
        const int64_t nr = n_end - n < nr_max ? n_end - n : nr_max;
        const uint8_t *rows[TB_LLM_ROW_BLOCK_MAX];
        const float *scales[TB_LLM_ROW_BLOCK_MAX];
        for (int r = 0; r < nr_max; r++) {
            const int64_t row = n + (r < nr ? r : nr - 1);
            rows[r] = (const uint8_t *)w->data + row * w->row_bytes;
            scales[r] = w->scales + row * w->scales_per_row;
        }
        for (int64_t m = 0; m < run->m; m += mb_max) {
            const int64_t mb = run->m - m < mb_max ? run->m - m : mb_max;
            float dots[TB_LLM_ROW_BLOCK_MAX * TB_LLM_ROW_BLOCK_MAX];
            dots_fn(w, rows, scales, run->act + m * run->act_row_bytes, run->act_row_bytes, mb, dots);
            for (int64_t i = 0; i < mb; i++)
                for (int64_t r = 0; r < nr; r++) {
                    const float value = int4 ? dots[i * nr_max + r] : dots[i * nr_max + r] * scales[r][0];
                    run->y[(m + i) * run->y_row_stride + n + r] = value + (run->bias ? run->bias[n + r] : 0.0f);
                }
        }
    }
}

#endif
