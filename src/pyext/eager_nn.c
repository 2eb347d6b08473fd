/* turbo_torch's convolution and pooling: the C kernels of ops_nn.h (the same ones the compile
 * backend runs; float32, and float64 computed in double) with autograd nodes whose backward calls
 * their backward kernels. The transposed
 * convolution has no loops of its own: it is the input-gradient of a convolution (see
 * conv_transpose2d below), so it runs on the convolution backward kernels. */
#include "eager_nn.h"

#include "torchburn/alloc.h"
#include "torchburn/ops.h"
#include "torchburn/ops_nn.h"

/* linear backward: x [..., K], w [N, K], g [..., N] -> gx = g w, gw = g2^T x2, gb = column sums of g2 */
static tb_status linear_backward(tt_node *node, const tb_tensor *g, tb_tensor *grads) {
    const tb_tensor *x = &node->saved[0].tensor, *w = &node->saved[1].tensor;
    int64_t n = w->shape[0], k = w->shape[1];
    if (node->edges[0])
        TB_TRY(tb_eager_matmul(g, w, &grads[0]));
    tb_tensor g2 = {0}, x2 = {0}, gt = {0};
    tb_status status = tb_tensor_reshape(g, 2, (int64_t[]){-1, n}, &g2);
    if (status == TB_OK && node->edges[1]) {
        status = tb_tensor_reshape(x, 2, (int64_t[]){-1, k}, &x2);
        if (status == TB_OK)
            status = tb_tensor_transpose(&g2, 0, 1, &gt);
        if (status == TB_OK)
            status = tb_eager_matmul(&gt, &x2, &grads[1]);
    }
    if (status == TB_OK && node->n_edges > 2 && node->edges[2])
        status = tb_eager_reduce(TB_EAGER_REDUCE_SUM, &g2, 1u, false, g->dtype, &grads[2]);
    tb_tensor_release(&g2);
    tb_tensor_release(&x2);
    tb_tensor_release(&gt);
    return status;
}

enum {
    NN_CONV2D = TT_NN_CONV2D,
    NN_MAX_POOL2D = TT_NN_MAX_POOL2D,
    NN_AVG_POOL2D = TT_NN_AVG_POOL2D,
    NN_ADAPTIVE_AVG_POOL2D = TT_NN_ADAPTIVE_AVG_POOL2D,
    NN_LINEAR = TT_NN_LINEAR,
    NN_CONV_TRANSPOSE2D = TT_NN_CONV_TRANSPOSE2D,
};

/* conv_transpose2d backward: y = conv_transpose(x, w) + b means x's gradient is the plain convolution of g
 * with w, w's gradient is the weight-gradient of the convolution that maps g's shape to x's (input g,
 * output gradient x), and b's the per-channel sums of g. */
static tb_status conv_transpose2d_backward(tt_node *node, const tb_conv2d_params *p, const tb_tensor *g,
                                           tb_tensor *grads) {
    const tb_tensor *x = &node->saved[0].tensor, *w = &node->saved[1].tensor;
    if (node->edges[0])
        TB_TRY(tb_op_conv2d(g, w, NULL, p, &grads[0]));
    if (node->edges[1]) {
        bool mask[3] = {false, true, false};
        tb_tensor unused_input = {0}, unused_bias = {0};
        TB_TRY(tb_op_conv2d_backward(x, g, w, p, mask, &unused_input, &grads[1], &unused_bias));
    }
    if (node->n_edges > 2 && node->edges[2])
        TB_TRY(tb_eager_reduce(TB_EAGER_REDUCE_SUM, g, 1u | 4u | 8u, false, g->dtype, &grads[2]));
    return TB_OK;
}

