/* turbo_torch's autograd in C: the node type, grad mode, the backward engine (dependency counting,
 * gradient accumulation, hooks, retain_graph, version checks of saved tensors) and its Python entry
 * points (Tensor.backward, autograd.grad, detach, retain_grad, register_hook). */
#include "eager.h"

#include <math.h>
#include <structmember.h>

_Thread_local int tt_grad_enabled = 1;
_Thread_local int tt_inference_mode = 0;
PyTypeObject *tt_node_type;
static unsigned engine_epoch;

tb_status tt_node_backward(tt_node *node, const tb_tensor *g, tb_tensor *grads);

/* ---- nodes ---- */

static PyObject *edge_of(PyObject *input) {
    if (!input)
        return NULL;
    tt_tensor *t = (tt_tensor *)input;
    if (t->grad_fn)
        return Py_NewRef(t->grad_fn);
    if (t->requires_grad)
        return Py_NewRef(input);
    return NULL;
}

tt_node *tt_node_new(tt_node_kind kind, int op, const char *name, int n_inputs, PyObject *const *inputs) {
    if (n_inputs > TT_MAX_EDGES) {
        PyErr_SetString(PyExc_RuntimeError, "autograd node with too many inputs");
        return NULL;
    }
    tt_node *node = (tt_node *)tt_node_type->tp_alloc(tt_node_type, 0);
    if (!node)
        return NULL;
    node->kind = kind;
    node->op = op;
    node->name = name;
    node->n_edges = n_inputs;
    node->scalar_side = -1;
    for (int i = 0; i < n_inputs; i++) {
        node->edges[i] = edge_of(inputs[i]);
        if (inputs[i]) {
            const tb_tensor *t = tt_data(inputs[i]);
            node->in_ndim[i] = t->ndim;
            memcpy(node->in_shape[i], t->shape, sizeof(int64_t) * (size_t)t->ndim);
            node->in_dtype[i] = t->dtype;
        }
    }
    return node;
}

void tt_node_save(tt_node *node, int i, const tb_tensor *tensor) {
    tb_tensor_release(&node->saved[i].tensor);
    tb_tensor_retain(tensor, &node->saved[i].tensor);
    node->saved[i].version = tt_version(tensor);
    node->saved[i].present = 1;
}

void tt_set_grad_fn(PyObject *result, tt_node *node) {
    Py_XSETREF(((tt_tensor *)result)->grad_fn, (PyObject *)node);
}

static void release_saved(tt_node *node) {
    for (int i = 0; i < TT_MAX_SAVED; i++) {
        tb_tensor_release(&node->saved[i].tensor);
        node->saved[i].present = 0;
    }
}

static int node_traverse(PyObject *self, visitproc visit, void *arg) {
    tt_node *n = (tt_node *)self;
    for (int i = 0; i < n->n_edges; i++)
        Py_VISIT(n->edges[i]);
    Py_VISIT(n->extra_edges);
    Py_VISIT(n->object);
    Py_VISIT(n->hooks);
    Py_VISIT(n->retain);
    Py_VISIT(Py_TYPE(self));
    return 0;
}

static int node_clear(PyObject *self) {
    tt_node *n = (tt_node *)self;
    for (int i = 0; i < n->n_edges; i++)
        Py_CLEAR(n->edges[i]);
    Py_CLEAR(n->extra_edges);
    Py_CLEAR(n->object);
    Py_CLEAR(n->hooks);
    Py_CLEAR(n->retain);
    return 0;
}

/* Deep graphs (long chains) are freed iteratively: the edges of a dying node are moved to a list
 * whose items die one at a time, instead of recursing through every node's dealloc. */
static void node_dealloc(PyObject *self) {
    PyTypeObject *type = Py_TYPE(self);
    tt_node *n = (tt_node *)self;
    PyObject_GC_UnTrack(self);
    if (n->weakrefs)
        PyObject_ClearWeakRefs(self);
    Py_TRASHCAN_BEGIN(self, node_dealloc)
    node_clear(self);
    release_saved(n);
    tb_tensor_release(&n->grad);
    type->tp_free(self);
    Py_DECREF(type);
    Py_TRASHCAN_END
}

