/* The f32 GEMM driver: validation, BLIS-style cache blocking (NC / KC / MC loops around an MR x NR
 * register micro-kernel), packing into per-thread scratch, the fused epilogue (bias, activation,
 * residual) applied to each C tile as soon as its last k block is done, and the split over threads.
 *
 * Threading: C (per batch entry) is cut into a grid of tm x tn cells aligned to the register tile,
 * chosen by a small cost model so that every thread gets the same number of micro-tiles (plus the
 * packing each cell repeats). Cells are independent (each packs its own panels), so one
 * tb_parallel_for with no barriers runs the whole product.
 *
 * Products of at most TB_GEMM_SMALL_M_MAX rows (decoding: x[1..8, K] W^T) skip packing when the ISA
 * has a small-m kernel: packing B would cost more than the product, which only streams B once. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "kernels/gemm_internal.h"
#include "torchburn/alloc.h"
#include "torchburn/thread_pool.h"

/* Products below this many multiply-adds run on the calling thread: waking the pool (~µs) would
 * cost more than the split saves. */
#define TB_GEMM_PARALLEL_MIN_MACS (1 << 18)

tb_status tb_gemm_validate(const tb_gemm_desc *d, const char *where) {
    if (!d)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%s: descriptor is NULL", where);
    if (d->m < 0 || d->n < 0 || d->k < 0 || d->batch < 0)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%s: negative size (m=%lld n=%lld k=%lld batch=%lld)", where,
                            (long long)d->m, (long long)d->n, (long long)d->k, (long long)d->batch);
    if ((unsigned)d->activation >= (unsigned)TB_ACTIVATION_COUNT)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%s: unknown activation %d", where, (int)d->activation);
    if (d->bias_kind != TB_BIAS_NONE && d->bias_kind != TB_BIAS_PER_COLUMN && d->bias_kind != TB_BIAS_PER_ROW)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%s: unknown bias kind %d", where, (int)d->bias_kind);
    if (d->m == 0 || d->n == 0 || d->batch == 0)
        return TB_OK;
    if (!d->c)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%s: C is NULL for a %lldx%lld output", where, (long long)d->m,
                            (long long)d->n);
    if (d->m > 1 && d->c_row_stride < d->n)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%s: c_row_stride %lld < n %lld makes C rows overlap", where,
                            (long long)d->c_row_stride, (long long)d->n);
    if (d->batch > 1 && d->c_batch_stride < (d->m - 1) * d->c_row_stride + d->n)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT,
                            "%s: c_batch_stride %lld is smaller than one %lldx%lld C (row stride %lld), so batch "
                            "entries overlap",
                            where, (long long)d->c_batch_stride, (long long)d->m, (long long)d->n,
                            (long long)d->c_row_stride);
    bool bf16_operands = d->a_bf16 || d->b_bf16;
    if (bf16_operands && (!d->a_bf16 || !d->b_bf16 || d->a || d->b || d->b_packed))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT,
                            "%s: bf16 operands need both a_bf16 and b_bf16, with a, b and b_packed NULL", where);
    if (d->k > 0 && !bf16_operands && (!d->a || !d->b))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%s: %s is NULL with k=%lld", where, !d->a ? "A" : "B",
                            (long long)d->k);
    if (d->bias_kind != TB_BIAS_NONE && !d->bias)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%s: bias kind %s but bias is NULL", where,
                            d->bias_kind == TB_BIAS_PER_ROW ? "per-row" : "per-column");
    if (d->residual && d->residual == d->c)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT,
                            "%s: residual aliases C (C is written before the residual is read); use beta=1 or "
                            "a separate output",
                            where);
    return TB_OK;
}

/* Prefetches the residual lines of the rows x cols tile at (row0, col0) a micro-kernel call ahead, so
 * that they arrive while it runs: the epilogue reads one short piece of each of mr rows that lie
 * far apart (a convolution's planes), a pattern the hardware prefetcher does not follow. On Zen 3 a
 * 1x1 convolution 64 -> 256 channels at 56x56 x 8 images with a residual spent 38% of its time on
 * those loads in the epilogue (25-28 ms; 15-16 ms with the prefetch). */
static void prefetch_residual(const tb_gemm_desc *d, const float *residual, int64_t row0, int64_t col0, int rows,
                              int cols) {
    for (int i = 0; i < rows; i++) {
        const float *line = residual + (row0 + i) * d->residual_row_stride + col0;
        __builtin_prefetch(line, 0, 3);
        __builtin_prefetch(line + cols - 1, 0, 3);
    }
}

