/* torchburn._C.Tensor: a subclassable heap type over tb_tensor with the buffer protocol, DLPack
 * (__dlpack__ / __dlpack_device__), views and conversions. Hot paths stay in C. */
#include "pyext.h"

#include <structmember.h>
#include "torchburn/alloc.h"
#include "torchburn/ops.h"

PyTypeObject *tb_py_tensor_type;
PyObject *tb_py_export_dlpack(PyObject *self, int versioned);

PyObject *tb_py_tensor_wrap(tb_tensor *tensor) {
    tb_py_tensor *self = (tb_py_tensor *)tb_py_tensor_type->tp_alloc(tb_py_tensor_type, 0);
    if (!self) {
        tb_tensor_release(tensor);
        return NULL;
    }
    self->tensor = *tensor;
    memset(tensor, 0, sizeof *tensor);
    return (PyObject *)self;
}

static tb_tensor *get(PyObject *self) { return &((tb_py_tensor *)self)->tensor; }

/* ---- lifetime ---- */

static PyObject *tensor_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"data", NULL};
    PyObject *data = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:Tensor", keywords, &data))
        return NULL;
    tb_py_tensor *self = (tb_py_tensor *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    if (data && data != Py_None) {
        if (tb_py_import_tensor(data, "data", &self->tensor) != 0) {
            Py_DECREF(self);
            return NULL;
        }
    } else {
        tb_status status = tb_tensor_empty(TB_F32, 1, (int64_t[]){0}, TB_ALLOC_DEFAULT, &self->tensor);
        if (status != TB_OK) {
            Py_DECREF(self);
            return tb_py_raise(status);
        }
    }
    return (PyObject *)self;
}

static int tensor_traverse(PyObject *self, visitproc visit, void *arg) {
    Py_VISIT(((tb_py_tensor *)self)->dict);
    Py_VISIT(Py_TYPE(self));
    return 0;
}

static int tensor_clear(PyObject *self) {
    Py_CLEAR(((tb_py_tensor *)self)->dict);
    return 0;
}

static void tensor_dealloc(PyObject *self) {
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    tb_py_tensor *tensor = (tb_py_tensor *)self;
    if (tensor->weakrefs)
        PyObject_ClearWeakRefs(self);
    tensor_clear(self);
    tb_tensor_release(&tensor->tensor);
    type->tp_free(self);
    Py_DECREF(type);
}

/* ---- attributes ---- */

static PyObject *int64_tuple(int n, const int64_t *values) {
    PyObject *tuple = PyTuple_New(n);
    if (!tuple)
        return NULL;
    for (int i = 0; i < n; i++) {
        PyObject *item = PyLong_FromLongLong(values[i]);
        if (!item) {
            Py_DECREF(tuple);
            return NULL;
        }
        PyTuple_SET_ITEM(tuple, i, item);
    }
    return tuple;
}

static PyObject *get_shape(PyObject *self, void *closure) { return int64_tuple(get(self)->ndim, get(self)->shape); }
static PyObject *get_strides(PyObject *self, void *closure) { return int64_tuple(get(self)->ndim, get(self)->strides); }
static PyObject *get_ndim(PyObject *self, void *closure) { return PyLong_FromLong(get(self)->ndim); }
static PyObject *get_dtype(PyObject *self, void *closure) { return PyUnicode_FromString(tb_dtype_name(get(self)->dtype)); }
static PyObject *get_itemsize(PyObject *self, void *closure) { return PyLong_FromSize_t(tb_dtype_size(get(self)->dtype)); }
static PyObject *get_nbytes(PyObject *self, void *closure) {
    return PyLong_FromLongLong(tb_tensor_numel(get(self)) * (int64_t)tb_dtype_size(get(self)->dtype));
}
static PyObject *get_read_only(PyObject *self, void *closure) { return PyBool_FromLong(get(self)->storage->read_only); }
static PyObject *get_offset(PyObject *self, void *closure) { return PyLong_FromLongLong(get(self)->offset); }
static PyObject *get_device(PyObject *self, void *closure) { return PyUnicode_FromString("cpu"); }

