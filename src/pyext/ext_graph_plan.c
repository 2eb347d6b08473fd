/* torchburn._C.Plan: a compiled graph callable from Python with an all-C call path.
 *
 * plan(*tensors) -> tuple of tensors. Inputs are read in place: torch tensors through the C-level
 * DLPack exchange table that torch publishes on its tensor type (__dlpack_c_exchange_api__, DLPack
 * 1.3: a non-owning DLTensor per input, no Python calls), anything else through tb_py_import_tensor.
 * Outputs are allocated by the producer of the first input (torch tensors through the exchange table's
 * allocator, else torchburn Tensors), the plan runs with the GIL released, and the outputs come back
 * as that library's tensors. When an input does not match the plan (dtype/shape/strides/device) or the
 * run fails, the call goes to plan.fallback(*tensors) if one is set (the compile backend sets the
 * eager region there), else raises PlanInputMismatch / the error. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "dlpack.h"
#include "ext_graph.h"
#include "structmember.h"

/* ---- the DLPack 1.3 exchange table (declared from the DLPack specification) ---- */

typedef struct tb_dlpack_exchange_header {
    DLPackVersion version;
    struct tb_dlpack_exchange_header *prev_api;
} tb_dlpack_exchange_header;

typedef struct tb_dlpack_exchange_api {
    tb_dlpack_exchange_header header;
    int (*managed_tensor_allocator)(DLTensor *prototype, DLManagedTensorVersioned **out, void *error_context,
                                    void (*set_error)(void *error_context, const char *kind, const char *message));
    int (*managed_tensor_from_py_object_no_sync)(void *py_object, DLManagedTensorVersioned **out);
    int (*managed_tensor_to_py_object_no_sync)(DLManagedTensorVersioned *tensor, void **out_py_object);
    int (*dltensor_from_py_object_no_sync)(void *py_object, DLTensor *out);
    int (*current_work_stream)(int device_type, int32_t device_id, void **out_current_stream);
} tb_dlpack_exchange_api;

/* A few (type, table) pairs: torch.Tensor and nn.Parameter in practice. NULL table: the type has none. */
enum { API_CACHE = 8 };
static PyTypeObject *api_types[API_CACHE];
static const tb_dlpack_exchange_api *api_tables[API_CACHE];
static int api_count;

static const tb_dlpack_exchange_api *exchange_api(PyTypeObject *type) {
    for (int i = 0; i < api_count; i++)
        if (api_types[i] == type)
            return api_tables[i];
    const tb_dlpack_exchange_api *api = NULL;
    PyObject *capsule = PyObject_GetAttrString((PyObject *)type, "__dlpack_c_exchange_api__");
    if (capsule && PyCapsule_IsValid(capsule, "dlpack_exchange_api")) {
        const tb_dlpack_exchange_api *candidate = PyCapsule_GetPointer(capsule, "dlpack_exchange_api");
        if (candidate && candidate->header.version.major == 1 && candidate->header.version.minor >= 3 &&
            candidate->dltensor_from_py_object_no_sync && candidate->managed_tensor_allocator &&
            candidate->managed_tensor_to_py_object_no_sync)
            api = candidate;
    }
    Py_XDECREF(capsule);
    PyErr_Clear();
    if (api_count < API_CACHE) {
        Py_INCREF(type); /* keeps the cached pointer valid */
        api_types[api_count] = type;
        api_tables[api_count] = api;
        api_count++;
    }
    return api;
}

static int dtype_from_dl(DLDataType t, tb_dtype *out) {
    if (t.lanes != 1)
        return -1;
    switch (t.code) {
    case kDLFloat: *out = t.bits == 32 ? TB_F32 : t.bits == 16 ? TB_F16 : t.bits == 64 ? TB_F64 : TB_DTYPE_COUNT; break;
    case kDLBfloat: *out = t.bits == 16 ? TB_BF16 : TB_DTYPE_COUNT; break;
    case kDLInt:
        *out = t.bits == 64 ? TB_I64 : t.bits == 32 ? TB_I32 : t.bits == 16 ? TB_I16 : t.bits == 8 ? TB_I8 : TB_DTYPE_COUNT;
        break;
    case kDLUInt: *out = t.bits == 8 ? TB_U8 : TB_DTYPE_COUNT; break;
    case kDLBool: *out = t.bits == 8 ? TB_BOOL : TB_DTYPE_COUNT; break;
    default: return -1;
    }
    return *out == TB_DTYPE_COUNT ? -1 : 0;
}

static DLDataType dtype_to_dl(tb_dtype dtype) {
    DLDataType t = {kDLFloat, (uint8_t)(tb_dtype_size(dtype) * 8), 1};
    switch (dtype) {
    case TB_BF16: t.code = kDLBfloat; break;
    case TB_I8: case TB_I16: case TB_I32: case TB_I64: t.code = kDLInt; break;
    case TB_U8: t.code = kDLUInt; break;
    case TB_BOOL: t.code = kDLBool; break;
    default: break;
    }
    return t;
}