/* Runs the ISA's epilogue on the rows x cols tile at (row0, col0) of this batch entry's C while the
 * tile is still in L1. */
static void apply_epilogue(const tb_gemm_microkernel *uk, const tb_gemm_desc *d, const float *residual, float *c,
                           int64_t row0, int64_t col0, int rows, int cols) {
    tb_gemm_epilogue e;
    e.bias_kind = d->bias_kind;
    e.bias = d->bias_kind == TB_BIAS_PER_COLUMN ? d->bias + col0
             : d->bias_kind == TB_BIAS_PER_ROW  ? d->bias + row0
                                                : NULL;
    e.activation = d->activation;
    e.residual = residual ? residual + row0 * d->residual_row_stride + col0 : NULL;
    e.residual_row_stride = d->residual_row_stride;
    uk->epilogue(c, d->c_row_stride, rows, cols, &e);
}

/* ---- per-thread scratch ---- */

/* Grow-only buffers of the calling thread, one per slot. A pthread key destructor frees them when a
 * thread exits (pool threads exit when the pool is rebuilt for a new thread count). */
typedef struct scratch_slots {
    void *data[TB_SCRATCH_SLOT_COUNT];
    size_t bytes[TB_SCRATCH_SLOT_COUNT];
} scratch_slots;

static _Thread_local scratch_slots thread_scratch;
static pthread_key_t scratch_key;
static pthread_once_t scratch_key_once = PTHREAD_ONCE_INIT;
static bool scratch_key_ok;

static void scratch_release(void *slots_pointer) {
    scratch_slots *slots = slots_pointer;
    for (int i = 0; i < TB_SCRATCH_SLOT_COUNT; i++) {
        tb_free(slots->data[i]);
        slots->data[i] = NULL;
        slots->bytes[i] = 0;
    }
}

static void scratch_key_create(void) { scratch_key_ok = pthread_key_create(&scratch_key, scratch_release) == 0; }

tb_status tb_kernel_scratch(tb_scratch_slot slot, size_t bytes, float **out) {
    scratch_slots *slots = &thread_scratch;
    if (bytes > slots->bytes[slot]) {
        pthread_once(&scratch_key_once, scratch_key_create);
        void *fresh = NULL;
        TB_TRY(tb_alloc(bytes, TB_ALLOC_DEFAULT, &fresh));
        tb_free(slots->data[slot]);
        slots->data[slot] = fresh;
        slots->bytes[slot] = bytes;
        if (scratch_key_ok)
            pthread_setspecific(scratch_key, slots);
    }
    *out = slots->data[slot];
    return TB_OK;
}

/* ---- operands: f32, or bf16 bits read in place (tb_gemm_desc's a_bf16 / b_bf16) ---- */

typedef struct operand {
    const float *f32;     /* exactly one of the two is set */
    const uint16_t *bf16;
} operand;

static operand operand_at(operand x, int64_t offset) {
    if (x.bf16)
        x.bf16 += offset;
    else
        x.f32 += offset;
    return x;
}

/* ---- the blocked product of one cell ---- */

typedef struct gemm_job {
    const tb_gemm_desc *d;
    const tb_gemm_microkernel *uk;
    tb_gemm_blocking blocking; /* mc/kc/nc for this CPU (gemm_blocking.c) */
    bool skip_product; /* k == 0 or alpha == 0: C = beta * C, then the epilogue */
    int64_t m_tiles, n_tiles; /* register tiles along M and N */
    int64_t grid_m, grid_n;   /* cells per batch entry */
} gemm_job;

static void pack_a_block(const gemm_job *job, operand a, int64_t rows, int64_t kc, float *dst) {
    const tb_gemm_microkernel *uk = job->uk;
    const int64_t depth = tb_gemm_panel_depth(uk, kc), rs = job->d->a_row_stride, cs = job->d->a_col_stride;
    for (int64_t i = 0; i < rows; i += uk->mr) {
        int panel_rows = (int)(rows - i < uk->mr ? rows - i : uk->mr);
        operand src = operand_at(a, i * rs);
        float *panel = dst + i * depth;
        if (src.bf16)
            uk->pack_a_bf16(src.bf16, rs, cs, panel_rows, kc, panel);
        else if (uk->pack_a)
            uk->pack_a(src.f32, rs, cs, panel_rows, kc, panel);
        else
            tb_gemm_pack_a_portable(src.f32, rs, cs, panel_rows, kc, uk->mr, panel);
    }
}