static PyObject *node_name(PyObject *self, PyObject *unused) { return PyUnicode_FromString(((tt_node *)self)->name); }
static PyObject *node_repr(PyObject *self) { return PyUnicode_FromFormat("<%s object at %p>", ((tt_node *)self)->name, self); }

static PyObject *node_next_functions(PyObject *self, void *c) {
    tt_node *n = (tt_node *)self;
    PyObject *tuple = PyTuple_New(n->n_edges);
    for (int i = 0; tuple && i < n->n_edges; i++) {
        PyObject *e = n->edges[i];
        PyObject *item = Py_BuildValue("(Oi)", e && PyObject_TypeCheck(e, tt_node_type) ? e : Py_None, 0);
        PyTuple_SET_ITEM(tuple, i, item);
    }
    return tuple;
}

static PyObject *node_register_hook(PyObject *self, PyObject *hook) {
    tt_node *n = (tt_node *)self;
    if (!n->hooks && !(n->hooks = PyList_New(0)))
        return NULL;
    if (PyList_Append(n->hooks, hook) != 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef node_methods[] = {
    {"name", node_name, METH_NOARGS, "The node's name, e.g. 'AddBackward0'."},
    {"_register_output_hook", node_register_hook, METH_O, NULL},
    {NULL},
};
static PyGetSetDef node_getset[] = {
    {"next_functions", node_next_functions, NULL, "((node or None, 0), ...) for each input.", NULL},
    {NULL},
};
static PyMemberDef node_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(tt_node, weakrefs), READONLY, NULL},
    {NULL},
};

static PyType_Slot node_slots[] = {
    {Py_tp_dealloc, node_dealloc}, {Py_tp_traverse, node_traverse}, {Py_tp_clear, node_clear},
    {Py_tp_repr, node_repr},       {Py_tp_methods, node_methods},   {Py_tp_getset, node_getset},
    {Py_tp_members, node_members}, {0, NULL},
};
static PyType_Spec node_spec = {
    .name = "turbo_torch.autograd.Node",
    .basicsize = sizeof(tt_node),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .slots = node_slots,
};

/* ---- the engine ---- */

typedef struct capture {
    PyObject *target; /* a leaf tt_tensor, or the tt_node of a non-leaf input */
    tb_tensor grad;
} capture;

typedef struct leaf_grad {
    PyObject *leaf; /* borrowed: the graph holds it */
    tb_tensor grad;
} leaf_grad;

typedef struct engine {
    tt_node **nodes;
    Py_ssize_t count, capacity;
    leaf_grad *leaves; /* every contribution to a leaf is summed before its hooks run, as in torch */
    int n_leaves, leaf_capacity;
    capture *captures;
    int n_captures;
    int retain_graph;
} engine;

static int push(engine *e, tt_node *node) {
    if (e->count == e->capacity) {
        Py_ssize_t cap = e->capacity ? e->capacity * 2 : 64;
        tt_node **grown = PyMem_Realloc(e->nodes, (size_t)cap * sizeof *grown);
        if (!grown) {
            PyErr_NoMemory();
            return -1;
        }
        e->nodes = grown;
        e->capacity = cap;
    }
    e->nodes[e->count++] = node;
    return 0;
}

/* Adds g into *acc (or moves it there). */
static tb_status accumulate(tb_tensor *acc, tb_tensor *g) {
    if (!acc->storage) {
        *acc = *g;
        memset(g, 0, sizeof *g);
        return TB_OK;
    }
    tb_tensor sum = {0};
    tb_status status = tb_eager_binary(TB_PWB_ADD, (tb_eager_operand){.tensor = acc}, (tb_eager_operand){.tensor = g},
                                       NULL, acc->dtype, acc->dtype, &sum);
    tb_tensor_release(g);
    if (status != TB_OK)
        return status;
    tb_tensor_release(acc);
    *acc = sum;
    return TB_OK;
}

static capture *find_capture(engine *e, PyObject *target) {
    for (int i = 0; i < e->n_captures; i++)
        if (e->captures[i].target == target)
            return &e->captures[i];
    return NULL;
}

