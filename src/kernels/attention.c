/* Scaled dot-product attention (contract in gemm.h) as a flash-style tiled loop: for each block of MR
 * query rows, walk the keys in blocks of BK, compute S = scale Q K^T + mask with the GEMM micro-kernel,
 * update a running row max / row sum (online softmax, rescaling the accumulator when the max grows),
 * and accumulate P V with the micro-kernel again. Nothing of size Tq x Tk is ever stored.
 *
 * Work unit (one tb_parallel_for item): batch entry b, KV head g, and a chunk of query rows. The unit
 * packs K^T and V of its KV head once (O(Tk * D) scratch per thread, keys past the causal limit are
 * skipped) and reuses them for every query head of the group (GQA) and every query block of the chunk.
 * When a unit has at most TB_GEMM_SMALL_M_MAX query rows in all (decoding: one position, the group's
 * heads as rows), packing would cost more than it saves: the ISA's small-m kernel reads K and V in
 * place instead, and memory is O(block) per thread.
 *
 * Fully masked rows (every key masked out, or kv_len == 0) give 0, as torch 2.13's
 * scaled_dot_product_attention does on CPU (both its math and flash backends). When asked, each row's
 * log-sum-exp (running max + log running sum) is written for the backward. */
#include <math.h>
#include <string.h>

#include "kernels/gemm_internal.h"
#include "torchburn/thread_pool.h"

enum { KEY_BLOCK = 128 }; /* keys per online-softmax step (a multiple of every NR) */

static tb_status validate(const tb_attention_desc *d) {
    if (!d)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "attention: descriptor is NULL");
    if (d->batch < 0 || d->q_heads < 0 || d->kv_heads < 0 || d->q_len < 0 || d->kv_len < 0 || d->head_dim < 0 ||
        d->value_dim < 0)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT,
                            "attention: negative size (batch=%lld q_heads=%lld kv_heads=%lld q_len=%lld kv_len=%lld "
                            "head_dim=%lld value_dim=%lld)",
                            (long long)d->batch, (long long)d->q_heads, (long long)d->kv_heads, (long long)d->q_len,
                            (long long)d->kv_len, (long long)d->head_dim, (long long)d->value_dim);
    if (d->q_heads > 0 && (d->kv_heads == 0 || d->q_heads % d->kv_heads != 0))
        return tb_error_set(TB_ERR_SHAPE, "attention: q_heads %lld is not a multiple of kv_heads %lld",
                            (long long)d->q_heads, (long long)d->kv_heads);
    if (d->batch == 0 || d->q_heads == 0 || d->q_len == 0 || (d->value_dim == 0 && !d->lse))
        return TB_OK; /* nothing to write */
    if (d->value_dim > 0 && (!d->out || d->out_strides[3] != 1))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "attention: out is %s",
                            !d->out ? "NULL" : "not unit-stride in its last dim");
    if (d->head_dim > 0 && (!d->q || d->q_strides[3] != 1))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "attention: q is %s",
                            !d->q ? "NULL" : "not unit-stride in its last dim");
    if (d->kv_len > 0 && d->head_dim > 0 && (!d->k || d->k_strides[3] != 1))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "attention: k is %s",
                            !d->k ? "NULL" : "not unit-stride in its last dim");
    if (d->kv_len > 0 && (!d->v || d->v_strides[3] != 1))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "attention: v is %s",
                            !d->v ? "NULL" : "not unit-stride in its last dim");
    return TB_OK;
}

typedef struct attention_job {
    const tb_attention_desc *d;
    const tb_gemm_microkernel *uk;
    const tb_attention_kernels *ak;
    int64_t chunks;         /* query chunks per (batch, kv head) */
    int64_t chunk_rows;     /* query rows per chunk (a multiple of MR) */
    int64_t group;          /* query heads per KV head */
    int64_t dv_panels;      /* ceil(Dv / NR) */
} attention_job;

/* A set of query rows handled together (at most MR, or TB_GEMM_SMALL_M_MAX when direct): row r is
 * head h0 + r * dh at position i0 + r * di, so q and out rows have a uniform stride. */
