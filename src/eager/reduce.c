/* Reductions of the eager layer over every dtype: sum/prod/mean/amax/amin/all/any/nansum/logsumexp/
 * count_nonzero over any set of dims, var/std, p-norms, max/min with indices, and cumulative sums and
 * products. Inputs are viewed as [outer, len, inner]; float32 rows take the SIMD kernels, the rest
 * accumulates in double (floats) or int64 (integers). */
#include <math.h>
#include <string.h>

#include "eager/eager_internal.h"
#include "kernels/elementwise.h"
#include "torchburn/alloc.h"

const char *const tb_eager_reduce_names[TB_EAGER_REDUCE_COUNT] = {
#define NAME(id, name) [TB_EAGER_REDUCE_##id] = name,
    TB_EAGER_REDUCE_LIST(NAME)
#undef NAME
};

/* x with the reduced dims moved last (in order) as a contiguous array of `domain`, plus the output
 * shape (kept dims, or size-1 dims with keepdim). */
typedef struct reduce_layout {
    tb_tensor data; /* contiguous, [rows, len] */
    int64_t order[TB_MAX_DIMS]; /* the permutation that moved the reduced dims last */
    int64_t rows, len;
    int out_ndim;
    int64_t out_shape[TB_MAX_DIMS];
} reduce_layout;

static tb_status make_layout(const tb_tensor *x, uint32_t dim_mask, bool keepdim, tb_domain domain, reduce_layout *out) {
    memset(out, 0, sizeof *out);
    int ndim = x->ndim;
    if (ndim < 32 && dim_mask >> ndim && ndim > 0)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "Dimension out of range (expected to be in range of [%d, %d])",
                            -ndim, ndim - 1);
    uint32_t mask = dim_mask == 0 ? (ndim ? (uint32_t)((1u << ndim) - 1) : 0) : dim_mask;
    int64_t order[TB_MAX_DIMS];
    int k = 0;
    out->rows = 1;
    out->len = 1;
    for (int d = 0; d < ndim; d++) {
        if (!(mask >> d & 1)) {
            order[k++] = d;
            out->rows *= x->shape[d];
            out->out_shape[out->out_ndim++] = x->shape[d];
        } else {
            if (keepdim)
                out->out_shape[out->out_ndim++] = 1;
            out->len *= x->shape[d];
        }
    }
    if (keepdim) { /* rebuild in original order */
        out->out_ndim = ndim;
        for (int d = 0; d < ndim; d++)
            out->out_shape[d] = (mask >> d & 1) ? 1 : x->shape[d];
    }
    for (int d = 0; d < ndim; d++)
        if (mask >> d & 1)
            order[k++] = d;
    memcpy(out->order, order, sizeof order);
    tb_tensor permuted;
    TB_TRY(tb_tensor_permute(x, ndim, order, &permuted));
    tb_status status = tb_tensor_contiguous(&permuted, tb_domain_dtype(domain), &out->data);
    tb_tensor_release(&permuted);
    return status;
}

static tb_status write_result(tb_tensor *result, tb_tensor *out) {
    if (!out->storage) {
        *out = *result;
        memset(result, 0, sizeof *result);
        return TB_OK;
    }
    return tb_eager_finish_out(out, result);
}

/* Allocates the domain-typed result, or fails. */
static tb_status new_result(tb_dtype dtype, const reduce_layout *layout, tb_tensor *result) {
    return tb_tensor_empty(dtype, layout->out_ndim, layout->out_shape, TB_ALLOC_DEFAULT, result);
}

