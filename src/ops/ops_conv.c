/* 2-D convolution forward (aten::convolution, not transposed) with a fused per-channel epilogue:
 * im2col straight into packed GEMM panels over column tiles (kernels/conv_gemm.h), a batched GEMM on
 * the input for 1x1 stride-1 kernels, and a direct plane kernel for groups with one input channel (depthwise). */
#include <stdatomic.h>
#include <string.h>

#include "kernels/conv_gemm.h"
#include "kernels/conv_winograd.h"
#include "ops/ops_nn_internal.h"
#include "torchburn/alloc.h"

/* Tasks are split until there are a few per thread, but never below this many columns (packed path)
 * or vector slots (direct path). */
enum { CONV_MIN_TILE = 128, CONV_MIN_SLOTS = 8 };

/* tb_activation -> tb_unary_op for the direct path's epilogue (-1: none). */
static const int activation_unary[TB_ACTIVATION_COUNT] = {
    [TB_ACTIVATION_NONE] = -1,          [TB_ACTIVATION_RELU] = TB_UNARY_RELU,
    [TB_ACTIVATION_GELU] = TB_UNARY_GELU, [TB_ACTIVATION_GELU_TANH] = TB_UNARY_GELU_TANH,
    [TB_ACTIVATION_SILU] = TB_UNARY_SILU, [TB_ACTIVATION_SIGMOID] = TB_UNARY_SIGMOID,
    [TB_ACTIVATION_TANH] = TB_UNARY_TANH,
};

/* How conv_run computes a convolution; chosen once per call by choose_path. */
typedef enum conv_path {
    CONV_POINTWISE,     /* 1x1 stride 1: a batched GEMM on the input planes, weights read as they are */
    CONV_PLANES,        /* one input channel per group: a direct kernel per output plane, weights as they are */
    CONV_DIRECT,        /* the direct path over rows of vector slots: packs the weights */
    CONV_PACKED,        /* im2col into packed GEMM panels per (image, group): packs the weights */
    CONV_PACKED_IMAGES, /* the same over the columns of all images concatenated: packs the weights */
    CONV_WINOGRAD,      /* 3x3 stride 1: Winograd F(2x2, 3x3) (kernels/conv_winograd.h): transforms the weights */
} conv_path;

typedef struct conv_job {
    const tb_conv_shape *s;
    const float *x;        /* [N, C_in, H, W] */
    const float *w;        /* [C_out, K]; scale folded in unless row_scale is set */
    tb_storage *weight_storage; /* where the packed weights may be cached (w is its memory), or NULL */
    const float *row_scale; /* [C_out] applied while the weights are packed, or NULL */
    const float *bias;     /* [C_out] (bias * scale + shift) or NULL */
    const float *residual; /* [N, C_out, OH, OW] or NULL */
    float *y;              /* [N, C_out, OH, OW] */
    tb_activation activation;
    tb_conv_direct_fn direct;    /* the direct path (kernels/nn_kernels.h), or NULL */
    int64_t slots;               /* its slots per (image, group) */
    conv_path path;              /* chosen by choose_path */
    tb_conv_gemm plan;           /* the packed GEMM path */
    tb_winograd_plan winograd;   /* the Winograd path */
    const float *packed_weight;  /* groups x tb_conv_gemm_weight_floats */
    int64_t tile, tiles;         /* output columns per task; tasks per (image, group) */
    int64_t m_rows, m_parts;     /* packed path: output channels per task (whole register tiles), parts */
    bool images;                 /* packed path: columns of all images concatenated (tiles over N * OH * OW) */
    tb_nn_failure failure;
} conv_job;

/* Tasks are (image, group, column tile), each a packed GEMM whose B panels are im2col'd on the fly. */
static void conv_packed_tasks(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    conv_job *job = context;
    const tb_conv_shape *s = job->s;
    int64_t spatial = s->out_h * s->out_w;
    float *scratch = tb_ops_scratch(0, tb_conv_gemm_scratch_floats(&job->plan));
    if (!scratch) {
        tb_nn_fail(&job->failure, TB_ERR_OUT_OF_MEMORY);
        return;
    }
    int64_t weight_floats = tb_conv_gemm_weight_floats(&job->plan);
    for (int64_t task = begin; task < end; task++) {
        int64_t part = task % job->m_parts, rest = task / job->m_parts;
        int64_t tile = rest % job->tiles;
        int64_t g = (rest / job->tiles) % s->groups;
        int64_t n = rest / (job->tiles * s->groups);
        int64_t c0 = tile * job->tile, c1 = c0 + job->tile < spatial ? c0 + job->tile : spatial;
        const float *x = job->x + (n * s->in_channels + g * s->in_per_group) * s->in_h * s->in_w;
        /* rows [row0, row0 + plan.m) of the group: a plan over whole register tiles of the packed weight */
        int64_t row0 = part * job->m_rows;
        tb_conv_gemm plan = job->plan;
        plan.m = s->out_per_group - row0 < job->m_rows ? s->out_per_group - row0 : job->m_rows;
        plan.m_panels = (plan.m + plan.mr - 1) / plan.mr;
        int64_t offset = (n * s->out_channels + g * s->out_per_group + row0) * spatial;
        tb_conv_gemm_run(&plan, job->packed_weight + g * weight_floats + row0 * s->k, &s->geometry, x, c0, c1,
                         scratch, job->y + offset, spatial,
                         job->bias ? job->bias + g * s->out_per_group + row0 : NULL, job->activation,
                         job->residual ? job->residual + offset : NULL);
    }
}