/* Packs columns [0, cols) of a kc-row block of B into consecutive NR-column panels (panel j/NR at
 * dst + j * tb_gemm_panel_depth(kc)): the layout run_cell reads, and each k block of a prepacked B. */
static void pack_b_panels(const tb_gemm_microkernel *uk, operand b, int64_t row_stride, int64_t col_stride,
                          int64_t cols, int64_t kc, float *dst) {
    const int64_t depth = tb_gemm_panel_depth(uk, kc);
    for (int64_t j = 0; j < cols; j += uk->nr) {
        int panel_cols = (int)(cols - j < uk->nr ? cols - j : uk->nr);
        operand src = operand_at(b, j * col_stride);
        float *panel = dst + j * depth;
        if (src.bf16)
            uk->pack_b_bf16(src.bf16, row_stride, col_stride, panel_cols, kc, panel);
        else if (uk->pack_b)
            uk->pack_b(src.f32, row_stride, col_stride, panel_cols, kc, panel);
        else
            tb_gemm_pack_b_portable(src.f32, row_stride, col_stride, panel_cols, kc, uk->nr, panel);
    }
}

static void pack_b_block(const gemm_job *job, operand b, int64_t cols, int64_t kc, float *dst) {
    pack_b_panels(job->uk, b, job->d->b_row_stride, job->d->b_col_stride, cols, kc, dst);
}

/* The k block size a product of depth k runs with under blocking kc: a k a little above kc is split
 * into similar blocks rather than a full one plus a sliver. */
static int64_t k_block_size(int64_t k, int64_t blocking_kc) {
    int64_t k_blocks = (k + blocking_kc - 1) / blocking_kc;
    return (k + k_blocks - 1) / k_blocks;
}

/* ---- prepacked B ----
 * Layout: k block q (rows [pc, pc + kcur), pc = q * kc with kc = k_block_size, kcur = kc but for the
 * last block) at data + q * n_pad * depth(kc), as pack_b_panels lays it out over all n columns; a
 * cell's panels for columns from jc are then at data + q * n_pad * depth(kc) + jc * depth(kcur),
 * exactly where run_cell would have packed them (depth: tb_gemm_panel_depth, kc without tile
 * padding, so plain kernels keep data + pc * n_pad + jc * kcur). */
struct tb_gemm_packed_b {
    const tb_gemm_microkernel *uk;
    int64_t k, n, n_pad;
    int64_t blocking_kc; /* the blocking kc it was packed under (the k blocks follow from it) */
    float *data;
    size_t bytes;
};

typedef struct pack_b_job {
    const tb_gemm_microkernel *uk;
    operand b;
    int64_t row_stride, col_stride, k, n, kc, n_pad, panels_per_unit, units_per_block;
    float *data;
} pack_b_job;

enum { PACK_UNIT_PANELS = 4 };

static void pack_b_worker(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    const pack_b_job *job = context;
    const int64_t nr = job->uk->nr;
    for (int64_t unit = begin; unit < end; unit++) {
        int64_t pc = unit / job->units_per_block * job->kc;
        int64_t j0 = unit % job->units_per_block * job->panels_per_unit * nr;
        int64_t kcur = job->k - pc < job->kc ? job->k - pc : job->kc;
        int64_t cols = job->n - j0 < job->panels_per_unit * nr ? job->n - j0 : job->panels_per_unit * nr;
        float *block = job->data + pc / job->kc * job->n_pad * tb_gemm_panel_depth(job->uk, job->kc);
        pack_b_panels(job->uk, operand_at(job->b, pc * job->row_stride + j0 * job->col_stride), job->row_stride,
                      job->col_stride, cols, kcur, block + j0 * tb_gemm_panel_depth(job->uk, kcur));
    }
}

