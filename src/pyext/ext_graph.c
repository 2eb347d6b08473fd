/* Python bindings of the graph layer: torchburn._C.Graph (a node-by-node builder whose compile()
 * goes through the structural plan cache and returns a Plan, see ext_graph_plan.c), the op tables
 * (names, arities, param fields), the cache controls and BLAKE3. */
#include <string.h>

#include "ext_graph.h"

typedef struct py_graph {
    PyObject_HEAD
    tb_graph *graph;
} py_graph;

static PyTypeObject *graph_type;

static int parse_shape(PyObject *object, int *ndim, int64_t *shape, const char *what) {
    PyObject *seq = PySequence_Fast(object, what);
    if (!seq)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > TB_MAX_DIMS) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "%s has %zd dims; at most %d", what, n, TB_MAX_DIMS);
        return -1;
    }
    for (Py_ssize_t d = 0; d < n; d++) {
        shape[d] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, d));
        if (shape[d] == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return -1;
        }
    }
    *ndim = (int)n;
    Py_DECREF(seq);
    return 0;
}

static int parse_dtype(PyObject *object, tb_dtype *out) {
    const char *name = PyUnicode_AsUTF8(object);
    if (!name)
        return -1;
    if (strncmp(name, "torch.", 6) == 0)
        name += 6;
    tb_status status = tb_dtype_from_name(name, out);
    if (status != TB_OK) {
        tb_py_raise(status);
        return -1;
    }
    return 0;
}

static int parse_op(PyObject *object, tb_graph_op *op) {
    const char *name = PyUnicode_AsUTF8(object);
    if (!name)
        return -1;
    tb_status status = tb_graph_op_from_name(name, op);
    if (status != TB_OK) {
        tb_py_raise(status);
        return -1;
    }
    return 0;
}

/* Fills params from a dict {field: number or sequence of numbers}; dtype fields accept names. */
static int parse_params(tb_graph_op op, PyObject *dict, tb_graph_params *params) {
    memset(params, 0, sizeof *params);
    if (!dict || dict == Py_None)
        return 0;
    if (!PyDict_Check(dict)) {
        PyErr_SetString(PyExc_TypeError, "params must be a dict");
        return -1;
    }
    int count;
    const tb_param_field *fields = tb_graph_op_fields(op, &count);
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(dict, &pos, &key, &value)) {
        const char *name = PyUnicode_AsUTF8(key);
        if (!name)
            return -1;
        const tb_param_field *field = NULL;
        for (int f = 0; f < count; f++)
            if (strcmp(fields[f].name, name) == 0)
                field = &fields[f];
        if (!field) {
            PyErr_Format(PyExc_ValueError, "op '%s' has no param '%s'", tb_graph_op_name(op), name);
            return -1;
        }
        char *at = (char *)params + field->offset;
        PyObject *items = field->count > 1 ? PySequence_Fast(value, "array param must be a sequence") : NULL;
        if (field->count > 1 && !items)
            return -1;
        Py_ssize_t n = items ? PySequence_Fast_GET_SIZE(items) : 1;
        if (n > field->count) {
            Py_XDECREF(items);
            PyErr_Format(PyExc_ValueError, "param '%s' takes at most %d values", name, field->count);
            return -1;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *item = items ? PySequence_Fast_GET_ITEM(items, i) : value;
            if (field->kind == TB_PARAM_INT) {
                int64_t v;
                if (PyUnicode_Check(item)) { /* a dtype name */
                    tb_dtype dtype;
                    if (parse_dtype(item, &dtype) != 0) {
                        Py_XDECREF(items);
                        return -1;
                    }
                    v = dtype;
                } else {
                    v = PyLong_AsLongLong(item);
                }
                memcpy(at + (size_t)i * sizeof v, &v, sizeof v);
            } else {
                double v = PyFloat_AsDouble(item);
                memcpy(at + (size_t)i * sizeof v, &v, sizeof v);
            }
            if (PyErr_Occurred()) {
                Py_XDECREF(items);
                return -1;
            }
        }
        Py_XDECREF(items);
    }
    return 0;
}

