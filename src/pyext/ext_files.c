/* Python bindings of the model-files layer: safetensors load/save (zero-copy tensors over the mapping),
 * checkpoint folders (a capsule around tb_checkpoint_t), HF configs as dicts, and the JSON reader.
 * Malformed files raise ValueError with the C message; a missing file raises FileNotFoundError. */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pyext.h"
#include "torchburn/hf_config.h"
#include "torchburn/json.h"
#include "torchburn/safetensors.h"

static const char checkpoint_capsule_name[] = "torchburn._C.checkpoint";

/* Raises for a failed call on `path`: FileNotFoundError when the path does not exist, else the mapping
 * of tb_py_raise (TB_ERR_FORMAT -> ValueError, TB_ERR_IO -> OSError, ...). */
static PyObject *raise_for_path(tb_status status, const char *path) {
    if (status == TB_ERR_IO && path && access(path, F_OK) != 0 && errno == ENOENT) {
        PyObject *args = Py_BuildValue("(isO&)", ENOENT, tb_error_message(), PyUnicode_DecodeFSDefault, path);
        if (args) {
            PyErr_SetObject(PyExc_FileNotFoundError, args);
            Py_DECREF(args);
        }
        return NULL;
    }
    return tb_py_raise(status);
}

static PyObject *shape_tuple(int ndim, const int64_t *shape) {
    PyObject *tuple = PyTuple_New(ndim);
    for (int d = 0; tuple && d < ndim; d++) {
        PyObject *item = PyLong_FromLongLong(shape[d]);
        if (!item) {
            Py_CLEAR(tuple);
            break;
        }
        PyTuple_SET_ITEM(tuple, d, item);
    }
    return tuple;
}

static PyObject *metadata_dict(const tb_safetensors_t *file) {
    PyObject *dict = PyDict_New();
    for (size_t i = 0; dict && i < tb_safetensors_metadata_count(file); i++) {
        const char *key, *value;
        if (tb_safetensors_metadata_at(file, i, &key, &value) != TB_OK) {
            Py_DECREF(dict);
            return tb_py_raise(TB_ERR_INTERNAL);
        }
        PyObject *v = PyUnicode_FromString(value);
        if (!v || PyDict_SetItemString(dict, key, v) != 0) {
            Py_XDECREF(v);
            Py_DECREF(dict);
            return NULL;
        }
        Py_DECREF(v);
    }
    return dict;
}

/* Opens the safetensors file named by the single path argument of `args` (format "O&:name"); NULL
 * with the exception set (naming the path) on failure. */
static tb_safetensors_t *open_file(PyObject *args, const char *format) {
    PyObject *path_bytes;
    if (!PyArg_ParseTuple(args, format, PyUnicode_FSConverter, &path_bytes))
        return NULL;
    const char *path = PyBytes_AS_STRING(path_bytes);
    tb_safetensors_t *file = NULL;
    tb_status status;
    Py_BEGIN_ALLOW_THREADS
    status = tb_safetensors_open(path, &file);
    Py_END_ALLOW_THREADS
    if (status != TB_OK) {
        raise_for_path(status, path);
        file = NULL;
    }
    Py_DECREF(path_bytes);
    return file;
}

/* safetensors_load(path) -> dict[str, Tensor] in file order. */
static PyObject *py_safetensors_load(PyObject *module, PyObject *args) {
    tb_safetensors_t *file = open_file(args, "O&:safetensors_load");
    if (!file)
        return NULL;
    PyObject *result = PyDict_New();
    for (size_t i = 0; result && i < tb_safetensors_count(file); i++) {
        tb_safetensors_info info;
        tb_tensor tensor;
        tb_status status = tb_safetensors_info_at(file, i, &info);
        if (status == TB_OK)
            status = tb_safetensors_get_at(file, i, &tensor);
        if (status != TB_OK) {
            Py_CLEAR(result);
            tb_py_raise(status);
            break;
        }
        PyObject *value = tb_py_tensor_wrap(&tensor);
        if (!value || PyDict_SetItemString(result, info.name, value) != 0)
            Py_CLEAR(result);
        Py_XDECREF(value);
    }
    tb_safetensors_close(file); /* the tensors keep the mapping alive */
    return result;
}

