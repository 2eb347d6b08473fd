/* turbo_torch views, indexing and joins: view/reshape/permute/transpose/expand/squeeze/unsqueeze/
 * flip/cast, basic and boolean/integer-tensor indexing (get and set), cat/stack and where, each
 * recording its autograd node. */
#include "eager.h"

#include <math.h>

enum { VIEW_RESHAPE, VIEW_VIEW, VIEW_PERMUTE, VIEW_TRANSPOSE, VIEW_EXPAND, VIEW_SQUEEZE, VIEW_SQUEEZE_ALL,
       VIEW_UNSQUEEZE, VIEW_FLIP, VIEW_CONTIGUOUS, VIEW_CLONE, VIEW_CAST };

static PyObject *finish_view(PyObject *x, tb_tensor *result, tt_node_kind kind, const char *name, const int64_t *ints,
                             int nints) {
    PyObject *wrapped = tt_wrap(result);
    if (!wrapped)
        return NULL;
    if (tt_needs_grad(1, &x) && tb_dtype_category_of(tt_data(wrapped)->dtype) == TB_CATEGORY_FLOATING) {
        tt_node *node = tt_node_new(kind, 0, name, 1, &x);
        if (!node) {
            Py_DECREF(wrapped);
            return NULL;
        }
        for (int i = 0; i < nints; i++)
            node->ints[i] = ints[i];
        tt_set_grad_fn(wrapped, node);
    }
    return wrapped;
}

/* Reads a shape from args (ints, or one tuple/list/Size). */
static int parse_shape(PyObject *const *args, Py_ssize_t nargs, int64_t *shape, int *ndim) {
    PyObject *seq = NULL;
    if (nargs == 1 && (PyTuple_Check(args[0]) || PyList_Check(args[0]))) {
        seq = args[0];
        nargs = PySequence_Fast_GET_SIZE(seq);
        args = PySequence_Fast_ITEMS(seq);
    }
    if (nargs > TB_MAX_DIMS) {
        PyErr_Format(PyExc_RuntimeError, "turbo_torch supports at most %d dims, got %zd", TB_MAX_DIMS, nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) {
        shape[i] = PyLong_AsLongLong(args[i]);
        if (shape[i] == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "shape entries must be ints, got %s", Py_TYPE(args[i])->tp_name);
            return -1;
        }
    }
    *ndim = (int)nargs;
    return 0;
}

