/* Python bindings of the nn ops (include/torchburn/ops_nn.h): convolution, pooling, normalization,
 * losses and backward ops. Arguments are positional (torchburn/nn_ops.py supplies names, defaults and
 * torch-style argument forms); arrays are imported zero-copy, ops run with the GIL released, and
 * results come back as torchburn Tensors (None for outputs an output_mask skipped). */
#include "kernels/gemm.h"
#include "pyext.h"
#include "torchburn/ops_nn.h"

enum { MAX_TENSOR_ARGS = 8, MAX_RESULTS = 5 };

/* Imported array arguments, released together. */
typedef struct nn_scope {
    tb_tensor tensors[MAX_TENSOR_ARGS];
    int count;
} nn_scope;

static void scope_release(nn_scope *scope) {
    for (int i = 0; i < scope->count; i++)
        tb_tensor_release(&scope->tensors[i]);
    scope->count = 0;
}

/* Imports `object` into the scope; None gives NULL when optional. Returns 0, or -1 with an exception
 * set (the scope is released then). */
static int import_arg(nn_scope *scope, PyObject *object, const char *name, int optional, const tb_tensor **out) {
    if (optional && object == Py_None) {
        *out = NULL;
        return 0;
    }
    if (scope->count >= MAX_TENSOR_ARGS) {
        scope_release(scope);
        PyErr_SetString(PyExc_RuntimeError, "torchburn._C: too many tensor arguments");
        return -1;
    }
    tb_tensor *slot = &scope->tensors[scope->count];
    if (tb_py_import_tensor(object, name, slot) != 0) {
        scope_release(scope);
        return -1;
    }
    scope->count++;
    *out = slot;
    return 0;
}

static int check_nargs(Py_ssize_t nargs, Py_ssize_t expected, const char *name) {
    if (nargs == expected)
        return 0;
    PyErr_Format(PyExc_TypeError, "_C.%s takes %zd arguments, got %zd", name, expected, nargs);
    return -1;
}

/* A pair of ints from a 2-sequence of ints. */
static int parse_pair(PyObject *object, const char *name, int64_t out[2]) {
    PyObject *sequence = PySequence_Fast(object, "expected a pair of ints");
    if (!sequence)
        return -1;
    if (PySequence_Fast_GET_SIZE(sequence) != 2) {
        Py_DECREF(sequence);
        PyErr_Format(PyExc_ValueError, "%s must have 2 values (height, width)", name);
        return -1;
    }
    for (int i = 0; i < 2; i++) {
        long long value = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(sequence, i));
        if (value == -1 && PyErr_Occurred()) {
            Py_DECREF(sequence);
            return -1;
        }
        out[i] = value;
    }
    Py_DECREF(sequence);
    return 0;
}

/* output_mask: a 3-sequence of truthy values. */
static int parse_mask(PyObject *object, bool mask[3]) {
    PyObject *sequence = PySequence_Fast(object, "output_mask must be a sequence of 3 bools");
    if (!sequence)
        return -1;
    if (PySequence_Fast_GET_SIZE(sequence) != 3) {
        Py_DECREF(sequence);
        PyErr_SetString(PyExc_ValueError, "output_mask must have 3 entries");
        return -1;
    }
    for (int i = 0; i < 3; i++) {
        int truth = PyObject_IsTrue(PySequence_Fast_GET_ITEM(sequence, i));
        if (truth < 0) {
            Py_DECREF(sequence);
            return -1;
        }
        mask[i] = truth != 0;
    }
    Py_DECREF(sequence);
    return 0;
}

static int parse_int(PyObject *object, int64_t *out) {
    long long value = PyLong_AsLongLong(object);
    if (value == -1 && PyErr_Occurred())
        return -1;
    *out = value;
    return 0;
}

static int parse_float(PyObject *object, float *out) {
    double value = PyFloat_AsDouble(object);
    if (value == -1.0 && PyErr_Occurred())
        return -1;
    *out = (float)value;
    return 0;
}

static int parse_bool(PyObject *object, bool *out) {
    int truth = PyObject_IsTrue(object);
    if (truth < 0)
        return -1;
    *out = truth != 0;
    return 0;
}

/* One result: a Tensor, or None when the op left it zeroed. */
static PyObject *wrap_or_none(tb_tensor *tensor) {
    if (!tensor->storage)
        Py_RETURN_NONE;
    return tb_py_tensor_wrap(tensor);
}

/* Releases the scope, raises on failure, else returns one Tensor (count 1) or a tuple of `count`
 * results (each a Tensor or None). Takes over every result. */
