/* turbo_torch reductions, matmul, softmax, creation (fill, from values, arange, random) and the
 * Tensor method table, each recording its autograd node. */
#include "core/random.h"
#include "eager.h"

#include <math.h>

#include "torchburn/ops.h"

/* dim: None, an int, or a tuple/list of ints -> bit mask (0 = all dims). */
static int parse_dims(PyObject *dim, int ndim, uint32_t *mask) {
    *mask = 0;
    if (!dim || dim == Py_None)
        return 0;
    PyObject *seq = PyLong_Check(dim) ? PyTuple_Pack(1, dim) : PySequence_Fast(dim, "dim must be an int or a tuple of ints");
    if (!seq)
        return -1;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        long long d = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, i));
        if (d == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return -1;
        }
        int nd = ndim ? ndim : 1;
        if (d < -nd || d >= nd) {
            Py_DECREF(seq);
            PyErr_Format(PyExc_IndexError, "Dimension out of range (expected to be in range of [%d, %d], but got %lld)",
                         -nd, nd - 1, d);
            return -1;
        }
        if (ndim == 0)
            continue;
        int bit = (int)(d < 0 ? d + ndim : d);
        if (*mask >> bit & 1) {
            Py_DECREF(seq);
            PyErr_Format(PyExc_RuntimeError, "dim %d appears multiple times in the list of dims", bit);
            return -1;
        }
        *mask |= 1u << bit;
    }
    if (PySequence_Fast_GET_SIZE(seq) == 0 && !PyLong_Check(dim))
        *mask = 0;
    Py_DECREF(seq);
    return 0;
}

static const char *reduce_node_names[TB_EAGER_REDUCE_COUNT] = {
    [TB_EAGER_REDUCE_SUM] = "SumBackward1", [TB_EAGER_REDUCE_PROD] = "ProdBackward1",
    [TB_EAGER_REDUCE_MEAN] = "MeanBackward1", [TB_EAGER_REDUCE_AMAX] = "AmaxBackward0",
    [TB_EAGER_REDUCE_AMIN] = "AminBackward0", [TB_EAGER_REDUCE_NANSUM] = "NansumBackward0",
    [TB_EAGER_REDUCE_LOGSUMEXP] = "LogsumexpBackward0",
};

/* The autograd side of the one-input reductions: when `x` needs grad, a node of `kind` (variant `op`,
 * PyTorch's name `name`) on `result` with ints[0..2] = a, b, c and params.alpha = alpha, saving x in slot 0
 * (when save_input) and the result in slot 1. On failure drops `result` and returns NULL. */
static PyObject *attach_unary_node(PyObject *result, PyObject *x, tt_node_kind kind, int op, const char *name,
                                   int64_t a, int64_t b, int64_t c, double alpha, int save_input) {
    if (!result || !tt_needs_grad(1, &x))
        return result;
    tt_node *node = tt_node_new(kind, op, name, 1, &x);
    if (!node) {
        Py_DECREF(result);
        return NULL;
    }
    node->ints[0] = a;
    node->ints[1] = b;
    node->ints[2] = c;
    node->params.alpha = alpha;
    if (save_input)
        tt_node_save(node, 0, tt_data(x));
    tt_node_save(node, 1, tt_data(result));
    tt_set_grad_fn(result, node);
    return result;
}

