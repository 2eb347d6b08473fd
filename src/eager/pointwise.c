/* Pointwise ops of the op table over every dtype: staging of operands into a compute domain,
 * the per-op loops (generated from the table's lists), the f32 SIMD fast path, and the backward
 * kernels of unary and binary ops. */
#include <math.h>
#include <string.h>

#include "eager/eager_internal.h"
#include "eager/pointwise_math.h"
#include "kernels/elementwise.h"
#include "torchburn/alloc.h"
#include "torchburn/thread_pool.h"

#define TB_NO_SIMD (-1)
#define SIMD_UNARY_ID(simd) TB_SIMD_UNARY_##simd
#define SIMD_BINARY_ID(simd) TB_SIMD_BINARY_##simd
enum {
    TB_SIMD_UNARY_NONE = TB_NO_SIMD,
#define SIMD_U(id, name) TB_SIMD_UNARY_##id = TB_UNARY_##id,
    TB_UNARY_OP_LIST(SIMD_U)
#undef SIMD_U
};
enum {
    TB_SIMD_BINARY_NONE = TB_NO_SIMD,
#define SIMD_B(id, name) TB_SIMD_BINARY_##id = TB_BINARY_##id,
    TB_BINARY_OP_LIST(SIMD_B)
#undef SIMD_B
};

const tb_pw_info tb_pw_unary_info[TB_PW_UNARY_COUNT] = {
#define INFO_FLOAT(id, name, simd) [TB_PW_##id] = {#name, TB_PW_KIND_FLOAT, SIMD_UNARY_ID(simd)},
#define INFO_SAME(id, name, simd) [TB_PW_##id] = {#name, TB_PW_KIND_SAME, SIMD_UNARY_ID(simd)},
#define INFO_TEST(id, name, simd) [TB_PW_##id] = {#name, TB_PW_KIND_TEST, SIMD_UNARY_ID(simd)},
    TB_PW_UNARY_FLOAT_LIST(INFO_FLOAT) TB_PW_UNARY_SAME_LIST(INFO_SAME) TB_PW_UNARY_TEST_LIST(INFO_TEST)
};
const tb_pw_info tb_pw_binary_info[TB_PW_BINARY_COUNT] = {
#define INFO_B(kind) INFO_B_##kind
#define INFO_ARITH(id, name, simd) [TB_PWB_##id] = {#name, TB_PW_KIND_ARITH, SIMD_BINARY_ID(simd)},
#define INFO_FDIV(id, name, simd) [TB_PWB_##id] = {#name, TB_PW_KIND_FDIV, SIMD_BINARY_ID(simd)},
#define INFO_CMP(id, name, simd) [TB_PWB_##id] = {#name, TB_PW_KIND_CMP, SIMD_BINARY_ID(simd)},
#define INFO_LOGIC(id, name, simd) [TB_PWB_##id] = {#name, TB_PW_KIND_LOGIC, SIMD_BINARY_ID(simd)},
#define INFO_BITS(id, name, simd) [TB_PWB_##id] = {#name, TB_PW_KIND_BITS, SIMD_BINARY_ID(simd)},
    TB_PW_BINARY_ARITH_LIST(INFO_ARITH) TB_PW_BINARY_FDIV_LIST(INFO_FDIV) TB_PW_BINARY_CMP_LIST(INFO_CMP)
    TB_PW_BINARY_LOGIC_LIST(INFO_LOGIC) TB_PW_BINARY_BITS_LIST(INFO_BITS)
};

/* ---- dtype rules ---- */

tb_dtype tb_pw_unary_result_dtype(tb_pw_unary op, tb_dtype input, tb_dtype default_float) {
    switch (tb_pw_unary_info[op].kind) {
    case TB_PW_KIND_FLOAT: return tb_dtype_category_of(input) == TB_CATEGORY_FLOATING ? input : default_float;
    case TB_PW_KIND_TEST: return TB_BOOL;
    default: return input;
    }
}

tb_dtype tb_pw_binary_compute_dtype(tb_pw_binary op, tb_dtype promoted, tb_dtype default_float) {
    if (tb_pw_binary_info[op].kind == TB_PW_KIND_FDIV && tb_dtype_category_of(promoted) != TB_CATEGORY_FLOATING)
        return default_float;
    return promoted;
}

tb_dtype tb_pw_binary_result_dtype(tb_pw_binary op, tb_dtype promoted, tb_dtype default_float) {
    switch (tb_pw_binary_info[op].kind) {
    case TB_PW_KIND_CMP: case TB_PW_KIND_LOGIC: return TB_BOOL;
    default: return tb_pw_binary_compute_dtype(op, promoted, default_float);
    }
}

double tb_pw_eval_unary(tb_pw_unary op, double x, const tb_pw_params *p) {
    switch (op) {
#define EVAL(id, name, simd) case TB_PW_##id: return tb_pw_##name(x, p);
#define EVAL_TEST(id, name, simd) case TB_PW_##id: return tb_pwt_##name(x);
        TB_PW_UNARY_FLOAT_LIST(EVAL) TB_PW_UNARY_SAME_LIST(EVAL) TB_PW_UNARY_TEST_LIST(EVAL_TEST)
#undef EVAL
#undef EVAL_TEST
    default: return NAN;
    }
}

