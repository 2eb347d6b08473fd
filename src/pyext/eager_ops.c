/* The eager op dispatcher of turbo_torch: Python operands to tb_eager_* calls with PyTorch's dtype
 * rules, the dispatch cache, autograd recording, and the module functions generated from the op
 * table (one binding per unary/binary op). */
#include "eager.h"

#include <math.h>

/* ---- the dispatch cache: (op, operand dtypes/tiers) -> resolved compute and result dtypes ----
 * Keyed by everything the resolution reads (op, each operand's dtype, whether it is a Python scalar
 * or 0-dim, the default dtype); shapes do not change the dtype rules and broadcasting is recomputed
 * by the kernel, so a different shape reuses an entry safely while a different dtype never can. */
typedef struct dispatch_entry {
    uint64_t key;
    int valid;
    tb_dtype compute, result;
} dispatch_entry;
enum { DISPATCH_SLOTS = 512 };
static dispatch_entry dispatch_cache[DISPATCH_SLOTS];
static uint64_t cache_hits, cache_misses;
static int cache_enabled = 1;

static uint64_t dispatch_key(int op, int kind_a, int kind_b) {
    return ((uint64_t)op << 32) ^ ((uint64_t)(unsigned)kind_a << 16) ^ (uint64_t)(unsigned)kind_b ^
           ((uint64_t)tt_default_dtype << 48) ^ (1ull << 63);
}

/* ---- operands ---- */

typedef struct operand {
    tb_eager_operand value;
    PyObject *object; /* the tt_tensor, or NULL for a scalar */
    tb_dtype dtype;   /* scalar kind: BOOL, I64, F64 */
    int is_scalar;
} operand;

/* 1: parsed; 0: not an operand (NotImplemented); -1: error. */
static int parse_operand(PyObject *o, operand *out) {
    memset(out, 0, sizeof *out);
    if (tt_check(o)) {
        out->object = o;
        out->value.tensor = tt_data(o);
        out->dtype = tt_data(o)->dtype;
        return 1;
    }
    out->is_scalar = 1;
    if (PyBool_Check(o)) {
        out->dtype = TB_BOOL;
        out->value.i = o == Py_True;
        out->value.f = (double)out->value.i;
        return 1;
    }
    if (PyLong_Check(o)) {
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
        if (overflow) {
            PyErr_SetString(PyExc_RuntimeError, "Overflow when unpacking long");
            return -1;
        }
        if (v == -1 && PyErr_Occurred())
            return -1;
        out->dtype = TB_I64;
        out->value.i = v;
        out->value.f = (double)v;
        return 1;
    }
    if (PyFloat_Check(o)) {
        out->dtype = TB_F64;
        out->value.f = PyFloat_AS_DOUBLE(o);
        out->value.i = (int64_t)(isfinite(out->value.f) ? out->value.f : 0);
        return 1;
    }
    return 0;
}

static int tier_code(const operand *x) {
    return (int)x->dtype | (x->is_scalar ? 0x100 : x->value.tensor->ndim == 0 ? 0x200 : 0);
}

static void resolve_binary(int op, const operand *a, const operand *b, tb_dtype *compute, tb_dtype *result) {
    uint64_t key = dispatch_key(op, tier_code(a), tier_code(b));
    dispatch_entry *e = &dispatch_cache[(key * 0x9E3779B97F4A7C15ull) >> 55];
    if (cache_enabled && e->valid && e->key == key) {
        cache_hits++;
        *compute = e->compute;
        *result = e->result;
        return;
    }
    cache_misses++;
    tb_result_type_state state;
    tb_result_type_init(&state);
    tb_result_type_add(&state, a->dtype, a->is_scalar ? 0 : a->value.tensor->ndim, a->is_scalar, tt_default_dtype);
    tb_result_type_add(&state, b->dtype, b->is_scalar ? 0 : b->value.tensor->ndim, b->is_scalar, tt_default_dtype);
    tb_dtype promoted = tb_result_type_finish(&state);
    *compute = tb_pw_binary_compute_dtype((tb_pw_binary)op, promoted, tt_default_dtype);
    *result = tb_pw_binary_result_dtype((tb_pw_binary)op, promoted, tt_default_dtype);
    if (cache_enabled) {
        e->key = key;
        e->valid = 1;
        e->compute = *compute;
        e->result = *result;
    }
}