/* safetensors_header(path) -> (list of (name, dtype, shape, data_offset, nbytes), metadata dict). */
static PyObject *py_safetensors_header(PyObject *module, PyObject *args) {
    tb_safetensors_t *file = open_file(args, "O&:safetensors_header");
    if (!file)
        return NULL;
    PyObject *entries = PyList_New((Py_ssize_t)tb_safetensors_count(file));
    for (size_t i = 0; entries && i < tb_safetensors_count(file); i++) {
        tb_safetensors_info info;
        if (tb_safetensors_info_at(file, i, &info) != TB_OK) {
            Py_CLEAR(entries);
            tb_py_raise(TB_ERR_INTERNAL);
            break;
        }
        PyObject *entry = Py_BuildValue("(ssNKK)", info.name, tb_safetensors_dtype_name(info.dtype),
                                        shape_tuple(info.ndim, info.shape), (unsigned long long)info.data_offset,
                                        (unsigned long long)info.nbytes);
        if (!entry) {
            Py_CLEAR(entries);
            break;
        }
        PyList_SET_ITEM(entries, (Py_ssize_t)i, entry);
    }
    PyObject *metadata = entries ? metadata_dict(file) : NULL;
    tb_safetensors_close(file);
    if (!metadata) {
        Py_XDECREF(entries);
        return NULL;
    }
    return Py_BuildValue("(NN)", entries, metadata);
}

/* ---- saving ---- */

typedef struct save_item {
    tb_tensor tensor;   /* a contiguous tensor (typed items) */
    Py_buffer buffer;   /* raw bytes (items with an explicit safetensors dtype) */
    bool has_buffer;
} save_item;