static PyGetSetDef tensor_getset[] = {
    {"shape", get_shape, NULL, "Sizes of each dim (tuple).", NULL},
    {"strides", get_strides, NULL, "Strides in elements (tuple), like torch.Tensor.stride().", NULL},
    {"ndim", get_ndim, NULL, "Number of dims.", NULL},
    {"dtype", get_dtype, NULL, "Element type name, e.g. 'float32'.", NULL},
    {"itemsize", get_itemsize, NULL, "Bytes per element.", NULL},
    {"nbytes", get_nbytes, NULL, "Bytes of the elements viewed.", NULL},
    {"is_read_only", get_read_only, NULL, "True when writes through this tensor are refused.", NULL},
    {"storage_offset", get_offset, NULL, "Offset of the first element in its storage, in elements.", NULL},
    {"device", get_device, NULL, "Always 'cpu' for now.", NULL},
    {NULL},
};

/* ---- methods ---- */

static PyObject *tensor_numel(PyObject *self, PyObject *unused) { return PyLong_FromLongLong(tb_tensor_numel(get(self))); }
static PyObject *tensor_data_ptr(PyObject *self, PyObject *unused) {
    tb_storage_mark_exported(get(self)->storage); /* an address can be written through (ctypes) */
    return PyLong_FromVoidPtr(get(self)->storage->data ? tb_tensor_data(get(self)) : NULL);
}
static PyObject *tensor_is_contiguous(PyObject *self, PyObject *unused) {
    return PyBool_FromLong(tb_tensor_is_contiguous(get(self)));
}

static PyObject *finish(tb_status status, tb_tensor *result) {
    if (status != TB_OK)
        return tb_py_raise(status);
    return tb_py_tensor_wrap(result);
}

static PyObject *tensor_contiguous(PyObject *self, PyObject *unused) {
    tb_tensor result;
    tb_status status;
    Py_BEGIN_ALLOW_THREADS
    status = tb_tensor_contiguous(get(self), get(self)->dtype, &result);
    Py_END_ALLOW_THREADS
    return finish(status, &result);
}

static PyObject *tensor_clone(PyObject *self, PyObject *unused) {
    tb_tensor result;
    tb_status status;
    Py_BEGIN_ALLOW_THREADS
    status = tb_op_cast(get(self), get(self)->dtype, &result);
    Py_END_ALLOW_THREADS
    return finish(status, &result);
}

static PyObject *tensor_to(PyObject *self, PyObject *arg) {
    const char *name = PyUnicode_AsUTF8(arg);
    if (!name)
        return NULL;
    tb_dtype dtype;
    tb_status status = tb_dtype_from_name(name, &dtype);
    if (status != TB_OK)
        return tb_py_raise(status);
    if (dtype == get(self)->dtype) {
        Py_INCREF(self);
        return self;
    }
    tb_tensor result;
    Py_BEGIN_ALLOW_THREADS
    status = tb_op_cast(get(self), dtype, &result);
    Py_END_ALLOW_THREADS
    return finish(status, &result);
}

/* Parses a shape given as ints or one sequence of ints. */
static int parse_shape(PyObject *const *args, Py_ssize_t nargs, int64_t *shape, int *ndim) {
    PyObject *sequence = NULL;
    if (nargs == 1 && !PyLong_Check(args[0])) {
        sequence = PySequence_Fast(args[0], "shape must be a sequence of ints");
        if (!sequence)
            return -1;
        args = PySequence_Fast_ITEMS(sequence);
        nargs = PySequence_Fast_GET_SIZE(sequence);
    }
    if (nargs > TB_MAX_DIMS) {
        Py_XDECREF(sequence);
        PyErr_Format(PyExc_ValueError, "shape has %zd dims; at most %d are supported", nargs, TB_MAX_DIMS);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) {
        shape[i] = PyLong_AsLongLong(args[i]);
        if (shape[i] == -1 && PyErr_Occurred()) {
            Py_XDECREF(sequence);
            return -1;
        }
    }
    *ndim = (int)nargs;
    Py_XDECREF(sequence);
    return 0;
}

static PyObject *tensor_view(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    int64_t shape[TB_MAX_DIMS];
    int ndim;
    if (parse_shape(args, nargs, shape, &ndim) != 0)
        return NULL;
    tb_tensor result;
    return finish(tb_tensor_view(get(self), ndim, shape, &result), &result);
}