static double reduce_row_f(tb_eager_reduce_op op, const double *x, int64_t n) {
    switch (op) {
    case TB_EAGER_REDUCE_SUM: case TB_EAGER_REDUCE_MEAN: {
        double s = 0;
        for (int64_t i = 0; i < n; i++)
            s += x[i];
        return op == TB_EAGER_REDUCE_MEAN ? s / (double)n : s;
    }
    case TB_EAGER_REDUCE_NANSUM: {
        double s = 0;
        for (int64_t i = 0; i < n; i++)
            if (!isnan(x[i]))
                s += x[i];
        return s;
    }
    case TB_EAGER_REDUCE_PROD: {
        double s = 1;
        for (int64_t i = 0; i < n; i++)
            s *= x[i];
        return s;
    }
    case TB_EAGER_REDUCE_AMAX: case TB_EAGER_REDUCE_AMIN: {
        double m = x[0];
        for (int64_t i = 1; i < n && !isnan(m); i++)
            if (isnan(x[i]) || (op == TB_EAGER_REDUCE_AMAX ? x[i] > m : x[i] < m))
                m = x[i];
        return m;
    }
    case TB_EAGER_REDUCE_ALL: {
        for (int64_t i = 0; i < n; i++)
            if (x[i] == 0)
                return 0;
        return 1;
    }
    case TB_EAGER_REDUCE_ANY: {
        for (int64_t i = 0; i < n; i++)
            if (x[i] != 0)
                return 1;
        return 0;
    }
    case TB_EAGER_REDUCE_COUNT_NONZERO: {
        double c = 0;
        for (int64_t i = 0; i < n; i++)
            c += x[i] != 0;
        return c;
    }
    case TB_EAGER_REDUCE_LOGSUMEXP: {
        double m = -INFINITY;
        for (int64_t i = 0; i < n; i++)
            if (x[i] > m || isnan(x[i]))
                m = x[i];
        if (isnan(m))
            return m;
        if (isinf(m))
            return m; /* all -inf -> -inf; any +inf -> +inf */
        double s = 0;
        for (int64_t i = 0; i < n; i++)
            s += exp(x[i] - m);
        return m + log(s);
    }
    default: return NAN;
    }
}

static int64_t reduce_row_i(tb_eager_reduce_op op, const int64_t *x, int64_t n) {
    switch (op) {
    case TB_EAGER_REDUCE_SUM: case TB_EAGER_REDUCE_NANSUM: {
        uint64_t s = 0;
        for (int64_t i = 0; i < n; i++)
            s += (uint64_t)x[i];
        return (int64_t)s;
    }
    case TB_EAGER_REDUCE_PROD: {
        uint64_t s = 1;
        for (int64_t i = 0; i < n; i++)
            s *= (uint64_t)x[i];
        return (int64_t)s;
    }
    case TB_EAGER_REDUCE_AMAX: case TB_EAGER_REDUCE_AMIN: {
        int64_t m = x[0];
        for (int64_t i = 1; i < n; i++)
            if (op == TB_EAGER_REDUCE_AMAX ? x[i] > m : x[i] < m)
                m = x[i];
        return m;
    }
    case TB_EAGER_REDUCE_ALL: {
        for (int64_t i = 0; i < n; i++)
            if (x[i] == 0)
                return 0;
        return 1;
    }
    case TB_EAGER_REDUCE_ANY: {
        for (int64_t i = 0; i < n; i++)
            if (x[i] != 0)
                return 1;
        return 0;
    }
    case TB_EAGER_REDUCE_COUNT_NONZERO: {
        int64_t c = 0;
        for (int64_t i = 0; i < n; i++)
            c += x[i] != 0;
        return c;
    }
    default: return 0;
    }
}

/* float32 contiguous input reduced over a trailing block: the SIMD row kernels. */
static bool try_simd_rows(tb_eager_reduce_op op, const tb_tensor *x, uint32_t dim_mask, bool keepdim,
                          tb_dtype out_dtype, tb_tensor *out) {
    if (x->dtype != TB_F32 || out_dtype != TB_F32 || !tb_tensor_is_contiguous(x) || x->ndim == 0)
        return false;
    int kernel;
    switch (op) {
    case TB_EAGER_REDUCE_SUM: case TB_EAGER_REDUCE_MEAN: kernel = TB_REDUCE_SUM; break;
    case TB_EAGER_REDUCE_AMAX: kernel = TB_REDUCE_MAX; break;
    case TB_EAGER_REDUCE_AMIN: kernel = TB_REDUCE_MIN; break;
    case TB_EAGER_REDUCE_LOGSUMEXP: kernel = TB_REDUCE_LOGSUMEXP; break;
    default: return false;
    }
    uint32_t mask = dim_mask == 0 ? (uint32_t)((1u << x->ndim) - 1) : dim_mask;
    int first = -1, last = -1;
    for (int d = 0; d < x->ndim; d++) {
        if (mask >> d & 1) {
            if (first < 0)
                first = d;
            else if (last != d - 1)
                return false; /* not one block */
            last = d;
        }
    }
    if (last != x->ndim - 1)
        return false; /* rows only (inner == 1): the kernels' fast case */
    int64_t outer = 1, len = 1;
    for (int d = 0; d < first; d++)
        outer *= x->shape[d];
    for (int d = first; d <= last; d++)
        len *= x->shape[d];
    if (len == 0)
        return false;
    int64_t shape[TB_MAX_DIMS];
    int ndim = 0;
    for (int d = 0; d < x->ndim; d++)
        if (!(mask >> d & 1))
            shape[ndim++] = x->shape[d];
        else if (keepdim)
            shape[ndim++] = 1;
    if (tb_tensor_empty(TB_F32, ndim, shape, TB_ALLOC_DEFAULT, out) != TB_OK)
        return false;
    float *y = tb_tensor_data(out);
    tb_elementwise_kernels_active()->reduce[kernel](tb_tensor_data(x), outer, len, 1, y);
    if (op == TB_EAGER_REDUCE_MEAN)
        for (int64_t i = 0; i < outer; i++)
            y[i] = (float)((double)y[i] / (double)len);
    return true;
}