/* Calls each hook(grad); a non-None return replaces grad. */
static int run_hooks(PyObject *hooks, tb_tensor *g) {
    if (!hooks)
        return 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(hooks); i++) {
        tb_tensor alias;
        tb_tensor_retain(g, &alias);
        PyObject *arg = tt_wrap(&alias);
        if (!arg)
            return -1;
        PyObject *r = PyObject_CallOneArg(PyList_GET_ITEM(hooks, i), arg);
        Py_DECREF(arg);
        if (!r)
            return -1;
        if (r != Py_None) {
            if (!tt_check(r)) {
                Py_DECREF(r);
                PyErr_SetString(PyExc_TypeError, "a gradient hook must return a Tensor or None");
                return -1;
            }
            tb_tensor_release(g);
            tb_tensor_retain(tt_data(r), g);
        }
        Py_DECREF(r);
    }
    return 0;
}

static int accumulate_leaf(engine *e, PyObject *leaf, tb_tensor *g) {
    for (int i = 0; i < e->n_leaves; i++)
        if (e->leaves[i].leaf == leaf)
            return accumulate(&e->leaves[i].grad, g) == TB_OK ? 0 : (tt_raise(TB_ERR_OUT_OF_MEMORY), -1);
    if (e->n_leaves == e->leaf_capacity) {
        int cap = e->leaf_capacity ? e->leaf_capacity * 2 : 16;
        leaf_grad *grown = PyMem_Realloc(e->leaves, (size_t)cap * sizeof *grown);
        if (!grown) {
            tb_tensor_release(g);
            PyErr_NoMemory();
            return -1;
        }
        e->leaves = grown;
        e->leaf_capacity = cap;
    }
    e->leaves[e->n_leaves].leaf = leaf;
    memset(&e->leaves[e->n_leaves].grad, 0, sizeof(tb_tensor));
    tb_status status = accumulate(&e->leaves[e->n_leaves].grad, g);
    e->n_leaves++;
    return status == TB_OK ? 0 : (tt_raise(status), -1);
}

/* Runs the leaf's hooks on its summed gradient, then stores it (.grad, or the capture of autograd.grad). */
static int flush_leaf(engine *e, PyObject *leaf, tb_tensor *g) {
    tt_tensor *t = (tt_tensor *)leaf;
    if (run_hooks(t->hooks, g) != 0)
        return -1;
    if (e->captures) {
        capture *c = find_capture(e, leaf);
        tb_status status = c ? accumulate(&c->grad, g) : TB_OK;
        tb_tensor_release(g);
        return status == TB_OK ? 0 : (tt_raise(status), -1);
    }
    if (!t->grad) {
        /* keep a fresh contiguous tensor: the gradient must not alias anything the user holds */
        tb_tensor fresh;
        tb_status status;
        if (g->storage && atomic_load(&g->storage->refcount) == 1 && tb_tensor_is_contiguous(g) &&
            g->dtype == tt_data(leaf)->dtype && g->offset == 0) {
            fresh = *g;
            memset(g, 0, sizeof *g);
            status = TB_OK;
        } else {
            status = tb_tensor_empty(tt_data(leaf)->dtype, g->ndim, g->shape, 0, &fresh);
            if (status == TB_OK)
                status = tb_tensor_copy(&fresh, g);
            tb_tensor_release(g);
        }
        if (status != TB_OK)
            return tt_raise(status), -1;
        t->grad = tt_wrap(&fresh);
        return t->grad ? 0 : -1;
    }
    tb_status status = tb_eager_binary(TB_PWB_ADD, (tb_eager_operand){.tensor = tt_data(t->grad)},
                                       (tb_eager_operand){.tensor = g}, NULL, tt_data(t->grad)->dtype,
                                       tt_data(t->grad)->dtype, tt_data(t->grad));
    tb_tensor_release(g);
    if (status != TB_OK)
        return tt_raise(status), -1;
    tt_bump_version(tt_data(t->grad));
    return 0;
}

static int check_saved(tt_node *node) {
    if (node->released) {
        PyErr_SetString(PyExc_RuntimeError,
                        "Trying to backward through the graph a second time (or directly access saved tensors after "
                        "they have already been freed). Saved intermediate values of the graph are freed when you call "
                        ".backward() or autograd.grad(). Specify retain_graph=True if you need to backward through the "
                        "graph a second time or if you need to access saved tensors after calling backward.");
        return -1;
    }
    for (int i = 0; i < TT_MAX_SAVED; i++) {
        tt_saved *s = &node->saved[i];
        if (s->present && tt_version(&s->tensor) != s->version) {
            char shape[96];
            PyErr_Format(PyExc_RuntimeError,
                         "one of the variables needed for gradient computation has been modified by an inplace "
                         "operation: [%s %s], which is output 0 of %s, is at version %llu; expected version %llu "
                         "instead.", tb_dtype_name(s->tensor.dtype),
                         tb_shape_string(s->tensor.ndim, s->tensor.shape, shape, sizeof shape), node->name,
                         (unsigned long long)tt_version(&s->tensor), (unsigned long long)s->version);
            return -1;
        }
    }
    return 0;
}