static PyObject *finish(nn_scope *scope, tb_status status, tb_tensor *results, int count) {
    scope_release(scope);
    if (status != TB_OK) {
        for (int i = 0; i < count; i++)
            tb_tensor_release(&results[i]);
        return tb_py_raise(status);
    }
    if (count == 1)
        return wrap_or_none(&results[0]);
    PyObject *tuple = PyTuple_New(count);
    for (int i = 0; i < count; i++) {
        PyObject *item = tuple ? wrap_or_none(&results[i]) : NULL;
        if (!item) {
            /* a failed wrap has already released its own tensor */
            for (int j = tuple ? i + 1 : i; j < count; j++)
                tb_tensor_release(&results[j]);
            Py_XDECREF(tuple);
            return NULL;
        }
        PyTuple_SET_ITEM(tuple, i, item);
    }
    return tuple;
}

/* ---- convolution ---- */

static PyObject *py_conv2d(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    /* conv2d(x, weight, bias, stride, padding, extra_padding, dilation, groups, scale, shift, activation, residual) */
    if (check_nargs(nargs, 12, "conv2d") != 0)
        return NULL;
    tb_conv2d_params params;
    int64_t activation;
    if (parse_pair(args[3], "stride", params.stride) || parse_pair(args[4], "padding", params.padding) ||
        parse_pair(args[5], "extra_padding", params.extra_padding) || parse_pair(args[6], "dilation", params.dilation) ||
        parse_int(args[7], &params.groups) || parse_int(args[10], &activation))
        return NULL;
    nn_scope scope = {.count = 0};
    const tb_tensor *x, *w, *b, *scale, *shift, *residual;
    if (import_arg(&scope, args[0], "input", 0, &x) || import_arg(&scope, args[1], "weight", 0, &w) ||
        import_arg(&scope, args[2], "bias", 1, &b) || import_arg(&scope, args[8], "scale", 1, &scale) ||
        import_arg(&scope, args[9], "shift", 1, &shift) || import_arg(&scope, args[11], "residual", 1, &residual))
        return NULL;
    tb_conv2d_epilogue epilogue = {.scale = scale, .shift = shift, .activation = (int)activation, .residual = residual};
    tb_tensor result;
    tb_status status;
    Py_BEGIN_ALLOW_THREADS
    status = tb_op_conv2d_fused(x, w, b, &params, &epilogue, &result);
    Py_END_ALLOW_THREADS
    return finish(&scope, status, &result, 1);
}

static PyObject *py_conv2d_backward(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    /* conv2d_backward(grad_output, x, weight, stride, padding, dilation, groups, output_mask) */
    if (check_nargs(nargs, 8, "conv2d_backward") != 0)
        return NULL;
    tb_conv2d_params params;
    memset(&params, 0, sizeof params);
    bool mask[3];
    if (parse_pair(args[3], "stride", params.stride) || parse_pair(args[4], "padding", params.padding) ||
        parse_pair(args[5], "dilation", params.dilation) || parse_int(args[6], &params.groups) || parse_mask(args[7], mask))
        return NULL;
    nn_scope scope = {.count = 0};
    const tb_tensor *g, *x, *w;
    if (import_arg(&scope, args[0], "grad_output", 0, &g) || import_arg(&scope, args[1], "input", 0, &x) ||
        import_arg(&scope, args[2], "weight", 0, &w))
        return NULL;
    tb_tensor results[3];
    tb_status status;
    Py_BEGIN_ALLOW_THREADS
    status = tb_op_conv2d_backward(g, x, w, &params, mask, &results[0], &results[1], &results[2]);
    Py_END_ALLOW_THREADS
    return finish(&scope, status, results, 3);
}

/* ---- pooling ---- */

static int parse_pool(PyObject *const *args, bool with_dilation, tb_pool2d_params *p) {
    /* args: kernel, stride, padding, [dilation,] ... */
    memset(p, 0, sizeof *p);
    p->dilation[0] = p->dilation[1] = 1;
    if (parse_pair(args[0], "kernel_size", p->kernel) || parse_pair(args[1], "stride", p->stride) ||
        parse_pair(args[2], "padding", p->padding))
        return -1;
    if (with_dilation && parse_pair(args[3], "dilation", p->dilation))
        return -1;
    return 0;
}