/* float32 contiguous [rows, cols] summed over the leading dims (the bias gradient of a linear layer):
 * column sums with double accumulators, one pass over the rows. */
static bool try_column_sums(tb_eager_reduce_op op, const tb_tensor *x, uint32_t dim_mask, bool keepdim, tb_dtype out_dtype,
                            tb_tensor *out) {
    if ((op != TB_EAGER_REDUCE_SUM && op != TB_EAGER_REDUCE_MEAN) || x->dtype != TB_F32 || out_dtype != TB_F32 ||
        !tb_tensor_is_contiguous(x) || x->ndim < 2 || dim_mask == 0)
        return false;
    int lead = 0;
    while (lead < x->ndim && (dim_mask >> lead & 1))
        lead++;
    if (lead == 0 || lead == x->ndim || dim_mask >> lead)
        return false; /* not exactly the leading dims */
    int64_t rows = 1, cols = 1;
    for (int d = 0; d < lead; d++)
        rows *= x->shape[d];
    for (int d = lead; d < x->ndim; d++)
        cols *= x->shape[d];
    if (cols > 4096 || rows == 0)
        return false;
    int64_t shape[TB_MAX_DIMS];
    int ndim = 0;
    for (int d = 0; d < x->ndim; d++)
        if (d >= lead)
            shape[ndim++] = x->shape[d];
        else if (keepdim)
            shape[ndim++] = 1;
    if (tb_tensor_empty(TB_F32, ndim, shape, 0, out) != TB_OK)
        return false;
    double acc[4096];
    memset(acc, 0, sizeof(double) * (size_t)cols);
    const float *src = tb_tensor_data(x);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            acc[c] += src[r * cols + c];
    float *y = tb_tensor_data(out);
    for (int64_t c = 0; c < cols; c++)
        y[c] = (float)(op == TB_EAGER_REDUCE_MEAN ? acc[c] / (double)rows : acc[c]);
    return true;
}

/* ---- float32 over any set of dims, read in place ----
 * The general path below copies x, permuted and widened to double, before reducing. For float32 the
 * same double accumulation runs on x where it lies: the reduced dims (merged where their strides
 * allow) are walked for each output element, or, when x's innermost kept dim has stride 1, for a run
 * of adjacent output elements at once. This serves the [N, C, H, W] -> [C] sums of batch norm and of
 * a convolution's bias gradient and autograd's broadcast-gradient sums, which the copy made the
 * largest cost of a small CNN's training step. */

typedef struct f32_walk {
    const float *data;
    int kept_ndim; /* kept dims but the run, outermost first (size-1 dims dropped, mergeable ones merged) */
    int64_t kept_shape[TB_MAX_DIMS], kept_stride[TB_MAX_DIMS];
    int64_t run; /* output elements read side by side: the innermost kept dim when its stride is 1, else 1 */
    int reduced_ndim; /* reduced dims, outermost first, merged the same way */
    int64_t reduced_shape[TB_MAX_DIMS], reduced_stride[TB_MAX_DIMS];
    int64_t rows, len; /* output elements; elements reduced into each */
    int out_ndim;
    int64_t out_shape[TB_MAX_DIMS];
} f32_walk;

/* Appends dim (size, stride) to a dim list, merged into the previous entry when stepping through the
 * previous one is stepping `size` times through this one (the offsets they reach are then one
 * arithmetic run). */
static void walk_append(int *ndim, int64_t *shape, int64_t *stride, int64_t size, int64_t step) {
    if (*ndim > 0 && stride[*ndim - 1] == size * step) {
        shape[*ndim - 1] *= size;
        stride[*ndim - 1] = step;
        return;
    }
    shape[*ndim] = size;
    stride[*ndim] = step;
    (*ndim)++;
}

/* Describes reducing float32 x over dim_mask (0: every dim); false where the general path applies
 * (other dtypes, 0-dim or empty tensors, out-of-range dims: it reports those). */