static int int_pair(PyObject *o, int64_t out[2], const char *what) {
    if (PyLong_Check(o)) {
        out[0] = out[1] = PyLong_AsLongLong(o);
        return PyErr_Occurred() ? -1 : 0;
    }
    PyObject *seq = PySequence_Fast(o, what);
    if (!seq)
        return -1;
    if (PySequence_Fast_GET_SIZE(seq) != 2 && PySequence_Fast_GET_SIZE(seq) != 1) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_RuntimeError, "%s must be an int or a pair of ints", what);
        return -1;
    }
    out[0] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, 0));
    out[1] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, PySequence_Fast_GET_SIZE(seq) - 1));
    Py_DECREF(seq);
    return PyErr_Occurred() ? -1 : 0;
}

/* The node keeps the op's geometry in ints: conv [stride2, pad2, dilation2, groups, extra2],
 * pools [kernel2, stride2, pad2, dilation2, ceil, count_include_pad, divisor] */
tb_status tt_nn_backward(tt_node *node, const tb_tensor *g, tb_tensor *grads);
tb_status tt_nn_backward(tt_node *node, const tb_tensor *g, tb_tensor *grads) {
    const tb_tensor *x = &node->saved[0].tensor;
    switch (node->op) {
    case NN_CONV2D: {
        tb_conv2d_params p = {{node->ints[0], node->ints[1]}, {node->ints[2], node->ints[3]},
                              {node->ints[9], node->ints[10]}, {node->ints[4], node->ints[5]}, node->ints[6]};
        bool mask[3] = {node->edges[0] != NULL, node->edges[1] != NULL, node->n_edges > 2 && node->edges[2] != NULL};
        tb_tensor gi = {0}, gw = {0}, gb = {0};
        TB_TRY(tb_op_conv2d_backward(g, x, &node->saved[1].tensor, &p, mask, &gi, &gw, &gb));
        grads[0] = gi;
        grads[1] = gw;
        if (node->n_edges > 2)
            grads[2] = gb;
        else
            tb_tensor_release(&gb);
        return TB_OK;
    }
    case NN_MAX_POOL2D: return tb_op_max_pool2d_backward(g, x, &node->saved[1].tensor, &grads[0]);
    case NN_AVG_POOL2D: {
        tb_pool2d_params p = {{node->ints[0], node->ints[1]}, {node->ints[2], node->ints[3]},
                              {node->ints[4], node->ints[5]}, {1, 1}, node->ints[8] != 0, node->ints[9] != 0,
                              node->ints[10]};
        return tb_op_avg_pool2d_backward(g, x, &p, &grads[0]);
    }
    case NN_ADAPTIVE_AVG_POOL2D: return tb_op_adaptive_avg_pool2d_backward(g, x, &grads[0]);
    case NN_LINEAR: return linear_backward(node, g, grads);
    case NN_CONV_TRANSPOSE2D: {
        tb_conv2d_params p = {{node->ints[0], node->ints[1]}, {node->ints[2], node->ints[3]}, {0, 0},
                              {node->ints[4], node->ints[5]}, node->ints[6]};
        return conv_transpose2d_backward(node, &p, g, grads);
    }
    case TT_NN_RESIZE: return tt_nn_resize_backward(node, g, grads);
    default: return tb_error_set(TB_ERR_UNSUPPORTED, "unknown nn node");
    }
}

/* The kernels run float32 and float64. Operands [x, weight, bias or None] (n of them) must share x's
 * dtype; the errors are torch's. */
static int float_operands(const char *what, int n, PyObject *const *operands) {
    tb_dtype first = tt_data(operands[0])->dtype;
    if (first != TB_F32 && first != TB_F64) {
        PyErr_Format(PyExc_NotImplementedError, "turbo_torch: %s runs in float32 and float64 only for now (got %s)",
                     what, tb_dtype_name(first));
        return -1;
    }
    static const char *const scalar_type[2] = {"Float", "Double"}, *const c_type[2] = {"float", "double"};
    for (int i = 1; i < n; i++) {
        if (operands[i] == Py_None || tt_data(operands[i])->dtype == first)
            continue;
        tb_dtype other = tt_data(operands[i])->dtype;
        int a = first == TB_F64, b = other == TB_F64;
        if (i == 1 && other == (a ? TB_F32 : TB_F64))
            PyErr_Format(PyExc_RuntimeError, "expected scalar type %s but found %s", scalar_type[a], scalar_type[b]);
        else
            PyErr_Format(PyExc_RuntimeError, "Input type (%s) and %s type (%s) should be the same", c_type[a],
                         i == 1 ? "weight" : "bias", other == TB_F32 || other == TB_F64 ? c_type[b] :
                         tb_dtype_name(other));
        return -1;
    }
    return 0;
}

