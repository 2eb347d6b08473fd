/* The packed convolution GEMM driver (contract in kernels/conv_gemm.h) on the GEMM micro-kernels of
 * kernels/gemm_internal.h. Packed layouts: an A panel holds MR weight rows k-major
 * (a[p * MR + i]), a B panel NR output columns k-major (b[p * NR + j]), each over the whole K, so
 * the rows [p0, p0 + kc) of a k block start at p0 * MR (p0 * NR) and need no repacking. */
#include <string.h>

#include "kernels/conv_gemm.h"
#include "kernels/gemm_internal.h"
#include "torchburn/thread_pool.h"

void tb_conv_gemm_init(tb_conv_gemm *plan, tb_isa isa, int64_t m, int64_t k) {
    const tb_gemm_microkernel *uk = tb_gemm_microkernel_for(isa);
    plan->microkernel = uk;
    plan->mr = uk->mr;
    plan->nr = uk->nr;
    plan->kc = tb_gemm_blocking_for(uk).kc;
    plan->m = m;
    plan->k = k;
    plan->m_panels = (m + uk->mr - 1) / uk->mr;
    plan->im2col_panel = tb_nn_kernels_for(isa)->im2col_panel;
}

int64_t tb_conv_gemm_weight_floats(const tb_conv_gemm *plan) { return plan->m_panels * plan->mr * plan->k; }

/* Column panels im2col'd together: each weight panel's k block then serves all of them from L1 while
 * their k blocks sit in L2, so the weights stream once per group instead of once per panel. Up to
 * CONV_GROUP_PANELS, with the group's panels within CONV_GROUP_BYTES. */
enum { CONV_GROUP_PANELS = 8 };
#define CONV_GROUP_BYTES ((int64_t)4 << 20)

static int64_t group_panels(const tb_conv_gemm *plan) {
    int64_t panel_bytes = (int64_t)plan->nr * (plan->k > 0 ? plan->k : 1) * (int64_t)sizeof(float);
    int64_t count = CONV_GROUP_BYTES / panel_bytes;
    return count < 1 ? 1 : count > CONV_GROUP_PANELS ? CONV_GROUP_PANELS : count;
}

/* A group of NR x K panels plus TB_PANEL_SLACK floats that the SIMD im2col may overrun with whole vectors. */
int64_t tb_conv_gemm_scratch_floats(const tb_conv_gemm *plan) {
    return group_panels(plan) * plan->nr * (plan->k > 0 ? plan->k : 1) + TB_PANEL_SLACK;
}

typedef struct pack_job {
    const tb_conv_gemm *plan;
    const float *w;
    const float *row_scale;
    float *packed;
} pack_job;

enum { PACK_CHUNK = 256, PACK_MAX_MR = 16 };

/* rows x kc of a row-major matrix (row stride lda) into one k-major A panel (the ISA's transposing
 * packer where there is one: about memory speed). */
static void pack_rows(const tb_conv_gemm *plan, const float *src, int64_t lda, int rows, int64_t kc, float *dst) {
    const tb_gemm_microkernel *uk = plan->microkernel;
    if (uk->pack_a)
        uk->pack_a(src, lda, 1, rows, kc, dst);
    else
        tb_gemm_pack_a_portable(src, lda, 1, rows, kc, plan->mr, dst);
}

static void pack_panels(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    const pack_job *job = context;
    const tb_conv_gemm *plan = job->plan;
    for (int64_t panel = begin; panel < end; panel++) {
        int64_t row0 = panel * plan->mr;
        int rows = (int)(plan->m - row0 < plan->mr ? plan->m - row0 : plan->mr);
        const float *src = job->w + row0 * plan->k;
        float *dst = job->packed + row0 * plan->k;
        if (!job->row_scale || plan->mr > PACK_MAX_MR) { /* every micro-kernel's MR is <= 16 (14, 6, 4) */
            pack_rows(plan, src, plan->k, rows, plan->k, dst);
            for (int64_t p = 0; job->row_scale && p < plan->k; p++)
                for (int i = 0; i < rows; i++)
                    dst[p * plan->mr + i] *= job->row_scale[row0 + i];
            continue;
        }
        /* w * scale a k chunk at a time into a small row-major buffer (in L1), packed from there: the
         * same products as folding the whole weight first, without a pass over it in memory */
        float folded[PACK_MAX_MR * PACK_CHUNK];
        for (int64_t p0 = 0; p0 < plan->k; p0 += PACK_CHUNK) {
            int64_t kcur = plan->k - p0 < PACK_CHUNK ? plan->k - p0 : PACK_CHUNK;
            for (int i = 0; i < rows; i++) {
                const float scale = job->row_scale[row0 + i];
                const float *restrict from = src + i * plan->k + p0;
                float *restrict to = folded + i * PACK_CHUNK;
                for (int64_t q = 0; q < kcur; q++)
                    to[q] = from[q] * scale;
            }
            pack_rows(plan, folded, PACK_CHUNK, rows, kcur, dst + p0 * plan->mr);
        }
    }
}