double tb_pw_eval_binary(tb_pw_binary op, double a, double b, const tb_pw_params *p) {
    switch (op) {
#define EVAL(id, name, simd) case TB_PWB_##id: return tb_pwb_##name(a, b, p);
        TB_PW_BINARY_ARITH_LIST(EVAL) TB_PW_BINARY_FDIV_LIST(EVAL) TB_PW_BINARY_CMP_LIST(EVAL) TB_PW_BINARY_LOGIC_LIST(EVAL)
#undef EVAL
    default: return NAN; /* bitwise ops have no float form */
    }
}

double tb_pw_eval_unary_grad(tb_pw_unary op, double x, double y, const tb_pw_params *p) {
    switch (op) {
#define EVAL(id, name, simd) case TB_PW_##id: return tb_pw_grad_##name(x, y, p);
        TB_PW_UNARY_FLOAT_LIST(EVAL) TB_PW_UNARY_SAME_LIST(EVAL)
#undef EVAL
    default: return 0;
    }
}

/* ---- staging ---- */

static void set_scalar(tb_staged *out, tb_domain domain, double f, int64_t i) {
    if (domain == TB_DOMAIN_F32) {
        out->scalar.f32 = (float)f;
    } else if (domain == TB_DOMAIN_F64) {
        out->scalar.f64 = f;
    } else {
        out->scalar.i64 = i;
    }
    out->data = &out->scalar;
    out->step = 0;
}

double tb_eager_get_f(const tb_tensor *x, int64_t index) {
    int64_t offset = 0;
    for (int d = x->ndim - 1; d >= 0; d--) {
        offset += (index % x->shape[d]) * x->strides[d];
        index /= x->shape[d];
    }
    const char *base = (const char *)x->storage->data + (x->offset + offset) * (int64_t)tb_dtype_size(x->dtype);
    switch (x->dtype) {
    case TB_F32: return *(const float *)base;
    case TB_F64: return *(const double *)base;
    case TB_F16: return tb_f16_to_f32(*(const uint16_t *)base);
    case TB_BF16: return tb_bf16_to_f32(*(const uint16_t *)base);
    case TB_I8: return *(const int8_t *)base;
    case TB_U8: return *(const uint8_t *)base;
    case TB_I16: return *(const int16_t *)base;
    case TB_I32: return *(const int32_t *)base;
    case TB_I64: return (double)*(const int64_t *)base;
    case TB_BOOL: return *(const uint8_t *)base != 0;
    default: return NAN;
    }
}

int64_t tb_eager_get_i(const tb_tensor *x, int64_t index) {
    if (x->dtype == TB_I64 || tb_dtype_category_of(x->dtype) != TB_CATEGORY_FLOATING) {
        int64_t offset = 0;
        for (int d = x->ndim - 1; d >= 0; d--) {
            offset += (index % x->shape[d]) * x->strides[d];
            index /= x->shape[d];
        }
        const char *base = (const char *)x->storage->data + (x->offset + offset) * (int64_t)tb_dtype_size(x->dtype);
        switch (x->dtype) {
        case TB_I8: return *(const int8_t *)base;
        case TB_U8: return *(const uint8_t *)base;
        case TB_I16: return *(const int16_t *)base;
        case TB_I32: return *(const int32_t *)base;
        case TB_I64: return *(const int64_t *)base;
        case TB_BOOL: return *(const uint8_t *)base != 0;
        default: break;
        }
    }
    return tb_float_to_int_like_torch(tb_eager_get_f(x, index), TB_I64);
}

static bool same_shape(const tb_tensor *t, int ndim, const int64_t *shape) {
    if (t->ndim != ndim)
        return false;
    for (int d = 0; d < ndim; d++)
        if (t->shape[d] != shape[d])
            return false;
    return true;
}

tb_status tb_eager_stage(tb_eager_operand operand, tb_domain domain, int ndim, const int64_t *shape, tb_staged *out) {
    memset(out, 0, sizeof *out);
    const tb_tensor *t = operand.tensor;
    if (!t) {
        set_scalar(out, domain, operand.f, operand.i);
        return TB_OK;
    }
    if (tb_tensor_numel(t) == 1) {
        if (domain == TB_DOMAIN_I64)
            set_scalar(out, domain, 0, tb_eager_get_i(t, 0));
        else
            set_scalar(out, domain, tb_eager_get_f(t, 0), 0);
        return TB_OK;
    }
    tb_dtype want = tb_domain_dtype(domain);
    if (t->dtype == want && same_shape(t, ndim, shape) && tb_tensor_is_contiguous(t)) {
        out->data = tb_tensor_data(t);
        out->step = 1;
        return TB_OK;
    }
    TB_TRY(tb_tensor_empty(want, ndim, shape, TB_ALLOC_DEFAULT, &out->owned));
    tb_tensor view;
    tb_status status = tb_tensor_expand(t, ndim, shape, &view);
    if (status == TB_OK) {
        status = tb_tensor_copy(&out->owned, &view);
        tb_tensor_release(&view);
    }
    if (status != TB_OK) {
        tb_tensor_release(&out->owned);
        return status;
    }
    out->data = tb_tensor_data(&out->owned);
    out->step = 1;
    return TB_OK;
}

void tb_eager_unstage(tb_staged *staged) { tb_tensor_release(&staged->owned); }