static PyObject *py_max_pool2d(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    /* max_pool2d(x, kernel, stride, padding, dilation, ceil_mode) -> (values, indices) */
    if (check_nargs(nargs, 6, "max_pool2d") != 0)
        return NULL;
    tb_pool2d_params p;
    if (parse_pool(args + 1, true, &p) || parse_bool(args[5], &p.ceil_mode))
        return NULL;
    nn_scope scope = {.count = 0};
    const tb_tensor *x;
    if (import_arg(&scope, args[0], "input", 0, &x))
        return NULL;
    tb_tensor results[2];
    tb_status status;
    Py_BEGIN_ALLOW_THREADS
    status = tb_op_max_pool2d(x, &p, &results[0], &results[1]);
    Py_END_ALLOW_THREADS
    return finish(&scope, status, results, 2);
}

static PyObject *py_max_pool2d_backward(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    /* max_pool2d_backward(grad_output, x, indices) */
    if (check_nargs(nargs, 3, "max_pool2d_backward") != 0)
        return NULL;
    nn_scope scope = {.count = 0};
    const tb_tensor *g, *x, *indices;
    if (import_arg(&scope, args[0], "grad_output", 0, &g) || import_arg(&scope, args[1], "input", 0, &x) ||
        import_arg(&scope, args[2], "indices", 0, &indices))
        return NULL;
    tb_tensor result;
    tb_status status;
    Py_BEGIN_ALLOW_THREADS
    status = tb_op_max_pool2d_backward(g, x, indices, &result);
    Py_END_ALLOW_THREADS
    return finish(&scope, status, &result, 1);
}

/* avg options at args[0..2]: ceil_mode, count_include_pad, divisor_override (None or int). */
static int parse_avg_options(PyObject *const *args, tb_pool2d_params *p) {
    if (parse_bool(args[0], &p->ceil_mode) || parse_bool(args[1], &p->count_include_pad))
        return -1;
    p->divisor_override = 0;
    if (args[2] != Py_None) {
        if (parse_int(args[2], &p->divisor_override))
            return -1;
        if (p->divisor_override <= 0) {
            PyErr_SetString(PyExc_ValueError, "avg_pool2d: divisor_override must be > 0");
            return -1;
        }
    }
    return 0;
}

static PyObject *py_avg_pool2d(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    /* avg_pool2d(x, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override) */
    if (check_nargs(nargs, 7, "avg_pool2d") != 0)
        return NULL;
    tb_pool2d_params p;
    if (parse_pool(args + 1, false, &p) || parse_avg_options(args + 4, &p))
        return NULL;
    nn_scope scope = {.count = 0};
    const tb_tensor *x;
    if (import_arg(&scope, args[0], "input", 0, &x))
        return NULL;
    tb_tensor result;
    tb_status status;
    Py_BEGIN_ALLOW_THREADS
    status = tb_op_avg_pool2d(x, &p, &result);
    Py_END_ALLOW_THREADS
    return finish(&scope, status, &result, 1);
}

static PyObject *py_avg_pool2d_backward(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    /* avg_pool2d_backward(grad_output, x, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override) */
    if (check_nargs(nargs, 8, "avg_pool2d_backward") != 0)
        return NULL;
    tb_pool2d_params p;
    if (parse_pool(args + 2, false, &p) || parse_avg_options(args + 5, &p))
        return NULL;
    nn_scope scope = {.count = 0};
    const tb_tensor *g, *x;
    if (import_arg(&scope, args[0], "grad_output", 0, &g) || import_arg(&scope, args[1], "input", 0, &x))
        return NULL;
    tb_tensor result;
    tb_status status;
    Py_BEGIN_ALLOW_THREADS
    status = tb_op_avg_pool2d_backward(g, x, &p, &result);
    Py_END_ALLOW_THREADS
    return finish(&scope, status, &result, 1);
}

static PyObject *py_adaptive_pool2d(PyObject *const *args, Py_ssize_t nargs, bool is_max) {
    /* adaptive_{avg,max}_pool2d(x, out_h, out_w) */
    if (check_nargs(nargs, 3, is_max ? "adaptive_max_pool2d" : "adaptive_avg_pool2d") != 0)
        return NULL;
    int64_t out_h, out_w;
    if (parse_int(args[1], &out_h) || parse_int(args[2], &out_w))
        return NULL;
    nn_scope scope = {.count = 0};
    const tb_tensor *x;
    if (import_arg(&scope, args[0], "input", 0, &x))
        return NULL;
    tb_tensor results[2];
    tb_status status;
    Py_BEGIN_ALLOW_THREADS
    status = is_max ? tb_op_adaptive_max_pool2d(x, out_h, out_w, &results[0], &results[1])
                    : tb_op_adaptive_avg_pool2d(x, out_h, out_w, &results[0]);
    Py_END_ALLOW_THREADS
    return finish(&scope, status, results, is_max ? 2 : 1);
}