typedef struct row_set {
    int64_t b, h0, i0, dh, di;
    int rows;
} row_set;

static inline size_t round_up(size_t x, size_t to) { return (x + to - 1) / to * to; }

/* Scratch layout (floats) for kv keys: K^T panels, V panels (both empty when direct), Q panel, S, P
 * panel, acc, max, sum. */
typedef struct scratch_layout {
    size_t kt, v, q, s, p, acc, row_max, row_sum, total;
    bool direct; /* few rows: K and V are read in place by the small-m kernel, nothing is packed */
} scratch_layout;

static scratch_layout layout_for(const attention_job *job, int64_t kv, bool direct) {
    const tb_attention_desc *d = job->d;
    size_t mr = (size_t)(job->uk->mr > TB_GEMM_SMALL_M_MAX ? job->uk->mr : TB_GEMM_SMALL_M_MAX);
    size_t nr = (size_t)job->uk->nr;
    size_t key_blocks = (size_t)((kv + KEY_BLOCK - 1) / KEY_BLOCK);
    scratch_layout l;
    l.direct = direct;
    size_t at = 0;
    l.kt = at;
    if (!direct)
        at += round_up(round_up((size_t)kv, nr) * (size_t)d->head_dim, 16);
    l.v = at;
    if (!direct)
        at += key_blocks * (size_t)job->dv_panels * KEY_BLOCK * nr;
    l.q = at;
    at += round_up(mr * (size_t)d->head_dim, 16);
    l.s = at;
    at += mr * KEY_BLOCK;
    l.p = at;
    at += mr * KEY_BLOCK;
    l.acc = at;
    at += mr * (size_t)job->dv_panels * nr;
    l.row_max = at;
    at += round_up(mr, 16);
    l.row_sum = at;
    at += round_up(mr, 16);
    l.total = at;
    return l;
}

void tb_attention_apply_masks(const tb_attention_kernels *ak, const float *float_mask,
                              const int64_t *float_mask_strides, const uint8_t *bool_mask,
                              const int64_t *bool_mask_strides, bool causal, int64_t b, int64_t h, int64_t i,
                              int64_t j0, int64_t kb, float *srow) {
    if (float_mask) {
        const float *mrow = float_mask + b * float_mask_strides[0] + h * float_mask_strides[1] +
                            i * float_mask_strides[2] + j0 * float_mask_strides[3];
        int64_t step = float_mask_strides[3];
        if (step == 1) {
            ak->add_mask(srow, mrow, kb);
        } else {
            for (int64_t j = 0; j < kb; j++)
                srow[j] += mrow[j * step];
        }
    }
    if (bool_mask) {
        const uint8_t *mrow = bool_mask + b * bool_mask_strides[0] + h * bool_mask_strides[1] +
                              i * bool_mask_strides[2] + j0 * bool_mask_strides[3];
        int64_t step = bool_mask_strides[3];
        if (step == 1) {
            ak->bool_mask(srow, mrow, kb);
        } else {
            for (int64_t j = 0; j < kb; j++)
                if (!mrow[j * step])
                    srow[j] = -INFINITY;
        }
    }
    if (causal)
        for (int64_t j = i + 1 - j0 > 0 ? i + 1 - j0 : 0; j < kb; j++)
            srow[j] = -INFINITY;
}

