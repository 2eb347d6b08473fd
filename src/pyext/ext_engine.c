/* Python bindings of the engine layer (include/torchburn/engine.h), used by torchburn/gpu.py:
 * engine names, the active engine, device facts, resetting the vulkan probe, and engine_run, which
 * runs a list of ops on one engine over float32 arrays (copied into engine buffers, results copied
 * back into the arrays that ops write), so every engine can be compared with `reference`. */
#include <stdio.h>
#include <string.h>

#include "kernels/elementwise.h"
#include "pyext.h"
#include "torchburn/engine.h"

static const tb_engine *engine_arg(PyObject *name_object) {
    const char *name = PyUnicode_AsUTF8(name_object);
    if (!name)
        return NULL;
    const tb_engine *engine = tb_engine_find(name);
    if (!engine)
        PyErr_Format(PyExc_ValueError, "unknown engine '%s' (native_cpu, reference, vulkan)", name);
    return engine;
}

static PyObject *py_engine_names(PyObject *module, PyObject *unused) {
    PyObject *list = PyList_New(0);
    for (int i = 0; list && i < tb_engine_count(); i++) {
        PyObject *name = PyUnicode_FromString(tb_engine_at(i)->name);
        if (!name || PyList_Append(list, name) != 0) {
            Py_XDECREF(name);
            Py_DECREF(list);
            return NULL;
        }
        Py_DECREF(name);
    }
    return list;
}

static PyObject *py_engine_active(PyObject *module, PyObject *unused) {
    const tb_engine *engine;
    tb_status status;
    Py_BEGIN_ALLOW_THREADS
    status = tb_engine_active(&engine);
    Py_END_ALLOW_THREADS
    if (status != TB_OK)
        return tb_py_raise(status);
    return PyUnicode_FromString(engine->name);
}

static PyObject *py_engine_select_from_env(PyObject *module, PyObject *unused) {
    tb_status status = tb_engine_select_from_env();
    if (status != TB_OK)
        return tb_py_raise(status);
    Py_RETURN_NONE;
}

static PyObject *py_engine_vulkan_reset(PyObject *module, PyObject *unused) {
    tb_status status = tb_engine_vulkan_reset();
    if (status != TB_OK)
        return tb_py_raise(status);
    Py_RETURN_NONE;
}

static PyObject *py_engine_info(PyObject *module, PyObject *name_object) {
    const tb_engine *engine = engine_arg(name_object);
    if (!engine)
        return NULL;
    tb_engine_device_info info;
    Py_BEGIN_ALLOW_THREADS
    engine->device_info(&info);
    Py_END_ALLOW_THREADS
    char api[32] = ""; /* Vulkan's packing: variant:3 major:7 minor:10 patch:12 */
    if (info.api_version)
        snprintf(api, sizeof api, "%u.%u.%u", (info.api_version >> 22) & 0x7Fu, (info.api_version >> 12) & 0x3FFu,
                 info.api_version & 0xFFFu);
    return Py_BuildValue(
        "{s:s,s:O,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:I,s:I,s:K,s:K,s:{s:K,s:(III),s:I,s:I,s:I},s:i,s:i,s:K,s:K,s:O,s:K,s:O,s:K,s:K,s:K,s:O,s:K}",
        "engine", engine->name, "available", info.available ? Py_True : Py_False, "reason", info.reason, "backend",
        info.backend, "adapter_name", info.adapter_name, "device_type", info.device_type, "driver_name",
        info.driver_name, "driver_info", info.driver_info, "api_version", api,
        "vendor_id", info.vendor_id, "device_id", info.device_id, "vram_bytes", (unsigned long long)info.vram_bytes,
        "driver_version", (unsigned long long)info.driver_version, "limits", "max_storage_buffer_range",
        (unsigned long long)info.max_storage_buffer_range, "max_workgroup_count", info.max_workgroup_count[0],
        info.max_workgroup_count[1], info.max_workgroup_count[2], "max_workgroup_invocations",
        info.max_workgroup_invocations, "max_shared_memory_bytes", info.max_shared_memory_bytes, "subgroup_size",
        info.subgroup_size, "device_index", info.device_index, "device_count", info.device_count, "submits",
        (unsigned long long)info.submits, "dispatches", (unsigned long long)info.dispatches, "staging",
        info.staging ? Py_True : Py_False, "transfers", (unsigned long long)info.transfers, "subgroup_reductions",
        info.subgroup_reductions ? Py_True : Py_False, "upload_bytes", (unsigned long long)info.upload_bytes,
        "download_bytes", (unsigned long long)info.download_bytes, "batched_copies",
        (unsigned long long)info.batched_copies, "storage_16bit", info.storage_16bit ? Py_True : Py_False,
        "specialized_pipelines", (unsigned long long)info.specialized_pipelines);
}