static void set_error_from_producer(void *context, const char *kind, const char *message) {
    (void)context;
    PyErr_Format(PyExc_RuntimeError, "output allocation failed (%s): %s", kind ? kind : "error", message ? message : "");
}

/* ---- the Plan object ---- */

static double monotonic_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct py_plan {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    tb_plan *plan;
    PyObject *fallback; /* callable or NULL */
    PyObject *weakrefs;
    PyObject *last_error; /* message of the last failed run (str) or NULL */
    unsigned long long calls, fallbacks;
    double run_seconds; /* time inside tb_plan_run over all calls: wall time minus this is the overhead */
    tb_engine_program *program; /* the graph on a non-CPU engine (runs instead of the plan), or NULL */
    char engine_note[320];      /* which engine runs the calls, and why not the GPU when it was asked for */
    struct frozen_input *frozen; /* [num_inputs] after freeze_inputs(), else NULL */
} py_plan;

/* An input declared frozen (a weight of a compiled model under freeze_weights): the plan sees it through
 * a storage wrapping the caller's memory that stays the same across calls, so the packed weights cached on
 * it are reused. Its version follows the torch tensor's `_version` (every in-place write through torch
 * bumps it); another tensor object, data pointer or size makes a new storage. The tensor object is held,
 * so its address (and its memory) cannot be reused by another tensor while the storage keys on it. Writes
 * that bypass torch's version counter (`param.data.copy_(...)`) are not seen: that is the freeze
 * contract (docs/compile_backend.md). */
typedef struct frozen_input {
    bool on;
    PyObject *tensor;    /* the tensor the storage wraps (a reference), or NULL */
    tb_storage *storage; /* NULL until the first call */
    void *data;
    size_t nbytes;
    long long torch_version;
} frozen_input;

static PyTypeObject *plan_type;
static PyObject *input_mismatch_error;

enum { STACK_IO = 32 };

typedef struct call_state {
    void *inputs_stack[STACK_IO], *outputs_stack[STACK_IO];
    tb_tensor slow_stack[STACK_IO], tb_out_stack[STACK_IO];
    DLManagedTensorVersioned *managed_stack[STACK_IO];
    tb_storage *storages_stack[STACK_IO];
    tb_storage **storages; /* per input, its storage when bound through a torchburn tensor (else NULL) */
    void **inputs, **outputs;
    tb_tensor *slow, *tb_out;
    DLManagedTensorVersioned **managed;
    int nin, nout;
} call_state;

static int state_init(call_state *s, int nin, int nout) {
    memset(s, 0, sizeof *s);
    s->nin = nin;
    s->nout = nout;
    bool small = nin <= STACK_IO && nout <= STACK_IO;
    s->inputs = small ? s->inputs_stack : PyMem_Calloc((size_t)nin + 1, sizeof(void *));
    s->outputs = small ? s->outputs_stack : PyMem_Calloc((size_t)nout + 1, sizeof(void *));
    s->slow = small ? s->slow_stack : PyMem_Calloc((size_t)nin + 1, sizeof(tb_tensor));
    s->tb_out = small ? s->tb_out_stack : PyMem_Calloc((size_t)nout + 1, sizeof(tb_tensor));
    s->managed = small ? s->managed_stack : PyMem_Calloc((size_t)nout + 1, sizeof(void *));
    s->storages = small ? s->storages_stack : PyMem_Calloc((size_t)nin + 1, sizeof(tb_storage *));
    if (!s->inputs || !s->outputs || !s->slow || !s->tb_out || !s->managed || !s->storages) {
        PyErr_NoMemory();
        return -1;
    }
    if (small) {
        memset(s->slow_stack, 0, sizeof(tb_tensor) * (size_t)nin);
        memset(s->tb_out_stack, 0, sizeof(tb_tensor) * (size_t)nout);
        memset(s->managed_stack, 0, sizeof(void *) * (size_t)nout);
    }
    return 0;
}

static void state_free(call_state *s) {
    if (s->slow)
        for (int i = 0; i < s->nin; i++)
            tb_tensor_release(&s->slow[i]);
    if (s->tb_out)
        for (int j = 0; j < s->nout; j++)
            tb_tensor_release(&s->tb_out[j]);
    if (s->managed)
        for (int j = 0; j < s->nout; j++)
            if (s->managed[j] && s->managed[j]->deleter)
                s->managed[j]->deleter(s->managed[j]);
    if (s->inputs != s->inputs_stack) {
        PyMem_Free(s->inputs);
        PyMem_Free(s->outputs);
        PyMem_Free(s->slow);
        PyMem_Free(s->tb_out);
        PyMem_Free(s->managed);
        PyMem_Free(s->storages);
    }
}

