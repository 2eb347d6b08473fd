/* The C half of turbo_torch.save/load: the checked zip index of a checkpoint, storages made from its
 * records, strided views rebuilt over them (bounds-checked), and the storage facts save needs. The
 * restricted unpickler is eager_pickle.c; the Python half is python/turbo_torch/serialization.py. */
#include "eager.h"

#include <stdlib.h>
#include <string.h>

#include "files/zip_read.h"

int tt_register_pickle(PyObject *module);

/* _tt_zip_index(buffer) -> [(name, data_offset, size), ...]; RuntimeError naming the problem. */
static PyObject *py_zip_index(PyObject *self, PyObject *buffer) {
    (void)self;
    Py_buffer view;
    if (PyObject_GetBuffer(buffer, &view, PyBUF_SIMPLE) != 0)
        return NULL;
    tb_zip_entry *entries = NULL;
    size_t count = 0;
    tb_status status;
    Py_BEGIN_ALLOW_THREADS
    status = tb_zip_index(view.buf, (size_t)view.len, &entries, &count);
    Py_END_ALLOW_THREADS
    PyObject *list = NULL;
    if (status != TB_OK) {
        PyErr_Format(PyExc_RuntimeError, "turbo_torch.load: %s", tb_error_message());
    } else {
        list = PyList_New((Py_ssize_t)count);
        for (size_t i = 0; list && i < count; i++) {
            PyObject *item = Py_BuildValue("(NKK)",
                                           PyUnicode_DecodeUTF8(entries[i].name, (Py_ssize_t)entries[i].name_length,
                                                                "strict"),
                                           (unsigned long long)entries[i].data_offset,
                                           (unsigned long long)entries[i].size);
            if (!item)
                Py_CLEAR(list);
            else
                PyList_SET_ITEM(list, (Py_ssize_t)i, item);
        }
    }
    free(entries);
    PyBuffer_Release(&view);
    return list;
}

/* _tt_storage_from_buffer(buffer, dtype) -> a 1-D tensor owning a copy of the bytes (whose count must
 * be a multiple of the dtype's size). */
static PyObject *py_storage_from_buffer(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    tb_dtype dtype;
    if (nargs != 2 || tt_dtype_from_object(args[1], &dtype) != 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "_tt_storage_from_buffer(buffer, dtype)");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) != 0)
        return NULL;
    size_t itemsize = tb_dtype_size(dtype);
    if ((size_t)view.len % itemsize != 0) {
        PyBuffer_Release(&view);
        return PyErr_Format(PyExc_RuntimeError, "turbo_torch.load: a storage of %zd bytes is not a whole number of "
                            "%zu-byte elements", view.len, itemsize);
    }
    int64_t shape[1] = {(int64_t)((size_t)view.len / itemsize)};
    tb_tensor out;
    tb_status status = tb_tensor_empty(dtype, 1, shape, 0, &out);
    if (status == TB_OK && view.len > 0)
        memcpy(out.storage->data, view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return status == TB_OK ? tt_wrap(&out) : tt_raise(status);
}

static int int64_sequence(PyObject *sequence, const char *what, int64_t *out, int *n) {
    PyObject *fast = PySequence_Fast(sequence, "expected a tuple of ints");
    if (!fast)
        return -1;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(fast);
    if (count > TB_MAX_DIMS) {
        Py_DECREF(fast);
        PyErr_Format(PyExc_RuntimeError, "turbo_torch.load: a tensor with %zd dims; at most %d are supported", count,
                     TB_MAX_DIMS);
        return -1;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(fast, i);
        if (!PyLong_Check(item)) {
            Py_DECREF(fast);
            PyErr_Format(PyExc_RuntimeError, "turbo_torch.load: tensor %s must be ints, got %.100s", what,
                         Py_TYPE(item)->tp_name);
            return -1;
        }
        out[i] = PyLong_AsLongLong(item);
        if (out[i] == -1 && PyErr_Occurred()) {
            Py_DECREF(fast);
            return -1;
        }
    }
    *n = (int)count;
    Py_DECREF(fast);
    return 0;
}