/* Reads optional dict entries into an op. Returns 0 or -1 with an exception. */
static int get_int(PyObject *dict, const char *key, int64_t *out) {
    PyObject *value = PyDict_GetItemString(dict, key);
    if (!value)
        return 0;
    long long v = PyLong_AsLongLong(value);
    if (v == -1 && PyErr_Occurred())
        return -1;
    *out = v;
    return 0;
}

static int get_float(PyObject *dict, const char *key, float *out) {
    PyObject *value = PyDict_GetItemString(dict, key);
    if (!value)
        return 0;
    double v = PyFloat_AsDouble(value);
    if (v == -1.0 && PyErr_Occurred())
        return -1;
    *out = (float)v;
    return 0;
}

static int name_index(const char *name, const char *const *names, int count) {
    for (int i = 0; i < count; i++)
        if (strcmp(name, names[i]) == 0)
            return i;
    return -1;
}

/* A fused op's "inputs": [(len, inner), ...] and "steps": [{"kind": "unary" | "binary" | "scalar" |
 * "scalar_first", "op": name, "lhs": register, "rhs": register, "alpha", "lo", "hi", "scalar"}, ...]. */
static int parse_fused(PyObject *dict, tb_engine_fused *f) {
    PyObject *inputs = PyDict_GetItemString(dict, "inputs"), *steps = PyDict_GetItemString(dict, "steps");
    if (!inputs || !steps || !PyList_Check(inputs) || !PyList_Check(steps) ||
        PyList_GET_SIZE(inputs) > TB_ENGINE_FUSED_INPUTS || PyList_GET_SIZE(steps) > TB_ENGINE_FUSED_STEPS) {
        PyErr_Format(PyExc_ValueError, "engine_run: a fused op needs 'inputs' (a list of at most %d (len, inner) pairs) "
                     "and 'steps' (a list of at most %d dicts)", TB_ENGINE_FUSED_INPUTS, TB_ENGINE_FUSED_STEPS);
        return -1;
    }
    f->ninputs = (int)PyList_GET_SIZE(inputs);
    for (int k = 0; k < f->ninputs; k++) {
        long long len, inner;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(inputs, k), "LL", &len, &inner))
            return -1;
        f->len[k] = len;
        f->inner[k] = inner;
    }
    static const char *const kinds[] = {"unary", "binary", "scalar", "scalar_first"};
    f->nsteps = (int)PyList_GET_SIZE(steps);
    for (int s = 0; s < f->nsteps; s++) {
        PyObject *step = PyList_GET_ITEM(steps, s), *kind = PyDict_Check(step) ? PyDict_GetItemString(step, "kind") : NULL;
        PyObject *name = kind ? PyDict_GetItemString(step, "op") : NULL;
        const char *kind_name = kind ? PyUnicode_AsUTF8(kind) : NULL, *op_name = name ? PyUnicode_AsUTF8(name) : NULL;
        tb_engine_fused_step *st = &f->steps[s];
        st->kind = kind_name ? name_index(kind_name, kinds, 4) : -1;
        if (st->kind >= 0 && op_name)
            st->code = st->kind == TB_ENGINE_STEP_UNARY ? name_index(op_name, tb_unary_op_names, TB_UNARY_COUNT)
                                                        : name_index(op_name, tb_binary_op_names, TB_BINARY_COUNT);
        if (st->kind < 0 || !op_name || st->code < 0) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "engine_run: fused step %d needs a 'kind' (unary, binary, scalar, "
                         "scalar_first) and a known 'op'", s);
            return -1;
        }
        int64_t lhs = 0, rhs = 0;
        if (get_int(step, "lhs", &lhs) || get_int(step, "rhs", &rhs) || get_float(step, "alpha", &st->alpha) ||
            get_float(step, "lo", &st->lo) || get_float(step, "hi", &st->hi) || get_float(step, "scalar", &st->scalar))
            return -1;
        st->lhs = (int)lhs;
        st->rhs = (int)rhs;
    }
    return 0;
}

