/* Zero-copy exchange with other array libraries: importing objects that speak DLPack (versioned
 * 1.x or legacy capsules) or the buffer protocol as tb_tensor views, and exporting our tensors as
 * DLPack capsules. Imported memory stays owned by its producer: our storage's release callback
 * calls the producer's deleter (or releases the Py_buffer) under the GIL. */
#include <string.h>

#include "dlpack.h"
#include "pyext.h"

/* ---- dtype mapping ---- */

static int dtype_from_dlpack(DLDataType type, tb_dtype *out) {
    if (type.lanes != 1)
        return -1;
    switch (type.code) {
    case kDLFloat:
        if (type.bits == 32) { *out = TB_F32; return 0; }
        if (type.bits == 64) { *out = TB_F64; return 0; }
        if (type.bits == 16) { *out = TB_F16; return 0; }
        return -1;
    case kDLBfloat:
        if (type.bits == 16) { *out = TB_BF16; return 0; }
        return -1;
    case kDLInt:
        if (type.bits == 8) { *out = TB_I8; return 0; }
        if (type.bits == 16) { *out = TB_I16; return 0; }
        if (type.bits == 32) { *out = TB_I32; return 0; }
        if (type.bits == 64) { *out = TB_I64; return 0; }
        return -1;
    case kDLUInt:
        if (type.bits == 8) { *out = TB_U8; return 0; }
        return -1;
    case kDLBool:
        if (type.bits == 8) { *out = TB_BOOL; return 0; }
        return -1;
    default:
        return -1;
    }
}

static DLDataType dtype_to_dlpack(tb_dtype dtype) {
    DLDataType type = {0, (uint8_t)(tb_dtype_size(dtype) * 8), 1};
    switch (dtype) {
    case TB_F32: case TB_F64: case TB_F16: type.code = kDLFloat; break;
    case TB_BF16: type.code = kDLBfloat; break;
    case TB_I8: case TB_I16: case TB_I32: case TB_I64: type.code = kDLInt; break;
    case TB_U8: type.code = kDLUInt; break;
    case TB_BOOL: type.code = kDLBool; break;
    default: break;
    }
    return type;
}

/* ---- import ---- */

typedef struct imported_dlpack {
    void *managed;  /* DLManagedTensor or DLManagedTensorVersioned */
    int versioned;
} imported_dlpack;

static void release_dlpack(void *context, void *data, size_t nbytes) {
    (void)data;
    (void)nbytes;
    imported_dlpack *import = context;
    if (Py_IsInitialized()) {
        PyGILState_STATE gil = PyGILState_Ensure();
        if (import->versioned) {
            DLManagedTensorVersioned *managed = import->managed;
            if (managed->deleter)
                managed->deleter(managed);
        } else {
            DLManagedTensor *managed = import->managed;
            if (managed->deleter)
                managed->deleter(managed);
        }
        PyGILState_Release(gil);
    }
    PyMem_RawFree(import);
}