/* One row set against `kv` keys (packed in `base` unless l->direct), written to out. */
static void query_rows(const attention_job *job, float *base, const scratch_layout *l, const row_set *set,
                       int64_t kv) {
    const tb_attention_desc *d = job->d;
    const tb_gemm_microkernel *uk = job->uk;
    const tb_attention_kernels *ak = job->ak;
    const int64_t nr = uk->nr, D = d->head_dim, Dv = d->value_dim;
    const int64_t ld_acc = job->dv_panels * nr;
    const int rows = set->rows;
    const int64_t g = set->h0 / job->group;
    float *q_panel = base + l->q, *s = base + l->s, *p_panel = base + l->p, *acc = base + l->acc;
    float *row_max = base + l->row_max, *row_sum = base + l->row_sum;

    int64_t q_row_stride = set->dh * d->q_strides[1] + set->di * d->q_strides[2];
    const float *q = d->q ? d->q + set->b * d->q_strides[0] + set->h0 * d->q_strides[1] + set->i0 * d->q_strides[2]
                          : NULL;
    const float *k = d->k ? d->k + set->b * d->k_strides[0] + g * d->k_strides[1] : NULL;
    const float *v = d->v ? d->v + set->b * d->v_strides[0] + g * d->v_strides[1] : NULL;
    if (D > 0 && !l->direct)
        uk->pack_a(q, q_row_stride, 1, rows, D, q_panel);
    memset(acc, 0, sizeof(float) * (size_t)(rows * ld_acc));
    for (int r = 0; r < rows; r++) {
        row_max[r] = -INFINITY;
        row_sum[r] = 0.0f;
    }
    /* keys any row of the set may see */
    int64_t last_position = set->i0 + (rows - 1) * set->di;
    int64_t kv_end = d->causal && last_position + 1 < kv ? last_position + 1 : kv;
    for (int64_t j0 = 0; j0 < kv_end; j0 += KEY_BLOCK) {
        int64_t kb = kv_end - j0 < KEY_BLOCK ? kv_end - j0 : KEY_BLOCK;
        /* S = scale * Q K^T  (rows x kb, row stride KEY_BLOCK) */
        if (l->direct) {
            const float *k_rows = D > 0 ? k + j0 * d->k_strides[2] : NULL; /* k may be NULL when D == 0 */
            uk->small_m(rows, kb, D, q, q_row_stride, 1, k_rows, d->k_strides[2], true, s, KEY_BLOCK, d->scale, 0.0f);
        } else {
            for (int64_t jp = 0; jp < kb; jp += nr) {
                int cols = (int)(kb - jp < nr ? kb - jp : nr);
                uk->kernel(D, q_panel, base + l->kt + (j0 + jp) * D, s + jp, KEY_BLOCK, rows, cols, d->scale, 0.0f);
            }
        }
        for (int r = 0; r < rows; r++) {
            float *srow = s + r * KEY_BLOCK;
            tb_attention_apply_masks(ak, d->float_mask, d->float_mask_strides, d->bool_mask, d->bool_mask_strides,
                                     d->causal, set->b, set->h0 + r * set->dh, set->i0 + r * set->di, j0, kb, srow);
            /* online softmax: new max, rescale what was accumulated, P = exp(S - max) */
            float block_max = ak->row_max(srow, kb);
            float new_max = block_max > row_max[r] ? block_max : row_max[r];
            if (block_max != block_max)
                new_max = block_max; /* NaN poisons the row, as in torch */
            if (new_max == -INFINITY) { /* everything so far is masked: P row is 0 */
                memset(srow, 0, sizeof(float) * (size_t)kb);
                continue;
            }
            if (new_max != row_max[r] && row_sum[r] != 0.0f) {
                float factor = expf(row_max[r] - new_max);
                row_sum[r] *= factor;
                ak->scale(acc + r * ld_acc, Dv, factor);
            }
            row_sum[r] += ak->exp_sum(srow, kb, new_max);
            row_max[r] = new_max;
        }
        /* acc += P V */
        if (Dv == 0) {
            continue;
        } else if (l->direct) {
            uk->small_m(rows, Dv, kb, s, KEY_BLOCK, 1, v + j0 * d->v_strides[2], d->v_strides[2], false, acc, ld_acc,
                        1.0f, 1.0f);
        } else {
            uk->pack_a(s, KEY_BLOCK, 1, rows, kb, p_panel);
            const float *v_block = base + l->v + (j0 / KEY_BLOCK) * job->dv_panels * KEY_BLOCK * nr;
            for (int64_t dp = 0; dp < job->dv_panels; dp++) {
                int cols = (int)(Dv - dp * nr < nr ? Dv - dp * nr : nr);
                uk->kernel(kb, p_panel, v_block + dp * KEY_BLOCK * nr, acc + dp * nr, ld_acc, rows, cols, 1.0f, 1.0f);
            }
        }
    }
    if (d->lse) {
        /* log-sum-exp = running max + log(running sum); 0 for a fully masked row, as torch writes */
        int64_t lse_row_stride = set->dh * d->lse_strides[1] + set->di * d->lse_strides[2];
        float *lse = d->lse + set->b * d->lse_strides[0] + set->h0 * d->lse_strides[1] + set->i0 * d->lse_strides[2];
        for (int r = 0; r < rows; r++)
            lse[r * lse_row_stride] = row_sum[r] == 0.0f ? 0.0f : row_max[r] + logf(row_sum[r]);
    }
    if (Dv == 0)
        return; /* only the log-sum-exp was wanted */
    int64_t out_row_stride = set->dh * d->out_strides[1] + set->di * d->out_strides[2];
    float *out = d->out + set->b * d->out_strides[0] + set->h0 * d->out_strides[1] + set->i0 * d->out_strides[2];
    for (int r = 0; r < rows; r++) {
        float *orow = out + r * out_row_stride;
        if (row_sum[r] == 0.0f) { /* fully masked row */
            memset(orow, 0, sizeof(float) * (size_t)Dv);
            continue;
        }
        memcpy(orow, acc + r * ld_acc, sizeof(float) * (size_t)Dv);
        ak->scale(orow, Dv, 1.0f / row_sum[r]);
    }
}