/* _tt_reduce(op, x, dim, keepdim, dtype) */
static PyObject *py_reduce(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5 || !tt_check(args[1]))
        return PyErr_Format(PyExc_TypeError, "_tt_reduce(op, tensor, dim, keepdim, dtype)"), NULL;
    int op = (int)PyLong_AsLong(args[0]);
    PyObject *x = args[1];
    const tb_tensor *t = tt_data(x);
    uint32_t mask;
    if (parse_dims(args[2], t->ndim, &mask) != 0)
        return NULL;
    int keepdim = PyObject_IsTrue(args[3]);
    tb_dtype in = t->dtype, out_dtype;
    if (args[4] != Py_None) {
        if (tt_dtype_from_object(args[4], &out_dtype) != 0)
            return NULL;
    } else {
        switch (op) {
        case TB_EAGER_REDUCE_SUM: case TB_EAGER_REDUCE_PROD: case TB_EAGER_REDUCE_NANSUM:
            out_dtype = tb_dtype_category_of(in) == TB_CATEGORY_FLOATING ? in : TB_I64;
            break;
        case TB_EAGER_REDUCE_MEAN:
            if (tb_dtype_category_of(in) != TB_CATEGORY_FLOATING) {
                PyErr_Format(PyExc_RuntimeError, "mean(): could not infer output dtype. Input dtype must be either a "
                             "floating point or complex dtype. Got: %s", tb_dtype_name(in));
                return NULL;
            }
            out_dtype = in;
            break;
        case TB_EAGER_REDUCE_LOGSUMEXP:
            out_dtype = tb_dtype_category_of(in) == TB_CATEGORY_FLOATING ? in : tt_default_dtype;
            break;
        case TB_EAGER_REDUCE_ALL: case TB_EAGER_REDUCE_ANY: out_dtype = in == TB_U8 ? TB_U8 : TB_BOOL; break;
        case TB_EAGER_REDUCE_COUNT_NONZERO: out_dtype = TB_I64; break;
        default: out_dtype = in;
        }
    }
    /* a sum or product with dtype=bool runs in bool, as torch's: the values become bools first (so the
     * result is a logical or / and of them, not the bool of the numeric result) */
    tb_tensor as_bool = {0};
    bool in_bool = out_dtype == TB_BOOL && in != TB_BOOL &&
                   (op == TB_EAGER_REDUCE_SUM || op == TB_EAGER_REDUCE_PROD || op == TB_EAGER_REDUCE_NANSUM);
    if (in_bool) {
        tb_status converted = tb_tensor_contiguous(t, TB_BOOL, &as_bool);
        if (converted != TB_OK)
            return tt_raise(converted);
        t = &as_bool;
    }
    tb_tensor out = {0};
    tb_status status;
    Py_BEGIN_ALLOW_THREADS
    status = tb_eager_reduce((tb_eager_reduce_op)op, t, mask, keepdim, out_dtype, &out);
    Py_END_ALLOW_THREADS
    tb_tensor_release(&as_bool);
    if (status != TB_OK) {
        if (strstr(tb_error_message(), "Dimension out of range"))
            return PyErr_Format(PyExc_IndexError, "%s", tb_error_message()), NULL;
        return tt_raise(status);
    }
    PyObject *result = tt_wrap(&out);
    if (!reduce_node_names[op] || tb_dtype_category_of(out_dtype) != TB_CATEGORY_FLOATING)
        return result;
    return attach_unary_node(result, x, TT_NODE_REDUCE, op, reduce_node_names[op], mask, keepdim, 0, 0.0, 1);
}

/* _tt_var(x, dim, correction, keepdim, take_sqrt) */
static PyObject *py_var(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5 || !tt_check(args[0]))
        return PyErr_Format(PyExc_TypeError, "_tt_var(tensor, dim, correction, keepdim, take_sqrt)"), NULL;
    PyObject *x = args[0];
    uint32_t mask;
    if (parse_dims(args[1], tt_data(x)->ndim, &mask) != 0)
        return NULL;
    double correction = PyFloat_AsDouble(args[2]);
    if (correction == -1 && PyErr_Occurred())
        return NULL;
    int keepdim = PyObject_IsTrue(args[3]), take_sqrt = PyObject_IsTrue(args[4]);
    if (tb_dtype_category_of(tt_data(x)->dtype) != TB_CATEGORY_FLOATING) {
        PyErr_SetString(PyExc_RuntimeError, "std and var only support floating point and complex dtypes");
        return NULL;
    }
    tb_tensor out = {0};
    tb_status status = tb_eager_var(tt_data(x), mask, correction, keepdim, take_sqrt, &out);
    if (status != TB_OK)
        return tt_raise(status);
    return attach_unary_node(tt_wrap(&out), x, TT_NODE_VAR, 0, take_sqrt ? "StdBackward0" : "VarBackward0", mask,
                             keepdim, take_sqrt, correction, 1);
}

/* _tt_norm(x, p, dim, keepdim) */
static PyObject *py_norm(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4 || !tt_check(args[0]))
        return PyErr_Format(PyExc_TypeError, "_tt_norm(tensor, p, dim, keepdim)"), NULL;
    PyObject *x = args[0];
    double p = PyFloat_AsDouble(args[1]);
    uint32_t mask;
    if ((p == -1 && PyErr_Occurred()) || parse_dims(args[2], tt_data(x)->ndim, &mask) != 0)
        return NULL;
    int keepdim = PyObject_IsTrue(args[3]);
    tb_dtype in = tt_data(x)->dtype;
    if (tb_dtype_category_of(in) != TB_CATEGORY_FLOATING) {
        PyErr_Format(PyExc_RuntimeError, "linalg.vector_norm: Expected a floating point or complex tensor as input. Got %s",
                     tb_dtype_name(in));
        return NULL;
    }
    tb_tensor out = {0};
    tb_status status = tb_eager_norm(tt_data(x), p, mask, keepdim, in, &out);
    if (status != TB_OK)
        return tt_raise(status);
    return attach_unary_node(tt_wrap(&out), x, TT_NODE_NORM, 0, "LinalgVectorNormBackward0", mask, keepdim, 0, p, 1);
}