/* Fills entry i from (name, array) or (name, bytes_like, dtype_name, shape). */
static int prepare_item(PyObject *item, save_item *slot, tb_safetensors_entry *entry) {
    if (!PyTuple_Check(item) || (PyTuple_GET_SIZE(item) != 2 && PyTuple_GET_SIZE(item) != 4)) {
        PyErr_SetString(PyExc_TypeError, "safetensors_save: items must be (name, array) or (name, bytes, dtype, shape)");
        return -1;
    }
    PyObject *name_object = PyTuple_GET_ITEM(item, 0);
    if (!PyUnicode_Check(name_object)) {
        PyErr_SetString(PyExc_TypeError, "safetensors_save: tensor names must be str");
        return -1;
    }
    Py_ssize_t name_length;
    const char *name = PyUnicode_AsUTF8AndSize(name_object, &name_length);
    if (!name)
        return -1;
    if ((size_t)name_length != strlen(name)) {
        PyErr_Format(PyExc_ValueError, "safetensors_save: tensor name %R contains a NUL character", name_object);
        return -1;
    }
    if (PyTuple_GET_SIZE(item) == 2) {
        tb_tensor imported;
        if (tb_py_import_tensor(PyTuple_GET_ITEM(item, 1), name, &imported) != 0)
            return -1;
        tb_status status = tb_tensor_contiguous(&imported, imported.dtype, &slot->tensor);
        tb_tensor_release(&imported);
        if (status == TB_OK)
            status = tb_safetensors_entry_from_tensor(name, &slot->tensor, entry);
        if (status != TB_OK) {
            tb_py_raise(status);
            return -1;
        }
        return 0;
    }
    const char *dtype_name = PyUnicode_Check(PyTuple_GET_ITEM(item, 2)) ? PyUnicode_AsUTF8(PyTuple_GET_ITEM(item, 2)) : NULL;
    if (!dtype_name) {
        PyErr_SetString(PyExc_TypeError, "safetensors_save: the dtype of a raw item must be a str like 'F8_E4M3'");
        return -1;
    }
    if (tb_safetensors_dtype_from_name(dtype_name, &entry->dtype) != TB_OK) {
        tb_py_raise(TB_ERR_INVALID_ARGUMENT);
        return -1;
    }
    PyObject *shape = PySequence_Fast(PyTuple_GET_ITEM(item, 3), "safetensors_save: shape must be a sequence");
    if (!shape)
        return -1;
    Py_ssize_t ndim = PySequence_Fast_GET_SIZE(shape);
    if (ndim > TB_MAX_DIMS) {
        Py_DECREF(shape);
        PyErr_Format(PyExc_ValueError, "safetensors_save: tensor '%s' has %zd dims (at most %d)", name, ndim,
                     TB_MAX_DIMS);
        return -1;
    }
    entry->ndim = (int)ndim;
    uint64_t nbytes = tb_safetensors_dtype_size(entry->dtype);
    bool overflow = false;
    for (Py_ssize_t d = 0; d < ndim; d++) {
        long long dim = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(shape, d));
        if (dim == -1 && PyErr_Occurred()) {
            Py_DECREF(shape);
            return -1;
        }
        if (dim < 0) {
            Py_DECREF(shape);
            PyErr_Format(PyExc_ValueError, "safetensors_save: tensor '%s' has a negative dim", name);
            return -1;
        }
        entry->shape[d] = dim;
        overflow |= __builtin_mul_overflow(nbytes, (uint64_t)dim, &nbytes);
    }
    Py_DECREF(shape);
    if (PyObject_GetBuffer(PyTuple_GET_ITEM(item, 1), &slot->buffer, PyBUF_C_CONTIGUOUS) != 0)
        return -1;
    slot->has_buffer = true;
    if (overflow || (uint64_t)slot->buffer.len != nbytes) {
        PyErr_Format(PyExc_ValueError, "safetensors_save: tensor '%s' has %zd bytes of data, its shape and %s need %llu",
                     name, slot->buffer.len, dtype_name, overflow ? 0ull : (unsigned long long)nbytes);
        return -1;
    }
    entry->name = name;
    entry->data = slot->buffer.buf;
    return 0;
}

/* safetensors_save(path, items, metadata) with items a sequence of (name, array) or
 * (name, bytes_like, dtype, shape) and metadata None or a dict of str -> str. */