/* tb_gemm_pack_b from an f32 or bf16 B (bf16: the table must pack bf16 sources; checked by callers). */
static tb_status pack_b_from(int64_t k, int64_t n, operand b, int64_t b_row_stride, int64_t b_col_stride, tb_isa isa,
                             tb_gemm_precision precision, tb_gemm_packed_b **out) {
    *out = NULL;
    if (k < 1 || n < 1 || (!b.f32 && !b.bf16))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "gemm_pack_b: needs k, n >= 1 and B (k=%lld n=%lld B=%s)",
                            (long long)k, (long long)n, b.f32 || b.bf16 ? "given" : "NULL");
    if ((unsigned)isa >= (unsigned)TB_ISA_COUNT || !tb_isa_supported(isa))
        return tb_error_set(TB_ERR_UNSUPPORTED, "gemm_pack_b: ISA %s is not supported by this CPU",
                            (unsigned)isa < (unsigned)TB_ISA_COUNT ? tb_isa_name(isa) : "(invalid)");
    const tb_gemm_microkernel *uk = tb_gemm_microkernel_for_precision(isa, precision);
    tb_gemm_blocking blocking = tb_gemm_blocking_for(uk);
    int64_t n_pad = (n + uk->nr - 1) / uk->nr * uk->nr;
    int64_t kc = k_block_size(k, blocking.kc), k_blocks = (k + kc - 1) / kc;
    int64_t depth = (k_blocks - 1) * tb_gemm_panel_depth(uk, kc) + tb_gemm_panel_depth(uk, k - (k_blocks - 1) * kc);
    size_t bytes = (size_t)depth * (size_t)n_pad * sizeof(float);
    tb_gemm_packed_b *packed = NULL;
    TB_TRY(tb_alloc(sizeof *packed, TB_ALLOC_DEFAULT, (void **)&packed));
    tb_status status = tb_alloc(bytes, TB_ALLOC_DEFAULT, (void **)&packed->data);
    if (status != TB_OK) {
        tb_free(packed);
        return tb_error_set(status, "gemm_pack_b: could not allocate %zu bytes for a packed %lldx%lld B", bytes,
                            (long long)k, (long long)n);
    }
    packed->uk = uk;
    packed->k = k;
    packed->n = n;
    packed->n_pad = n_pad;
    packed->blocking_kc = blocking.kc;
    packed->bytes = bytes;
    pack_b_job job = {.uk = uk, .b = b, .row_stride = b_row_stride, .col_stride = b_col_stride, .k = k, .n = n,
                      .kc = kc, .n_pad = n_pad, .panels_per_unit = PACK_UNIT_PANELS,
                      .data = packed->data};
    job.units_per_block = (n_pad / uk->nr + PACK_UNIT_PANELS - 1) / PACK_UNIT_PANELS;
    int64_t units = k_blocks * job.units_per_block;
    if ((double)k * (double)n < (double)(1 << 16) || tb_in_parallel_region())
        pack_b_worker(&job, 0, units, 0);
    else
        tb_parallel_for(units, 1, pack_b_worker, &job);
    *out = packed;
    return TB_OK;
}

tb_status tb_gemm_pack_b(int64_t k, int64_t n, const float *b, int64_t b_row_stride, int64_t b_col_stride, tb_isa isa,
                         tb_gemm_precision precision, tb_gemm_packed_b **out) {
    return pack_b_from(k, n, (operand){.f32 = b}, b_row_stride, b_col_stride, isa, precision, out);
}

bool tb_gemm_bf16_operands_supported(tb_isa isa) {
    if ((unsigned)isa >= (unsigned)TB_ISA_COUNT || !tb_isa_supported(isa))
        return false;
    const tb_gemm_microkernel *uk = tb_gemm_microkernel_for_precision(isa, TB_GEMM_PRECISION_BF16);
    return uk->pack_a_bf16 && uk->pack_b_bf16;
}

void tb_gemm_packed_b_free(tb_gemm_packed_b *packed) {
    if (!packed)
        return;
    tb_free(packed->data);
    tb_free(packed);
}

size_t tb_gemm_packed_b_bytes(const tb_gemm_packed_b *packed) { return packed ? packed->bytes : 0; }

bool tb_gemm_packed_b_matches(const tb_gemm_packed_b *packed, int64_t k, int64_t n, tb_isa isa,
                              tb_gemm_precision precision) {
    if (!packed || (unsigned)isa >= (unsigned)TB_ISA_COUNT)
        return false;
    const tb_gemm_microkernel *uk = tb_gemm_microkernel_for_precision(isa, precision);
    return packed->uk == uk && packed->k == k && packed->n == n && packed->blocking_kc == tb_gemm_blocking_for(uk).kc;
}

/* C = beta * C (beta == 0: zeros, C not read) over rows x cols, for the k == 0 / alpha == 0 case. */
static void scale_c(float *c, int64_t c_row_stride, int64_t rows, int64_t cols, float beta) {
    for (int64_t i = 0; i < rows; i++) {
        float *row = c + i * c_row_stride;
        if (beta == 0.0f)
            memset(row, 0, (size_t)cols * sizeof(float));
        else
            for (int64_t j = 0; j < cols; j++)
                row[j] *= beta;
    }
}

