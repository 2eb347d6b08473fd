/* turbo_torch.Tensor: the eager tensor type (a subclass of torchburn._C.Tensor) with autograd state.
 * Its hot paths — the number protocol, comparisons, indexing, shape/dtype/grad attributes and the
 * autograd entry points — are C; the long tail of methods is attached from Python at import. */
#include "eager.h"

#include <structmember.h>

PyTypeObject *tt_tensor_type;
PyObject *tt_dtype_objects[TB_DTYPE_COUNT];
PyObject *tt_size_type;
tb_dtype tt_default_dtype = TB_F32;
static PyObject *repr_function; /* turbo_torch._tensor_str.tensor_repr */
static PyObject *device_object; /* turbo_torch.device("cpu") */

PyObject *tt_wrap(tb_tensor *tensor) {
    tt_tensor *self = (tt_tensor *)tt_tensor_type->tp_alloc(tt_tensor_type, 0);
    if (!self) {
        tb_tensor_release(tensor);
        return NULL;
    }
    self->base.tensor = *tensor;
    memset(tensor, 0, sizeof *tensor);
    return (PyObject *)self;
}

PyObject *tt_raise(tb_status status) {
    if (status == TB_ERR_OUT_OF_MEMORY)
        return PyErr_NoMemory();
    const char *message = tb_error_message();
    if (strncmp(message, "ZeroDivisionError", 17) == 0) {
        PyErr_SetString(PyExc_RuntimeError, message);
        return NULL;
    }
    if (status == TB_ERR_DTYPE && strstr(message, "not implemented for")) {
        PyErr_SetString(PyExc_NotImplementedError, message);
        return NULL;
    }
    PyErr_SetString(PyExc_RuntimeError, message[0] ? message : tb_status_name(status));
    return NULL;
}

int tt_dtype_from_object(PyObject *object, tb_dtype *out) {
    for (int d = 0; d < TB_DTYPE_COUNT; d++) {
        if (tt_dtype_objects[d] == object) {
            *out = (tb_dtype)d;
            return 0;
        }
    }
    if (object == (PyObject *)&PyFloat_Type) {
        *out = TB_F64;
        return 0;
    }
    if (object == (PyObject *)&PyLong_Type) {
        *out = TB_I64;
        return 0;
    }
    if (object == (PyObject *)&PyBool_Type) {
        *out = TB_BOOL;
        return 0;
    }
    PyErr_Format(PyExc_TypeError, "expected a turbo_torch.dtype, got %s", Py_TYPE(object)->tp_name);
    return -1;
}

/* ---- lifetime ---- */

static int tt_traverse(PyObject *self, visitproc visit, void *arg) {
    tt_tensor *t = (tt_tensor *)self;
    Py_VISIT(t->grad);
    Py_VISIT(t->grad_fn);
    Py_VISIT(t->hooks);
    Py_VISIT(t->base.dict);
    Py_VISIT(Py_TYPE(self));
    return 0;
}

static int tt_clear(PyObject *self) {
    tt_tensor *t = (tt_tensor *)self;
    Py_CLEAR(t->grad);
    Py_CLEAR(t->grad_fn);
    Py_CLEAR(t->hooks);
    Py_CLEAR(t->base.dict);
    return 0;
}

static void tt_dealloc(PyObject *self) {
    PyObject_GC_UnTrack(self);
    tt_clear(self);
    tt_tensor_type->tp_base->tp_dealloc(self);
}

static PyObject *tt_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyErr_SetString(PyExc_TypeError, "use turbo_torch.tensor(data) or a creation function to make a Tensor");
    return NULL;
}

/* ---- attributes ---- */

static PyObject *size_of(int ndim, const int64_t *shape) {
    PyObject *tuple = PyTuple_New(ndim);
    if (!tuple)
        return NULL;
    for (int i = 0; i < ndim; i++) {
        PyObject *v = PyLong_FromLongLong(shape[i]);
        if (!v) {
            Py_DECREF(tuple);
            return NULL;
        }
        PyTuple_SET_ITEM(tuple, i, v);
    }
    if (!tt_size_type)
        return tuple;
    PyObject *size = PyObject_CallOneArg(tt_size_type, tuple);
    Py_DECREF(tuple);
    return size;
}