/* The gradient of an edge: summed down to the input's shape and cast to its dtype. */
static tb_status fit_to_input(tt_node *node, int i, tb_tensor *g) {
    if (g->ndim != node->in_ndim[i] || memcmp(g->shape, node->in_shape[i], sizeof(int64_t) * (size_t)g->ndim) != 0) {
        tb_tensor reduced;
        TB_TRY(tb_eager_sum_to(g, node->in_ndim[i], node->in_shape[i], &reduced));
        tb_tensor_release(g);
        *g = reduced;
    }
    if (g->dtype != node->in_dtype[i]) {
        tb_tensor cast;
        TB_TRY(tb_tensor_contiguous(g, node->in_dtype[i], &cast));
        tb_tensor_release(g);
        *g = cast;
    }
    return TB_OK;
}

static int run_node(engine *e, tt_node *node) {
    tb_tensor g = node->grad;
    memset(&node->grad, 0, sizeof node->grad);
    if (!g.storage)
        return 0;
    if (run_hooks(node->hooks, &g) != 0)
        goto fail;
    if (node->retain) {
        PyObject *owner = PyWeakref_GetObject(node->retain);
        if (owner && owner != Py_None) {
            tt_tensor *t = (tt_tensor *)owner;
            tb_tensor copy;
            tb_status status = tb_tensor_empty(g.dtype, g.ndim, g.shape, 0, &copy);
            if (status == TB_OK)
                status = tb_tensor_copy(&copy, &g);
            if (status != TB_OK) {
                tt_raise(status);
                goto fail;
            }
            if (t->grad) {
                status = accumulate(tt_data(t->grad), &copy);
                if (status != TB_OK) {
                    tt_raise(status);
                    goto fail;
                }
            } else {
                t->grad = tt_wrap(&copy);
            }
        }
    }
    if (e->captures) {
        capture *c = find_capture(e, (PyObject *)node);
        if (c) {
            tb_tensor alias;
            tb_tensor_retain(&g, &alias);
            if (accumulate(&c->grad, &alias) != TB_OK)
                goto fail_status;
        }
    }
    if (check_saved(node) != 0)
        goto fail;
    tb_tensor grads[TT_MAX_EDGES] = {{0}};
    tb_status status;
    Py_BEGIN_ALLOW_THREADS
    status = tt_node_backward(node, &g, grads);
    for (int i = 0; status == TB_OK && i < node->n_edges; i++)
        if (grads[i].storage)
            status = fit_to_input(node, i, &grads[i]);
    Py_END_ALLOW_THREADS
    tb_tensor_release(&g);
    if (status != TB_OK) {
        for (int i = 0; i < TT_MAX_EDGES; i++)
            tb_tensor_release(&grads[i]);
        tt_raise(status);
        return -1;
    }
    int result = 0;
    for (int i = 0; i < node->n_edges; i++) {
        PyObject *edge = node->edges[i];
        if (!edge || !grads[i].storage) {
            tb_tensor_release(&grads[i]);
            continue;
        }
        if (result == 0) {
            if (PyObject_TypeCheck(edge, tt_node_type)) {
                if (accumulate(&((tt_node *)edge)->grad, &grads[i]) != TB_OK) {
                    tt_raise(TB_ERR_OUT_OF_MEMORY);
                    result = -1;
                }
            } else if (accumulate_leaf(e, edge, &grads[i]) != 0) {
                result = -1;
            }
        }
        tb_tensor_release(&grads[i]);
    }
    if (!e->retain_graph) {
        release_saved(node);
        node->released = 1;
    }
    return result;
fail_status:
    tt_raise(TB_ERR_OUT_OF_MEMORY);
fail:
    tb_tensor_release(&g);
    return -1;
}