/* padding as an int, a pair, or (top, left, extra_bottom, extra_right): torch's padding='same' with an
 * even effective kernel puts the odd element at the bottom/right */
static int conv_padding(PyObject *o, tb_conv2d_params *p) {
    if (PyTuple_Check(o) && PyTuple_GET_SIZE(o) == 4) {
        for (int i = 0; i < 2; i++) {
            p->padding[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(o, i));
            p->extra_padding[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(o, 2 + i));
        }
        return PyErr_Occurred() ? -1 : 0;
    }
    return int_pair(o, p->padding, "padding");
}

/* _tt_conv2d(x, weight, bias_or_None, stride, padding, dilation, groups) */
static PyObject *py_conv2d(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7 || !tt_check(args[0]) || !tt_check(args[1]) || (args[2] != Py_None && !tt_check(args[2])))
        return PyErr_Format(PyExc_TypeError, "_tt_conv2d(x, weight, bias, stride, padding, dilation, groups)"), NULL;
    tb_conv2d_params p = {{1, 1}, {0, 0}, {0, 0}, {1, 1}, 1};
    if (int_pair(args[3], p.stride, "stride") != 0 || conv_padding(args[4], &p) != 0 ||
        int_pair(args[5], p.dilation, "dilation") != 0)
        return NULL;
    p.groups = PyLong_AsLongLong(args[6]);
    if (PyErr_Occurred() || float_operands("conv2d", 3, args) != 0)
        return NULL;
    const tb_tensor *bias = args[2] == Py_None ? NULL : tt_data(args[2]);
    tb_tensor out;
    tb_status status;
    Py_BEGIN_ALLOW_THREADS
    status = tb_op_conv2d(tt_data(args[0]), tt_data(args[1]), bias, &p, &out);
    Py_END_ALLOW_THREADS
    if (status != TB_OK)
        return tt_raise(status);
    PyObject *result = tt_wrap(&out);
    PyObject *inputs[3] = {args[0], args[1], args[2] == Py_None ? NULL : args[2]};
    int n = args[2] == Py_None ? 2 : 3;
    if (result && tt_needs_grad(n, inputs)) {
        tt_node *node = tt_node_new(TT_NODE_NN, NN_CONV2D, "ConvolutionBackward0", n, inputs);
        if (!node) {
            Py_DECREF(result);
            return NULL;
        }
        int64_t ints[11] = {p.stride[0], p.stride[1], p.padding[0], p.padding[1], p.dilation[0], p.dilation[1],
                            p.groups, 0, 0, p.extra_padding[0], p.extra_padding[1]};
        memcpy(node->ints, ints, sizeof ints);
        tt_node_save(node, 0, tt_data(args[0]));
        tt_node_save(node, 1, tt_data(args[1]));
        tt_set_grad_fn(result, node);
    }
    return result;
}

/* out[n, c] += bias[c] over a fresh contiguous float32 or float64 [N, C, H, W] */
#define ADD_CHANNEL_BIAS(T)                                                   \
    do {                                                                      \
        const T *bv = tb_tensor_data(&b);                                     \
        T *o = tb_tensor_data(out);                                           \
        for (int64_t nc = 0; nc < out->shape[0] * channels; nc++) {           \
            T add = bv[nc % channels];                                        \
            for (int64_t i = 0; i < plane; i++)                               \
                o[nc * plane + i] += add;                                     \
        }                                                                     \
    } while (0)