/* _tt_max_dim(is_max, x, dim, keepdim) -> (values, indices) */
static PyObject *py_max_dim(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4 || !tt_check(args[1]))
        return PyErr_Format(PyExc_TypeError, "_tt_max_dim(is_max, tensor, dim, keepdim)"), NULL;
    int is_max = PyObject_IsTrue(args[0]);
    PyObject *x = args[1];
    int64_t dim = PyLong_AsLongLong(args[2]);
    if (dim == -1 && PyErr_Occurred())
        return NULL;
    int nd = tt_data(x)->ndim ? tt_data(x)->ndim : 1;
    if (dim < -nd || dim >= nd)
        return PyErr_Format(PyExc_IndexError, "Dimension out of range (expected to be in range of [%d, %d], but got %lld)",
                            -nd, nd - 1, (long long)dim), NULL;
    int keepdim = PyObject_IsTrue(args[3]);
    tb_tensor values = {0}, indices = {0};
    tb_status status = tb_eager_max_dim(is_max, tt_data(x), dim, keepdim, &values, &indices);
    if (status != TB_OK)
        return tt_raise(status);
    PyObject *v = tt_wrap(&values);
    PyObject *i = v ? tt_wrap(&indices) : (tb_tensor_release(&indices), NULL);
    if (!v || !i) {
        Py_XDECREF(v);
        return NULL;
    }
    if (tb_dtype_category_of(tt_data(v)->dtype) == TB_CATEGORY_FLOATING && tt_needs_grad(1, &x)) {
        tt_node *node = tt_node_new(TT_NODE_MAX_DIM, 0, is_max ? "MaxBackward0" : "MinBackward0", 1, &x);
        if (!node) {
            Py_DECREF(v);
            Py_DECREF(i);
            return NULL;
        }
        int d = 0;
        if (tt_data(x)->ndim)
            (void)tb_normalize_dim(dim, tt_data(x)->ndim, &d);
        node->ints[0] = d;
        /* indices kept with the reduced dim as size 1 for the scatter */
        tt_node_save(node, 0, tt_data(i));
        tt_set_grad_fn(v, node);
    }
    return Py_BuildValue("(NN)", v, i);
}

/* _tt_argmax(is_max, x, dim_or_None, keepdim) */
static PyObject *py_argmax(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4 || !tt_check(args[1]))
        return PyErr_Format(PyExc_TypeError, "_tt_argmax(is_max, tensor, dim, keepdim)"), NULL;
    int is_max = PyObject_IsTrue(args[0]);
    const tb_tensor *t = tt_data(args[1]);
    tb_tensor flat = {0}, indices = {0};
    tb_status status;
    if (args[2] == Py_None) {
        int64_t n = tb_tensor_numel(t);
        status = tb_tensor_reshape(t, 1, &n, &flat);
        if (status == TB_OK)
            status = tb_eager_max_dim(is_max, &flat, 0, false, NULL, &indices);
        tb_tensor_release(&flat);
        if (status == TB_OK && PyObject_IsTrue(args[3])) {
            int64_t ones[TB_MAX_DIMS] = {1, 1, 1, 1, 1, 1, 1, 1};
            tb_tensor r;
            status = tb_tensor_reshape(&indices, t->ndim, ones, &r);
            tb_tensor_release(&indices);
            indices = r;
        }
    } else {
        int64_t dim = PyLong_AsLongLong(args[2]);
        if (dim == -1 && PyErr_Occurred())
            return NULL;
        status = tb_eager_max_dim(is_max, t, dim, PyObject_IsTrue(args[3]), NULL, &indices);
    }
    if (status != TB_OK)
        return tt_raise(status);
    return tt_wrap(&indices);
}