/* 0: bound; 1: does not match the plan (no exception set); -1: error (exception set). */
static int bind_input(const tb_plan *plan, int i, PyObject *object, const tb_dlpack_exchange_api *api, call_state *s) {
    if (api) {
        DLTensor dl;
        if (api->dltensor_from_py_object_no_sync(object, &dl) != 0) {
            PyErr_Clear();
            return 1;
        }
        tb_dtype dtype;
        if (dl.device.device_type != kDLCPU || dtype_from_dl(dl.dtype, &dtype) != 0 || dl.ndim > TB_MAX_DIMS ||
            !tb_plan_input_matches(plan, i, dtype, dl.ndim, dl.shape, dl.strides))
            return 1;
        s->inputs[i] = (char *)dl.data + dl.byte_offset;
        return 0;
    }
    if (tb_py_import_tensor(object, "input", &s->slow[i]) != 0) {
        PyErr_Clear();
        return 1;
    }
    const tb_tensor *t = &s->slow[i];
    if (!tb_plan_input_matches(plan, i, t->dtype, t->ndim, t->shape, t->strides))
        return 1;
    s->inputs[i] = tb_tensor_data(t);
    s->storages[i] = t->storage; /* kept alive by s->slow[i] for the call */
    return 0;
}

static int allocate_outputs(const tb_plan *plan, const tb_dlpack_exchange_api *api, call_state *s) {
    for (int j = 0; j < s->nout; j++) {
        const tb_value_info *info = tb_plan_output_info(plan, j);
        int alias = tb_plan_output_alias(plan, j);
        if (alias >= 0) {
            s->outputs[j] = s->outputs[alias]; /* exported as output `alias`'s tensor again */
            continue;
        }
        if (api) {
            int64_t shape[TB_MAX_DIMS];
            memcpy(shape, info->shape, sizeof shape);
            DLTensor prototype;
            memset(&prototype, 0, sizeof prototype);
            prototype.device.device_type = kDLCPU;
            prototype.ndim = info->ndim;
            prototype.dtype = dtype_to_dl(info->dtype);
            prototype.shape = shape;
            if (api->managed_tensor_allocator(&prototype, &s->managed[j], NULL, set_error_from_producer) != 0 ||
                !s->managed[j]) {
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_RuntimeError, "output allocation failed");
                s->managed[j] = NULL;
                return -1;
            }
            s->outputs[j] = (char *)s->managed[j]->dl_tensor.data + s->managed[j]->dl_tensor.byte_offset;
        } else {
            tb_status status = tb_tensor_empty(info->dtype, info->ndim, info->shape, 0, &s->tb_out[j]);
            if (status != TB_OK) {
                tb_py_raise(status);
                return -1;
            }
            s->outputs[j] = tb_tensor_data(&s->tb_out[j]);
        }
    }
    return 0;
}

static PyObject *export_outputs(const tb_plan *plan, const tb_dlpack_exchange_api *api, call_state *s) {
    PyObject *result = PyTuple_New(s->nout);
    if (!result)
        return NULL;
    for (int j = 0; j < s->nout; j++) {
        PyObject *item = NULL;
        int alias = tb_plan_output_alias(plan, j);
        if (alias >= 0) {
            item = PyTuple_GET_ITEM(result, alias);
            Py_INCREF(item);
        } else if (api) {
            void *object = NULL;
            DLManagedTensorVersioned *m = s->managed[j];
            s->managed[j] = NULL; /* stolen, even on failure */
            if (api->managed_tensor_to_py_object_no_sync(m, &object) == 0)
                item = object;
        } else {
            item = tb_py_tensor_wrap(&s->tb_out[j]);
        }
        if (!item) {
            Py_DECREF(result);
            return NULL;
        }
        PyTuple_SET_ITEM(result, j, item);
    }
    return result;
}

/* Bytes from an input's first element to one past its last (the plan checked its shape and strides). */
static size_t input_extent(const tb_plan *plan, int i) {
    const tb_value_info *info = tb_plan_input_info(plan, i);
    int64_t last = 0;
    for (int d = 0; d < info->ndim; d++) {
        if (info->shape[d] == 0)
            return 0;
        last += (info->shape[d] - 1) * info->strides[d];
    }
    return (size_t)(last + 1) * tb_dtype_size(info->dtype);
}

/* Frozen torch inputs (bound through DLPack, so the memory is torch's): their storages for this run, each
 * with a reference the caller drops after the run (a concurrent call may replace the storage). A tensor
 * whose `_version` cannot be read runs without one (no cache: the same numbers). */