static PyObject *py_safetensors_save(PyObject *module, PyObject *args) {
    PyObject *path_bytes, *items_object, *metadata = Py_None;
    if (!PyArg_ParseTuple(args, "O&O|O:safetensors_save", PyUnicode_FSConverter, &path_bytes, &items_object,
                          &metadata))
        return NULL;
    PyObject *items = PySequence_Fast(items_object, "safetensors_save: items must be a sequence");
    if (!items) {
        Py_DECREF(path_bytes);
        return NULL;
    }
    if (metadata != Py_None && !PyDict_Check(metadata)) {
        PyErr_SetString(PyExc_TypeError, "safetensors_save: metadata must be a dict of str to str or None");
        Py_DECREF(items);
        Py_DECREF(path_bytes);
        return NULL;
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(items);
    Py_ssize_t metadata_count = metadata == Py_None ? 0 : PyDict_Size(metadata);
    save_item *slots = PyMem_Calloc((size_t)count + 1, sizeof *slots);
    tb_safetensors_entry *entries = PyMem_Calloc((size_t)count + 1, sizeof *entries);
    const char **keys = PyMem_Calloc((size_t)metadata_count + 1, sizeof *keys);
    const char **values = PyMem_Calloc((size_t)metadata_count + 1, sizeof *values);
    PyObject *result = NULL;
    if (!slots || !entries || !keys || !values) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < count; i++)
        if (prepare_item(PySequence_Fast_GET_ITEM(items, i), &slots[i], &entries[i]) != 0)
            goto done;
    Py_ssize_t position = 0, m = 0;
    PyObject *key, *value;
    while (metadata != Py_None && PyDict_Next(metadata, &position, &key, &value)) {
        if (!PyUnicode_Check(key) || !PyUnicode_Check(value)) {
            PyErr_SetString(PyExc_TypeError, "safetensors_save: metadata keys and values must be str");
            goto done;
        }
        Py_ssize_t key_length, value_length;
        keys[m] = PyUnicode_AsUTF8AndSize(key, &key_length);
        values[m] = PyUnicode_AsUTF8AndSize(value, &value_length);
        if (!keys[m] || !values[m])
            goto done;
        if ((size_t)key_length != strlen(keys[m]) || (size_t)value_length != strlen(values[m])) {
            PyErr_SetString(PyExc_ValueError, "safetensors_save: metadata must not contain NUL characters");
            goto done;
        }
        m++;
    }
    const char *path = PyBytes_AS_STRING(path_bytes);
    tb_status status;
    Py_BEGIN_ALLOW_THREADS
    status = tb_safetensors_write(path, entries, (size_t)count, metadata == Py_None ? NULL : keys, values, (size_t)m);
    Py_END_ALLOW_THREADS
    if (status != TB_OK)
        tb_py_raise(status);
    else
        result = Py_NewRef(Py_None);
done:
    for (Py_ssize_t i = 0; slots && i < count; i++) {
        tb_tensor_release(&slots[i].tensor);
        if (slots[i].has_buffer)
            PyBuffer_Release(&slots[i].buffer);
    }
    PyMem_Free(slots);
    PyMem_Free(entries);
    PyMem_Free(keys);
    PyMem_Free(values);
    Py_DECREF(items);
    Py_DECREF(path_bytes);
    return result;
}

/* ---- checkpoints ---- */

static void checkpoint_capsule_destructor(PyObject *capsule) {
    tb_checkpoint_close(PyCapsule_GetPointer(capsule, checkpoint_capsule_name));
}

static tb_checkpoint_t *checkpoint_from(PyObject *capsule) {
    if (!PyCapsule_IsValid(capsule, checkpoint_capsule_name)) {
        PyErr_SetString(PyExc_ValueError, "the checkpoint is closed (or this is not a checkpoint handle)");
        return NULL;
    }
    return PyCapsule_GetPointer(capsule, checkpoint_capsule_name);
}

static PyObject *py_checkpoint_open(PyObject *module, PyObject *args) {
    PyObject *path_bytes;
    if (!PyArg_ParseTuple(args, "O&:checkpoint_open", PyUnicode_FSConverter, &path_bytes))
        return NULL;
    const char *path = PyBytes_AS_STRING(path_bytes);
    tb_checkpoint_t *ckpt = NULL;
    tb_status status;
    Py_BEGIN_ALLOW_THREADS
    status = tb_checkpoint_open(path, &ckpt);
    Py_END_ALLOW_THREADS
    PyObject *result = status == TB_OK ? PyCapsule_New(ckpt, checkpoint_capsule_name, checkpoint_capsule_destructor)
                                       : raise_for_path(status, path);
    if (status == TB_OK && !result)
        tb_checkpoint_close(ckpt);
    Py_DECREF(path_bytes);
    return result;
}

static PyObject *py_checkpoint_close(PyObject *module, PyObject *capsule) {
    tb_checkpoint_t *ckpt = checkpoint_from(capsule);
    if (!ckpt)
        return NULL;
    /* a capsule's pointer cannot be set to NULL: renaming it marks it closed for checkpoint_from */
    tb_checkpoint_close(ckpt);
    PyCapsule_SetDestructor(capsule, NULL);
    PyCapsule_SetName(capsule, "torchburn._C.checkpoint.closed");
    Py_RETURN_NONE;
}