/* Builds a tb_tensor over a DLTensor; on success ownership of `import` passes to the storage. */
static int tensor_from_dltensor(const DLTensor *dl, int read_only, imported_dlpack *import, const char *name,
                                tb_tensor *out) {
    if (dl->device.device_type != kDLCPU && dl->device.device_type != kDLCUDAHost) {
        PyErr_Format(PyExc_TypeError, "argument '%s' is on a non-CPU device (DLPack device type %d); torchburn runs on the CPU",
                     name, (int)dl->device.device_type);
        return -1;
    }
    if (dl->ndim < 0 || dl->ndim > TB_MAX_DIMS) {
        PyErr_Format(PyExc_ValueError, "argument '%s' has %d dims; torchburn supports up to %d", name, (int)dl->ndim, TB_MAX_DIMS);
        return -1;
    }
    tb_dtype dtype;
    if (dtype_from_dlpack(dl->dtype, &dtype) != 0) {
        PyErr_Format(PyExc_TypeError, "argument '%s' has an unsupported dtype (DLPack code %d, %d bits, %d lanes)", name,
                     (int)dl->dtype.code, (int)dl->dtype.bits, (int)dl->dtype.lanes);
        return -1;
    }
    size_t itemsize = tb_dtype_size(dtype);
    int64_t shape[TB_MAX_DIMS] = {0}, strides[TB_MAX_DIMS] = {0};
    int64_t numel = 1;
    for (int d = 0; d < dl->ndim; d++) {
        shape[d] = dl->shape[d];
        if (shape[d] < 0) {
            PyErr_Format(PyExc_ValueError, "argument '%s' has a negative size in dim %d", name, d);
            return -1;
        }
        numel *= shape[d];
    }
    if (dl->strides) {
        for (int d = 0; d < dl->ndim; d++) {
            strides[d] = dl->strides[d];
            if (strides[d] < 0 && shape[d] > 1) {
                PyErr_Format(PyExc_ValueError, "argument '%s' has a negative stride in dim %d; make it contiguous first", name, d);
                return -1;
            }
            if (strides[d] < 0)
                strides[d] = 0;
        }
    } else {
        tb_contiguous_strides(dl->ndim, shape, strides);
    }
    char *base = (char *)dl->data + dl->byte_offset;
    if (numel > 0 && ((uintptr_t)base % itemsize) != 0) {
        PyErr_Format(PyExc_ValueError, "argument '%s' is misaligned: its data pointer is not a multiple of %zu bytes", name, itemsize);
        return -1;
    }
    int64_t last = 0;
    for (int d = 0; d < dl->ndim && numel > 0; d++)
        last += (shape[d] - 1) * strides[d];
    size_t nbytes = numel > 0 ? (size_t)(last + 1) * itemsize : 0;
    tb_storage *storage;
    tb_status status = tb_storage_wrap(numel > 0 ? base : NULL, nbytes, read_only, release_dlpack, import, &storage);
    if (status != TB_OK) {
        tb_py_raise(status);
        return -1;
    }
    status = tb_tensor_from_storage(storage, dtype, dl->ndim, shape, strides, 0, out);
    if (status != TB_OK) {
        storage->release = NULL; /* the caller still owns `import` on failure */
        tb_storage_release(storage);
        tb_py_raise(status);
        return -1;
    }
    tb_storage_release(storage); /* the tensor holds the only reference now */
    return 0;
}

