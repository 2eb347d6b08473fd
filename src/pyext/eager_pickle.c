/* turbo_torch.load's restricted unpickler: runs only the data opcodes of pickle protocols 2-5 that
 * PyTorch's weights_only=True loader allows, and resolves GLOBAL only through an allow-list of safe
 * objects that the caller supplies. Nothing from the file is ever imported or called unless it is one of
 * those objects; anything else is pickle.UnpicklingError naming the opcode or global and its byte. */
#include "eager.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#if PY_VERSION_HEX < 0x030B0000
#define PyFloat_Unpack8(p, le) _PyFloat_Unpack8((const unsigned char *)(p), (le))
#endif

typedef struct unpickler {
    const unsigned char *data;
    size_t size, pos;
    PyObject *stack;   /* list */
    PyObject *marks;   /* list of ints: stack lengths at MARK */
    PyObject *memo;    /* dict int -> object */
    PyObject *allowed; /* dict "module.name" -> object */
    PyObject *buildable; /* tuple of types BUILD may update (collections.OrderedDict) */
    PyObject *persistent_load;
    PyObject *error;   /* pickle.UnpicklingError */
    size_t op_pos;     /* byte of the opcode being run (for messages) */
} unpickler;

static PyObject *fail(unpickler *u, const char *format, ...) {
    char message[512];
    va_list args;
    va_start(args, format);
    vsnprintf(message, sizeof message, format, args);
    va_end(args);
    PyErr_Format(u->error, "turbo_torch.load: %s (at byte %zu of data.pkl)", message, u->op_pos);
    return NULL;
}

static const unsigned char *take(unpickler *u, size_t n) {
    if (n > u->size - u->pos) {
        fail(u, "the pickle is truncated: needs %zu more bytes, %zu left", n, u->size - u->pos);
        return NULL;
    }
    const unsigned char *p = u->data + u->pos;
    u->pos += n;
    return p;
}