/* ---- autograd recording helpers ---- */

int tt_needs_grad(int n, PyObject *const *inputs) {
    if (!tt_grad_enabled || tt_inference_mode)
        return 0;
    for (int i = 0; i < n; i++)
        if (inputs[i] && tt_requires_grad(inputs[i]))
            return 1;
    return 0;
}

static const char *binary_node_names[TB_PW_BINARY_COUNT] = {
    [TB_PWB_ADD] = "AddBackward0", [TB_PWB_SUB] = "SubBackward0", [TB_PWB_MUL] = "MulBackward0",
    [TB_PWB_DIV] = "DivBackward0", [TB_PWB_POW] = "PowBackward1", [TB_PWB_MAXIMUM] = "MaximumBackward0",
    [TB_PWB_MINIMUM] = "MinimumBackward0", [TB_PWB_ATAN2] = "Atan2Backward0", [TB_PWB_HYPOT] = "HypotBackward0",
    [TB_PWB_REMAINDER] = "RemainderBackward0", [TB_PWB_FMOD] = "FmodBackward0", [TB_PWB_FMAX] = "FmaxBackward0",
    [TB_PWB_FMIN] = "FminBackward0", [TB_PWB_XLOGY] = "XlogyBackward0", [TB_PWB_LOGADDEXP] = "LogaddexpBackward0",
    [TB_PWB_COPYSIGN] = "CopysignBackward0", [TB_PWB_FLOOR_DIVIDE] = "FloorDivideBackward0",
    [TB_PWB_NEXTAFTER] = "NextafterBackward0",
};

static int record_binary(PyObject *result, int op, const operand *a, const operand *b, double alpha) {
    PyObject *inputs[2] = {a->object, b->object};
    const char *name = binary_node_names[op] ? binary_node_names[op] : "BinaryBackward0";
    if (op == TB_PWB_MUL && (a->is_scalar || b->is_scalar))
        name = "MulBackward0";
    if (op == TB_PWB_POW && b->is_scalar)
        name = "PowBackward0";
    tt_node *node = tt_node_new(TT_NODE_BINARY, op, name, 2, inputs);
    if (!node)
        return -1;
    node->params.alpha = alpha;
    node->scalar_side = a->is_scalar ? 0 : b->is_scalar ? 1 : -1;
    node->scalars[0] = a->value.f;
    node->scalars[1] = b->value.f;
    int needs_values = !(op == TB_PWB_ADD || op == TB_PWB_SUB);
    if (needs_values) {
        if (a->object)
            tt_node_save(node, 0, tt_data(a->object));
        if (b->object)
            tt_node_save(node, 1, tt_data(b->object));
    }
    if (op == TB_PWB_POW || op == TB_PWB_HYPOT)
        tt_node_save(node, 2, tt_data(result));
    tt_set_grad_fn(result, node);
    return 0;
}

/* ---- binary ---- */

