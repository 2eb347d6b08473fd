/* Strided, broadcasting, dtype-converting copies between tensors (tb_tensor_copy and friends). */
#include <stdatomic.h>
#include <string.h>

#include "torchburn/alloc.h"
#include "torchburn/tensor.h"
#include "torchburn/thread_pool.h"

static atomic_uint_fast64_t copy_count;

uint64_t tb_tensor_copy_count(void) { return atomic_load(&copy_count); }
void tb_tensor_note_copy(void) { atomic_fetch_add(&copy_count, 1); }

/* A copy problem with dims merged where both operands allow it; byte strides. */
typedef struct copy_plan {
    int ndim;
    int64_t shape[TB_MAX_DIMS];
    int64_t dst_strides[TB_MAX_DIMS]; /* bytes */
    int64_t src_strides[TB_MAX_DIMS]; /* bytes */
    char *dst;
    const char *src;
    tb_dtype dst_dtype, src_dtype;
    int64_t rows;  /* product of all dims but the last */
    int64_t piece; /* elements of the last dim per work unit (long rows are split so threads share them) */
    int64_t pieces_per_row;
} copy_plan;

static bool is_integral(tb_dtype dtype) { return !tb_dtype_table[dtype].is_floating; }

static double load_as_double(const char *p, tb_dtype dtype) {
    switch (dtype) {
    case TB_F32: { float v; memcpy(&v, p, 4); return v; }
    case TB_F64: { double v; memcpy(&v, p, 8); return v; }
    case TB_F16: { uint16_t v; memcpy(&v, p, 2); return tb_f16_to_f32(v); }
    case TB_BF16: { uint16_t v; memcpy(&v, p, 2); return tb_bf16_to_f32(v); }
    case TB_I8: return *(const int8_t *)p;
    case TB_U8: return *(const uint8_t *)p;
    case TB_I16: { int16_t v; memcpy(&v, p, 2); return v; }
    case TB_I32: { int32_t v; memcpy(&v, p, 4); return v; }
    case TB_I64: { int64_t v; memcpy(&v, p, 8); return (double)v; }
    case TB_BOOL: return *(const uint8_t *)p != 0;
    default: return 0;
    }
}

static int64_t load_as_int(const char *p, tb_dtype dtype) {
    switch (dtype) {
    case TB_I8: return *(const int8_t *)p;
    case TB_U8: return *(const uint8_t *)p;
    case TB_I16: { int16_t v; memcpy(&v, p, 2); return v; }
    case TB_I32: { int32_t v; memcpy(&v, p, 4); return v; }
    case TB_I64: { int64_t v; memcpy(&v, p, 8); return v; }
    case TB_BOOL: return *(const uint8_t *)p != 0;
    default: return 0;
    }
}

/* Integer targets wrap modulo 2^bits from an int64 (as torch's integer casts do). */
static void store_int(char *p, tb_dtype dtype, int64_t v) {
    switch (dtype) {
    case TB_I8: *(int8_t *)p = (int8_t)v; break;
    case TB_U8: *(uint8_t *)p = (uint8_t)v; break;
    case TB_I16: { int16_t x = (int16_t)v; memcpy(p, &x, 2); break; }
    case TB_I32: { int32_t x = (int32_t)v; memcpy(p, &x, 4); break; }
    case TB_I64: memcpy(p, &v, 8); break;
    case TB_BOOL: *(uint8_t *)p = v != 0; break;
    default: break;
    }
}

static void store_double(char *p, tb_dtype dtype, double v) {
    switch (dtype) {
    case TB_F32: { float x = (float)v; memcpy(p, &x, 4); break; }
    case TB_F64: memcpy(p, &v, 8); break;
    case TB_F16: { uint16_t x = tb_f32_to_f16((float)v); memcpy(p, &x, 2); break; }
    case TB_BF16: { uint16_t x = tb_f32_to_bf16((float)v); memcpy(p, &x, 2); break; }
    case TB_BOOL: *(uint8_t *)p = v != 0; break;
    default:
        store_int(p, dtype, tb_float_to_int_like_torch(v, dtype));
        break;
    }
}