static uint64_t little(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static int push(unpickler *u, PyObject *object) { /* steals */
    if (!object)
        return -1;
    int rc = PyList_Append(u->stack, object);
    Py_DECREF(object);
    return rc;
}

static PyObject *pop(unpickler *u) { /* new reference */
    Py_ssize_t n = PyList_GET_SIZE(u->stack);
    Py_ssize_t floor = PyList_GET_SIZE(u->marks) ? PyLong_AsSsize_t(PyList_GET_ITEM(u->marks, PyList_GET_SIZE(u->marks) - 1)) : 0;
    if (n <= floor)
        return fail(u, "stack underflow");
    PyObject *top = PyList_GET_ITEM(u->stack, n - 1);
    Py_INCREF(top);
    if (PyList_SetSlice(u->stack, n - 1, n, NULL) != 0) {
        Py_DECREF(top);
        return NULL;
    }
    return top;
}

static PyObject *top(unpickler *u) { /* borrowed */
    Py_ssize_t n = PyList_GET_SIZE(u->stack);
    Py_ssize_t floor = PyList_GET_SIZE(u->marks) ? PyLong_AsSsize_t(PyList_GET_ITEM(u->marks, PyList_GET_SIZE(u->marks) - 1)) : 0;
    if (n <= floor)
        return fail(u, "stack underflow");
    return PyList_GET_ITEM(u->stack, n - 1);
}

/* The items since the last MARK as a new list (and the mark removed). */
static PyObject *pop_mark(unpickler *u) {
    Py_ssize_t marks = PyList_GET_SIZE(u->marks);
    if (marks == 0)
        return fail(u, "an opcode needs a MARK and there is none");
    Py_ssize_t start = PyLong_AsSsize_t(PyList_GET_ITEM(u->marks, marks - 1));
    Py_ssize_t n = PyList_GET_SIZE(u->stack);
    PyObject *items = PyList_GetSlice(u->stack, start, n);
    if (!items || PyList_SetSlice(u->stack, start, n, NULL) != 0 || PyList_SetSlice(u->marks, marks - 1, marks, NULL) != 0) {
        Py_XDECREF(items);
        return NULL;
    }
    return items;
}

static int is_allowed_value(unpickler *u, PyObject *object) {
    PyObject *key, *value;
    Py_ssize_t i = 0;
    while (PyDict_Next(u->allowed, &i, &key, &value))
        if (value == object)
            return 1;
    return 0;
}

static int push_global(unpickler *u, PyObject *module, PyObject *name) {
    if (!PyUnicode_Check(module) || !PyUnicode_Check(name)) {
        fail(u, "STACK_GLOBAL needs two strings");
        return -1;
    }
    PyObject *key = PyUnicode_FromFormat("%U.%U", module, name);
    if (!key)
        return -1;
    PyObject *value = PyDict_GetItemWithError(u->allowed, key);
    if (!value) {
        if (!PyErr_Occurred())
            fail(u, "unsupported global %s: weights_only loading allows only tensors, their storages and plain "
                 "containers (collections.OrderedDict, torch._utils._rebuild_tensor_v2, torch.*Storage, torch dtypes, "
                 "set, frozenset)", PyUnicode_AsUTF8(key));
        Py_DECREF(key);
        return -1;
    }
    Py_DECREF(key);
    Py_INCREF(value);
    return push(u, value);
}

static int op_global(unpickler *u) {
    PyObject *parts[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) {
        const unsigned char *start = u->data + u->pos;
        const unsigned char *end = memchr(start, '\n', u->size - u->pos);
        if (!end || end - start > 256) {
            fail(u, "GLOBAL name is unterminated or longer than 256 bytes");
            Py_XDECREF(parts[0]);
            return -1;
        }
        parts[i] = PyUnicode_DecodeUTF8((const char *)start, end - start, "strict");
        u->pos += (size_t)(end - start) + 1;
        if (!parts[i] && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
            PyErr_Clear();
            fail(u, "GLOBAL name is not valid UTF-8");
        }
        if (!parts[i]) {
            Py_XDECREF(parts[0]);
            return -1;
        }
    }
    if (PyUnicode_CompareWithASCIIString(parts[0], "__builtin__") == 0) { /* protocol 2 spelling */
        Py_SETREF(parts[0], PyUnicode_FromString("builtins"));
    }
    int rc = parts[0] ? push_global(u, parts[0], parts[1]) : -1;
    Py_XDECREF(parts[0]);
    Py_DECREF(parts[1]);
    return rc;
}

static int op_reduce(unpickler *u) {
    PyObject *args = pop(u);
    PyObject *callable = args ? pop(u) : NULL;
    int rc = -1;
    if (!callable)
        goto done;
    if (!is_allowed_value(u, callable)) {
        fail(u, "REDUCE of %.100s, which is not an allowed global", Py_TYPE(callable)->tp_name);
        goto done;
    }
    if (!PyTuple_Check(args)) {
        fail(u, "REDUCE arguments must be a tuple, got %.100s", Py_TYPE(args)->tp_name);
        goto done;
    }
    rc = push(u, PyObject_Call(callable, args, NULL));
done:
    Py_XDECREF(args);
    Py_XDECREF(callable);
    return rc;
}

static int op_build(unpickler *u) {
    PyObject *state = pop(u);
    PyObject *instance = state ? top(u) : NULL;
    if (!instance) {
        Py_XDECREF(state);
        return -1;
    }
    int buildable = 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(u->buildable); i++)
        buildable |= (PyObject *)Py_TYPE(instance) == PyTuple_GET_ITEM(u->buildable, i);
    int rc = -1;
    if (!buildable) {
        fail(u, "BUILD of a %.100s; only OrderedDict attributes (state_dict _metadata) may be built",
             Py_TYPE(instance)->tp_name);
    } else if (!PyDict_Check(state)) {
        fail(u, "BUILD state must be a dict, got %.100s", Py_TYPE(state)->tp_name);
    } else {
        PyObject *attributes = PyObject_GetAttrString(instance, "__dict__"); /* no descriptors run */
        if (attributes && PyDict_Check(attributes))
            rc = PyDict_Update(attributes, state);
        Py_XDECREF(attributes);
    }
    Py_DECREF(state);
    return rc;
}

static int op_persistent_id(unpickler *u) {
    PyObject *pid = pop(u);
    if (!pid)
        return -1;
    PyObject *result = PyObject_CallOneArg(u->persistent_load, pid);
    Py_DECREF(pid);
    return push(u, result);
}