/* Runs backward from roots with their gradients (tb_tensor each, consumed). */
static int run_engine(engine *e, int n_roots, PyObject **roots, tb_tensor *root_grads) {
    unsigned epoch = ++engine_epoch;
    engine_epoch += engine_epoch == 0;
    /* collect the reachable nodes and count dependencies */
    Py_ssize_t start = 0;
    for (int r = 0; r < n_roots; r++) {
        tt_tensor *t = (tt_tensor *)roots[r];
        if (t->grad_fn) {
            tt_node *n = (tt_node *)t->grad_fn;
            if (n->epoch != epoch) {
                n->epoch = epoch;
                n->dependencies = 0;
                tb_tensor_release(&n->grad);
                if (push(e, n) != 0)
                    return -1;
            }
        }
    }
    for (; start < e->count; start++) {
        tt_node *n = e->nodes[start];
        for (int i = 0; i < n->n_edges; i++) {
            PyObject *edge = n->edges[i];
            if (!edge || !PyObject_TypeCheck(edge, tt_node_type))
                continue;
            tt_node *child = (tt_node *)edge;
            if (child->epoch != epoch) {
                child->epoch = epoch;
                child->dependencies = 0;
                tb_tensor_release(&child->grad);
                if (push(e, child) != 0)
                    return -1;
            }
            child->dependencies++;
        }
    }
    /* seed */
    for (int r = 0; r < n_roots; r++) {
        tt_tensor *t = (tt_tensor *)roots[r];
        if (t->grad_fn) {
            if (accumulate(&((tt_node *)t->grad_fn)->grad, &root_grads[r]) != TB_OK) {
                tt_raise(TB_ERR_OUT_OF_MEMORY);
                return -1;
            }
        } else if (accumulate_leaf(e, roots[r], &root_grads[r]) != 0) {
            return -1;
        }
    }
    /* process in dependency order: a node runs once every consumer has run */
    Py_ssize_t total = e->count;
    tt_node **ready = PyMem_Malloc(sizeof(tt_node *) * (size_t)(total ? total : 1));
    if (!ready) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t top = 0;
    for (Py_ssize_t i = 0; i < total; i++)
        if (e->nodes[i]->dependencies == 0)
            ready[top++] = e->nodes[i];
    int result = 0;
    while (top > 0) {
        tt_node *n = ready[--top];
        if (result == 0 && run_node(e, n) != 0)
            result = -1;
        for (int i = 0; i < n->n_edges; i++) {
            PyObject *edge = n->edges[i];
            if (edge && PyObject_TypeCheck(edge, tt_node_type)) {
                tt_node *child = (tt_node *)edge;
                if (--child->dependencies == 0)
                    ready[top++] = child;
            }
        }
    }
    PyMem_Free(ready);
    for (Py_ssize_t i = 0; i < total; i++)
        tb_tensor_release(&e->nodes[i]->grad);
    for (int i = 0; i < e->n_leaves; i++) {
        if (result == 0 && flush_leaf(e, e->leaves[i].leaf, &e->leaves[i].grad) != 0)
            result = -1;
        tb_tensor_release(&e->leaves[i].grad);
    }
    return result;
}

static int root_gradient(PyObject *root, PyObject *given, int index, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    if (!tt_check(root)) {
        PyErr_SetString(PyExc_TypeError, "backward: outputs must be Tensors");
        return -1;
    }
    if (!tt_requires_grad(root)) {
        PyErr_Format(PyExc_RuntimeError, "element %d of tensors does not require grad and does not have a grad_fn", index);
        return -1;
    }
    const tb_tensor *r = tt_data(root);
    if (given && given != Py_None) {
        if (!tt_check(given)) {
            PyErr_SetString(PyExc_TypeError, "gradient must be a Tensor or None");
            return -1;
        }
        const tb_tensor *g = tt_data(given);
        if (g->ndim != r->ndim || memcmp(g->shape, r->shape, sizeof(int64_t) * (size_t)r->ndim) != 0) {
            char a[96], b[96];
            PyErr_Format(PyExc_RuntimeError, "Mismatch in shape: grad_output[%d] has a shape of %s and output[%d] has a "
                         "shape of %s.", index, tb_shape_string(g->ndim, g->shape, a, sizeof a), index,
                         tb_shape_string(r->ndim, r->shape, b, sizeof b));
            return -1;
        }
        tb_tensor_retain(g, out);
        return 0;
    }
    if (tb_tensor_numel(r) != 1) {
        PyErr_SetString(PyExc_RuntimeError, "grad can be implicitly created only for scalar outputs");
        return -1;
    }
    tb_status status = tb_eager_full(r->dtype, r->ndim, r->shape, 1.0, out);
    return status == TB_OK ? 0 : (tt_raise(status), -1);
}