static bool f32_walk_init(const tb_tensor *x, uint32_t dim_mask, bool keepdim, f32_walk *w) {
    memset(w, 0, sizeof *w);
    if (x->dtype != TB_F32 || x->ndim == 0 || (x->ndim < 32 && dim_mask >> x->ndim))
        return false;
    uint32_t mask = dim_mask == 0 ? (uint32_t)((1u << x->ndim) - 1) : dim_mask;
    w->rows = w->len = w->run = 1;
    for (int d = 0; d < x->ndim; d++) {
        bool reduced = mask >> d & 1;
        if (!reduced || keepdim)
            w->out_shape[w->out_ndim++] = reduced ? 1 : x->shape[d];
        if (reduced)
            w->len *= x->shape[d];
        else
            w->rows *= x->shape[d];
        if (x->shape[d] == 1)
            continue;
        if (reduced)
            walk_append(&w->reduced_ndim, w->reduced_shape, w->reduced_stride, x->shape[d], x->strides[d]);
        else
            walk_append(&w->kept_ndim, w->kept_shape, w->kept_stride, x->shape[d], x->strides[d]);
    }
    if (w->rows == 0 || w->len == 0)
        return false;
    if (w->kept_ndim > 0 && w->kept_stride[w->kept_ndim - 1] == 1) {
        w->run = w->kept_shape[w->kept_ndim - 1];
        w->kept_ndim--;
    }
    w->data = (const float *)tb_tensor_data(x);
    return true;
}

/* Sum of count floats step apart (of their squared distances to mean when squares), in double; four
 * partial sums break the add latency chain. */
static inline double strided_sum(const float *p, int64_t count, int64_t step, bool squares, double mean) {
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t i = 0;
    if (squares) {
        for (; i + 4 <= count; i += 4) {
            double v0 = (double)p[i * step] - mean, v1 = (double)p[(i + 1) * step] - mean;
            double v2 = (double)p[(i + 2) * step] - mean, v3 = (double)p[(i + 3) * step] - mean;
            s0 += v0 * v0;
            s1 += v1 * v1;
            s2 += v2 * v2;
            s3 += v3 * v3;
        }
        for (; i < count; i++) {
            double v = (double)p[i * step] - mean;
            s0 += v * v;
        }
    } else {
        for (; i + 4 <= count; i += 4) {
            s0 += (double)p[i * step];
            s1 += (double)p[(i + 1) * step];
            s2 += (double)p[(i + 2) * step];
            s3 += (double)p[(i + 3) * step];
        }
        for (; i < count; i++)
            s0 += (double)p[i * step];
    }
    return (s0 + s1) + (s2 + s3);
}

/* acc[j] += the sum, over every reduced index, of p[j] (or of (p[j] - mean[j])^2 when mean is given)
 * for j < width; p points at the first reduced element of the first output element. */
static void f32_walk_accumulate(const f32_walk *w, const float *p, int64_t width, const double *mean, double *acc) {
    int64_t index[TB_MAX_DIMS] = {0};
    const int inner = w->reduced_ndim - 1;
    const int64_t count = inner >= 0 ? w->reduced_shape[inner] : 1, step = inner >= 0 ? w->reduced_stride[inner] : 0;
    for (;;) {
        if (width == 1) {
            acc[0] += step == 1 ? strided_sum(p, count, 1, mean != NULL, mean ? mean[0] : 0.0)
                                : strided_sum(p, count, step, mean != NULL, mean ? mean[0] : 0.0);
        } else {
            for (int64_t i = 0; i < count; i++) {
                const float *q = p + i * step;
                if (mean)
                    for (int64_t j = 0; j < width; j++) {
                        double v = (double)q[j] - mean[j];
                        acc[j] += v * v;
                    }
                else
                    for (int64_t j = 0; j < width; j++)
                        acc[j] += (double)q[j];
            }
        }
        int d = inner - 1;
        for (; d >= 0; d--) {
            p += w->reduced_stride[d];
            if (++index[d] < w->reduced_shape[d])
                break;
            p -= w->reduced_stride[d] * w->reduced_shape[d];
            index[d] = 0;
        }
        if (d < 0)
            return;
    }
}

typedef enum { WALK_SUM, WALK_MEAN, WALK_VAR } walk_kind;

/* out = float32 sum, mean or variance (divisor len - correction, sqrt if take_sqrt) of w's reduction,
 * each accumulated in double and rounded once. */