/* Panels over the thread pool when the weight is large (a ResNet stage-4 weight is 9 MiB, packed
 * on every call), inline otherwise or inside a parallel region. */
void tb_conv_gemm_pack_weight(const tb_conv_gemm *plan, const float *w, const float *row_scale, float *packed) {
    pack_job job = {.plan = plan, .w = w, .row_scale = row_scale, .packed = packed};
    int64_t floats = plan->m_panels * plan->mr * plan->k;
    if (floats >= (1 << 18) && !tb_in_parallel_region())
        tb_parallel_for(plan->m_panels, 1, pack_panels, &job);
    else
        pack_panels(&job, 0, plan->m_panels, 0);
}

/* The k blocks of one group of B panels (columns [0, cols_total) of the group, `panels` panels of NR
 * at `panels_base`) against every weight panel, into C (column 0 of row 0 at c, row stride ldc); the
 * epilogue on the last k block when `epilogue` is non-NULL (its bias/residual at row 0, column 0). */
static void multiply_group(const tb_conv_gemm *plan, const float *packed_weight, const float *panels_base,
                           int64_t panels, int64_t cols_total, float *c, int64_t ldc, const tb_gemm_epilogue *epilogue) {
    const tb_gemm_microkernel *uk = plan->microkernel;
    const int mr = plan->mr, nr = plan->nr;
    const int64_t k = plan->k, m = plan->m;
    const int64_t panel_floats = (int64_t)nr * (k > 0 ? k : 1);
    for (int64_t p0 = 0; p0 < k || p0 == 0; p0 += plan->kc) {
        int64_t kcur = k - p0 < plan->kc ? k - p0 : plan->kc;
        bool first = p0 == 0, last = p0 + kcur >= k;
        for (int64_t panel_index = 0; panel_index < plan->m_panels; panel_index++) {
            int64_t row0 = panel_index * mr;
            int rows = (int)(m - row0 < mr ? m - row0 : mr);
            for (int64_t q = 0; q < panels; q++) {
                int64_t j0 = q * nr;
                int cols = (int)(cols_total - j0 < nr ? cols_total - j0 : nr);
                const float *panel = panels_base + q * panel_floats;
                float *tile = c + row0 * ldc + j0;
                if (kcur > 0)
                    uk->kernel(kcur, packed_weight + row0 * k + p0 * mr, panel + p0 * nr, tile, ldc, rows, cols,
                               1.0f, first ? 0.0f : 1.0f);
                else
                    for (int i = 0; i < rows; i++)
                        memset(tile + i * ldc, 0, (size_t)cols * sizeof(float));
                if (last && epilogue) {
                    tb_gemm_epilogue e = *epilogue;
                    if (e.bias)
                        e.bias += row0;
                    if (e.residual)
                        e.residual += row0 * e.residual_row_stride + j0;
                    uk->epilogue(tile, ldc, rows, cols, &e);
                }
            }
        }
        if (k == 0)
            break;
    }
}

void tb_conv_gemm_run(const tb_conv_gemm *plan, const float *packed_weight, const tb_window_geometry *g,
                      const float *x, int64_t col_begin, int64_t col_end, float *scratch, float *y, int64_t ldy,
                      const float *bias, tb_activation activation, const float *residual) {
    const int nr = plan->nr;
    const int64_t panel_floats = (int64_t)nr * (plan->k > 0 ? plan->k : 1), group = group_panels(plan);
    bool has_epilogue = bias || activation != TB_ACTIVATION_NONE || residual;
    for (int64_t g0 = col_begin; g0 < col_end; g0 += group * nr) {
        int64_t g1 = g0 + group * nr < col_end ? g0 + group * nr : col_end;
        int64_t panels = (g1 - g0 + nr - 1) / nr;
        /* im2col of the group's columns, one k-major B panel each */
        for (int64_t q = 0; q < panels; q++) {
            int64_t j0 = g0 + q * nr;
            plan->im2col_panel(g, x, j0, (int)(g1 - j0 < nr ? g1 - j0 : nr), nr, scratch + q * panel_floats);
        }
        tb_gemm_epilogue e = {
            .bias_kind = bias ? TB_BIAS_PER_ROW : TB_BIAS_NONE, .bias = bias, .activation = activation,
            .residual = residual ? residual + g0 : NULL, .residual_row_stride = ldy,
        };
        multiply_group(plan, packed_weight, scratch, panels, g1 - g0, y + g0, ldy, has_epilogue ? &e : NULL);
    }
}

/* ---- columns of several images in one panel (small late-stage planes) ---- */