/* Writes n copies of the size-byte value at `value` to dst (size divides 64): whole 64-byte blocks of
 * the repeated value, which compilers turn into vector stores, and the tail. */
static void fill_repeated(char *dst, const char *value, size_t size, int64_t n) {
    char block[64];
    for (size_t i = 0; i < sizeof block; i += size)
        memcpy(block + i, value, size);
    size_t total = (size_t)n * size, done = 0;
    for (; done + sizeof block <= total; done += sizeof block)
        memcpy(dst + done, block, sizeof block);
    memcpy(dst + done, block, total - done);
}

/* Copies n elements of the last dim from src to dst. */
static void copy_row(const copy_plan *plan, char *dst, const char *src, int64_t n) {
    int last = plan->ndim - 1;
    int64_t ds = plan->dst_strides[last], ss = plan->src_strides[last];
    size_t dsize = tb_dtype_size(plan->dst_dtype), ssize = tb_dtype_size(plan->src_dtype);
    if (plan->dst_dtype == plan->src_dtype) {
        if (ds == (int64_t)dsize && ss == (int64_t)ssize) {
            memcpy(dst, src, (size_t)n * dsize);
            return;
        }
        if (ds == (int64_t)dsize && ss == 0 && 64 % dsize == 0) { /* a broadcast value: fill */
            fill_repeated(dst, src, dsize, n);
            return;
        }
        switch (dsize) {
        case 1: for (int64_t i = 0; i < n; i++) dst[i * ds] = src[i * ss]; return;
        case 2: for (int64_t i = 0; i < n; i++) memcpy(dst + i * ds, src + i * ss, 2); return;
        case 4: for (int64_t i = 0; i < n; i++) memcpy(dst + i * ds, src + i * ss, 4); return;
        default: for (int64_t i = 0; i < n; i++) memcpy(dst + i * ds, src + i * ss, dsize); return;
        }
    }
    if (ds == (int64_t)dsize && ss == (int64_t)ssize && plan->dst_dtype == TB_F32 && plan->src_dtype != TB_F64 &&
        plan->src_dtype != TB_I64 && plan->src_dtype != TB_I32) {
        tb_dtype_table[plan->src_dtype].to_f32(src, (float *)dst, n); /* exact for these sources */
        return;
    }
    if (ds == (int64_t)dsize && ss == (int64_t)ssize && plan->src_dtype == TB_F32 &&
        tb_dtype_table[plan->dst_dtype].is_floating) {
        tb_dtype_table[plan->dst_dtype].from_f32((const float *)src, dst, n);
        return;
    }
    if (is_integral(plan->src_dtype) && is_integral(plan->dst_dtype)) {
        for (int64_t i = 0; i < n; i++)
            store_int(dst + i * ds, plan->dst_dtype, load_as_int(src + i * ss, plan->src_dtype));
        return;
    }
    for (int64_t i = 0; i < n; i++)
        store_double(dst + i * ds, plan->dst_dtype, load_as_double(src + i * ss, plan->src_dtype));
}

/* Work unit u: piece u % pieces_per_row of row u / pieces_per_row. */
static void copy_rows(void *context, int64_t begin, int64_t end, int thread_index) {
    const copy_plan *plan = context;
    (void)thread_index;
    const int last = plan->ndim - 1;
    for (int64_t unit = begin; unit < end; unit++) {
        int64_t row = unit / plan->pieces_per_row, start = unit % plan->pieces_per_row * plan->piece;
        int64_t count = plan->shape[last] - start < plan->piece ? plan->shape[last] - start : plan->piece;
        int64_t rest = row, dst_offset = start * plan->dst_strides[last], src_offset = start * plan->src_strides[last];
        for (int d = plan->ndim - 2; d >= 0; d--) {
            int64_t index = rest % plan->shape[d];
            rest /= plan->shape[d];
            dst_offset += index * plan->dst_strides[d];
            src_offset += index * plan->src_strides[d];
        }
        copy_row(plan, plan->dst + dst_offset, plan->src + src_offset, count);
    }
}