static PyObject *get_shape(PyObject *self, void *c) { return size_of(tt_data(self)->ndim, tt_data(self)->shape); }
static PyObject *get_dtype(PyObject *self, void *c) {
    PyObject *d = tt_dtype_objects[tt_data(self)->dtype];
    if (!d)
        return PyUnicode_FromString(tb_dtype_name(tt_data(self)->dtype));
    return Py_NewRef(d);
}
static PyObject *get_device(PyObject *self, void *c) {
    return device_object ? Py_NewRef(device_object) : PyUnicode_FromString("cpu");
}
static PyObject *get_requires_grad(PyObject *self, void *c) { return PyBool_FromLong(tt_requires_grad(self)); }

static int set_requires_grad(PyObject *self, PyObject *value, void *c) {
    tt_tensor *t = (tt_tensor *)self;
    int flag = PyObject_IsTrue(value);
    if (flag < 0)
        return -1;
    if (t->grad_fn) {
        if (!flag) {
            PyErr_SetString(PyExc_RuntimeError,
                            "you can only change requires_grad flags of leaf variables. If you want to use a computed "
                            "variable in a subgraph that doesn't require differentiation use var_no_grad = var.detach().");
            return -1;
        }
        return 0;
    }
    if (flag && tb_dtype_category_of(tt_data(self)->dtype) != TB_CATEGORY_FLOATING) {
        PyErr_SetString(PyExc_RuntimeError, "only Tensors of floating point and complex dtype can require gradients");
        return -1;
    }
    t->requires_grad = (char)flag;
    return 0;
}

static PyObject *get_grad(PyObject *self, void *c) {
    tt_tensor *t = (tt_tensor *)self;
    if (!t->grad)
        Py_RETURN_NONE;
    return Py_NewRef(t->grad);
}

static int set_grad(PyObject *self, PyObject *value, void *c) {
    tt_tensor *t = (tt_tensor *)self;
    if (value && value != Py_None) {
        if (!tt_check(value)) {
            PyErr_SetString(PyExc_TypeError, "assigned grad expected to be a Tensor or None");
            return -1;
        }
        const tb_tensor *g = tt_data(value), *x = tt_data(self);
        if (g->ndim != x->ndim || memcmp(g->shape, x->shape, sizeof(int64_t) * (size_t)x->ndim) != 0) {
            PyErr_SetString(PyExc_RuntimeError, "assigned grad has data of a different size");
            return -1;
        }
        if (g->dtype != x->dtype) {
            PyErr_SetString(PyExc_RuntimeError, "assigned grad has data of a different type");
            return -1;
        }
    }
    PyObject *old = t->grad;
    t->grad = (value && value != Py_None) ? Py_NewRef(value) : NULL;
    Py_XDECREF(old);
    return 0;
}

static PyObject *get_grad_fn(PyObject *self, void *c) {
    tt_tensor *t = (tt_tensor *)self;
    return Py_NewRef(t->grad_fn ? t->grad_fn : Py_None);
}
static PyObject *get_is_leaf(PyObject *self, void *c) { return PyBool_FromLong(((tt_tensor *)self)->grad_fn == NULL); }
static PyObject *get_ndim(PyObject *self, void *c) { return PyLong_FromLong(tt_data(self)->ndim); }
static PyObject *get_version(PyObject *self, void *c) { return PyLong_FromUnsignedLongLong(tt_version(tt_data(self))); }
static PyObject *get_retains_grad(PyObject *self, void *c) { return PyBool_FromLong(((tt_tensor *)self)->retains_grad); }
static PyObject *get_is_wrapped(PyObject *self, void *c) { return PyBool_FromLong(((tt_tensor *)self)->is_wrapped_number); }

/* .data: a detached alias; assigning replaces the tensor's contents (view) in place. */
static PyObject *get_data(PyObject *self, void *c) {
    tb_tensor alias;
    tb_tensor_retain(tt_data(self), &alias);
    return tt_wrap(&alias);
}
static int set_data(PyObject *self, PyObject *value, void *c) {
    if (!value || !tt_check(value)) {
        PyErr_SetString(PyExc_TypeError, "Tensor.data must be set to a Tensor");
        return -1;
    }
    tb_tensor alias;
    tb_tensor_retain(tt_data(value), &alias);
    tb_tensor_release(tt_data(self));
    *tt_data(self) = alias;
    return 0;
}