PyObject *tt_view_op(PyObject *x, int kind, const int64_t *args, int nargs) {
    const tb_tensor *t = tt_data(x);
    tb_tensor result = {0};
    tb_status status = TB_OK;
    tt_node_kind node_kind = TT_NODE_VIEW;
    const char *name = "ViewBackward0";
    int64_t ints[TB_MAX_DIMS] = {0};
    int nints = 0;
    switch (kind) {
    case VIEW_RESHAPE: case VIEW_VIEW:
        status = kind == VIEW_VIEW ? tb_tensor_view(t, nargs, args, &result) : tb_tensor_reshape(t, nargs, args, &result);
        if (status == TB_ERR_UNSUPPORTED && kind == VIEW_VIEW) {
            PyErr_SetString(PyExc_RuntimeError, "view size is not compatible with input tensor's size and stride (at "
                            "least one dimension spans across two contiguous subspaces). Use .reshape(...) instead.");
            return NULL;
        }
        name = kind == VIEW_VIEW ? "ViewBackward0" : "ReshapeAliasBackward0";
        break;
    case VIEW_PERMUTE:
        if (nargs != t->ndim) {
            PyErr_Format(PyExc_RuntimeError, "permute(sparse_coo): number of dimensions in the tensor input does not "
                         "match the length of the desired ordering of dimensions i.e. input.dim() = %d is not equal to "
                         "len(dims) = %d", t->ndim, nargs);
            return NULL;
        }
        status = tb_tensor_permute(t, nargs, args, &result);
        node_kind = TT_NODE_PERMUTE;
        name = "PermuteBackward0";
        for (int i = 0; i < nargs; i++)
            ints[i] = args[i] < 0 ? args[i] + t->ndim : args[i];
        nints = nargs;
        break;
    case VIEW_TRANSPOSE: {
        if (t->ndim == 0) {
            tb_tensor_retain(t, &result);
        } else {
            int d0, d1;
            status = tb_normalize_dim(args[0], t->ndim, &d0);
            if (status == TB_OK)
                status = tb_normalize_dim(args[1], t->ndim, &d1);
            if (status == TB_OK) {
                for (int i = 0; i < t->ndim; i++)
                    ints[i] = i;
                ints[d0] = d1;
                ints[d1] = d0;
                status = tb_tensor_permute(t, t->ndim, ints, &result);
            }
        }
        nints = t->ndim;
        node_kind = TT_NODE_PERMUTE;
        name = "TransposeBackward0";
        break;
    }
    case VIEW_EXPAND:
        status = tb_tensor_expand(t, nargs, args, &result);
        node_kind = TT_NODE_EXPAND;
        name = "ExpandBackward0";
        break;
    case VIEW_SQUEEZE: case VIEW_SQUEEZE_ALL:
        status = t->ndim == 0 ? (tb_tensor_retain(t, &result), TB_OK)
                              : tb_tensor_squeeze(t, nargs ? args[0] : 0, kind == VIEW_SQUEEZE_ALL, &result);
        name = "SqueezeBackward0";
        break;
    case VIEW_UNSQUEEZE:
        status = tb_tensor_unsqueeze(t, args[0], &result);
        name = "UnsqueezeBackward0";
        break;
    case VIEW_CONTIGUOUS: case VIEW_CLONE: case VIEW_CAST: {
        tb_dtype dtype = kind == VIEW_CAST ? (tb_dtype)args[0] : t->dtype;
        if (kind == VIEW_CONTIGUOUS && tb_tensor_is_contiguous(t))
            return Py_NewRef(x);
        status = tb_tensor_empty(dtype, t->ndim, t->shape, 0, &result);
        if (status == TB_OK)
            status = tb_tensor_copy(&result, t);
        node_kind = TT_NODE_CAST;
        name = kind == VIEW_CAST ? "ToCopyBackward0" : "CloneBackward0";
        break;
    }
    case VIEW_FLIP: {
        uint32_t mask = 0;
        for (int i = 0; i < nargs; i++) {
            int d;
            status = tb_normalize_dim(args[i], t->ndim, &d);
            if (status != TB_OK)
                break;
            mask |= 1u << d;
        }
        if (status == TB_OK)
            status = tb_eager_flip(t, mask, &result);
        node_kind = TT_NODE_FLIP;
        name = "FlipBackward0";
        ints[0] = mask;
        nints = 1;
        break;
    }
    default: PyErr_SetString(PyExc_ValueError, "unknown view kind"); return NULL;
    }
    if (status != TB_OK) {
        tb_tensor_release(&result);
        if (status == TB_ERR_INVALID_ARGUMENT && strstr(tb_error_message(), "dim"))
            return PyErr_Format(PyExc_IndexError, "%s", tb_error_message()), NULL;
        return tt_raise(status);
    }
    return finish_view(x, &result, node_kind, name, ints, nints);
}

/* _tt_view(x, kind, *ints) */
static PyObject *py_view(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 2 || !tt_check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "_tt_view(tensor, kind, *ints)");
        return NULL;
    }
    long kind = PyLong_AsLong(args[1]);
    int64_t ints[TB_MAX_DIMS];
    int n;
    if (parse_shape(args + 2, nargs - 2, ints, &n) != 0)
        return NULL;
    return tt_view_op(args[0], (int)kind, ints, n);
}

#define VIEW_METHOD(fn, kind)                                                                 \
    static PyObject *fn(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {            \
        int64_t ints[TB_MAX_DIMS];                                                            \
        int n;                                                                                \
        if (parse_shape(args, nargs, ints, &n) != 0)                                          \
            return NULL;                                                                      \
        return tt_view_op(self, kind, ints, n);                                               \
    }
VIEW_METHOD(method_view, VIEW_VIEW)
VIEW_METHOD(method_reshape, VIEW_RESHAPE)
VIEW_METHOD(method_permute, VIEW_PERMUTE)
VIEW_METHOD(method_expand, VIEW_EXPAND)
VIEW_METHOD(method_transpose, VIEW_TRANSPOSE)
#undef VIEW_METHOD

static PyObject *method_unsqueeze(PyObject *self, PyObject *arg) {
    int64_t d = PyLong_AsLongLong(arg);
    if (d == -1 && PyErr_Occurred())
        return NULL;
    return tt_view_op(self, VIEW_UNSQUEEZE, &d, 1);
}
static PyObject *method_squeeze(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs == 0 || args[0] == Py_None)
        return tt_view_op(self, VIEW_SQUEEZE_ALL, NULL, 0);
    int64_t d = PyLong_AsLongLong(args[0]);
    if (d == -1 && PyErr_Occurred())
        return NULL;
    return tt_view_op(self, VIEW_SQUEEZE, &d, 1);
}
static PyObject *method_t(PyObject *self, PyObject *unused) {
    if (tt_data(self)->ndim > 2) {
        PyErr_Format(PyExc_RuntimeError, "t() expects a tensor with <= 2 dimensions, but self is %dD", tt_data(self)->ndim);
        return NULL;
    }
    if (tt_data(self)->ndim < 2)
        return tt_view_op(self, VIEW_RESHAPE, tt_data(self)->shape, tt_data(self)->ndim);
    int64_t dims[2] = {0, 1};
    return tt_view_op(self, VIEW_TRANSPOSE, dims, 2);
}
static PyObject *method_contiguous(PyObject *self, PyObject *unused) { return tt_view_op(self, VIEW_CONTIGUOUS, NULL, 0); }
static PyObject *method_clone(PyObject *self, PyObject *const *args, Py_ssize_t nargs) { return tt_view_op(self, VIEW_CLONE, NULL, 0); }

