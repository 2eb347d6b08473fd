/* Python bindings of the tokenizer layer: torchburn._C._Tokenizer (load, encode, decode, vocabulary
 * queries) and torchburn._C._DecodeStream. Plain ints, lists and strings only; the GIL is released
 * while long texts are encoded. torchburn.tokenizer.Tokenizer is the documented Python API. */
#include "pyext.h"
#include "torchburn/tokenizer.h"

typedef struct py_tokenizer {
    PyObject_HEAD
    tb_tokenizer *tokenizer;
} py_tokenizer;

typedef struct py_decode_stream {
    PyObject_HEAD
    tb_decode_stream *stream;
    PyObject *owner; /* keeps the tokenizer alive */
} py_decode_stream;

static PyTypeObject *tokenizer_type;
static PyTypeObject *decode_stream_type;

enum { RELEASE_GIL_BYTES = 4096 };

const tb_tokenizer *tb_pyext_tokenizer(PyObject *object) {
    if (!tokenizer_type || !PyObject_TypeCheck(object, tokenizer_type)) {
        PyErr_Format(PyExc_TypeError, "expected a torchburn._C._Tokenizer, got %s", Py_TYPE(object)->tp_name);
        return NULL;
    }
    return ((py_tokenizer *)object)->tokenizer;
}

static PyObject *wrap_tokenizer(tb_tokenizer *tokenizer) {
    py_tokenizer *self = PyObject_New(py_tokenizer, tokenizer_type);
    if (!self) {
        tb_tokenizer_free(tokenizer);
        return NULL;
    }
    self->tokenizer = tokenizer;
    return (PyObject *)self;
}

static PyObject *tok_from_file(PyObject *cls, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"path", "config_path", NULL};
    PyObject *path_obj, *config_obj = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O&|O:from_file", keywords, PyUnicode_FSConverter, &path_obj,
                                     &config_obj))
        return NULL;
    PyObject *config_bytes = NULL;
    if (config_obj != Py_None && !PyUnicode_FSConverter(config_obj, &config_bytes)) {
        Py_DECREF(path_obj);
        return NULL;
    }
    tb_tokenizer *tokenizer = NULL;
    tb_status status;
    Py_BEGIN_ALLOW_THREADS
    status = tb_tokenizer_load(PyBytes_AS_STRING(path_obj), config_bytes ? PyBytes_AS_STRING(config_bytes) : NULL,
                               &tokenizer);
    Py_END_ALLOW_THREADS
    Py_DECREF(path_obj);
    Py_XDECREF(config_bytes);
    if (status != TB_OK)
        return tb_py_raise(status);
    return wrap_tokenizer(tokenizer);
}

static PyObject *tok_from_directory(PyObject *cls, PyObject *arg) {
    PyObject *path_obj;
    if (!PyUnicode_FSConverter(arg, &path_obj))
        return NULL;
    tb_tokenizer *tokenizer = NULL;
    tb_status status;
    Py_BEGIN_ALLOW_THREADS
    status = tb_tokenizer_load_directory(PyBytes_AS_STRING(path_obj), &tokenizer);
    Py_END_ALLOW_THREADS
    Py_DECREF(path_obj);
    if (status != TB_OK)
        return tb_py_raise(status);
    return wrap_tokenizer(tokenizer);
}

static PyObject *tok_from_str(PyObject *cls, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"json", "config_json", NULL};
    const char *json, *config = NULL;
    Py_ssize_t json_length, config_length = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "s#|z#:from_str", keywords, &json, &json_length, &config,
                                     &config_length))
        return NULL;
    tb_tokenizer *tokenizer = NULL;
    tb_status status = tb_tokenizer_load_from_memory(json, (size_t)json_length, config, (size_t)config_length, &tokenizer);
    if (status != TB_OK)
        return tb_py_raise(status);
    return wrap_tokenizer(tokenizer);
}

static void tok_dealloc(py_tokenizer *self) {
    PyTypeObject *type = Py_TYPE(self);
    tb_tokenizer_free(self->tokenizer);
    PyObject_Free(self);
    Py_DECREF(type);
}