static int import_capsule(PyObject *capsule, const char *name, tb_tensor *out) {
    imported_dlpack *import = PyMem_RawMalloc(sizeof *import);
    if (!import) {
        PyErr_NoMemory();
        return -1;
    }
    if (PyCapsule_IsValid(capsule, "dltensor_versioned")) {
        DLManagedTensorVersioned *managed = PyCapsule_GetPointer(capsule, "dltensor_versioned");
        if (managed->version.major != 1) {
            PyMem_RawFree(import);
            PyErr_Format(PyExc_BufferError, "argument '%s': unsupported DLPack major version %u", name, managed->version.major);
            return -1;
        }
        import->managed = managed;
        import->versioned = 1;
        int read_only = (managed->flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0;
        if (tensor_from_dltensor(&managed->dl_tensor, read_only, import, name, out) != 0) {
            PyMem_RawFree(import);
            return -1;
        }
        PyCapsule_SetName(capsule, "used_dltensor_versioned");
        return 0;
    }
    if (PyCapsule_IsValid(capsule, "dltensor")) {
        DLManagedTensor *managed = PyCapsule_GetPointer(capsule, "dltensor");
        import->managed = managed;
        import->versioned = 0;
        if (tensor_from_dltensor(&managed->dl_tensor, 0, import, name, out) != 0) {
            PyMem_RawFree(import);
            return -1;
        }
        PyCapsule_SetName(capsule, "used_dltensor");
        return 0;
    }
    PyMem_RawFree(import);
    PyErr_Format(PyExc_TypeError, "argument '%s': __dlpack__ did not return a DLPack capsule", name);
    return -1;
}

static PyObject *call_dlpack(PyObject *object) {
    PyObject *method = PyObject_GetAttrString(object, "__dlpack__");
    if (!method)
        return NULL;
    PyObject *kwargs = Py_BuildValue("{s:(ii)}", "max_version", TB_DLPACK_MAJOR_VERSION, TB_DLPACK_MINOR_VERSION);
    PyObject *empty = PyTuple_New(0);
    PyObject *capsule = (kwargs && empty) ? PyObject_Call(method, empty, kwargs) : NULL;
    if (!capsule && PyErr_ExceptionMatches(PyExc_TypeError)) {
        PyErr_Clear();
        capsule = PyObject_CallNoArgs(method); /* a producer that predates max_version */
    }
    Py_XDECREF(kwargs);
    Py_XDECREF(empty);
    Py_DECREF(method);
    return capsule;
}

static int check_dlpack_device(PyObject *object, const char *name) {
    if (!PyObject_HasAttrString(object, "__dlpack_device__"))
        return 0;
    PyObject *device = PyObject_CallMethod(object, "__dlpack_device__", NULL);
    if (!device)
        return -1;
    int type = 0, id = 0;
    int ok = PyArg_ParseTuple(device, "ii", &type, &id);
    Py_DECREF(device);
    if (!ok)
        return -1;
    if (type != kDLCPU && type != kDLCUDAHost) {
        PyErr_Format(PyExc_TypeError,
                     "argument '%s' is on device type %d (id %d), not the CPU; torchburn runs on the CPU: move it with .cpu() first",
                     name, type, id);
        return -1;
    }
    return 0;
}

/* torch.utils.dlpack.to_dlpack, cached: for torch tensors it makes a capsule in ~0.2 us where the
 * __dlpack__ protocol method (with its stream/device argument handling in Python) takes ~2 us. */
static PyObject *torch_to_dlpack;

static int is_torch_tensor(PyObject *object) {
    PyTypeObject *type = Py_TYPE(object);
    for (; type; type = type->tp_base) {
        if (strcmp(type->tp_name, "Tensor") == 0) {
            PyObject *module = PyObject_GetAttrString((PyObject *)type, "__module__");
            int is_torch = module && PyUnicode_Check(module) && PyUnicode_CompareWithASCIIString(module, "torch") == 0;
            Py_XDECREF(module);
            PyErr_Clear();
            return is_torch;
        }
    }
    return 0;
}

static PyObject *call_torch_to_dlpack(PyObject *object) {
    if (!torch_to_dlpack) {
        PyObject *module = PyImport_ImportModule("torch.utils.dlpack");
        if (!module)
            return NULL;
        torch_to_dlpack = PyObject_GetAttrString(module, "to_dlpack");
        Py_DECREF(module);
        if (!torch_to_dlpack)
            return NULL;
    }
    return PyObject_CallOneArg(torch_to_dlpack, object);
}

static int import_dlpack(PyObject *object, const char *name, tb_tensor *out) {
    PyObject *capsule = NULL;
    if (is_torch_tensor(object)) {
        /* checks the device first: to_dlpack would happily export a CUDA tensor */
        PyObject *device = PyObject_GetAttrString(object, "is_cuda");
        int on_cpu = 0;
        if (device) {
            PyObject *is_cpu = PyObject_GetAttrString(object, "is_cpu");
            on_cpu = is_cpu == Py_True;
            Py_XDECREF(is_cpu);
            Py_DECREF(device);
        }
        PyErr_Clear();
        if (on_cpu) {
            capsule = call_torch_to_dlpack(object);
            if (!capsule)
                PyErr_Clear(); /* requires_grad, conj bits, ...: take the general path below */
        }
    }
    if (capsule) {
        int result = import_capsule(capsule, name, out);
        Py_DECREF(capsule);
        return result;
    }
    if (check_dlpack_device(object, name) != 0)
        return -1;
    capsule = call_dlpack(object);
    if (!capsule && (PyErr_ExceptionMatches(PyExc_RuntimeError) || PyErr_ExceptionMatches(PyExc_BufferError))) {
        /* torch refuses to export tensors that require grad: read a detached view instead. HasAttr
         * clears any pending exception, so the producer's error is set aside while it runs. */
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);
        if (!PyObject_HasAttrString(object, "detach")) {
            PyErr_Restore(type, value, traceback);
            return -1;
        }
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(traceback);
        PyObject *detached = PyObject_CallMethod(object, "detach", NULL);
        if (!detached)
            return -1;
        capsule = call_dlpack(detached);
        Py_DECREF(detached);
    }
    if (!capsule)
        return -1;
    int result = import_capsule(capsule, name, out);
    Py_DECREF(capsule);
    return result;
}