tb_status tb_eager_prepare_out(tb_tensor *out, tb_dtype dtype, int ndim, const int64_t *shape, tb_dtype write_dtype,
                               void **direct) {
    if (!out->storage) {
        TB_TRY(tb_tensor_empty(dtype, ndim, shape, TB_ALLOC_DEFAULT, out));
    } else {
        if (!same_shape(out, ndim, shape)) {
            char have[96], want[96];
            return tb_error_set(TB_ERR_SHAPE, "output with shape %s doesn't match the broadcast shape %s",
                                tb_shape_string(out->ndim, out->shape, have, sizeof have),
                                tb_shape_string(ndim, shape, want, sizeof want));
        }
        if (out->storage->read_only)
            return tb_error_set(TB_ERR_READ_ONLY, "the output tensor is read-only");
    }
    *direct = (out->dtype == write_dtype && tb_tensor_is_contiguous(out)) ? tb_tensor_data(out) : NULL;
    return TB_OK;
}

tb_status tb_eager_finish_out(tb_tensor *out, tb_tensor *src) {
    tb_status status = tb_tensor_copy(out, src);
    tb_tensor_release(src);
    return status;
}

/* ---- the loops ---- */

typedef struct unary_job {
    int op;
    tb_domain domain;
    const void *x;
    void *y;
    const tb_pw_params *p;
} unary_job;

/* The float loops, one function per element type from one body: the op's formula runs in double
 * (pointwise_math.h) and the result is stored in the element type (the cast is exact for double). */
#define UNARY_FLOAT_CASE(id, name, simd) \
    case TB_PW_##id: for (int64_t i = 0; i < n; i++) y[i] = (__typeof__(y[0]))tb_pw_##name(x[i], p); break;
#define DEFINE_UNARY_FLOAT(NAME, T)                                                          \
    static void NAME(int op, const T *x, T *y, int64_t n, const tb_pw_params *p) {          \
        switch (op) {                                                                        \
            TB_PW_UNARY_FLOAT_LIST(UNARY_FLOAT_CASE) TB_PW_UNARY_SAME_LIST(UNARY_FLOAT_CASE) \
        default: break;                                                                      \
        }                                                                                    \
    }
DEFINE_UNARY_FLOAT(unary_float_f32, float)
DEFINE_UNARY_FLOAT(unary_float_f64, double)
static void unary_int(int op, const int64_t *x, int64_t *y, int64_t n, const tb_pw_params *p) {
    switch (op) {
#define CASE(id, name, simd) \
    case TB_PW_##id: for (int64_t i = 0; i < n; i++) y[i] = tb_pwi_##name(x[i], p); break;
        TB_PW_UNARY_SAME_LIST(CASE)
#undef CASE
    default: break;
    }
}
static void unary_test(int op, tb_domain domain, const void *x, uint8_t *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        double v = domain == TB_DOMAIN_F32 ? ((const float *)x)[i]
                 : domain == TB_DOMAIN_F64 ? ((const double *)x)[i] : (double)((const int64_t *)x)[i];
        switch (op) {
#define CASE(id, name, simd) case TB_PW_##id: y[i] = (uint8_t)tb_pwt_##name(v); break;
            TB_PW_UNARY_TEST_LIST(CASE)
#undef CASE
        default: break;
        }
    }
}

static void unary_range(const unary_job *job, int64_t start, int64_t end) {
    int64_t n = end - start;
    if (tb_pw_unary_info[job->op].kind == TB_PW_KIND_TEST) {
        size_t width = job->domain == TB_DOMAIN_F32 ? 4 : 8;
        unary_test(job->op, job->domain, (const char *)job->x + start * width, (uint8_t *)job->y + start, n);
        return;
    }
    if (job->domain == TB_DOMAIN_F32) {
        const float *x = (const float *)job->x + start;
        float *y = (float *)job->y + start;
        int simd = tb_pw_unary_info[job->op].simd;
        if (simd != TB_NO_SIMD) {
            tb_unary_params kp = {0};
            tb_elementwise_kernels_active()->unary[simd](x, y, n, &kp);
        } else {
            unary_float_f32(job->op, x, y, n, job->p);
        }
    } else if (job->domain == TB_DOMAIN_F64) {
        unary_float_f64(job->op, (const double *)job->x + start, (double *)job->y + start, n, job->p);
    } else {
        unary_int(job->op, (const int64_t *)job->x + start, (int64_t *)job->y + start, n, job->p);
    }
}

static void unary_chunk(void *context, int64_t start, int64_t end, int worker) { unary_range(context, start, end); }