static void bind_frozen(py_plan *self, PyObject *const *args, call_state *s) {
    static PyObject *version_name;
    if (!version_name && !(version_name = PyUnicode_InternFromString("_version"))) {
        PyErr_Clear();
        return;
    }
    for (int i = 0; i < s->nin; i++) {
        frozen_input *f = &self->frozen[i];
        if (!f->on || s->storages[i]) /* a torchburn tensor brings its own versioned storage */
            continue;
        PyObject *version = PyObject_GetAttr(args[i], version_name);
        long long value = version ? PyLong_AsLongLong(version) : -1;
        Py_XDECREF(version);
        if (value == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            continue;
        }
        const size_t nbytes = input_extent(self->plan, i);
        if (f->storage && (f->tensor != args[i] || f->data != s->inputs[i] || f->nbytes != nbytes)) {
            tb_storage_release(f->storage); /* another tensor: a new storage */
            f->storage = NULL;
            Py_CLEAR(f->tensor);
        }
        if (!f->storage) {
            if (tb_storage_wrap_versioned(s->inputs[i], nbytes, NULL, NULL, &f->storage) != TB_OK) {
                tb_error_clear();
                continue;
            }
            f->tensor = Py_NewRef(args[i]);
            f->data = s->inputs[i];
            f->nbytes = nbytes;
            f->torch_version = value;
        } else if (value != f->torch_version) { /* written through torch since the last call */
            f->storage->version++;
            f->torch_version = value;
        }
        tb_storage_retain(f->storage);
        s->storages[i] = f->storage;
    }
}

static void frozen_free(py_plan *self) {
    if (!self->frozen)
        return;
    for (int i = 0; i < tb_plan_num_inputs(self->plan); i++) {
        tb_storage_release(self->frozen[i].storage);
        Py_CLEAR(self->frozen[i].tensor);
    }
    PyMem_Free(self->frozen);
    self->frozen = NULL;
}

static PyObject *plan_freeze_inputs(PyObject *object, PyObject *arg) {
    py_plan *self = (py_plan *)object;
    const int nin = tb_plan_num_inputs(self->plan);
    PyObject *items = PySequence_Fast(arg, "freeze_inputs() takes a sequence of input indices");
    if (!items)
        return NULL;
    frozen_input *frozen = PyMem_Calloc((size_t)nin + 1, sizeof *frozen);
    if (!frozen) {
        Py_DECREF(items);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t j = 0; j < PySequence_Fast_GET_SIZE(items); j++) {
        long index = PyLong_AsLong(PySequence_Fast_GET_ITEM(items, j));
        if (index == -1 && PyErr_Occurred()) {
            PyMem_Free(frozen);
            Py_DECREF(items);
            return NULL;
        }
        if (index < 0 || index >= nin) {
            PyErr_Format(PyExc_IndexError, "freeze_inputs: input %ld is outside [0, %d)", index, nin);
            PyMem_Free(frozen);
            Py_DECREF(items);
            return NULL;
        }
        frozen[index].on = true;
    }
    Py_DECREF(items);
    frozen_free(self);
    self->frozen = frozen;
    Py_RETURN_NONE;
}

static PyObject *plan_get_frozen_inputs(PyObject *object, void *closure) {
    (void)closure;
    py_plan *self = (py_plan *)object;
    PyObject *result = PyList_New(0);
    for (int i = 0; result && self->frozen && i < tb_plan_num_inputs(self->plan); i++) {
        if (!self->frozen[i].on)
            continue;
        PyObject *index = PyLong_FromLong(i);
        if (!index || PyList_Append(result, index) != 0)
            Py_CLEAR(result);
        Py_XDECREF(index);
    }
    return result;
}

static PyObject *call_fallback(py_plan *self, PyObject *const *args, Py_ssize_t nargs) {
    self->fallbacks++;
    return PyObject_Vectorcall(self->fallback, args, (size_t)nargs, NULL);
}