static tb_status f32_walk_reduce(const f32_walk *w, walk_kind kind, double correction, bool take_sqrt, tb_tensor *out) {
    TB_TRY(tb_tensor_empty(TB_F32, w->out_ndim, w->out_shape, TB_ALLOC_DEFAULT, out));
    enum { CHUNK = 256 };
    double acc[CHUNK], mean[CHUNK];
    int64_t index[TB_MAX_DIMS] = {0};
    float *y = tb_tensor_data(out);
    const float *base = w->data;
    const double len = (double)w->len, denom = len - correction;
    for (int64_t row = 0; row < w->rows; row += w->run) {
        for (int64_t j0 = 0; j0 < w->run; j0 += CHUNK) {
            int64_t width = w->run - j0 < CHUNK ? w->run - j0 : CHUNK;
            memset(acc, 0, sizeof(double) * (size_t)width);
            f32_walk_accumulate(w, base + j0, width, NULL, acc);
            float *dst = y + row + j0;
            if (kind != WALK_VAR) {
                for (int64_t j = 0; j < width; j++)
                    dst[j] = (float)(kind == WALK_MEAN ? acc[j] / len : acc[j]);
                continue;
            }
            for (int64_t j = 0; j < width; j++)
                mean[j] = acc[j] / len;
            memset(acc, 0, sizeof(double) * (size_t)width);
            f32_walk_accumulate(w, base + j0, width, mean, acc);
            for (int64_t j = 0; j < width; j++) {
                /* N - correction <= 0 divides by zero, as torch does: inf, or NaN for 0/0 */
                double v = acc[j] / (denom > 0 ? denom : 0.0);
                dst[j] = (float)(take_sqrt ? sqrt(v) : v);
            }
        }
        for (int d = w->kept_ndim - 1; d >= 0; d--) {
            base += w->kept_stride[d];
            if (++index[d] < w->kept_shape[d])
                break;
            base -= w->kept_stride[d] * w->kept_shape[d];
            index[d] = 0;
        }
    }
    return TB_OK;
}

tb_status tb_eager_reduce(tb_eager_reduce_op op, const tb_tensor *x, uint32_t dim_mask, bool keepdim, tb_dtype out_dtype,
                          tb_tensor *out) {
    memset(out, 0, sizeof *out);
    if (try_column_sums(op, x, dim_mask, keepdim, out_dtype, out))
        return TB_OK;
    if ((unsigned)op >= TB_EAGER_REDUCE_COUNT)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "reduction %d does not exist", (int)op);
    /* the SIMD path sums f32 rows in f32 with several accumulators (as torch's cascade does); long rows
     * take it only when they are large enough for the difference to be a rounding one */
    if (try_simd_rows(op, x, dim_mask, keepdim, out_dtype, out))
        return TB_OK;
    f32_walk walk;
    if ((op == TB_EAGER_REDUCE_SUM || op == TB_EAGER_REDUCE_MEAN) && out_dtype == TB_F32 &&
        f32_walk_init(x, dim_mask, keepdim, &walk))
        return f32_walk_reduce(&walk, op == TB_EAGER_REDUCE_MEAN ? WALK_MEAN : WALK_SUM, 0.0, false, out);
    tb_domain in_domain = tb_domain_of(x->dtype);
    bool int_math = tb_domain_of(out_dtype) == TB_DOMAIN_I64 && in_domain == TB_DOMAIN_I64;
    tb_domain domain = int_math ? TB_DOMAIN_I64 : TB_DOMAIN_F64;
    reduce_layout layout;
    TB_TRY(make_layout(x, dim_mask, keepdim, domain, &layout));
    if (layout.len == 0 && (op == TB_EAGER_REDUCE_AMAX || op == TB_EAGER_REDUCE_AMIN)) {
        tb_tensor_release(&layout.data);
        return tb_error_set(TB_ERR_INVALID_ARGUMENT,
                            "%s(): Expected reduction dim to have non-zero size.", tb_eager_reduce_names[op]);
    }
    tb_tensor result;
    tb_status status = new_result(tb_domain_dtype(domain), &layout, &result);
    if (status != TB_OK) {
        tb_tensor_release(&layout.data);
        return status;
    }
    if (domain == TB_DOMAIN_I64) {
        const int64_t *src = tb_tensor_data(&layout.data);
        int64_t *dst = tb_tensor_data(&result);
        for (int64_t r = 0; r < layout.rows; r++)
            dst[r] = reduce_row_i(op, src + r * layout.len, layout.len);
    } else {
        const double *src = tb_tensor_data(&layout.data);
        double *dst = tb_tensor_data(&result);
        for (int64_t r = 0; r < layout.rows; r++)
            dst[r] = reduce_row_f(op, src + r * layout.len, layout.len);
    }
    tb_tensor_release(&layout.data);
    if (!out->storage && result.dtype != out_dtype) {
        status = tb_tensor_empty(out_dtype, result.ndim, result.shape, TB_ALLOC_DEFAULT, out);
        if (status != TB_OK) {
            tb_tensor_release(&result);
            return status;
        }
    }
    return write_result(&result, out);
}