static void engine_free(engine *e) {
    PyMem_Free(e->nodes);
    for (int i = 0; i < e->n_leaves; i++)
        tb_tensor_release(&e->leaves[i].grad);
    PyMem_Free(e->leaves);
    for (int i = 0; i < e->n_captures; i++)
        tb_tensor_release(&e->captures[i].grad);
    PyMem_Free(e->captures);
}

/* backward(roots, grads, retain_graph) */
static PyObject *backward_impl(PyObject *roots, PyObject *grads, int retain_graph) {
    Py_ssize_t n = PySequence_Fast_GET_SIZE(roots);
    PyObject **items = PySequence_Fast_ITEMS(roots);
    tb_tensor *root_grads = PyMem_Calloc((size_t)(n ? n : 1), sizeof(tb_tensor));
    if (!root_grads)
        return PyErr_NoMemory();
    int failed = 0;
    for (Py_ssize_t i = 0; i < n && !failed; i++)
        failed = root_gradient(items[i], grads ? PySequence_Fast_GET_ITEM(grads, i) : NULL, (int)i, &root_grads[i]) != 0;
    engine e = {0};
    e.retain_graph = retain_graph;
    if (!failed)
        failed = run_engine(&e, (int)n, items, root_grads) != 0;
    for (Py_ssize_t i = 0; i < n; i++)
        tb_tensor_release(&root_grads[i]);
    PyMem_Free(root_grads);
    engine_free(&e);
    if (failed)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *tensor_backward(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"gradient", "retain_graph", "create_graph", "inputs", NULL};
    PyObject *gradient = Py_None, *retain = Py_None, *create = Py_False, *inputs = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|OOOO:backward", keywords, &gradient, &retain, &create, &inputs))
        return NULL;
    if (PyObject_IsTrue(create)) {
        PyErr_SetString(PyExc_NotImplementedError, "turbo_torch: create_graph=True (higher-order gradients) is not supported yet");
        return NULL;
    }
    if (inputs != Py_None) {
        PyErr_SetString(PyExc_NotImplementedError, "turbo_torch: backward(inputs=...) is not supported yet; use autograd.grad");
        return NULL;
    }
    PyObject *roots = PyTuple_Pack(1, self), *grads = PyTuple_Pack(1, gradient);
    PyObject *r = roots && grads ? backward_impl(roots, grads, retain != Py_None && PyObject_IsTrue(retain)) : NULL;
    Py_XDECREF(roots);
    Py_XDECREF(grads);
    return r;
}

/* _tt_backward(tensors, grad_tensors, retain_graph) */
static PyObject *py_backward(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "_tt_backward(tensors, grad_tensors, retain_graph)");
        return NULL;
    }
    PyObject *roots = PySequence_Fast(args[0], "tensors must be a sequence");
    if (!roots)
        return NULL;
    PyObject *grads = args[1] == Py_None ? NULL : PySequence_Fast(args[1], "grad_tensors must be a sequence");
    if (args[1] != Py_None && !grads) {
        Py_DECREF(roots);
        return NULL;
    }
    if (grads && PySequence_Fast_GET_SIZE(grads) != PySequence_Fast_GET_SIZE(roots)) {
        Py_DECREF(roots);
        Py_DECREF(grads);
        PyErr_SetString(PyExc_RuntimeError, "grad_tensors and tensors have different lengths");
        return NULL;
    }
    PyObject *r = backward_impl(roots, grads, PyObject_IsTrue(args[2]));
    Py_DECREF(roots);
    Py_XDECREF(grads);
    return r;
}

