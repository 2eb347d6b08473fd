/* Python bindings of the quant layer (include/torchburn/quant.h), used by torchburn/quantization.py.
 * Arrays (torch, numpy, torchburn) are imported zero-copy; outputs are allocated by the caller and
 * passed in, so results land directly in torch tensors. Kernels run with the GIL released. Every
 * function is positional; the Python layer supplies names, defaults, dtype conversion and messages. */
#include "pyext.h"
#include "torchburn/quant.h"

enum { MAX_ARRAYS = 6 };

typedef struct quant_scope {
    tb_tensor tensors[MAX_ARRAYS];
    int count;
} quant_scope;

static void scope_release(quant_scope *scope) {
    for (int i = 0; i < scope->count; i++)
        tb_tensor_release(&scope->tensors[i]);
    scope->count = 0;
}

/* Imports `object` and checks dtype, ndim, that the last dim is unit-stride and (when `contiguous`)
 * that the whole array is contiguous; `writable` refuses read-only memory. None gives NULL when
 * `optional`. Returns 0, or -1 with an exception set (the scope is then released). */
static int import_array(quant_scope *scope, PyObject *object, const char *name, tb_dtype dtype, int ndim,
                        bool contiguous, bool writable, bool optional, const tb_tensor **out) {
    *out = NULL;
    if (optional && object == Py_None)
        return 0;
    tb_tensor *t = &scope->tensors[scope->count];
    if (tb_py_import_tensor(object, name, t) != 0) {
        scope_release(scope);
        return -1;
    }
    scope->count++;
    if (t->dtype != dtype) {
        PyErr_Format(PyExc_TypeError, "%s must be %s, got %s", name, tb_dtype_name(dtype), tb_dtype_name(t->dtype));
    } else if (t->ndim != ndim) {
        PyErr_Format(PyExc_ValueError, "%s must be %d-D, got %d-D", name, ndim, t->ndim);
    } else if (contiguous && !tb_tensor_is_contiguous(t)) {
        PyErr_Format(PyExc_ValueError, "%s must be contiguous", name);
    } else if (ndim > 0 && t->shape[ndim - 1] > 1 && t->strides[ndim - 1] != 1) {
        PyErr_Format(PyExc_ValueError, "%s must have a unit-stride last dimension", name);
    } else if (writable && t->storage->read_only) {
        PyErr_Format(PyExc_ValueError, "%s is read-only", name);
    } else {
        *out = t;
        return 0;
    }
    scope_release(scope);
    return -1;
}

static int check_nargs(Py_ssize_t nargs, Py_ssize_t expected, const char *name) {
    if (nargs == expected)
        return 0;
    PyErr_Format(PyExc_TypeError, "_C.%s takes %zd arguments, got %zd", name, expected, nargs);
    return -1;
}

static int shape_is(const tb_tensor *t, int64_t d0, int64_t d1) {
    return t->shape[0] == d0 && (t->ndim < 2 || t->shape[1] == d1);
}

static PyObject *shape_error(quant_scope *scope, const char *name, const tb_tensor *t, const char *expected) {
    char shape[96];
    tb_shape_string(t->ndim, t->shape, shape, sizeof shape);
    PyErr_Format(PyExc_ValueError, "%s has shape %s, expected %s", name, shape, expected);
    scope_release(scope);
    return NULL;
}

/* Weight type from group_size: 0 means int8 per row, otherwise int4 grouped. */
static tb_quant_type type_of(long long group_size) { return group_size == 0 ? TB_QUANT_INT8 : TB_QUANT_INT4; }

/* quant_quantize(w f32[N, K], q_out, scales_out, group_size) -> None */
static PyObject *py_quantize(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    (void)m;
    if (check_nargs(nargs, 4, "quant_quantize") != 0)
        return NULL;
    long long group = PyLong_AsLongLong(args[3]);
    if (group == -1 && PyErr_Occurred())
        return NULL;
    const tb_quant_type type = type_of(group);
    quant_scope scope = {.count = 0};
    const tb_tensor *w, *q, *scales;
    if (import_array(&scope, args[0], "weight", TB_F32, 2, true, false, false, &w) != 0 ||
        import_array(&scope, args[1], "q_out", type == TB_QUANT_INT8 ? TB_I8 : TB_U8, 2, true, true, false, &q) != 0 ||
        import_array(&scope, args[2], "scales_out", TB_F32, type == TB_QUANT_INT8 ? 1 : 2, true, true, false, &scales) !=
            0)
        return NULL;
    const int64_t n = w->shape[0], k = w->shape[1];
    tb_status status = tb_quant_check_dims(type, n, k, group);
    if (status != TB_OK) {
        scope_release(&scope);
        return tb_py_raise(status);
    }
    if (!shape_is(q, n, type == TB_QUANT_INT8 ? k : k / 2))
        return shape_error(&scope, "q_out", q, "[N, K] (int8) or [N, K/2] (int4)");
    if (!shape_is(scales, n, type == TB_QUANT_INT8 ? 1 : k / group))
        return shape_error(&scope, "scales_out", scales, "[N] (int8) or [N, K/group_size] (int4)");
    const float *w_data = tb_tensor_data(w);
    void *q_data = tb_tensor_data(q);
    float *s_data = tb_tensor_data(scales);
    Py_BEGIN_ALLOW_THREADS
    status = type == TB_QUANT_INT8 ? tb_quantize_int8(w_data, n, k, q_data, s_data)
                                   : tb_quantize_int4_grouped(w_data, n, k, group, q_data, s_data);
    Py_END_ALLOW_THREADS
    scope_release(&scope);
    if (status != TB_OK)
        return tb_py_raise(status);
    Py_RETURN_NONE;
}

