/* Python bindings of the ops layer: each function imports its array arguments zero-copy, runs the op
 * with the GIL released, and returns a torchburn Tensor (torchburn/ops.py converts back to the
 * caller's array type). Arguments are positional; the Python layer supplies defaults and names. */
#include <math.h>

#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "pyext.h"
#include "torchburn/ops.h"

enum { MAX_ARGS = 4 };

/* Imported array arguments, released together. */
typedef struct args_scope {
    tb_tensor tensors[MAX_ARGS];
    int count;
} args_scope;

static void scope_release(args_scope *scope) {
    for (int i = 0; i < scope->count; i++)
        tb_tensor_release(&scope->tensors[i]);
    scope->count = 0;
}

/* Imports `object` (None allowed when optional: returns NULL pointer in *out). */
static int scope_import(args_scope *scope, PyObject *object, const char *name, int optional, const tb_tensor **out) {
    if (optional && object == Py_None) {
        *out = NULL;
        return 0;
    }
    tb_tensor *slot = &scope->tensors[scope->count];
    if (tb_py_import_tensor(object, name, slot) != 0)
        return -1;
    scope->count++;
    *out = slot;
    return 0;
}

static int check_nargs(Py_ssize_t nargs, Py_ssize_t expected, const char *name) {
    if (nargs != expected) {
        PyErr_Format(PyExc_TypeError, "_C.%s takes %zd arguments, got %zd", name, expected, nargs);
        return -1;
    }
    return 0;
}

static PyObject *finish(args_scope *scope, tb_status status, tb_tensor *result) {
    scope_release(scope);
    if (status != TB_OK)
        return tb_py_raise(status);
    return tb_py_tensor_wrap(result);
}

static int parse_dtype(PyObject *object, tb_dtype *out) {
    const char *name = PyUnicode_AsUTF8(object);
    if (!name)
        return -1;
    tb_status status = tb_dtype_from_name(name, out);
    if (status != TB_OK) {
        tb_py_raise(status);
        return -1;
    }
    return 0;
}

/* dims: None (all), an int, or a sequence of ints -> bit mask over ndim dims. */
static int parse_dims(PyObject *object, int ndim, uint32_t *mask) {
    *mask = 0;
    if (object == Py_None)
        return 0;
    PyObject *sequence = PyLong_Check(object) ? PyTuple_Pack(1, object) : PySequence_Tuple(object);
    if (!sequence)
        return -1;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(sequence); i++) {
        long long dim = PyLong_AsLongLong(PyTuple_GET_ITEM(sequence, i));
        if (dim == -1 && PyErr_Occurred()) {
            Py_DECREF(sequence);
            return -1;
        }
        int d;
        tb_status status = tb_normalize_dim(dim, ndim, &d);
        if (status != TB_OK) {
            Py_DECREF(sequence);
            tb_py_raise(status);
            return -1;
        }
        if (*mask & (1u << d)) {
            Py_DECREF(sequence);
            PyErr_Format(PyExc_ValueError, "dim %d appears multiple times in the list of dims", d);
            return -1;
        }
        *mask |= 1u << d;
    }
    if (PyTuple_GET_SIZE(sequence) == 0)
        *mask = 0; /* torch: dim=() reduces everything */
    Py_DECREF(sequence);
    return 0;
}

#define BEGIN(name, expected)                         \
    args_scope scope = {.count = 0};                  \
    tb_tensor result;                                 \
    tb_status status;                                 \
    if (check_nargs(nargs, expected, name) != 0)      \
        return NULL;

