/* Matrix ops over tensors: matmul (torch.matmul semantics), linear with a fused epilogue, and
 * scaled-dot-product attention, all on the GEMM/attention kernels. */
#include <math.h>
#include <string.h>

#include "ops/ops_internal.h"

/* Stages a float operand as f32, keeping its strides when it already is f32 (or bf16 where the GEMM
 * reads bf16 operands in place: keep_bf16). */
static tb_status stage(const tb_tensor *x, const char *what, bool keep_bf16, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    TB_TRY(tb_ops_require_float(x->dtype, what));
    if (x->dtype == TB_F32 || (keep_bf16 && x->dtype == TB_BF16)) {
        tb_tensor_retain(x, out);
        return TB_OK;
    }
    return tb_ops_as_f32(x, out);
}

/* Both operands bf16 and a bf16 kernel that packs bf16 in place: no widened copies are made. */
static bool bf16_in_place(const tb_tensor *a, const tb_tensor *b) {
    return a->dtype == TB_BF16 && b->dtype == TB_BF16 && tb_gemm_bf16_operands_supported(tb_isa_active());
}

/* The operands of `desc` at element offsets of their tensors' data (bf16 bits or f32). */
static void set_a(tb_gemm_desc *desc, const tb_tensor *a, int64_t offset) {
    if (a->dtype == TB_BF16)
        desc->a_bf16 = (const uint16_t *)tb_tensor_data(a) + offset;
    else
        desc->a = (const float *)tb_tensor_data(a) + offset;
}

static void set_b(tb_gemm_desc *desc, const tb_tensor *b, int64_t offset) {
    if (b->dtype == TB_BF16)
        desc->b_bf16 = (const uint16_t *)tb_tensor_data(b) + offset;
    else
        desc->b = (const float *)tb_tensor_data(b) + offset;
}

/* ---- matmul ---- */

/* precision: TB_GEMM_PRECISION_BF16 when both operands were bf16 (their f32 widening is exact, so the
 * bf16 kernel computes the same products), else DEFAULT. */