/* Checks q / scales of an (N, K) weight against each other; K comes from q (and group_size). Returns 0,
 * or -1 with an exception set (the scope released). */
static int check_weight_pair(quant_scope *scope, const tb_tensor *q, const tb_tensor *scales, tb_quant_type type,
                                   long long group, int64_t *n, int64_t *k) {
    *n = q->shape[0];
    *k = type == TB_QUANT_INT8 ? q->shape[1] : q->shape[1] * 2;
    tb_status status = tb_quant_check_dims(type, *n, *k, group);
    if (status != TB_OK) {
        scope_release(scope);
        tb_py_raise(status);
        return -1;
    }
    if (!shape_is(scales, *n, type == TB_QUANT_INT8 ? 1 : *k / group)) {
        shape_error(scope, "scales", scales,
                    type == TB_QUANT_INT8 ? "[N] for int8 weights [N, K]"
                                          : "[N, K/group_size] for int4 weights packed as [N, K/2]");
        return -1;
    }
    return 0;
}

/* quant_dequantize(q, scales, w_out f32[N, K], group_size) -> None */
static PyObject *py_dequantize(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    (void)m;
    if (check_nargs(nargs, 4, "quant_dequantize") != 0)
        return NULL;
    long long group = PyLong_AsLongLong(args[3]);
    if (group == -1 && PyErr_Occurred())
        return NULL;
    const tb_quant_type type = type_of(group);
    quant_scope scope = {.count = 0};
    const tb_tensor *q, *scales, *w;
    if (import_array(&scope, args[0], "q", type == TB_QUANT_INT8 ? TB_I8 : TB_U8, 2, true, false, false, &q) != 0 ||
        import_array(&scope, args[1], "scales", TB_F32, type == TB_QUANT_INT8 ? 1 : 2, true, false, false, &scales) !=
            0 ||
        import_array(&scope, args[2], "w_out", TB_F32, 2, true, true, false, &w) != 0)
        return NULL;
    int64_t n, k;
    if (check_weight_pair(&scope, q, scales, type, group, &n, &k) != 0)
        return NULL;
    if (!shape_is(w, n, k))
        return shape_error(&scope, "w_out", w, "[N, K]");
    const void *q_data = tb_tensor_data(q);
    const float *s_data = tb_tensor_data(scales);
    float *w_data = tb_tensor_data(w);
    tb_status status;
    Py_BEGIN_ALLOW_THREADS
    status = type == TB_QUANT_INT8 ? tb_dequantize_int8(q_data, s_data, n, k, w_data)
                                   : tb_dequantize_int4_grouped(q_data, s_data, n, k, group, w_data);
    Py_END_ALLOW_THREADS
    scope_release(&scope);
    if (status != TB_OK)
        return tb_py_raise(status);
    Py_RETURN_NONE;
}

/* quant_linear(x f32[M, K], q, scales, bias f32[N] | None, y_out f32[M, N], group_size, act_int8,
 *              kernel name) -> None: y = x @ dequant(W).T + bias */