static PyObject *py_adaptive_avg_pool2d(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    return py_adaptive_pool2d(args, nargs, false);
}

static PyObject *py_adaptive_max_pool2d(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    return py_adaptive_pool2d(args, nargs, true);
}

static PyObject *py_adaptive_avg_pool2d_backward(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (check_nargs(nargs, 2, "adaptive_avg_pool2d_backward") != 0)
        return NULL;
    nn_scope scope = {.count = 0};
    const tb_tensor *g, *x;
    if (import_arg(&scope, args[0], "grad_output", 0, &g) || import_arg(&scope, args[1], "input", 0, &x))
        return NULL;
    tb_tensor result;
    tb_status status;
    Py_BEGIN_ALLOW_THREADS
    status = tb_op_adaptive_avg_pool2d_backward(g, x, &result);
    Py_END_ALLOW_THREADS
    return finish(&scope, status, &result, 1);
}

/* ---- normalization ---- */

static PyObject *py_batch_norm(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    /* batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps)
     * -> (out, save_mean, save_invstd, new_running_mean or None, new_running_var or None) */
    if (check_nargs(nargs, 8, "batch_norm") != 0)
        return NULL;
    bool training;
    float momentum, eps;
    if (parse_bool(args[5], &training) || parse_float(args[6], &momentum) || parse_float(args[7], &eps))
        return NULL;
    nn_scope scope = {.count = 0};
    const tb_tensor *x, *w, *b, *rm, *rv;
    if (import_arg(&scope, args[0], "input", 0, &x) || import_arg(&scope, args[1], "weight", 1, &w) ||
        import_arg(&scope, args[2], "bias", 1, &b) || import_arg(&scope, args[3], "running_mean", 1, &rm) ||
        import_arg(&scope, args[4], "running_var", 1, &rv))
        return NULL;
    tb_tensor r[5];
    tb_status status;
    Py_BEGIN_ALLOW_THREADS
    status = tb_op_batch_norm(x, w, b, rm, rv, training, momentum, eps, &r[0], &r[1], &r[2], &r[3], &r[4]);
    Py_END_ALLOW_THREADS
    return finish(&scope, status, r, 5);
}

static PyObject *py_batch_norm_fold(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    /* batch_norm_fold(weight, bias, running_mean, running_var, eps) -> (scale, shift) */
    if (check_nargs(nargs, 5, "batch_norm_fold") != 0)
        return NULL;
    float eps;
    if (parse_float(args[4], &eps))
        return NULL;
    nn_scope scope = {.count = 0};
    const tb_tensor *w, *b, *rm, *rv;
    if (import_arg(&scope, args[0], "weight", 1, &w) || import_arg(&scope, args[1], "bias", 1, &b) ||
        import_arg(&scope, args[2], "running_mean", 0, &rm) || import_arg(&scope, args[3], "running_var", 0, &rv))
        return NULL;
    tb_tensor r[2];
    tb_status status;
    Py_BEGIN_ALLOW_THREADS
    status = tb_op_batch_norm_fold(w, b, rm, rv, eps, &r[0], &r[1]);
    Py_END_ALLOW_THREADS
    return finish(&scope, status, r, 2);
}

static PyObject *py_batch_norm_backward(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    /* batch_norm_backward(grad, x, weight, running_mean, running_var, save_mean, save_invstd, train, eps, mask) */
    if (check_nargs(nargs, 10, "batch_norm_backward") != 0)
        return NULL;
    bool train, mask[3];
    float eps;
    if (parse_bool(args[7], &train) || parse_float(args[8], &eps) || parse_mask(args[9], mask))
        return NULL;
    nn_scope scope = {.count = 0};
    const tb_tensor *g, *x, *w, *rm, *rv, *sm, *si;
    if (import_arg(&scope, args[0], "grad_output", 0, &g) || import_arg(&scope, args[1], "input", 0, &x) ||
        import_arg(&scope, args[2], "weight", 1, &w) || import_arg(&scope, args[3], "running_mean", 1, &rm) ||
        import_arg(&scope, args[4], "running_var", 1, &rv) || import_arg(&scope, args[5], "save_mean", 1, &sm) ||
        import_arg(&scope, args[6], "save_invstd", 1, &si))
        return NULL;
    tb_tensor r[3];
    tb_status status;
    Py_BEGIN_ALLOW_THREADS
    status = tb_op_batch_norm_backward(g, x, w, rm, rv, sm, si, train, eps, mask, &r[0], &r[1], &r[2]);
    Py_END_ALLOW_THREADS
    return finish(&scope, status, r, 3);
}