static tb_status matmul_f32(const tb_tensor *a, const tb_tensor *b, tb_gemm_precision precision, tb_tensor *result) {
    /* a [..., M, K], b [..., K, N], both >= 2-D here */
    int64_t m = a->shape[a->ndim - 2], k = a->shape[a->ndim - 1];
    int64_t kb = b->shape[b->ndim - 2], n = b->shape[b->ndim - 1];
    char sa[128], sb[128];
    if (k != kb)
        return tb_error_set(TB_ERR_SHAPE, "matmul: shapes %s and %s cannot be multiplied (%lld != %lld)",
                            tb_shape_string(a->ndim, a->shape, sa, sizeof sa),
                            tb_shape_string(b->ndim, b->shape, sb, sizeof sb), (long long)k, (long long)kb);
    int batch_ndim = 0;
    int64_t batch_shape[TB_MAX_DIMS];
    tb_status status = tb_broadcast_shapes(a->ndim - 2, a->shape, b->ndim - 2, b->shape, &batch_ndim, batch_shape);
    if (status != TB_OK)
        return tb_error_prefix(status, "matmul: batch dims");
    int64_t out_shape[TB_MAX_DIMS];
    memcpy(out_shape, batch_shape, (size_t)batch_ndim * sizeof(int64_t));
    out_shape[batch_ndim] = m;
    out_shape[batch_ndim + 1] = n;
    TB_TRY(tb_tensor_empty(TB_F32, batch_ndim + 2, out_shape, TB_ALLOC_DEFAULT, result));
    int64_t batch_count = 1;
    for (int d = 0; d < batch_ndim; d++)
        batch_count *= batch_shape[d];
    if (batch_count == 0 || m == 0 || n == 0)
        return TB_OK;

    tb_gemm_desc desc = {0};
    desc.m = m;
    desc.n = n;
    desc.k = k;
    desc.precision = precision;
    desc.alpha = 1.0f;
    desc.beta = 0.0f;
    desc.c_row_stride = n;
    desc.batch = 1;
    set_b(&desc, b, 0);
    desc.b_row_stride = b->strides[b->ndim - 2];
    desc.b_col_stride = b->strides[b->ndim - 1];

    /* b has no batch dims: fold a's batch into M when a allows a [B*M, K] view */
    if (b->ndim == 2) {
        tb_tensor folded;
        int64_t shape2[2] = {-1, k};
        if (tb_tensor_view(a, 2, shape2, &folded) == TB_OK) {
            desc.m = folded.shape[0];
            set_a(&desc, &folded, 0);
            desc.a_row_stride = folded.strides[0];
            desc.a_col_stride = folded.strides[1];
            desc.c = tb_tensor_data(result);
            status = tb_gemm_f32(&desc);
            tb_tensor_release(&folded);
            return status;
        }
        tb_error_clear();
    }
    int64_t a_strides[TB_MAX_DIMS], b_strides[TB_MAX_DIMS];
    tb_tensor a_batch = *a, b_batch = *b;
    a_batch.ndim = a->ndim - 2;
    b_batch.ndim = b->ndim - 2;
    tb_ops_expanded_strides(&a_batch, batch_ndim, batch_shape, a_strides);
    tb_ops_expanded_strides(&b_batch, batch_ndim, batch_shape, b_strides);
    int64_t strides[3][TB_MAX_DIMS];
    memcpy(strides[0], a_strides, sizeof a_strides);
    memcpy(strides[1], b_strides, sizeof b_strides);
    for (int d = 0; d < batch_ndim; d++)
        strides[2][d] = result->strides[d];
    tb_broadcast_iter it;
    tb_broadcast_iter_init(&it, batch_ndim, batch_shape, 3, (const int64_t(*)[TB_MAX_DIMS])strides);
    /* it.rows x it.row_len batches; the inner run has constant strides -> one batched call per row */
    desc.a_row_stride = a->strides[a->ndim - 2];
    desc.a_col_stride = a->strides[a->ndim - 1];
    desc.batch = it.row_len;
    desc.a_batch_stride = it.strides[0][it.ndim - 1];
    desc.b_batch_stride = it.strides[1][it.ndim - 1];
    desc.c_batch_stride = it.strides[2][it.ndim - 1];
    for (int64_t row = 0; row < it.rows && status == TB_OK; row++) {
        int64_t offsets[3];
        tb_broadcast_iter_offsets(&it, row, offsets);
        set_a(&desc, a, offsets[0]);
        set_b(&desc, b, offsets[1]);
        desc.c = (float *)tb_tensor_data(result) + offsets[2];
        status = tb_gemm_f32(&desc);
    }
    return status;
}

tb_status tb_op_matmul(const tb_tensor *a_in, const tb_tensor *b_in, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    if (a_in->ndim == 0 || b_in->ndim == 0)
        return tb_error_set(TB_ERR_SHAPE, "matmul: both arguments need at least 1 dimension, got %dD and %dD",
                            a_in->ndim, b_in->ndim);
    tb_dtype out_dtype = tb_ops_promote(a_in->dtype, b_in->dtype);
    tb_tensor a, b, a2 = {0}, b2 = {0}, result = {0};
    bool in_place = bf16_in_place(a_in, b_in);
    TB_TRY(stage(a_in, "matmul: input", in_place, &a));
    tb_status status = stage(b_in, "matmul: other", in_place, &b);
    if (status != TB_OK) {
        tb_tensor_release(&a);
        return status;
    }
    bool a_vector = a.ndim == 1, b_vector = b.ndim == 1;
    status = a_vector ? tb_tensor_unsqueeze(&a, 0, &a2) : (tb_tensor_retain(&a, &a2), TB_OK);
    if (status == TB_OK)
        status = b_vector ? tb_tensor_unsqueeze(&b, -1, &b2) : (tb_tensor_retain(&b, &b2), TB_OK);
    if (status == TB_OK)
        status = matmul_f32(&a2, &b2,
                            a_in->dtype == TB_BF16 && b_in->dtype == TB_BF16 ? TB_GEMM_PRECISION_BF16
                                                                             : TB_GEMM_PRECISION_DEFAULT,
                            &result);
    if (status == TB_OK && (a_vector || b_vector)) {
        /* drop the helper dims: [..., 1, N] -> [..., N], [..., M, 1] -> [..., M] */
        int64_t shape[TB_MAX_DIMS];
        int ndim = 0;
        for (int d = 0; d < result.ndim; d++) {
            if ((a_vector && d == result.ndim - 2) || (b_vector && d == result.ndim - 1))
                continue;
            shape[ndim++] = result.shape[d];
        }
        tb_tensor squeezed;
        status = tb_tensor_view(&result, ndim, shape, &squeezed);
        tb_tensor_release(&result);
        result = squeezed;
    }
    tb_tensor_release(&a);
    tb_tensor_release(&b);
    tb_tensor_release(&a2);
    tb_tensor_release(&b2);
    if (status != TB_OK) {
        tb_tensor_release(&result);
        return status;
    }
    return tb_ops_finish_dtype(&result, out_dtype, out);
}