static PyObject *py_unary(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    BEGIN("unary", 5)
    const tb_tensor *x;
    int op = PyLong_AsLong(args[0]);
    double alpha = PyFloat_AsDouble(args[2]), lo = PyFloat_AsDouble(args[3]), hi = PyFloat_AsDouble(args[4]);
    if (PyErr_Occurred() || scope_import(&scope, args[1], "input", 0, &x) != 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    status = tb_op_unary(op, x, (float)alpha, (float)lo, (float)hi, &result);
    Py_END_ALLOW_THREADS
    return finish(&scope, status, &result);
}

static PyObject *py_binary(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    BEGIN("binary", 4)
    const tb_tensor *a, *b;
    tb_dtype dtype;
    int op = PyLong_AsLong(args[0]);
    if (PyErr_Occurred() || parse_dtype(args[3], &dtype) != 0)
        return NULL;
    if (scope_import(&scope, args[1], "input", 0, &a) != 0 || scope_import(&scope, args[2], "other", 0, &b) != 0) {
        scope_release(&scope);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    status = tb_op_binary(op, a, b, dtype, &result);
    Py_END_ALLOW_THREADS
    return finish(&scope, status, &result);
}

static PyObject *py_compare(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    BEGIN("compare", 3)
    const tb_tensor *a, *b;
    int op = PyLong_AsLong(args[0]);
    if (PyErr_Occurred())
        return NULL;
    if (scope_import(&scope, args[1], "input", 0, &a) != 0 || scope_import(&scope, args[2], "other", 0, &b) != 0) {
        scope_release(&scope);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    status = tb_op_compare(op, a, b, &result);
    Py_END_ALLOW_THREADS
    return finish(&scope, status, &result);
}

static PyObject *py_where(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    BEGIN("where", 4)
    const tb_tensor *c, *a, *b;
    tb_dtype dtype;
    if (parse_dtype(args[3], &dtype) != 0)
        return NULL;
    if (scope_import(&scope, args[0], "condition", 0, &c) != 0 || scope_import(&scope, args[1], "input", 0, &a) != 0 ||
        scope_import(&scope, args[2], "other", 0, &b) != 0) {
        scope_release(&scope);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    status = tb_op_where(c, a, b, dtype, &result);
    Py_END_ALLOW_THREADS
    return finish(&scope, status, &result);
}

static PyObject *py_reduce(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    /* reduce(op, x, dims, keepdim); op >= 0: tb_reduce_op; -1 mean */
    BEGIN("reduce", 4)
    const tb_tensor *x;
    uint32_t mask;
    int op = PyLong_AsLong(args[0]);
    int keepdim = PyObject_IsTrue(args[3]);
    if (PyErr_Occurred() || scope_import(&scope, args[1], "input", 0, &x) != 0)
        return NULL;
    if (parse_dims(args[2], x->ndim, &mask) != 0) {
        scope_release(&scope);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    status = op >= 0 ? tb_op_reduce(op, x, mask, keepdim, &result) : tb_op_mean(x, mask, keepdim, &result);
    Py_END_ALLOW_THREADS
    return finish(&scope, status, &result);
}

static PyObject *py_var(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    /* var(x, dims, correction, keepdim, take_sqrt) */
    BEGIN("var", 5)
    const tb_tensor *x;
    uint32_t mask;
    long long correction = PyLong_AsLongLong(args[2]);
    int keepdim = PyObject_IsTrue(args[3]), take_sqrt = PyObject_IsTrue(args[4]);
    if (PyErr_Occurred() || scope_import(&scope, args[0], "input", 0, &x) != 0)
        return NULL;
    if (parse_dims(args[1], x->ndim, &mask) != 0) {
        scope_release(&scope);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    status = tb_op_var(x, mask, correction, keepdim, take_sqrt, &result);
    Py_END_ALLOW_THREADS
    return finish(&scope, status, &result);
}

static PyObject *py_arg_reduce(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    /* arg_reduce(is_max, x, dim or None, keepdim) */
    BEGIN("arg_reduce", 4)
    const tb_tensor *x;
    int is_max = PyObject_IsTrue(args[0]), keepdim = PyObject_IsTrue(args[3]);
    int has_dim = args[2] != Py_None;
    long long dim = has_dim ? PyLong_AsLongLong(args[2]) : 0;
    if (PyErr_Occurred() || scope_import(&scope, args[1], "input", 0, &x) != 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    status = tb_op_arg_reduce(is_max, x, has_dim, dim, keepdim, &result);
    Py_END_ALLOW_THREADS
    return finish(&scope, status, &result);
}

static PyObject *py_softmax(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    BEGIN("softmax", 3)
    const tb_tensor *x;
    long long dim = PyLong_AsLongLong(args[1]);
    int log = PyObject_IsTrue(args[2]);
    if (PyErr_Occurred() || scope_import(&scope, args[0], "input", 0, &x) != 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    status = tb_op_softmax(x, dim, log, &result);
    Py_END_ALLOW_THREADS
    return finish(&scope, status, &result);
}

static PyObject *py_layer_norm(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    /* layer_norm(x, normalized_ndim, weight, bias, eps) */
    BEGIN("layer_norm", 5)
    const tb_tensor *x, *w, *b;
    int nd = PyLong_AsLong(args[1]);
    double eps = PyFloat_AsDouble(args[4]);
    if (PyErr_Occurred())
        return NULL;
    if (scope_import(&scope, args[0], "input", 0, &x) != 0 || scope_import(&scope, args[2], "weight", 1, &w) != 0 ||
        scope_import(&scope, args[3], "bias", 1, &b) != 0) {
        scope_release(&scope);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    status = tb_op_layer_norm(x, nd, w, b, (float)eps, &result);
    Py_END_ALLOW_THREADS
    return finish(&scope, status, &result);
}

static PyObject *py_rms_norm(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    /* rms_norm(x, normalized_ndim, weight, eps) */
    BEGIN("rms_norm", 4)
    const tb_tensor *x, *w;
    int nd = PyLong_AsLong(args[1]);
    double eps = PyFloat_AsDouble(args[3]);
    if (PyErr_Occurred())
        return NULL;
    if (scope_import(&scope, args[0], "input", 0, &x) != 0 || scope_import(&scope, args[2], "weight", 1, &w) != 0) {
        scope_release(&scope);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    status = tb_op_rms_norm(x, nd, w, (float)eps, &result);
    Py_END_ALLOW_THREADS
    return finish(&scope, status, &result);
}

static PyObject *py_matmul(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    BEGIN("matmul", 2)
    const tb_tensor *a, *b;
    if (scope_import(&scope, args[0], "input", 0, &a) != 0 || scope_import(&scope, args[1], "other", 0, &b) != 0) {
        scope_release(&scope);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    status = tb_op_matmul(a, b, &result);
    Py_END_ALLOW_THREADS
    return finish(&scope, status, &result);
}

static PyObject *py_linear(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    /* linear(x, weight, bias, activation, residual) */
    BEGIN("linear", 5)
    const tb_tensor *x, *w, *b, *r;
    int activation = PyLong_AsLong(args[3]);
    if (PyErr_Occurred())
        return NULL;
    if (scope_import(&scope, args[0], "input", 0, &x) != 0 || scope_import(&scope, args[1], "weight", 0, &w) != 0 ||
        scope_import(&scope, args[2], "bias", 1, &b) != 0 || scope_import(&scope, args[4], "residual", 1, &r) != 0) {
        scope_release(&scope);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    status = tb_op_linear(x, w, b, activation, r, &result);
    Py_END_ALLOW_THREADS
    return finish(&scope, status, &result);
}

static PyObject *py_attention(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    /* attention(q, k, v, mask, causal, scale or None, enable_gqa) */
    BEGIN("attention", 7)
    const tb_tensor *q, *k, *v, *mask;
    int causal = PyObject_IsTrue(args[4]), gqa = PyObject_IsTrue(args[6]);
    double scale = args[5] == Py_None ? NAN : PyFloat_AsDouble(args[5]);
    if (PyErr_Occurred())
        return NULL;
    if (scope_import(&scope, args[0], "query", 0, &q) != 0 || scope_import(&scope, args[1], "key", 0, &k) != 0 ||
        scope_import(&scope, args[2], "value", 0, &v) != 0 || scope_import(&scope, args[3], "attn_mask", 1, &mask) != 0) {
        scope_release(&scope);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    status = tb_op_attention(q, k, v, mask, causal, (float)scale, gqa, &result);
    Py_END_ALLOW_THREADS
    return finish(&scope, status, &result);
}

static PyObject *py_rope(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    BEGIN("rope", 4)
    const tb_tensor *x, *c, *s;
    int interleaved = PyObject_IsTrue(args[3]);
    if (scope_import(&scope, args[0], "input", 0, &x) != 0 || scope_import(&scope, args[1], "cos", 0, &c) != 0 ||
        scope_import(&scope, args[2], "sin", 0, &s) != 0) {
        scope_release(&scope);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    status = tb_op_rope(x, c, s, interleaved, &result);
    Py_END_ALLOW_THREADS
    return finish(&scope, status, &result);
}

static PyObject *py_embedding(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    BEGIN("embedding", 2)
    const tb_tensor *w, *i;
    if (scope_import(&scope, args[0], "weight", 0, &w) != 0 || scope_import(&scope, args[1], "indices", 0, &i) != 0) {
        scope_release(&scope);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    status = tb_op_embedding(w, i, &result);
    Py_END_ALLOW_THREADS
    return finish(&scope, status, &result);
}

static PyObject *py_cast(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    BEGIN("cast", 2)
    const tb_tensor *x;
    tb_dtype dtype;
    if (parse_dtype(args[1], &dtype) != 0 || scope_import(&scope, args[0], "input", 0, &x) != 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    status = tb_op_cast(x, dtype, &result);
    Py_END_ALLOW_THREADS
    return finish(&scope, status, &result);
}

static PyObject *join(PyObject *const *args, Py_ssize_t nargs, int stack) {
    if (check_nargs(nargs, 2, stack ? "stack" : "cat") != 0)
        return NULL;
    long long dim = PyLong_AsLongLong(args[1]);
    if (dim == -1 && PyErr_Occurred())
        return NULL;
    PyObject *sequence = PySequence_Fast(args[0], "expected a sequence of tensors");
    if (!sequence)
        return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(sequence);
    if (count > 4096) {
        Py_DECREF(sequence);
        PyErr_SetString(PyExc_ValueError, "at most 4096 tensors can be joined at once");
        return NULL;
    }
    tb_tensor *tensors = PyMem_Calloc((size_t)(count ? count : 1), sizeof *tensors);
    const tb_tensor **pointers = PyMem_Calloc((size_t)(count ? count : 1), sizeof *pointers);
    Py_ssize_t imported = 0;
    int failed = !tensors || !pointers;
    if (failed)
        PyErr_NoMemory();
    for (; !failed && imported < count; imported++) {
        if (tb_py_import_tensor(PySequence_Fast_GET_ITEM(sequence, imported), "tensors", &tensors[imported]) != 0) {
            failed = 1;
            break;
        }
        pointers[imported] = &tensors[imported];
    }
    PyObject *output = NULL;
    if (!failed) {
        tb_tensor result;
        tb_status status;
        Py_BEGIN_ALLOW_THREADS
        status = stack ? tb_op_stack((int)count, pointers, dim, &result) : tb_op_cat((int)count, pointers, dim, &result);
        Py_END_ALLOW_THREADS
        output = status == TB_OK ? tb_py_tensor_wrap(&result) : tb_py_raise(status);
    }
    for (Py_ssize_t i = 0; i < imported; i++)
        tb_tensor_release(&tensors[i]);
    PyMem_Free(tensors);
    PyMem_Free(pointers);
    Py_DECREF(sequence);
    return output;
}

static PyObject *py_cat(PyObject *m, PyObject *const *args, Py_ssize_t nargs) { return join(args, nargs, 0); }
static PyObject *py_stack(PyObject *m, PyObject *const *args, Py_ssize_t nargs) { return join(args, nargs, 1); }

static PyObject *name_list(const char *const *names, int count) {
    PyObject *list = PyList_New(count);
    for (int i = 0; list && i < count; i++)
        PyList_SET_ITEM(list, i, PyUnicode_FromString(names[i]));
    return list;
}

static PyObject *py_op_names(PyObject *m, PyObject *unused) {
    static const char *const activations[TB_ACTIVATION_COUNT] = {"none", "relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh"};
    return Py_BuildValue("{s:N,s:N,s:N,s:N,s:N}", "unary", name_list(tb_unary_op_names, TB_UNARY_COUNT), "binary",
                         name_list(tb_binary_op_names, TB_BINARY_COUNT), "compare",
                         name_list(tb_compare_op_names, TB_COMPARE_COUNT), "reduce",
                         name_list(tb_reduce_op_names, TB_REDUCE_COUNT), "activation",
                         name_list(activations, TB_ACTIVATION_COUNT));
}

#define FASTCALL(fn) (PyCFunction)(void (*)(void))(fn), METH_FASTCALL

static PyMethodDef ops_functions[] = {
    {"unary", FASTCALL(py_unary), "unary(op, x, alpha, lo, hi)"},
    {"binary", FASTCALL(py_binary), "binary(op, a, b, out_dtype)"},
    {"compare", FASTCALL(py_compare), "compare(op, a, b)"},
    {"where", FASTCALL(py_where), "where(cond, a, b, out_dtype)"},
    {"reduce", FASTCALL(py_reduce), "reduce(op, x, dims, keepdim); op -1 is mean"},
    {"var", FASTCALL(py_var), "var(x, dims, correction, keepdim, take_sqrt)"},
    {"arg_reduce", FASTCALL(py_arg_reduce), "arg_reduce(is_max, x, dim, keepdim)"},
    {"softmax", FASTCALL(py_softmax), "softmax(x, dim, log)"},
    {"layer_norm", FASTCALL(py_layer_norm), "layer_norm(x, normalized_ndim, weight, bias, eps)"},
    {"rms_norm", FASTCALL(py_rms_norm), "rms_norm(x, normalized_ndim, weight, eps)"},
    {"matmul", FASTCALL(py_matmul), "matmul(a, b)"},
    {"linear", FASTCALL(py_linear), "linear(x, weight, bias, activation, residual)"},
    {"attention", FASTCALL(py_attention), "attention(q, k, v, mask, causal, scale, enable_gqa)"},
    {"rope", FASTCALL(py_rope), "rope(x, cos, sin, interleaved)"},
    {"embedding", FASTCALL(py_embedding), "embedding(weight, indices)"},
    {"cast", FASTCALL(py_cast), "cast(x, dtype)"},
    {"cat", FASTCALL(py_cat), "cat(tensors, dim)"},
    {"stack", FASTCALL(py_stack), "stack(tensors, dim)"},
    {"op_names", py_op_names, METH_NOARGS, "Names of the op enums, in enum order."},
    {NULL},
};

int tb_pyext_register_ops(PyObject *module) { return PyModule_AddFunctions(module, ops_functions); }