/* Tasks are (column tile of the batch's concatenated columns, output-channel part); one group. */
static void conv_images_tasks(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    conv_job *job = context;
    const tb_conv_shape *s = job->s;
    int64_t spatial = s->out_h * s->out_w, columns = s->batch * spatial;
    float *scratch = tb_ops_scratch(0, tb_conv_gemm_images_scratch_floats(&job->plan));
    float *c = tb_ops_scratch(1, tb_conv_gemm_images_c_floats(&job->plan));
    if (!scratch || !c) {
        tb_nn_fail(&job->failure, TB_ERR_OUT_OF_MEMORY);
        return;
    }
    for (int64_t task = begin; task < end; task++) {
        int64_t part = task % job->m_parts, tile = task / job->m_parts;
        int64_t c0 = tile * job->tile, c1 = c0 + job->tile < columns ? c0 + job->tile : columns;
        int64_t row0 = part * job->m_rows;
        tb_conv_gemm plan = job->plan;
        plan.m = s->out_channels - row0 < job->m_rows ? s->out_channels - row0 : job->m_rows;
        plan.m_panels = (plan.m + plan.mr - 1) / plan.mr;
        tb_conv_gemm_run_images(&plan, job->packed_weight + row0 * s->k, &s->geometry, job->x,
                                s->in_channels * s->in_h * s->in_w, spatial, c0, c1, scratch, c,
                                job->y + row0 * spatial, s->out_channels * spatial,
                                job->bias ? job->bias + row0 : NULL, job->activation,
                                job->residual ? job->residual + row0 * spatial : NULL);
    }
}

/* Whether the packed path should concatenate the images' columns: a batch whose planes leave more than
 * an eighth of each image's last NR-wide panel empty (late-stage 7x7 and 14x14 planes). */
static bool concatenate_images(const tb_conv_shape *s, int nr) {
    int64_t spatial = s->out_h * s->out_w;
    int64_t padded = (spatial + nr - 1) / nr * nr;
    return s->batch > 1 && s->groups == 1 && (padded - spatial) * 8 > spatial;
}

/* Tasks are (block of tiles, part of the output channels) of the Winograd path. */
static void conv_winograd_tasks(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    conv_job *job = context;
    const tb_winograd_plan *plan = &job->winograd;
    float *v = tb_ops_scratch(0, tb_winograd_v_floats(plan));
    float *m = tb_ops_scratch(1, tb_winograd_m_floats(plan));
    float *work = tb_ops_scratch(2, tb_winograd_work_floats(plan));
    if (!v || !m || !work) {
        tb_nn_fail(&job->failure, TB_ERR_OUT_OF_MEMORY);
        return;
    }
    const int64_t parts = tb_winograd_parts(plan);
    const tb_winograd_args args = {
        .packed = job->packed_weight, .w = job->w, .row_scale = job->row_scale, .x = job->x, .y = job->y,
        .bias = job->bias, .activation = job->activation, .residual = job->residual,
    };
    for (int64_t task = begin; task < end; task++)
        tb_winograd_run(plan, &args, task / parts, task % parts, v, m, work);
}

/* Tasks are (image, group, slot range) of the direct path. */
static void conv_direct_tasks(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    conv_job *job = context;
    const tb_conv_shape *s = job->s;
    int64_t spatial = s->out_h * s->out_w;
    for (int64_t task = begin; task < end; task++) {
        int64_t tile = task % job->tiles;
        int64_t g = (task / job->tiles) % s->groups;
        int64_t n = task / (job->tiles * s->groups);
        int64_t first = tile * job->tile, last = first + job->tile < job->slots ? first + job->tile : job->slots;
        int64_t offset = (n * s->out_channels + g * s->out_per_group) * spatial;
        tb_conv_direct_args args = {
            .g = &s->geometry,
            .x = job->x + (n * s->in_channels + g * s->in_per_group) * s->in_h * s->in_w,
            .packed = job->packed_weight + g * s->out_per_group * s->k,
            .m = s->out_per_group,
            .bias = job->bias ? job->bias + g * s->out_per_group : NULL,
            .activation = job->activation,
            .residual = job->residual ? job->residual + offset : NULL,
            .y = job->y + offset,
            .ldy = spatial,
        };
        job->direct(&args, first, last);
    }
}