static PyObject *py_checkpoint_names(PyObject *module, PyObject *capsule) {
    tb_checkpoint_t *ckpt = checkpoint_from(capsule);
    if (!ckpt)
        return NULL;
    size_t count = tb_checkpoint_count(ckpt);
    PyObject *names = PyList_New((Py_ssize_t)count);
    for (size_t i = 0; names && i < count; i++) {
        PyObject *name = PyUnicode_FromString(tb_checkpoint_name_at(ckpt, i));
        if (!name) {
            Py_CLEAR(names);
            break;
        }
        PyList_SET_ITEM(names, (Py_ssize_t)i, name);
    }
    return names;
}

static PyObject *py_checkpoint_get(PyObject *module, PyObject *args) {
    PyObject *capsule;
    const char *name;
    if (!PyArg_ParseTuple(args, "Os:checkpoint_get", &capsule, &name))
        return NULL;
    tb_checkpoint_t *ckpt = checkpoint_from(capsule);
    if (!ckpt)
        return NULL;
    tb_tensor tensor;
    tb_status status = tb_checkpoint_get(ckpt, name, &tensor);
    if (status == TB_ERR_INVALID_ARGUMENT) {
        PyErr_SetString(PyExc_KeyError, tb_error_message());
        return NULL;
    }
    if (status != TB_OK)
        return tb_py_raise(status);
    return tb_py_tensor_wrap(&tensor);
}

/* checkpoint_info(capsule, name) -> (dtype, shape, shard_path, data_offset, nbytes). */
static PyObject *py_checkpoint_info(PyObject *module, PyObject *args) {
    PyObject *capsule;
    const char *name;
    if (!PyArg_ParseTuple(args, "Os:checkpoint_info", &capsule, &name))
        return NULL;
    tb_checkpoint_t *ckpt = checkpoint_from(capsule);
    if (!ckpt)
        return NULL;
    const tb_safetensors_t *shard;
    size_t index;
    tb_safetensors_info info;
    tb_status status = tb_checkpoint_locate(ckpt, name, &shard, &index);
    if (status == TB_ERR_INVALID_ARGUMENT) {
        PyErr_SetString(PyExc_KeyError, tb_error_message());
        return NULL;
    }
    if (status == TB_OK)
        status = tb_safetensors_info_at(shard, index, &info);
    if (status != TB_OK)
        return tb_py_raise(status);
    return Py_BuildValue("(sNO&KK)", tb_safetensors_dtype_name(info.dtype), shape_tuple(info.ndim, info.shape),
                         PyUnicode_DecodeFSDefault, tb_safetensors_source(shard), (unsigned long long)info.data_offset,
                         (unsigned long long)info.nbytes);
}

static PyObject *py_checkpoint_shards(PyObject *module, PyObject *capsule) {
    tb_checkpoint_t *ckpt = checkpoint_from(capsule);
    if (!ckpt)
        return NULL;
    size_t count = tb_checkpoint_shard_count(ckpt);
    PyObject *shards = PyList_New((Py_ssize_t)count);
    for (size_t i = 0; shards && i < count; i++) {
        PyObject *path = PyUnicode_DecodeFSDefault(tb_safetensors_source(tb_checkpoint_shard_at(ckpt, i)));
        if (!path) {
            Py_CLEAR(shards);
            break;
        }
        PyList_SET_ITEM(shards, (Py_ssize_t)i, path);
    }
    return shards;
}

/* ---- HF config ---- */

static PyObject *token_ids_list(const tb_hf_token_ids *ids) {
    PyObject *list = PyList_New(ids->count);
    for (int i = 0; list && i < ids->count; i++) {
        PyObject *id = PyLong_FromLongLong(ids->ids[i]);
        if (!id) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, i, id);
    }
    return list;
}

static PyObject *optional_int(int64_t value, int64_t none_value) {
    if (value == none_value)
        Py_RETURN_NONE;
    return PyLong_FromLongLong(value);
}