static PyObject *py_linear(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    (void)m;
    if (check_nargs(nargs, 8, "quant_linear") != 0)
        return NULL;
    long long group = PyLong_AsLongLong(args[5]);
    if (group == -1 && PyErr_Occurred())
        return NULL;
    int act_int8 = PyObject_IsTrue(args[6]);
    const char *kernel_name = PyUnicode_AsUTF8(args[7]);
    if (act_int8 < 0 || !kernel_name)
        return NULL;
    tb_quant_kernel kernel;
    tb_status status = tb_quant_kernel_from_name(kernel_name, &kernel);
    if (status != TB_OK)
        return tb_py_raise(status);
    const tb_quant_type type = type_of(group);
    quant_scope scope = {.count = 0};
    const tb_tensor *x, *q, *scales, *bias, *y;
    if (import_array(&scope, args[0], "input", TB_F32, 2, false, false, false, &x) != 0 ||
        import_array(&scope, args[1], "weight", type == TB_QUANT_INT8 ? TB_I8 : TB_U8, 2, true, false, false, &q) != 0 ||
        import_array(&scope, args[2], "scales", TB_F32, type == TB_QUANT_INT8 ? 1 : 2, true, false, false, &scales) !=
            0 ||
        import_array(&scope, args[3], "bias", TB_F32, 1, true, false, true, &bias) != 0 ||
        import_array(&scope, args[4], "out", TB_F32, 2, false, true, false, &y) != 0)
        return NULL;
    int64_t n, k;
    if (check_weight_pair(&scope, q, scales, type, group, &n, &k) != 0)
        return NULL;
    const int64_t rows = x->shape[0];
    if (x->shape[1] != k)
        return shape_error(&scope, "input", x, "[M, K] with K = in_features of the weight");
    if (bias && bias->shape[0] != n)
        return shape_error(&scope, "bias", bias, "[N] with N = out_features");
    if (!shape_is(y, rows, n))
        return shape_error(&scope, "out", y, "[M, N]");
    tb_quant_weight weight;
    status = tb_quant_weight_init(type, n, k, type == TB_QUANT_INT8 ? k : group, tb_tensor_data(q),
                                  tb_tensor_data(scales), &weight);
    if (status != TB_OK) {
        scope_release(&scope);
        return tb_py_raise(status);
    }
    tb_quant_matmul_desc desc = {.x = tb_tensor_data(x),
                                 .m = rows,
                                 .x_row_stride = rows > 1 ? x->strides[0] : k,
                                 .y = tb_tensor_data(y),
                                 .y_row_stride = rows > 1 ? y->strides[0] : n,
                                 .bias = bias ? tb_tensor_data(bias) : NULL,
                                 .act = act_int8 ? TB_QUANT_ACT_INT8 : TB_QUANT_ACT_F32,
                                 .kernel = kernel};
    Py_BEGIN_ALLOW_THREADS
    status = tb_quant_matmul_ex(&weight, &desc);
    Py_END_ALLOW_THREADS
    scope_release(&scope);
    if (status != TB_OK)
        return tb_py_raise(status);
    Py_RETURN_NONE;
}

/* quant_linear_raw(x_ptr, m, k, x_row_stride, weight_ptr, n, scales_ptr, bias_ptr, out_ptr, out_row_stride,
 *                  group_size, act_int8, kernel name) -> None
 * The same product on raw addresses (ints from torch's data_ptr(); 0 for no bias), for the eager hot
 * path of torchburn.quantization, which has already checked devices, dtypes, shapes and strides: the
 * DLPack import of five tensors costs ~10 us, more than a small layer's matmul. Dims are checked here,
 * addresses cannot be; do not call it with anything else. */
static PyObject *py_linear_raw(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    (void)m;
    if (check_nargs(nargs, 13, "quant_linear_raw") != 0)
        return NULL;
    long long v[11];
    for (int i = 0; i < 11; i++) {
        v[i] = PyLong_AsLongLong(args[i]);
        if (v[i] == -1 && PyErr_Occurred())
            return NULL;
    }
    int act_int8 = PyObject_IsTrue(args[11]);
    const char *kernel_name = PyUnicode_AsUTF8(args[12]);
    if (act_int8 < 0 || !kernel_name)
        return NULL;
    tb_quant_kernel kernel;
    tb_status status = tb_quant_kernel_from_name(kernel_name, &kernel);
    if (status != TB_OK)
        return tb_py_raise(status);
    const int64_t rows = v[1], k = v[2], n = v[5], group = v[10];
    if (!v[0] || !v[4] || !v[6] || !v[8])
        return PyErr_Format(PyExc_ValueError, "quant_linear_raw: NULL address");
    const tb_quant_type type = type_of(group);
    tb_quant_weight weight;
    status = tb_quant_weight_init(type, n, k, type == TB_QUANT_INT8 ? k : group, (const void *)(intptr_t)v[4],
                                  (const float *)(intptr_t)v[6], &weight);
    if (status != TB_OK)
        return tb_py_raise(status);
    tb_quant_matmul_desc desc = {.x = (const float *)(intptr_t)v[0],
                                 .m = rows,
                                 .x_row_stride = v[3],
                                 .y = (float *)(intptr_t)v[8],
                                 .y_row_stride = v[9],
                                 .bias = (const float *)(intptr_t)v[7],
                                 .act = act_int8 ? TB_QUANT_ACT_INT8 : TB_QUANT_ACT_F32,
                                 .kernel = kernel};
    Py_BEGIN_ALLOW_THREADS
    status = tb_quant_matmul_ex(&weight, &desc);
    Py_END_ALLOW_THREADS
    if (status != TB_OK)
        return tb_py_raise(status);
    Py_RETURN_NONE;
}