/* _tt_grad(outputs, inputs, grad_outputs, retain_graph, allow_unused) -> tuple */
static PyObject *py_grad(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "_tt_grad(outputs, inputs, grad_outputs, retain_graph, allow_unused)");
        return NULL;
    }
    PyObject *outputs = PySequence_Fast(args[0], "outputs must be a sequence");
    PyObject *inputs = outputs ? PySequence_Fast(args[1], "inputs must be a sequence") : NULL;
    PyObject *grads = inputs && args[2] != Py_None ? PySequence_Fast(args[2], "grad_outputs must be a sequence") : NULL;
    PyObject *result = NULL;
    engine e = {0};
    tb_tensor *root_grads = NULL;
    if (!inputs || (args[2] != Py_None && !grads))
        goto done;
    Py_ssize_t n_out = PySequence_Fast_GET_SIZE(outputs), n_in = PySequence_Fast_GET_SIZE(inputs);
    e.retain_graph = PyObject_IsTrue(args[3]);
    e.captures = PyMem_Calloc((size_t)(n_in ? n_in : 1), sizeof(capture));
    root_grads = PyMem_Calloc((size_t)(n_out ? n_out : 1), sizeof(tb_tensor));
    if (!e.captures || !root_grads) {
        PyErr_NoMemory();
        goto done;
    }
    e.n_captures = (int)n_in;
    for (Py_ssize_t i = 0; i < n_in; i++) {
        PyObject *x = PySequence_Fast_GET_ITEM(inputs, i);
        if (!tt_check(x) || !tt_requires_grad(x)) {
            PyErr_Format(PyExc_RuntimeError, "One of the differentiated Tensors does not require grad");
            goto done;
        }
        tt_tensor *t = (tt_tensor *)x;
        e.captures[i].target = t->grad_fn ? t->grad_fn : x;
    }
    for (Py_ssize_t i = 0; i < n_out; i++)
        if (root_gradient(PySequence_Fast_GET_ITEM(outputs, i), grads ? PySequence_Fast_GET_ITEM(grads, i) : NULL,
                          (int)i, &root_grads[i]) != 0)
            goto done;
    if (run_engine(&e, (int)n_out, PySequence_Fast_ITEMS(outputs), root_grads) != 0)
        goto done;
    result = PyTuple_New(n_in);
    for (Py_ssize_t i = 0; result && i < n_in; i++) {
        if (!e.captures[i].grad.storage) {
            if (!PyObject_IsTrue(args[4])) {
                Py_CLEAR(result);
                PyErr_SetString(PyExc_RuntimeError, "One of the differentiated Tensors appears to not have been used "
                                                    "in the graph. Set allow_unused=True if this is the desired behavior.");
                break;
            }
            PyTuple_SET_ITEM(result, i, Py_NewRef(Py_None));
            continue;
        }
        tb_tensor g = e.captures[i].grad;
        memset(&e.captures[i].grad, 0, sizeof g);
        PyObject *x = PySequence_Fast_GET_ITEM(inputs, i);
        if (g.dtype != tt_data(x)->dtype) {
            tb_tensor cast;
            if (tb_tensor_contiguous(&g, tt_data(x)->dtype, &cast) == TB_OK) {
                tb_tensor_release(&g);
                g = cast;
            }
        }
        PyObject *w = tt_wrap(&g);
        if (!w) {
            Py_CLEAR(result);
            break;
        }
        PyTuple_SET_ITEM(result, i, w);
    }
done:
    if (root_grads) {
        for (Py_ssize_t i = 0; outputs && i < PySequence_Fast_GET_SIZE(outputs); i++)
            tb_tensor_release(&root_grads[i]);
        PyMem_Free(root_grads);
    }
    engine_free(&e);
    Py_XDECREF(outputs);
    Py_XDECREF(inputs);
    Py_XDECREF(grads);
    return result;
}

/* ---- tensor methods of autograd ---- */