int64_t tb_conv_gemm_images_scratch_floats(const tb_conv_gemm *plan) {
    /* the group's panels, one more panel to im2col an image's piece of a shared panel into, the slack */
    return (group_panels(plan) + 1) * plan->nr * (plan->k > 0 ? plan->k : 1) + TB_PANEL_SLACK;
}

int64_t tb_conv_gemm_images_c_floats(const tb_conv_gemm *plan) { return plan->m * group_panels(plan) * plan->nr; }

/* One B panel of `cols` concatenated columns from j0 (image n's column j is n * spatial + j): a panel
 * inside one image is im2col'd in place; one that straddles images gets each image's piece im2col'd
 * into `piece` and copied into its columns (the SIMD im2col writes whole vectors and zeros a panel's
 * tail, so pieces cannot share a panel directly). */
static void fill_images_panel(const tb_conv_gemm *plan, const tb_window_geometry *g, const float *x,
                              int64_t x_image_stride, int64_t spatial, int64_t j0, int cols, float *panel, float *piece) {
    const int nr = plan->nr;
    int64_t n = j0 / spatial, s = j0 % spatial;
    if (s + cols <= spatial) {
        plan->im2col_panel(g, x + n * x_image_stride, s, cols, nr, panel);
        return;
    }
    const int64_t k = plan->k;
    for (int t = 0; t < cols;) {
        n = (j0 + t) / spatial;
        s = (j0 + t) % spatial;
        int len = (int)(spatial - s < cols - t ? spatial - s : cols - t);
        plan->im2col_panel(g, x + n * x_image_stride, s, len, nr, piece);
        for (int64_t p = 0; p < k; p++)
            memcpy(panel + p * nr + t, piece + p * nr, (size_t)len * sizeof(float));
        t += len;
    }
    for (int64_t p = 0; p < k; p++)
        for (int t = cols; t < nr; t++)
            panel[p * nr + t] = 0.0f;
}

void tb_conv_gemm_run_images(const tb_conv_gemm *plan, const float *packed_weight, const tb_window_geometry *g,
                             const float *x, int64_t x_image_stride, int64_t spatial, int64_t col_begin,
                             int64_t col_end, float *scratch, float *c, float *y, int64_t y_image_stride,
                             const float *bias, tb_activation activation, const float *residual) {
    const tb_gemm_microkernel *uk = plan->microkernel;
    const int nr = plan->nr;
    const int64_t panel_floats = (int64_t)nr * (plan->k > 0 ? plan->k : 1), group = group_panels(plan);
    const int64_t ldc = group * nr;
    float *piece = scratch + group * panel_floats;
    bool has_epilogue = bias || activation != TB_ACTIVATION_NONE || residual;
    for (int64_t g0 = col_begin; g0 < col_end; g0 += group * nr) {
        int64_t g1 = g0 + group * nr < col_end ? g0 + group * nr : col_end;
        int64_t panels = (g1 - g0 + nr - 1) / nr;
        for (int64_t q = 0; q < panels; q++) {
            int64_t j0 = g0 + q * nr;
            fill_images_panel(plan, g, x, x_image_stride, spatial, j0, (int)(g1 - j0 < nr ? g1 - j0 : nr),
                              scratch + q * panel_floats, piece);
        }
        multiply_group(plan, packed_weight, scratch, panels, g1 - g0, c, ldc, NULL);
        /* each image's piece of C to its planes, then the epilogue there (residual laid out like y) */
        for (int64_t j = g0; j < g1;) {
            int64_t n = j / spatial, s = j % spatial;
            int len = (int)(spatial - s < g1 - j ? spatial - s : g1 - j);
            float *dst = y + n * y_image_stride + s;
            for (int64_t i = 0; i < plan->m; i++)
                memcpy(dst + i * spatial, c + i * ldc + (j - g0), (size_t)len * sizeof(float));
            if (has_epilogue) {
                tb_gemm_epilogue e = {
                    .bias_kind = bias ? TB_BIAS_PER_ROW : TB_BIAS_NONE, .bias = bias, .activation = activation,
                    .residual = residual ? residual + n * y_image_stride + s : NULL, .residual_row_stride = spatial,
                };
                uk->epilogue(dst, spatial, (int)plan->m, len, &e);
            }
            j += len;
        }
    }
}

void tb_conv_direct_pack(int64_t m, int64_t k, int max_rows, const float *w, const float *row_scale, float *packed) {
    for (int p = 0; p < tb_conv_direct_panels(m, max_rows); p++) {
        int64_t row0;
        int rows = tb_conv_direct_panel_rows(m, max_rows, p, &row0);
        float *panel = packed + row0 * k;
        for (int64_t q = 0; q < k; q++)
            for (int i = 0; i < rows; i++)
                panel[q * rows + i] = row_scale ? w[(row0 + i) * k + q] * row_scale[row0 + i] : w[(row0 + i) * k + q];
    }
}