static PyGetSetDef tt_getset[] = {
    {"shape", get_shape, NULL, "The size of each dim (turbo_torch.Size).", NULL},
    {"dtype", get_dtype, NULL, "The element type.", NULL},
    {"device", get_device, NULL, "Always cpu.", NULL},
    {"requires_grad", get_requires_grad, set_requires_grad, "Whether autograd records operations on it.", NULL},
    {"grad", get_grad, set_grad, "The accumulated gradient (leaves, or non-leaves after retain_grad()).", NULL},
    {"grad_fn", get_grad_fn, NULL, "The autograd node that made this tensor (None for leaves).", NULL},
    {"is_leaf", get_is_leaf, NULL, "True when not the result of a recorded operation.", NULL},
    {"ndim", get_ndim, NULL, "Number of dims.", NULL},
    {"_version", get_version, NULL, "In-place modification counter (shared with views).", NULL},
    {"retains_grad", get_retains_grad, NULL, "True after retain_grad() on a non-leaf.", NULL},
    {"_is_wrapped_number", get_is_wrapped, NULL, NULL, NULL},
    {"data", get_data, set_data, "The tensor without autograd history (shares memory).", NULL},
    {NULL},
};

/* ---- number protocol ---- */

#define BINARY_SLOT(slot, op)                                                   \
    static PyObject *slot(PyObject *a, PyObject *b) { return tt_binary(op, a, b, 1.0, NULL); }
#define INPLACE_SLOT(slot, op)                                                  \
    static PyObject *slot(PyObject *a, PyObject *b) { return tt_inplace_binary(op, a, b, 1.0); }
BINARY_SLOT(nb_add, TB_PWB_ADD)
BINARY_SLOT(nb_sub, TB_PWB_SUB)
BINARY_SLOT(nb_mul, TB_PWB_MUL)
BINARY_SLOT(nb_truediv, TB_PWB_DIV)
BINARY_SLOT(nb_floordiv, TB_PWB_FLOOR_DIVIDE)
BINARY_SLOT(nb_mod, TB_PWB_REMAINDER)
BINARY_SLOT(nb_and, TB_PWB_BITWISE_AND)
BINARY_SLOT(nb_or, TB_PWB_BITWISE_OR)
BINARY_SLOT(nb_xor, TB_PWB_BITWISE_XOR)
BINARY_SLOT(nb_lshift, TB_PWB_LSHIFT)
BINARY_SLOT(nb_rshift, TB_PWB_RSHIFT)
INPLACE_SLOT(nb_iadd, TB_PWB_ADD)
INPLACE_SLOT(nb_isub, TB_PWB_SUB)
INPLACE_SLOT(nb_imul, TB_PWB_MUL)
INPLACE_SLOT(nb_itruediv, TB_PWB_DIV)
INPLACE_SLOT(nb_ifloordiv, TB_PWB_FLOOR_DIVIDE)
INPLACE_SLOT(nb_imod, TB_PWB_REMAINDER)
INPLACE_SLOT(nb_iand, TB_PWB_BITWISE_AND)
INPLACE_SLOT(nb_ior, TB_PWB_BITWISE_OR)
INPLACE_SLOT(nb_ixor, TB_PWB_BITWISE_XOR)
#undef BINARY_SLOT
#undef INPLACE_SLOT

static PyObject *nb_pow(PyObject *a, PyObject *b, PyObject *mod) {
    if (mod != Py_None)
        Py_RETURN_NOTIMPLEMENTED;
    return tt_binary(TB_PWB_POW, a, b, 1.0, NULL);
}
static PyObject *nb_ipow(PyObject *a, PyObject *b, PyObject *mod) { return tt_inplace_binary(TB_PWB_POW, a, b, 1.0); }
static PyObject *nb_matmul(PyObject *a, PyObject *b) {
    if (!tt_check(a) || !tt_check(b))
        Py_RETURN_NOTIMPLEMENTED;
    return tt_matmul(a, b);
}
static PyObject *nb_neg(PyObject *x) { return tt_unary(TB_PW_NEG, x, NULL, NULL); }
static PyObject *nb_pos(PyObject *x) { return Py_NewRef(x); }
static PyObject *nb_abs(PyObject *x) { return tt_unary(TB_PW_ABS, x, NULL, NULL); }
static PyObject *nb_invert(PyObject *x) {
    if (tt_data(x)->dtype == TB_BOOL)
        return tt_unary(TB_PW_LOGICAL_NOT, x, NULL, NULL);
    return tt_unary(TB_PW_BITWISE_NOT, x, NULL, NULL);
}