/* _tt_cumulative(is_prod, x, dim, dtype) */
static PyObject *py_cumulative(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4 || !tt_check(args[1]))
        return PyErr_Format(PyExc_TypeError, "_tt_cumulative(is_prod, tensor, dim, dtype)"), NULL;
    int is_prod = PyObject_IsTrue(args[0]);
    PyObject *x = args[1];
    int64_t dim = PyLong_AsLongLong(args[2]);
    if (dim == -1 && PyErr_Occurred())
        return NULL;
    tb_dtype in = tt_data(x)->dtype, out_dtype = tb_dtype_category_of(in) == TB_CATEGORY_FLOATING ? in : TB_I64;
    if (args[3] != Py_None && tt_dtype_from_object(args[3], &out_dtype) != 0)
        return NULL;
    tb_tensor out = {0};
    tb_status status = tb_eager_cumulative((tb_eager_scan_op)is_prod, tt_data(x), dim, out_dtype, &out);
    if (status != TB_OK)
        return tt_raise(status);
    PyObject *result = tt_wrap(&out);
    if (tb_dtype_category_of(out_dtype) != TB_CATEGORY_FLOATING)
        return result;
    int d = 0;
    if (tt_data(x)->ndim)
        (void)tb_normalize_dim(dim, tt_data(x)->ndim, &d);
    return attach_unary_node(result, x, TT_NODE_CUMULATIVE, is_prod, is_prod ? "CumprodBackward0" : "CumsumBackward0",
                             d, 0, 0, 0.0, 1);
}

PyObject *tt_matmul(PyObject *a, PyObject *b) {
    tb_tensor out = {0};
    tb_status status;
    Py_BEGIN_ALLOW_THREADS
    status = tb_eager_matmul(tt_data(a), tt_data(b), &out);
    Py_END_ALLOW_THREADS
    if (status != TB_OK)
        return tt_raise(status);
    PyObject *result = tt_wrap(&out);
    PyObject *inputs[2] = {a, b};
    if (result && tt_needs_grad(2, inputs)) {
        tt_node *node = tt_node_new(TT_NODE_MATMUL, 0, "MmBackward0", 2, inputs);
        if (!node) {
            Py_DECREF(result);
            return NULL;
        }
        tt_node_save(node, 0, tt_data(a));
        tt_node_save(node, 1, tt_data(b));
        tt_set_grad_fn(result, node);
    }
    return result;
}

static PyObject *py_matmul(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !tt_check(args[0]) || !tt_check(args[1]))
        return PyErr_Format(PyExc_TypeError, "matmul(): arguments must be Tensors"), NULL;
    return tt_matmul(args[0], args[1]);
}

/* _tt_softmax(x, dim, log): float32 through the SIMD softmax, other floats composed in double. */
static PyObject *py_softmax(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !tt_check(args[0]))
        return PyErr_Format(PyExc_TypeError, "_tt_softmax(tensor, dim, log)"), NULL;
    PyObject *x = args[0];
    const tb_tensor *t = tt_data(x);
    int64_t dim = PyLong_AsLongLong(args[1]);
    int log_form = PyObject_IsTrue(args[2]);
    if (dim == -1 && PyErr_Occurred())
        return NULL;
    int d = 0;
    if (t->ndim) {
        if (tb_normalize_dim(dim, t->ndim, &d) != TB_OK)
            return PyErr_Format(PyExc_IndexError, "%s", tb_error_message()), NULL;
    }
    tb_dtype dtype = tb_dtype_category_of(t->dtype) == TB_CATEGORY_FLOATING ? t->dtype : tt_default_dtype;
    tb_tensor out = {0};
    tb_status status;
    if (dtype == TB_F32 && t->ndim > 0) {
        status = tb_op_softmax(t, d, log_form, &out);
    } else {
        /* y = x - logsumexp(x) (log) or exp of it; 16-bit floats work in float32 and round once at the
         * end, as torch's kernels (rounding the logsumexp and the difference to half first cost up to
         * 8x torch's error) */
        tb_dtype work = dtype == TB_F16 || dtype == TB_BF16 ? TB_F32 : dtype;
        tb_tensor lse = {0}, shifted = {0};
        uint32_t mask = t->ndim ? 1u << d : 0;
        status = tb_eager_reduce(TB_EAGER_REDUCE_LOGSUMEXP, t, mask, true, work, &lse);
        if (status == TB_OK)
            status = tb_eager_binary(TB_PWB_SUB, (tb_eager_operand){.tensor = t}, (tb_eager_operand){.tensor = &lse}, NULL,
                                     work, log_form ? dtype : work, &shifted);
        if (status == TB_OK && !log_form)
            status = tb_eager_unary(TB_PW_EXP, &shifted, NULL, work, dtype, &out);
        else if (status == TB_OK) {
            out = shifted;
            memset(&shifted, 0, sizeof shifted);
        }
        tb_tensor_release(&lse);
        tb_tensor_release(&shifted);
    }
    if (status != TB_OK)
        return tt_raise(status);
    return attach_unary_node(tt_wrap(&out), x, TT_NODE_SOFTMAX, 0, log_form ? "LogSoftmaxBackward0" : "SoftmaxBackward0",
                             d, log_form, 0, 0.0, 0);
}

