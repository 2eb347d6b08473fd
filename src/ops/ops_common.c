/* Shared helpers of the ops layer (see ops_internal.h). */
#include <string.h>

#include "ops/ops_internal.h"

tb_status tb_ops_require_float(tb_dtype dtype, const char *what) {
    if (dtype == TB_F32 || dtype == TB_F16 || dtype == TB_BF16)
        return TB_OK;
    if (dtype == TB_F64)
        return tb_error_set(TB_ERR_DTYPE, "%s: float64 is not supported (torchburn computes in float32 and never "
                            "narrows float64 silently); convert explicitly", what);
    return tb_error_set(TB_ERR_DTYPE, "%s: expected a floating tensor (float32, float16 or bfloat16), got %s", what,
                        tb_dtype_name(dtype));
}

tb_status tb_ops_as_f32(const tb_tensor *x, tb_tensor *out) { return tb_tensor_contiguous(x, TB_F32, out); }

tb_status tb_ops_finish_dtype(tb_tensor *f32_result, tb_dtype dtype, tb_tensor *out) {
    if (f32_result->dtype == dtype) {
        *out = *f32_result;
        memset(f32_result, 0, sizeof *f32_result);
        return TB_OK;
    }
    tb_status status = tb_tensor_empty(dtype, f32_result->ndim, f32_result->shape, TB_ALLOC_DEFAULT, out);
    if (status == TB_OK)
        status = tb_tensor_copy(out, f32_result);
    if (status != TB_OK)
        tb_tensor_release(out);
    tb_tensor_release(f32_result);
    return status;
}

tb_dtype tb_ops_promote(tb_dtype a, tb_dtype b) { return a == b ? a : TB_F32; }

void tb_ops_expanded_strides(const tb_tensor *x, int ndim, const int64_t *shape, int64_t *strides) {
    int lead = ndim - x->ndim;
    for (int d = 0; d < ndim; d++) {
        int source = d - lead;
        strides[d] = (source < 0 || x->shape[source] == 1) ? 0 : x->strides[source];
    }
}

void tb_broadcast_iter_init(tb_broadcast_iter *it, int ndim, const int64_t *shape, int operands,
                            const int64_t strides[][TB_MAX_DIMS]) {
    it->operands = operands;
    int out = 0;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] == 1)
            continue;
        bool merge = out > 0;
        for (int o = 0; o < operands && merge; o++)
            merge = it->strides[o][out - 1] == strides[o][d] * shape[d];
        if (merge) {
            it->shape[out - 1] *= shape[d];
            for (int o = 0; o < operands; o++)
                it->strides[o][out - 1] = strides[o][d];
            continue;
        }
        it->shape[out] = shape[d];
        for (int o = 0; o < operands; o++)
            it->strides[o][out] = strides[o][d];
        out++;
    }
    if (out == 0) {
        it->shape[0] = 1;
        for (int o = 0; o < operands; o++)
            it->strides[o][0] = 1;
        out = 1;
    }
    it->ndim = out;
    it->row_len = it->shape[out - 1];
    it->rows = 1;
    for (int d = 0; d < out - 1; d++)
        it->rows *= it->shape[d];
}

void tb_broadcast_iter_offsets(const tb_broadcast_iter *it, int64_t row, int64_t *offsets) {
    for (int o = 0; o < it->operands; o++)
        offsets[o] = 0;
    for (int d = it->ndim - 2; d >= 0; d--) {
        int64_t index = row % it->shape[d];
        row /= it->shape[d];
        for (int o = 0; o < it->operands; o++)
            offsets[o] += index * it->strides[o][d];
    }
}

enum { TB_SCRATCH_SLOTS = 4 };
static _Thread_local float *scratch_buffers[TB_SCRATCH_SLOTS];
static _Thread_local int64_t scratch_sizes[TB_SCRATCH_SLOTS];

float *tb_ops_scratch(int slot, int64_t n) {
    if (slot < 0 || slot >= TB_SCRATCH_SLOTS)
        return NULL;
    if (scratch_sizes[slot] < n) {
        void *fresh = NULL;
        if (tb_alloc((size_t)n * sizeof(float), TB_ALLOC_DEFAULT, &fresh) != TB_OK)
            return NULL;
        tb_free(scratch_buffers[slot]);
        scratch_buffers[slot] = fresh;
        scratch_sizes[slot] = n;
    }
    return scratch_buffers[slot];
}

tb_status tb_ops_stage_normalized_param(const tb_tensor *param, const tb_tensor *x, int normalized_ndim,
                                        const char *what, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    if (!param)
        return TB_OK;
    TB_TRY(tb_ops_require_float(param->dtype, what));
    bool ok = param->ndim == normalized_ndim;
    for (int i = 0; ok && i < normalized_ndim; i++)
        ok = param->shape[i] == x->shape[x->ndim - normalized_ndim + i];
    if (!ok) {
        char a[128], b[128];
        return tb_error_set(TB_ERR_SHAPE, "%s has shape %s but the normalized shape is %s", what,
                            tb_shape_string(param->ndim, param->shape, a, sizeof a),
                            tb_shape_string(normalized_ndim, x->shape + x->ndim - normalized_ndim, b, sizeof b));
    }
    return tb_ops_as_f32(param, out);
}