/* A list of at most `max` ints from dict[key] into out; returns the count, or -1 with an exception. */
static int get_int_list(PyObject *dict, const char *key, int64_t *out, int max) {
    PyObject *value = PyDict_GetItemString(dict, key);
    if (!value)
        return 0;
    if (!PyList_Check(value) && !PyTuple_Check(value)) {
        PyErr_Format(PyExc_TypeError, "engine_run: '%s' must be a list of ints", key);
        return -1;
    }
    PyObject *items = PySequence_Fast(value, key);
    if (!items)
        return -1;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(items);
    if (count > max) {
        Py_DECREF(items);
        PyErr_Format(PyExc_ValueError, "engine_run: '%s' takes at most %d entries", key, max);
        return -1;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        long long v = PyLong_AsLongLong(PySequence_Fast_ITEMS(items)[i]);
        if (v == -1 && PyErr_Occurred()) {
            Py_DECREF(items);
            return -1;
        }
        out[i] = v;
    }
    Py_DECREF(items);
    return (int)count;
}

/* op dict -> tb_engine_op; operand entries are indices into `buffers` (None or absent: no operand) */
static int parse_op(PyObject *dict, tb_engine_buffer **buffers, Py_ssize_t nbuffers, bool *written, tb_engine_op *op,
                    tb_engine_fused *chain) {
    if (!PyDict_Check(dict)) {
        PyErr_SetString(PyExc_TypeError, "engine_run: each op must be a dict");
        return -1;
    }
    memset(op, 0, sizeof *op);
    PyObject *kind = PyDict_GetItemString(dict, "kind");
    const char *kind_name = kind ? PyUnicode_AsUTF8(kind) : NULL;
    if (!kind_name) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "engine_run: op needs a 'kind'");
        return -1;
    }
    int k = 0;
    while (k < TB_ENGINE_OP_COUNT && strcmp(kind_name, tb_engine_op_kind_name((tb_engine_op_kind)k)) != 0)
        k++;
    if (k == TB_ENGINE_OP_COUNT) {
        PyErr_Format(PyExc_ValueError, "engine_run: unknown op kind '%s'", kind_name);
        return -1;
    }
    op->kind = (tb_engine_op_kind)k;
    PyObject *code = PyDict_GetItemString(dict, "op");
    if (op->kind == TB_ENGINE_OP_UNARY || op->kind == TB_ENGINE_OP_BINARY) {
        const char *code_name = code ? PyUnicode_AsUTF8(code) : NULL;
        if (!code_name) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "engine_run: unary/binary op needs an 'op' name");
            return -1;
        }
        op->code = op->kind == TB_ENGINE_OP_UNARY ? name_index(code_name, tb_unary_op_names, TB_UNARY_COUNT)
                                                  : name_index(code_name, tb_binary_op_names, TB_BINARY_COUNT);
        if (op->code < 0) {
            PyErr_Format(PyExc_ValueError, "engine_run: unknown %s op '%s'", kind_name, code_name);
            return -1;
        }
    }
    if (op->kind == TB_ENGINE_OP_REDUCE) { /* "op": sum, max, min, logsumexp, mean */
        const char *code_name = code ? PyUnicode_AsUTF8(code) : NULL;
        static const char *const reductions[] = {"sum", "max", "min", "logsumexp", "mean"};
        op->code = code_name ? name_index(code_name, reductions, 5) : -1;
        if (op->code < 0) {
            PyErr_Clear();
            PyErr_SetString(PyExc_ValueError, "engine_run: a reduce op needs 'op': sum, max, min, logsumexp or mean");
            return -1;
        }
    }
    if (op->kind == TB_ENGINE_OP_FUSED) { /* the chain lives in `chain` (one per op) until the run ends */
        if (parse_fused(dict, chain) != 0)
            return -1;
        op->fused = chain;
    }
    if (op->kind == TB_ENGINE_OP_STRIDED_COPY) { /* "shape", "strides" (lists), "a_offset" */
        int dims = get_int_list(dict, "shape", op->strided.shape, TB_ENGINE_STRIDED_DIMS);
        if (dims < 0 || get_int_list(dict, "strides", op->strided.strides, TB_ENGINE_STRIDED_DIMS) < 0)
            return -1;
        op->strided.ndim = dims;
        if (get_int(dict, "row", &op->strided.row))
            return -1;
    }
    if (op->kind == TB_ENGINE_OP_ATTENTION) {
        tb_engine_attention *at = &op->attention;
        int64_t causal = 0;
        if (get_int(dict, "batch", &at->batch) || get_int(dict, "q_heads", &at->q_heads) ||
            get_int(dict, "kv_heads", &at->kv_heads) || get_int(dict, "q_len", &at->q_len) ||
            get_int(dict, "kv_len", &at->kv_len) || get_int(dict, "head_dim", &at->head_dim) ||
            get_int(dict, "value_dim", &at->value_dim) || get_int(dict, "causal", &causal) ||
            get_float(dict, "scale", &at->scale) || get_int_list(dict, "mask_strides", at->mask_strides, 4) < 0)
            return -1;
        at->causal = causal != 0;
    }
    int64_t trans_b = 0, log = 0, b_format = 0, format = 0, convert_code = 0;
    if (op->kind == TB_ENGINE_OP_CONVERT16) { /* "code": 0 widen, 1 narrow, 2 round; "format": 1 bf16, 2 f16 */
        if (get_int(dict, "code", &convert_code) || get_int(dict, "format", &format))
            return -1;
        op->code = (int)convert_code;
        op->format = (int)format;
    }
    if (get_int(dict, "n", &op->n) || get_int(dict, "b_len", &op->b_len) || get_int(dict, "m", &op->m) ||
        get_int(dict, "k", &op->k) || get_int(dict, "rows", &op->rows) || get_int(dict, "len", &op->len) ||
        get_int(dict, "trans_b", &trans_b) || get_int(dict, "log", &log) || get_float(dict, "eps", &op->eps) ||
        get_float(dict, "alpha", &op->alpha) || get_float(dict, "lo", &op->lo) || get_float(dict, "hi", &op->hi) ||
        get_int(dict, "y_stride", &op->y_stride) || get_int(dict, "y_col0", &op->y_col0) ||
        get_int(dict, "b_format", &b_format) || get_int(dict, "a_offset", &op->a_offset) ||
        get_int(dict, "inner", &op->inner) || get_int(dict, "batch", &op->batch) ||
        get_int(dict, "a_batch", &op->a_batch) || get_int(dict, "b_batch", &op->b_batch))
        return -1;
    op->b_format = (int)b_format;
    op->trans_b = trans_b != 0;
    op->log = log != 0;
    static const char *const roles[5] = {"a", "b", "c", "y", "d"};
    tb_engine_buffer **slots[5] = {&op->a, &op->b, &op->c, &op->y, &op->d};
    for (int r = 0; r < 5; r++) {
        PyObject *value = PyDict_GetItemString(dict, roles[r]);
        if (!value || value == Py_None)
            continue;
        Py_ssize_t index = PyLong_AsSsize_t(value);
        if (index == -1 && PyErr_Occurred())
            return -1;
        if (index < 0 || index >= nbuffers) {
            PyErr_Format(PyExc_IndexError, "engine_run: operand %s=%zd is not an array index (%zd arrays)", roles[r],
                         index, nbuffers);
            return -1;
        }
        *slots[r] = buffers[index];
        if (r == 3)
            written[index] = true;
    }
    return 0;
}