static PyObject *py_group_norm(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    /* group_norm(x, weight, bias, groups, eps) -> (out, mean, rstd) */
    if (check_nargs(nargs, 5, "group_norm") != 0)
        return NULL;
    int64_t groups;
    float eps;
    if (parse_int(args[3], &groups) || parse_float(args[4], &eps))
        return NULL;
    nn_scope scope = {.count = 0};
    const tb_tensor *x, *w, *b;
    if (import_arg(&scope, args[0], "input", 0, &x) || import_arg(&scope, args[1], "weight", 1, &w) ||
        import_arg(&scope, args[2], "bias", 1, &b))
        return NULL;
    tb_tensor r[3];
    tb_status status;
    Py_BEGIN_ALLOW_THREADS
    status = tb_op_group_norm(x, w, b, groups, eps, &r[0], &r[1], &r[2]);
    Py_END_ALLOW_THREADS
    return finish(&scope, status, r, 3);
}

static PyObject *py_group_norm_backward(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    /* group_norm_backward(grad, x, mean, rstd, weight, groups, mask) */
    if (check_nargs(nargs, 7, "group_norm_backward") != 0)
        return NULL;
    int64_t groups;
    bool mask[3];
    if (parse_int(args[5], &groups) || parse_mask(args[6], mask))
        return NULL;
    nn_scope scope = {.count = 0};
    const tb_tensor *g, *x, *mean, *rstd, *w;
    if (import_arg(&scope, args[0], "grad_output", 0, &g) || import_arg(&scope, args[1], "input", 0, &x) ||
        import_arg(&scope, args[2], "mean", 0, &mean) || import_arg(&scope, args[3], "rstd", 0, &rstd) ||
        import_arg(&scope, args[4], "weight", 1, &w))
        return NULL;
    tb_tensor r[3];
    tb_status status;
    Py_BEGIN_ALLOW_THREADS
    status = tb_op_group_norm_backward(g, x, mean, rstd, w, groups, mask, &r[0], &r[1], &r[2]);
    Py_END_ALLOW_THREADS
    return finish(&scope, status, r, 3);
}

static PyObject *py_native_layer_norm(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    /* native_layer_norm(x, normalized_ndim, weight, bias, eps) -> (out, mean, rstd) */
    if (check_nargs(nargs, 5, "native_layer_norm") != 0)
        return NULL;
    int64_t nd;
    float eps;
    if (parse_int(args[1], &nd) || parse_float(args[4], &eps))
        return NULL;
    nn_scope scope = {.count = 0};
    const tb_tensor *x, *w, *b;
    if (import_arg(&scope, args[0], "input", 0, &x) || import_arg(&scope, args[2], "weight", 1, &w) ||
        import_arg(&scope, args[3], "bias", 1, &b))
        return NULL;
    tb_tensor r[3];
    tb_status status;
    Py_BEGIN_ALLOW_THREADS
    status = tb_op_native_layer_norm(x, (int)nd, w, b, eps, &r[0], &r[1], &r[2]);
    Py_END_ALLOW_THREADS
    return finish(&scope, status, r, 3);
}

static PyObject *py_layer_norm_backward(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    /* layer_norm_backward(grad, x, normalized_ndim, mean, rstd, weight, bias, mask) */
    if (check_nargs(nargs, 8, "layer_norm_backward") != 0)
        return NULL;
    int64_t nd;
    bool mask[3];
    if (parse_int(args[2], &nd) || parse_mask(args[7], mask))
        return NULL;
    nn_scope scope = {.count = 0};
    const tb_tensor *g, *x, *mean, *rstd, *w, *b;
    if (import_arg(&scope, args[0], "grad_output", 0, &g) || import_arg(&scope, args[1], "input", 0, &x) ||
        import_arg(&scope, args[3], "mean", 0, &mean) || import_arg(&scope, args[4], "rstd", 0, &rstd) ||
        import_arg(&scope, args[5], "weight", 1, &w) || import_arg(&scope, args[6], "bias", 1, &b))
        return NULL;
    tb_tensor r[3];
    tb_status status;
    Py_BEGIN_ALLOW_THREADS
    status = tb_op_layer_norm_backward(g, x, (int)nd, mean, rstd, w, b, mask, &r[0], &r[1], &r[2]);
    Py_END_ALLOW_THREADS
    return finish(&scope, status, r, 3);
}