/* ---- buffer protocol import ---- */

typedef struct imported_buffer {
    Py_buffer view;
} imported_buffer;

static void release_buffer(void *context, void *data, size_t nbytes) {
    (void)data;
    (void)nbytes;
    imported_buffer *import = context;
    if (Py_IsInitialized()) {
        PyGILState_STATE gil = PyGILState_Ensure();
        PyBuffer_Release(&import->view);
        PyGILState_Release(gil);
    }
    PyMem_RawFree(import);
}

static int dtype_from_format(const char *format, Py_ssize_t itemsize, tb_dtype *out) {
    if (!format)
        format = "B";
    while (*format == '<' || *format == '=' || *format == '@' || *format == '|')
        format++;
    if (format[0] == '\0' || format[1] != '\0')
        return -1;
    switch (format[0]) {
    case 'f': *out = TB_F32; break;
    case 'd': *out = TB_F64; break;
    case 'e': *out = TB_F16; break;
    case 'b': *out = TB_I8; break;
    case 'B': case 'c': *out = TB_U8; break;
    case 'h': *out = TB_I16; break;
    case 'i': case 'l': case 'q':
        if (itemsize == 4) *out = TB_I32;
        else if (itemsize == 8) *out = TB_I64;
        else return -1;
        break;
    case '?': *out = TB_BOOL; break;
    default: return -1;
    }
    return (Py_ssize_t)tb_dtype_size(*out) == itemsize ? 0 : -1;
}

static int import_buffer(PyObject *object, const char *name, tb_tensor *out) {
    imported_buffer *import = PyMem_RawMalloc(sizeof *import);
    if (!import) {
        PyErr_NoMemory();
        return -1;
    }
    if (PyObject_GetBuffer(object, &import->view, PyBUF_RECORDS_RO) != 0) {
        PyMem_RawFree(import);
        return -1;
    }
    Py_buffer *view = &import->view;
    tb_dtype dtype;
    const char *problem = NULL;
    if (dtype_from_format(view->format, view->itemsize, &dtype) != 0)
        problem = "has an unsupported element format";
    else if (view->ndim > TB_MAX_DIMS)
        problem = "has too many dims";
    int64_t shape[TB_MAX_DIMS] = {0}, strides[TB_MAX_DIMS] = {0};
    int64_t numel = 1, last = 0;
    for (int d = 0; !problem && d < view->ndim; d++) {
        shape[d] = view->shape[d];
        Py_ssize_t byte_stride = view->strides ? view->strides[d] : 0;
        if (byte_stride % view->itemsize != 0)
            problem = "has strides that are not a multiple of its item size";
        else if (byte_stride < 0 && shape[d] > 1)
            problem = "has negative strides";
        strides[d] = byte_stride > 0 ? byte_stride / view->itemsize : 0;
        numel *= shape[d];
    }
    if (!problem && !view->strides)
        tb_contiguous_strides(view->ndim, shape, strides);
    if (!problem && numel > 0 && ((uintptr_t)view->buf % view->itemsize) != 0)
        problem = "is misaligned for its element size";
    if (problem) {
        PyErr_Format(PyExc_TypeError, "argument '%s' %s (buffer format '%s')", name, problem, view->format ? view->format : "B");
        PyBuffer_Release(view);
        PyMem_RawFree(import);
        return -1;
    }
    for (int d = 0; d < view->ndim && numel > 0; d++)
        last += (shape[d] - 1) * strides[d];
    size_t nbytes = numel > 0 ? (size_t)(last + 1) * (size_t)view->itemsize : 0;
    tb_storage *storage;
    tb_status status = tb_storage_wrap(view->buf, nbytes, view->readonly != 0, release_buffer, import, &storage);
    if (status != TB_OK) {
        PyBuffer_Release(view);
        PyMem_RawFree(import);
        tb_py_raise(status);
        return -1;
    }
    status = tb_tensor_from_storage(storage, dtype, view->ndim, shape, strides, 0, out);
    tb_storage_release(storage); /* on failure this releases the buffer too */
    if (status != TB_OK) {
        tb_py_raise(status);
        return -1;
    }
    return 0;
}