static PyObject *graph_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    py_graph *self = (py_graph *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    tb_status status = tb_graph_new(&self->graph);
    if (status != TB_OK) {
        Py_DECREF(self);
        return tb_py_raise(status);
    }
    return (PyObject *)self;
}

static void graph_dealloc(PyObject *object) {
    PyTypeObject *type = Py_TYPE(object);
    tb_graph_free(((py_graph *)object)->graph);
    type->tp_free(object);
    Py_DECREF(type);
}

static PyObject *graph_input(PyObject *object, PyObject *args) {
    PyObject *dtype_obj, *shape_obj, *strides_obj = Py_None;
    if (!PyArg_ParseTuple(args, "OO|O", &dtype_obj, &shape_obj, &strides_obj))
        return NULL;
    tb_dtype dtype;
    int ndim, stride_ndim;
    int64_t shape[TB_MAX_DIMS], strides[TB_MAX_DIMS];
    if (parse_dtype(dtype_obj, &dtype) != 0 || parse_shape(shape_obj, &ndim, shape, "shape") != 0)
        return NULL;
    if (strides_obj != Py_None) {
        if (parse_shape(strides_obj, &stride_ndim, strides, "strides") != 0)
            return NULL;
        if (stride_ndim != ndim) {
            PyErr_SetString(PyExc_ValueError, "strides and shape differ in length");
            return NULL;
        }
    }
    int value;
    tb_status status = tb_graph_add_input(((py_graph *)object)->graph, dtype, ndim, shape,
                                          strides_obj != Py_None ? strides : NULL, &value);
    if (status != TB_OK)
        return tb_py_raise(status);
    return PyLong_FromLong(value);
}

static PyObject *graph_node(PyObject *object, PyObject *args) {
    PyObject *op_obj, *inputs_obj, *params_obj = Py_None, *label_obj = Py_None;
    if (!PyArg_ParseTuple(args, "OO|OO", &op_obj, &inputs_obj, &params_obj, &label_obj))
        return NULL;
    tb_graph_op op;
    tb_graph_params params;
    if (parse_op(op_obj, &op) != 0 || parse_params(op, params_obj, &params) != 0)
        return NULL;
    PyObject *seq = PySequence_Fast(inputs_obj, "inputs must be a sequence of value ids");
    if (!seq)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > TB_GRAPH_MAX_INPUTS) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "at most %d inputs", TB_GRAPH_MAX_INPUTS);
        return NULL;
    }
    int inputs[TB_GRAPH_MAX_INPUTS];
    for (Py_ssize_t i = 0; i < n; i++) {
        inputs[i] = (int)PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
        if (PyErr_Occurred()) {
            Py_DECREF(seq);
            return NULL;
        }
    }
    Py_DECREF(seq);
    tb_graph *graph = ((py_graph *)object)->graph;
    int first, count;
    tb_status status = tb_graph_add_node(graph, op, &params, (int)n, inputs, &first, &count);
    if (status != TB_OK)
        return tb_py_raise(status);
    if (label_obj != Py_None) {
        const char *label = PyUnicode_AsUTF8(label_obj);
        if (!label)
            return NULL;
        status = tb_graph_set_label(graph, first, label);
        if (status != TB_OK)
            return tb_py_raise(status);
    }
    return PyLong_FromLong(first);
}

static PyObject *graph_output(PyObject *object, PyObject *arg) {
    long value = PyLong_AsLong(arg);
    if (value == -1 && PyErr_Occurred())
        return NULL;
    tb_status status = tb_graph_add_output(((py_graph *)object)->graph, (int)value);
    if (status != TB_OK)
        return tb_py_raise(status);
    Py_RETURN_NONE;
}

static PyObject *graph_value_info(PyObject *object, PyObject *arg) {
    long value = PyLong_AsLong(arg);
    if (value == -1 && PyErr_Occurred())
        return NULL;
    tb_value_info info;
    tb_status status = tb_graph_value_info(((py_graph *)object)->graph, (int)value, &info);
    if (status != TB_OK)
        return tb_py_raise(status);
    PyObject *shape = PyTuple_New(info.ndim), *strides = PyTuple_New(info.ndim);
    if (!shape || !strides) {
        Py_XDECREF(shape);
        Py_XDECREF(strides);
        return NULL;
    }
    for (int d = 0; d < info.ndim; d++) {
        PyTuple_SET_ITEM(shape, d, PyLong_FromLongLong(info.shape[d]));
        PyTuple_SET_ITEM(strides, d, PyLong_FromLongLong(info.strides[d]));
    }
    return Py_BuildValue("(sNN)", tb_dtype_name(info.dtype), shape, strides);
}

