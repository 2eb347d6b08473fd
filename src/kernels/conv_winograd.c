/* The Winograd F(2x2, 3x3) convolution driver (contract in kernels/conv_winograd.h): weight
 * transform and packing, task blocking from the CPU's L2, and one task's k-blocked GEMMs between the
 * per-ISA input and output transforms (kernels/simd/winograd_body.h). */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/env_switch.h"
#include "kernels/conv_winograd.h"
#include "kernels/nn_kernels.h"
#include "torchburn/thread_pool.h"

static tb_env_switch winograd_switch = TB_ENV_SWITCH("TORCHBURN_CONV_WINOGRAD");

bool tb_winograd_enabled(void) { return tb_env_switch_on(&winograd_switch); }

void tb_winograd_set_enabled(bool enabled) { tb_env_switch_set(&winograd_switch, enabled); }

static atomic_llong winograd_call_count;

int64_t tb_winograd_calls(void) { return atomic_load_explicit(&winograd_call_count, memory_order_relaxed); }

void tb_winograd_count_call(void) { atomic_fetch_add_explicit(&winograd_call_count, 1, memory_order_relaxed); }

/* Output channels of one task at most: the input transform is redone per part, so parts are few; M
 * (16 x part x block tiles) must stay in L2 beside V. */
enum { WINOGRAD_MAX_PART = 128, WINOGRAD_MAX_BLOCK_PANELS = 8, WINOGRAD_PACK_MAX_MR = 16 };

void tb_winograd_init(tb_winograd_plan *plan, tb_isa isa, int64_t batch, int64_t in_channels, int64_t out_channels,
                      int64_t in_h, int64_t in_w, int64_t out_h, int64_t out_w, int64_t pad_top, int64_t pad_left,
                      int64_t threads) {
    const tb_gemm_microkernel *uk = tb_gemm_microkernel_for(isa);
    const tb_nn_kernels *nn = tb_nn_kernels_for(isa);
    memset(plan, 0, sizeof *plan);
    plan->microkernel = uk;
    plan->mr = uk->mr;
    plan->nr = uk->nr;
    plan->kc = tb_gemm_blocking_for(uk).kc;
    if (plan->kc > in_channels)
        plan->kc = in_channels > 0 ? in_channels : 1;
    plan->in_channels = in_channels;
    plan->out_channels = out_channels;
    plan->m_panels = (out_channels + uk->mr - 1) / uk->mr;
    plan->input = nn->winograd_input;
    plan->output = nn->winograd_output;
    plan->filters = nn->winograd_filters;
    tb_winograd_geometry *geo = &plan->geo;
    geo->in_h = in_h;
    geo->in_w = in_w;
    geo->out_h = out_h;
    geo->out_w = out_w;
    geo->pad_top = pad_top;
    geo->pad_left = pad_left;
    geo->tiles_h = (out_h + 1) / 2;
    geo->tiles_w = (out_w + 1) / 2;
    geo->x_image_stride = in_channels * in_h * in_w;
    geo->y_image_stride = out_channels * out_h * out_w;
    plan->tiles = batch * geo->tiles_h * geo->tiles_w;

    /* output channels per task: whole panels, at most WINOGRAD_MAX_PART */
    int64_t parts = (out_channels + WINOGRAD_MAX_PART - 1) / WINOGRAD_MAX_PART;
    if (parts < 1)
        parts = 1;
    plan->part_rows = (plan->m_panels + parts - 1) / parts * uk->mr;
    /* tiles per task: V (16 x block x kc) and M (16 x part x block) within half the L2 */
    const tb_cpu_features *f = tb_cpu_get_features();
    int64_t l2_floats = (f->l2.size_bytes > 0 ? f->l2.size_bytes : 512 * 1024) / (int64_t)sizeof(float);
    int64_t block = l2_floats / 2 / (TB_WINOGRAD_POSITIONS * (plan->kc + plan->part_rows));
    block = block / uk->nr * uk->nr;
    if (block < uk->nr)
        block = uk->nr;
    if (block > WINOGRAD_MAX_BLOCK_PANELS * uk->nr)
        block = WINOGRAD_MAX_BLOCK_PANELS * uk->nr;
    /* a few tasks per thread where the tiles allow it, else split the output channels further */
    while (block > uk->nr && (plan->tiles + block - 1) / block * parts < 4 * threads)
        block -= uk->nr;
    plan->block_tiles = block;
    int64_t blocks = (plan->tiles + block - 1) / block;
    while (blocks * parts < threads && parts < plan->m_panels) {
        parts++;
        plan->part_rows = (plan->m_panels + parts - 1) / parts * uk->mr;
    }
    static atomic_bool logged;
    if (tb_kernels_debug() && !atomic_exchange(&logged, true))
        fprintf(stderr,
                "[torchburn] conv: 3x3 stride-1 convolutions of 16+ channels on Winograd F(2x2,3x3): %s transforms, "
                "%s %dx%d GEMMs, first plan %lld tiles per block, %lld output channels per part (L2 %lld KiB)\n",
                nn->isa_name, uk->isa_name, uk->mr, uk->nr, (long long)plan->block_tiles, (long long)plan->part_rows,
                (long long)(l2_floats * (int64_t)sizeof(float) / 1024));
}