/* quant_kernels() -> list of the kernel family names this CPU runs (scalar first). */
static PyObject *py_kernels(PyObject *m, PyObject *unused) {
    (void)m;
    (void)unused;
    PyObject *list = PyList_New(0);
    for (int kernel = TB_QUANT_KERNEL_SCALAR; list && kernel < TB_QUANT_KERNEL_COUNT; kernel++) {
        if (!tb_quant_kernel_supported((tb_quant_kernel)kernel))
            continue;
        PyObject *name = PyUnicode_FromString(tb_quant_kernel_name((tb_quant_kernel)kernel));
        if (!name || PyList_Append(list, name) != 0) {
            Py_XDECREF(name);
            Py_CLEAR(list);
            break;
        }
        Py_DECREF(name);
    }
    return list;
}

/* quant_kernel_for(kernel name, act_int8) -> the family that name runs as (after AUTO and fallbacks). */
static PyObject *py_kernel_for(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    (void)m;
    if (check_nargs(nargs, 2, "quant_kernel_for") != 0)
        return NULL;
    const char *name = PyUnicode_AsUTF8(args[0]);
    int act_int8 = PyObject_IsTrue(args[1]);
    if (!name || act_int8 < 0)
        return NULL;
    tb_quant_kernel kernel;
    tb_status status = tb_quant_kernel_from_name(name, &kernel);
    if (status != TB_OK)
        return tb_py_raise(status);
    kernel = tb_quant_kernel_resolve(kernel, act_int8 ? TB_QUANT_ACT_INT8 : TB_QUANT_ACT_F32);
    return PyUnicode_FromString(tb_quant_kernel_name(kernel));
}

/* quant_read_bandwidth(buffer_bytes, slice_bytes, slices) -> (best GB/s, median GB/s) */
static PyObject *py_read_bandwidth(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    (void)m;
    if (check_nargs(nargs, 3, "quant_read_bandwidth") != 0)
        return NULL;
    unsigned long long buffer = PyLong_AsUnsignedLongLong(args[0]), slice = PyLong_AsUnsignedLongLong(args[1]);
    long slices = PyLong_AsLong(args[2]);
    if (PyErr_Occurred())
        return NULL;
    double best = 0.0, median = 0.0;
    tb_status status;
    Py_BEGIN_ALLOW_THREADS
    status = tb_quant_read_bandwidth((size_t)buffer, (size_t)slice, (int)slices, &best, &median);
    Py_END_ALLOW_THREADS
    if (status != TB_OK)
        return tb_py_raise(status);
    return Py_BuildValue("(dd)", best, median);
}

#define FASTCALL(fn) (PyCFunction)(void (*)(void))(fn), METH_FASTCALL

static PyMethodDef quant_functions[] = {
    {"quant_quantize", FASTCALL(py_quantize), "quant_quantize(w, q_out, scales_out, group_size): 0 = int8"},
    {"quant_dequantize", FASTCALL(py_dequantize), "quant_dequantize(q, scales, w_out, group_size)"},
    {"quant_linear", FASTCALL(py_linear),
     "quant_linear(x, q, scales, bias, out, group_size, act_int8, kernel): out = x @ dequant(W).T + bias"},
    {"quant_linear_raw", FASTCALL(py_linear_raw),
     "quant_linear_raw(x_ptr, m, k, x_stride, w_ptr, n, s_ptr, bias_ptr, out_ptr, out_stride, group_size, act_int8, "
     "kernel): internal fast path of torchburn.quantization (addresses are trusted)"},
    {"quant_kernels", py_kernels, METH_NOARGS, "quant_kernels() -> names of the kernel families this CPU runs"},
    {"quant_kernel_for", FASTCALL(py_kernel_for), "quant_kernel_for(name, act_int8) -> family actually used"},
    {"quant_read_bandwidth", FASTCALL(py_read_bandwidth),
     "quant_read_bandwidth(buffer_bytes, slice_bytes, slices) -> (best_gbps, median_gbps)"},
    {NULL, NULL, 0, NULL},
};

int tb_pyext_register_quant(PyObject *module) { return PyModule_AddFunctions(module, quant_functions); }