/* ---- activation / softmax / embedding backward ---- */

static PyObject *py_threshold_backward(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (check_nargs(nargs, 3, "threshold_backward") != 0)
        return NULL;
    float threshold;
    if (parse_float(args[2], &threshold))
        return NULL;
    nn_scope scope = {.count = 0};
    const tb_tensor *g, *x;
    if (import_arg(&scope, args[0], "grad_output", 0, &g) || import_arg(&scope, args[1], "input", 0, &x))
        return NULL;
    tb_tensor result;
    tb_status status;
    Py_BEGIN_ALLOW_THREADS
    status = tb_op_threshold_backward(g, x, threshold, &result);
    Py_END_ALLOW_THREADS
    return finish(&scope, status, &result, 1);
}

static PyObject *py_activation_backward(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    /* activation_backward(activation, grad, saved) */
    if (check_nargs(nargs, 3, "activation_backward") != 0)
        return NULL;
    int64_t activation;
    if (parse_int(args[0], &activation))
        return NULL;
    nn_scope scope = {.count = 0};
    const tb_tensor *g, *saved;
    if (import_arg(&scope, args[1], "grad_output", 0, &g) || import_arg(&scope, args[2], "saved", 0, &saved))
        return NULL;
    tb_tensor result;
    tb_status status;
    Py_BEGIN_ALLOW_THREADS
    status = tb_op_activation_backward((int)activation, g, saved, &result);
    Py_END_ALLOW_THREADS
    return finish(&scope, status, &result, 1);
}

static PyObject *py_softmax_backward(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    /* softmax_backward(grad, output, dim, log, input_dtype name) */
    if (check_nargs(nargs, 5, "softmax_backward") != 0)
        return NULL;
    int64_t dim;
    bool log;
    if (parse_int(args[2], &dim) || parse_bool(args[3], &log))
        return NULL;
    const char *dtype_name = PyUnicode_AsUTF8(args[4]);
    if (!dtype_name)
        return NULL;
    tb_dtype dtype;
    tb_status status = tb_dtype_from_name(dtype_name, &dtype);
    if (status != TB_OK)
        return tb_py_raise(status);
    nn_scope scope = {.count = 0};
    const tb_tensor *g, *y;
    if (import_arg(&scope, args[0], "grad_output", 0, &g) || import_arg(&scope, args[1], "output", 0, &y))
        return NULL;
    tb_tensor result;
    Py_BEGIN_ALLOW_THREADS
    status = tb_op_softmax_backward(g, y, dim, log, dtype, &result);
    Py_END_ALLOW_THREADS
    return finish(&scope, status, &result, 1);
}

static PyObject *py_embedding_backward(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    /* embedding_backward(grad, indices, num_weights, padding_idx, scale_grad_by_freq) */
    if (check_nargs(nargs, 5, "embedding_backward") != 0)
        return NULL;
    int64_t num_weights, padding_idx;
    bool scale;
    if (parse_int(args[2], &num_weights) || parse_int(args[3], &padding_idx) || parse_bool(args[4], &scale))
        return NULL;
    nn_scope scope = {.count = 0};
    const tb_tensor *g, *indices;
    if (import_arg(&scope, args[0], "grad_output", 0, &g) || import_arg(&scope, args[1], "indices", 0, &indices))
        return NULL;
    tb_tensor result;
    tb_status status;
    Py_BEGIN_ALLOW_THREADS
    status = tb_op_embedding_backward(g, indices, num_weights, padding_idx, scale, &result);
    Py_END_ALLOW_THREADS
    return finish(&scope, status, &result, 1);
}

/* ---- losses ---- */

static PyObject *py_nll_loss(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    /* nll_loss(x, target, weight, reduction, ignore_index) -> (output, total_weight) */
    if (check_nargs(nargs, 5, "nll_loss") != 0)
        return NULL;
    int64_t reduction, ignore_index;
    if (parse_int(args[3], &reduction) || parse_int(args[4], &ignore_index))
        return NULL;
    nn_scope scope = {.count = 0};
    const tb_tensor *x, *t, *w;
    if (import_arg(&scope, args[0], "input", 0, &x) || import_arg(&scope, args[1], "target", 0, &t) ||
        import_arg(&scope, args[2], "weight", 1, &w))
        return NULL;
    tb_tensor r[2];
    tb_status status;
    Py_BEGIN_ALLOW_THREADS
    status = tb_op_nll_loss(x, t, w, (int)reduction, ignore_index, &r[0], &r[1]);
    Py_END_ALLOW_THREADS
    return finish(&scope, status, r, 2);
}