static tb_status add_channel_bias(const tb_tensor *bias, tb_tensor *out) {
    int64_t channels = out->shape[1], plane = out->shape[2] * out->shape[3];
    if (bias->ndim != 1 || bias->shape[0] != channels)
        return tb_error_set(TB_ERR_SHAPE, "conv_transpose2d: bias must be 1-D with %lld elements",
                            (long long)channels);
    tb_tensor b = {0};
    TB_TRY(tb_tensor_contiguous(bias, out->dtype, &b));
    if (out->dtype == TB_F64)
        ADD_CHANNEL_BIAS(double);
    else
        ADD_CHANNEL_BIAS(float);
    tb_tensor_release(&b);
    return TB_OK;
}

/* aten::conv_transpose2d on batched float32 or float64: x [N, C_in, H, W], w [C_in, C_out / groups, KH, KW] ->
 * [N, C_out, OH, OW], OH = (H - 1) * stride - 2 * padding + dilation * (KH - 1) + output_padding + 1.
 * The convolution with weight w from [N, C_out, OH, OW] to [N, C_in, H, W] (every output_padding <
 * stride, so its output height is H again) has exactly this map as its input-gradient: the forward
 * is that backward with grad_output = x. Its input is only a shape (a broadcast zero). */
static tb_status conv_transpose2d(const tb_tensor *x, const tb_tensor *w, const tb_tensor *bias,
                                  const tb_conv2d_params *p, const int64_t output_padding[2], tb_tensor *out) {
    memset(out, 0, sizeof *out);
    if (x->ndim != 4 || w->ndim != 4)
        return tb_error_set(TB_ERR_SHAPE, "conv_transpose2d: expected a 4-D input and a 4-D weight, got %d and "
                            "%d dims", x->ndim, w->ndim);
    if (p->groups < 1 || w->shape[0] != x->shape[1] || w->shape[0] % p->groups)
        return tb_error_set(TB_ERR_SHAPE, "conv_transpose2d: weight of shape [%lld, %lld, ...] with groups=%lld "
                            "does not fit an input with %lld channels (weight.shape[0] must equal the input "
                            "channels and be divisible by groups)", (long long)w->shape[0],
                            (long long)w->shape[1], (long long)p->groups, (long long)x->shape[1]);
    int64_t shape[4] = {x->shape[0], w->shape[1] * p->groups, 0, 0};
    for (int i = 0; i < 2; i++) {
        if (p->stride[i] < 1 || p->dilation[i] < 1 || p->padding[i] < 0)
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "conv_transpose2d: stride and dilation must be >= 1 and "
                                "padding >= 0");
        if (output_padding[i] < 0 || output_padding[i] >= p->stride[i])
            return tb_error_set(TB_ERR_UNSUPPORTED, "conv_transpose2d: output_padding %lld must be >= 0 and "
                                "smaller than the stride %lld", (long long)output_padding[i],
                                (long long)p->stride[i]);
        shape[2 + i] = (x->shape[2 + i] - 1) * p->stride[i] - 2 * p->padding[i] +
                       p->dilation[i] * (w->shape[2 + i] - 1) + output_padding[i] + 1;
        if (shape[2 + i] < 1)
            return tb_error_set(TB_ERR_SHAPE, "conv_transpose2d: the output size %lld of dim %d is too small",
                                (long long)shape[2 + i], 2 + i);
    }
    tb_tensor one = {0}, shape_only = {0}, unused_weight = {0}, unused_bias = {0};
    TB_TRY(tb_tensor_empty(x->dtype, 4, (int64_t[]){1, 1, 1, 1}, TB_ALLOC_ZERO, &one));
    tb_status status = tb_tensor_expand(&one, 4, shape, &shape_only);
    bool mask[3] = {true, false, false};
    if (status == TB_OK)
        status = tb_op_conv2d_backward(x, &shape_only, w, p, mask, out, &unused_weight, &unused_bias);
    if (status == TB_OK && bias)
        status = add_channel_bias(bias, out);
    tb_tensor_release(&one);
    tb_tensor_release(&shape_only);
    if (status != TB_OK)
        tb_tensor_release(out);
    return status;
}