static PyObject *plan_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    py_plan *self = (py_plan *)callable;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    const tb_plan *plan = self->plan;
    int nin = tb_plan_num_inputs(plan), nout = tb_plan_num_outputs(plan);
    if (kwnames && PyTuple_GET_SIZE(kwnames) > 0) {
        PyErr_SetString(PyExc_TypeError, "Plan takes positional tensors only");
        return NULL;
    }
    if (nargs != nin) {
        if (self->fallback)
            return call_fallback(self, args, nargs);
        PyErr_Format(PyExc_TypeError, "this plan takes %d tensors, got %zd", nin, nargs);
        return NULL;
    }
    self->calls++;
    call_state s;
    if (state_init(&s, nin, nout) != 0) {
        state_free(&s);
        return NULL;
    }
    const tb_dlpack_exchange_api *output_api = NULL;
    int mismatch = 0;
    for (int i = 0; i < nin && !mismatch; i++) {
        const tb_dlpack_exchange_api *api = exchange_api(Py_TYPE(args[i]));
        if (i == 0)
            output_api = api;
        mismatch = bind_input(plan, i, args[i], api, &s);
    }
    if (nin == 0 && nout > 0)
        output_api = NULL;
    if (mismatch) {
        state_free(&s);
        if (mismatch < 0)
            return NULL;
        if (self->fallback)
            return call_fallback(self, args, nargs);
        PyErr_SetString(input_mismatch_error, "the inputs do not match the plan (dtype, shape, strides or device)");
        return NULL;
    }
    if (allocate_outputs(plan, output_api, &s) != 0) {
        state_free(&s);
        if (self->fallback) {
            PyErr_Clear();
            return call_fallback(self, args, nargs);
        }
        return NULL;
    }
    if (self->frozen && !self->program)
        bind_frozen(self, args, &s);
    tb_status status;
    double started = monotonic_seconds(), finished;
    Py_BEGIN_ALLOW_THREADS
    status = self->program ? tb_engine_program_run(self->program, s.inputs, s.outputs)
                           : tb_plan_run_storages(plan, s.inputs, s.storages, s.outputs);
    finished = monotonic_seconds();
    Py_END_ALLOW_THREADS
    if (self->frozen && !self->program)
        for (int i = 0; i < nin; i++)
            if (self->frozen[i].on && s.storages[i] && !s.slow[i].storage) {
                /* the reference bind_frozen took for this run (not a torchburn tensor's own storage) */
                tb_storage_release(s.storages[i]);
                s.storages[i] = NULL;
            }
    self->run_seconds += finished - started;
    if (status != TB_OK) {
        state_free(&s);
        if (self->fallback) {
            /* keep the reason where the Python side can log it */
            Py_XSETREF(self->last_error, PyUnicode_FromString(tb_error_message()));
            PyErr_Clear();
            return call_fallback(self, args, nargs);
        }
        return tb_py_raise(status);
    }
    PyObject *result = export_outputs(plan, output_api, &s);
    state_free(&s);
    return result;
}

static void plan_dealloc(PyObject *object) {
    py_plan *self = (py_plan *)object;
    PyTypeObject *type = Py_TYPE(object);
    PyObject_GC_UnTrack(object);
    if (self->weakrefs)
        PyObject_ClearWeakRefs(object);
    Py_CLEAR(self->fallback);
    Py_CLEAR(self->last_error);
    frozen_free(self);
    tb_engine_program_free(self->program);
    tb_plan_release(self->plan);
    type->tp_free(object);
    Py_DECREF(type);
}

static int plan_traverse(PyObject *object, visitproc visit, void *arg) {
    py_plan *self = (py_plan *)object;
    for (int i = 0; self->frozen && i < tb_plan_num_inputs(self->plan); i++)
        Py_VISIT(self->frozen[i].tensor);
    Py_VISIT(self->fallback);
    Py_VISIT(Py_TYPE(object));
    return 0;
}

static int plan_clear(PyObject *object) {
    frozen_free((py_plan *)object);
    Py_CLEAR(((py_plan *)object)->fallback);
    return 0;
}

PyObject *tb_py_plan_wrap(tb_plan *plan) {
    py_plan *self = PyObject_GC_New(py_plan, plan_type);
    if (!self) {
        tb_plan_release(plan);
        return NULL;
    }
    self->vectorcall = plan_vectorcall;
    self->plan = plan;
    self->fallback = NULL;
    self->weakrefs = NULL;
    self->last_error = NULL;
    self->calls = self->fallbacks = 0;
    self->run_seconds = 0.0;
    self->program = NULL;
    self->frozen = NULL;
    snprintf(self->engine_note, sizeof self->engine_note, "native_cpu");
    PyObject_GC_Track((PyObject *)self);
    return (PyObject *)self;
}

int tb_py_plan_attach_engine(PyObject *object, const tb_graph *graph) {
    py_plan *self = (py_plan *)object;
    const tb_engine *engine;
    tb_status status;
    Py_BEGIN_ALLOW_THREADS
    status = tb_engine_active(&engine);
    Py_END_ALLOW_THREADS
    if (status != TB_OK) {
        tb_py_raise(status);
        return -1;
    }
    if (engine != &tb_engine_vulkan) {
        snprintf(self->engine_note, sizeof self->engine_note, "%s", engine->name);
        return 0;
    }
    tb_engine_program *program = NULL;
    Py_BEGIN_ALLOW_THREADS
    status = tb_engine_program_build(engine, graph, &program);
    Py_END_ALLOW_THREADS
    if (status != TB_OK) {
        /* the whole graph stays on the CPU plan; the note says which node kept it there */
        snprintf(self->engine_note, sizeof self->engine_note, "native_cpu (%s)", tb_error_message());
        tb_error_clear();
        return 0;
    }
    self->program = program;
    size_t to_engine, from_engine;
    tb_engine_program_copy_bytes(program, &to_engine, &from_engine);
    snprintf(self->engine_note, sizeof self->engine_note,
             "vulkan (%d ops, one submission per call; copies per call: %zu bytes in, %zu bytes out)",
             tb_engine_program_num_ops(program), to_engine, from_engine);
    return 0;
}