static PyObject *py_nll_loss_backward(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    /* nll_loss_backward(grad, x, target, weight, reduction, ignore_index, total_weight) */
    if (check_nargs(nargs, 7, "nll_loss_backward") != 0)
        return NULL;
    int64_t reduction, ignore_index;
    if (parse_int(args[4], &reduction) || parse_int(args[5], &ignore_index))
        return NULL;
    nn_scope scope = {.count = 0};
    const tb_tensor *g, *x, *t, *w, *tw;
    if (import_arg(&scope, args[0], "grad_output", 0, &g) || import_arg(&scope, args[1], "input", 0, &x) ||
        import_arg(&scope, args[2], "target", 0, &t) || import_arg(&scope, args[3], "weight", 1, &w) ||
        import_arg(&scope, args[6], "total_weight", 1, &tw))
        return NULL;
    tb_tensor result;
    tb_status status;
    Py_BEGIN_ALLOW_THREADS
    status = tb_op_nll_loss_backward(g, x, t, w, (int)reduction, ignore_index, tw, &result);
    Py_END_ALLOW_THREADS
    return finish(&scope, status, &result, 1);
}

static PyObject *py_cross_entropy(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    /* cross_entropy(x, target, weight, reduction, ignore_index, label_smoothing) */
    if (check_nargs(nargs, 6, "cross_entropy") != 0)
        return NULL;
    int64_t reduction, ignore_index;
    float smoothing;
    if (parse_int(args[3], &reduction) || parse_int(args[4], &ignore_index) || parse_float(args[5], &smoothing))
        return NULL;
    nn_scope scope = {.count = 0};
    const tb_tensor *x, *t, *w;
    if (import_arg(&scope, args[0], "input", 0, &x) || import_arg(&scope, args[1], "target", 0, &t) ||
        import_arg(&scope, args[2], "weight", 1, &w))
        return NULL;
    tb_tensor result;
    tb_status status;
    Py_BEGIN_ALLOW_THREADS
    status = tb_op_cross_entropy(x, t, w, (int)reduction, ignore_index, smoothing, &result);
    Py_END_ALLOW_THREADS
    return finish(&scope, status, &result, 1);
}

/* The elementwise losses share one binding: kind selects the op.
 *   pointwise_loss(kind, grad or None, x, target, weight or None, pos_weight or None, reduction, beta) */
enum { LOSS_MSE, LOSS_SMOOTH_L1, LOSS_BCE, LOSS_BCE_LOGITS, LOSS_MSE_BACKWARD, LOSS_SMOOTH_L1_BACKWARD, LOSS_BCE_BACKWARD };

static PyObject *py_pointwise_loss(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (check_nargs(nargs, 8, "pointwise_loss") != 0)
        return NULL;
    int64_t kind, reduction;
    float beta;
    if (parse_int(args[0], &kind) || parse_int(args[6], &reduction) || parse_float(args[7], &beta))
        return NULL;
    if (kind < LOSS_MSE || kind > LOSS_BCE_BACKWARD) {
        PyErr_Format(PyExc_ValueError, "pointwise_loss: unknown kind %lld", (long long)kind);
        return NULL;
    }
    bool backward = kind >= LOSS_MSE_BACKWARD;
    nn_scope scope = {.count = 0};
    const tb_tensor *g = NULL, *x, *t, *w, *pw;
    if ((backward && import_arg(&scope, args[1], "grad_output", 0, &g)) || import_arg(&scope, args[2], "input", 0, &x) ||
        import_arg(&scope, args[3], "target", 0, &t) || import_arg(&scope, args[4], "weight", 1, &w) ||
        import_arg(&scope, args[5], "pos_weight", 1, &pw))
        return NULL;
    tb_tensor result;
    tb_status status = TB_OK;
    int r = (int)reduction;
    Py_BEGIN_ALLOW_THREADS
    switch (kind) {
    case LOSS_MSE: status = tb_op_mse_loss(x, t, r, &result); break;
    case LOSS_SMOOTH_L1: status = tb_op_smooth_l1_loss(x, t, r, beta, &result); break;
    case LOSS_BCE: status = tb_op_binary_cross_entropy(x, t, w, r, &result); break;
    case LOSS_BCE_LOGITS: status = tb_op_binary_cross_entropy_with_logits(x, t, w, pw, r, &result); break;
    case LOSS_MSE_BACKWARD: status = tb_op_mse_loss_backward(g, x, t, r, &result); break;
    case LOSS_SMOOTH_L1_BACKWARD: status = tb_op_smooth_l1_loss_backward(g, x, t, r, beta, &result); break;
    default: status = tb_op_binary_cross_entropy_backward(g, x, t, w, r, &result); break;
    }
    Py_END_ALLOW_THREADS
    return finish(&scope, status, &result, 1);
}