static PyObject *graph_serialize(PyObject *object, PyObject *unused) {
    uint8_t *bytes;
    size_t size;
    tb_status status = tb_graph_serialize(((py_graph *)object)->graph, &bytes, &size);
    if (status != TB_OK)
        return tb_py_raise(status);
    PyObject *result = PyBytes_FromStringAndSize((const char *)bytes, (Py_ssize_t)size);
    free(bytes);
    return result;
}

static PyObject *graph_hash(PyObject *object, PyObject *unused) {
    uint8_t hash[32];
    tb_status status = tb_graph_hash(((py_graph *)object)->graph, hash);
    if (status != TB_OK)
        return tb_py_raise(status);
    return PyBytes_FromStringAndSize((const char *)hash, 32);
}

static PyObject *graph_compile(PyObject *object, PyObject *unused) {
    tb_plan *plan;
    bool hit = false;
    tb_status status;
    tb_graph *graph = ((py_graph *)object)->graph;
    Py_BEGIN_ALLOW_THREADS
    status = tb_graph_compile(graph, &plan, &hit);
    Py_END_ALLOW_THREADS
    if (status != TB_OK)
        return tb_py_raise(status);
    PyObject *wrapped = tb_py_plan_wrap(plan);
    if (!wrapped)
        return NULL;
    if (tb_py_plan_attach_engine(wrapped, graph) != 0) {
        Py_DECREF(wrapped);
        return NULL;
    }
    return Py_BuildValue("(NO)", wrapped, hit ? Py_True : Py_False);
}

/* (taken, note): whether the active engine would run this graph whole (the compile backend's
 * partitioner asks it node by node when a GPU engine is active). CPU engines take every graph. */
static PyObject *graph_engine_support(PyObject *object, PyObject *unused) {
    const tb_graph *graph = ((py_graph *)object)->graph;
    const tb_engine *engine;
    tb_engine_program *program = NULL;
    tb_status status;
    Py_BEGIN_ALLOW_THREADS
    status = tb_engine_active(&engine);
    if (status == TB_OK && engine == &tb_engine_vulkan)
        status = tb_engine_program_build(engine, graph, &program);
    Py_END_ALLOW_THREADS
    tb_engine_program_free(program);
    if (status == TB_OK)
        return Py_BuildValue("(Os)", Py_True, engine->name);
    PyObject *result = Py_BuildValue("(Os)", Py_False, tb_error_message());
    tb_error_clear();
    return result;
}

static PyObject *graph_num_values(PyObject *object, void *closure) {
    return PyLong_FromLong(tb_graph_num_values(((py_graph *)object)->graph));
}