static tb_status run_unit(void *context, int64_t unit, size_t *failed_bytes) {
    const attention_job *job = context;
    const tb_attention_desc *d = job->d;
    const tb_gemm_microkernel *uk = job->uk;
    const int64_t nr = uk->nr, D = d->head_dim, Dv = d->value_dim;
    /* last chunks first: with a causal mask they see the most keys, so the big units are claimed first */
    int64_t chunk = job->chunks - 1 - unit % job->chunks;
    int64_t g = (unit / job->chunks) % d->kv_heads, b = unit / job->chunks / d->kv_heads;
    int64_t q0 = chunk * job->chunk_rows;
    int64_t q1 = q0 + job->chunk_rows < d->q_len ? q0 + job->chunk_rows : d->q_len;
    if (q0 >= q1)
        return TB_OK;
    int64_t kv = d->causal && q1 < d->kv_len ? q1 : d->kv_len; /* keys any row of the chunk may see */
    /* Few query rows per KV head (decoding): read K/V in place rather than packing them for reuse. */
    bool direct = uk->small_m && job->group * (q1 - q0) <= TB_GEMM_SMALL_M_MAX;

    scratch_layout l = layout_for(job, kv, direct);
    float *base = NULL;
    if (tb_kernel_scratch(TB_SCRATCH_ATTENTION, l.total * sizeof(float), &base) != TB_OK) {
        *failed_bytes = l.total * sizeof(float);
        return TB_ERR_OUT_OF_MEMORY;
    }
    if (!direct) {
        /* K^T as B panels (kc = D) and V as B panels (kc = keys of a block), once for the whole group */
        const float *k = d->k ? d->k + b * d->k_strides[0] + g * d->k_strides[1] : NULL;
        const float *v = d->v ? d->v + b * d->v_strides[0] + g * d->v_strides[1] : NULL;
        for (int64_t j = 0; j < kv && D > 0; j += nr) {
            int cols = (int)(kv - j < nr ? kv - j : nr);
            uk->pack_b(k + j * d->k_strides[2], 1, d->k_strides[2], cols, D, base + l.kt + j * D);
        }
        for (int64_t j0 = 0; j0 < kv; j0 += KEY_BLOCK) {
            int64_t kb = kv - j0 < KEY_BLOCK ? kv - j0 : KEY_BLOCK;
            float *v_block = base + l.v + (j0 / KEY_BLOCK) * job->dv_panels * KEY_BLOCK * nr;
            for (int64_t dp = 0; dp < job->dv_panels; dp++) {
                int cols = (int)(Dv - dp * nr < nr ? Dv - dp * nr : nr);
                uk->pack_b(v + j0 * d->v_strides[2] + dp * nr, d->v_strides[2], 1, cols, kb,
                           v_block + dp * KEY_BLOCK * nr);
            }
        }
    }
    int64_t set_rows = direct ? TB_GEMM_SMALL_M_MAX : uk->mr;
    row_set set = {.b = b};
    if (q1 - q0 == 1) { /* one position: the group's heads form the rows (GQA decoding) */
        set.i0 = q0;
        set.dh = 1;
        set.di = 0;
        for (int64_t h = g * job->group; h < (g + 1) * job->group; h += set_rows) {
            set.h0 = h;
            set.rows = (int)((g + 1) * job->group - h < set_rows ? (g + 1) * job->group - h : set_rows);
            query_rows(job, base, &l, &set, kv);
        }
        return TB_OK;
    }
    set.dh = 0;
    set.di = 1;
    for (int64_t h = g * job->group; h < (g + 1) * job->group; h++)
        for (int64_t i = q0; i < q1; i += set_rows) {
            set.h0 = h;
            set.i0 = i;
            set.rows = (int)(q1 - i < set_rows ? q1 - i : set_rows);
            query_rows(job, base, &l, &set, kv);
        }
    return TB_OK;
}