static int single_value(PyObject *x, const char *what) {
    int64_t n = tb_tensor_numel(tt_data(x));
    if (n != 1) {
        if (what)
            PyErr_Format(PyExc_RuntimeError, "%s", what);
        else
            PyErr_Format(PyExc_RuntimeError, "a Tensor with %lld elements cannot be converted to Scalar", (long long)n);
        return -1;
    }
    return 0;
}

static int nb_bool(PyObject *x) {
    if (single_value(x, "Boolean value of Tensor with more than one value is ambiguous") != 0)
        return -1;
    return tb_eager_get_f(tt_data(x), 0) != 0;
}
static PyObject *nb_float(PyObject *x) {
    if (single_value(x, NULL) != 0)
        return NULL;
    return PyFloat_FromDouble(tb_eager_get_f(tt_data(x), 0));
}
static PyObject *nb_int(PyObject *x) {
    if (single_value(x, NULL) != 0)
        return NULL;
    const tb_tensor *t = tt_data(x);
    if (tb_dtype_category_of(t->dtype) == TB_CATEGORY_FLOATING) {
        double v = tb_eager_get_f(t, 0);
        return PyLong_FromDouble(v);
    }
    return PyLong_FromLongLong(tb_eager_get_i(t, 0));
}
static PyObject *nb_index(PyObject *x) {
    const tb_tensor *t = tt_data(x);
    if (tb_dtype_category_of(t->dtype) == TB_CATEGORY_FLOATING || tb_tensor_numel(t) != 1) {
        PyErr_SetString(PyExc_TypeError, "only integer tensors of a single element can be converted to an index");
        return NULL;
    }
    return PyLong_FromLongLong(tb_eager_get_i(t, 0));
}

static PyObject *tt_richcompare(PyObject *a, PyObject *b, int op) {
    static const int ops[] = {[Py_LT] = TB_PWB_LT, [Py_LE] = TB_PWB_LE, [Py_EQ] = TB_PWB_EQ,
                              [Py_NE] = TB_PWB_NE, [Py_GT] = TB_PWB_GT, [Py_GE] = TB_PWB_GE};
    if ((op == Py_EQ || op == Py_NE) && !tt_check(b) && !PyNumber_Check(b) && !PyBool_Check(b))
        Py_RETURN_NOTIMPLEMENTED; /* tensor == None / "abc" is False, as in torch */
    return tt_binary(ops[op], a, b, 1.0, NULL);
}

static Py_hash_t tt_hash(PyObject *self) { return _Py_HashPointer(self); }

static PyObject *tt_repr(PyObject *self) {
    if (!repr_function)
        return PyUnicode_FromFormat("tensor(<%s>)", tb_dtype_name(tt_data(self)->dtype));
    return PyObject_CallOneArg(repr_function, self);
}

static PyObject *mp_subscript(PyObject *self, PyObject *index) { return tt_getitem(self, index); }
static int mp_ass_subscript(PyObject *self, PyObject *index, PyObject *value) {
    if (!value) {
        PyErr_SetString(PyExc_TypeError, "Tensor does not support item deletion");
        return -1;
    }
    return tt_setitem(self, index, value);
}

static Py_ssize_t mp_length(PyObject *self) {
    if (tt_data(self)->ndim == 0) {
        PyErr_SetString(PyExc_TypeError, "len() of a 0-d tensor");
        return -1;
    }
    return (Py_ssize_t)tt_data(self)->shape[0];
}

static PyMemberDef tt_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(tb_py_tensor, weakrefs), READONLY, NULL},
    {"__dictoffset__", T_PYSSIZET, offsetof(tb_py_tensor, dict), READONLY, NULL},
    {NULL},
};

extern PyMethodDef tt_tensor_methods[];