/* 1x1, stride 1, no padding: the input planes are the GEMM's B directly; one batched GEMM per group. */
static tb_status conv_pointwise(conv_job *job) {
    const tb_conv_shape *s = job->s;
    int64_t spatial = s->out_h * s->out_w;
    for (int64_t g = 0; g < s->groups; g++) {
        int64_t offset = g * s->out_per_group * spatial;
        tb_gemm_desc d = {
            .m = s->out_per_group, .n = spatial, .k = s->k,
            .a = job->w + g * s->out_per_group * s->k, .a_row_stride = s->k, .a_col_stride = 1,
            .b = job->x + g * s->in_per_group * spatial, .b_row_stride = spatial, .b_col_stride = 1,
            .c = job->y + offset, .c_row_stride = spatial,
            .alpha = 1.0f, .beta = 0.0f,
            .bias_kind = job->bias ? TB_BIAS_PER_ROW : TB_BIAS_NONE,
            .bias = job->bias ? job->bias + g * s->out_per_group : NULL,
            .activation = job->activation,
            .residual = job->residual ? job->residual + offset : NULL, .residual_row_stride = spatial,
            .batch = s->batch,
            .a_batch_stride = 0, .b_batch_stride = s->in_channels * spatial,
            .c_batch_stride = s->out_channels * spatial, .residual_batch_stride = s->out_channels * spatial,
        };
        TB_TRY(tb_gemm_f32(&d));
    }
    return TB_OK;
}

/* Tasks are output planes (image, output channel) of a one-input-channel-per-group convolution. */
static void conv_direct_planes(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    conv_job *job = context;
    const tb_conv_shape *s = job->s;
    int64_t spatial = s->out_h * s->out_w;
    const tb_elementwise_kernels *kernels = tb_elementwise_kernels_active();
    tb_conv2d_plane_fn plane_conv = tb_nn_kernels_for(tb_isa_active())->conv2d_plane;
    int unary = activation_unary[job->activation];
    tb_unary_params params = {0};
    for (int64_t task = begin; task < end; task++) {
        int64_t n = task / s->out_channels, co = task % s->out_channels;
        int64_t ci = co / s->out_per_group;
        const float *x = job->x + (n * s->in_channels + ci) * s->in_h * s->in_w;
        float *y = job->y + task * spatial;
        plane_conv(&s->geometry, x, job->w + co * s->k, job->bias ? job->bias[co] : 0.0f, y);
        if (unary >= 0)
            kernels->unary[unary](y, y, spatial, &params);
        if (job->residual) {
            const float *r = job->residual + task * spatial;
            for (int64_t j = 0; j < spatial; j++)
                y[j] += r[j];
        }
    }
}

/* Splits each (image, group)'s `units` (output columns of the packed path, slots of the direct path)
 * into tasks of `align`-multiple size, halving while there are fewer than four tasks per thread and
 * the halves stay >= min_units. */
static void choose_tiles(const tb_conv_shape *s, int64_t units, int64_t min_units, int64_t align, int64_t *tile_out,
                         int64_t *tiles_out) {
    int64_t threads = tb_num_threads(), tiles = 1;
    while (s->batch * s->groups * tiles < 4 * threads && units / (2 * tiles) >= min_units)
        tiles *= 2;
    int64_t tile = (units + tiles - 1) / tiles;
    tile = (tile + align - 1) / align * align;
    if (tile > units)
        tile = units;
    *tile_out = tile;
    *tiles_out = (units + tile - 1) / tile;
}

/* ---- packed weights, and their cache on the weight's storage ---- */

/* Floats of the packed weights of job's path (CONV_DIRECT or a packed path). */
static int64_t packed_weight_floats(const conv_job *job) {
    if (job->path == CONV_WINOGRAD)
        return tb_winograd_weight_floats(&job->winograd);
    return job->path == CONV_DIRECT ? job->s->out_channels * job->s->k
                                    : tb_conv_gemm_weight_floats(&job->plan) * job->s->groups;
}