static PyObject *tensor_reshape(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    int64_t shape[TB_MAX_DIMS];
    int ndim;
    if (parse_shape(args, nargs, shape, &ndim) != 0)
        return NULL;
    tb_tensor result;
    tb_status status;
    Py_BEGIN_ALLOW_THREADS
    status = tb_tensor_reshape(get(self), ndim, shape, &result);
    Py_END_ALLOW_THREADS
    return finish(status, &result);
}

static PyObject *tensor_permute(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    int64_t dims[TB_MAX_DIMS];
    int ndim;
    if (parse_shape(args, nargs, dims, &ndim) != 0)
        return NULL;
    tb_tensor result;
    return finish(tb_tensor_permute(get(self), ndim, dims, &result), &result);
}

static PyObject *tensor_transpose(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    long long dim0, dim1;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "transpose(dim0, dim1) takes two ints");
        return NULL;
    }
    dim0 = PyLong_AsLongLong(args[0]);
    dim1 = PyLong_AsLongLong(args[1]);
    if (PyErr_Occurred())
        return NULL;
    tb_tensor result;
    return finish(tb_tensor_transpose(get(self), dim0, dim1, &result), &result);
}

static PyObject *tensor_expand(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    int64_t shape[TB_MAX_DIMS];
    int ndim;
    if (parse_shape(args, nargs, shape, &ndim) != 0)
        return NULL;
    tb_tensor result;
    return finish(tb_tensor_expand(get(self), ndim, shape, &result), &result);
}

static PyObject *tensor_dlpack(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    PyObject *max_version = NULL, *dl_device = NULL, *copy = NULL;
    if (nargs > 0) {
        PyErr_SetString(PyExc_TypeError, "__dlpack__ takes keyword arguments only");
        return NULL;
    }
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t i = 0; i < nkw; i++) {
        const char *key = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, i));
        if (!key)
            return NULL;
        PyObject *value = args[i];
        if (strcmp(key, "max_version") == 0)
            max_version = value;
        else if (strcmp(key, "dl_device") == 0)
            dl_device = value;
        else if (strcmp(key, "copy") == 0)
            copy = value;
        else if (strcmp(key, "stream") == 0) {
            if (value != Py_None) {
                PyErr_SetString(PyExc_BufferError, "__dlpack__: stream must be None for CPU tensors");
                return NULL;
            }
        } else {
            PyErr_Format(PyExc_TypeError, "__dlpack__ got an unexpected keyword argument '%s'", key);
            return NULL;
        }
    }
    if (dl_device && dl_device != Py_None) {
        int type = 0, id = 0;
        if (!PyArg_ParseTuple(dl_device, "ii", &type, &id))
            return NULL;
        if (type != 1) {
            PyErr_Format(PyExc_BufferError, "__dlpack__: cannot export to device type %d; torchburn tensors live on the CPU", type);
            return NULL;
        }
    }
    PyObject *source = self;
    PyObject *copied = NULL;
    if (copy == Py_True) {
        copied = tensor_clone(self, NULL);
        if (!copied)
            return NULL;
        source = copied;
    }
    int versioned = 0;
    if (max_version && max_version != Py_None) {
        int major = 0, minor = 0;
        if (!PyArg_ParseTuple(max_version, "ii", &major, &minor)) {
            Py_XDECREF(copied);
            return NULL;
        }
        versioned = major >= 1;
    }
    PyObject *capsule = tb_py_export_dlpack(source, versioned);
    Py_XDECREF(copied);
    return capsule;
}

static PyObject *tensor_dlpack_device(PyObject *self, PyObject *unused) { return Py_BuildValue("(ii)", 1, 0); }

static PyObject *tensor_numpy(PyObject *self, PyObject *unused) {
    PyObject *numpy = PyImport_ImportModule("numpy");
    if (!numpy)
        return NULL;
    PyObject *array = PyObject_CallMethod(numpy, "from_dlpack", "O", self);
    Py_DECREF(numpy);
    return array;
}