/* _tt_conv_transpose2d(x, weight, bias_or_None, stride, padding, output_padding, groups, dilation) */
static PyObject *py_conv_transpose2d(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 8 || !tt_check(args[0]) || !tt_check(args[1]) || (args[2] != Py_None && !tt_check(args[2])))
        return PyErr_Format(PyExc_TypeError, "_tt_conv_transpose2d(x, weight, bias, stride, padding, "
                            "output_padding, groups, dilation)"), NULL;
    tb_conv2d_params p = {{1, 1}, {0, 0}, {0, 0}, {1, 1}, 1};
    int64_t output_padding[2];
    if (int_pair(args[3], p.stride, "stride") != 0 || int_pair(args[4], p.padding, "padding") != 0 ||
        int_pair(args[5], output_padding, "output_padding") != 0 || int_pair(args[7], p.dilation, "dilation") != 0)
        return NULL;
    p.groups = PyLong_AsLongLong(args[6]);
    if (PyErr_Occurred() || float_operands("conv_transpose2d", 3, args) != 0)
        return NULL;
    const tb_tensor *bias = args[2] == Py_None ? NULL : tt_data(args[2]);
    tb_tensor out;
    tb_status status;
    Py_BEGIN_ALLOW_THREADS
    status = conv_transpose2d(tt_data(args[0]), tt_data(args[1]), bias, &p, output_padding, &out);
    Py_END_ALLOW_THREADS
    if (status != TB_OK)
        return tt_raise(status);
    PyObject *result = tt_wrap(&out);
    PyObject *inputs[3] = {args[0], args[1], args[2] == Py_None ? NULL : args[2]};
    int n = args[2] == Py_None ? 2 : 3;
    if (result && tt_needs_grad(n, inputs)) {
        tt_node *node = tt_node_new(TT_NODE_NN, NN_CONV_TRANSPOSE2D, "ConvolutionBackward0", n, inputs);
        if (!node) {
            Py_DECREF(result);
            return NULL;
        }
        int64_t ints[7] = {p.stride[0], p.stride[1], p.padding[0], p.padding[1], p.dilation[0], p.dilation[1],
                           p.groups};
        memcpy(node->ints, ints, sizeof ints);
        tt_node_save(node, 0, tt_data(args[0]));
        tt_node_save(node, 1, tt_data(args[1]));
        tt_set_grad_fn(result, node);
    }
    return result;
}

/* _tt_pool2d(kind, x, kernel, stride, padding, dilation, ceil_mode, count_include_pad, divisor) */
static PyObject *py_pool2d(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 9 || !tt_check(args[1]))
        return PyErr_Format(PyExc_TypeError, "_tt_pool2d(kind, x, kernel, stride, padding, dilation, ceil, "
                            "count_include_pad, divisor)"), NULL;
    long kind = PyLong_AsLong(args[0]);
    PyObject *x = args[1];
    if (float_operands("pooling", 1, &args[1]) != 0)
        return NULL;
    tb_pool2d_params p = {{1, 1}, {1, 1}, {0, 0}, {1, 1}, false, true, 0};
    tb_tensor out = {0}, indices = {0};
    tb_status status;
    if (kind == NN_ADAPTIVE_AVG_POOL2D) {
        int64_t size[2];
        if (int_pair(args[2], size, "output_size") != 0)
            return NULL;
        status = tb_op_adaptive_avg_pool2d(tt_data(x), size[0], size[1], &out);
    } else {
        if (int_pair(args[2], p.kernel, "kernel_size") != 0 || int_pair(args[3], p.stride, "stride") != 0 ||
            int_pair(args[4], p.padding, "padding") != 0 || int_pair(args[5], p.dilation, "dilation") != 0)
            return NULL;
        p.ceil_mode = PyObject_IsTrue(args[6]);
        p.count_include_pad = PyObject_IsTrue(args[7]);
        p.divisor_override = args[8] == Py_None ? 0 : PyLong_AsLongLong(args[8]);
        if (PyErr_Occurred())
            return NULL;
        status = kind == NN_MAX_POOL2D ? tb_op_max_pool2d(tt_data(x), &p, &out, &indices)
                                       : tb_op_avg_pool2d(tt_data(x), &p, &out);
    }
    if (status != TB_OK) {
        tb_tensor_release(&indices);
        return tt_raise(status);
    }
    PyObject *result = tt_wrap(&out);
    PyObject *index_object = indices.storage ? tt_wrap(&indices) : NULL;
    if (!result) {
        Py_XDECREF(index_object);
        return NULL;
    }
    if (tt_needs_grad(1, &x)) {
        static const char *names[] = {"", "MaxPool2DWithIndicesBackward0", "AvgPool2DBackward0",
                                      "AdaptiveAvgPool2DBackward0"};
        tt_node *node = tt_node_new(TT_NODE_NN, (int)kind, names[kind], 1, &x);
        if (!node) {
            Py_DECREF(result);
            Py_XDECREF(index_object);
            return NULL;
        }
        int64_t ints[11] = {p.kernel[0], p.kernel[1], p.stride[0], p.stride[1], p.padding[0], p.padding[1],
                            p.dilation[0], p.dilation[1], p.ceil_mode, p.count_include_pad, p.divisor_override};
        memcpy(node->ints, ints, sizeof ints);
        tt_node_save(node, 0, tt_data(x));
        if (index_object)
            tt_node_save(node, 1, tt_data(index_object));
        tt_set_grad_fn(result, node);
    }
    if (index_object)
        return Py_BuildValue("(NN)", result, index_object);
    return result;
}