/* Packs every group's weights (times row_scale) in the layout of job's path into out. */
static void pack_weights_into(const conv_job *job, float *out) {
    const tb_conv_shape *s = job->s;
    if (job->path == CONV_WINOGRAD) { /* one group */
        tb_winograd_pack_weight(&job->winograd, job->w, job->row_scale, out);
        return;
    }
    const int64_t per_group = job->path == CONV_DIRECT ? s->out_per_group * s->k : tb_conv_gemm_weight_floats(&job->plan);
    const int direct_rows = tb_nn_kernels_for(tb_isa_active())->conv_direct_rows;
    for (int64_t g = 0; g < s->groups; g++) {
        const float *w = job->w + g * s->out_per_group * s->k;
        const float *scale = job->row_scale ? job->row_scale + g * s->out_per_group : NULL;
        if (job->path == CONV_DIRECT)
            tb_conv_direct_pack(s->out_per_group, s->k, direct_rows, w, scale, out + g * per_group);
        else
            tb_conv_gemm_pack_weight(&job->plan, w, scale, out + g * per_group);
    }
}

/* Packed weights cached on the weight's storage: valid while the storage's version, the weight view,
 * the BN scale folded in while packing (compared by value: it is recomputed every call) and the kernel
 * choice are what they were at packing time. */
typedef struct conv_packed {
    tb_storage_derived base; /* first: the storage frees us through it */
    uint64_t version;
    const float *w;
    int64_t out_channels, k, groups, kc;
    conv_path path;
    tb_isa isa;
    int mr, direct_rows, uses; /* uses: calls seen at this key */
    float *scale;              /* [out_channels] copy of the row scale, or NULL */
    tb_tensor packed;          /* empty until the second call at one key */
} conv_packed;

static atomic_llong conv_pack_count, conv_hit_count;

static void conv_packed_free(tb_storage_derived *base) {
    conv_packed *entry = (conv_packed *)base;
    tb_tensor_release(&entry->packed);
    tb_free(entry->scale);
    tb_free(entry);
}

static bool conv_packed_matches(const conv_packed *e, const conv_job *job, uint64_t version, tb_isa isa,
                                int direct_rows) {
    const tb_conv_shape *s = job->s;
    if (e->version != version || e->w != job->w || e->out_channels != s->out_channels || e->k != s->k ||
        e->groups != s->groups || e->path != job->path || e->isa != isa || e->mr != job->plan.mr ||
        e->kc != job->plan.kc || e->direct_rows != direct_rows || (e->scale != NULL) != (job->row_scale != NULL))
        return false;
    return !e->scale || memcmp(e->scale, job->row_scale, (size_t)s->out_channels * sizeof(float)) == 0;
}

/* Resets entry to job's key (false when out of memory for the scale copy). */
static bool conv_packed_rekey(conv_packed *e, const conv_job *job, uint64_t version, tb_isa isa, int direct_rows) {
    const tb_conv_shape *s = job->s;
    tb_tensor_release(&e->packed);
    tb_free(e->scale);
    e->scale = NULL;
    e->uses = 0;
    e->version = version;
    e->w = job->w;
    e->out_channels = s->out_channels;
    e->k = s->k;
    e->groups = s->groups;
    e->kc = job->plan.kc;
    e->path = job->path;
    e->isa = isa;
    e->mr = job->plan.mr;
    e->direct_rows = direct_rows;
    if (!job->row_scale)
        return true;
    if (tb_alloc((size_t)s->out_channels * sizeof(float), TB_ALLOC_DEFAULT, (void **)&e->scale) != TB_OK) {
        tb_error_clear();
        return false;
    }
    memcpy(e->scale, job->row_scale, (size_t)s->out_channels * sizeof(float));
    return true;
}

/* Whether packed weights may be cached on `storage` (NULL: a staged or folded copy, never cached). */
static bool weight_cache_usable(const tb_storage *storage) {
    return storage && tb_gemm_prepack_enabled() && tb_storage_cacheable(storage);
}

/* The packed weights of job's path in *out (a reference; job->packed_weight points at them): the cached
 * ones when job->weight_storage holds them for this key, else packed now, and kept there when this is
 * the second call at the key (weights that change every call never pay for a copy they cannot reuse). */