tb_status tb_eager_unary(tb_pw_unary op, const tb_tensor *x, const tb_pw_params *params, tb_dtype compute_dtype,
                         tb_dtype out_dtype, tb_tensor *out) {
    if ((unsigned)op >= TB_PW_UNARY_COUNT)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "unary op %d does not exist", (int)op);
    const tb_pw_info *info = &tb_pw_unary_info[op];
    tb_domain domain = tb_domain_of(compute_dtype);
    if (op == TB_PW_BITWISE_NOT && compute_dtype == TB_BOOL) {
        op = TB_PW_LOGICAL_NOT; /* ~ on bool is logical not */
        info = &tb_pw_unary_info[op];
    }
    if (op == TB_PW_BITWISE_NOT && domain != TB_DOMAIN_I64)
        return tb_error_set(TB_ERR_DTYPE, "\"bitwise_not_cpu\" not implemented for '%s'", tb_dtype_name(compute_dtype));
    if (op == TB_PW_NEG && compute_dtype == TB_BOOL)
        return tb_error_set(TB_ERR_DTYPE, "Negation, the `-` operator, on a bool tensor is not supported. "
                                          "If you are trying to invert a mask, use the `~` or `logical_not()` operator instead.");
    if (compute_dtype == TB_BOOL && (op == TB_PW_ABS || op == TB_PW_FLOOR || op == TB_PW_CEIL || op == TB_PW_TRUNC ||
                                     op == TB_PW_ROUND || op == TB_PW_SQUARE))
        return tb_error_set(TB_ERR_DTYPE, "\"%s_cpu\" not implemented for 'Bool'", info->name);
    if (compute_dtype == TB_BOOL && op == TB_PW_RELU)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "Boolean inputs not supported for relu");
    if (info->kind == TB_PW_KIND_FLOAT && domain == TB_DOMAIN_I64)
        return tb_error_set(TB_ERR_INTERNAL, "%s computes in a float dtype", info->name);
    tb_pw_params p = params ? *params : (tb_pw_params){0};
    if (op == TB_PW_CLAMP && !params) {
        p.lo = -INFINITY;
        p.hi = INFINITY;
    }
    if (op == TB_PW_LOGIT && !params)
        p.alpha = -1; /* no eps */
    tb_staged staged;
    TB_TRY(tb_eager_stage((tb_eager_operand){.tensor = x}, domain, x->ndim, x->shape, &staged));
    tb_dtype write_dtype = info->kind == TB_PW_KIND_TEST ? TB_BOOL : tb_domain_dtype(domain);
    bool fresh = out->storage == NULL;
    void *direct;
    tb_status status = tb_eager_prepare_out(out, out_dtype, x->ndim, x->shape, write_dtype, &direct);
    if (status != TB_OK) {
        tb_eager_unstage(&staged);
        return status;
    }
    int64_t n = tb_tensor_numel(x);
    tb_tensor temp = {0};
    if (!direct) {
        status = tb_tensor_empty(write_dtype, x->ndim, x->shape, TB_ALLOC_DEFAULT, &temp);
        if (status != TB_OK)
            goto fail;
        direct = tb_tensor_data(&temp);
    }
    if (n > 0) {
        /* a staged single value stands for a 1-element tensor */
        unary_job job = {op, domain, staged.data, direct, &p};
        if (n >= TB_EAGER_PARALLEL_MIN && tb_num_threads() > 1)
            tb_parallel_for(n, TB_EAGER_PARALLEL_MIN / 4, unary_chunk, &job);
        else
            unary_range(&job, 0, n);
    }
    tb_eager_unstage(&staged);
    if (temp.storage)
        return tb_eager_finish_out(out, &temp);
    return TB_OK;
fail:
    tb_eager_unstage(&staged);
    if (fresh)
        tb_tensor_release(out);
    return status;
}

/* ---- binary ---- */

typedef struct binary_job {
    int op;
    tb_domain domain;
    bool bool_out;
    const void *a, *b;
    int64_t as, bs;
    void *y;
    const tb_pw_params *p;
} binary_job;

#define BINARY_FLOAT_CASE(id, name, simd)                                                      \
    case TB_PWB_##id:                                                                          \
        for (int64_t i = 0; i < n; i++)                                                        \
            y[i] = (__typeof__(y[0]))tb_pwb_##name(a[i * as], b[i * bs], p);                   \
        break;
#define DEFINE_BINARY_FLOAT(NAME, T)                                                                          \
    static void NAME(int op, const T *a, int64_t as, const T *b, int64_t bs, T *y, int64_t n,                 \
                     const tb_pw_params *p) {                                                                 \
        switch (op) {                                                                                         \
            TB_PW_BINARY_ARITH_LIST(BINARY_FLOAT_CASE) TB_PW_BINARY_FDIV_LIST(BINARY_FLOAT_CASE)              \
        default: break;                                                                                       \
        }                                                                                                     \
    }