static PyObject *tensor_tolist_flat(PyObject *self, PyObject *unused) {
    /* values as a flat list of Python floats/ints in row-major order (used by tests and repr) */
    tb_tensor *t = get(self);
    tb_tensor f64;
    int integral = !tb_dtype_table[t->dtype].is_floating;
    tb_status status = tb_op_cast(t, integral ? TB_I64 : TB_F64, &f64);
    if (status != TB_OK)
        return tb_py_raise(status);
    int64_t n = tb_tensor_numel(&f64);
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (int64_t i = 0; list && i < n; i++) {
        PyObject *item = integral ? PyLong_FromLongLong(((int64_t *)tb_tensor_data(&f64))[i])
                                  : PyFloat_FromDouble(((double *)tb_tensor_data(&f64))[i]);
        if (t->dtype == TB_BOOL) {
            Py_XDECREF(item);
            item = PyBool_FromLong(((int64_t *)tb_tensor_data(&f64))[i] != 0);
        }
        if (!item) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, item);
    }
    tb_tensor_release(&f64);
    return list;
}

static PyMethodDef tensor_methods[] = {
    {"numel", tensor_numel, METH_NOARGS, "Number of elements."},
    {"data_ptr", tensor_data_ptr, METH_NOARGS, "Address of the first element."},
    {"is_contiguous", tensor_is_contiguous, METH_NOARGS, "True for a row-major contiguous layout."},
    {"contiguous", tensor_contiguous, METH_NOARGS, "This tensor if contiguous, else a contiguous copy."},
    {"clone", tensor_clone, METH_NOARGS, "A contiguous copy."},
    {"to", tensor_to, METH_O, "A copy converted to the dtype named (e.g. 'float16')."},
    {"view", (PyCFunction)(void (*)(void))tensor_view, METH_FASTCALL, "A view with a new shape (no copy)."},
    {"reshape", (PyCFunction)(void (*)(void))tensor_reshape, METH_FASTCALL, "A view with a new shape, or a copy."},
    {"permute", (PyCFunction)(void (*)(void))tensor_permute, METH_FASTCALL, "A view with dims reordered."},
    {"transpose", (PyCFunction)(void (*)(void))tensor_transpose, METH_FASTCALL, "A view with two dims swapped."},
    {"expand", (PyCFunction)(void (*)(void))tensor_expand, METH_FASTCALL, "A broadcast view (zero strides)."},
    {"__dlpack__", (PyCFunction)(void (*)(void))tensor_dlpack, METH_FASTCALL | METH_KEYWORDS,
     "Exports a DLPack capsule (versioned when max_version >= (1, 0))."},
    {"__dlpack_device__", tensor_dlpack_device, METH_NOARGS, "(1, 0): the CPU."},
    {"numpy", tensor_numpy, METH_NOARGS, "A numpy array sharing this tensor's memory."},
    {"_flat_values", tensor_tolist_flat, METH_NOARGS, "Row-major values as a flat Python list."},
    {NULL},
};

/* ---- buffer protocol ---- */

static const char *buffer_format(tb_dtype dtype) {
    switch (dtype) {
    case TB_F32: return "f";
    case TB_F64: return "d";
    case TB_F16: return "e";
    case TB_I8: return "b";
    case TB_U8: return "B";
    case TB_I16: return "h";
    case TB_I32: return "i";
    case TB_I64: return "q";
    case TB_BOOL: return "?";
    default: return NULL;
    }
}