static PyType_Slot tt_slots[] = {
    {Py_tp_doc, "turbo_torch.Tensor: a strided CPU tensor with PyTorch's semantics and autograd."},
    {Py_tp_new, tt_new},
    {Py_tp_dealloc, tt_dealloc},
    {Py_tp_traverse, tt_traverse},
    {Py_tp_clear, tt_clear},
    {Py_tp_repr, tt_repr},
    {Py_tp_hash, tt_hash},
    {Py_tp_richcompare, tt_richcompare},
    {Py_tp_getset, tt_getset},
    {Py_tp_members, tt_members},
    {Py_tp_methods, NULL}, /* filled in at registration */
    {Py_mp_subscript, mp_subscript},
    {Py_mp_ass_subscript, mp_ass_subscript},
    {Py_mp_length, mp_length},
    {Py_nb_add, nb_add}, {Py_nb_subtract, nb_sub}, {Py_nb_multiply, nb_mul}, {Py_nb_true_divide, nb_truediv},
    {Py_nb_floor_divide, nb_floordiv}, {Py_nb_remainder, nb_mod}, {Py_nb_power, nb_pow},
    {Py_nb_matrix_multiply, nb_matmul}, {Py_nb_negative, nb_neg}, {Py_nb_positive, nb_pos},
    {Py_nb_absolute, nb_abs}, {Py_nb_invert, nb_invert}, {Py_nb_and, nb_and}, {Py_nb_or, nb_or},
    {Py_nb_xor, nb_xor}, {Py_nb_lshift, nb_lshift}, {Py_nb_rshift, nb_rshift},
    {Py_nb_inplace_add, nb_iadd}, {Py_nb_inplace_subtract, nb_isub}, {Py_nb_inplace_multiply, nb_imul},
    {Py_nb_inplace_true_divide, nb_itruediv}, {Py_nb_inplace_floor_divide, nb_ifloordiv},
    {Py_nb_inplace_remainder, nb_imod}, {Py_nb_inplace_power, nb_ipow}, {Py_nb_inplace_and, nb_iand},
    {Py_nb_inplace_or, nb_ior}, {Py_nb_inplace_xor, nb_ixor},
    {Py_nb_bool, nb_bool}, {Py_nb_float, nb_float}, {Py_nb_int, nb_int}, {Py_nb_index, nb_index},
    {0, NULL},
};

static PyType_Spec tt_spec = {
    .name = "turbo_torch.Tensor",
    .basicsize = sizeof(tt_tensor),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = tt_slots,
};

/* _tt_setup(dtypes tuple by tb_dtype, Size type, device object, repr function) */
static PyObject *py_setup(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4 || !PyTuple_Check(args[0]) || PyTuple_GET_SIZE(args[0]) != TB_DTYPE_COUNT) {
        PyErr_SetString(PyExc_TypeError, "_tt_setup(dtypes, Size, device, repr)");
        return NULL;
    }
    for (int d = 0; d < TB_DTYPE_COUNT; d++)
        Py_XSETREF(tt_dtype_objects[d], Py_NewRef(PyTuple_GET_ITEM(args[0], d)));
    Py_XSETREF(tt_size_type, Py_NewRef(args[1]));
    Py_XSETREF(device_object, Py_NewRef(args[2]));
    Py_XSETREF(repr_function, Py_NewRef(args[3]));
    Py_RETURN_NONE;
}

static PyObject *py_set_default_dtype(PyObject *module, PyObject *arg) {
    tb_dtype d;
    if (tt_dtype_from_object(arg, &d) != 0)
        return NULL;
    if (tb_dtype_category_of(d) != TB_CATEGORY_FLOATING) {
        PyErr_SetString(PyExc_TypeError, "only floating-point types are supported as the default type");
        return NULL;
    }
    tt_default_dtype = d;
    Py_RETURN_NONE;
}
static PyObject *py_get_default_dtype(PyObject *module, PyObject *unused) {
    return Py_NewRef(tt_dtype_objects[tt_default_dtype] ? tt_dtype_objects[tt_default_dtype] : Py_None);
}

static PyMethodDef tensor_module_functions[] = {
    {"_tt_setup", (PyCFunction)(void (*)(void))py_setup, METH_FASTCALL, NULL},
    {"_tt_set_default_dtype", py_set_default_dtype, METH_O, NULL},
    {"_tt_get_default_dtype", py_get_default_dtype, METH_NOARGS, NULL},
    {NULL},
};

int tt_register_tensor(PyObject *module) {
    for (PyType_Slot *slot = tt_slots; slot->slot; slot++)
        if (slot->slot == Py_tp_methods)
            slot->pfunc = tt_tensor_methods;
    PyObject *bases = PyTuple_Pack(1, (PyObject *)tb_py_tensor_type);
    if (!bases)
        return -1;
    PyObject *type = PyType_FromModuleAndSpec(module, &tt_spec, bases);
    Py_DECREF(bases);
    if (!type)
        return -1;
    tt_tensor_type = (PyTypeObject *)type;
    if (PyModule_AddObjectRef(module, "EagerTensor", type) != 0)
        return -1;
    return PyModule_AddFunctions(module, tensor_module_functions);
}