static tb_status packed_weights(conv_job *job, tb_tensor *out) {
    const int64_t count = packed_weight_floats(job);
    tb_storage *storage = job->weight_storage;
    if (weight_cache_usable(storage)) {
        tb_storage_derived *derived = tb_storage_derived_take(storage);
        conv_packed *entry = NULL;
        if (derived && derived->free != conv_packed_free) { /* another kind of derived data: leave it */
            tb_storage_derived_put(storage, derived);
        } else if (derived || tb_alloc(sizeof *entry, TB_ALLOC_DEFAULT, (void **)&entry) == TB_OK) {
            if (derived) {
                entry = (conv_packed *)derived;
            } else {
                memset(entry, 0, sizeof *entry);
                entry->base.free = conv_packed_free;
            }
            const tb_isa isa = tb_isa_active();
            const int direct_rows = tb_nn_kernels_for(isa)->conv_direct_rows;
            bool usable = conv_packed_matches(entry, job, storage->version, isa, direct_rows) ||
                          conv_packed_rekey(entry, job, storage->version, isa, direct_rows);
            if (usable) {
                entry->uses++;
                if (entry->packed.storage) {
                    atomic_fetch_add_explicit(&conv_hit_count, 1, memory_order_relaxed);
                } else if (entry->uses >= 2 && tb_tensor_empty(TB_F32, 1, &count, TB_ALLOC_DEFAULT, &entry->packed) == TB_OK) {
                    pack_weights_into(job, tb_tensor_data(&entry->packed));
                    atomic_fetch_add_explicit(&conv_pack_count, 1, memory_order_relaxed);
                }
                tb_error_clear(); /* no memory for the cached copy: pack for this call only */
            }
            const bool cached = usable && entry->packed.storage;
            if (cached)
                tb_tensor_retain(&entry->packed, out);
            tb_storage_derived_put(storage, usable ? &entry->base : NULL);
            if (!usable)
                conv_packed_free(&entry->base);
            if (cached) {
                job->packed_weight = tb_tensor_data(out);
                return TB_OK;
            }
        } else {
            tb_error_clear(); /* no memory for an entry: no cache, same numbers */
        }
    }
    TB_TRY(tb_tensor_empty(TB_F32, 1, &count, TB_ALLOC_DEFAULT, out));
    pack_weights_into(job, tb_tensor_data(out));
    job->packed_weight = tb_tensor_data(out);
    return TB_OK;
}

void tb_weight_cache_counts_get(tb_weight_cache_counts *out) {
    tb_gemm_cached_b_counts(&out->gemm_packs, &out->gemm_hits);
    out->conv_packs = atomic_load_explicit(&conv_pack_count, memory_order_relaxed);
    out->conv_hits = atomic_load_explicit(&conv_hit_count, memory_order_relaxed);
}

/* 1x1, stride 1, no padding: the input planes are a GEMM's B as they are. */
static bool is_pointwise(const tb_conv_shape *s) {
    const tb_window_geometry *g = &s->geometry;
    return s->kernel_h == 1 && s->kernel_w == 1 && g->stride_h == 1 && g->stride_w == 1 && g->pad_top == 0 &&
           g->pad_left == 0 && s->out_h == s->in_h && s->out_w == s->in_w;
}

/* Whether a path packs the weights, so that a BN scale can be applied while packing. */
static bool path_packs_weights(conv_path path) { return path >= CONV_DIRECT; }

/* Whether Winograd F(2x2, 3x3) takes s: 3x3, stride 1, no dilation, one group, and at least
 * WINOGRAD_MIN_CHANNELS channels in and out (TORCHBURN_CONV_WINOGRAD=0: never). Measured on Zen 3
 * (docs/benchmarks.md, 2026-12-07 night): 1.1-1.8x the direct / im2col paths from 64 to 512 channels
 * at batch 1 and 8 with the transformed weights cached, a tie at 16 -> 32 channels; below that the
 * GEMM depth (C_in) is too short. The weight transform writes 16/9 of the weight and costs about what
 * 100-150 tiles save, so a weight that cannot be cached between calls (cached_weight false: the
 * compile backend's parameters without freeze_weights) needs WINOGRAD_MIN_TILES_UNCACHED tiles: with
 * the transform every call, 512 channels at 7x7 x 8 images (128 tiles) took 16.8 ms against the
 * direct path's 14.0, 128 channels at 28x28 (196 tiles) 1.20 against 1.66 ms. */
enum { WINOGRAD_MIN_CHANNELS = 16, WINOGRAD_MIN_TILES_UNCACHED = 192 };
static bool winograd_suits(const tb_conv_shape *s, bool cached_weight) {
    const tb_window_geometry *g = &s->geometry;
    if (!(s->kernel_h == 3 && s->kernel_w == 3 && g->stride_h == 1 && g->stride_w == 1 && g->dilation_h == 1 &&
          g->dilation_w == 1 && s->groups == 1 && s->in_channels >= WINOGRAD_MIN_CHANNELS &&
          s->out_channels >= WINOGRAD_MIN_CHANNELS && tb_winograd_enabled()))
        return false;
    int64_t tiles = s->batch * ((s->out_h + 1) / 2) * ((s->out_w + 1) / 2);
    return cached_weight || tiles >= WINOGRAD_MIN_TILES_UNCACHED;
}

/* Chooses the path for s and initialises *plan, the packed GEMM plan the packed paths use (and
 * *winograd when it chooses that path). cached_weight: the packed-weight cache can keep this weight. */