int64_t tb_winograd_weight_floats(const tb_winograd_plan *plan) {
    return TB_WINOGRAD_POSITIONS * plan->m_panels * plan->mr * plan->in_channels;
}

int64_t tb_winograd_v_floats(const tb_winograd_plan *plan) {
    return TB_WINOGRAD_POSITIONS * plan->block_tiles * plan->kc;
}

int64_t tb_winograd_m_floats(const tb_winograd_plan *plan) {
    return TB_WINOGRAD_POSITIONS * plan->part_rows * plan->block_tiles;
}

int64_t tb_winograd_work_floats(const tb_winograd_plan *plan) {
    int64_t longest = plan->block_tiles > plan->geo.tiles_w ? plan->block_tiles : plan->geo.tiles_w;
    return 16 * ((longest + 2 + 15) / 16 * 16) + 64;
}

int64_t tb_winograd_blocks(const tb_winograd_plan *plan) {
    return (plan->tiles + plan->block_tiles - 1) / plan->block_tiles;
}

int64_t tb_winograd_parts(const tb_winograd_plan *plan) {
    return (plan->out_channels + plan->part_rows - 1) / plan->part_rows;
}

/* U_xi panels: packed[xi * (m_panels * mr * C_in) + panel * mr * C_in + c * mr + i] for output channel
 * panel * mr + i (zero past out_channels): the A-panel layout of gemm_internal.h over the whole C_in. */
typedef struct pack_job {
    const tb_winograd_plan *plan;
    const float *w, *row_scale;
    float *packed;
} pack_job;

/* Input channels per step: one output channel's filters go through the ISA's transform (a loop over
 * filters that vectorizes; the scalar per-filter form ran at 170 cycles per filter on Zen 3) into
 * u[xi][c], are interleaved into a local panel, whose 16 position rows are then copied out whole. */
enum { PACK_CHANNELS = 64 };

static void pack_panels(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    const pack_job *job = context;
    const tb_winograd_plan *plan = job->plan;
    const int mr = plan->mr;
    const int64_t cin = plan->in_channels, xi_floats = plan->m_panels * mr * cin;
    float local[TB_WINOGRAD_POSITIONS][PACK_CHANNELS * WINOGRAD_PACK_MAX_MR];
    float u[TB_WINOGRAD_POSITIONS][PACK_CHANNELS];
    for (int64_t panel = begin; panel < end; panel++) {
        const int64_t co0 = panel * mr;
        const int rows = (int)(plan->out_channels - co0 < mr ? plan->out_channels - co0 : mr);
        float *to = job->packed + co0 * cin;
        for (int64_t c0 = 0; c0 < cin; c0 += PACK_CHANNELS) {
            const int chunk = (int)(cin - c0 < PACK_CHANNELS ? cin - c0 : PACK_CHANNELS);
            for (int i = 0; i < mr; i++) {
                if (i < rows)
                    plan->filters(job->w + ((co0 + i) * cin + c0) * 9, chunk,
                                  job->row_scale ? job->row_scale + co0 + i : NULL, &u[0][0], PACK_CHANNELS);
                for (int xi = 0; xi < TB_WINOGRAD_POSITIONS; xi++)
                    for (int c = 0; c < chunk; c++) /* the last panel's padding rows are zero */
                        local[xi][c * mr + i] = i < rows ? u[xi][c] : 0.0f;
            }
            for (int xi = 0; xi < TB_WINOGRAD_POSITIONS; xi++)
                memcpy(to + xi * xi_floats + c0 * mr, local[xi], (size_t)(chunk * mr) * sizeof(float));
        }
    }
}

/* Panels over the thread pool when the weight is large (inline inside a parallel region). */
void tb_winograd_pack_weight(const tb_winograd_plan *plan, const float *w, const float *row_scale, float *packed) {
    pack_job job = {.plan = plan, .w = w, .row_scale = row_scale, .packed = packed};
    if (plan->out_channels * plan->in_channels >= 4096 && !tb_in_parallel_region())
        tb_parallel_for(plan->m_panels, 1, pack_panels, &job);
    else
        pack_panels(&job, 0, plan->m_panels, 0);
}

/* The outputs of tiles [t0, t1) and output channels [row0, row0 + rows) that are NaN or infinite,
 * recomputed as a direct convolution: a double sum of the f32 products w * scale * x over the window
 * (zero outside the input), then bias, activation and residual as the transform applies them. */