/* ---- basic indexing ---- */

static int is_basic_index(PyObject *item) {
    return PyLong_Check(item) || PySlice_Check(item) || item == Py_None || item == Py_Ellipsis || PyBool_Check(item);
}

/* Applies a tuple of basic indices, recording SLICE/SELECT/VIEW nodes step by step. */
static PyObject *basic_index(PyObject *self, PyObject *tuple) {
    Py_ssize_t n = PyTuple_GET_SIZE(tuple);
    int consumed = 0, ellipsis = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyTuple_GET_ITEM(tuple, i);
        if (item == Py_Ellipsis) {
            if (ellipsis >= 0) {
                PyErr_SetString(PyExc_IndexError, "an index can only have a single ellipsis ('...')");
                return NULL;
            }
            ellipsis = (int)i;
        } else if (item != Py_None && !PyBool_Check(item)) {
            consumed++;
        }
    }
    int ndim = tt_data(self)->ndim;
    if (consumed > ndim) {
        PyErr_Format(PyExc_IndexError, "too many indices for tensor of dimension %d", ndim);
        return NULL;
    }
    PyObject *current = Py_NewRef(self);
    int dim = 0;
    for (Py_ssize_t i = 0; i < n && current; i++) {
        PyObject *item = PyTuple_GET_ITEM(tuple, i);
        PyObject *next = NULL;
        const tb_tensor *t = tt_data(current);
        if (item == Py_Ellipsis) {
            dim += ndim - consumed;
            continue;
        }
        if (item == Py_None || PyBool_Check(item)) {
            int64_t d = dim;
            next = tt_view_op(current, VIEW_UNSQUEEZE, &d, 1);
            if (next && PyBool_Check(item) && item == Py_False) {
                tb_tensor empty;
                PyObject *tmp = next;
                tb_status status = tb_tensor_slice(tt_data(tmp), dim, 0, 0, 1, &empty);
                next = status == TB_OK ? tt_wrap(&empty) : tt_raise(status);
                Py_DECREF(tmp);
            }
            dim++;
        } else if (PyLong_Check(item)) {
            int64_t index = PyLong_AsLongLong(item);
            if (index == -1 && PyErr_Occurred()) {
                Py_DECREF(current);
                return NULL;
            }
            int64_t size = t->shape[dim];
            if (index < -size || index >= size) {
                PyErr_Format(PyExc_IndexError, "index %lld is out of bounds for dimension %d with size %lld",
                             (long long)index, dim, (long long)size);
                Py_DECREF(current);
                return NULL;
            }
            if (index < 0)
                index += size;
            tb_tensor result;
            tb_status status = tb_tensor_select(t, dim, index, &result);
            if (status != TB_OK) {
                Py_DECREF(current);
                return tt_raise(status);
            }
            int64_t ints[2] = {dim, index};
            next = finish_view(current, &result, TT_NODE_SELECT, "SelectBackward0", ints, 2);
        } else {
            Py_ssize_t start, stop, step;
            if (PySlice_Unpack(item, &start, &stop, &step) != 0) {
                Py_DECREF(current);
                return NULL;
            }
            if (step <= 0) {
                PyErr_SetString(PyExc_ValueError, "step must be greater than zero");
                Py_DECREF(current);
                return NULL;
            }
            int64_t size = t->shape[dim];
            PySlice_AdjustIndices((Py_ssize_t)size, &start, &stop, step);
            if (stop < start)
                stop = start;
            tb_tensor result;
            tb_status status = tb_tensor_slice(t, dim, start, stop, step, &result);
            if (status != TB_OK) {
                Py_DECREF(current);
                return tt_raise(status);
            }
            int64_t ints[4] = {dim, start, stop, step};
            next = finish_view(current, &result, TT_NODE_SLICE, "SliceBackward0", ints, 4);
            dim++;
        }
        Py_DECREF(current);
        current = next;
    }
    return current;
}