/* Computes rows [m0, m1) x columns [n0, n1) of batch entry `batch_index`. */
static tb_status run_cell(gemm_job *job, int64_t batch_index, int64_t m0, int64_t m1, int64_t n0, int64_t n1,
                          size_t *failed_bytes) {
    const tb_gemm_desc *d = job->d;
    const tb_gemm_microkernel *uk = job->uk;
    const int64_t mr = uk->mr, nr = uk->nr;
    float *c = d->c + batch_index * d->c_batch_stride;
    const float *residual = d->residual ? d->residual + batch_index * d->residual_batch_stride : NULL;
    bool has_epilogue = d->bias_kind != TB_BIAS_NONE || d->activation != TB_ACTIVATION_NONE || residual;

    if (job->skip_product) {
        for (int64_t i = m0; i < m1; i += mr) {
            int rows = (int)(m1 - i < mr ? m1 - i : mr);
            for (int64_t j = n0; j < n1; j += nr) {
                int cols = (int)(n1 - j < nr ? n1 - j : nr);
                float *tile = c + i * d->c_row_stride + j;
                scale_c(tile, d->c_row_stride, rows, cols, d->beta);
                if (has_epilogue)
                    apply_epilogue(uk, d, residual, tile, i, j, rows, cols);
            }
        }
        return TB_OK;
    }

    operand a = operand_at((operand){d->a, d->a_bf16}, batch_index * d->a_batch_stride);
    operand b = operand_at((operand){d->b, d->b_bf16}, batch_index * d->b_batch_stride);
    /* Block sizes: never larger than this cell needs, rounded to whole register tiles; a k that is a
     * little above kc is split into two similar blocks rather than a full one plus a sliver. */
    int64_t rows_total = m1 - m0, cols_total = n1 - n0;
    const tb_gemm_blocking *bl = &job->blocking;
    int64_t mc = bl->mc < rows_total ? bl->mc : (rows_total + mr - 1) / mr * mr;
    int64_t nc = bl->nc < cols_total ? bl->nc : (cols_total + nr - 1) / nr * nr;
    int64_t kc = k_block_size(d->k, bl->kc);
    const tb_gemm_packed_b *prepacked = d->b_packed;

    const int64_t depth = tb_gemm_panel_depth(uk, kc); /* of a full k block; a panel is mr or nr times this */
    float *a_packed = NULL;
    size_t a_floats = (size_t)mc * (size_t)depth;
    size_t b_floats = prepacked ? 0 : (size_t)nc * (size_t)depth;
    tb_status status = tb_kernel_scratch(TB_SCRATCH_GEMM, (a_floats + b_floats + 16) * sizeof(float), &a_packed);
    if (status != TB_OK) {
        *failed_bytes = (a_floats + b_floats) * sizeof(float);
        return status;
    }
    float *b_packed = a_packed + (a_floats + 15) / 16 * 16;

    if (uk->cell_begin)
        uk->cell_begin();
    for (int64_t jc = n0; jc < n1; jc += nc) {
        int64_t ncur = n1 - jc < nc ? n1 - jc : nc;
        for (int64_t pc = 0; pc < d->k; pc += kc) {
            int64_t kcur = d->k - pc < kc ? d->k - pc : kc;
            int64_t kdepth = tb_gemm_panel_depth(uk, kcur);
            bool first_k = pc == 0, last_k = pc + kcur >= d->k;
            float beta = first_k ? d->beta : 1.0f;
            const float *b_panels = b_packed;
            if (prepacked)
                b_panels = prepacked->data + pc / kc * prepacked->n_pad * depth + jc * kdepth;
            else
                pack_b_block(job, operand_at(b, pc * d->b_row_stride + jc * d->b_col_stride), ncur, kcur, b_packed);
            for (int64_t ic = m0; ic < m1; ic += mc) {
                int64_t mcur = m1 - ic < mc ? m1 - ic : mc;
                pack_a_block(job, operand_at(a, ic * d->a_row_stride + pc * d->a_col_stride), mcur, kcur, a_packed);
                for (int64_t jr = 0; jr < ncur; jr += nr) {
                    int cols = (int)(ncur - jr < nr ? ncur - jr : nr);
                    const float *b_panel = b_panels + jr * kdepth;
                    for (int64_t ir = 0; ir < mcur; ir += mr) {
                        int rows = (int)(mcur - ir < mr ? mcur - ir : mr);
                        float *tile = c + (ic + ir) * d->c_row_stride + jc + jr;
                        if (last_k && residual) { /* the next tile's residual, this tile's on the first */
                            if (ir == 0 && jr == 0)
                                prefetch_residual(d, residual, ic, jc, rows, cols);
                            if (ir + mr < mcur)
                                prefetch_residual(d, residual, ic + ir + mr,
                                                  jc + jr, (int)(mcur - ir - mr < mr ? mcur - ir - mr : mr), cols);
                            else if (jr + nr < ncur)
                                prefetch_residual(d, residual, ic, jc + jr + nr, (int)(mcur < mr ? mcur : mr),
                                                  (int)(ncur - jr - nr < nr ? ncur - jr - nr : nr));
                        }
                        uk->kernel(kcur, a_packed + ir * kdepth, b_panel, tile, d->c_row_stride, rows, cols,
                                   d->alpha, beta);
                        if (last_k && has_epilogue)
                            apply_epilogue(uk, d, residual, tile, ic + ir, jc + jr, rows, cols);
                    }
                }
            }
        }
    }
    if (uk->cell_end)
        uk->cell_end();
    return TB_OK;
}