static PyObject *generation_dict(const tb_hf_generation_config *g) {
    static const char *const names[] = {"temperature", "top_p", "top_k", "repetition_penalty", "do_sample",
                                        "max_new_tokens", "max_length", "bos_token_id", "eos_token_id",
                                        "pad_token_id"};
    PyObject *explicit_fields = PyList_New(0);
    for (int bit = 0; explicit_fields && bit < (int)(sizeof names / sizeof names[0]); bit++) {
        if (g->present & (1u << bit)) {
            PyObject *name = PyUnicode_FromString(names[bit]);
            if (!name || PyList_Append(explicit_fields, name) != 0)
                Py_CLEAR(explicit_fields);
            Py_XDECREF(name);
        }
    }
    if (!explicit_fields)
        return NULL;
    return Py_BuildValue("{s:d,s:d,s:L,s:d,s:O,s:N,s:L,s:N,s:N,s:N,s:N}", "temperature", g->temperature, "top_p",
                         g->top_p, "top_k", (long long)g->top_k, "repetition_penalty", g->repetition_penalty,
                         "do_sample", g->do_sample ? Py_True : Py_False, "max_new_tokens",
                         optional_int(g->max_new_tokens, -1), "max_length", (long long)g->max_length, "bos_token_id",
                         optional_int(g->bos_token_id, -1), "eos_token_id", token_ids_list(&g->eos), "pad_token_id",
                         optional_int(g->pad_token_id, -1), "explicit", explicit_fields);
}

static PyObject *config_dict(const tb_hf_config *c) {
    const tb_hf_rope *r = &c->rope;
    PyObject *rope = Py_BuildValue("{s:s,s:d,s:d,s:d,s:d,s:L,s:d,s:d,s:d,s:d,s:d}", "type",
                                   tb_hf_rope_type_name(r->type), "theta", r->theta, "factor", r->factor,
                                   "low_freq_factor", r->low_freq_factor, "high_freq_factor", r->high_freq_factor,
                                   "original_max_position_embeddings", (long long)r->original_max_position_embeddings,
                                   "beta_fast", r->beta_fast, "beta_slow", r->beta_slow, "attention_factor",
                                   r->attention_factor, "mscale", r->mscale, "mscale_all_dim", r->mscale_all_dim);
    if (!rope)
        return NULL;
    PyObject *generation = generation_dict(&c->generation);
    if (!generation) {
        Py_DECREF(rope);
        return NULL;
    }
    PyObject *dict = Py_BuildValue(
        "{s:s,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:d,s:N,s:O,s:O,s:O,s:O,s:O,s:N,s:L,s:N,s:N,s:N,s:N,s:O,s:N}",
        "model_type", tb_hf_model_type_name(c->model_type), "vocab_size", (long long)c->vocab_size, "hidden_size",
        (long long)c->hidden_size, "intermediate_size", (long long)c->intermediate_size, "num_hidden_layers",
        (long long)c->num_hidden_layers, "num_attention_heads", (long long)c->num_attention_heads,
        "num_key_value_heads", (long long)c->num_key_value_heads, "head_dim", (long long)c->head_dim,
        "max_position_embeddings", (long long)c->max_position_embeddings, "rms_norm_eps", c->rms_norm_eps, "rope",
        rope, "tie_word_embeddings", c->tie_word_embeddings ? Py_True : Py_False, "attention_bias",
        c->attention_bias ? Py_True : Py_False, "attention_output_bias", c->attention_output_bias ? Py_True : Py_False,
        "mlp_bias", c->mlp_bias ? Py_True : Py_False, "qk_norm", c->qk_norm ? Py_True : Py_False, "sliding_window",
        optional_int(c->sliding_window, 0), "max_window_layers", (long long)c->max_window_layers, "bos_token_id",
        optional_int(c->bos_token_id, -1), "pad_token_id", optional_int(c->pad_token_id, -1), "eos_token_id",
        token_ids_list(&c->eos), "dtype", c->dtype[0] ? PyUnicode_FromString(c->dtype) : Py_NewRef(Py_None),
        "has_generation_config", c->has_generation_config ? Py_True : Py_False, "generation", generation);
    return dict;
}

