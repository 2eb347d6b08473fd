/* torch.optim's foreach steps for turbo_torch: `_tt_optim_step` takes one param group's lists of
 * parameters, gradients, state tensors and step counters and runs tb_optim_step over all of them
 * with the GIL released. No autograd node is recorded (optimizer steps run under no_grad). */
#include "eager.h"

#include "torchburn/alloc.h"
#include "torchburn/eager_optim.h"

enum { FLAG_NESTEROV = 1, FLAG_MAXIMIZE = 2, FLAG_AMSGRAD = 4, FLAG_DECOUPLED = 8, FLAG_CENTERED = 16 };

/* The i-th entry of an optional list: a tt_tensor, or NULL for None / an absent list. */
static int list_tensor(PyObject *list, Py_ssize_t i, const char *what, tb_tensor **out) {
    *out = NULL;
    if (list == Py_None)
        return 0;
    PyObject *item = PyList_GET_ITEM(list, i);
    if (item == Py_None)
        return 0;
    if (!tt_check(item)) {
        PyErr_Format(PyExc_TypeError, "optimizer step: %s[%zd] must be a Tensor, not %.100s", what, i,
                     Py_TYPE(item)->tp_name);
        return -1;
    }
    *out = tt_data(item);
    return 0;
}

static int check_list(PyObject *list, Py_ssize_t n, const char *what, int optional) {
    if (optional && list == Py_None)
        return 0;
    if (!PyList_Check(list) || PyList_GET_SIZE(list) != n) {
        PyErr_Format(PyExc_ValueError, "optimizer step: %s must be a list of %zd entries%s", what, n,
                     optional ? " or None" : "");
        return -1;
    }
    return 0;
}

/* _tt_optim_step(kind, params, grads, state0, state1, state2, steps, fresh,
 *                lr, weight_decay, momentum, dampening, beta1, beta2, eps, alpha, lr_decay, flags) */
static PyObject *optim_step(PyObject *self, PyObject *args) {
    (void)self;
    int kind, flags;
    PyObject *params, *grads, *states[TB_OPTIM_MAX_STATE], *steps, *fresh;
    tb_optim_options o = {0};
    if (!PyArg_ParseTuple(args, "iOOOOOOOdddddddddi:_tt_optim_step", &kind, &params, &grads, &states[0], &states[1],
                          &states[2], &steps, &fresh, &o.lr, &o.weight_decay, &o.momentum, &o.dampening, &o.beta1,
                          &o.beta2, &o.eps, &o.alpha, &o.lr_decay, &flags))
        return NULL;
    if (kind < 0 || kind >= TB_OPTIM_COUNT)
        return PyErr_Format(PyExc_ValueError, "optimizer step: unknown kind %d", kind), NULL;
    o.nesterov = flags & FLAG_NESTEROV;
    o.maximize = flags & FLAG_MAXIMIZE;
    o.amsgrad = flags & FLAG_AMSGRAD;
    o.decoupled_weight_decay = flags & FLAG_DECOUPLED;
    o.centered = flags & FLAG_CENTERED;
    if (!PyList_Check(params))
        return PyErr_SetString(PyExc_TypeError, "optimizer step: params must be a list"), NULL;
    Py_ssize_t n = PyList_GET_SIZE(params);
    if (check_list(grads, n, "grads", 0) || check_list(states[0], n, "state0", 1) ||
        check_list(states[1], n, "state1", 1) || check_list(states[2], n, "state2", 1) ||
        check_list(steps, n, "steps", 1) || check_list(fresh, n, "fresh", 1))
        return NULL;
    tb_optim_slot *slots = NULL;
    if (n && tb_alloc(sizeof *slots * (size_t)n, TB_ALLOC_ZERO, (void **)&slots) != TB_OK)
        return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++) {
        tb_tensor *grad;
        if (list_tensor(params, i, "params", &slots[i].param) || list_tensor(grads, i, "grads", &grad) ||
            list_tensor(steps, i, "steps", &slots[i].step))
            goto fail;
        slots[i].grad = grad;
        for (int k = 0; k < TB_OPTIM_MAX_STATE; k++)
            if (list_tensor(states[k], i, "state", &slots[i].state[k]))
                goto fail;
        if (fresh != Py_None) {
            int truth = PyObject_IsTrue(PyList_GET_ITEM(fresh, i));
            if (truth < 0)
                goto fail;
            slots[i].fresh = truth;
        }
    }
    tb_status status;
    Py_BEGIN_ALLOW_THREADS
    status = tb_optim_step((tb_optim_kind)kind, &o, slots, n);
    Py_END_ALLOW_THREADS
    tb_free(slots);
    if (status != TB_OK)
        return tt_raise(status);
    Py_RETURN_NONE;
fail:
    tb_free(slots);
    return NULL;
}

static PyMethodDef optim_functions[] = {
    {"_tt_optim_step", optim_step, METH_VARARGS, "One foreach optimizer step over a param group (turbo_torch.optim)."},
    {NULL, NULL, 0, NULL},
};

int tt_register_optim(PyObject *module);
int tt_register_optim(PyObject *module) { return PyModule_AddFunctions(module, optim_functions); }