/* ---- creation ---- */

static int parse_size(PyObject *shape_object, int64_t *shape, int *ndim) {
    PyObject *seq = PySequence_Fast(shape_object, "size must be a sequence of ints");
    if (!seq)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > TB_MAX_DIMS) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_RuntimeError, "turbo_torch supports at most %d dims", TB_MAX_DIMS);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        shape[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, i));
        if (shape[i] == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return -1;
        }
        if (shape[i] < 0) {
            Py_DECREF(seq);
            PyErr_Format(PyExc_RuntimeError, "Trying to create tensor with negative dimension %lld: %R",
                         (long long)shape[i], shape_object);
            return -1;
        }
    }
    *ndim = (int)n;
    Py_DECREF(seq);
    return 0;
}

/* _tt_full(shape, value, dtype) */
static PyObject *py_full(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3)
        return PyErr_Format(PyExc_TypeError, "_tt_full(shape, value, dtype)"), NULL;
    int64_t shape[TB_MAX_DIMS];
    int ndim;
    tb_dtype dtype;
    if (parse_size(args[0], shape, &ndim) != 0 || tt_dtype_from_object(args[2], &dtype) != 0)
        return NULL;
    tb_tensor out;
    tb_status status;
    if (tb_dtype_category_of(dtype) != TB_CATEGORY_FLOATING && PyLong_Check(args[1])) {
        long long v = PyLong_AsLongLong(args[1]);
        if (v == -1 && PyErr_Occurred())
            return NULL;
        status = tb_eager_full(TB_I64, ndim, shape, 0.0, &out);
        if (status == TB_OK) {
            int64_t *p = tb_tensor_data(&out);
            for (int64_t i = 0, n = tb_tensor_numel(&out); i < n; i++)
                p[i] = v;
            if (dtype != TB_I64) {
                tb_tensor cast;
                status = tb_tensor_contiguous(&out, dtype, &cast);
                tb_tensor_release(&out);
                out = cast;
            }
        }
    } else {
        double v = PyFloat_AsDouble(args[1]);
        if (v == -1 && PyErr_Occurred())
            return NULL;
        status = tb_eager_full(dtype, ndim, shape, v, &out);
    }
    if (status != TB_OK)
        return tt_raise(status);
    return tt_wrap(&out);
}

/* _tt_from_values(flat list of numbers, shape, dtype): the values converted exactly (ints as int64,
 * floats as double) and cast once. */
static PyObject *py_from_values(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3)
        return PyErr_Format(PyExc_TypeError, "_tt_from_values(values, shape, dtype)"), NULL;
    PyObject *seq = PySequence_Fast(args[0], "values must be a sequence");
    if (!seq)
        return NULL;
    int64_t shape[TB_MAX_DIMS];
    int ndim;
    tb_dtype dtype;
    if (parse_size(args[1], shape, &ndim) != 0 || tt_dtype_from_object(args[2], &dtype) != 0) {
        Py_DECREF(seq);
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    int integral = tb_dtype_category_of(dtype) != TB_CATEGORY_FLOATING;
    tb_tensor staged;
    tb_status status = tb_tensor_empty(integral ? TB_I64 : TB_F64, ndim, shape, 0, &staged);
    if (status == TB_OK && tb_tensor_numel(&staged) != n)
        status = tb_error_set(TB_ERR_SHAPE, "values do not fill the shape");
    if (status != TB_OK) {
        Py_DECREF(seq);
        return tt_raise(status);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        if (integral) {
            long long v;
            if (PyFloat_Check(item)) {
                v = tb_float_to_int_like_torch(PyFloat_AS_DOUBLE(item), TB_I64);
            } else {
                v = PyLong_AsLongLong(item);
                if (v == -1 && PyErr_Occurred()) {
                    Py_DECREF(seq);
                    tb_tensor_release(&staged);
                    PyErr_Clear();
                    return PyErr_Format(PyExc_TypeError, "could not convert %R to an integer tensor element", item), NULL;
                }
            }
            ((int64_t *)tb_tensor_data(&staged))[i] = v;
        } else {
            double v = PyFloat_AsDouble(item);
            if (v == -1 && PyErr_Occurred()) {
                Py_DECREF(seq);
                tb_tensor_release(&staged);
                PyErr_Clear();
                return PyErr_Format(PyExc_TypeError, "could not convert %R to a tensor element", item), NULL;
            }
            ((double *)tb_tensor_data(&staged))[i] = v;
        }
    }
    Py_DECREF(seq);
    if (staged.dtype == dtype)
        return tt_wrap(&staged);
    tb_tensor out;
    status = tb_tensor_contiguous(&staged, dtype, &out);
    tb_tensor_release(&staged);
    if (status != TB_OK)
        return tt_raise(status);
    return tt_wrap(&out);
}

