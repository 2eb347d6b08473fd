/* Shared declarations of turbo_torch's C layer inside torchburn._C: the eager Tensor type (a subclass
 * of torchburn._C.Tensor with autograd state), autograd nodes and the engine, and the op dispatcher. */
#ifndef TORCHBURN_PYEXT_EAGER_H
#define TORCHBURN_PYEXT_EAGER_H

#include "pyext.h"
#include "torchburn/eager.h"

/* An eager tensor: the view plus autograd state. grad_fn is NULL for leaves. */
typedef struct tt_tensor {
    tb_py_tensor base;
    PyObject *grad;    /* tt_tensor or NULL */
    PyObject *grad_fn; /* tt_node or NULL */
    PyObject *hooks;   /* list of callables (leaves), or NULL */
    char requires_grad; /* leaves only; a non-leaf requires grad iff grad_fn != NULL */
    char retains_grad;
    char is_wrapped_number; /* internal 0-dim tensors made from Python scalars */
} tt_tensor;

extern PyTypeObject *tt_tensor_type;
extern PyTypeObject *tt_node_type;

static inline int tt_check(PyObject *o) { return PyObject_TypeCheck(o, tt_tensor_type); }
static inline tb_tensor *tt_data(PyObject *o) { return &((tb_py_tensor *)o)->tensor; }
static inline int tt_requires_grad(PyObject *o) {
    tt_tensor *t = (tt_tensor *)o;
    return t->requires_grad || t->grad_fn != NULL;
}

/* Wraps a result (takes the reference; *tensor is zeroed). */
PyObject *tt_wrap(tb_tensor *tensor);
/* Raises the exception PyTorch raises for a status (RuntimeError for most, TypeError for dtype
 * errors of argument kinds, IndexError for bad indices). */
PyObject *tt_raise(tb_status status);

/* The registered Python objects of the package: dtype objects by tb_dtype, torch.Size. */
extern PyObject *tt_dtype_objects[TB_DTYPE_COUNT];
extern PyObject *tt_size_type;
extern tb_dtype tt_default_dtype;
int tt_dtype_from_object(PyObject *object, tb_dtype *out); /* 0, or -1 with TypeError */

/* ---- grad mode ---- */
extern _Thread_local int tt_grad_enabled;
extern _Thread_local int tt_inference_mode;

/* ---- autograd nodes ---- */
enum { TT_MAX_EDGES = 8, TT_MAX_SAVED = 3 };

typedef enum tt_node_kind {
    TT_NODE_UNARY, TT_NODE_BINARY, TT_NODE_REDUCE, TT_NODE_VAR, TT_NODE_NORM, TT_NODE_MAX_DIM,
    TT_NODE_CUMULATIVE, TT_NODE_MATMUL, TT_NODE_VIEW, TT_NODE_PERMUTE, TT_NODE_EXPAND, TT_NODE_SLICE,
    TT_NODE_SELECT, TT_NODE_CAST, TT_NODE_CAT, TT_NODE_WHERE, TT_NODE_SOFTMAX, TT_NODE_INDEX,
    TT_NODE_FLIP, TT_NODE_MASKED_FILL, TT_NODE_GATHER, TT_NODE_SCATTER, TT_NODE_INDEX_ADD, TT_NODE_NN, TT_NODE_PYTHON,
    TT_NODE_RNN, /* the fused LSTM layer (eager_rnn.c) */
} tt_node_kind;

typedef struct tt_saved {
    tb_tensor tensor;
    uint64_t version; /* storage version when saved */
    int present;
} tt_saved;

typedef struct tt_node {
    PyObject_HEAD
    tt_node_kind kind;
    int op;                      /* the op id within the kind */
    const char *name;            /* "AddBackward0" */
    tb_pw_params params;
    int n_edges;
    PyObject *edges[TT_MAX_EDGES]; /* next node, a leaf tt_tensor (accumulate), or NULL (no grad) */
    PyObject *extra_edges;        /* list for cat with more inputs, or NULL */
    tt_saved saved[TT_MAX_SAVED];
    double scalars[2];            /* operand scalars of binary ops */
    int scalar_side;              /* binary: -1 none, 0 a is a scalar, 1 b is a scalar */
    int in_ndim[TT_MAX_EDGES];
    int64_t in_shape[TT_MAX_EDGES][TB_MAX_DIMS];
    tb_dtype in_dtype[TT_MAX_EDGES];
    int64_t ints[TB_MAX_DIMS + 4]; /* dims, mask, keepdim, ... by kind */
    PyObject *object;             /* kind-specific Python state (index, sizes of cat, a Function) */
    PyObject *hooks;              /* grad hooks of the output (register_hook on a non-leaf) */
    PyObject *retain;             /* weakref to the output tensor when it retains grad */
    int released;                 /* saved tensors freed by a backward without retain_graph */
    /* engine scratch */
    unsigned epoch; /* the backward pass that last visited the node */
    int dependencies;
    tb_tensor grad;
    PyObject *weakrefs;
} tt_node;

/* A new node of `kind` for an op whose differentiable inputs are `inputs` (tt_tensor or NULL for
 * non-tensor/non-differentiable operands). Returns NULL with an exception on failure. */
tt_node *tt_node_new(tt_node_kind kind, int op, const char *name, int n_inputs, PyObject *const *inputs);
/* Saves a tensor (with the storage version) in slot i. */
void tt_node_save(tt_node *node, int i, const tb_tensor *tensor);
/* Attaches node as grad_fn of result (steals the node reference). */
void tt_set_grad_fn(PyObject *result, tt_node *node);
/* Whether an op on these inputs must record a node. */
int tt_needs_grad(int n, PyObject *const *inputs);

/* The storage version counter (bumped by every in-place write). */
static inline uint64_t tt_version(const tb_tensor *t) { return t->storage ? t->storage->version : 0; }
static inline void tt_bump_version(const tb_tensor *t) {
    if (t->storage)
        t->storage->version++;
}

int tt_register_tensor(PyObject *module);
int tt_register_autograd(PyObject *module);
int tt_register_ops(PyObject *module);
int tt_register_index(PyObject *module);

/* Dispatch entry points shared by the number protocol, the methods and the module functions. */
PyObject *tt_binary(int op, PyObject *a, PyObject *b, double alpha, PyObject *out);
PyObject *tt_unary(int op, PyObject *x, const tb_pw_params *params, PyObject *out);
PyObject *tt_inplace_binary(int op, PyObject *self, PyObject *other, double alpha);
PyObject *tt_matmul(PyObject *a, PyObject *b);
PyObject *tt_view_op(PyObject *x, int kind, const int64_t *args, int nargs);
PyObject *tt_getitem(PyObject *self, PyObject *index);
int tt_setitem(PyObject *self, PyObject *index, PyObject *value);
/* Converts a Python scalar or tensor to a tt_tensor of dtype (NULL on error). */
PyObject *tt_as_tensor(PyObject *object, int dtype);

#endif