static PyObject *info_tuple(const tb_value_info *info) {
    PyObject *shape = PyTuple_New(info->ndim), *strides = PyTuple_New(info->ndim);
    if (!shape || !strides) {
        Py_XDECREF(shape);
        Py_XDECREF(strides);
        return NULL;
    }
    for (int d = 0; d < info->ndim; d++) {
        PyTuple_SET_ITEM(shape, d, PyLong_FromLongLong(info->shape[d]));
        PyTuple_SET_ITEM(strides, d, PyLong_FromLongLong(info->strides[d]));
    }
    return Py_BuildValue("(sNN)", tb_dtype_name(info->dtype), shape, strides);
}

/* The index argument of a per-input/per-output method, checked against count (-1 with IndexError set). */
static long plan_index(PyObject *arg, int count, const char *what) {
    long index = PyLong_AsLong(arg);
    if (index < 0 || index >= count) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_IndexError, "%s index out of range", what);
        return -1;
    }
    return index;
}

static PyObject *plan_input_info(PyObject *object, PyObject *arg) {
    py_plan *self = (py_plan *)object;
    long i = plan_index(arg, tb_plan_num_inputs(self->plan), "input");
    if (i < 0)
        return NULL;
    return info_tuple(tb_plan_input_info(self->plan, (int)i));
}

static PyObject *plan_output_alias(PyObject *object, PyObject *arg) {
    py_plan *self = (py_plan *)object;
    long j = plan_index(arg, tb_plan_num_outputs(self->plan), "output");
    if (j < 0)
        return NULL;
    int alias = tb_plan_output_alias(self->plan, (int)j);
    if (alias < 0)
        Py_RETURN_NONE;
    return PyLong_FromLong(alias);
}

static PyObject *plan_output_info(PyObject *object, PyObject *arg) {
    py_plan *self = (py_plan *)object;
    long j = plan_index(arg, tb_plan_num_outputs(self->plan), "output");
    if (j < 0)
        return NULL;
    return info_tuple(tb_plan_output_info(self->plan, (int)j));
}

static PyObject *plan_get_run_seconds(PyObject *object, void *closure) {
    (void)closure;
    return PyFloat_FromDouble(((py_plan *)object)->run_seconds);
}

static PyObject *plan_describe(PyObject *object, PyObject *unused) {
    char *text;
    py_plan *self = (py_plan *)object;
    tb_status status = tb_plan_describe(self->plan, &text);
    if (status != TB_OK)
        return tb_py_raise(status);
    PyObject *result = strcmp(self->engine_note, "native_cpu") != 0
                           ? PyUnicode_FromFormat("%sengine: %s\n", text, self->engine_note)
                           : PyUnicode_FromString(text);
    free(text);
    return result;
}

static PyObject *plan_get_engine(PyObject *object, void *closure) {
    return PyUnicode_FromString(((py_plan *)object)->engine_note);
}

static PyObject *plan_get_key(PyObject *object, void *closure) {
    uint8_t key[32];
    tb_plan_key(((py_plan *)object)->plan, key);
    char hex[65];
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", key[i]);
    return PyUnicode_FromString(hex);
}

static PyObject *plan_get_fallback(PyObject *object, void *closure) {
    PyObject *fallback = ((py_plan *)object)->fallback;
    return Py_NewRef(fallback ? fallback : Py_None);
}

static int plan_set_fallback(PyObject *object, PyObject *value, void *closure) {
    py_plan *self = (py_plan *)object;
    if (value && value != Py_None && !PyCallable_Check(value)) {
        PyErr_SetString(PyExc_TypeError, "fallback must be callable or None");
        return -1;
    }
    Py_XSETREF(self->fallback, (value && value != Py_None) ? Py_NewRef(value) : NULL);
    return 0;
}

static PyObject *plan_get_last_error(PyObject *object, void *closure) {
    PyObject *error = ((py_plan *)object)->last_error;
    return Py_NewRef(error ? error : Py_None);
}