tb_status tb_eager_var(const tb_tensor *x, uint32_t dim_mask, double correction, bool keepdim, bool take_sqrt,
                       tb_tensor *out) {
    memset(out, 0, sizeof *out);
    f32_walk walk;
    if (f32_walk_init(x, dim_mask, keepdim, &walk))
        return f32_walk_reduce(&walk, WALK_VAR, correction, take_sqrt, out);
    reduce_layout layout;
    TB_TRY(make_layout(x, dim_mask, keepdim, TB_DOMAIN_F64, &layout));
    tb_tensor result;
    tb_status status = new_result(TB_F64, &layout, &result);
    if (status != TB_OK) {
        tb_tensor_release(&layout.data);
        return status;
    }
    const double *src = tb_tensor_data(&layout.data);
    double *dst = tb_tensor_data(&result);
    for (int64_t r = 0; r < layout.rows; r++) {
        const double *row = src + r * layout.len;
        double mean = 0, m2 = 0;
        for (int64_t i = 0; i < layout.len; i++)
            mean += row[i];
        mean /= (double)layout.len;
        for (int64_t i = 0; i < layout.len; i++)
            m2 += (row[i] - mean) * (row[i] - mean);
        double denom = (double)layout.len - correction;
        /* N - correction <= 0 divides by zero, as torch does: inf, or NaN for 0/0 */
        double v = layout.len == 0 ? NAN : m2 / (denom > 0 ? denom : 0.0);
        dst[r] = take_sqrt ? sqrt(v) : v;
    }
    tb_tensor_release(&layout.data);
    tb_dtype out_dtype = tb_dtype_category_of(x->dtype) == TB_CATEGORY_FLOATING ? x->dtype : TB_F32;
    if (!out->storage && out_dtype != TB_F64) {
        status = tb_tensor_empty(out_dtype, result.ndim, result.shape, TB_ALLOC_DEFAULT, out);
        if (status != TB_OK) {
            tb_tensor_release(&result);
            return status;
        }
    }
    return write_result(&result, out);
}

tb_status tb_eager_norm(const tb_tensor *x, double p, uint32_t dim_mask, bool keepdim, tb_dtype out_dtype, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    reduce_layout layout;
    TB_TRY(make_layout(x, dim_mask, keepdim, TB_DOMAIN_F64, &layout));
    tb_tensor result;
    tb_status status = new_result(TB_F64, &layout, &result);
    if (status != TB_OK) {
        tb_tensor_release(&layout.data);
        return status;
    }
    const double *src = tb_tensor_data(&layout.data);
    double *dst = tb_tensor_data(&result);
    for (int64_t r = 0; r < layout.rows; r++) {
        const double *row = src + r * layout.len;
        double acc;
        if (isinf(p)) {
            acc = p > 0 ? 0 : INFINITY;
            if (p < 0 && layout.len == 0)
                acc = INFINITY;
            for (int64_t i = 0; i < layout.len; i++) {
                double a = fabs(row[i]);
                if (isnan(a)) {
                    acc = NAN;
                    break;
                }
                acc = p > 0 ? (a > acc ? a : acc) : (a < acc ? a : acc);
            }
        } else if (p == 0) {
            acc = 0;
            for (int64_t i = 0; i < layout.len; i++)
                acc += row[i] != 0;
        } else {
            acc = 0;
            for (int64_t i = 0; i < layout.len; i++)
                acc += p == 2 ? row[i] * row[i] : p == 1 ? fabs(row[i]) : pow(fabs(row[i]), p);
            acc = p == 1 ? acc : p == 2 ? sqrt(acc) : pow(acc, 1 / p);
        }
        dst[r] = acc;
    }
    tb_tensor_release(&layout.data);
    if (!out->storage && out_dtype != TB_F64) {
        status = tb_tensor_empty(out_dtype, result.ndim, result.shape, TB_ALLOC_DEFAULT, out);
        if (status != TB_OK) {
            tb_tensor_release(&result);
            return status;
        }
    }
    return write_result(&result, out);
}