/* Contract in torchburn/tensor.h. */
int tb_dims_merge(int ndim, int64_t *shape, int64_t *strides_a, int64_t *strides_b) {
    int out = 0;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] == 1)
            continue;
        if (out > 0 && strides_a[out - 1] == strides_a[d] * shape[d] && strides_b[out - 1] == strides_b[d] * shape[d]) {
            shape[out - 1] *= shape[d];
            strides_a[out - 1] = strides_a[d];
            strides_b[out - 1] = strides_b[d];
            continue;
        }
        shape[out] = shape[d];
        strides_a[out] = strides_a[d];
        strides_b[out] = strides_b[d];
        out++;
    }
    return out;
}

/* The copy's dims merged where both operands allow it; one dim of size 1 when none is left. */
static void simplify(copy_plan *plan) {
    int out = tb_dims_merge(plan->ndim, plan->shape, plan->dst_strides, plan->src_strides);
    if (out == 0) {
        plan->shape[0] = 1;
        plan->dst_strides[0] = (int64_t)tb_dtype_size(plan->dst_dtype);
        plan->src_strides[0] = (int64_t)tb_dtype_size(plan->src_dtype);
        out = 1;
    }
    plan->ndim = out;
}

tb_status tb_tensor_copy(tb_tensor *dst, const tb_tensor *src) {
    if (dst->storage->read_only)
        return tb_error_set(TB_ERR_READ_ONLY, "copy: the destination tensor is read-only");
    tb_tensor expanded;
    TB_TRY(tb_tensor_expand(src, dst->ndim, dst->shape, &expanded));
    int64_t numel = tb_tensor_numel(dst);
    if (numel == 0) {
        tb_tensor_release(&expanded);
        return TB_OK;
    }
    copy_plan plan;
    plan.ndim = dst->ndim;
    plan.dst_dtype = dst->dtype;
    plan.src_dtype = src->dtype;
    plan.dst = tb_tensor_data(dst);
    plan.src = tb_tensor_data(&expanded);
    for (int d = 0; d < dst->ndim; d++) {
        plan.shape[d] = dst->shape[d];
        plan.dst_strides[d] = dst->strides[d] * (int64_t)tb_dtype_size(dst->dtype);
        plan.src_strides[d] = expanded.strides[d] * (int64_t)tb_dtype_size(src->dtype);
    }
    simplify(&plan);
    plan.rows = numel / plan.shape[plan.ndim - 1];
    /* work units of about 64 KiB of output: a long row is cut into pieces, short rows are grouped */
    enum { UNIT_BYTES = 1 << 16 };
    int64_t row_len = plan.shape[plan.ndim - 1], element = (int64_t)tb_dtype_size(dst->dtype);
    int64_t row_bytes = row_len * element;
    plan.piece = row_bytes > 2 * UNIT_BYTES ? UNIT_BYTES / element : row_len;
    plan.pieces_per_row = (row_len + plan.piece - 1) / plan.piece;
    int64_t grain = row_bytes >= UNIT_BYTES ? 1 : UNIT_BYTES / (row_bytes > 0 ? row_bytes : 1);
    tb_parallel_for(plan.rows * plan.pieces_per_row, grain, copy_rows, &plan);
    tb_tensor_release(&expanded);
    return TB_OK;
}

tb_status tb_tensor_contiguous(const tb_tensor *src, tb_dtype dtype, tb_tensor *out) {
    if (src->dtype == dtype && tb_tensor_is_contiguous(src)) {
        tb_tensor_retain(src, out);
        return TB_OK;
    }
    TB_TRY(tb_tensor_empty(dtype, src->ndim, src->shape, TB_ALLOC_DEFAULT, out));
    tb_status status = tb_tensor_copy(out, src);
    if (status != TB_OK) {
        tb_tensor_release(out);
        return status;
    }
    tb_tensor_note_copy();
    return TB_OK;
}