static PyObject *plan_get_int(PyObject *object, void *closure) {
    py_plan *self = (py_plan *)object;
    switch ((int)(intptr_t)closure) {
    case 0: return PyLong_FromLong(tb_plan_num_inputs(self->plan));
    case 1: return PyLong_FromLong(tb_plan_num_outputs(self->plan));
    case 2: return PyLong_FromSize_t(tb_plan_arena_bytes(self->plan));
    case 3: return PyLong_FromLong(tb_plan_num_steps(self->plan));
    case 4: return PyLong_FromUnsignedLongLong(self->calls);
    default: return PyLong_FromUnsignedLongLong(self->fallbacks);
    }
}

/* profile(tensors, repeats) -> [(step kernel, min seconds)] over `repeats` profiled runs (the minimum:
 * on a shared machine noise only ever adds time). */
static PyObject *plan_profile(PyObject *object, PyObject *args) {
    py_plan *self = (py_plan *)object;
    PyObject *tensors;
    int repeats;
    if (!PyArg_ParseTuple(args, "O!i", &PyTuple_Type, &tensors, &repeats))
        return NULL;
    const tb_plan *plan = self->plan;
    int nin = tb_plan_num_inputs(plan), nout = tb_plan_num_outputs(plan), nsteps = tb_plan_num_steps(plan);
    if (PyTuple_GET_SIZE(tensors) != nin || repeats < 1) {
        PyErr_SetString(PyExc_ValueError, "profile needs the plan's input tensors and repeats >= 1");
        return NULL;
    }
    call_state s;
    if (state_init(&s, nin, nout) != 0) {
        state_free(&s);
        return NULL;
    }
    for (int i = 0; i < nin; i++) {
        if (bind_input(plan, i, PyTuple_GET_ITEM(tensors, i), NULL, &s) != 0) {
            state_free(&s);
            if (!PyErr_Occurred())
                PyErr_SetString(input_mismatch_error, "the inputs do not match the plan");
            return NULL;
        }
    }
    double *seconds = PyMem_Calloc(2 * ((size_t)nsteps + 1), sizeof(double));
    if (!seconds || allocate_outputs(plan, NULL, &s) != 0) {
        PyMem_Free(seconds);
        state_free(&s);
        return seconds ? NULL : PyErr_NoMemory();
    }
    double *one = seconds + nsteps + 1;
    tb_status status = TB_OK;
    Py_BEGIN_ALLOW_THREADS
    for (int r = 0; r < repeats && status == TB_OK; r++) {
        memset(one, 0, sizeof(double) * (size_t)nsteps);
        status = tb_plan_run_profiled(plan, s.inputs, s.outputs, one);
        for (int i = 0; i < nsteps; i++)
            seconds[i] = (r == 0 || one[i] < seconds[i]) ? one[i] : seconds[i];
    }
    Py_END_ALLOW_THREADS
    state_free(&s);
    PyObject *result = status == TB_OK ? PyList_New(nsteps) : tb_py_raise(status);
    for (int i = 0; result && i < nsteps; i++)
        PyList_SET_ITEM(result, i, Py_BuildValue("(sd)", tb_plan_step_kernel(plan, i), seconds[i]));
    PyMem_Free(seconds);
    return result;
}

/* run_timing(tensors, repeats) -> list of seconds per tb_plan_run, inputs bound and outputs allocated
 * once: the cost of the steps alone, to separate the call path's overhead from the work. */
static PyObject *plan_run_timing(PyObject *object, PyObject *args) {
    py_plan *self = (py_plan *)object;
    PyObject *tensors;
    int repeats;
    if (!PyArg_ParseTuple(args, "O!i", &PyTuple_Type, &tensors, &repeats))
        return NULL;
    const tb_plan *plan = self->plan;
    int nin = tb_plan_num_inputs(plan), nout = tb_plan_num_outputs(plan);
    if (PyTuple_GET_SIZE(tensors) != nin || repeats < 1) {
        PyErr_SetString(PyExc_ValueError, "run_timing needs the plan's input tensors and repeats >= 1");
        return NULL;
    }
    call_state s;
    if (state_init(&s, nin, nout) != 0) {
        state_free(&s);
        return NULL;
    }
    for (int i = 0; i < nin; i++) {
        if (bind_input(plan, i, PyTuple_GET_ITEM(tensors, i), NULL, &s) != 0) {
            state_free(&s);
            if (!PyErr_Occurred())
                PyErr_SetString(input_mismatch_error, "the inputs do not match the plan");
            return NULL;
        }
    }
    if (allocate_outputs(plan, NULL, &s) != 0) {
        state_free(&s);
        return NULL;
    }
    double *seconds = PyMem_Calloc((size_t)repeats, sizeof(double));
    tb_status status = TB_OK;
    if (!seconds) {
        state_free(&s);
        return PyErr_NoMemory();
    }
    Py_BEGIN_ALLOW_THREADS
    for (int r = 0; r < repeats && status == TB_OK; r++) {
        double t0 = monotonic_seconds();
        status = tb_plan_run(plan, s.inputs, s.outputs);
        seconds[r] = monotonic_seconds() - t0;
    }
    Py_END_ALLOW_THREADS
    state_free(&s);
    PyObject *result = status == TB_OK ? PyList_New(repeats) : tb_py_raise(status);
    for (int r = 0; result && r < repeats; r++)
        PyList_SET_ITEM(result, r, PyFloat_FromDouble(seconds[r]));
    PyMem_Free(seconds);
    return result;
}