static PyObject *py_engine_run(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyList_Check(args[1]) || !PyList_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "engine_run(engine, ops: list[dict], arrays: list)");
        return NULL;
    }
    const tb_engine *engine = engine_arg(args[0]);
    if (!engine)
        return NULL;
    Py_ssize_t nops = PyList_GET_SIZE(args[1]), narrays = PyList_GET_SIZE(args[2]);
    if (nops > 4096 || narrays > 4096) {
        PyErr_SetString(PyExc_ValueError, "engine_run: at most 4096 ops and 4096 arrays");
        return NULL;
    }
    tb_tensor *tensors = PyMem_Calloc((size_t)narrays + 1, sizeof *tensors);
    tb_engine_buffer **buffers = PyMem_Calloc((size_t)narrays + 1, sizeof *buffers);
    bool *written = PyMem_Calloc((size_t)narrays + 1, sizeof *written);
    tb_engine_op *ops = PyMem_Calloc((size_t)nops + 1, sizeof *ops);
    tb_engine_fused *chains = PyMem_Calloc((size_t)nops + 1, sizeof *chains);
    tb_engine_download *downloads = PyMem_Calloc((size_t)narrays + 1, sizeof *downloads);
    PyObject *result = NULL;
    Py_ssize_t imported = 0;
    if (!tensors || !buffers || !written || !ops || !chains || !downloads) {
        PyErr_NoMemory();
        goto done;
    }
    for (; imported < narrays; imported++) {
        tb_tensor *t = &tensors[imported];
        if (tb_py_import_tensor(PyList_GET_ITEM(args[2], imported), "arrays[i]", t) != 0)
            goto done;
        /* float16 / bfloat16 arrays are the 16-bit matmul weights (b_format 2 / 1) and convert16's words */
        if ((t->dtype != TB_F32 && t->dtype != TB_F16 && t->dtype != TB_BF16) ||
            (tb_tensor_numel(t) > 0 && !tb_tensor_is_contiguous(t))) {
            imported++;
            PyErr_Format(PyExc_TypeError, "engine_run: arrays[%zd] must be contiguous float32 (or a 16-bit weight)",
                         imported - 1);
            goto done;
        }
    }
    tb_status status = engine->init();
    for (Py_ssize_t i = 0; status == TB_OK && i < narrays; i++) {
        size_t bytes = (size_t)tb_tensor_numel(&tensors[i]) * tb_dtype_size(tensors[i].dtype);
        status = engine->buffer_alloc(bytes, &buffers[i]);
        if (status == TB_OK)
            status = engine->buffer_upload(buffers[i], 0, tb_tensor_data(&tensors[i]), bytes);
    }
    if (status != TB_OK) {
        tb_py_raise(status);
        goto done;
    }
    for (Py_ssize_t o = 0; o < nops; o++)
        if (parse_op(PyList_GET_ITEM(args[1], o), buffers, narrays, written, &ops[o], &chains[o]) != 0)
            goto done;
    for (Py_ssize_t i = 0; i < narrays; i++) {
        if (written[i] && tensors[i].storage->read_only) {
            PyErr_Format(PyExc_ValueError, "engine_run: arrays[%zd] is written but read-only", i);
            goto done;
        }
    }
    Py_BEGIN_ALLOW_THREADS
    int ndownloads = 0; /* the written arrays come back in the run's own submission */
    for (Py_ssize_t i = 0; i < narrays; i++)
        if (written[i])
            downloads[ndownloads++] = (tb_engine_download){
                .buffer = buffers[i], .dst = tb_tensor_data(&tensors[i]),
                .bytes = (size_t)tb_tensor_numel(&tensors[i]) * tb_dtype_size(tensors[i].dtype)};
    status = tb_engine_run_download(engine, ops, (int)nops, downloads, ndownloads);
    Py_END_ALLOW_THREADS
    if (status != TB_OK) {
        tb_py_raise(status);
        goto done;
    }
    result = Py_NewRef(Py_None);