/* ---- linear ---- */

tb_status tb_op_linear(const tb_tensor *x_in, const tb_tensor *weight_in, const tb_tensor *bias_in, int activation,
                       const tb_tensor *residual_in, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    if (activation < 0 || activation >= TB_ACTIVATION_COUNT)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "linear: unknown activation %d", activation);
    if (weight_in->ndim != 2)
        return tb_error_set(TB_ERR_SHAPE, "linear: weight must be 2-D [out_features, in_features], got %d dims",
                            weight_in->ndim);
    if (x_in->ndim < 1)
        return tb_error_set(TB_ERR_SHAPE, "linear: input must have at least 1 dim");
    int64_t n = weight_in->shape[0], k = weight_in->shape[1];
    if (x_in->shape[x_in->ndim - 1] != k)
        return tb_error_set(TB_ERR_SHAPE, "linear: input has %lld features but weight expects %lld",
                            (long long)x_in->shape[x_in->ndim - 1], (long long)k);
    if (bias_in && (bias_in->ndim != 1 || bias_in->shape[0] != n))
        return tb_error_set(TB_ERR_SHAPE, "linear: bias must be [%lld]", (long long)n);
    tb_dtype out_dtype = tb_ops_promote(x_in->dtype, weight_in->dtype);
    tb_tensor x = {0}, weight = {0}, bias = {0}, x2 = {0}, residual = {0}, result = {0};
    bool in_place = bf16_in_place(x_in, weight_in);
    tb_status status = stage(x_in, "linear: input", in_place, &x);
    if (status == TB_OK)
        status = stage(weight_in, "linear: weight", in_place, &weight);
    if (status == TB_OK && bias_in) {
        status = tb_ops_require_float(bias_in->dtype, "linear: bias");
        if (status == TB_OK)
            status = tb_ops_as_f32(bias_in, &bias);
    }
    int64_t shape2[2] = {-1, k};
    if (status == TB_OK)
        status = tb_tensor_reshape(&x, 2, shape2, &x2);
    int64_t out_shape[TB_MAX_DIMS];
    memcpy(out_shape, x_in->shape, (size_t)x_in->ndim * sizeof(int64_t));
    out_shape[x_in->ndim - 1] = n;
    if (status == TB_OK)
        status = tb_tensor_empty(TB_F32, x_in->ndim, out_shape, TB_ALLOC_DEFAULT, &result);
    if (status == TB_OK && residual_in) {
        status = tb_ops_require_float(residual_in->dtype, "linear: residual");
        tb_tensor expanded;
        if (status == TB_OK)
            status = tb_tensor_expand(residual_in, result.ndim, result.shape, &expanded);
        if (status == TB_OK) {
            status = tb_ops_as_f32(&expanded, &residual);
            tb_tensor_release(&expanded);
        }
    }
    if (status == TB_OK && x2.shape[0] > 0 && n > 0) {
        tb_gemm_desc desc = {0};
        if (x_in->dtype == TB_BF16 && weight_in->dtype == TB_BF16) /* exact in bf16: the bf16 kernel */
            desc.precision = TB_GEMM_PRECISION_BF16;
        desc.m = x2.shape[0];
        desc.n = n;
        desc.k = k;
        set_a(&desc, &x2, 0);
        desc.a_row_stride = x2.strides[0];
        desc.a_col_stride = x2.strides[1];
        set_b(&desc, &weight, 0); /* B[p, j] = W[j, p] */
        desc.b_row_stride = weight.strides[1];
        desc.b_col_stride = weight.strides[0];
        desc.c = tb_tensor_data(&result);
        desc.c_row_stride = n;
        desc.alpha = 1.0f;
        desc.bias_kind = bias_in ? TB_BIAS_PER_COLUMN : TB_BIAS_NONE;
        desc.bias = bias_in ? tb_tensor_data(&bias) : NULL;
        desc.activation = (tb_activation)activation;
        desc.residual = residual_in ? tb_tensor_data(&residual) : NULL;
        desc.residual_row_stride = n;
        desc.batch = 1;
        /* a float32 weight is read in place: its packed copy can live on its storage */
        status = weight.storage == weight_in->storage && weight.dtype == TB_F32
                     ? tb_gemm_f32_cached_b(&desc, weight.storage)
                     : tb_gemm_f32(&desc);
    }
    tb_tensor_release(&x);
    tb_tensor_release(&weight);
    tb_tensor_release(&bias);
    tb_tensor_release(&x2);
    tb_tensor_release(&residual);
    if (status != TB_OK) {
        tb_tensor_release(&result);
        return status;
    }
    return tb_ops_finish_dtype(&result, out_dtype, out);
}