static PyMethodDef plan_methods[] = {
    {"profile", plan_profile, METH_VARARGS, "profile(tensors, repeats) -> [(step kernel, min seconds over the runs)]"},
    {"run_timing", plan_run_timing, METH_VARARGS,
     "run_timing(tensors, repeats) -> seconds of each bare run (inputs bound, outputs allocated once)"},
    {"input_info", plan_input_info, METH_O, "input_info(i) -> (dtype, shape, strides) the plan expects"},
    {"output_info", plan_output_info, METH_O, "output_info(j) -> (dtype, shape, strides) of output j"},
    {"output_alias", plan_output_alias, METH_O,
     "output_alias(j) -> the earlier output that output j returns again (same value), or None"},
    {"describe", plan_describe, METH_NOARGS, "describe() -> one line per step: kernel and the graph nodes it covers"},
    {"freeze_inputs", plan_freeze_inputs, METH_O,
     "freeze_inputs(indices): these inputs are weights whose packed copies may be kept between calls (torch "
     "tensors: repacked when their _version or data pointer changes; writes through .data are not seen)"},
    {NULL, NULL, 0, NULL},
};

static PyObject *plan_get_name(PyObject *object, void *closure) { return PyUnicode_FromString("torchburn_plan"); }

static PyGetSetDef plan_getset[] = {
    {"__name__", plan_get_name, NULL, "a name for code generators (FX names call targets after it)", NULL},
    {"frozen_inputs", plan_get_frozen_inputs, NULL, "the inputs freeze_inputs() declared (list of indices)", NULL},
    {"key", plan_get_key, NULL, "the structural key (BLAKE3, hex)", NULL},
    {"fallback", plan_get_fallback, plan_set_fallback, "callable used when inputs do not match or a run fails", NULL},
    {"last_error", plan_get_last_error, NULL, "why the last run failed (None if none did)", NULL},
    {"num_inputs", plan_get_int, NULL, NULL, (void *)0},
    {"num_outputs", plan_get_int, NULL, NULL, (void *)1},
    {"arena_bytes", plan_get_int, NULL, "bytes of the planned arena", (void *)2},
    {"num_steps", plan_get_int, NULL, NULL, (void *)3},
    {"calls", plan_get_int, NULL, "calls through this object", (void *)4},
    {"fallbacks", plan_get_int, NULL, "calls that went to the fallback", (void *)5},
    {"engine", plan_get_engine, NULL,
     "the engine that runs the calls, e.g. 'native_cpu', or 'native_cpu (...)' naming the node the GPU does not take",
     NULL},
    {"run_seconds", plan_get_run_seconds, NULL,
     "seconds spent running the plan's steps over all calls (a call's wall time minus its share is overhead)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef plan_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(py_plan, vectorcall), READONLY, NULL},
    {"__weaklistoffset__", T_PYSSIZET, offsetof(py_plan, weakrefs), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot plan_slots[] = {
    {Py_tp_dealloc, plan_dealloc},
    {Py_tp_traverse, plan_traverse},
    {Py_tp_clear, plan_clear},
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_methods, plan_methods},
    {Py_tp_getset, plan_getset},
    {Py_tp_members, plan_members},
    {Py_tp_doc, "A compiled torchburn graph: plan(*tensors) -> tuple of tensors (see torchburn.backend)."},
    {0, NULL},
};

static PyType_Spec plan_spec = {
    .name = "torchburn._C.Plan",
    .basicsize = sizeof(py_plan),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_BASETYPE * 0,
    .slots = plan_slots,
};

int tb_pyext_register_plan(PyObject *module) {
    plan_type = (PyTypeObject *)PyType_FromSpec(&plan_spec);
    if (!plan_type)
        return -1;
    input_mismatch_error = PyErr_NewExceptionWithDoc(
        "torchburn._C.PlanInputMismatch", "The tensors passed to a Plan do not have the dtype/shape/strides it was built for.",
        PyExc_ValueError, NULL);
    if (!input_mismatch_error)
        return -1;
    if (PyModule_AddObjectRef(module, "Plan", (PyObject *)plan_type) != 0 ||
        PyModule_AddObjectRef(module, "PlanInputMismatch", input_mismatch_error) != 0)
        return -1;
    return 0;
}