const tb_attention_kernels *tb_attention_kernels_for(tb_isa isa) {
#if defined(TB_HAVE_X86)
    if (isa == TB_ISA_AVX512)
        return &tb_attention_kernels_avx512;
    if (isa == TB_ISA_AVX2)
        return &tb_attention_kernels_avx2;
#endif
    return &tb_attention_kernels_ref;
}

tb_status tb_attention_f32_isa(const tb_attention_desc *desc, tb_isa isa) {
    TB_TRY(validate(desc));
    if ((unsigned)isa >= (unsigned)TB_ISA_COUNT || !tb_isa_supported(isa))
        return tb_error_set(TB_ERR_UNSUPPORTED, "attention: ISA %s is not supported by this CPU",
                            (unsigned)isa < (unsigned)TB_ISA_COUNT ? tb_isa_name(isa) : "(invalid)");
    const tb_attention_desc *d = desc;
    if (d->batch == 0 || d->q_heads == 0 || d->q_len == 0 || (d->value_dim == 0 && !d->lse))
        return TB_OK;

    attention_job job;
    memset(&job, 0, sizeof job);
    job.d = d;
    job.uk = tb_gemm_microkernel_for(isa);
    job.ak = tb_attention_kernels_for(isa);
    job.group = d->q_heads / d->kv_heads;
    job.dv_panels = (d->value_dim + job.uk->nr - 1) / job.uk->nr;

    /* Work: ~2 (D + Dv) multiply-adds per (query, key) pair (halved when causal). */
    double work = (double)d->batch * (double)d->q_heads * (double)d->q_len * (double)(d->kv_len + 1) *
                  (double)(d->head_dim + d->value_dim + 8) * (d->causal ? 0.5 : 1.0);
    int threads = work < 262144.0 || tb_in_parallel_region() ? 1 : tb_num_threads();
    /* Enough query chunks that every thread gets several units (each chunk re-packs its K/V). */
    int64_t units_per_chunk = d->batch * d->kv_heads;
    int64_t q_blocks = (d->q_len + job.uk->mr - 1) / job.uk->mr;
    int64_t chunks = threads > 1 ? (4 * threads + units_per_chunk - 1) / units_per_chunk : 1;
    if (chunks > q_blocks)
        chunks = q_blocks;
    job.chunk_rows = (q_blocks + chunks - 1) / chunks * job.uk->mr;
    job.chunks = (d->q_len + job.chunk_rows - 1) / job.chunk_rows;

    int64_t units = units_per_chunk * job.chunks;
    size_t failed_bytes;
    tb_status status = tb_run_units(run_unit, &job, units, threads > 1, &failed_bytes);
    if (status != TB_OK)
        return tb_error_set(status, "attention: could not allocate %zu bytes of scratch", failed_bytes);
    return TB_OK;
}

tb_status tb_attention_f32(const tb_attention_desc *desc) { return tb_attention_f32_isa(desc, tb_isa_active()); }