static PyObject *tensor_detach(PyObject *self, PyObject *unused) {
    tb_tensor alias;
    tb_tensor_retain(tt_data(self), &alias);
    return tt_wrap(&alias);
}
static PyObject *tensor_detach_(PyObject *self, PyObject *unused) {
    tt_tensor *t = (tt_tensor *)self;
    Py_CLEAR(t->grad_fn);
    t->requires_grad = 0;
    return Py_NewRef(self);
}
static PyObject *tensor_requires_grad_(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"requires_grad", NULL};
    PyObject *flag = Py_True;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:requires_grad_", keywords, &flag))
        return NULL;
    PyObject *setter = PyObject_SetAttrString(self, "requires_grad", flag) == 0 ? self : NULL;
    return setter ? Py_NewRef(self) : NULL;
}
static PyObject *tensor_retain_grad(PyObject *self, PyObject *unused) {
    tt_tensor *t = (tt_tensor *)self;
    if (!t->grad_fn) {
        if (!t->requires_grad) {
            PyErr_SetString(PyExc_RuntimeError, "can't retain_grad on Tensor that has requires_grad=False");
            return NULL;
        }
        Py_RETURN_NONE; /* leaves retain by definition */
    }
    tt_node *n = (tt_node *)t->grad_fn;
    if (!n->retain) {
        n->retain = PyWeakref_NewRef(self, NULL);
        if (!n->retain)
            return NULL;
    }
    t->retains_grad = 1;
    Py_RETURN_NONE;
}
static PyObject *tensor_register_hook(PyObject *self, PyObject *hook) {
    tt_tensor *t = (tt_tensor *)self;
    if (!tt_requires_grad(self)) {
        PyErr_SetString(PyExc_RuntimeError, "cannot register a hook on a tensor that doesn't require gradient");
        return NULL;
    }
    if (t->grad_fn)
        return node_register_hook(t->grad_fn, hook);
    if (!t->hooks && !(t->hooks = PyList_New(0)))
        return NULL;
    if (PyList_Append(t->hooks, hook) != 0)
        return NULL;
    Py_RETURN_NONE;
}

PyMethodDef tt_autograd_methods[] = {
    {"backward", (PyCFunction)(void (*)(void))tensor_backward, METH_VARARGS | METH_KEYWORDS,
     "backward(gradient=None, retain_graph=None): accumulates gradients into the leaves' .grad."},
    {"detach", tensor_detach, METH_NOARGS, "A tensor sharing data without autograd history."},
    {"detach_", tensor_detach_, METH_NOARGS, "Detaches this tensor in place."},
    {"requires_grad_", (PyCFunction)(void (*)(void))tensor_requires_grad_, METH_VARARGS | METH_KEYWORDS,
     "Sets requires_grad in place and returns self."},
    {"retain_grad", tensor_retain_grad, METH_NOARGS, "Keeps .grad for this non-leaf tensor during backward."},
    {"_register_hook", tensor_register_hook, METH_O, NULL},
    {NULL},
};

/* ---- grad mode ---- */

static PyObject *py_set_grad_enabled(PyObject *m, PyObject *arg) {
    int previous = tt_grad_enabled;
    tt_grad_enabled = PyObject_IsTrue(arg);
    return PyBool_FromLong(previous);
}
static PyObject *py_is_grad_enabled(PyObject *m, PyObject *unused) { return PyBool_FromLong(tt_grad_enabled); }
static PyObject *py_set_inference_mode(PyObject *m, PyObject *arg) {
    int previous = tt_inference_mode;
    tt_inference_mode = PyObject_IsTrue(arg);
    return PyBool_FromLong(previous);
}
static PyObject *py_is_inference_mode(PyObject *m, PyObject *unused) { return PyBool_FromLong(tt_inference_mode); }

static PyMethodDef autograd_functions[] = {
    {"_tt_backward", (PyCFunction)(void (*)(void))py_backward, METH_FASTCALL, NULL},
    {"_tt_grad", (PyCFunction)(void (*)(void))py_grad, METH_FASTCALL, NULL},
    {"_tt_set_grad_enabled", py_set_grad_enabled, METH_O, NULL},
    {"_tt_is_grad_enabled", py_is_grad_enabled, METH_NOARGS, NULL},
    {"_tt_set_inference_mode", py_set_inference_mode, METH_O, NULL},
    {"_tt_is_inference_mode_enabled", py_is_inference_mode, METH_NOARGS, NULL},
    {NULL},
};

int tt_register_autograd(PyObject *module) {
    PyObject *type = PyType_FromModuleAndSpec(module, &node_spec, NULL);
    if (!type)
        return -1;
    tt_node_type = (PyTypeObject *)type;
    if (PyModule_AddObjectRef(module, "EagerNode", type) != 0)
        return -1;
    return PyModule_AddFunctions(module, autograd_functions);
}