/* _tt_arange(start, step, count, dtype): start + i * step in double (exact for integers < 2^53). */
static PyObject *py_arange(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4)
        return PyErr_Format(PyExc_TypeError, "_tt_arange(start, step, count, dtype)"), NULL;
    double start = PyFloat_AsDouble(args[0]), step = PyFloat_AsDouble(args[1]);
    long long count = PyLong_AsLongLong(args[2]);
    tb_dtype dtype;
    if (PyErr_Occurred() || tt_dtype_from_object(args[3], &dtype) != 0)
        return NULL;
    tb_tensor staged;
    int64_t shape[1] = {count};
    tb_status status = tb_tensor_empty(TB_F64, 1, shape, 0, &staged);
    if (status != TB_OK)
        return tt_raise(status);
    double *p = tb_tensor_data(&staged);
    for (long long i = 0; i < count; i++)
        p[i] = start + (double)i * step;
    if (dtype == TB_F64)
        return tt_wrap(&staged);
    tb_tensor out;
    status = tb_tensor_contiguous(&staged, dtype, &out);
    tb_tensor_release(&staged);
    return status == TB_OK ? tt_wrap(&out) : tt_raise(status);
}

/* as_tensor of a scalar in dtype (for setitem values) */
PyObject *tt_as_tensor(PyObject *object, int dtype) {
    PyObject *values = PyList_New(1);
    if (!values)
        return NULL;
    PyList_SET_ITEM(values, 0, Py_NewRef(object));
    PyObject *shape = PyTuple_New(0);
    PyObject *args[3] = {values, shape, tt_dtype_objects[dtype]};
    PyObject *r = shape ? py_from_values(NULL, args, 3) : NULL;
    Py_DECREF(values);
    Py_XDECREF(shape);
    return r;
}

/* ---- random: xoshiro256** seeded through splitmix64 (manual_seed; core/random.h) ---- */
static uint64_t rng_state[4] = {0x9E3779B97F4A7C15ull, 0xBF58476D1CE4E5B9ull, 0x94D049BB133111EBull, 0x2545F4914F6CDD1Dull};

static PyObject *py_manual_seed(PyObject *m, PyObject *arg) {
    unsigned long long seed = PyLong_AsUnsignedLongLongMask(arg);
    if (PyErr_Occurred())
        return NULL;
    tb_xoshiro256ss_seed(rng_state, seed);
    Py_RETURN_NONE;
}
static PyObject *py_get_rng_state(PyObject *m, PyObject *unused) {
    return Py_BuildValue("(KKKK)", rng_state[0], rng_state[1], rng_state[2], rng_state[3]);
}
static PyObject *py_set_rng_state(PyObject *m, PyObject *arg) {
    unsigned long long s[4];
    if (!PyArg_ParseTuple(arg, "KKKK", &s[0], &s[1], &s[2], &s[3]))
        return NULL;
    for (int i = 0; i < 4; i++)
        rng_state[i] = s[i];
    Py_RETURN_NONE;
}

/* _tt_random(kind, shape, dtype, a, b): kind 0 uniform [a, b), 1 normal(mean a, std b), 2 integers [a, b) */
static PyObject *py_random(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5)
        return PyErr_Format(PyExc_TypeError, "_tt_random(kind, shape, dtype, a, b)"), NULL;
    long kind = PyLong_AsLong(args[0]);
    int64_t shape[TB_MAX_DIMS];
    int ndim;
    tb_dtype dtype;
    if (parse_size(args[1], shape, &ndim) != 0 || tt_dtype_from_object(args[2], &dtype) != 0)
        return NULL;
    double a = PyFloat_AsDouble(args[3]), b = PyFloat_AsDouble(args[4]);
    if (PyErr_Occurred())
        return NULL;
    tb_tensor staged;
    tb_status status = tb_tensor_empty(TB_F64, ndim, shape, 0, &staged);
    if (status != TB_OK)
        return tt_raise(status);
    double *p = tb_tensor_data(&staged);
    int64_t n = tb_tensor_numel(&staged);
    for (int64_t i = 0; i < n; i++) {
        if (kind == 0) {
            p[i] = a + (b - a) * tb_xoshiro256ss_unit(rng_state);
        } else if (kind == 1) {
            double u1 = tb_xoshiro256ss_unit(rng_state), u2 = tb_xoshiro256ss_unit(rng_state);
            p[i] = a + b * sqrt(-2.0 * log(1.0 - u1)) * cos(2.0 * 3.14159265358979323846 * u2);
        } else {
            double span = b - a;
            p[i] = a + floor(tb_xoshiro256ss_unit(rng_state) * span);
        }
    }
    if (dtype == TB_F64)
        return tt_wrap(&staged);
    tb_tensor out;
    status = tb_tensor_contiguous(&staged, dtype, &out);
    tb_tensor_release(&staged);
    return status == TB_OK ? tt_wrap(&out) : tt_raise(status);
}