DEFINE_BINARY_FLOAT(binary_f32, float)
DEFINE_BINARY_FLOAT(binary_f64, double)
static void binary_i64(int op, const int64_t *a, int64_t as, const int64_t *b, int64_t bs, int64_t *y, int64_t n,
                       const tb_pw_params *p) {
    switch (op) {
#define CASE(id, name, simd)                                                 \
    case TB_PWB_##id:                                                        \
        for (int64_t i = 0; i < n; i++)                                      \
            y[i] = tb_pwbi_##name(a[i * as], b[i * bs], p);                  \
        break;
        TB_PW_BINARY_ARITH_LIST(CASE) TB_PW_BINARY_BITS_LIST(CASE)
#undef CASE
    default: break;
    }
}
/* comparisons and logical ops: bool results from any domain */
#define BOOL_LOOP(T, FN_PREFIX)                                                                    \
    switch (op) {                                                                                  \
        TB_PW_BINARY_CMP_LIST(BOOL_CASE_##FN_PREFIX) TB_PW_BINARY_LOGIC_LIST(BOOL_CASE_##FN_PREFIX) \
    default: break;                                                                                \
    }
#define BOOL_CASE_pwb(id, name, simd) \
    case TB_PWB_##id: for (int64_t i = 0; i < n; i++) y[i] = (uint8_t)(tb_pwb_##name(a[i * as], b[i * bs], p) != 0); break;
#define BOOL_CASE_pwbi(id, name, simd) \
    case TB_PWB_##id: for (int64_t i = 0; i < n; i++) y[i] = (uint8_t)(tb_pwbi_##name(a[i * as], b[i * bs], p) != 0); break;
static void bool_f32(int op, const float *a, int64_t as, const float *b, int64_t bs, uint8_t *y, int64_t n, const tb_pw_params *p) {
    BOOL_LOOP(float, pwb)
}
static void bool_f64(int op, const double *a, int64_t as, const double *b, int64_t bs, uint8_t *y, int64_t n, const tb_pw_params *p) {
    BOOL_LOOP(double, pwb)
}
static void bool_i64(int op, const int64_t *a, int64_t as, const int64_t *b, int64_t bs, uint8_t *y, int64_t n, const tb_pw_params *p) {
    BOOL_LOOP(int64_t, pwbi)
}

static void binary_range(const binary_job *job, int64_t start, int64_t end) {
    int64_t n = end - start;
    size_t width = job->domain == TB_DOMAIN_F32 ? 4 : 8;
    const char *a = (const char *)job->a + start * job->as * (int64_t)width;
    const char *b = (const char *)job->b + start * job->bs * (int64_t)width;
    if (job->bool_out) {
        uint8_t *y = (uint8_t *)job->y + start;
        if (job->domain == TB_DOMAIN_F32)
            bool_f32(job->op, (const float *)a, job->as, (const float *)b, job->bs, y, n, job->p);
        else if (job->domain == TB_DOMAIN_F64)
            bool_f64(job->op, (const double *)a, job->as, (const double *)b, job->bs, y, n, job->p);
        else
            bool_i64(job->op, (const int64_t *)a, job->as, (const int64_t *)b, job->bs, y, n, job->p);
        return;
    }
    char *y = (char *)job->y + start * (int64_t)width;
    if (job->domain == TB_DOMAIN_F32) {
        int simd = tb_pw_binary_info[job->op].simd;
        if (simd != TB_NO_SIMD && job->p->alpha == 1.0)
            tb_elementwise_kernels_active()->binary[simd]((const float *)a, job->as, (const float *)b, job->bs,
                                                          (float *)y, n);
        else
            binary_f32(job->op, (const float *)a, job->as, (const float *)b, job->bs, (float *)y, n, job->p);
    } else if (job->domain == TB_DOMAIN_F64) {
        binary_f64(job->op, (const double *)a, job->as, (const double *)b, job->bs, (double *)y, n, job->p);
    } else {
        binary_i64(job->op, (const int64_t *)a, job->as, (const int64_t *)b, job->bs, (int64_t *)y, n, job->p);
    }
}

static void binary_chunk(void *context, int64_t start, int64_t end, int worker) { binary_range(context, start, end); }

static int operand_ndim(tb_eager_operand x) { return x.tensor ? x.tensor->ndim : 0; }

static tb_status check_zero_division(int op, const tb_staged *b, int64_t n) {
    if (op != TB_PWB_FLOOR_DIVIDE && op != TB_PWB_REMAINDER && op != TB_PWB_FMOD)
        return TB_OK;
    const int64_t *values = b->data;
    int64_t count = b->step ? n : 1;
    for (int64_t i = 0; i < count; i++)
        if (values[i] == 0)
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "ZeroDivisionError");
    return TB_OK;
}

tb_status tb_eager_binary(tb_pw_binary op, tb_eager_operand a, tb_eager_operand b, const tb_pw_params *params,
                          tb_dtype compute_dtype, tb_dtype out_dtype, tb_tensor *out) {
    if ((unsigned)op >= TB_PW_BINARY_COUNT)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "binary op %d does not exist", (int)op);
    const tb_pw_info *info = &tb_pw_binary_info[op];
    tb_domain domain = tb_domain_of(compute_dtype);
    if (info->kind == TB_PW_KIND_BITS && domain != TB_DOMAIN_I64)
        return tb_error_set(TB_ERR_DTYPE, "\"%s_cpu\" not implemented for '%s'", info->name, tb_dtype_name(compute_dtype));
    if (info->kind == TB_PW_KIND_FDIV && domain == TB_DOMAIN_I64)
        return tb_error_set(TB_ERR_INTERNAL, "%s computes in a float dtype", info->name);
    if (op == TB_PWB_SUB && compute_dtype == TB_BOOL)
        return tb_error_set(TB_ERR_DTYPE, "Subtraction, the `-` operator, with two bool tensors is not supported. "
                                          "Use the `^` or `logical_xor()` operator instead.");
    tb_pw_params p = params ? *params : (tb_pw_params){.alpha = 1.0};
    int ndim = 0;
    int64_t shape[TB_MAX_DIMS];
    if (a.tensor && b.tensor) {
        TB_TRY(tb_broadcast_shapes(a.tensor->ndim, a.tensor->shape, b.tensor->ndim, b.tensor->shape, &ndim, shape));
    } else {
        const tb_tensor *t = a.tensor ? a.tensor : b.tensor;
        ndim = operand_ndim(a.tensor ? a : b);
        if (t)
            memcpy(shape, t->shape, sizeof(int64_t) * (size_t)ndim);
    }
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= shape[d];
    tb_staged sa, sb;
    TB_TRY(tb_eager_stage(a, domain, ndim, shape, &sa));
    tb_status status = tb_eager_stage(b, domain, ndim, shape, &sb);
    if (status != TB_OK) {
        tb_eager_unstage(&sa);
        return status;
    }
    if (domain == TB_DOMAIN_I64)
        status = check_zero_division(op, &sb, n);
    bool bool_out = info->kind == TB_PW_KIND_CMP || info->kind == TB_PW_KIND_LOGIC;
    tb_dtype write_dtype = bool_out ? TB_BOOL : tb_domain_dtype(domain);
    bool fresh = out->storage == NULL;
    void *direct = NULL;
    tb_tensor temp = {0};
    if (status == TB_OK)
        status = tb_eager_prepare_out(out, out_dtype, ndim, shape, write_dtype, &direct);
    if (status == TB_OK && !direct) {
        status = tb_tensor_empty(write_dtype, ndim, shape, TB_ALLOC_DEFAULT, &temp);
        if (status == TB_OK)
            direct = tb_tensor_data(&temp);
    }
    if (status == TB_OK && n > 0) {
        binary_job job = {op, domain, bool_out, sa.data, sb.data, sa.step, sb.step, direct, &p};
        if (n >= TB_EAGER_PARALLEL_MIN && tb_num_threads() > 1)
            tb_parallel_for(n, TB_EAGER_PARALLEL_MIN / 4, binary_chunk, &job);
        else
            binary_range(&job, 0, n);
    }
    tb_eager_unstage(&sa);
    tb_eager_unstage(&sb);
    if (status != TB_OK) {
        tb_tensor_release(&temp);
        if (fresh)
            tb_tensor_release(out);
        return status;
    }
    if (temp.storage)
        return tb_eager_finish_out(out, &temp);
    return TB_OK;
}