static PyObject *advanced_getitem; /* turbo_torch._indexing.getitem */
static PyObject *advanced_setitem;

PyObject *tt_getitem(PyObject *self, PyObject *index) {
    if (is_basic_index(index)) {
        PyObject *tuple = PyTuple_Pack(1, index);
        PyObject *r = tuple ? basic_index(self, tuple) : NULL;
        Py_XDECREF(tuple);
        return r;
    }
    if (PyTuple_Check(index)) {
        int all_basic = 1;
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(index); i++)
            all_basic &= is_basic_index(PyTuple_GET_ITEM(index, i));
        if (all_basic)
            return basic_index(self, index);
    }
    if (!advanced_getitem) {
        PyErr_SetString(PyExc_IndexError, "tensor indices must be ints, slices, None, ..., or tensors");
        return NULL;
    }
    return PyObject_CallFunctionObjArgs(advanced_getitem, self, index, NULL);
}

static PyObject *autograd_setitem; /* turbo_torch._methods._setitem_autograd */

int tt_setitem(PyObject *self, PyObject *index, PyObject *value) {
    /* an assignment that autograd must see (self in a graph, or a value that requires grad) is done
     * out of place by a scatter, whose node becomes self's grad_fn (PyTorch's CopySlices) */
    int value_grad = tt_check(value) && tt_requires_grad(value);
    if (tt_grad_enabled && !tt_inference_mode && (tt_requires_grad(self) || value_grad)) {
        tt_tensor *t = (tt_tensor *)self;
        if (t->requires_grad && !t->grad_fn) {
            PyErr_SetString(PyExc_RuntimeError, "a leaf Variable that requires grad is being used in an in-place operation.");
            return -1;
        }
        if (!autograd_setitem) {
            PyErr_SetString(PyExc_NotImplementedError, "turbo_torch: assignment inside an autograd graph needs turbo_torch");
            return -1;
        }
        PyObject *r = PyObject_CallFunctionObjArgs(autograd_setitem, self, index, value, NULL);
        Py_XDECREF(r);
        return r ? 0 : -1;
    }
    int basic = is_basic_index(index);
    if (!basic && PyTuple_Check(index)) {
        basic = 1;
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(index); i++)
            basic &= is_basic_index(PyTuple_GET_ITEM(index, i));
    }
    if (!basic) {
        if (!advanced_setitem) {
            PyErr_SetString(PyExc_IndexError, "unsupported index");
            return -1;
        }
        PyObject *r = PyObject_CallFunctionObjArgs(advanced_setitem, self, index, value, NULL);
        Py_XDECREF(r);
        return r ? 0 : -1;
    }
    int grad = tt_grad_enabled;
    tt_grad_enabled = 0;
    PyObject *view = tt_getitem(self, index);
    tt_grad_enabled = grad;
    if (!view)
        return -1;
    PyObject *source = tt_check(value) ? Py_NewRef(value) : tt_as_tensor(value, tt_data(self)->dtype);
    if (!source) {
        Py_DECREF(view);
        return -1;
    }
    if (tt_data(self)->storage->read_only) {
        PyErr_SetString(PyExc_RuntimeError, "the tensor is read-only");
        Py_DECREF(view);
        Py_DECREF(source);
        return -1;
    }
    tb_status status = tb_tensor_copy(tt_data(view), tt_data(source));
    Py_DECREF(view);
    Py_DECREF(source);
    if (status != TB_OK) {
        tt_raise(status);
        return -1;
    }
    tt_bump_version(tt_data(self));
    return 0;
}

static PyObject *py_set_index_hooks(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3)
        return PyErr_Format(PyExc_TypeError, "_tt_set_index_hooks(getitem, setitem, autograd_setitem)"), NULL;
    Py_XSETREF(advanced_getitem, Py_NewRef(args[0]));
    Py_XSETREF(advanced_setitem, Py_NewRef(args[1]));
    Py_XSETREF(autograd_setitem, Py_NewRef(args[2]));
    Py_RETURN_NONE;
}