/* Encodes str (UTF-8) or bytes-like (any bytes; invalid UTF-8 becomes U+FFFD). */
static PyObject *tok_encode(py_tokenizer *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"text", "add_special_tokens", NULL};
    PyObject *text;
    int add_special = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|p:encode", keywords, &text, &add_special))
        return NULL;
    const char *data;
    Py_ssize_t length;
    Py_buffer view = {0};
    if (PyUnicode_Check(text)) {
        data = PyUnicode_AsUTF8AndSize(text, &length);
        if (!data)
            return NULL;
    } else if (PyObject_GetBuffer(text, &view, PyBUF_SIMPLE) == 0) {
        data = view.buf;
        length = view.len;
    } else {
        PyErr_Clear();
        return PyErr_Format(PyExc_TypeError, "encode() expects str or bytes, not %.100s", Py_TYPE(text)->tp_name);
    }
    tb_token_ids ids = {0};
    tb_status status;
    if (length >= RELEASE_GIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        status = tb_tokenizer_encode(self->tokenizer, data, (size_t)length, add_special != 0, &ids);
        Py_END_ALLOW_THREADS
    } else {
        status = tb_tokenizer_encode(self->tokenizer, data, (size_t)length, add_special != 0, &ids);
    }
    if (view.obj)
        PyBuffer_Release(&view);
    if (status != TB_OK) {
        tb_token_ids_free(&ids);
        return tb_py_raise(status);
    }
    PyObject *list = PyList_New((Py_ssize_t)ids.count);
    for (size_t i = 0; list && i < ids.count; i++) {
        PyObject *v = PyLong_FromLong(ids.ids[i]);
        if (!v) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, v);
    }
    tb_token_ids_free(&ids);
    return list;
}

/* Converts an iterable of ints to a malloc'ed int32 array; ids outside int32 become -1 (unknown). */
static int32_t *ids_from_python(PyObject *seq, size_t *count) {
    PyObject *fast = PySequence_Fast(seq, "ids must be a sequence of ints");
    if (!fast)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    int32_t *ids = PyMem_Malloc((size_t)(n ? n : 1) * sizeof *ids);
    if (!ids) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(PySequence_Fast_GET_ITEM(fast, i), &overflow);
        if (v == -1 && PyErr_Occurred()) {
            PyMem_Free(ids);
            Py_DECREF(fast);
            return NULL;
        }
        ids[i] = (overflow || v < 0 || v > INT32_MAX) ? -1 : (int32_t)v;
    }
    Py_DECREF(fast);
    *count = (size_t)n;
    return ids;
}

static PyObject *tok_decode(py_tokenizer *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"ids", "skip_special_tokens", NULL};
    PyObject *seq;
    int skip = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|p:decode", keywords, &seq, &skip))
        return NULL;
    size_t count = 0;
    int32_t *ids = ids_from_python(seq, &count);
    if (!ids)
        return NULL;
    tb_tokenizer_string text = {0};
    tb_status status = tb_tokenizer_decode(self->tokenizer, ids, count, skip != 0, &text);
    PyMem_Free(ids);
    if (status != TB_OK)
        return tb_py_raise(status);
    PyObject *result = PyUnicode_DecodeUTF8(text.data, (Py_ssize_t)text.length, "replace");
    tb_tokenizer_string_free(&text);
    return result;
}

static PyObject *tok_token_to_id(py_tokenizer *self, PyObject *arg) {
    Py_ssize_t length;
    const char *token = PyUnicode_AsUTF8AndSize(arg, &length);
    if (!token)
        return NULL;
    int32_t id = tb_tokenizer_token_to_id(self->tokenizer, token, (size_t)length);
    if (id < 0)
        Py_RETURN_NONE;
    return PyLong_FromLong(id);
}

static PyObject *tok_id_to_token(py_tokenizer *self, PyObject *arg) {
    int overflow = 0;
    long long id = PyLong_AsLongLongAndOverflow(arg, &overflow);
    if (id == -1 && PyErr_Occurred())
        return NULL;
    if (overflow || id < 0 || id > INT32_MAX)
        Py_RETURN_NONE;
    size_t length;
    const char *token = tb_tokenizer_id_to_token(self->tokenizer, (int32_t)id, &length);
    if (!token)
        Py_RETURN_NONE;
    return PyUnicode_DecodeUTF8(token, (Py_ssize_t)length, "replace");
}