/* ---- where ---- */

tb_status tb_eager_where(const tb_tensor *cond, tb_eager_operand a, tb_eager_operand b, tb_dtype out_dtype,
                         tb_tensor *out) {
    int ndim = cond->ndim;
    int64_t shape[TB_MAX_DIMS];
    memcpy(shape, cond->shape, sizeof shape);
    if (a.tensor)
        TB_TRY(tb_broadcast_shapes(ndim, shape, a.tensor->ndim, a.tensor->shape, &ndim, shape));
    if (b.tensor)
        TB_TRY(tb_broadcast_shapes(ndim, shape, b.tensor->ndim, b.tensor->shape, &ndim, shape));
    tb_domain domain = tb_domain_of(out_dtype);
    tb_staged sc, sa, sb;
    TB_TRY(tb_eager_stage((tb_eager_operand){.tensor = cond}, TB_DOMAIN_I64, ndim, shape, &sc));
    tb_status status = tb_eager_stage(a, domain, ndim, shape, &sa);
    if (status == TB_OK) {
        status = tb_eager_stage(b, domain, ndim, shape, &sb);
        if (status != TB_OK)
            tb_eager_unstage(&sa);
    }
    if (status != TB_OK) {
        tb_eager_unstage(&sc);
        return status;
    }
    tb_tensor temp = {0};
    status = tb_tensor_empty(tb_domain_dtype(domain), ndim, shape, TB_ALLOC_DEFAULT, &temp);
    if (status == TB_OK) {
        int64_t n = tb_tensor_numel(&temp);
        const int64_t *c = sc.data;
        size_t width = domain == TB_DOMAIN_F32 ? 4 : 8;
        char *y = tb_tensor_data(&temp);
        for (int64_t i = 0; i < n; i++) {
            const char *src = c[i * sc.step] ? (const char *)sa.data + i * sa.step * (int64_t)width
                                             : (const char *)sb.data + i * sb.step * (int64_t)width;
            memcpy(y + i * (int64_t)width, src, width);
        }
    }
    tb_eager_unstage(&sc);
    tb_eager_unstage(&sa);
    tb_eager_unstage(&sb);
    if (status != TB_OK)
        return status;
    if (!out->storage) {
        if (out_dtype == temp.dtype) {
            *out = temp;
            return TB_OK;
        }
        status = tb_tensor_empty(out_dtype, ndim, shape, TB_ALLOC_DEFAULT, out);
        if (status != TB_OK) {
            tb_tensor_release(&temp);
            return status;
        }
    }
    return tb_eager_finish_out(out, &temp);
}

/* ---- backward kernels ---- */