/* _tt_adopt_history(dst, src): dst (whose data now equals src's) takes src's grad_fn */
static PyObject *py_adopt_history(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !tt_check(args[0]) || !tt_check(args[1]))
        return PyErr_Format(PyExc_TypeError, "_tt_adopt_history(dst, src)"), NULL;
    tt_tensor *dst = (tt_tensor *)args[0], *src = (tt_tensor *)args[1];
    Py_XSETREF(dst->grad_fn, Py_XNewRef(src->grad_fn));
    Py_RETURN_NONE;
}

/* ---- joins and where ---- */

/* _tt_cat(tensors, dim) */
static PyObject *py_cat(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2)
        return PyErr_Format(PyExc_TypeError, "_tt_cat(tensors, dim)"), NULL;
    PyObject *seq = PySequence_Fast(args[0], "cat(): argument 'tensors' must be a sequence of Tensors");
    if (!seq)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    int64_t dim = PyLong_AsLongLong(args[1]);
    if (n == 0) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_RuntimeError, "torch.cat(): expected a non-empty list of Tensors");
        return NULL;
    }
    if (n > TT_MAX_EDGES && tt_needs_grad((int)n, PySequence_Fast_ITEMS(seq))) {
        /* join in groups so that each node has at most TT_MAX_EDGES inputs */
        PyObject *groups = PyList_New(0);
        for (Py_ssize_t i = 0; groups && i < n; i += TT_MAX_EDGES) {
            Py_ssize_t end = i + TT_MAX_EDGES < n ? i + TT_MAX_EDGES : n;
            PyObject *slice = PyList_GetSlice(seq, i, end);
            PyObject *part_args[2] = {slice, args[1]};
            PyObject *part = slice ? py_cat(m, part_args, 2) : NULL;
            Py_XDECREF(slice);
            if (!part || PyList_Append(groups, part) != 0) {
                Py_XDECREF(part);
                Py_CLEAR(groups);
                break;
            }
            Py_DECREF(part);
        }
        Py_DECREF(seq);
        if (!groups)
            return NULL;
        PyObject *group_args[2] = {groups, args[1]};
        PyObject *r = py_cat(m, group_args, 2);
        Py_DECREF(groups);
        return r;
    }
    const tb_tensor **tensors = PyMem_Malloc(sizeof(tb_tensor *) * (size_t)n);
    tb_tensor *cast = PyMem_Calloc((size_t)n, sizeof(tb_tensor));
    PyObject *result = NULL;
    if (!tensors || !cast) {
        PyErr_NoMemory();
        goto done;
    }
    tb_dtype dtype = TB_BOOL;
    int first = 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        if (!tt_check(item)) {
            PyErr_Format(PyExc_TypeError, "expected Tensor as element %zd in argument 0, but got %s", i, Py_TYPE(item)->tp_name);
            goto done;
        }
        dtype = first ? tt_data(item)->dtype : tb_promote_types(dtype, tt_data(item)->dtype);
        first = 0;
    }
    /* legacy: 1-D empty tensors are skipped, as torch does */
    int kept = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const tb_tensor *t = tt_data(PySequence_Fast_GET_ITEM(seq, i));
        if (t->ndim == 1 && t->shape[0] == 0 && n > 1)
            continue;
        tb_status status = tb_tensor_contiguous(t, dtype, &cast[kept]);
        if (status != TB_OK) {
            tt_raise(status);
            goto done;
        }
        tensors[kept] = &cast[kept];
        kept++;
    }
    tb_tensor out;
    tb_status status;
    if (kept == 0) {
        status = tb_tensor_contiguous(tt_data(PySequence_Fast_GET_ITEM(seq, 0)), dtype, &out);
    } else {
        extern tb_status tb_op_cat(int count, const tb_tensor *const *tensors, int64_t dim, tb_tensor *out);
        status = tb_op_cat(kept, tensors, dim, &out);
    }
    if (status != TB_OK) {
        tt_raise(status);
        goto done;
    }
    result = tt_wrap(&out);
    if (result && tt_needs_grad((int)n, PySequence_Fast_ITEMS(seq))) {
        tt_node *node = tt_node_new(TT_NODE_CAT, 0, "CatBackward0", (int)n, PySequence_Fast_ITEMS(seq));
        if (!node) {
            Py_CLEAR(result);
            goto done;
        }
        int d = 0;
        (void)tb_normalize_dim(dim, tt_data(result)->ndim, &d);
        node->ints[0] = d;
        node->ints[1] = 1;
        tt_set_grad_fn(result, node);
    }
done:
    for (Py_ssize_t i = 0; cast && i < n; i++)
        tb_tensor_release(&cast[i]);
    PyMem_Free(cast);
    PyMem_Free(tensors);
    Py_DECREF(seq);
    return result;
}