static PyObject *tok_token_bytes(py_tokenizer *self, PyObject *arg) {
    int overflow = 0;
    long long id = PyLong_AsLongLongAndOverflow(arg, &overflow);
    if (id == -1 && PyErr_Occurred())
        return NULL;
    if (overflow || id < 0 || id > INT32_MAX)
        return PyBytes_FromStringAndSize("", 0);
    tb_tokenizer_string bytes = {0};
    tb_status status = tb_tokenizer_token_bytes(self->tokenizer, (int32_t)id, &bytes);
    if (status != TB_OK)
        return tb_py_raise(status);
    PyObject *out = PyBytes_FromStringAndSize(bytes.data, (Py_ssize_t)bytes.length);
    tb_tokenizer_string_free(&bytes);
    return out;
}

static PyObject *tok_is_special(py_tokenizer *self, PyObject *arg) {
    long id = PyLong_AsLong(arg);
    if (id == -1 && PyErr_Occurred())
        return NULL;
    return PyBool_FromLong(id >= 0 && id <= INT32_MAX && tb_tokenizer_is_special(self->tokenizer, (int32_t)id));
}

static PyObject *tok_decode_stream(py_tokenizer *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"skip_special_tokens", NULL};
    int skip = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|p:decode_stream", keywords, &skip))
        return NULL;
    py_decode_stream *stream = PyObject_New(py_decode_stream, decode_stream_type);
    if (!stream)
        return NULL;
    stream->stream = NULL;
    Py_INCREF(self);
    stream->owner = (PyObject *)self;
    tb_status status = tb_decode_stream_new(self->tokenizer, skip != 0, &stream->stream);
    if (status != TB_OK) {
        Py_DECREF(stream);
        return tb_py_raise(status);
    }
    return (PyObject *)stream;
}

static PyObject *id_or_none(int32_t id) {
    if (id < 0)
        Py_RETURN_NONE;
    return PyLong_FromLong(id);
}

static PyObject *tok_get_vocab_size(py_tokenizer *self, void *closure) {
    return PyLong_FromSize_t(tb_tokenizer_vocab_size(self->tokenizer));
}
static PyObject *tok_get_id_limit(py_tokenizer *self, void *closure) {
    return PyLong_FromSize_t(tb_tokenizer_id_limit(self->tokenizer));
}
static PyObject *tok_get_bos(py_tokenizer *self, void *closure) {
    return id_or_none(tb_tokenizer_bos_id(self->tokenizer));
}
static PyObject *tok_get_eos(py_tokenizer *self, void *closure) {
    return id_or_none(tb_tokenizer_eos_id(self->tokenizer));
}
static PyObject *tok_get_chat_template(py_tokenizer *self, void *closure) {
    const char *template_text = tb_tokenizer_chat_template(self->tokenizer);
    if (!template_text)
        Py_RETURN_NONE;
    return PyUnicode_DecodeUTF8(template_text, (Py_ssize_t)strlen(template_text), "replace");
}

