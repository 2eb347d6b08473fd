/* Rearrangements of the eager layer over every dtype: flip and roll (each output row of the last dim
 * is one or two runs of a source row, so they copy with memcpy) and tril/triu. Inputs are made
 * contiguous first; results are new contiguous tensors. */
#include <string.h>

#include "eager/eager_internal.h"

/* out[c] = x[source(c)] where, per dim d, the source coordinate is size-1-c when flip_mask has d, else
 * (c - shift[d]) mod size. x is contiguous; out is allocated here. */
static tb_status rearrange(const tb_tensor *x_in, uint32_t flip_mask, const int64_t *shifts, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    int ndim = x_in->ndim;
    if (ndim < 32 && ndim > 0 && flip_mask >> ndim)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "flip: dim mask 0x%x names a dim past the input's %d",
                            (unsigned)flip_mask, ndim);
    tb_tensor x;
    TB_TRY(tb_tensor_contiguous(x_in, x_in->dtype, &x));
    tb_status status = tb_tensor_empty(x.dtype, ndim, x.shape, 0, out);
    int64_t n = tb_tensor_numel(&x);
    if (status != TB_OK || n == 0) {
        tb_tensor_release(&x);
        return status;
    }
    if (ndim == 0) {
        memcpy(tb_tensor_data(out), tb_tensor_data(&x), tb_dtype_size(x.dtype));
        tb_tensor_release(&x);
        return TB_OK;
    }
    int64_t shift[TB_MAX_DIMS], strides[TB_MAX_DIMS];
    for (int d = 0; d < ndim; d++) {
        int64_t size = x.shape[d], s = shifts ? shifts[d] % size : 0;
        shift[d] = s < 0 ? s + size : s;
    }
    tb_contiguous_strides(ndim, x.shape, strides);
    size_t width = tb_dtype_size(x.dtype);
    int64_t len = x.shape[ndim - 1], rows = n / len, last_shift = shift[ndim - 1];
    bool last_flipped = flip_mask >> (ndim - 1) & 1;
    const char *src = tb_tensor_data(&x);
    char *dst = tb_tensor_data(out);
    for (int64_t r = 0; r < rows; r++) {
        /* the source row of output row r */
        int64_t rest = r, from = 0;
        for (int d = ndim - 2; d >= 0; d--) {
            int64_t c = rest % x.shape[d];
            rest /= x.shape[d];
            c = (flip_mask >> d & 1) ? x.shape[d] - 1 - c : (c - shift[d] + x.shape[d]) % x.shape[d];
            from += c * strides[d];
        }
        const char *in = src + from * (int64_t)width;
        char *row = dst + r * len * (int64_t)width;
        if (last_flipped) {
            for (int64_t i = 0; i < len; i++)
                memcpy(row + i * (int64_t)width, in + (len - 1 - i) * (int64_t)width, width);
        } else { /* out[i] = in[(i - s) mod len]: in[len - s ..] then in[0 .. len - s] */
            memcpy(row, in + (len - last_shift) * (int64_t)width, (size_t)last_shift * width);
            memcpy(row + last_shift * (int64_t)width, in, (size_t)(len - last_shift) * width);
        }
    }
    tb_tensor_release(&x);
    return TB_OK;
}

tb_status tb_eager_flip(const tb_tensor *x, uint32_t dim_mask, tb_tensor *out) {
    return rearrange(x, dim_mask, NULL, out);
}

tb_status tb_eager_roll(const tb_tensor *x, const int64_t *shifts, tb_tensor *out) {
    return rearrange(x, 0, shifts, out);
}

tb_status tb_eager_triangle(const tb_tensor *x_in, int64_t diagonal, bool upper, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    if (x_in->ndim < 2)
        return tb_error_set(TB_ERR_SHAPE, "%s: input tensor must have at least 2 dimensions, got %d",
                            upper ? "triu" : "tril", x_in->ndim);
    tb_tensor x;
    TB_TRY(tb_tensor_contiguous(x_in, x_in->dtype, &x));
    tb_status status = tb_tensor_empty(x.dtype, x.ndim, x.shape, 0, out);
    if (status != TB_OK) {
        tb_tensor_release(&x);
        return status;
    }
    int64_t rows = x.shape[x.ndim - 2], cols = x.shape[x.ndim - 1], n = tb_tensor_numel(&x);
    int64_t matrices = rows > 0 && cols > 0 ? n / (rows * cols) : 0;
    size_t width = tb_dtype_size(x.dtype);
    const char *src = tb_tensor_data(&x);
    char *dst = tb_tensor_data(out);
    for (int64_t m = 0; m < matrices; m++)
        for (int64_t r = 0; r < rows; r++) {
            /* kept columns: c - r <= diagonal (lower) or c - r >= diagonal (upper) */
            int64_t bound = r + diagonal, begin, end;
            if (upper) {
                begin = bound < 0 ? 0 : bound > cols ? cols : bound;
                end = cols;
            } else {
                begin = 0;
                end = bound + 1 < 0 ? 0 : bound + 1 > cols ? cols : bound + 1;
            }
            int64_t at = (m * rows + r) * cols;
            char *row = dst + at * (int64_t)width;
            memset(row, 0, (size_t)cols * width);
            if (end > begin)
                memcpy(row + begin * (int64_t)width, src + (at + begin) * (int64_t)width, (size_t)(end - begin) * width);
        }
    tb_tensor_release(&x);
    return TB_OK;
}