/* _tt_where(cond, a, b) */
static PyObject *py_where(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !tt_check(args[0]))
        return PyErr_Format(PyExc_TypeError, "where(condition, input, other) needs a condition Tensor"), NULL;
    if (tt_data(args[0])->dtype != TB_BOOL && tt_data(args[0])->dtype != TB_U8) {
        PyErr_Format(PyExc_RuntimeError, "where expected condition to be a boolean tensor, but got a tensor with dtype %s",
                     tb_dtype_name(tt_data(args[0])->dtype));
        return NULL;
    }
    tb_result_type_state state;
    tb_result_type_init(&state);
    tb_eager_operand ops[2];
    PyObject *objects[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) {
        PyObject *o = args[1 + i];
        memset(&ops[i], 0, sizeof ops[i]);
        if (tt_check(o)) {
            objects[i] = o;
            ops[i].tensor = tt_data(o);
            tb_result_type_add(&state, tt_data(o)->dtype, tt_data(o)->ndim, 0, tt_default_dtype);
        } else if (PyBool_Check(o) || PyLong_Check(o)) {
            ops[i].i = PyLong_AsLongLong(o);
            ops[i].f = (double)ops[i].i;
            tb_result_type_add(&state, PyBool_Check(o) ? TB_BOOL : TB_I64, 0, 1, tt_default_dtype);
        } else if (PyFloat_Check(o)) {
            ops[i].f = PyFloat_AS_DOUBLE(o);
            tb_result_type_add(&state, TB_F64, 0, 1, tt_default_dtype);
        } else {
            return PyErr_Format(PyExc_TypeError, "where(): expected a Tensor or a number, got %s", Py_TYPE(o)->tp_name), NULL;
        }
    }
    tb_dtype dtype = tb_result_type_finish(&state);
    tb_tensor out = {0};
    tb_status status = tb_eager_where(tt_data(args[0]), ops[0], ops[1], dtype, &out);
    if (status != TB_OK)
        return tt_raise(status);
    PyObject *result = tt_wrap(&out);
    if (result && tb_dtype_category_of(dtype) == TB_CATEGORY_FLOATING && tt_needs_grad(2, objects)) {
        tt_node *node = tt_node_new(TT_NODE_WHERE, 0, "WhereBackward0", 2, objects);
        if (!node) {
            Py_DECREF(result);
            return NULL;
        }
        tt_node_save(node, 0, tt_data(args[0]));
        tt_set_grad_fn(result, node);
    }
    return result;
}

PyMethodDef tt_shape_methods[] = {
    {"view", (PyCFunction)(void (*)(void))method_view, METH_FASTCALL, "A view with a new shape."},
    {"reshape", (PyCFunction)(void (*)(void))method_reshape, METH_FASTCALL, "A view with a new shape, or a copy."},
    {"permute", (PyCFunction)(void (*)(void))method_permute, METH_FASTCALL, "A view with dims reordered."},
    {"expand", (PyCFunction)(void (*)(void))method_expand, METH_FASTCALL, "A broadcast view."},
    {"transpose", (PyCFunction)(void (*)(void))method_transpose, METH_FASTCALL, "A view with two dims swapped."},
    {"unsqueeze", method_unsqueeze, METH_O, "A view with a size-1 dim inserted."},
    {"squeeze", (PyCFunction)(void (*)(void))method_squeeze, METH_FASTCALL, "A view without size-1 dims."},
    {"t", method_t, METH_NOARGS, "The transpose of a <= 2-D tensor."},
    {"contiguous", method_contiguous, METH_NOARGS, "self if contiguous, else a contiguous copy."},
    {"clone", (PyCFunction)(void (*)(void))method_clone, METH_FASTCALL, "A copy (autograd-aware)."},
    {NULL},
};

static PyMethodDef shape_functions[] = {
    {"_tt_view", (PyCFunction)(void (*)(void))py_view, METH_FASTCALL, NULL},
    {"_tt_cat", (PyCFunction)(void (*)(void))py_cat, METH_FASTCALL, NULL},
    {"_tt_where", (PyCFunction)(void (*)(void))py_where, METH_FASTCALL, NULL},
    {"_tt_set_index_hooks", (PyCFunction)(void (*)(void))py_set_index_hooks, METH_FASTCALL, NULL},
    {"_tt_adopt_history", (PyCFunction)(void (*)(void))py_adopt_history, METH_FASTCALL, NULL},
    {NULL},
};