/* ---- attention ---- */

/* Views x ([H, T, D] or [B, H, T, D]) as 4-D. */
static tb_status as_4d(const tb_tensor *x, const char *what, tb_tensor *out) {
    if (x->ndim == 4) {
        tb_tensor_retain(x, out);
        return TB_OK;
    }
    if (x->ndim == 3)
        return tb_tensor_unsqueeze(x, 0, out);
    return tb_error_set(TB_ERR_SHAPE, "scaled_dot_product_attention: %s must be 3-D or 4-D [B, H, T, D], got %d dims",
                        what, x->ndim);
}

/* f32 with a unit last stride (the kernel's contract), keeping other strides. */
static tb_status stage_rows(const tb_tensor *x, const char *what, tb_tensor *out) {
    TB_TRY(tb_ops_require_float(x->dtype, what));
    if (x->dtype == TB_F32 && (x->strides[x->ndim - 1] == 1 || x->shape[x->ndim - 1] <= 1)) {
        tb_tensor_retain(x, out);
        return TB_OK;
    }
    return tb_ops_as_f32(x, out);
}

tb_status tb_op_attention(const tb_tensor *q_in, const tb_tensor *k_in, const tb_tensor *v_in, const tb_tensor *mask_in,
                          bool causal, float scale, bool enable_gqa, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    tb_tensor q4 = {0}, k4 = {0}, v4 = {0}, q = {0}, k = {0}, v = {0}, mask = {0}, mask_expanded = {0}, result = {0};
    bool three_d = q_in->ndim == 3;
    tb_status status = as_4d(q_in, "query", &q4);
    if (status == TB_OK)
        status = as_4d(k_in, "key", &k4);
    if (status == TB_OK)
        status = as_4d(v_in, "value", &v4);
    if (status == TB_OK && (q_in->ndim != k_in->ndim || q_in->ndim != v_in->ndim))
        status = tb_error_set(TB_ERR_SHAPE, "scaled_dot_product_attention: query, key and value must have the same number of dims");
    if (status == TB_OK)
        status = stage_rows(&q4, "scaled_dot_product_attention: query", &q);
    if (status == TB_OK)
        status = stage_rows(&k4, "scaled_dot_product_attention: key", &k);
    if (status == TB_OK)
        status = stage_rows(&v4, "scaled_dot_product_attention: value", &v);
    int64_t batch = 0, hq = 0, hk = 0, tq = 0, tk = 0, d = 0, dv = 0;
    if (status == TB_OK) {
        batch = q.shape[0], hq = q.shape[1], tq = q.shape[2], d = q.shape[3];
        hk = k.shape[1], tk = k.shape[2], dv = v.shape[3];
        char a[128], b[128], c[128];
        if (k.shape[0] != batch || v.shape[0] != batch || k.shape[3] != d || v.shape[1] != hk || v.shape[2] != tk)
            status = tb_error_set(TB_ERR_SHAPE, "scaled_dot_product_attention: incompatible shapes query %s, key %s, value %s",
                                  tb_shape_string(q_in->ndim, q_in->shape, a, sizeof a),
                                  tb_shape_string(k_in->ndim, k_in->shape, b, sizeof b),
                                  tb_shape_string(v_in->ndim, v_in->shape, c, sizeof c));
        else if (hq != hk && !enable_gqa)
            status = tb_error_set(TB_ERR_SHAPE, "scaled_dot_product_attention: query has %lld heads but key/value have %lld; "
                                  "pass enable_gqa=True for grouped-query attention", (long long)hq, (long long)hk);
        else if (hk == 0 || hq % hk != 0)
            status = tb_error_set(TB_ERR_SHAPE, "scaled_dot_product_attention: query heads (%lld) must be a multiple of "
                                  "key/value heads (%lld)", (long long)hq, (long long)hk);
    }
    if (status == TB_OK && mask_in) {
        if (causal)
            status = tb_error_set(TB_ERR_INVALID_ARGUMENT, "scaled_dot_product_attention: pass either attn_mask or is_causal, not both");
        int64_t mask_shape[4] = {batch, hq, tq, tk};
        if (status == TB_OK)
            status = tb_tensor_expand(mask_in, 4, mask_shape, &mask_expanded);
        if (status == TB_OK) {
            if (mask_in->dtype == TB_BOOL)
                tb_tensor_retain(&mask_expanded, &mask);
            else {
                status = tb_ops_require_float(mask_in->dtype, "scaled_dot_product_attention: attn_mask");
                if (status == TB_OK && mask_in->dtype == TB_F32)
                    tb_tensor_retain(&mask_expanded, &mask);
                else if (status == TB_OK)
                    status = tb_ops_as_f32(&mask_expanded, &mask);
            }
        }
    }
    int64_t out_shape[4] = {batch, hq, tq, dv};
    if (status == TB_OK)
        status = tb_tensor_empty(TB_F32, 4, out_shape, TB_ALLOC_DEFAULT, &result);
    if (status == TB_OK && batch * hq * tq * dv > 0) {
        tb_attention_desc desc = {0};
        desc.batch = batch;
        desc.q_heads = hq;
        desc.kv_heads = hk;
        desc.q_len = tq;
        desc.kv_len = tk;
        desc.head_dim = d;
        desc.value_dim = dv;
        desc.q = tb_tensor_data(&q);
        desc.k = tb_tensor_data(&k);
        desc.v = tb_tensor_data(&v);
        desc.out = tb_tensor_data(&result);
        for (int i = 0; i < 4; i++) {
            desc.q_strides[i] = q.strides[i];
            desc.k_strides[i] = k.strides[i];
            desc.v_strides[i] = v.strides[i];
            desc.out_strides[i] = result.strides[i];
        }
        if (mask.storage) {
            for (int i = 0; i < 4; i++) {
                if (mask.dtype == TB_BOOL)
                    desc.bool_mask_strides[i] = mask.strides[i];
                else
                    desc.float_mask_strides[i] = mask.strides[i];
            }
            if (mask.dtype == TB_BOOL)
                desc.bool_mask = tb_tensor_data(&mask);
            else
                desc.float_mask = tb_tensor_data(&mask);
        }
        desc.causal = causal;
        desc.scale = isnan(scale) ? 1.0f / sqrtf((float)d) : scale;
        status = tb_attention_f32(&desc);
    }
    tb_tensor_release(&q4);
    tb_tensor_release(&k4);
    tb_tensor_release(&v4);
    tb_tensor_release(&q);
    tb_tensor_release(&k);
    tb_tensor_release(&v);
    tb_tensor_release(&mask);
    tb_tensor_release(&mask_expanded);
    if (status == TB_OK && three_d) {
        tb_tensor squeezed;
        status = tb_tensor_select(&result, 0, 0, &squeezed);
        tb_tensor_release(&result);
        result = squeezed;
    }
    if (status != TB_OK) {
        tb_tensor_release(&result);
        return status;
    }
    return tb_ops_finish_dtype(&result, q_in->dtype, out);
}