tb_status tb_eager_max_dim(bool is_max, const tb_tensor *x, int64_t dim, bool keepdim, tb_tensor *values,
                           tb_tensor *indices) {
    uint32_t mask = 0;
    if (x->ndim > 0) {
        int d;
        TB_TRY(tb_normalize_dim(dim, x->ndim, &d));
        mask = 1u << d;
    }
    tb_domain domain = tb_domain_of(x->dtype) == TB_DOMAIN_I64 ? TB_DOMAIN_I64 : TB_DOMAIN_F64;
    reduce_layout layout;
    TB_TRY(make_layout(x, mask, keepdim, domain, &layout));
    if (x->ndim == 0) {
        layout.out_ndim = 0;
        layout.rows = 1;
        layout.len = 1;
    }
    if (layout.len == 0) {
        tb_tensor_release(&layout.data);
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%s(): Expected reduction dim %lld to have non-zero size.",
                            is_max ? "max" : "min", (long long)dim);
    }
    tb_tensor vals, idx;
    tb_status status = new_result(tb_domain_dtype(domain), &layout, &vals);
    if (status == TB_OK) {
        status = new_result(TB_I64, &layout, &idx);
        if (status != TB_OK)
            tb_tensor_release(&vals);
    }
    if (status != TB_OK) {
        tb_tensor_release(&layout.data);
        return status;
    }
    int64_t *ix = tb_tensor_data(&idx);
    for (int64_t r = 0; r < layout.rows; r++) {
        int64_t best = 0;
        if (domain == TB_DOMAIN_F64) {
            const double *row = (const double *)tb_tensor_data(&layout.data) + r * layout.len;
            for (int64_t i = 1; i < layout.len && !isnan(row[best]); i++)
                if (isnan(row[i]) || (is_max ? row[i] > row[best] : row[i] < row[best]))
                    best = i;
            ((double *)tb_tensor_data(&vals))[r] = row[best];
        } else {
            const int64_t *row = (const int64_t *)tb_tensor_data(&layout.data) + r * layout.len;
            for (int64_t i = 1; i < layout.len; i++)
                if (is_max ? row[i] > row[best] : row[i] < row[best])
                    best = i;
            ((int64_t *)tb_tensor_data(&vals))[r] = row[best];
        }
        ix[r] = best;
    }
    tb_tensor_release(&layout.data);
    if (values) {
        tb_tensor typed;
        status = tb_tensor_contiguous(&vals, x->dtype, &typed);
        tb_tensor_release(&vals);
        if (status != TB_OK) {
            tb_tensor_release(&idx);
            return status;
        }
        *values = typed;
    } else {
        tb_tensor_release(&vals);
    }
    if (indices)
        *indices = idx;
    else
        tb_tensor_release(&idx);
    return TB_OK;
}

/* log(exp(a) + exp(b)) without overflow; exact when both are the same infinity. */
static double log_add_exp(double a, double b) {
    if (isnan(a) || isnan(b))
        return NAN;
    double high = a > b ? a : b, low = a > b ? b : a;
    if (isinf(low) && low < 0)
        return high;
    if (high == low)
        return high + log(2.0);
    return high + log1p(exp(low - high));
}

static double scan_step(tb_eager_scan_op op, double s, double v) {
    return op == TB_EAGER_SCAN_PROD ? s * v : op == TB_EAGER_SCAN_LOGSUMEXP ? log_add_exp(s, v) : s + v;
}