static PyObject *binary_impl(int op, operand *a, operand *b, double alpha, PyObject *out) {
    tb_dtype compute, result_dtype;
    resolve_binary(op, a, b, &compute, &result_dtype);
    if (a->is_scalar && b->is_scalar) {
        PyErr_SetString(PyExc_TypeError, "binary op on two scalars");
        return NULL;
    }
    tb_pw_params params = {.alpha = alpha};
    tb_tensor result = {0};
    if (out) {
        if (!tt_check(out)) {
            PyErr_SetString(PyExc_TypeError, "out= must be a Tensor");
            return NULL;
        }
        tb_tensor_retain(tt_data(out), &result);
        if (tb_dtype_category_of(result.dtype) < tb_dtype_category_of(result_dtype)) {
            tb_tensor_release(&result);
            PyErr_Format(PyExc_RuntimeError, "result type %s can't be cast to the desired output type %s",
                         tb_dtype_name(result_dtype), tb_dtype_name(tt_data(out)->dtype));
            return NULL;
        }
    }
    tb_status status;
    Py_BEGIN_ALLOW_THREADS
    status = tb_eager_binary((tb_pw_binary)op, a->value, b->value, &params, compute, result_dtype, &result);
    Py_END_ALLOW_THREADS
    if (status != TB_OK) {
        tb_tensor_release(&result);
        return tt_raise(status);
    }
    if (out) {
        tb_tensor_release(&result);
        tt_bump_version(tt_data(out));
        return Py_NewRef(out);
    }
    PyObject *wrapped = tt_wrap(&result);
    if (!wrapped)
        return NULL;
    PyObject *inputs[2] = {a->object, b->object};
    if (tb_dtype_category_of(result_dtype) == TB_CATEGORY_FLOATING && tt_needs_grad(2, inputs) &&
        record_binary(wrapped, op, a, b, alpha) != 0) {
        Py_DECREF(wrapped);
        return NULL;
    }
    return wrapped;
}

PyObject *tt_binary(int op, PyObject *a_object, PyObject *b_object, double alpha, PyObject *out) {
    operand a, b;
    int ra = parse_operand(a_object, &a);
    if (ra < 0)
        return NULL;
    int rb = parse_operand(b_object, &b);
    if (rb < 0)
        return NULL;
    if (!ra || !rb)
        Py_RETURN_NOTIMPLEMENTED;
    return binary_impl(op, &a, &b, alpha, out);
}

static int check_inplace(PyObject *self) {
    tt_tensor *t = (tt_tensor *)self;
    if (tt_grad_enabled && !tt_inference_mode && t->requires_grad && !t->grad_fn) {
        PyErr_SetString(PyExc_RuntimeError, "a leaf Variable that requires grad is being used in an in-place operation.");
        return -1;
    }
    return 0;
}

/* A detached copy of self's values carrying self's autograd identity (grad_fn / requires_grad): the
 * operand an in-place op with autograd computes from, so the node saves the values before the write. */
static PyObject *clone_for_inplace(PyObject *self) {
    tb_dtype self_dtype = tt_data(self)->dtype;
    tb_tensor old;
    tb_status status = tb_tensor_contiguous(tt_data(self), self_dtype, &old);
    if (status == TB_OK && old.storage == tt_data(self)->storage) {
        tb_tensor copy;
        status = tb_tensor_empty(self_dtype, old.ndim, old.shape, 0, &copy);
        if (status == TB_OK)
            status = tb_tensor_copy(&copy, &old);
        tb_tensor_release(&old);
        old = copy;
    }
    if (status != TB_OK)
        return tt_raise(status);
    PyObject *old_object = tt_wrap(&old);
    if (!old_object)
        return NULL;
    tt_tensor *self_t = (tt_tensor *)self, *old_t = (tt_tensor *)old_object;
    old_t->grad_fn = self_t->grad_fn ? Py_NewRef(self_t->grad_fn) : NULL;
    old_t->requires_grad = self_t->requires_grad;
    return old_object;
}

/* Writes result into self, bumps its version and makes result's grad_fn self's. Consumes result. */
static PyObject *finish_inplace(PyObject *self, PyObject *result) {
    if (!result)
        return NULL;
    tb_status status = tb_tensor_copy(tt_data(self), tt_data(result));
    if (status != TB_OK) {
        Py_DECREF(result);
        return tt_raise(status);
    }
    tt_bump_version(tt_data(self));
    Py_XSETREF(((tt_tensor *)self)->grad_fn, Py_XNewRef(((tt_tensor *)result)->grad_fn));
    Py_DECREF(result);
    return Py_NewRef(self);
}