/* Adds items (a list) to the container below them: list append, dict setitem, set add. */
static int add_items(unpickler *u, char kind) {
    PyObject *items = kind == 'a' || kind == 's' ? NULL : pop_mark(u);
    if (kind == 'a' || kind == 's') {
        items = PyList_New(0);
        int count = kind == 'a' ? 1 : 2;
        for (int i = 0; items && i < count; i++) {
            PyObject *item = pop(u);
            if (!item || PyList_Insert(items, 0, item) != 0) {
                Py_XDECREF(item);
                Py_CLEAR(items);
                break;
            }
            Py_DECREF(item);
        }
    }
    PyObject *container = items ? top(u) : NULL;
    int rc = container ? 0 : -1;
    Py_ssize_t n = items ? PyList_GET_SIZE(items) : 0;
    if (container && (kind == 'a' || kind == 'e')) {
        if (!PyList_CheckExact(container))
            rc = (fail(u, "APPEND(S) onto a %.100s (only lists)", Py_TYPE(container)->tp_name), -1);
        for (Py_ssize_t i = 0; rc == 0 && i < n; i++)
            rc = PyList_Append(container, PyList_GET_ITEM(items, i));
    } else if (container && (kind == 's' || kind == 'u')) {
        if (!PyDict_Check(container) || n % 2)
            rc = (fail(u, "SETITEM(S) onto a %.100s or with an odd item count", Py_TYPE(container)->tp_name), -1);
        for (Py_ssize_t i = 0; rc == 0 && i + 1 < n; i += 2)
            rc = PyObject_SetItem(container, PyList_GET_ITEM(items, i), PyList_GET_ITEM(items, i + 1));
    } else if (container) { /* ADDITEMS */
        if (!PySet_CheckExact(container))
            rc = (fail(u, "ADDITEMS onto a %.100s (only sets)", Py_TYPE(container)->tp_name), -1);
        for (Py_ssize_t i = 0; rc == 0 && i < n; i++)
            rc = PySet_Add(container, PyList_GET_ITEM(items, i));
    }
    Py_XDECREF(items);
    return rc;
}

static int op_memo_put(unpickler *u, uint64_t index) {
    PyObject *value = top(u);
    PyObject *key = value ? PyLong_FromUnsignedLongLong(index) : NULL;
    int rc = key ? PyDict_SetItem(u->memo, key, value) : -1;
    Py_XDECREF(key);
    return rc;
}

static int op_memo_get(unpickler *u, uint64_t index) {
    PyObject *key = PyLong_FromUnsignedLongLong(index);
    PyObject *value = key ? PyDict_GetItemWithError(u->memo, key) : NULL;
    Py_XDECREF(key);
    if (!value) {
        if (!PyErr_Occurred())
            fail(u, "memo key %llu was never stored", (unsigned long long)index);
        return -1;
    }
    Py_INCREF(value);
    return push(u, value);
}

static PyObject *read_long(unpickler *u, size_t n) {
    const unsigned char *p = take(u, n);
    if (!p)
        return NULL;
    if (n == 0)
        return PyLong_FromLong(0);
    if (n <= 8) {
        uint64_t v = little(p, (int)n);
        if (n < 8 && (p[n - 1] & 0x80))
            v |= ~(uint64_t)0 << (8 * n);
        return PyLong_FromLongLong((long long)v);
    }
    PyObject *bytes = PyBytes_FromStringAndSize((const char *)p, (Py_ssize_t)n);
    PyObject *from_bytes = bytes ? PyObject_GetAttrString((PyObject *)&PyLong_Type, "from_bytes") : NULL;
    PyObject *call_args = from_bytes ? Py_BuildValue("(Os)", bytes, "little") : NULL;
    PyObject *keywords = call_args ? Py_BuildValue("{sO}", "signed", Py_True) : NULL;
    PyObject *result = keywords ? PyObject_Call(from_bytes, call_args, keywords) : NULL;
    Py_XDECREF(keywords);
    Py_XDECREF(call_args);
    Py_XDECREF(from_bytes);
    Py_XDECREF(bytes);
    return result;
}

static PyObject *read_counted(unpickler *u, int width, int as_text) {
    const unsigned char *p = take(u, (size_t)width);
    if (!p)
        return NULL;
    uint64_t n = little(p, width);
    if (n > u->size - u->pos)
        return fail(u, "a %s of %llu bytes is declared but only %zu bytes are left (truncated or lying length)",
                    as_text ? "string" : "bytes object", (unsigned long long)n, u->size - u->pos);
    p = take(u, (size_t)n);
    if (!as_text)
        return PyBytes_FromStringAndSize((const char *)p, (Py_ssize_t)n);
    PyObject *text = PyUnicode_DecodeUTF8((const char *)p, (Py_ssize_t)n, "surrogatepass");
    if (!text && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
        PyErr_Clear();
        return fail(u, "a string of %llu bytes is not valid UTF-8", (unsigned long long)n);
    }
    return text;
}