tb_status tb_eager_cumulative(tb_eager_scan_op op, const tb_tensor *x, int64_t dim, tb_dtype out_dtype, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    int d = 0;
    if (x->ndim > 0)
        TB_TRY(tb_normalize_dim(dim, x->ndim, &d));
    if (op < TB_EAGER_SCAN_SUM || op > TB_EAGER_SCAN_LOGSUMEXP)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "cumulative: unknown scan %d", (int)op);
    tb_domain domain = tb_domain_of(out_dtype) == TB_DOMAIN_I64 ? TB_DOMAIN_I64 : TB_DOMAIN_F64;
    if (op == TB_EAGER_SCAN_LOGSUMEXP && domain == TB_DOMAIN_I64)
        return tb_error_set(TB_ERR_DTYPE, "logcumsumexp: expected a floating dtype, got %s", tb_dtype_name(out_dtype));
    bool is_prod = op == TB_EAGER_SCAN_PROD;
    /* move dim last */
    int64_t order[TB_MAX_DIMS];
    int k = 0;
    for (int i = 0; i < x->ndim; i++)
        if (i != d)
            order[k++] = i;
    if (x->ndim > 0)
        order[k++] = d;
    tb_tensor permuted, work;
    TB_TRY(tb_tensor_permute(x, x->ndim, order, &permuted));
    tb_status status = tb_tensor_contiguous(&permuted, tb_domain_dtype(domain), &work);
    tb_tensor_release(&permuted);
    if (status != TB_OK)
        return status;
    /* work may alias x's storage when x already was a contiguous array of the domain type */
    tb_tensor acc;
    status = tb_tensor_empty(work.dtype, work.ndim, work.shape, TB_ALLOC_DEFAULT, &acc);
    if (status != TB_OK) {
        tb_tensor_release(&work);
        return status;
    }
    int64_t len = x->ndim ? x->shape[d] : 1, n = tb_tensor_numel(&work), rows = len ? n / len : 0;
    for (int64_t r = 0; r < rows; r++) {
        if (domain == TB_DOMAIN_F64) {
            const double *src = (const double *)tb_tensor_data(&work) + r * len;
            double *dst = (double *)tb_tensor_data(&acc) + r * len;
            double s = is_prod ? 1 : op == TB_EAGER_SCAN_LOGSUMEXP ? -INFINITY : 0;
            for (int64_t i = 0; i < len; i++)
                dst[i] = s = scan_step(op, s, src[i]);
        } else {
            const int64_t *src = (const int64_t *)tb_tensor_data(&work) + r * len;
            int64_t *dst = (int64_t *)tb_tensor_data(&acc) + r * len;
            uint64_t s = is_prod ? 1 : 0;
            for (int64_t i = 0; i < len; i++)
                dst[i] = (int64_t)(s = is_prod ? s * (uint64_t)src[i] : s + (uint64_t)src[i]);
        }
    }
    tb_tensor_release(&work);
    /* undo the permutation */
    int64_t inverse[TB_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++)
        inverse[order[i]] = i;
    tb_tensor back;
    status = tb_tensor_permute(&acc, x->ndim, inverse, &back);
    tb_tensor_release(&acc);
    if (status != TB_OK)
        return status;
    bool fresh = !out->storage;
    if (fresh)
        status = tb_tensor_empty(out_dtype, x->ndim, x->shape, TB_ALLOC_DEFAULT, out);
    if (status == TB_OK)
        status = tb_tensor_copy(out, &back);
    tb_tensor_release(&back);
    if (status != TB_OK && fresh)
        tb_tensor_release(out);
    return status;
}

/* d prod / d x_i = the product of the other reduced elements (exact with zeros: one zero in a row
 * gets the product of the rest, every other element 0). g is the output gradient expanded to x's
 * shape; out receives x's shape in g's dtype. */
tb_status tb_eager_prod_backward(const tb_tensor *x, uint32_t dim_mask, const tb_tensor *g, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    reduce_layout lx, lg;
    TB_TRY(make_layout(x, dim_mask, false, TB_DOMAIN_F64, &lx));
    tb_status status = make_layout(g, dim_mask, false, TB_DOMAIN_F64, &lg);
    if (status != TB_OK) {
        tb_tensor_release(&lx.data);
        return status;
    }
    tb_tensor result;
    status = tb_tensor_empty(TB_F64, lx.data.ndim, lx.data.shape, 0, &result);
    if (status == TB_OK) {
        const double *xv = tb_tensor_data(&lx.data), *gv = tb_tensor_data(&lg.data);
        double *o = tb_tensor_data(&result);
        for (int64_t r = 0; r < lx.rows; r++) {
            const double *row = xv + r * lx.len, *grow = gv + r * lx.len;
            double *orow = o + r * lx.len, others = 1;
            int64_t zeros = 0, zero_at = -1;
            for (int64_t i = 0; i < lx.len; i++) {
                if (row[i] == 0) {
                    zeros++;
                    zero_at = i;
                } else {
                    others *= row[i];
                }
            }
            for (int64_t i = 0; i < lx.len; i++)
                orow[i] = zeros == 0 ? grow[i] * others / row[i] : (zeros == 1 && i == zero_at ? grow[i] * others : 0.0);
        }
        int64_t inverse[TB_MAX_DIMS];
        for (int d = 0; d < x->ndim; d++)
            inverse[lx.order[d]] = d;
        /* result is laid out as the permuted x; view it back and copy to x's order */
        tb_tensor shaped, back;
        int64_t permuted_shape[TB_MAX_DIMS];
        for (int d = 0; d < x->ndim; d++)
            permuted_shape[d] = x->shape[lx.order[d]];
        status = tb_tensor_reshape(&result, x->ndim, permuted_shape, &shaped);
        if (status == TB_OK) {
            status = tb_tensor_permute(&shaped, x->ndim, inverse, &back);
            tb_tensor_release(&shaped);
        }
        if (status == TB_OK) {
            status = tb_tensor_contiguous(&back, g->dtype, out);
            tb_tensor_release(&back);
        }
        tb_tensor_release(&result);
    }
    tb_tensor_release(&lx.data);
    tb_tensor_release(&lg.data);
    return status;
}