/* In place: self = self op other. With autograd, the result is computed out of place and copied in,
 * and self's grad_fn becomes the op's node (its saved operands are the old values, cloned). */
PyObject *tt_inplace_binary(int op, PyObject *self, PyObject *other, double alpha) {
    if (!tt_check(self))
        Py_RETURN_NOTIMPLEMENTED;
    operand a, b;
    parse_operand(self, &a);
    int rb = parse_operand(other, &b);
    if (rb < 0)
        return NULL;
    if (!rb)
        Py_RETURN_NOTIMPLEMENTED;
    if (check_inplace(self) != 0)
        return NULL;
    tb_dtype compute, result_dtype;
    resolve_binary(op, &a, &b, &compute, &result_dtype);
    tb_dtype self_dtype = tt_data(self)->dtype;
    if (tb_dtype_category_of(result_dtype) > tb_dtype_category_of(self_dtype) ||
        (result_dtype == TB_BOOL && self_dtype != TB_BOOL && 0)) {
        PyErr_Format(PyExc_RuntimeError, "result type %s can't be cast to the desired output type %s",
                     tb_dtype_name(result_dtype == TB_F64 && b.is_scalar ? tt_default_dtype : result_dtype),
                     tb_dtype_name(self_dtype));
        return NULL;
    }
    PyObject *inputs[2] = {self, b.object};
    if (!tt_needs_grad(2, inputs))
        return binary_impl(op, &a, &b, alpha, self);
    PyObject *old_object = clone_for_inplace(self);
    if (!old_object)
        return NULL;
    a.object = old_object;
    a.value.tensor = tt_data(old_object);
    PyObject *result = binary_impl(op, &a, &b, alpha, NULL);
    Py_DECREF(old_object);
    return finish_inplace(self, result);
}

/* ---- unary ---- */

static const char *unary_node_name(int op) {
    static char names[TB_PW_UNARY_COUNT][40];
    if (!names[op][0]) {
        const char *n = tb_pw_unary_info[op].name;
        int j = 0, upper = 1;
        for (int i = 0; n[i] && j < 28; i++) {
            if (n[i] == '_') {
                upper = 1;
                continue;
            }
            names[op][j++] = upper ? (char)(n[i] - ('a' <= n[i] && n[i] <= 'z' ? 32 : 0)) : n[i];
            upper = 0;
        }
        snprintf(names[op] + j, sizeof names[op] - (size_t)j, "Backward0");
    }
    return names[op];
}

PyObject *tt_unary(int op, PyObject *x, const tb_pw_params *params, PyObject *out) {
    if (!tt_check(x)) {
        PyErr_Format(PyExc_TypeError, "%s(): argument 'input' must be Tensor, not %s", tb_pw_unary_info[op].name,
                     Py_TYPE(x)->tp_name);
        return NULL;
    }
    tb_dtype in = tt_data(x)->dtype;
    tb_dtype result_dtype = tb_pw_unary_result_dtype((tb_pw_unary)op, in, tt_default_dtype);
    tb_dtype compute = tb_pw_unary_info[op].kind == TB_PW_KIND_TEST ? in : result_dtype;
    tb_tensor result = {0};
    if (out)
        tb_tensor_retain(tt_data(out), &result);
    tb_status status;
    Py_BEGIN_ALLOW_THREADS
    status = tb_eager_unary((tb_pw_unary)op, tt_data(x), params, compute, result_dtype, &result);
    Py_END_ALLOW_THREADS
    if (status != TB_OK) {
        tb_tensor_release(&result);
        return tt_raise(status);
    }
    if (out) {
        tb_tensor_release(&result);
        tt_bump_version(tt_data(out));
        return Py_NewRef(out);
    }
    PyObject *wrapped = tt_wrap(&result);
    if (!wrapped)
        return NULL;
    if (tb_dtype_category_of(result_dtype) == TB_CATEGORY_FLOATING && tt_needs_grad(1, &x)) {
        tt_node *node = tt_node_new(TT_NODE_UNARY, op, unary_node_name(op), 1, &x);
        if (!node) {
            Py_DECREF(wrapped);
            return NULL;
        }
        if (params)
            node->params = *params;
        else if (op == TB_PW_CLAMP)
            node->params = (tb_pw_params){0, -INFINITY, INFINITY};
        else if (op == TB_PW_LOGIT)
            node->params = (tb_pw_params){-1, 0, 0};
        /* save what the derivative reads; the backward gets the saved tensor in both slots */
        switch (op) {
#define FROM_RESULT(id) case TB_PW_##id:
        TB_PW_GRAD_FROM_RESULT_LIST(FROM_RESULT)
#undef FROM_RESULT
            tt_node_save(node, 1, tt_data(wrapped));
            break;
        default: tt_node_save(node, 0, tt_data(x)); break;
        }
        tt_set_grad_fn(wrapped, node);
    }
    return wrapped;
}