/* ---- the unpacked path for a few rows ---- */

enum {
    SMALL_M_PIECE = 256,   /* columns per work item: B is streamed once, C stays in L1 */
    SMALL_M_K_BLOCK = 1024 /* 8 rows x 1024 of A = 32 KiB */
};

static bool use_small_m(const gemm_job *job) {
    const tb_gemm_desc *d = job->d;
    return job->uk->small_m && !job->skip_product && !d->a_bf16 && d->m <= TB_GEMM_SMALL_M_MAX &&
           (d->b_col_stride == 1 || (d->b_row_stride == 1 && d->a_col_stride == 1));
}

static void small_m_worker(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    gemm_job *job = context;
    const tb_gemm_desc *d = job->d;
    const tb_gemm_microkernel *uk = job->uk;
    int64_t pieces = (d->n + SMALL_M_PIECE - 1) / SMALL_M_PIECE;
    bool transposed = d->b_col_stride != 1;
    bool has_epilogue = d->bias_kind != TB_BIAS_NONE || d->activation != TB_ACTIVATION_NONE || d->residual;
    for (int64_t item = begin; item < end; item++) {
        int64_t batch_index = item / pieces, j0 = item % pieces * SMALL_M_PIECE;
        int cols = (int)(d->n - j0 < SMALL_M_PIECE ? d->n - j0 : SMALL_M_PIECE);
        const float *a = d->a + batch_index * d->a_batch_stride;
        const float *b = d->b + batch_index * d->b_batch_stride + j0 * d->b_col_stride;
        float *c = d->c + batch_index * d->c_batch_stride;
        /* k in blocks so the A rows a transposed-B step reads stay in L1 */
        for (int64_t p0 = 0; p0 < d->k; p0 += SMALL_M_K_BLOCK) {
            int64_t kb = d->k - p0 < SMALL_M_K_BLOCK ? d->k - p0 : SMALL_M_K_BLOCK;
            uk->small_m((int)d->m, cols, kb, a + p0 * d->a_col_stride, d->a_row_stride, d->a_col_stride,
                        b + p0 * (transposed ? 1 : d->b_row_stride), transposed ? d->b_col_stride : d->b_row_stride,
                        transposed, c + j0, d->c_row_stride, d->alpha, p0 == 0 ? d->beta : 1.0f);
        }
        if (has_epilogue) {
            const float *residual = d->residual ? d->residual + batch_index * d->residual_batch_stride : NULL;
            apply_epilogue(uk, d, residual, c + j0, 0, j0, (int)d->m, cols);
        }
    }
}

/* Cell `index` of the grid: its batch entry and its rows/columns, split evenly in whole tiles. */
static void cell_bounds(const gemm_job *job, int64_t index, int64_t *batch_index, int64_t *m0, int64_t *m1,
                        int64_t *n0, int64_t *n1) {
    int64_t per_batch = job->grid_m * job->grid_n;
    *batch_index = index / per_batch;
    int64_t cell = index % per_batch;
    int64_t gm = cell / job->grid_n, gn = cell % job->grid_n;
    int64_t mr = job->uk->mr, nr = job->uk->nr, m = job->d->m, n = job->d->n;
    *m0 = gm * job->m_tiles / job->grid_m * mr;
    *m1 = (gm + 1) * job->m_tiles / job->grid_m * mr;
    *n0 = gn * job->n_tiles / job->grid_n * nr;
    *n1 = (gn + 1) * job->n_tiles / job->grid_n * nr;
    if (*m1 > m)
        *m1 = m;
    if (*n1 > n)
        *n1 = n;
}

