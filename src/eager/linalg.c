/* matmul for every dtype (float32/16 through the GEMM of src/ops, float64 and integers exactly in a
 * blocked loop), plus the sum_to and fill helpers that autograd and the bindings share. */
#include <math.h>
#include <string.h>

#include "eager/eager_internal.h"
#include "torchburn/alloc.h"
#include "torchburn/ops.h"

/* a [..., M, K] @ b [..., K, N] in the F64 or I64 domain, batch dims broadcast. */
static tb_status matmul_exact(const tb_tensor *a, const tb_tensor *b, tb_dtype result_dtype, tb_tensor *out) {
    tb_domain domain = tb_domain_of(result_dtype);
    int64_t m = a->shape[a->ndim - 2], k = a->shape[a->ndim - 1], n = b->shape[b->ndim - 1];
    if (b->shape[b->ndim - 2] != k)
        return tb_error_set(TB_ERR_SHAPE, "mat1 and mat2 shapes cannot be multiplied (%lldx%lld and %lldx%lld)",
                            (long long)m, (long long)k, (long long)b->shape[b->ndim - 2], (long long)n);
    int batch_ndim;
    int64_t batch[TB_MAX_DIMS];
    TB_TRY(tb_broadcast_shapes(a->ndim - 2, a->shape, b->ndim - 2, b->shape, &batch_ndim, batch));
    int64_t a_shape[TB_MAX_DIMS], b_shape[TB_MAX_DIMS], c_shape[TB_MAX_DIMS];
    memcpy(a_shape, batch, sizeof(int64_t) * (size_t)batch_ndim);
    memcpy(b_shape, batch, sizeof(int64_t) * (size_t)batch_ndim);
    memcpy(c_shape, batch, sizeof(int64_t) * (size_t)batch_ndim);
    a_shape[batch_ndim] = m, a_shape[batch_ndim + 1] = k;
    b_shape[batch_ndim] = k, b_shape[batch_ndim + 1] = n;
    c_shape[batch_ndim] = m, c_shape[batch_ndim + 1] = n;
    tb_staged sa, sb;
    TB_TRY(tb_eager_stage((tb_eager_operand){.tensor = a}, domain, batch_ndim + 2, a_shape, &sa));
    tb_status status = tb_eager_stage((tb_eager_operand){.tensor = b}, domain, batch_ndim + 2, b_shape, &sb);
    if (status != TB_OK) {
        tb_eager_unstage(&sa);
        return status;
    }
    tb_tensor c;
    status = tb_tensor_empty(tb_domain_dtype(domain), batch_ndim + 2, c_shape, TB_ALLOC_ZERO, &c);
    if (status == TB_OK) {
        int64_t batches = 1;
        for (int d = 0; d < batch_ndim; d++)
            batches *= batch[d];
        for (int64_t t = 0; t < batches; t++) {
            /* a single staged value (step 0) is a 1x1 operand */
            int64_t a_off = sa.step ? t * m * k : 0, b_off = sb.step ? t * k * n : 0;
            if (domain == TB_DOMAIN_F64) {
                const double *A = (const double *)sa.data + a_off, *B = (const double *)sb.data + b_off;
                double *C = (double *)tb_tensor_data(&c) + t * m * n;
                for (int64_t i = 0; i < m; i++)
                    for (int64_t p = 0; p < k; p++) {
                        double av = A[sa.step ? i * k + p : 0];
                        const double *brow = B + (sb.step ? p * n : 0);
                        for (int64_t j = 0; j < n; j++)
                            C[i * n + j] += av * brow[sb.step ? j : 0];
                    }
            } else {
                const int64_t *A = (const int64_t *)sa.data + a_off, *B = (const int64_t *)sb.data + b_off;
                int64_t *C = (int64_t *)tb_tensor_data(&c) + t * m * n;
                for (int64_t i = 0; i < m; i++)
                    for (int64_t p = 0; p < k; p++) {
                        uint64_t av = (uint64_t)A[sa.step ? i * k + p : 0];
                        const int64_t *brow = B + (sb.step ? p * n : 0);
                        for (int64_t j = 0; j < n; j++)
                            C[i * n + j] = (int64_t)((uint64_t)C[i * n + j] + av * (uint64_t)brow[sb.step ? j : 0]);
                    }
            }
        }
    }
    tb_eager_unstage(&sa);
    tb_eager_unstage(&sb);
    if (status != TB_OK)
        return status;
    if (c.dtype == result_dtype) {
        *out = c;
        return TB_OK;
    }
    status = tb_tensor_contiguous(&c, result_dtype, out);
    tb_tensor_release(&c);
    return status;
}