static int tensor_getbuffer(PyObject *self, Py_buffer *view, int flags) {
    tb_py_tensor *tensor = (tb_py_tensor *)self;
    tb_tensor *t = &tensor->tensor;
    const char *format = buffer_format(t->dtype);
    if (!format) {
        PyErr_Format(PyExc_BufferError, "%s has no buffer-protocol format; use DLPack (e.g. torch.from_dlpack)",
                     tb_dtype_name(t->dtype));
        return -1;
    }
    if ((flags & PyBUF_WRITABLE) && t->storage->read_only) {
        PyErr_SetString(PyExc_BufferError, "this tensor is read-only");
        return -1;
    }
    if (!(flags & PyBUF_STRIDES) && !tb_tensor_is_contiguous(t)) {
        PyErr_SetString(PyExc_BufferError, "this tensor is not contiguous; request a strided buffer");
        return -1;
    }
    Py_ssize_t *shape_and_strides = PyMem_Malloc(sizeof(Py_ssize_t) * 2 * (size_t)(t->ndim ? t->ndim : 1));
    if ((flags & PyBUF_WRITABLE) || !t->storage->read_only)
        tb_storage_mark_exported(t->storage); /* a writable view bypasses the version counter */
    if (!shape_and_strides) {
        PyErr_NoMemory();
        return -1;
    }
    size_t itemsize = tb_dtype_size(t->dtype);
    for (int d = 0; d < t->ndim; d++) {
        shape_and_strides[d] = (Py_ssize_t)t->shape[d];
        shape_and_strides[t->ndim + d] = (Py_ssize_t)(t->strides[d] * (int64_t)itemsize);
    }
    view->buf = t->storage->data ? tb_tensor_data(t) : (void *)shape_and_strides;
    view->obj = self;
    Py_INCREF(self);
    view->len = (Py_ssize_t)(tb_tensor_numel(t) * (int64_t)itemsize);
    view->readonly = t->storage->read_only;
    view->itemsize = (Py_ssize_t)itemsize;
    view->format = (flags & PyBUF_FORMAT) ? (char *)format : NULL;
    view->ndim = t->ndim;
    view->shape = (flags & PyBUF_ND) ? shape_and_strides : NULL;
    view->strides = (flags & PyBUF_STRIDES) ? shape_and_strides + t->ndim : NULL;
    view->suboffsets = NULL;
    view->internal = shape_and_strides;
    tensor->exports++;
    return 0;
}

static void tensor_releasebuffer(PyObject *self, Py_buffer *view) {
    PyMem_Free(view->internal);
    ((tb_py_tensor *)self)->exports--;
}

/* ---- repr, len, indexing ---- */

static PyObject *tensor_repr(PyObject *self) {
    tb_tensor *t = get(self);
    char shape[256];
    tb_shape_string(t->ndim, t->shape, shape, sizeof shape);
    return PyUnicode_FromFormat("torchburn.Tensor(shape=%s, dtype=%s%s)", shape, tb_dtype_name(t->dtype),
                                t->storage->read_only ? ", read_only=True" : "");
}

static Py_ssize_t tensor_length(PyObject *self) {
    tb_tensor *t = get(self);
    if (t->ndim == 0) {
        PyErr_SetString(PyExc_TypeError, "len() of a 0-d tensor");
        return -1;
    }
    return (Py_ssize_t)t->shape[0];
}

/* Applies one index item (int, slice, None, Ellipsis handled by caller) at dim `*dim`. */
static tb_status apply_index(tb_tensor *current, PyObject *item, int *dim) {
    tb_tensor next;
    tb_status status;
    if (PyLong_Check(item)) {
        long long index = PyLong_AsLongLong(item);
        status = tb_tensor_select(current, *dim, index, &next);
    } else if (PySlice_Check(item)) {
        Py_ssize_t start, stop, step;
        if (*dim >= current->ndim)
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "too many indices for a %d-dim tensor", current->ndim);
        if (PySlice_Unpack(item, &start, &stop, &step) < 0)
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "invalid slice");
        if (step <= 0)
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "slice step must be positive");
        int64_t size = current->shape[*dim];
        if (start == PY_SSIZE_T_MIN) start = 0;
        if (stop == PY_SSIZE_T_MAX) stop = size;
        PySlice_AdjustIndices((Py_ssize_t)size, &start, &stop, step);
        status = tb_tensor_slice(current, *dim, start, stop < start ? start : stop, step, &next);
        (*dim)++;
    } else if (item == Py_None) {
        status = tb_tensor_unsqueeze(current, *dim, &next);
        (*dim)++;
    } else {
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "unsupported index type");
    }
    if (status != TB_OK)
        return status;
    tb_tensor_release(current);
    *current = next;
    return TB_OK;
}