typedef struct unit_loop {
    tb_unit_fn run;
    void *context;
    atomic_int status;
    size_t failed_bytes;
} unit_loop;

static void unit_worker(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    unit_loop *loop = context;
    for (int64_t unit = begin; unit < end; unit++) {
        if (atomic_load_explicit(&loop->status, memory_order_relaxed) != TB_OK)
            return;
        size_t failed_bytes = 0;
        tb_status status = loop->run(loop->context, unit, &failed_bytes);
        if (status != TB_OK) {
            int expected = TB_OK;
            if (atomic_compare_exchange_strong(&loop->status, &expected, (int)status))
                loop->failed_bytes = failed_bytes; /* only the first failure writes; read after the join */
            return;
        }
    }
}

tb_status tb_run_units(tb_unit_fn run, void *context, int64_t count, bool parallel, size_t *failed_bytes) {
    unit_loop loop = {.run = run, .context = context, .failed_bytes = 0};
    atomic_init(&loop.status, TB_OK);
    if (parallel)
        tb_parallel_for(count, 1, unit_worker, &loop);
    else
        unit_worker(&loop, 0, count, 0);
    *failed_bytes = loop.failed_bytes;
    return (tb_status)atomic_load(&loop.status);
}

/* Grid cell `index`: its bounds, then the packed product (empty cells do nothing). */
static tb_status run_cell_unit(void *context, int64_t index, size_t *failed_bytes) {
    gemm_job *job = context;
    int64_t batch_index, m0, m1, n0, n1;
    cell_bounds(job, index, &batch_index, &m0, &m1, &n0, &n1);
    if (m0 >= m1 || n0 >= n1)
        return TB_OK;
    return run_cell(job, batch_index, m0, m1, n0, n1, failed_bytes);
}

/* Picks the grid (grid_m x grid_n cells per batch entry) minimising the slowest thread's work: whole
 * rounds of cells (ceil(cells / threads)) times the largest cell's padded multiply-adds plus the
 * packing it repeats. Ties go to fewer cells. */
static void choose_grid(gemm_job *job, int threads) {
    const tb_gemm_desc *d = job->d;
    int64_t mr = job->uk->mr, nr = job->uk->nr;
    double k = d->k > 0 ? (double)d->k : 1.0;
    /* Multiply-adds worth of time to pack one element: a copy for A stored column-major or B stored
     * row-major, an in-register transpose for the other unit-stride layout, a gather otherwise. */
    double a_cost = d->a_row_stride == 1 ? 6.0 : d->a_col_stride == 1 ? 16.0 : 48.0;
    double b_cost = d->b_packed ? 0.0 : d->b_col_stride == 1 ? 6.0 : d->b_row_stride == 1 ? 16.0 : 48.0;
    double best = -1.0;
    job->grid_m = job->grid_n = 1;
    if (threads <= 1)
        return;
    int64_t limit = 4 * (int64_t)threads;
    for (int64_t gm = 1; gm <= job->m_tiles && gm <= limit; gm++) {
        for (int64_t gn = 1; gn <= job->n_tiles && gn <= limit; gn++) {
            int64_t cells = d->batch * gm * gn;
            int64_t rounds = (cells + threads - 1) / threads;
            double rows = (double)((job->m_tiles + gm - 1) / gm * mr);
            double cols = (double)((job->n_tiles + gn - 1) / gn * nr);
            double cost = (double)rounds * (rows * cols * k + k * (a_cost * rows + b_cost * cols) + 20000.0);
            if (best < 0.0 || cost < best * 0.999) {
                best = cost;
                job->grid_m = gm;
                job->grid_n = gn;
            }
        }
    }
}

const tb_gemm_microkernel *tb_gemm_microkernel_for(tb_isa isa) {
#if defined(TB_HAVE_X86)
    if (isa == TB_ISA_AVX512)
        return &tb_gemm_microkernel_avx512;
    if (isa == TB_ISA_AVX2)
        return &tb_gemm_microkernel_avx2;
#endif
    return &tb_gemm_microkernel_ref;
}