static conv_path choose_path(const tb_conv_shape *s, bool cached_weight, tb_conv_gemm *plan,
                             tb_winograd_plan *winograd) {
    tb_conv_gemm_init(plan, tb_isa_active(), s->out_per_group, s->k);
    bool images = concatenate_images(s, plan->nr);
    if (winograd_suits(s, cached_weight)) {
        const tb_window_geometry *g = &s->geometry;
        tb_winograd_init(winograd, tb_isa_active(), s->batch, s->in_channels, s->out_channels, s->in_h, s->in_w,
                         s->out_h, s->out_w, g->pad_top, g->pad_left, tb_num_threads());
        return CONV_WINOGRAD;
    }
    /* 1x1 planes too small for the GEMM's panels take the packed path's concatenated columns */
    if (is_pointwise(s))
        return images ? CONV_PACKED_IMAGES : CONV_POINTWISE;
    if (s->groups > 1 && s->in_per_group == 1)
        return CONV_PLANES;
    /* The direct path needs rows of a stride and depth it is chosen for (per CPU, nn_dispatch.c) and
     * pays per output row: rows narrower than most of a vector go through im2col panels, which pack
     * several rows into one tile. */
    const tb_nn_kernels *kernels = tb_nn_kernels_for(tb_isa_active());
    const tb_window_geometry *g = &s->geometry;
    const tb_conv_direct_choice choice = tb_conv_direct_choice_for(kernels);
    if (kernels->conv_direct && g->stride_w <= choice.max_stride && (choice.max_k == 0 || s->k <= choice.max_k) &&
        s->kernel_h * s->kernel_w <= TB_CONV_DIRECT_MAX_TAPS && s->out_w >= kernels->conv_direct_lanes * 3 / 4) {
        /* the direct path splits only columns: when that leaves threads idle (batch 1, small planes,
         * many channels) the packed path, which also splits output channels, wins */
        int64_t lanes = kernels->conv_direct_lanes, tile, tiles;
        choose_tiles(s, s->out_h * ((s->out_w + lanes - 1) / lanes), CONV_MIN_SLOTS, 2, &tile, &tiles);
        if (!(s->batch * s->groups * tiles < tb_num_threads() && s->out_per_group >= 64))
            return CONV_DIRECT;
    }
    return images ? CONV_PACKED_IMAGES : CONV_PACKED;
}

static tb_status conv_run(conv_job *job) {
    const tb_conv_shape *s = job->s;
    int64_t spatial = s->out_h * s->out_w;
    if (s->batch == 0 || s->out_channels == 0 || spatial == 0)
        return TB_OK;
    if (job->path == CONV_POINTWISE)
        return conv_pointwise(job);
    atomic_init(&job->failure.status, TB_OK);
    if (job->path == CONV_WINOGRAD) {
        tb_tensor packed = {0};
        TB_TRY(packed_weights(job, &packed));
        tb_winograd_count_call();
        tb_parallel_for(tb_winograd_blocks(&job->winograd) * tb_winograd_parts(&job->winograd), 1,
                        conv_winograd_tasks, job);
        tb_tensor_release(&packed);
    } else if (job->path == CONV_DIRECT) {
        const tb_nn_kernels *kernels = tb_nn_kernels_for(tb_isa_active());
        int64_t lanes = kernels->conv_direct_lanes;
        job->direct = kernels->conv_direct;
        job->slots = s->out_h * ((s->out_w + lanes - 1) / lanes);
        tb_tensor packed = {0};
        TB_TRY(packed_weights(job, &packed));
        choose_tiles(s, job->slots, CONV_MIN_SLOTS, 2, &job->tile, &job->tiles); /* a register tile is two slots */
        tb_parallel_for(s->batch * s->groups * job->tiles, 1, conv_direct_tasks, job);
        tb_tensor_release(&packed);
    } else if (job->path == CONV_PLANES) {
        int64_t planes = s->batch * s->out_channels;
        int64_t grain = spatial * s->k >= TB_OPS_GRAIN ? 1 : TB_OPS_GRAIN / (spatial * s->k);
        tb_parallel_for(planes, grain, conv_direct_planes, job);
    } else {
        tb_tensor packed = {0};
        TB_TRY(packed_weights(job, &packed));
        if (job->path == CONV_PACKED_IMAGES) {
            /* one task per thread over whole panels of the concatenated columns, so each streams the
             * weight once; output channels split too when the panels are fewer than the threads */
            int64_t threads = tb_num_threads(), panels = (s->batch * spatial + job->plan.nr - 1) / job->plan.nr;
            int64_t tasks = panels < threads ? panels : threads;
            job->tile = (panels + tasks - 1) / tasks * job->plan.nr;
            job->tiles = (s->batch * spatial + job->tile - 1) / job->tile;
            int64_t parts = job->tiles >= threads ? 1 : (threads + job->tiles - 1) / job->tiles;
            if (parts > job->plan.m_panels)
                parts = job->plan.m_panels;
            job->m_rows = (job->plan.m_panels + parts - 1) / parts * job->plan.mr;
            job->m_parts = (s->out_channels + job->m_rows - 1) / job->m_rows;
            tb_parallel_for(job->tiles * job->m_parts, 1, conv_images_tasks, job);
        } else {
            choose_tiles(s, spatial, CONV_MIN_TILE, job->plan.nr, &job->tile, &job->tiles);
            /* few column tasks (batch 1, small late-stage planes): also split the output channels, so
             * every thread works and each streams only its part of the weight */
            int64_t column_tasks = s->batch * s->groups * job->tiles, threads = tb_num_threads();
            int64_t parts = column_tasks >= threads ? 1 : (threads + column_tasks - 1) / column_tasks;
            if (parts > job->plan.m_panels)
                parts = job->plan.m_panels;
            job->m_rows = (job->plan.m_panels + parts - 1) / parts * job->plan.mr;
            job->m_parts = (s->out_per_group + job->m_rows - 1) / job->m_rows;
            tb_parallel_for(column_tasks * job->m_parts, 1, conv_packed_tasks, job);
        }
        tb_tensor_release(&packed);
    }
    tb_status status = (tb_status)atomic_load(&job->failure.status);
    if (status != TB_OK)
        return tb_error_set(status, "conv2d: out of memory for %s scratch",
                            job->path == CONV_WINOGRAD ? "the Winograd transforms'" : "im2col");
    return TB_OK;
}