#define FASTCALL(fn) (PyCFunction)(void (*)(void))(fn), METH_FASTCALL

static PyMethodDef nn_functions[] = {
    {"conv2d", FASTCALL(py_conv2d),
     "conv2d(x, weight, bias, stride, padding, extra_padding, dilation, groups, scale, shift, activation, residual)"},
    {"conv2d_backward", FASTCALL(py_conv2d_backward),
     "conv2d_backward(grad, x, weight, stride, padding, dilation, groups, output_mask) -> 3-tuple"},
    {"max_pool2d", FASTCALL(py_max_pool2d), "max_pool2d(x, kernel, stride, padding, dilation, ceil_mode) -> (values, indices)"},
    {"max_pool2d_backward", FASTCALL(py_max_pool2d_backward), "max_pool2d_backward(grad, x, indices)"},
    {"avg_pool2d", FASTCALL(py_avg_pool2d),
     "avg_pool2d(x, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)"},
    {"avg_pool2d_backward", FASTCALL(py_avg_pool2d_backward),
     "avg_pool2d_backward(grad, x, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)"},
    {"adaptive_avg_pool2d", FASTCALL(py_adaptive_avg_pool2d), "adaptive_avg_pool2d(x, out_h, out_w)"},
    {"adaptive_avg_pool2d_backward", FASTCALL(py_adaptive_avg_pool2d_backward), "adaptive_avg_pool2d_backward(grad, x)"},
    {"adaptive_max_pool2d", FASTCALL(py_adaptive_max_pool2d), "adaptive_max_pool2d(x, out_h, out_w) -> (values, indices)"},
    {"batch_norm", FASTCALL(py_batch_norm),
     "batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps) -> 5-tuple"},
    {"batch_norm_fold", FASTCALL(py_batch_norm_fold), "batch_norm_fold(weight, bias, running_mean, running_var, eps)"},
    {"batch_norm_backward", FASTCALL(py_batch_norm_backward),
     "batch_norm_backward(grad, x, weight, running_mean, running_var, save_mean, save_invstd, train, eps, mask)"},
    {"group_norm", FASTCALL(py_group_norm), "group_norm(x, weight, bias, groups, eps) -> (out, mean, rstd)"},
    {"group_norm_backward", FASTCALL(py_group_norm_backward),
     "group_norm_backward(grad, x, mean, rstd, weight, groups, mask)"},
    {"native_layer_norm", FASTCALL(py_native_layer_norm),
     "native_layer_norm(x, normalized_ndim, weight, bias, eps) -> (out, mean, rstd)"},
    {"layer_norm_backward", FASTCALL(py_layer_norm_backward),
     "layer_norm_backward(grad, x, normalized_ndim, mean, rstd, weight, bias, mask)"},
    {"threshold_backward", FASTCALL(py_threshold_backward), "threshold_backward(grad, x, threshold)"},
    {"activation_backward", FASTCALL(py_activation_backward), "activation_backward(activation, grad, saved)"},
    {"softmax_backward", FASTCALL(py_softmax_backward), "softmax_backward(grad, output, dim, log, input_dtype)"},
    {"embedding_backward", FASTCALL(py_embedding_backward),
     "embedding_backward(grad, indices, num_weights, padding_idx, scale_grad_by_freq)"},
    {"nll_loss", FASTCALL(py_nll_loss), "nll_loss(x, target, weight, reduction, ignore_index) -> (output, total_weight)"},
    {"nll_loss_backward", FASTCALL(py_nll_loss_backward),
     "nll_loss_backward(grad, x, target, weight, reduction, ignore_index, total_weight)"},
    {"cross_entropy", FASTCALL(py_cross_entropy),
     "cross_entropy(x, target, weight, reduction, ignore_index, label_smoothing)"},
    {"pointwise_loss", FASTCALL(py_pointwise_loss),
     "pointwise_loss(kind, grad, x, target, weight, pos_weight, reduction, beta); kind: 0 mse, 1 smooth_l1, 2 bce, "
     "3 bce_with_logits, 4 mse_backward, 5 smooth_l1_backward, 6 bce_backward"},
    {NULL},
};

int tb_pyext_register_nn(PyObject *module) { return PyModule_AddFunctions(module, nn_functions); }