/* ---- module functions generated from the op table ---- */

static int parse_out(PyObject *kwnames, PyObject *const *args, Py_ssize_t nargs, PyObject **out, double *alpha) {
    if (!kwnames)
        return 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kwnames); i++) {
        const char *k = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, i));
        PyObject *v = args[nargs + i];
        if (strcmp(k, "out") == 0) {
            *out = v == Py_None ? NULL : v;
        } else if (strcmp(k, "alpha") == 0 && alpha) {
            *alpha = PyFloat_AsDouble(v);
            if (*alpha == -1 && PyErr_Occurred())
                return -1;
        } else {
            PyErr_Format(PyExc_TypeError, "got an unexpected keyword argument '%s'", k);
            return -1;
        }
    }
    return 0;
}

static PyObject *call_unary(int op, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    PyObject *out = NULL;
    if (nargs != 1) {
        PyErr_Format(PyExc_TypeError, "%s() takes 1 positional argument (input) but %zd were given",
                     tb_pw_unary_info[op].name, nargs);
        return NULL;
    }
    if (parse_out(kwnames, args, nargs, &out, NULL) != 0)
        return NULL;
    return tt_unary(op, args[0], NULL, out);
}

static PyObject *call_binary(int op, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    PyObject *out = NULL;
    double alpha = 1.0;
    if (nargs != 2 && !(nargs == 3 && (op == TB_PWB_ADD || op == TB_PWB_SUB))) {
        PyErr_Format(PyExc_TypeError, "%s() takes 2 positional arguments (input, other) but %zd were given",
                     tb_pw_binary_info[op].name, nargs);
        return NULL;
    }
    if (nargs == 3) {
        alpha = PyFloat_AsDouble(args[2]);
        if (alpha == -1 && PyErr_Occurred())
            return NULL;
    }
    if (parse_out(kwnames, args, nargs, &out, &alpha) != 0)
        return NULL;
    if (!tt_check(args[0]) && !tt_check(args[1])) {
        PyErr_Format(PyExc_TypeError, "%s(): argument 'input' must be Tensor, not %s", tb_pw_binary_info[op].name,
                     Py_TYPE(args[0])->tp_name);
        return NULL;
    }
    PyObject *r = tt_binary(op, args[0], args[1], alpha, out);
    if (r == Py_NotImplemented) {
        Py_DECREF(r);
        PyErr_Format(PyExc_TypeError, "%s(): unsupported operand types %s and %s", tb_pw_binary_info[op].name,
                     Py_TYPE(args[0])->tp_name, Py_TYPE(args[1])->tp_name);
        return NULL;
    }
    return r;
}

#define UNARY_BINDING(id, name, simd)                                                                       \
    static PyObject *bind_##name(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) { \
        return call_unary(TB_PW_##id, args, nargs, kwnames);                                                \
    }