static PyObject *tuple_of(unpickler *u, int n) {
    PyObject *tuple = PyTuple_New(n);
    for (int i = n - 1; tuple && i >= 0; i--) {
        PyObject *item = pop(u);
        if (!item)
            Py_CLEAR(tuple);
        else
            PyTuple_SET_ITEM(tuple, i, item);
    }
    return tuple;
}

static const char *opcode_name(unsigned char op) {
    switch (op) {
    case 'c': return "GLOBAL"; case 'i': return "INST"; case 'o': return "OBJ"; case 0x81: return "NEWOBJ";
    case 0x92: return "NEWOBJ_EX"; case 'P': return "PERSID"; case 0x82: case 0x83: case 0x84: return "EXT";
    case 'I': return "INT"; case 'L': return "LONG"; case 'F': return "FLOAT"; case 'S': return "STRING";
    case 'V': return "UNICODE"; case 'T': return "BINSTRING"; case 'U': return "SHORT_BINSTRING";
    case 'g': return "GET"; case 'p': return "PUT"; case 0x96: return "BYTEARRAY8"; case 0x97: return "NEXT_BUFFER";
    case 0x98: return "READONLY_BUFFER";
    default: return "unknown";
    }
}

/* Runs one opcode; returns 1 at STOP, 0 to continue, -1 on error. */
static int step(unpickler *u) {
    u->op_pos = u->pos;
    const unsigned char *p = take(u, 1);
    if (!p)
        return -1;
    unsigned char op = *p;
    switch (op) {
    case 0x80: /* PROTO */
        if (!(p = take(u, 1)))
            return -1;
        if (*p < 2 || *p > 5)
            return (fail(u, "pickle protocol %u is not supported (2 to 5 are)", *p), -1);
        return 0;
    case 0x95: return take(u, 8) ? 0 : -1; /* FRAME: a length hint only */
    case '.': return 1;                    /* STOP */
    case '(': {                            /* MARK */
        PyObject *n = PyLong_FromSsize_t(PyList_GET_SIZE(u->stack));
        int rc = n ? PyList_Append(u->marks, n) : -1;
        Py_XDECREF(n);
        return rc;
    }
    case '0': { PyObject *o = pop(u); Py_XDECREF(o); return o ? 0 : -1; } /* POP */
    case '1': { PyObject *o = pop_mark(u); Py_XDECREF(o); return o ? 0 : -1; } /* POP_MARK */
    case '2': { PyObject *o = top(u); if (!o) return -1; Py_INCREF(o); return push(u, o); } /* DUP */
    case 'N': Py_INCREF(Py_None); return push(u, Py_None);
    case 0x88: Py_INCREF(Py_True); return push(u, Py_True);
    case 0x89: Py_INCREF(Py_False); return push(u, Py_False);
    case 'J': return (p = take(u, 4)) ? push(u, PyLong_FromLong((int32_t)(uint32_t)little(p, 4))) : -1;
    case 'K': return (p = take(u, 1)) ? push(u, PyLong_FromLong(p[0])) : -1;
    case 'M': return (p = take(u, 2)) ? push(u, PyLong_FromLong((long)little(p, 2))) : -1;
    case 0x8a: return (p = take(u, 1)) ? push(u, read_long(u, p[0])) : -1; /* LONG1 */
    case 0x8b: {                                                          /* LONG4 */
        if (!(p = take(u, 4)))
            return -1;
        uint64_t n = little(p, 4);
        if (n > 4096)
            return (fail(u, "LONG4 of %llu bytes is larger than any value a checkpoint holds", (unsigned long long)n), -1);
        return push(u, read_long(u, (size_t)n));
    }
    case 'G': {
        if (!(p = take(u, 8)))
            return -1;
        return push(u, PyFloat_FromDouble(PyFloat_Unpack8((const char *)p, 0)));
    }
    case 'X': return push(u, read_counted(u, 4, 1));
    case 0x8c: return push(u, read_counted(u, 1, 1));
    case 0x8d: return push(u, read_counted(u, 8, 1));
    case 'B': return push(u, read_counted(u, 4, 0));
    case 'C': return push(u, read_counted(u, 1, 0));
    case 0x8e: return push(u, read_counted(u, 8, 0));
    case ')': return push(u, PyTuple_New(0));
    case 0x85: return push(u, tuple_of(u, 1));
    case 0x86: return push(u, tuple_of(u, 2));
    case 0x87: return push(u, tuple_of(u, 3));
    case 't': { PyObject *l = pop_mark(u); PyObject *t = l ? PyList_AsTuple(l) : NULL; Py_XDECREF(l); return push(u, t); }
    case ']': return push(u, PyList_New(0));
    case 'l': return push(u, pop_mark(u));
    case '}': return push(u, PyDict_New());
    case 'd': {
        PyObject *items = pop_mark(u);
        if (!items)
            return -1;
        PyObject *dict = PyList_GET_SIZE(items) % 2 ? NULL : PyDict_New();
        if (!dict && !PyErr_Occurred())
            fail(u, "DICT with an odd item count");
        for (Py_ssize_t i = 0; dict && i + 1 < PyList_GET_SIZE(items); i += 2)
            if (PyDict_SetItem(dict, PyList_GET_ITEM(items, i), PyList_GET_ITEM(items, i + 1)) != 0)
                Py_CLEAR(dict);
        Py_DECREF(items);
        return push(u, dict);
    }
    case 0x8f: return push(u, PySet_New(NULL));
    case 0x91: { PyObject *l = pop_mark(u); PyObject *s = l ? PyFrozenSet_New(l) : NULL; Py_XDECREF(l); return push(u, s); }
    case 'a': case 'e': case 's': case 'u': case 0x90: return add_items(u, op == 0x90 ? 'x' : (char)op);
    case 'q': return (p = take(u, 1)) ? op_memo_put(u, p[0]) : -1;
    case 'r': return (p = take(u, 4)) ? op_memo_put(u, little(p, 4)) : -1;
    case 0x94: return op_memo_put(u, (uint64_t)PyDict_GET_SIZE(u->memo));
    case 'h': return (p = take(u, 1)) ? op_memo_get(u, p[0]) : -1;
    case 'j': return (p = take(u, 4)) ? op_memo_get(u, little(p, 4)) : -1;
    case 'c': return op_global(u);
    case 0x93: {
        PyObject *name = pop(u);
        PyObject *module = name ? pop(u) : NULL;
        int rc = module ? push_global(u, module, name) : -1;
        Py_XDECREF(name);
        Py_XDECREF(module);
        return rc;
    }
    case 'R': return op_reduce(u);
    case 'b': return op_build(u);
    case 'Q': return op_persistent_id(u);
    default:
        return (fail(u, "opcode 0x%02x (%s) is not allowed by weights_only loading", op, opcode_name(op)), -1);
    }
}