int tt_register_index_ops(PyObject *module);
int tt_register_index(PyObject *module) {
    return PyModule_AddFunctions(module, shape_functions) != 0 ? -1 : tt_register_index_ops(module);
}

/* ---- index ops ---- */

static int index_arg(PyObject *o, const char *what) {
    if (!tt_check(o) || (tb_dtype_category_of(tt_data(o)->dtype) != TB_CATEGORY_INTEGRAL && tb_tensor_numel(tt_data(o)))) {
        PyErr_Format(PyExc_RuntimeError, "%s(): Expected dtype int64 for index", what);
        return -1;
    }
    return 0;
}

static PyObject *wrap_with_node(tb_status status, tb_tensor *out, tt_node_kind kind, const char *name, int n,
                                PyObject **inputs, PyObject *index, int64_t dim, int64_t extra, double alpha) {
    if (status != TB_OK) {
        if (strstr(tb_error_message(), "out of bounds"))
            return PyErr_Format(PyExc_IndexError, "%s", tb_error_message()), NULL;
        return tt_raise(status);
    }
    PyObject *result = tt_wrap(out);
    if (result && tb_dtype_category_of(tt_data(result)->dtype) == TB_CATEGORY_FLOATING && tt_needs_grad(n, inputs)) {
        tt_node *node = tt_node_new(kind, 0, name, n, inputs);
        if (!node) {
            Py_DECREF(result);
            return NULL;
        }
        node->ints[0] = dim;
        node->ints[1] = extra;
        node->params.alpha = alpha;
        tt_node_save(node, 0, tt_data(index));
        tt_set_grad_fn(result, node);
    }
    return result;
}

/* _tt_index_select(x, dim, index) */
static PyObject *py_index_select(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !tt_check(args[0]) || index_arg(args[2], "index_select") != 0)
        return PyErr_Occurred() ? NULL : (PyErr_SetString(PyExc_TypeError, "index_select(input, dim, index)"), NULL);
    int64_t dim = PyLong_AsLongLong(args[1]);
    if (dim == -1 && PyErr_Occurred())
        return NULL;
    tb_tensor out;
    tb_status status = tb_eager_index_select(tt_data(args[0]), dim, tt_data(args[2]), &out);
    PyObject *inputs[1] = {args[0]};
    int d = 0;
    if (status == TB_OK && tt_data(args[0])->ndim)
        (void)tb_normalize_dim(dim, tt_data(args[0])->ndim, &d);
    return wrap_with_node(status, &out, TT_NODE_INDEX, "IndexSelectBackward0", 1, inputs, args[2], d, 0, 1.0);
}

/* _tt_gather(x, dim, index) */
static PyObject *py_gather(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !tt_check(args[0]) || index_arg(args[2], "gather") != 0)
        return PyErr_Occurred() ? NULL : (PyErr_SetString(PyExc_TypeError, "gather(input, dim, index)"), NULL);
    int64_t dim = PyLong_AsLongLong(args[1]);
    if (dim == -1 && PyErr_Occurred())
        return NULL;
    tb_tensor out;
    tb_status status = tb_eager_gather(tt_data(args[0]), dim, tt_data(args[2]), &out);
    PyObject *inputs[1] = {args[0]};
    return wrap_with_node(status, &out, TT_NODE_GATHER, "GatherBackward0", 1, inputs, args[2], dim, 0, 1.0);
}

/* _tt_scatter(x, dim, index, src_tensor_or_number, reduce) */
static PyObject *py_scatter(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5 || !tt_check(args[0]) || index_arg(args[2], "scatter") != 0)
        return PyErr_Occurred() ? NULL : (PyErr_SetString(PyExc_TypeError, "scatter(input, dim, index, src, reduce)"), NULL);
    int64_t dim = PyLong_AsLongLong(args[1]);
    long reduce = PyLong_AsLong(args[4]);
    if (PyErr_Occurred())
        return NULL;
    tb_eager_operand src = {0};
    PyObject *src_object = NULL;
    if (tt_check(args[3])) {
        src.tensor = tt_data(args[3]);
        src_object = args[3];
    } else {
        src.f = PyFloat_AsDouble(args[3]);
        src.i = PyLong_Check(args[3]) ? PyLong_AsLongLong(args[3]) : (int64_t)src.f;
        if (PyErr_Occurred())
            return NULL;
    }
    tb_tensor out;
    tb_status status = tb_eager_scatter(tt_data(args[0]), dim, tt_data(args[2]), src, (int)reduce, &out);
    PyObject *inputs[2] = {args[0], src_object};
    if (reduce > 1 && status == TB_OK && tt_needs_grad(2, inputs)) {
        tb_tensor_release(&out);
        return PyErr_Format(PyExc_NotImplementedError, "turbo_torch: the gradient of scatter_reduce with a product or "
                            "max/min reduction is not supported yet"), NULL;
    }
    int d = 0;
    if (status == TB_OK && tt_data(args[0])->ndim)
        (void)tb_normalize_dim(dim, tt_data(args[0])->ndim, &d);
    return wrap_with_node(status, &out, TT_NODE_SCATTER, reduce ? "ScatterAddBackward0" : "ScatterBackward0", 2, inputs,
                          args[2], d, reduce, 1.0);
}