static void recompute_nonfinite(const tb_winograd_plan *plan, const tb_winograd_args *args, int64_t t0, int64_t t1,
                                int64_t row0, int64_t rows) {
    const tb_gemm_microkernel *uk = plan->microkernel;
    const tb_winograd_geometry *geo = &plan->geo;
    const int64_t per_image = geo->tiles_h * geo->tiles_w, cin = plan->in_channels;
    const int64_t in_plane = geo->in_h * geo->in_w, out_plane = geo->out_h * geo->out_w;
    for (int64_t t = t0; t < t1; t++) {
        const int64_t n = t / per_image, rest = t % per_image, ty = rest / geo->tiles_w, tx = rest % geo->tiles_w;
        for (int64_t co = row0; co < row0 + rows; co++)
            for (int64_t oy = 2 * ty; oy < 2 * ty + 2 && oy < geo->out_h; oy++)
                for (int64_t ox = 2 * tx; ox < 2 * tx + 2 && ox < geo->out_w; ox++) {
                    const int64_t at = n * geo->y_image_stride + co * out_plane + oy * geo->out_w + ox;
                    float *out = args->y + at;
                    if (*out - *out == 0.0f)
                        continue; /* finite: the transform's value stands */
                    const float scale = args->row_scale ? args->row_scale[co] : 1.0f;
                    double sum = 0.0;
                    for (int64_t c = 0; c < cin; c++)
                        for (int64_t kh = 0; kh < 3; kh++)
                            for (int64_t kw = 0; kw < 3; kw++) {
                                const int64_t iy = oy - geo->pad_top + kh, ix = ox - geo->pad_left + kw;
                                if (iy < 0 || iy >= geo->in_h || ix < 0 || ix >= geo->in_w)
                                    continue;
                                float weight = args->w[((co * cin + c) * 3 + kh) * 3 + kw];
                                if (args->row_scale)
                                    weight *= scale;
                                sum += (double)(weight * args->x[n * geo->x_image_stride + c * in_plane +
                                                                  iy * geo->in_w + ix]);
                            }
                    *out = (float)sum + (args->bias ? args->bias[co] : 0.0f);
                    tb_gemm_epilogue e = {
                        .bias_kind = TB_BIAS_NONE, .activation = args->activation,
                        .residual = args->residual ? args->residual + at : NULL, .residual_row_stride = 1,
                    };
                    uk->epilogue(out, 1, 1, 1, &e);
                }
    }
}

void tb_winograd_run(const tb_winograd_plan *plan, const tb_winograd_args *args, int64_t block, int64_t part, float *v,
                     float *m, float *work) {
    const tb_gemm_microkernel *uk = plan->microkernel;
    const int mr = plan->mr, nr = plan->nr;
    const int64_t cin = plan->in_channels, spatial = plan->geo.out_h * plan->geo.out_w;
    const int64_t t0 = block * plan->block_tiles;
    const int64_t t1 = t0 + plan->block_tiles < plan->tiles ? t0 + plan->block_tiles : plan->tiles;
    const int64_t row0 = part * plan->part_rows;
    const int64_t rows = plan->out_channels - row0 < plan->part_rows ? plan->out_channels - row0 : plan->part_rows;
    const int64_t panels = (t1 - t0 + nr - 1) / nr, ldm = plan->block_tiles;
    const int64_t u_xi_floats = plan->m_panels * mr * cin, m_xi_floats = plan->part_rows * ldm;
    const int64_t row_panels = (rows + mr - 1) / mr;
    for (int64_t c0 = 0; c0 < cin; c0 += plan->kc) {
        const int64_t kcur = cin - c0 < plan->kc ? cin - c0 : plan->kc;
        const int64_t v_xi_floats = panels * kcur * nr;
        plan->input(&plan->geo, args->x + c0 * plan->geo.in_h * plan->geo.in_w, t0, t1, kcur, nr, v, v_xi_floats,
                    work);
        const float beta = c0 == 0 ? 0.0f : 1.0f;
        for (int xi = 0; xi < TB_WINOGRAD_POSITIONS; xi++) {
            const float *u = args->packed + xi * u_xi_floats + row0 * cin + c0 * mr;
            for (int64_t p = 0; p < row_panels; p++) {
                const int r = (int)(rows - p * mr < mr ? rows - p * mr : mr);
                for (int64_t q = 0; q < panels; q++) {
                    const int cols = (int)(t1 - t0 - q * nr < nr ? t1 - t0 - q * nr : nr);
                    uk->kernel(kcur, u + p * mr * cin, v + xi * v_xi_floats + q * kcur * nr,
                               m + xi * m_xi_floats + p * mr * ldm + q * nr, ldm, r, cols, 1.0f, beta);
                }
            }
        }
    }
    bool nonfinite = plan->output(&plan->geo, m, m_xi_floats, ldm, (int)rows, t0, t1,
                                  args->bias ? args->bias + row0 : NULL, args->activation,
                                  args->residual ? args->residual + row0 * spatial : NULL, args->y + row0 * spatial,
                                  uk->epilogue, work);
    if (nonfinite)
        recompute_nonfinite(plan, args, t0, t1, row0, rows);
}