/* _tt_as_strided(storage_tensor, size, stride, offset) -> a view sharing the storage (no autograd). Every
 * element it can address must lie inside the storage: a lying size/stride/offset is a RuntimeError. */
static PyObject *py_as_strided(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 4 || !tt_check(args[0]) || !PyLong_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "_tt_as_strided(tensor, size, stride, offset: int)");
        return NULL;
    }
    int64_t shape[TB_MAX_DIMS], strides[TB_MAX_DIMS];
    int ndim = 0, nstrides = 0;
    if (int64_sequence(args[1], "sizes", shape, &ndim) != 0 || int64_sequence(args[2], "strides", strides, &nstrides) != 0)
        return NULL;
    long long offset = PyLong_AsLongLong(args[3]);
    if (offset == -1 && PyErr_Occurred())
        return NULL;
    if (ndim != nstrides)
        return PyErr_Format(PyExc_RuntimeError, "turbo_torch.load: a tensor has %d sizes but %d strides", ndim, nstrides);
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0 || strides[i] < 0)
            return PyErr_Format(PyExc_RuntimeError, "turbo_torch.load: negative size or stride in dim %d", i);
    if (offset < 0)
        return PyErr_Format(PyExc_RuntimeError, "turbo_torch.load: negative storage offset %lld", offset);
    tb_tensor *base = tt_data(args[0]);
    tb_tensor out;
    tb_status status = tb_tensor_from_storage(base->storage, base->dtype, ndim, shape, strides, offset, &out);
    if (status != TB_OK)
        return PyErr_Format(PyExc_RuntimeError, "turbo_torch.load: tensor does not fit its storage: %s",
                            tb_error_message());
    return tt_wrap(&out);
}

/* _tt_storage_info(tensor) -> (storage identity, storage nbytes, storage offset in elements) */
static PyObject *py_storage_info(PyObject *self, PyObject *tensor) {
    (void)self;
    if (!tt_check(tensor))
        return PyErr_Format(PyExc_TypeError, "expected a turbo_torch tensor, got %.100s", Py_TYPE(tensor)->tp_name);
    tb_tensor *t = tt_data(tensor);
    return Py_BuildValue("(KnL)", (unsigned long long)(uintptr_t)t->storage, (Py_ssize_t)t->storage->nbytes,
                         (long long)t->offset);
}

/* _tt_storage_bytes(tensor) -> bytes of its whole storage (a copy) */
static PyObject *py_storage_bytes(PyObject *self, PyObject *tensor) {
    (void)self;
    if (!tt_check(tensor))
        return PyErr_Format(PyExc_TypeError, "expected a turbo_torch tensor, got %.100s", Py_TYPE(tensor)->tp_name);
    tb_storage *storage = tt_data(tensor)->storage;
    return PyBytes_FromStringAndSize(storage->nbytes ? storage->data : "", (Py_ssize_t)storage->nbytes);
}

static PyMethodDef serialize_functions[] = {
    {"_tt_zip_index", py_zip_index, METH_O, NULL},
    {"_tt_storage_from_buffer", (PyCFunction)(void (*)(void))py_storage_from_buffer, METH_FASTCALL, NULL},
    {"_tt_as_strided", (PyCFunction)(void (*)(void))py_as_strided, METH_FASTCALL, NULL},
    {"_tt_storage_info", py_storage_info, METH_O, NULL},
    {"_tt_storage_bytes", py_storage_bytes, METH_O, NULL},
    {NULL},
};

int tt_register_serialize(PyObject *module);
int tt_register_serialize(PyObject *module) {
    if (tt_register_pickle(module) != 0)
        return -1;
    return PyModule_AddFunctions(module, serialize_functions);
}