/* _tt_unpickle(data, allowed, buildable, persistent_load) -> object */
static PyObject *py_unpickle(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 4 || !PyDict_Check(args[1]) || !PyTuple_Check(args[2]) || !PyCallable_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "_tt_unpickle(data, allowed: dict, buildable: tuple, persistent_load)");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) != 0)
        return NULL;
    unpickler u = {.data = view.buf, .size = (size_t)view.len, .allowed = args[1], .buildable = args[2],
                   .persistent_load = args[3]};
    PyObject *pickle = PyImport_ImportModule("pickle");
    u.error = pickle ? PyObject_GetAttrString(pickle, "UnpicklingError") : NULL;
    Py_XDECREF(pickle);
    u.stack = PyList_New(0);
    u.marks = PyList_New(0);
    u.memo = PyDict_New();
    PyObject *result = NULL;
    if (u.error && u.stack && u.marks && u.memo) {
        int rc = 0;
        while (rc == 0) {
            if (u.pos >= u.size) {
                u.op_pos = u.pos;
                fail(&u, "the pickle ends without STOP (truncated)");
                rc = -1;
                break;
            }
            rc = step(&u);
        }
        if (rc == 1) {
            if (PyList_GET_SIZE(u.stack) != 1 || PyList_GET_SIZE(u.marks) != 0)
                fail(&u, "STOP with %zd values on the stack (expected one)", PyList_GET_SIZE(u.stack));
            else
                result = Py_NewRef(PyList_GET_ITEM(u.stack, 0));
        }
    }
    Py_XDECREF(u.error);
    Py_XDECREF(u.stack);
    Py_XDECREF(u.marks);
    Py_XDECREF(u.memo);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef pickle_functions[] = {
    {"_tt_unpickle", (PyCFunction)(void (*)(void))py_unpickle, METH_FASTCALL, NULL},
    {NULL},
};

int tt_register_pickle(PyObject *module);
int tt_register_pickle(PyObject *module) { return PyModule_AddFunctions(module, pickle_functions); }