TB_PW_UNARY_LIST(UNARY_BINDING)
#undef UNARY_BINDING
#define BINARY_BINDING(id, name, simd)                                                                       \
    static PyObject *bindb_##name(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) { \
        return call_binary(TB_PWB_##id, args, nargs, kwnames);                                               \
    }
TB_PW_BINARY_LIST(BINARY_BINDING)
#undef BINARY_BINDING

static PyMethodDef table_functions[] = {
#define UNARY_DEF(id, name, simd) {"_tt_" #name, (PyCFunction)(void (*)(void))bind_##name, METH_FASTCALL | METH_KEYWORDS, NULL},
    TB_PW_UNARY_LIST(UNARY_DEF)
#undef UNARY_DEF
#define BINARY_DEF(id, name, simd) {"_tt_" #name, (PyCFunction)(void (*)(void))bindb_##name, METH_FASTCALL | METH_KEYWORDS, NULL},
    TB_PW_BINARY_LIST(BINARY_DEF)
#undef BINARY_DEF
    {NULL},
};

/* _tt_unary_params(op_name_index, x, alpha, lo, hi, out): the ops with scalars (clamp, elu, ...) */
static PyObject *py_unary_params(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "_tt_unary_params(op, x, alpha, lo, hi, out)");
        return NULL;
    }
    long op = PyLong_AsLong(args[0]);
    tb_pw_params p = {PyFloat_AsDouble(args[2]), PyFloat_AsDouble(args[3]), PyFloat_AsDouble(args[4])};
    if (PyErr_Occurred())
        return NULL;
    if (op < 0 || op >= TB_PW_UNARY_COUNT) {
        PyErr_SetString(PyExc_ValueError, "unknown unary op");
        return NULL;
    }
    return tt_unary((int)op, args[1], &p, args[5] == Py_None ? NULL : args[5]);
}

/* _tt_inplace(op_index, is_binary, self, other_or_None, alpha) */
static PyObject *py_inplace(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "_tt_inplace(op, is_binary, self, other, alpha)");
        return NULL;
    }
    long op = PyLong_AsLong(args[0]);
    double alpha = PyFloat_AsDouble(args[4]);
    if (PyErr_Occurred())
        return NULL;
    if (!tt_check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "in-place op on a non-tensor");
        return NULL;
    }
    if (PyObject_IsTrue(args[1]))
        return tt_inplace_binary((int)op, args[2], args[3], alpha);
    /* unary in place: out = op(self) written back */
    if (check_inplace(args[2]) != 0)
        return NULL;
    PyObject *self = args[2];
    if (!tt_needs_grad(1, &self))
        return tt_unary((int)op, self, NULL, self);
    PyObject *old_object = clone_for_inplace(self);
    if (!old_object)
        return NULL;
    PyObject *result = tt_unary((int)op, old_object, NULL, NULL);
    Py_DECREF(old_object);
    return finish_inplace(self, result);
}

static PyObject *py_unary_names(PyObject *m, PyObject *unused) {
    PyObject *list = PyList_New(TB_PW_UNARY_COUNT);
    for (int i = 0; list && i < TB_PW_UNARY_COUNT; i++)
        PyList_SET_ITEM(list, i, PyUnicode_FromString(tb_pw_unary_info[i].name));
    return list;
}
static PyObject *py_binary_names(PyObject *m, PyObject *unused) {
    PyObject *list = PyList_New(TB_PW_BINARY_COUNT);
    for (int i = 0; list && i < TB_PW_BINARY_COUNT; i++)
        PyList_SET_ITEM(list, i, PyUnicode_FromString(tb_pw_binary_info[i].name));
    return list;
}
static PyObject *py_op_kinds(PyObject *m, PyObject *unused) {
    static const char *kinds[] = {"float", "same", "test", "arith", "fdiv", "cmp", "logic", "bits"};
    PyObject *result = PyDict_New();
    for (int i = 0; result && i < TB_PW_UNARY_COUNT; i++) {
        PyObject *v = Py_BuildValue("(ss)", "unary", kinds[tb_pw_unary_info[i].kind]);
        PyDict_SetItemString(result, tb_pw_unary_info[i].name, v);
        Py_XDECREF(v);
    }
    for (int i = 0; result && i < TB_PW_BINARY_COUNT; i++) {
        PyObject *v = Py_BuildValue("(ss)", "binary", kinds[tb_pw_binary_info[i].kind]);
        PyDict_SetItemString(result, tb_pw_binary_info[i].name, v);
        Py_XDECREF(v);
    }
    return result;
}