static PyMethodDef graph_methods[] = {
    {"input", graph_input, METH_VARARGS, "input(dtype, shape, strides=None) -> value id of a new graph input"},
    {"node", graph_node, METH_VARARGS,
     "node(op, inputs, params=None, label=None) -> id of the node's first output (outputs are consecutive)"},
    {"output", graph_output, METH_O, "output(value): appends a graph output"},
    {"value_info", graph_value_info, METH_O, "value_info(value) -> (dtype, shape, strides) inferred for a value"},
    {"serialize", graph_serialize, METH_NOARGS, "serialize() -> the canonical bytes the structural key hashes"},
    {"hash", graph_hash, METH_NOARGS, "hash() -> the 32-byte BLAKE3 structural key"},
    {"compile", graph_compile, METH_NOARGS, "compile() -> (Plan, cache_hit) through the plan caches"},
    {"engine_support", graph_engine_support, METH_NOARGS,
     "engine_support() -> (taken, note): whether the active engine runs this graph whole, else why not"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef graph_getset[] = {
    {"num_values", graph_num_values, NULL, "number of values defined so far", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot graph_slots[] = {
    {Py_tp_new, graph_new},
    {Py_tp_dealloc, graph_dealloc},
    {Py_tp_methods, graph_methods},
    {Py_tp_getset, graph_getset},
    {Py_tp_doc, "A torchburn graph under construction (see torchburn.backend)."},
    {0, NULL},
};

static PyType_Spec graph_spec = {
    .name = "torchburn._C.Graph",
    .basicsize = sizeof(py_graph),
    .flags = Py_TPFLAGS_DEFAULT,
    .slots = graph_slots,
};

/* ---- module functions ---- */

static PyObject *names_list(const char *const *names) {
    PyObject *list = PyList_New(0);
    for (int i = 0; list && names[i]; i++) {
        PyObject *name = PyUnicode_FromString(names[i]);
        if (!name || PyList_Append(list, name) != 0) {
            Py_XDECREF(name);
            Py_DECREF(list);
            return NULL;
        }
        Py_DECREF(name);
    }
    return list;
}

static PyObject *py_graph_op_table(PyObject *module, PyObject *unused) {
    PyObject *ops = PyDict_New();
    if (!ops)
        return NULL;
    for (int op = 0; op < TB_OP_COUNT; op++) {
        int min_in, max_in, outputs, count;
        tb_graph_op_arity((tb_graph_op)op, &min_in, &max_in, &outputs);
        const tb_param_field *fields = tb_graph_op_fields((tb_graph_op)op, &count);
        PyObject *field_list = PyList_New(count);
        for (int f = 0; field_list && f < count; f++)
            PyList_SET_ITEM(field_list, f, Py_BuildValue("(ssi)", fields[f].name,
                                                         fields[f].kind == TB_PARAM_INT ? "int" : "float", fields[f].count));
        PyObject *entry = field_list ? Py_BuildValue("{s:i,s:i,s:i,s:N}", "min_inputs", min_in, "max_inputs", max_in,
                                                     "outputs", outputs, "params", field_list)
                                     : NULL;
        if (!entry || PyDict_SetItemString(ops, tb_graph_op_name((tb_graph_op)op), entry) != 0) {
            Py_XDECREF(entry);
            Py_DECREF(ops);
            return NULL;
        }
        Py_DECREF(entry);
    }
    return Py_BuildValue("{s:N,s:N,s:N,s:N,s:N}", "ops", ops, "unary", names_list(tb_graph_unary_names), "binary",
                         names_list(tb_graph_binary_names), "compare", names_list(tb_graph_compare_names), "reduce",
                         names_list(tb_graph_reduce_names));
}

static PyObject *stats_dict(const tb_cache_stats *s) {
    return Py_BuildValue("{s:n,s:n,s:K,s:K,s:K}", "size", (Py_ssize_t)s->size, "capacity", (Py_ssize_t)s->capacity,
                         "hits", (unsigned long long)s->hits, "misses", (unsigned long long)s->misses, "evictions",
                         (unsigned long long)s->evictions);
}

static PyObject *py_plan_cache_stats(PyObject *module, PyObject *unused) {
    tb_cache_stats prepared, graphs;
    tb_plan_cache_stats(&prepared, &graphs);
    return Py_BuildValue("{s:N,s:N}", "prepared", stats_dict(&prepared), "graphs", stats_dict(&graphs));
}

static PyObject *py_plan_cache_clear(PyObject *module, PyObject *unused) {
    tb_plan_cache_clear();
    Py_RETURN_NONE;
}

static PyObject *py_plan_cache_set_capacity(PyObject *module, PyObject *args) {
    Py_ssize_t graphs, prepared;
    if (!PyArg_ParseTuple(args, "nn", &graphs, &prepared))
        return NULL;
    if (graphs < 0 || prepared < 0) {
        PyErr_SetString(PyExc_ValueError, "capacities must be >= 1 (0 keeps the current one)");
        return NULL;
    }
    tb_status status = tb_plan_cache_set_capacity((size_t)graphs, (size_t)prepared);
    if (status != TB_OK)
        return tb_py_raise(status);
    Py_RETURN_NONE;
}

static PyObject *py_blake3(PyObject *module, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"data", "key", "derive_key_context", "length", NULL};
    Py_buffer data;
    Py_buffer key = {0};
    const char *context = NULL;
    Py_ssize_t length = 32;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*|y*zn", keywords, &data, &key, &context, &length))
        return NULL;
    PyObject *result = NULL;
    if (length < 0 || (key.buf && key.len != 32) || (key.buf && context)) {
        PyErr_SetString(PyExc_ValueError, "length must be >= 0; key must be 32 bytes; key and context exclude each other");
    } else {
        tb_blake3 hasher;
        if (key.buf)
            tb_blake3_init_keyed(&hasher, key.buf);
        else if (context)
            tb_blake3_init_derive_key(&hasher, context);
        else
            tb_blake3_init(&hasher);
        Py_BEGIN_ALLOW_THREADS
        tb_blake3_update(&hasher, data.buf, (size_t)data.len);
        Py_END_ALLOW_THREADS
        result = PyBytes_FromStringAndSize(NULL, length);
        if (result)
            tb_blake3_finalize(&hasher, (uint8_t *)PyBytes_AS_STRING(result), (size_t)length);
    }
    PyBuffer_Release(&data);
    if (key.buf)
        PyBuffer_Release(&key);
    return result;
}

/* copy_into(dst, src): dst <- src (same shape, any strides) by torchburn's own copy, so that the
 * backend's layout fixes between plans do not wake PyTorch's OpenMP team (whose spinning threads
 * would then compete with our pool for the cores during the next plan). */
static PyObject *py_copy_into(PyObject *m, PyObject *args) {
    PyObject *dst_object, *src_object;
    if (!PyArg_ParseTuple(args, "OO", &dst_object, &src_object))
        return NULL;
    tb_tensor dst, src;
    if (tb_py_import_tensor(dst_object, "dst", &dst) != 0)
        return NULL;
    if (tb_py_import_tensor(src_object, "src", &src) != 0) {
        tb_tensor_release(&dst);
        return NULL;
    }
    tb_status status = TB_OK;
    if (dst.ndim != src.ndim || memcmp(dst.shape, src.shape, sizeof(int64_t) * (size_t)dst.ndim) != 0)
        status = tb_error_set(TB_ERR_SHAPE, "copy_into: dst and src shapes differ");
    if (status == TB_OK) {
        Py_BEGIN_ALLOW_THREADS
        status = tb_tensor_copy(&dst, &src);
        Py_END_ALLOW_THREADS
    }
    tb_tensor_release(&dst);
    tb_tensor_release(&src);
    if (status != TB_OK)
        return tb_py_raise(status);
    Py_RETURN_NONE;
}

static PyMethodDef graph_functions[] = {
    {"copy_into", py_copy_into, METH_VARARGS, "copy_into(dst, src): dst <- src, same shape, any strides"},
    {"graph_op_table", py_graph_op_table, METH_NOARGS,
     "graph_op_table() -> {'ops': {name: {min_inputs, max_inputs, outputs, params}}, 'unary': [...], ...}"},
    {"plan_cache_stats", py_plan_cache_stats, METH_NOARGS,
     "plan_cache_stats() -> {'prepared': {size, capacity, hits, misses, evictions}, 'graphs': {...}}"},
    {"plan_cache_clear", py_plan_cache_clear, METH_NOARGS, "plan_cache_clear(): empties both plan caches"},
    {"plan_cache_set_capacity", py_plan_cache_set_capacity, METH_VARARGS,
     "plan_cache_set_capacity(graphs, prepared): new capacities (0 keeps one)"},
    {"blake3", (PyCFunction)(void (*)(void))py_blake3, METH_VARARGS | METH_KEYWORDS,
     "blake3(data, key=None, derive_key_context=None, length=32) -> bytes"},
    {NULL, NULL, 0, NULL},
};

int tb_pyext_register_graph(PyObject *module) {
    graph_type = (PyTypeObject *)PyType_FromSpec(&graph_spec);
    if (!graph_type)
        return -1;
    if (PyModule_AddObjectRef(module, "Graph", (PyObject *)graph_type) != 0)
        return -1;
    if (PyModule_AddFunctions(module, graph_functions) != 0)
        return -1;
    return tb_pyext_register_plan(module);
}