int tb_py_import_tensor(PyObject *object, const char *name, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    if (tb_py_tensor_check(object)) {
        tb_tensor_retain(&((tb_py_tensor *)object)->tensor, out);
        return 0;
    }
    if (PyObject_HasAttrString(object, "__dlpack__"))
        return import_dlpack(object, name, out);
    if (PyObject_CheckBuffer(object))
        return import_buffer(object, name, out);
    PyErr_Format(PyExc_TypeError, "argument '%s' must be a tensor or array (torch, numpy, torchburn), got %s", name,
                 Py_TYPE(object)->tp_name);
    return -1;
}

/* ---- export ---- */

typedef struct export_context {
    DLManagedTensorVersioned versioned;
    DLManagedTensor legacy;
    int64_t shape[TB_MAX_DIMS];
    int64_t strides[TB_MAX_DIMS];
    PyObject *owner; /* the tb_py_tensor kept alive while the consumer holds the data */
} export_context;

static void release_export(export_context *context) {
    if (Py_IsInitialized()) {
        PyGILState_STATE gil = PyGILState_Ensure();
        Py_XDECREF(context->owner);
        PyGILState_Release(gil);
    }
    PyMem_RawFree(context);
}

static void delete_versioned(DLManagedTensorVersioned *managed) { release_export(managed->manager_ctx); }
static void delete_legacy(DLManagedTensor *managed) { release_export(managed->manager_ctx); }

static void capsule_destructor_versioned(PyObject *capsule) {
    if (PyCapsule_IsValid(capsule, "dltensor_versioned")) {
        DLManagedTensorVersioned *managed = PyCapsule_GetPointer(capsule, "dltensor_versioned");
        managed->deleter(managed);
    }
}

static void capsule_destructor_legacy(PyObject *capsule) {
    if (PyCapsule_IsValid(capsule, "dltensor")) {
        DLManagedTensor *managed = PyCapsule_GetPointer(capsule, "dltensor");
        managed->deleter(managed);
    }
}

PyObject *tb_py_export_dlpack(PyObject *self, int versioned) {
    tb_py_tensor *tensor = (tb_py_tensor *)self;
    const tb_tensor *t = &tensor->tensor;
    if (!versioned && t->storage->read_only) {
        PyErr_SetString(PyExc_BufferError,
                        "this tensor is read-only and a legacy (unversioned) DLPack capsule cannot say so; "
                        "the consumer must request max_version >= (1, 0)");
        return NULL;
    }
    export_context *context = PyMem_RawCalloc(1, sizeof *context);
    if (!context)
        return PyErr_NoMemory();
    tb_storage_mark_exported(t->storage); /* the consumer may write without bumping our version */
    for (int d = 0; d < t->ndim; d++) {
        context->shape[d] = t->shape[d];
        context->strides[d] = t->strides[d];
    }
    DLTensor dl = {0};
    dl.data = t->storage->data;
    dl.byte_offset = (uint64_t)t->offset * tb_dtype_size(t->dtype);
    dl.device.device_type = kDLCPU;
    dl.device.device_id = 0;
    dl.ndim = t->ndim;
    dl.dtype = dtype_to_dlpack(t->dtype);
    dl.shape = context->shape;
    dl.strides = context->strides;
    Py_INCREF(self);
    context->owner = self;
    if (versioned) {
        context->versioned.version.major = TB_DLPACK_MAJOR_VERSION;
        context->versioned.version.minor = TB_DLPACK_MINOR_VERSION;
        context->versioned.manager_ctx = context;
        context->versioned.deleter = delete_versioned;
        context->versioned.flags = t->storage->read_only ? DLPACK_FLAG_BITMASK_READ_ONLY : 0;
        context->versioned.dl_tensor = dl;
        PyObject *capsule = PyCapsule_New(&context->versioned, "dltensor_versioned", capsule_destructor_versioned);
        if (!capsule)
            release_export(context);
        return capsule;
    }
    context->legacy.dl_tensor = dl;
    context->legacy.manager_ctx = context;
    context->legacy.deleter = delete_legacy;
    PyObject *capsule = PyCapsule_New(&context->legacy, "dltensor", capsule_destructor_legacy);
    if (!capsule)
        release_export(context);
    return capsule;
}