static PyObject *tensor_subscript(PyObject *self, PyObject *key) {
    tb_tensor current;
    tb_tensor_retain(get(self), &current);
    PyObject *items = PyTuple_Check(key) ? key : NULL;
    Py_ssize_t count = items ? PyTuple_GET_SIZE(items) : 1;
    int dim = 0;
    tb_status status = TB_OK;
    for (Py_ssize_t i = 0; i < count && status == TB_OK; i++) {
        PyObject *item = items ? PyTuple_GET_ITEM(items, i) : key;
        if (item == Py_Ellipsis) {
            int remaining = 0;
            for (Py_ssize_t j = i + 1; j < count; j++) {
                PyObject *later = items ? PyTuple_GET_ITEM(items, j) : key;
                remaining += later != Py_None;
            }
            dim = current.ndim - remaining;
            continue;
        }
        if (!PyLong_Check(item) && !PySlice_Check(item) && item != Py_None) {
            tb_tensor_release(&current);
            PyErr_Format(PyExc_TypeError, "torchburn.Tensor indices must be ints, slices, None or ..., got %s",
                         Py_TYPE(item)->tp_name);
            return NULL;
        }
        status = apply_index(&current, item, &dim);
    }
    if (status != TB_OK) {
        tb_tensor_release(&current);
        if (PyErr_Occurred())
            return NULL;
        PyErr_SetString(PyExc_IndexError, tb_error_message());
        return NULL;
    }
    return tb_py_tensor_wrap(&current);
}

static PyMemberDef tensor_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(tb_py_tensor, weakrefs), READONLY, NULL},
    {"__dictoffset__", T_PYSSIZET, offsetof(tb_py_tensor, dict), READONLY, NULL},
    {NULL},
};

static PyType_Slot tensor_slots[] = {
    {Py_tp_doc, "A torchburn tensor: a strided view of CPU memory that shares data with torch and numpy "
                "through DLPack and the buffer protocol without copying."},
    {Py_tp_new, tensor_new},
    {Py_tp_dealloc, tensor_dealloc},
    {Py_tp_traverse, tensor_traverse},
    {Py_tp_clear, tensor_clear},
    {Py_tp_repr, tensor_repr},
    {Py_tp_methods, tensor_methods},
    {Py_tp_getset, tensor_getset},
    {Py_tp_members, tensor_members},
    {Py_mp_length, tensor_length},
    {Py_mp_subscript, tensor_subscript},
    {Py_bf_getbuffer, tensor_getbuffer},
    {Py_bf_releasebuffer, tensor_releasebuffer},
    {0, NULL},
};

static PyType_Spec tensor_spec = {
    .name = "torchburn._C.Tensor",
    .basicsize = sizeof(tb_py_tensor),
    .itemsize = 0,
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = tensor_slots,
};

/* ---- module-level constructors ---- */

static PyObject *py_from_dlpack(PyObject *module, PyObject *object) {
    tb_tensor tensor;
    if (tb_py_import_tensor(object, "x", &tensor) != 0)
        return NULL;
    return tb_py_tensor_wrap(&tensor);
}

static PyObject *py_empty(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    /* empty(shape, dtype_name, zero) */
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "empty(shape, dtype, zero)");
        return NULL;
    }
    int64_t shape[TB_MAX_DIMS];
    int ndim;
    if (parse_shape(args, 1, shape, &ndim) != 0)
        return NULL;
    const char *name = PyUnicode_AsUTF8(args[1]);
    if (!name)
        return NULL;
    tb_dtype dtype;
    tb_status status = tb_dtype_from_name(name, &dtype);
    if (status != TB_OK)
        return tb_py_raise(status);
    tb_tensor tensor;
    status = tb_tensor_empty(dtype, ndim, shape, PyObject_IsTrue(args[2]) ? TB_ALLOC_ZERO : TB_ALLOC_DEFAULT, &tensor);
    return finish(status, &tensor);
}

static PyMethodDef tensor_functions[] = {
    {"from_dlpack", py_from_dlpack, METH_O,
     "from_dlpack(x) -> Tensor: a zero-copy view of a torch tensor, numpy array or any DLPack/buffer producer."},
    {"empty", (PyCFunction)(void (*)(void))py_empty, METH_FASTCALL, "empty(shape, dtype, zero) -> Tensor"},
    {NULL},
};

int tb_pyext_register_tensor(PyObject *module) {
    PyObject *type = PyType_FromModuleAndSpec(module, &tensor_spec, NULL);
    if (!type)
        return -1;
    tb_py_tensor_type = (PyTypeObject *)type;
    if (PyModule_AddObjectRef(module, "Tensor", type) != 0)
        return -1;
    return PyModule_AddFunctions(module, tensor_functions);
}