/* _tt_linear(x, weight, bias_or_None): float32 through the fused GEMM + bias epilogue; None for other
 * dtypes (the caller composes matmul + add) */
static PyObject *py_linear(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !tt_check(args[0]) || !tt_check(args[1]) || (args[2] != Py_None && !tt_check(args[2])))
        return PyErr_Format(PyExc_TypeError, "_tt_linear(x, weight, bias)"), NULL;
    const tb_tensor *x = tt_data(args[0]), *w = tt_data(args[1]);
    const tb_tensor *b = args[2] == Py_None ? NULL : tt_data(args[2]);
    if (x->dtype != TB_F32 || w->dtype != TB_F32 || (b && b->dtype != TB_F32) || w->ndim != 2 || x->ndim < 1)
        Py_RETURN_NONE;
    tb_tensor out;
    tb_status status;
    Py_BEGIN_ALLOW_THREADS
    status = tb_op_linear(x, w, b, 0, NULL, &out);
    Py_END_ALLOW_THREADS
    if (status != TB_OK)
        return tt_raise(status);
    PyObject *result = tt_wrap(&out);
    PyObject *inputs[3] = {args[0], args[1], b ? args[2] : NULL};
    int n = b ? 3 : 2;
    if (result && tt_needs_grad(n, inputs)) {
        tt_node *node = tt_node_new(TT_NODE_NN, NN_LINEAR, b ? "AddmmBackward0" : "MmBackward0", n, inputs);
        if (!node) {
            Py_DECREF(result);
            return NULL;
        }
        tt_node_save(node, 0, x);
        tt_node_save(node, 1, w);
        tt_set_grad_fn(result, node);
    }
    return result;
}

static PyMethodDef nn_functions[] = {
    {"_tt_linear", (PyCFunction)(void (*)(void))py_linear, METH_FASTCALL, NULL},
    {"_tt_conv2d", (PyCFunction)(void (*)(void))py_conv2d, METH_FASTCALL, NULL},
    {"_tt_conv_transpose2d", (PyCFunction)(void (*)(void))py_conv_transpose2d, METH_FASTCALL, NULL},
    {"_tt_pool2d", (PyCFunction)(void (*)(void))py_pool2d, METH_FASTCALL, NULL},
    {NULL},
};

int tt_register_nn(PyObject *module);
int tt_register_nn(PyObject *module) {
    return PyModule_AddFunctions(module, nn_functions) != 0 ? -1 : tt_register_nn_resize(module);
}