/* grad * derivative, in double, stored in the element type; one body for float32 and float64 */
#define UNARY_GRAD_CASE(id, name, simd)                                                                  \
    case TB_PW_##id:                                                                                     \
        for (int64_t i = 0; i < n; i++)                                                                  \
            out[i] = (__typeof__(out[0]))(g[i] * tb_pw_grad_##name(x[i], y[i], p));                      \
        break;
/* relu is torch's threshold_backward(grad, result, 0): a select, not grad * derivative (so a NaN result
 * passes the gradient and an inf gradient at a zero result gives 0, not NaN), loaded unconditionally so the
 * compiler makes it branch-free: a branch on the sign of the activations mispredicts half the time. */
#define DEFINE_UNARY_GRAD(NAME, T)                                                                       \
    static void NAME(int op, const T *g, const T *x, const T *y, T *out, int64_t n, const tb_pw_params *p) { \
        if (op == TB_PW_RELU) {                                                                          \
            for (int64_t i = 0; i < n; i++) {                                                            \
                T grad_value = g[i];                                                                     \
                out[i] = y[i] <= 0 ? (T)0 : grad_value;                                                  \
            }                                                                                            \
            return;                                                                                      \
        }                                                                                                \
        switch (op) {                                                                                    \
            TB_PW_UNARY_FLOAT_LIST(UNARY_GRAD_CASE) TB_PW_UNARY_SAME_LIST(UNARY_GRAD_CASE)               \
        default: for (int64_t i = 0; i < n; i++) out[i] = 0; break;                                      \
        }                                                                                                \
    }
DEFINE_UNARY_GRAD(unary_grad_loop, double)
DEFINE_UNARY_GRAD(unary_grad_loop_f32, float)

/* Stages operands into double arrays (the backward computes in double and stores in grad's dtype). */
static bool contiguous_f32_like(const tb_tensor *t, const tb_tensor *like) {
    return t->dtype == TB_F32 && tb_tensor_is_contiguous(t) && t->ndim == like->ndim &&
           memcmp(t->shape, like->shape, sizeof(int64_t) * (size_t)t->ndim) == 0;
}

tb_status tb_eager_unary_backward(tb_pw_unary op, const tb_tensor *grad, const tb_tensor *x, const tb_tensor *y,
                                  const tb_pw_params *params, tb_tensor *out) {
    tb_pw_params p = params ? *params : (tb_pw_params){0};
    if (op == TB_PW_CLAMP && !params) {
        p.lo = -INFINITY;
        p.hi = INFINITY;
    }
    if (op == TB_PW_LOGIT && !params)
        p.alpha = -1;
    /* float32 contiguous operands: no staging, one pass (the derivative is still evaluated in double) */
    if (!out->storage && contiguous_f32_like(grad, grad) && contiguous_f32_like(x, grad) && contiguous_f32_like(y, grad)) {
        TB_TRY(tb_tensor_empty(TB_F32, grad->ndim, grad->shape, 0, out));
        unary_grad_loop_f32(op, tb_tensor_data(grad), tb_tensor_data(x), tb_tensor_data(y), tb_tensor_data(out),
                            tb_tensor_numel(grad), &p);
        return TB_OK;
    }
    if (op == TB_PW_LOGIT && !params)
        p.alpha = -1; /* no eps */
    int ndim = grad->ndim;
    const int64_t *shape = grad->shape;
    tb_staged sg, sx, sy;
    TB_TRY(tb_eager_stage((tb_eager_operand){.tensor = grad}, TB_DOMAIN_F64, ndim, shape, &sg));
    tb_status status = tb_eager_stage((tb_eager_operand){.tensor = x}, TB_DOMAIN_F64, ndim, shape, &sx);
    if (status == TB_OK) {
        status = tb_eager_stage((tb_eager_operand){.tensor = y}, TB_DOMAIN_F64, ndim, shape, &sy);
        if (status != TB_OK)
            tb_eager_unstage(&sx);
    }
    if (status != TB_OK) {
        tb_eager_unstage(&sg);
        return status;
    }
    int64_t n = tb_tensor_numel(grad);
    tb_tensor temp = {0};
    status = tb_tensor_empty(TB_F64, ndim, shape, TB_ALLOC_DEFAULT, &temp);
    if (status == TB_OK && n > 0) {
        /* expand single values (step 0) into arrays for the loop */
        double *buffers[3] = {0};
        const double *arrays[3] = {sg.data, sx.data, sy.data};
        const tb_staged *staged[3] = {&sg, &sx, &sy};
        for (int k = 0; k < 3 && status == TB_OK; k++) {
            if (staged[k]->step == 0 && n > 1) {
                status = tb_alloc((size_t)n * sizeof(double), TB_ALLOC_DEFAULT, (void **)&buffers[k]);
                if (status == TB_OK) {
                    for (int64_t i = 0; i < n; i++)
                        buffers[k][i] = arrays[k][0];
                    arrays[k] = buffers[k];
                }
            }
        }
        if (status == TB_OK)
            unary_grad_loop(op, arrays[0], arrays[1], arrays[2], tb_tensor_data(&temp), n, &p);
        for (int k = 0; k < 3; k++)
            tb_free(buffers[k]);
    }
    tb_eager_unstage(&sg);
    tb_eager_unstage(&sx);
    tb_eager_unstage(&sy);
    if (status != TB_OK) {
        tb_tensor_release(&temp);
        return status;
    }
    if (!out->storage) {
        if (grad->dtype == TB_F64) {
            *out = temp;
            return TB_OK;
        }
        status = tb_tensor_empty(grad->dtype, ndim, shape, TB_ALLOC_DEFAULT, out);
        if (status != TB_OK) {
            tb_tensor_release(&temp);
            return status;
        }
    }
    return tb_eager_finish_out(out, &temp);
}

static double binary_grad_value(int op, int which, double a, double b, double y, const tb_pw_params *p) {
    switch (op) {
#define CASE(id, name, simd) \
    case TB_PWB_##id: return which == 0 ? tb_pwb_grad_##name##_a(a, b, y, p) : tb_pwb_grad_##name##_b(a, b, y, p);
        TB_PW_BINARY_ARITH_LIST(CASE) TB_PW_BINARY_FDIV_LIST(CASE)
#undef CASE
    default: return 0;
    }
}

/* The float32 gradient of a product, grad * other, read in place with broadcasting (no double
 * staging of grad, a, b and y): the double evaluation below rounds to the same float, since the
 * product of two floats is exact in double. False where that path applies instead. */
static bool try_f32_product_grad(tb_pw_binary op, int which, const tb_tensor *grad, tb_eager_operand a,
                                 tb_eager_operand b, tb_tensor *out, tb_status *status) {
    const tb_tensor *other = which == 0 ? b.tensor : a.tensor;
    if (op != TB_PWB_MUL || out->storage || !other || other->dtype != TB_F32 || grad->dtype != TB_F32 ||
        grad->ndim == 0)
        return false;
    tb_tensor expanded;
    if (tb_tensor_expand(other, grad->ndim, grad->shape, &expanded) != TB_OK) {
        tb_error_clear();
        return false; /* the general path reports the shape error */
    }
    *status = tb_tensor_empty(TB_F32, grad->ndim, grad->shape, TB_ALLOC_DEFAULT, out);
    if (*status == TB_OK) {
        /* dims merged where grad and other both allow it (out is contiguous) */
        int64_t shape[TB_MAX_DIMS], gs[TB_MAX_DIMS], os[TB_MAX_DIMS];
        memcpy(shape, grad->shape, sizeof(int64_t) * (size_t)grad->ndim);
        memcpy(gs, grad->strides, sizeof(int64_t) * (size_t)grad->ndim);
        memcpy(os, expanded.strides, sizeof(int64_t) * (size_t)grad->ndim);
        int ndim = tb_dims_merge(grad->ndim, shape, gs, os);
        if (ndim == 0) {
            shape[0] = 1;
            gs[0] = os[0] = 0;
            ndim = 1;
        }
        const float *g = tb_tensor_data(grad), *o = tb_tensor_data(&expanded);
        float *dst = tb_tensor_data(out);
        const int inner = ndim - 1;
        const int64_t count = shape[inner], g_step = gs[inner], o_step = os[inner];
        int64_t index[TB_MAX_DIMS] = {0}, total = tb_tensor_numel(grad);
        for (int64_t done = 0; done < total; done += count, dst += count) {
            if (g_step == 1 && o_step == 1)
                for (int64_t i = 0; i < count; i++)
                    dst[i] = g[i] * o[i];
            else if (g_step == 1 && o_step == 0)
                for (int64_t i = 0; i < count; i++)
                    dst[i] = g[i] * o[0];
            else
                for (int64_t i = 0; i < count; i++)
                    dst[i] = g[i * g_step] * o[i * o_step];
            for (int d = inner - 1; d >= 0; d--) {
                g += gs[d];
                o += os[d];
                if (++index[d] < shape[d])
                    break;
                g -= gs[d] * shape[d];
                o -= os[d] * shape[d];
                index[d] = 0;
            }
        }
    }
    tb_tensor_release(&expanded);
    return true;
}

tb_status tb_eager_binary_backward(tb_pw_binary op, int which, const tb_tensor *grad, tb_eager_operand a,
                                   tb_eager_operand b, const tb_tensor *y, const tb_pw_params *params, tb_tensor *out) {
    tb_pw_params p = params ? *params : (tb_pw_params){.alpha = 1.0};
    int ndim = grad->ndim;
    const int64_t *shape = grad->shape;
    int64_t n = tb_tensor_numel(grad);
    /* the common cases need no operand values */
    if ((op == TB_PWB_ADD || op == TB_PWB_SUB) && (which == 0 || p.alpha == 1.0) && !(op == TB_PWB_SUB && which == 1)) {
        tb_tensor_retain(grad, out);
        return TB_OK;
    }
    tb_status fast_status = TB_OK;
    if (try_f32_product_grad(op, which, grad, a, b, out, &fast_status))
        return fast_status;
    tb_staged s[4];
    tb_eager_operand operands[4] = {{.tensor = grad}, a, b, {.tensor = y}};
    int staged = 0;
    tb_status status = TB_OK;
    for (; staged < 4; staged++) { /* a missing y stages as the scalar 0 */
        status = tb_eager_stage(operands[staged], TB_DOMAIN_F64, ndim, shape, &s[staged]);
        if (status != TB_OK)
            break;
    }
    tb_tensor temp = {0};
    if (status == TB_OK)
        status = tb_tensor_empty(TB_F64, ndim, shape, TB_ALLOC_DEFAULT, &temp);
    if (status == TB_OK) {
        double *o = tb_tensor_data(&temp);
        const double *g = s[0].data, *av = s[1].data, *bv = s[2].data, *yv = s[3].data;
        for (int64_t i = 0; i < n; i++)
            o[i] = g[i * s[0].step] * binary_grad_value(op, which, av[i * s[1].step], bv[i * s[2].step], yv[i * s[3].step], &p);
    }
    for (int k = 0; k < staged; k++)
        tb_eager_unstage(&s[k]);
    if (status != TB_OK) {
        tb_tensor_release(&temp);
        return status;
    }
    if (grad->dtype == TB_F64) {
        *out = temp;
        return TB_OK;
    }
    status = tb_tensor_empty(grad->dtype, ndim, shape, TB_ALLOC_DEFAULT, out);
    if (status != TB_OK) {
        tb_tensor_release(&temp);
        return status;
    }
    return tb_eager_finish_out(out, &temp);
}