tb_status tb_eager_matmul(const tb_tensor *a_in, const tb_tensor *b_in, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    if (a_in->ndim == 0 || b_in->ndim == 0)
        return tb_error_set(TB_ERR_SHAPE, "both arguments to matmul need to be at least 1D, but they are %dD and %dD",
                            a_in->ndim, b_in->ndim);
    if (a_in->dtype != b_in->dtype)
        return tb_error_set(TB_ERR_DTYPE, "expected m1 and m2 to have the same dtype, but got: %s != %s",
                            tb_dtype_name(a_in->dtype), tb_dtype_name(b_in->dtype));
    if (a_in->ndim == 1 && b_in->ndim == 1 && a_in->shape[0] != b_in->shape[0])
        return tb_error_set(TB_ERR_SHAPE, "inconsistent tensor size, expected tensor [%lld] and src [%lld] to have the "
                            "same number of elements, but got %lld and %lld elements respectively",
                            (long long)a_in->shape[0], (long long)b_in->shape[0], (long long)a_in->shape[0],
                            (long long)b_in->shape[0]);
    tb_domain domain = tb_domain_of(a_in->dtype);
    if (domain == TB_DOMAIN_F32)
        return tb_op_matmul(a_in, b_in, out);
    if (a_in->dtype == TB_BOOL)
        return tb_error_set(TB_ERR_DTYPE, "\"addmm_impl_cpu_\" not implemented for 'Bool'");
    tb_tensor a, b;
    bool a_vector = a_in->ndim == 1, b_vector = b_in->ndim == 1;
    TB_TRY(a_vector ? tb_tensor_unsqueeze(a_in, 0, &a) : (tb_tensor_retain(a_in, &a), TB_OK));
    tb_status status = b_vector ? tb_tensor_unsqueeze(b_in, -1, &b) : (tb_tensor_retain(b_in, &b), TB_OK);
    tb_tensor result = {0};
    if (status == TB_OK) {
        status = matmul_exact(&a, &b, a_in->dtype, &result);
        tb_tensor_release(&b);
    }
    tb_tensor_release(&a);
    if (status != TB_OK)
        return status;
    if (a_vector || b_vector) {
        int64_t shape[TB_MAX_DIMS];
        int ndim = 0;
        for (int d = 0; d < result.ndim; d++)
            if (!((a_vector && d == result.ndim - 2) || (b_vector && d == result.ndim - 1)))
                shape[ndim++] = result.shape[d];
        status = tb_tensor_view(&result, ndim, shape, out);
        tb_tensor_release(&result);
        return status;
    }
    *out = result;
    return TB_OK;
}

tb_status tb_eager_sum_to(const tb_tensor *grad, int ndim, const int64_t *shape, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    if (grad->ndim == ndim && memcmp(grad->shape, shape, sizeof(int64_t) * (size_t)ndim) == 0) {
        tb_tensor_retain(grad, out);
        return TB_OK;
    }
    if (ndim > grad->ndim)
        return tb_error_set(TB_ERR_SHAPE, "sum_to: cannot reduce %d dims to %d", grad->ndim, ndim);
    uint32_t mask = 0;
    int lead = grad->ndim - ndim;
    for (int d = 0; d < grad->ndim; d++)
        if (d < lead || (shape[d - lead] == 1 && grad->shape[d] != 1))
            mask |= 1u << d;
    if (mask == 0) {
        return tb_tensor_reshape(grad, ndim, shape, out);
    }
    tb_tensor summed;
    TB_TRY(tb_eager_reduce(TB_EAGER_REDUCE_SUM, grad, mask, true, grad->dtype, &summed));
    tb_status status = tb_tensor_reshape(&summed, ndim, shape, out);
    tb_tensor_release(&summed);
    return status;
}

tb_status tb_eager_full(tb_dtype dtype, int ndim, const int64_t *shape, double value, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    TB_TRY(tb_tensor_empty(dtype, ndim, shape, value == 0 ? TB_ALLOC_ZERO : TB_ALLOC_DEFAULT, out));
    if (value == 0 && !signbit(value))
        return TB_OK;
    int64_t n = tb_tensor_numel(out);
    void *data = tb_tensor_data(out);
    switch (dtype) {
    case TB_F32: for (int64_t i = 0; i < n; i++) ((float *)data)[i] = (float)value; break;
    case TB_F64: for (int64_t i = 0; i < n; i++) ((double *)data)[i] = value; break;
    default: {
        /* through a 1-element f64 tensor: the trait table converts like torch */
        tb_tensor one;
        tb_status status = tb_tensor_empty(TB_F64, 0, NULL, TB_ALLOC_DEFAULT, &one);
        if (status == TB_OK) {
            *(double *)tb_tensor_data(&one) = value;
            status = tb_tensor_copy(out, &one);
            tb_tensor_release(&one);
        }
        if (status != TB_OK) {
            tb_tensor_release(out);
            return status;
        }
    }
    }
    return TB_OK;
}