/* _tt_index_add(x, dim, index, source, alpha) */
static PyObject *py_index_add(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5 || !tt_check(args[0]) || !tt_check(args[3]) || index_arg(args[2], "index_add") != 0)
        return PyErr_Occurred() ? NULL : (PyErr_SetString(PyExc_TypeError, "index_add(input, dim, index, source, alpha)"), NULL);
    int64_t dim = PyLong_AsLongLong(args[1]);
    double alpha = PyFloat_AsDouble(args[4]);
    if (PyErr_Occurred())
        return NULL;
    tb_tensor out;
    tb_status status = tb_eager_index_add(tt_data(args[0]), dim, tt_data(args[2]), tt_data(args[3]), alpha, &out);
    PyObject *inputs[2] = {args[0], args[3]};
    int d = 0;
    if (status == TB_OK && tt_data(args[0])->ndim)
        (void)tb_normalize_dim(dim, tt_data(args[0])->ndim, &d);
    return wrap_with_node(status, &out, TT_NODE_INDEX_ADD, "IndexAddBackward0", 2, inputs, args[2], d, 0, alpha);
}

static PyObject *py_nonzero(PyObject *m, PyObject *arg) {
    if (!tt_check(arg))
        return PyErr_Format(PyExc_TypeError, "nonzero(): argument 'input' must be Tensor"), NULL;
    tb_tensor out;
    tb_status status = tb_eager_nonzero(tt_data(arg), &out);
    return status == TB_OK ? tt_wrap(&out) : tt_raise(status);
}

/* _tt_sort(x, dim, descending) -> (values, indices); values record a gather node on the indices */
static PyObject *py_sort(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !tt_check(args[0]))
        return PyErr_Format(PyExc_TypeError, "_tt_sort(input, dim, descending)"), NULL;
    int64_t dim = PyLong_AsLongLong(args[1]);
    if (dim == -1 && PyErr_Occurred())
        return NULL;
    tb_tensor values, indices;
    tb_status status = tb_eager_sort(tt_data(args[0]), dim, PyObject_IsTrue(args[2]), &values, &indices);
    if (status != TB_OK)
        return strstr(tb_error_message(), "Dimension") || strstr(tb_error_message(), "dim")
                   ? (PyErr_Format(PyExc_IndexError, "%s", tb_error_message()), NULL)
                   : tt_raise(status);
    PyObject *index_object = tt_wrap(&indices);
    if (!index_object) {
        tb_tensor_release(&values);
        return NULL;
    }
    int d = 0;
    if (tt_data(args[0])->ndim)
        (void)tb_normalize_dim(dim, tt_data(args[0])->ndim, &d);
    PyObject *inputs[1] = {args[0]};
    PyObject *value_object = wrap_with_node(TB_OK, &values, TT_NODE_GATHER, "SortBackward0", 1, inputs, index_object, d,
                                            0, 1.0);
    if (!value_object) {
        Py_DECREF(index_object);
        return NULL;
    }
    return Py_BuildValue("(NN)", value_object, index_object);
}

static PyMethodDef index_functions[] = {
    {"_tt_sort", (PyCFunction)(void (*)(void))py_sort, METH_FASTCALL, NULL},
    {"_tt_nonzero", py_nonzero, METH_O, NULL},
    {"_tt_index_select", (PyCFunction)(void (*)(void))py_index_select, METH_FASTCALL, NULL},
    {"_tt_gather", (PyCFunction)(void (*)(void))py_gather, METH_FASTCALL, NULL},
    {"_tt_scatter", (PyCFunction)(void (*)(void))py_scatter, METH_FASTCALL, NULL},
    {"_tt_index_add", (PyCFunction)(void (*)(void))py_index_add, METH_FASTCALL, NULL},
    {NULL},
};

int tt_register_index_ops(PyObject *module);
int tt_register_index_ops(PyObject *module) { return PyModule_AddFunctions(module, index_functions); }