static PyObject *py_hf_config_load(PyObject *module, PyObject *args) {
    PyObject *path_bytes;
    if (!PyArg_ParseTuple(args, "O&:hf_config_load", PyUnicode_FSConverter, &path_bytes))
        return NULL;
    const char *path = PyBytes_AS_STRING(path_bytes);
    tb_hf_config config;
    tb_status status = tb_hf_config_load(path, &config);
    PyObject *result = NULL;
    if (status != TB_OK) {
        /* a folder without config.json is reported as that file missing */
        PyObject *config_path = PyBytes_FromFormat("%s/config.json", path);
        struct stat st;
        bool is_folder = stat(path, &st) == 0 && S_ISDIR(st.st_mode);
        raise_for_path(status, is_folder && config_path ? PyBytes_AS_STRING(config_path) : path);
        Py_XDECREF(config_path);
    } else {
        result = config_dict(&config);
    }
    Py_DECREF(path_bytes);
    return result;
}

/* hf_config_parse(text: bytes | str, source_name="config.json") -> dict. */
static PyObject *py_hf_config_parse(PyObject *module, PyObject *args) {
    const char *text, *source = "config.json";
    Py_ssize_t length;
    if (!PyArg_ParseTuple(args, "s#|s:hf_config_parse", &text, &length, &source))
        return NULL;
    tb_hf_config config;
    tb_status status = tb_hf_config_parse(text, (size_t)length, source, &config);
    return status == TB_OK ? config_dict(&config) : tb_py_raise(status);
}

static PyObject *py_hf_generation_config_parse(PyObject *module, PyObject *args) {
    const char *text, *source = "generation_config.json";
    Py_ssize_t length;
    if (!PyArg_ParseTuple(args, "s#|s:hf_generation_config_parse", &text, &length, &source))
        return NULL;
    tb_hf_generation_config config;
    tb_status status = tb_hf_generation_config_parse(text, (size_t)length, source, &config);
    return status == TB_OK ? generation_dict(&config) : tb_py_raise(status);
}

/* ---- JSON ---- */

static PyObject *json_to_python(const tb_json_value *value) {
    switch (tb_json_type_of(value)) {
    case TB_JSON_NULL:
        Py_RETURN_NONE;
    case TB_JSON_BOOL: {
        bool b = false;
        if (tb_json_get_bool(value, &b) != TB_OK)
            return tb_py_raise(TB_ERR_INTERNAL);
        return PyBool_FromLong(b);
    }
    case TB_JSON_INT: {
        int64_t i = 0;
        if (tb_json_get_int(value, &i) != TB_OK)
            return tb_py_raise(TB_ERR_INTERNAL);
        return PyLong_FromLongLong(i);
    }
    case TB_JSON_DOUBLE: {
        double d = 0;
        if (tb_json_get_double(value, &d) != TB_OK)
            return tb_py_raise(TB_ERR_INTERNAL);
        return PyFloat_FromDouble(d);
    }
    case TB_JSON_STRING: {
        const char *s = "";
        size_t n = 0;
        if (tb_json_get_string(value, &s, &n) != TB_OK)
            return tb_py_raise(TB_ERR_INTERNAL);
        return PyUnicode_DecodeUTF8(s, (Py_ssize_t)n, "strict");
    }
    case TB_JSON_ARRAY: {
        size_t n = tb_json_length(value);
        PyObject *list = PyList_New((Py_ssize_t)n);
        for (size_t i = 0; list && i < n; i++) {
            PyObject *item = json_to_python(tb_json_array_at(value, i));
            if (!item) {
                Py_CLEAR(list);
                break;
            }
            PyList_SET_ITEM(list, (Py_ssize_t)i, item);
        }
        return list;
    }
    case TB_JSON_OBJECT: {
        PyObject *dict = PyDict_New();
        for (size_t i = 0; dict && i < tb_json_length(value); i++) {
            const char *key;
            size_t key_length;
            const tb_json_value *member;
            if (tb_json_object_entry(value, i, &key, &key_length, &member) != TB_OK) {
                Py_CLEAR(dict);
                tb_py_raise(TB_ERR_INTERNAL);
                break;
            }
            PyObject *k = PyUnicode_DecodeUTF8(key, (Py_ssize_t)key_length, "strict");
            PyObject *v = k ? json_to_python(member) : NULL;
            if (!v || PyDict_SetItem(dict, k, v) != 0)
                Py_CLEAR(dict);
            Py_XDECREF(k);
            Py_XDECREF(v);
        }
        return dict;
    }
    }
    return tb_py_raise(TB_ERR_INTERNAL);
}