tb_status tb_gemm_f32_isa(const tb_gemm_desc *desc, tb_isa isa) {
    TB_TRY(tb_gemm_validate(desc, "gemm_f32"));
    if ((unsigned)isa >= (unsigned)TB_ISA_COUNT || !tb_isa_supported(isa))
        return tb_error_set(TB_ERR_UNSUPPORTED, "gemm_f32: ISA %s is not supported by this CPU",
                            (unsigned)isa < (unsigned)TB_ISA_COUNT ? tb_isa_name(isa) : "(invalid)");
    const tb_gemm_desc *d = desc;
    if (d->m == 0 || d->n == 0 || d->batch == 0)
        return TB_OK;

    gemm_job job;
    memset(&job, 0, sizeof job);
    job.d = d;
    bool bf16_operands = d->a_bf16 != NULL;
    job.uk = tb_gemm_microkernel_for_precision(isa, bf16_operands ? TB_GEMM_PRECISION_BF16 : d->precision);
    if (bf16_operands && (!job.uk->pack_a_bf16 || !job.uk->pack_b_bf16))
        return tb_error_set(TB_ERR_UNSUPPORTED,
                            "gemm_f32: bf16 operands are not supported by the %s kernel at ISA %s (widen them to f32)",
                            job.uk->isa_name, tb_isa_name(isa));
    job.blocking = tb_gemm_blocking_for(job.uk);
    job.skip_product = d->k == 0 || d->alpha == 0.0f;
    if (d->b_packed && !job.skip_product) {
        const tb_gemm_packed_b *p = d->b_packed;
        if (p->uk != job.uk || p->k != d->k || p->n != d->n || p->blocking_kc != job.blocking.kc)
            return tb_error_set(TB_ERR_INVALID_ARGUMENT,
                                "gemm_f32: the packed B was made for k=%lld n=%lld (%s, kc %lld), not for this "
                                "k=%lld n=%lld product (%s, kc %lld)",
                                (long long)p->k, (long long)p->n, p->uk->isa_name, (long long)p->blocking_kc,
                                (long long)d->k, (long long)d->n, job.uk->isa_name, (long long)job.blocking.kc);
        if (d->batch > 1 && d->b_batch_stride != 0)
            return tb_error_set(TB_ERR_INVALID_ARGUMENT,
                                "gemm_f32: one packed B cannot serve batch entries with different B (b_batch_stride %lld)",
                                (long long)d->b_batch_stride);
    }
    job.m_tiles = (d->m + job.uk->mr - 1) / job.uk->mr;
    job.n_tiles = (d->n + job.uk->nr - 1) / job.uk->nr;

    double macs = (double)d->m * (double)d->n * (double)(d->k > 0 ? d->k : 1) * (double)d->batch;
    int threads = macs < (double)TB_GEMM_PARALLEL_MIN_MACS || tb_in_parallel_region() ? 1 : tb_num_threads();
    if (use_small_m(&job)) {
        int64_t items = d->batch * ((d->n + SMALL_M_PIECE - 1) / SMALL_M_PIECE);
        if (threads <= 1)
            small_m_worker(&job, 0, items, 0);
        else
            tb_parallel_for(items, 1, small_m_worker, &job);
        return TB_OK;
    }
    /* A tile kernel computes so fast that packing the same B once per cell row would cost as much as
     * the product: pack it once for all cells (in parallel) and share it. */
    tb_gemm_desc shared_desc;
    tb_gemm_packed_b *shared_b = NULL;
    if (job.uk->k_tile > 0 && threads > 1 && !d->b_packed && !job.skip_product && job.m_tiles > 1 &&
        (d->batch == 1 || d->b_batch_stride == 0)) {
        TB_TRY(pack_b_from(d->k, d->n, (operand){d->b, d->b_bf16}, d->b_row_stride, d->b_col_stride, isa,
                           bf16_operands ? TB_GEMM_PRECISION_BF16 : d->precision, &shared_b));
        shared_desc = *d;
        shared_desc.b_packed = shared_b;
        job.d = &shared_desc;
    }
    choose_grid(&job, threads);
    int64_t cells = d->batch * job.grid_m * job.grid_n;
    size_t failed_bytes;
    tb_status status = tb_run_units(run_cell_unit, &job, cells, threads > 1, &failed_bytes);
    tb_gemm_packed_b_free(shared_b);
    if (status != TB_OK)
        return tb_error_set(status, "gemm_f32: could not allocate %zu bytes of packing scratch", failed_bytes);
    return TB_OK;
}

tb_status tb_gemm_f32(const tb_gemm_desc *desc) { return tb_gemm_f32_isa(desc, tb_isa_active()); }