static PyObject *py_cache_info(PyObject *m, PyObject *unused) {
    long size = 0;
    for (int i = 0; i < DISPATCH_SLOTS; i++)
        size += dispatch_cache[i].valid;
    return Py_BuildValue("{s:K,s:K,s:l,s:i,s:O}", "hits", (unsigned long long)cache_hits, "misses",
                         (unsigned long long)cache_misses, "size", size, "capacity", DISPATCH_SLOTS, "enabled",
                         cache_enabled ? Py_True : Py_False);
}
static PyObject *py_cache_clear(PyObject *m, PyObject *unused) {
    memset(dispatch_cache, 0, sizeof dispatch_cache);
    cache_hits = cache_misses = 0;
    Py_RETURN_NONE;
}
static PyObject *py_cache_enable(PyObject *m, PyObject *arg) {
    cache_enabled = PyObject_IsTrue(arg);
    Py_RETURN_NONE;
}

static PyObject *py_result_type(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    tb_result_type_state state;
    tb_result_type_init(&state);
    for (Py_ssize_t i = 0; i < nargs; i++) {
        operand x;
        int r = parse_operand(args[i], &x);
        if (r < 0)
            return NULL;
        if (r == 0) {
            tb_dtype d;
            if (tt_dtype_from_object(args[i], &d) != 0)
                return NULL;
            tb_result_type_add(&state, d, 1, 0, tt_default_dtype);
            continue;
        }
        tb_result_type_add(&state, x.dtype, x.is_scalar ? 0 : x.value.tensor->ndim, x.is_scalar, tt_default_dtype);
    }
    return Py_NewRef(tt_dtype_objects[tb_result_type_finish(&state)]);
}

static PyObject *py_promote_types(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    tb_dtype a, b;
    if (nargs != 2 || tt_dtype_from_object(args[0], &a) != 0 || tt_dtype_from_object(args[1], &b) != 0)
        return NULL;
    return Py_NewRef(tt_dtype_objects[tb_promote_types(a, b)]);
}

static PyMethodDef op_functions[] = {
    {"_tt_unary_params", (PyCFunction)(void (*)(void))py_unary_params, METH_FASTCALL, NULL},
    {"_tt_inplace", (PyCFunction)(void (*)(void))py_inplace, METH_FASTCALL, NULL},
    {"_tt_unary_names", py_unary_names, METH_NOARGS, NULL},
    {"_tt_binary_names", py_binary_names, METH_NOARGS, NULL},
    {"_tt_op_kinds", py_op_kinds, METH_NOARGS, NULL},
    {"_tt_cache_info", py_cache_info, METH_NOARGS, NULL},
    {"_tt_cache_clear", py_cache_clear, METH_NOARGS, NULL},
    {"_tt_cache_enable", py_cache_enable, METH_O, NULL},
    {"_tt_result_type", (PyCFunction)(void (*)(void))py_result_type, METH_FASTCALL, NULL},
    {"_tt_promote_types", (PyCFunction)(void (*)(void))py_promote_types, METH_FASTCALL, NULL},
    {NULL},
};

int tt_register_ops(PyObject *module) {
    if (PyModule_AddFunctions(module, table_functions) != 0)
        return -1;
    return PyModule_AddFunctions(module, op_functions);
}