/* (bias * scale + shift) into a fresh f32 tensor, and weight * scale per output row when fold_weights
 * (else *folded_weight is the weight itself and the scale is applied while packing). */
static tb_status fold_epilogue(const tb_tensor *weight, const tb_tensor *bias, const tb_tensor *scale,
                               const tb_tensor *shift, int64_t out_channels, int64_t k, bool fold_weights,
                               tb_tensor *folded_weight, tb_tensor *folded_bias) {
    const float *w = tb_tensor_data(weight);
    const float *b = tb_nn_data(bias), *sc = tb_nn_data(scale), *sh = tb_nn_data(shift);
    if (sc && fold_weights) {
        int64_t shape[2] = {out_channels, k};
        TB_TRY(tb_tensor_empty(TB_F32, 2, shape, TB_ALLOC_DEFAULT, folded_weight));
        float *fw = tb_tensor_data(folded_weight);
        for (int64_t co = 0; co < out_channels; co++)
            for (int64_t q = 0; q < k; q++)
                fw[co * k + q] = w[co * k + q] * sc[co];
    } else {
        tb_tensor_retain(weight, folded_weight);
    }
    if (!b && !sh)
        return TB_OK;
    TB_TRY(tb_tensor_empty(TB_F32, 1, &out_channels, TB_ALLOC_DEFAULT, folded_bias));
    float *fb = tb_tensor_data(folded_bias);
    for (int64_t co = 0; co < out_channels; co++) {
        float value = b ? b[co] : 0.0f;
        if (sc)
            value *= sc[co];
        fb[co] = value + (sh ? sh[co] : 0.0f);
    }
    return TB_OK;
}

/* The fused convolution; writes into `into` (float32, contiguous, caller memory) when it is not NULL,
 * else into a tensor it allocates in *out. */