/* _tt_make_subclass(cls, data, requires_grad): an instance of a Tensor subclass (nn.Parameter)
 * sharing data's view, as a leaf */
static PyObject *py_make_subclass(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyType_Check(args[0]) || !PyType_IsSubtype((PyTypeObject *)args[0], tt_tensor_type) ||
        !tt_check(args[1]))
        return PyErr_Format(PyExc_TypeError, "_tt_make_subclass(cls, data, requires_grad)"), NULL;
    int requires_grad = PyObject_IsTrue(args[2]);
    if (requires_grad && tb_dtype_category_of(tt_data(args[1])->dtype) != TB_CATEGORY_FLOATING)
        return PyErr_Format(PyExc_RuntimeError, "Only Tensors of floating point and complex dtype can require gradients"),
               NULL;
    PyTypeObject *cls = (PyTypeObject *)args[0];
    tt_tensor *self = (tt_tensor *)cls->tp_alloc(cls, 0);
    if (!self)
        return NULL;
    tb_tensor_retain(tt_data(args[1]), &self->base.tensor);
    self->requires_grad = (char)requires_grad;
    return (PyObject *)self;
}

static PyObject *py_wrap_base(PyObject *m, PyObject *arg) {
    /* a zero-copy turbo_torch view of a torchburn._C.Tensor (from_numpy / from DLPack) */
    if (!tb_py_tensor_check(arg))
        return PyErr_Format(PyExc_TypeError, "expected a torchburn tensor"), NULL;
    tb_tensor alias;
    tb_tensor_retain(&((tb_py_tensor *)arg)->tensor, &alias);
    return tt_wrap(&alias);
}

/* ---- the method table (C methods; the long tail is attached from Python) ---- */

static PyObject *method_sum(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    PyObject *dim = nargs > 0 ? args[0] : Py_None, *keepdim = nargs > 1 ? args[1] : Py_False, *dtype = Py_None;
    for (Py_ssize_t i = 0; kwnames && i < PyTuple_GET_SIZE(kwnames); i++) {
        const char *k = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, i));
        PyObject *v = args[nargs + i];
        if (strcmp(k, "dim") == 0)
            dim = v;
        else if (strcmp(k, "keepdim") == 0)
            keepdim = v;
        else if (strcmp(k, "dtype") == 0)
            dtype = v;
        else
            return PyErr_Format(PyExc_TypeError, "sum() got an unexpected keyword argument '%s'", k), NULL;
    }
    PyObject *call[5] = {NULL, self, dim, keepdim, dtype};
    static PyObject *op_sum;
    if (!op_sum)
        op_sum = PyLong_FromLong(TB_EAGER_REDUCE_SUM);
    call[0] = op_sum;
    return py_reduce(NULL, call, 5);
}

static PyObject *method_numel(PyObject *self, PyObject *unused) { return PyLong_FromLongLong(tb_tensor_numel(tt_data(self))); }
static PyObject *method_dim(PyObject *self, PyObject *unused) { return PyLong_FromLong(tt_data(self)->ndim); }
static PyObject *method_is_contiguous(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    return PyBool_FromLong(tb_tensor_is_contiguous(tt_data(self)));
}
static PyObject *method_storage_offset(PyObject *self, PyObject *unused) { return PyLong_FromLongLong(tt_data(self)->offset); }
static PyObject *method_data_ptr(PyObject *self, PyObject *unused) {
    tb_storage_mark_exported(tt_data(self)->storage); /* an address can be written through (ctypes) */
    return PyLong_FromVoidPtr(tt_data(self)->storage->data ? tb_tensor_data(tt_data(self)) : NULL);
}