static PyMethodDef tokenizer_methods[] = {
    {"from_file", (PyCFunction)(void (*)(void))tok_from_file, METH_VARARGS | METH_KEYWORDS | METH_CLASS,
     "from_file(path, config_path=None): load tokenizer.json (and tokenizer_config.json)"},
    {"from_directory", (PyCFunction)tok_from_directory, METH_O | METH_CLASS,
     "from_directory(path): load tokenizer.json, tokenizer_config.json, chat_template.jinja"},
    {"from_str", (PyCFunction)(void (*)(void))tok_from_str, METH_VARARGS | METH_KEYWORDS | METH_CLASS,
     "from_str(json, config_json=None)"},
    {"encode", (PyCFunction)(void (*)(void))tok_encode, METH_VARARGS | METH_KEYWORDS,
     "encode(text: str | bytes, add_special_tokens=True) -> list[int]"},
    {"decode", (PyCFunction)(void (*)(void))tok_decode, METH_VARARGS | METH_KEYWORDS,
     "decode(ids, skip_special_tokens=False) -> str"},
    {"token_to_id", (PyCFunction)tok_token_to_id, METH_O, "token_to_id(token) -> int | None"},
    {"id_to_token", (PyCFunction)tok_id_to_token, METH_O, "id_to_token(id) -> str | None"},
    {"is_special", (PyCFunction)tok_is_special, METH_O, "is_special(id) -> bool"},
    {"token_bytes", (PyCFunction)tok_token_bytes, METH_O,
     "token_bytes(id) -> bytes: what the token adds inside a decoded text (raw, partial UTF-8 kept)"},
    {"decode_stream", (PyCFunction)(void (*)(void))tok_decode_stream, METH_VARARGS | METH_KEYWORDS,
     "decode_stream(skip_special_tokens=False) -> _DecodeStream"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef tokenizer_getset[] = {
    {"vocab_size", (getter)tok_get_vocab_size, NULL, "distinct token strings, added tokens included", NULL},
    {"id_limit", (getter)tok_get_id_limit, NULL, "one past the largest id", NULL},
    {"bos_token_id", (getter)tok_get_bos, NULL, "bos id from tokenizer_config.json or None", NULL},
    {"eos_token_id", (getter)tok_get_eos, NULL, "eos id from tokenizer_config.json or None", NULL},
    {"chat_template", (getter)tok_get_chat_template, NULL, "Jinja chat template or None", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot tokenizer_slots[] = {
    {Py_tp_dealloc, tok_dealloc},
    {Py_tp_methods, tokenizer_methods},
    {Py_tp_getset, tokenizer_getset},
    {Py_tp_doc, "A HuggingFace tokenizer.json tokenizer implemented in C (see torchburn.Tokenizer)."},
    {0, NULL},
};

static PyType_Spec tokenizer_spec = {
    .name = "torchburn._C._Tokenizer",
    .basicsize = sizeof(py_tokenizer),
    .flags = Py_TPFLAGS_DEFAULT,
    .slots = tokenizer_slots,
};

/* ---- decode stream ---- */

static void stream_dealloc(py_decode_stream *self) {
    PyTypeObject *type = Py_TYPE(self);
    tb_decode_stream_free(self->stream);
    Py_XDECREF(self->owner);
    PyObject_Free(self);
    Py_DECREF(type);
}

static PyObject *stream_step(py_decode_stream *self, PyObject *arg) {
    long id = PyLong_AsLong(arg);
    if (id == -1 && PyErr_Occurred())
        return NULL;
    const char *piece;
    size_t length;
    tb_status status = tb_decode_stream_step(self->stream, (id < 0 || id > INT32_MAX) ? -1 : (int32_t)id, &piece,
                                             &length);
    if (status != TB_OK)
        return tb_py_raise(status);
    if (length == 0)
        Py_RETURN_NONE;
    return PyUnicode_DecodeUTF8(piece, (Py_ssize_t)length, "replace");
}

static PyObject *stream_flush(py_decode_stream *self, PyObject *unused) {
    const char *piece;
    size_t length;
    tb_status status = tb_decode_stream_flush(self->stream, &piece, &length);
    if (status != TB_OK)
        return tb_py_raise(status);
    return PyUnicode_DecodeUTF8(piece, (Py_ssize_t)length, "replace");
}

static PyMethodDef stream_methods[] = {
    {"step", (PyCFunction)stream_step, METH_O, "step(id) -> str | None: new text, None while incomplete"},
    {"flush", (PyCFunction)stream_flush, METH_NOARGS, "flush() -> str: held-back text; resets the stream"},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot stream_slots[] = {
    {Py_tp_dealloc, stream_dealloc},
    {Py_tp_methods, stream_methods},
    {Py_tp_doc, "Incremental detokenizer that never splits a UTF-8 character."},
    {0, NULL},
};

static PyType_Spec stream_spec = {
    .name = "torchburn._C._DecodeStream",
    .basicsize = sizeof(py_decode_stream),
    .flags = Py_TPFLAGS_DEFAULT,
    .slots = stream_slots,
};

int tb_pyext_register_tokenizer(PyObject *module) {
    tokenizer_type = (PyTypeObject *)PyType_FromSpec(&tokenizer_spec);
    if (!tokenizer_type)
        return -1;
    decode_stream_type = (PyTypeObject *)PyType_FromSpec(&stream_spec);
    if (!decode_stream_type)
        return -1;
    if (PyModule_AddObjectRef(module, "_Tokenizer", (PyObject *)tokenizer_type) != 0 ||
        PyModule_AddObjectRef(module, "_DecodeStream", (PyObject *)decode_stream_type) != 0)
        return -1;
    if (PyModule_AddStringConstant(module, "tokenizer_unicode_version", tb_tokenizer_unicode_version()) != 0)
        return -1;
    return 0;
}