static tb_status conv2d_fused(const tb_tensor *x_in, const tb_tensor *weight_in, const tb_tensor *bias_in,
                              const tb_conv2d_params *params, const tb_conv2d_epilogue *epilogue, float *into,
                              tb_tensor *out) {
    if (out)
        memset(out, 0, sizeof *out);
    int activation = epilogue ? epilogue->activation : TB_ACTIVATION_NONE;
    if (activation < 0 || activation >= TB_ACTIVATION_COUNT)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "conv2d: unknown activation %d", activation);
    TB_TRY(tb_nn_require_float(x_in->dtype, "conv2d: input"));
    TB_TRY(tb_nn_require_float(weight_in->dtype, "conv2d: weight"));
    tb_dtype out_dtype = tb_ops_promote(x_in->dtype, weight_in->dtype);
    if (into && out_dtype != TB_F32)
        return tb_error_set(TB_ERR_DTYPE, "conv2d: writing into caller memory needs a float32 result (got %s)",
                            tb_dtype_name(out_dtype));
    if (out_dtype == TB_F64) {
        if (epilogue && (epilogue->scale || epilogue->shift || epilogue->residual || activation != TB_ACTIVATION_NONE))
            return tb_error_set(TB_ERR_UNSUPPORTED, "conv2d: the fused epilogue runs in float32 only (got float64)");
        return tb_conv2d_f64(x_in, weight_in, bias_in, params, out);
    }
    enum { X4, X, W, BIAS, SCALE, SHIFT, FOLDED_W, FOLDED_B, RESIDUAL, RESULT, COUNT };
    tb_tensor t[COUNT];
    memset(t, 0, sizeof t);
    bool unbatched = false;
    tb_conv_shape s;
    tb_status status = tb_nn_view_4d(x_in, "conv2d: input", &t[X4], &unbatched);
    if (status == TB_OK)
        status = tb_conv_check("conv2d", &t[X4], weight_in, params, &s);
    if (status == TB_OK)
        status = tb_nn_stage(&t[X4], "conv2d: input", &t[X]);
    if (status == TB_OK)
        status = tb_nn_stage(weight_in, "conv2d: weight", &t[W]);
    if (status == TB_OK)
        status = tb_nn_stage_vector(bias_in, s.out_channels, "conv2d: bias", &t[BIAS]);
    if (status == TB_OK && epilogue)
        status = tb_nn_stage_vector(epilogue->scale, s.out_channels, "conv2d: scale", &t[SCALE]);
    if (status == TB_OK && epilogue)
        status = tb_nn_stage_vector(epilogue->shift, s.out_channels, "conv2d: shift", &t[SHIFT]);
    conv_job job = {.s = &s, .activation = (tb_activation)activation};
    /* the cache keys on the caller's weight memory, never on a staged copy (nor a folded one: the paths
     * that cache pack the weights and fold the BN scale while packing) */
    tb_storage *weight_storage = epilogue && epilogue->weight_storage ? epilogue->weight_storage : weight_in->storage;
    if (status == TB_OK) {
        if (tb_tensor_data(&t[W]) != tb_tensor_data(weight_in))
            weight_storage = NULL;
        job.path = choose_path(&s, weight_cache_usable(weight_storage), &job.plan, &job.winograd);
        status = fold_epilogue(&t[W], &t[BIAS], &t[SCALE], &t[SHIFT], s.out_channels, s.k,
                               !path_packs_weights(job.path), &t[FOLDED_W], &t[FOLDED_B]);
    }
    int64_t shape[4] = {s.batch, s.out_channels, s.out_h, s.out_w};
    if (status == TB_OK && epilogue && epilogue->residual) {
        /* the residual broadcasts against the caller's (possibly unbatched) output shape */
        status = tb_nn_stage_expanded(epilogue->residual, unbatched ? 3 : 4, unbatched ? shape + 1 : shape,
                                      "conv2d: residual", &t[RESIDUAL]);
    }
    if (status == TB_OK && !into)
        status = tb_tensor_empty(TB_F32, 4, shape, TB_ALLOC_DEFAULT, &t[RESULT]);
    if (status == TB_OK) {
        job.x = tb_tensor_data(&t[X]);
        job.w = tb_tensor_data(&t[FOLDED_W]);
        job.weight_storage = job.w == tb_tensor_data(weight_in) ? weight_storage : NULL;
        job.bias = tb_nn_data(&t[FOLDED_B]);
        job.row_scale = path_packs_weights(job.path) ? tb_nn_data(&t[SCALE]) : NULL;
        job.residual = tb_nn_data(&t[RESIDUAL]);
        job.y = into ? into : tb_tensor_data(&t[RESULT]);
        status = conv_run(&job);
    }
    if (status == TB_OK && !into)
        status = tb_nn_drop_batch(&t[RESULT], unbatched);
    if (status == TB_OK && !into)
        status = tb_ops_finish_dtype(&t[RESULT], out_dtype, out);
    tb_nn_release_all(t, COUNT);
    return status;
}

tb_status tb_op_conv2d_fused(const tb_tensor *x, const tb_tensor *weight, const tb_tensor *bias,
                             const tb_conv2d_params *params, const tb_conv2d_epilogue *epilogue, tb_tensor *out) {
    return conv2d_fused(x, weight, bias, params, epilogue, NULL, out);
}

tb_status tb_op_conv2d_fused_into(const tb_tensor *x, const tb_tensor *weight, const tb_tensor *bias,
                                  const tb_conv2d_params *params, const tb_conv2d_epilogue *epilogue, float *y) {
    if (!y)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "conv2d: no output memory");
    return conv2d_fused(x, weight, bias, params, epilogue, y, NULL);
}

tb_status tb_op_conv2d(const tb_tensor *x, const tb_tensor *weight, const tb_tensor *bias,
                       const tb_conv2d_params *params, tb_tensor *out) {
    return tb_op_conv2d_fused(x, weight, bias, params, NULL, out);
}