extern PyMethodDef tt_autograd_methods[];
extern PyMethodDef tt_shape_methods[];
static PyMethodDef compute_methods[] = {
    {"sum", (PyCFunction)(void (*)(void))method_sum, METH_FASTCALL | METH_KEYWORDS, "Sum over dims."},
    {"numel", method_numel, METH_NOARGS, "Number of elements."},
    {"dim", method_dim, METH_NOARGS, "Number of dims."},
    {"ndimension", method_dim, METH_NOARGS, "Number of dims."},
    {"is_contiguous", (PyCFunction)(void (*)(void))method_is_contiguous, METH_FASTCALL, "Row-major contiguous?"},
    {"storage_offset", method_storage_offset, METH_NOARGS, "Offset in the storage, in elements."},
    {"data_ptr", method_data_ptr, METH_NOARGS, "Address of the first element."},
    {NULL},
};

PyMethodDef tt_tensor_methods[64];

static void build_method_table(void) {
    int k = 0;
    PyMethodDef *tables[] = {tt_autograd_methods, tt_shape_methods, compute_methods};
    for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++)
        for (PyMethodDef *d = tables[t]; d->ml_name && k < 63; d++)
            tt_tensor_methods[k++] = *d;
    tt_tensor_methods[k] = (PyMethodDef){NULL};
}

static PyObject *py_reduce_names(PyObject *m, PyObject *unused) {
    PyObject *list = PyList_New(TB_EAGER_REDUCE_COUNT);
    for (int i = 0; list && i < TB_EAGER_REDUCE_COUNT; i++)
        PyList_SET_ITEM(list, i, PyUnicode_FromString(tb_eager_reduce_names[i]));
    return list;
}

static PyMethodDef compute_functions[] = {
    {"_tt_reduce_names", py_reduce_names, METH_NOARGS, NULL},
    {"_tt_reduce", (PyCFunction)(void (*)(void))py_reduce, METH_FASTCALL, NULL},
    {"_tt_var", (PyCFunction)(void (*)(void))py_var, METH_FASTCALL, NULL},
    {"_tt_norm", (PyCFunction)(void (*)(void))py_norm, METH_FASTCALL, NULL},
    {"_tt_max_dim", (PyCFunction)(void (*)(void))py_max_dim, METH_FASTCALL, NULL},
    {"_tt_argmax", (PyCFunction)(void (*)(void))py_argmax, METH_FASTCALL, NULL},
    {"_tt_cumulative", (PyCFunction)(void (*)(void))py_cumulative, METH_FASTCALL, NULL},
    {"_tt_matmul", (PyCFunction)(void (*)(void))py_matmul, METH_FASTCALL, NULL},
    {"_tt_softmax", (PyCFunction)(void (*)(void))py_softmax, METH_FASTCALL, NULL},
    {"_tt_full", (PyCFunction)(void (*)(void))py_full, METH_FASTCALL, NULL},
    {"_tt_from_values", (PyCFunction)(void (*)(void))py_from_values, METH_FASTCALL, NULL},
    {"_tt_arange", (PyCFunction)(void (*)(void))py_arange, METH_FASTCALL, NULL},
    {"_tt_random", (PyCFunction)(void (*)(void))py_random, METH_FASTCALL, NULL},
    {"_tt_manual_seed", py_manual_seed, METH_O, NULL},
    {"_tt_get_rng_state", py_get_rng_state, METH_NOARGS, NULL},
    {"_tt_set_rng_state", py_set_rng_state, METH_O, NULL},
    {"_tt_wrap_base", py_wrap_base, METH_O, NULL},
    {"_tt_make_subclass", (PyCFunction)(void (*)(void))py_make_subclass, METH_FASTCALL, NULL},
    {NULL},
};

int tt_register_compute(PyObject *module);
int tt_register_compute(PyObject *module) {
    build_method_table();
    return PyModule_AddFunctions(module, compute_functions);
}

int tt_register_optim(PyObject *module); /* eager_optim.c */
int tt_register_serialize(PyObject *module);
int tb_pyext_register_eager(PyObject *module) {
    extern int tt_register_nn(PyObject *module);
    extern int tt_register_rnn(PyObject *module);
    if (tt_register_rnn(module) != 0 || tt_register_compute(module) != 0 || tt_register_tensor(module) != 0 || tt_register_autograd(module) != 0 ||
        tt_register_ops(module) != 0 || tt_register_index(module) != 0 || tt_register_nn(module) != 0 ||
        tt_register_optim(module) != 0 || tt_register_serialize(module) != 0)
        return -1;
    return 0;
}