done:
    for (Py_ssize_t i = 0; buffers && i < narrays; i++)
        engine->buffer_free(buffers[i]);
    for (Py_ssize_t i = 0; tensors && i < imported; i++)
        tb_tensor_release(&tensors[i]);
    PyMem_Free(tensors);
    PyMem_Free(buffers);
    PyMem_Free(written);
    PyMem_Free(downloads);
    PyMem_Free(ops);
    PyMem_Free(chains);
    return result;
}

static PyMethodDef engine_functions[] = {
    {"engine_names", py_engine_names, METH_NOARGS, "The engines of this build, in registry order."},
    {"engine_active", py_engine_active, METH_NOARGS,
     "The active engine's name (RuntimeError when TORCHBURN_DEVICE=gpu finds no GPU)."},
    {"engine_select_from_env", py_engine_select_from_env, METH_NOARGS,
     "Reads TORCHBURN_ENGINE / TORCHBURN_DEVICE again (tests)."},
    {"engine_vulkan_reset", py_engine_vulkan_reset, METH_NOARGS,
     "Forgets the vulkan device so the next use probes again with the current settings."},
    {"engine_info", py_engine_info, METH_O, "engine_info(name) -> dict of device facts and limits."},
    {"engine_run", (PyCFunction)(void (*)(void))py_engine_run, METH_FASTCALL,
     "engine_run(engine, ops, arrays): runs ops (dicts) on the engine over float32 arrays, writing results back."},
    {NULL},
};

int tb_pyext_register_engine(PyObject *module) { return PyModule_AddFunctions(module, engine_functions); }