/* json_parse(text: bytes | str, max_bytes=0, max_depth=0, source_name=None) -> object. */
static PyObject *py_json_parse(PyObject *module, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"text", "max_bytes", "max_depth", "source_name", NULL};
    const char *text, *source = NULL;
    Py_ssize_t length, max_bytes = 0;
    int max_depth = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "s#|niz:json_parse", keywords, &text, &length, &max_bytes,
                                     &max_depth, &source))
        return NULL;
    tb_json_limits limits = {.max_bytes = max_bytes > 0 ? (size_t)max_bytes : 0, .max_depth = max_depth};
    tb_json_document *doc = NULL;
    tb_status status;
    Py_BEGIN_ALLOW_THREADS
    status = tb_json_parse(text, (size_t)length, &limits, source, &doc);
    Py_END_ALLOW_THREADS
    if (status != TB_OK)
        return tb_py_raise(status);
    PyObject *result = json_to_python(tb_json_root(doc));
    tb_json_free(doc);
    return result;
}

static PyMethodDef files_functions[] = {
    {"safetensors_load", py_safetensors_load, METH_VARARGS,
     "safetensors_load(path) -> dict[str, Tensor]: validated, memory-mapped, zero-copy read-only tensors."},
    {"safetensors_header", py_safetensors_header, METH_VARARGS,
     "safetensors_header(path) -> ([(name, dtype, shape, data_offset, nbytes)], metadata): the validated header."},
    {"safetensors_save", py_safetensors_save, METH_VARARGS,
     "safetensors_save(path, items, metadata=None): items are (name, array) or (name, bytes, dtype, shape)."},
    {"checkpoint_open", py_checkpoint_open, METH_VARARGS,
     "checkpoint_open(path) -> capsule over a validated checkpoint folder, index file or .safetensors file."},
    {"checkpoint_close", py_checkpoint_close, METH_O, "checkpoint_close(capsule): releases the handle now."},
    {"checkpoint_names", py_checkpoint_names, METH_O, "checkpoint_names(capsule) -> sorted tensor names."},
    {"checkpoint_get", py_checkpoint_get, METH_VARARGS, "checkpoint_get(capsule, name) -> Tensor (KeyError if absent)."},
    {"checkpoint_info", py_checkpoint_info, METH_VARARGS,
     "checkpoint_info(capsule, name) -> (dtype, shape, shard_path, data_offset, nbytes)."},
    {"checkpoint_shards", py_checkpoint_shards, METH_O, "checkpoint_shards(capsule) -> shard paths."},
    {"hf_config_load", py_hf_config_load, METH_VARARGS,
     "hf_config_load(path) -> dict: config.json (+ generation_config.json) of a model folder or file."},
    {"hf_config_parse", py_hf_config_parse, METH_VARARGS, "hf_config_parse(text, source_name='config.json') -> dict."},
    {"hf_generation_config_parse", py_hf_generation_config_parse, METH_VARARGS,
     "hf_generation_config_parse(text, source_name='generation_config.json') -> dict."},
    {"json_parse", (PyCFunction)(void (*)(void))py_json_parse, METH_VARARGS | METH_KEYWORDS,
     "json_parse(text, max_bytes=0, max_depth=0, source_name=None): torchburn's strict JSON reader."},
    {NULL},
};

int tb_pyext_register_files(PyObject *module) { return PyModule_AddFunctions(module, files_functions); }
