/* turbo_torch's fused LSTM layer: one unidirectional float32 layer over a whole sequence in one C call
 * and one autograd node (PyTorch's own LSTM is one fused op too), instead of ~12 recorded ops per time
 * step. Formulas are PyTorch's (gate order i, f, g, o):
 *   gates_t = x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh
 *   c_t = sigmoid(f) * c_{t-1} + sigmoid(i) * tanh(g),   h_t = sigmoid(o) * tanh(c_t)
 * The result is one tensor Y [T + 1, B, H]: Y[t] = h_t for t < T and Y[T] = c_T, so the layer's outputs,
 * h_n (= Y[T - 1]) and c_n are views of a single autograd output and their gradients meet in dY.
 * The backward is backpropagation through time: a reverse loop of one [B, 4H] x [4H, H] GEMM per step,
 * then three whole-sequence GEMMs for dx, dW_ih and dW_hh. */
#include "eager.h"

#include <math.h>
#include <string.h>

#include "../kernels/gemm.h"
#include "torchburn/eager.h"

enum { LSTM_X, LSTM_H0, LSTM_C0, LSTM_W_IH, LSTM_W_HH, LSTM_SAVED_INPUTS };

/* What the backward needs, kept in the node's `object` (a capsule): the inputs with their storage
 * versions (checked like saved tensors), the post-activation gates A [T, B, 4H] and the cells C [T, B, H]. */
typedef struct lstm_saved {
    tb_tensor inputs[LSTM_SAVED_INPUTS];
    uint64_t versions[LSTM_SAVED_INPUTS];
    tb_tensor gates, cells;
    int has_bias;
} lstm_saved;

static void lstm_saved_free(PyObject *capsule) {
    lstm_saved *s = PyCapsule_GetPointer(capsule, "turbo_torch.lstm");
    if (!s)
        return;
    for (int i = 0; i < LSTM_SAVED_INPUTS; i++)
        tb_tensor_release(&s->inputs[i]);
    tb_tensor_release(&s->gates);
    tb_tensor_release(&s->cells);
    PyMem_Free(s);
}

static float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

static tb_status gemm(int64_t m, int64_t n, int64_t k, const float *a, int64_t a_rs, int64_t a_cs, const float *b,
                      int64_t b_rs, int64_t b_cs, float *c, float beta, const float *bias) {
    tb_gemm_desc d = {.m = m, .n = n, .k = k, .a = a, .a_row_stride = a_rs, .a_col_stride = a_cs, .b = b,
                      .b_row_stride = b_rs, .b_col_stride = b_cs, .c = c, .c_row_stride = n, .alpha = 1.0f,
                      .beta = beta, .bias_kind = bias ? TB_BIAS_PER_COLUMN : TB_BIAS_NONE, .bias = bias, .batch = 1};
    return tb_gemm_f32(&d);
}

/* Forward over contiguous float32 operands. y [T+1, B, H], gates [T, B, 4H], cells [T, B, H]. */
static tb_status lstm_forward(int64_t T, int64_t B, int64_t I, int64_t H, const float *x, const float *h0,
                              const float *c0, const float *w_ih, const float *w_hh, const float *b_ih,
                              const float *b_hh, float *y, float *gates, float *cells) {
    const int64_t G = 4 * H;
    /* all input projections at once: gates[t, b] = x_t W_ih^T + b_ih */
    TB_TRY(gemm(T * B, G, I, x, I, 1, w_ih, 1, I, gates, 0.0f, b_ih));
    for (int64_t t = 0; t < T; t++) {
        float *g = gates + t * B * G;
        const float *h_prev = t ? y + (t - 1) * B * H : h0, *c_prev = t ? cells + (t - 1) * B * H : c0;
        /* + h_{t-1} W_hh^T + b_hh, accumulated onto the projection */
        TB_TRY(gemm(B, G, H, h_prev, H, 1, w_hh, 1, H, g, 1.0f, b_hh));
        float *h = y + t * B * H, *c = cells + t * B * H;
        for (int64_t b = 0; b < B; b++) {
            float *row = g + b * G;
            for (int64_t j = 0; j < H; j++) {
                const float i_ = sigmoidf(row[j]), f_ = sigmoidf(row[H + j]), g_ = tanhf(row[2 * H + j]),
                            o_ = sigmoidf(row[3 * H + j]);
                const float cell = f_ * c_prev[b * H + j] + i_ * g_;
                row[j] = i_, row[H + j] = f_, row[2 * H + j] = g_, row[3 * H + j] = o_;
                c[b * H + j] = cell;
                h[b * H + j] = o_ * tanhf(cell);
            }
        }
    }
    memcpy(y + T * B * H, cells + (T - 1) * B * H, sizeof(float) * (size_t)(B * H));
    return TB_OK;
}

static tb_status empty_f32(int ndim, const int64_t *shape, tb_tensor *out) {
    return tb_tensor_empty(TB_F32, ndim, shape, 0, out);
}

static tb_status zeros_f32(int ndim, const int64_t *shape, tb_tensor *out) {
    TB_TRY(empty_f32(ndim, shape, out));
    memset(tb_tensor_data(out), 0, sizeof(float) * (size_t)tb_tensor_numel(out));
    return TB_OK;
}

/* grads: x, h0, c0, w_ih, w_hh, b_ih, b_hh (each only where the node has an edge) */
static tb_status lstm_backward(const lstm_saved *s, const tt_node *node, const tb_tensor *dy_tensor, tb_tensor *grads) {
    const tb_tensor *xt = &s->inputs[LSTM_X];
    const int64_t T = xt->shape[0], B = xt->shape[1], I = xt->shape[2], H = s->inputs[LSTM_H0].shape[1], G = 4 * H;
    const float *x = tb_tensor_data(xt), *h0 = tb_tensor_data(&s->inputs[LSTM_H0]);
    const float *c0 = tb_tensor_data(&s->inputs[LSTM_C0]), *w_ih = tb_tensor_data(&s->inputs[LSTM_W_IH]);
    const float *w_hh = tb_tensor_data(&s->inputs[LSTM_W_HH]);
    const float *A = tb_tensor_data(&s->gates), *C = tb_tensor_data(&s->cells);
    tb_tensor dy_c = {0}, dgates = {0}, hprev = {0}, dh = {0}, dc = {0};
    tb_status status = tb_tensor_contiguous(dy_tensor, TB_F32, &dy_c);
    if (status == TB_OK)
        status = empty_f32(3, (int64_t[]){T, B, G}, &dgates);
    if (status == TB_OK)
        status = zeros_f32(2, (int64_t[]){B, H}, &dh);
    if (status == TB_OK)
        status = empty_f32(2, (int64_t[]){B, H}, &dc);
    if (status != TB_OK)
        goto done;
    const float *dy = tb_tensor_data(&dy_c);
    float *dG = tb_tensor_data(&dgates), *dh_next = tb_tensor_data(&dh), *dc_next = tb_tensor_data(&dc);
    memcpy(dc_next, dy + T * B * H, sizeof(float) * (size_t)(B * H)); /* dc_T */
    for (int64_t t = T - 1; t >= 0 && status == TB_OK; t--) {
        const float *a = A + t * B * G, *c = C + t * B * H, *c_prev = t ? C + (t - 1) * B * H : c0;
        float *dg = dG + t * B * G;
        for (int64_t b = 0; b < B; b++)
            for (int64_t j = 0; j < H; j++) {
                const int64_t e = b * H + j;
                const float i_ = a[b * G + j], f_ = a[b * G + H + j], g_ = a[b * G + 2 * H + j],
                            o_ = a[b * G + 3 * H + j];
                const float tc = tanhf(c[e]), dh_ = dy[t * B * H + e] + dh_next[e];
                const float dc_ = dc_next[e] + dh_ * o_ * (1.0f - tc * tc);
                dg[b * G + j] = dc_ * g_ * i_ * (1.0f - i_);
                dg[b * G + H + j] = dc_ * c_prev[e] * f_ * (1.0f - f_);
                dg[b * G + 2 * H + j] = dc_ * i_ * (1.0f - g_ * g_);
                dg[b * G + 3 * H + j] = dh_ * tc * o_ * (1.0f - o_);
                dc_next[e] = dc_ * f_;
            }
        /* dh_{t-1} = dgates_t W_hh */
        status = gemm(B, H, G, dg, G, 1, w_hh, H, 1, dh_next, 0.0f, NULL);
    }
    if (status != TB_OK)
        goto done;
    if (node->edges[LSTM_X]) {
        status = empty_f32(3, (int64_t[]){T, B, I}, &grads[LSTM_X]);
        if (status == TB_OK)
            status = gemm(T * B, I, G, dG, G, 1, w_ih, I, 1, tb_tensor_data(&grads[LSTM_X]), 0.0f, NULL);
    }
    if (status == TB_OK && node->edges[LSTM_H0])
        tb_tensor_retain(&dh, &grads[LSTM_H0]);
    if (status == TB_OK && node->edges[LSTM_C0])
        tb_tensor_retain(&dc, &grads[LSTM_C0]);
    if (status == TB_OK && node->edges[LSTM_W_IH]) { /* dW_ih = dG^T x over all (t, b) */
        status = empty_f32(2, (int64_t[]){G, I}, &grads[LSTM_W_IH]);
        if (status == TB_OK)
            status = gemm(G, I, T * B, dG, 1, G, x, I, 1, tb_tensor_data(&grads[LSTM_W_IH]), 0.0f, NULL);
    }
    if (status == TB_OK && node->edges[LSTM_W_HH]) { /* dW_hh = dG^T [h0, h_1 .. h_{T-1}] */
        status = empty_f32(3, (int64_t[]){T, B, H}, &hprev);
        if (status == TB_OK) {
            float *hp = tb_tensor_data(&hprev);
            const float *y = NULL;
            memcpy(hp, h0, sizeof(float) * (size_t)(B * H));
            /* h_t are the forward's outputs, saved as the node's result in slot 0 */
            y = tb_tensor_data(&node->saved[0].tensor);
            if (T > 1)
                memcpy(hp + B * H, y, sizeof(float) * (size_t)((T - 1) * B * H));
            status = empty_f32(2, (int64_t[]){G, H}, &grads[LSTM_W_HH]);
        }
        if (status == TB_OK)
            status = gemm(G, H, T * B, dG, 1, G, tb_tensor_data(&hprev), H, 1, tb_tensor_data(&grads[LSTM_W_HH]),
                          0.0f, NULL);
    }
    for (int k = 5; status == TB_OK && k < 7 && s->has_bias; k++) /* both biases get the column sums of dG */
        if (node->edges[k]) {
            tb_tensor flat = {0};
            status = tb_tensor_view(&dgates, 2, (int64_t[]){T * B, G}, &flat);
            if (status == TB_OK)
                status = tb_eager_reduce(TB_EAGER_REDUCE_SUM, &flat, 1u, false, TB_F32, &grads[k]);
            tb_tensor_release(&flat);
        }
done:
    tb_tensor_release(&dy_c);
    tb_tensor_release(&dgates);
    tb_tensor_release(&hprev);
    tb_tensor_release(&dh);
    tb_tensor_release(&dc);
    return status;
}

tb_status tt_rnn_backward(tt_node *node, const tb_tensor *g, tb_tensor *grads);
tb_status tt_rnn_backward(tt_node *node, const tb_tensor *g, tb_tensor *grads) {
    lstm_saved *s = node->object ? PyCapsule_GetPointer(node->object, "turbo_torch.lstm") : NULL;
    if (!s) {
        PyErr_Clear();
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "Trying to backward through the graph a second time (or directly "
                            "access saved tensors after they have already been freed)");
    }
    for (int i = 0; i < LSTM_SAVED_INPUTS; i++)
        if (tt_version(&s->inputs[i]) != s->versions[i])
            return tb_error_set(TB_ERR_INVALID_ARGUMENT,
                                "one of the variables needed for gradient computation has been modified by an "
                                "inplace operation (an input of the LSTM layer)");
    return lstm_backward(s, node, g, grads);
}

static int lstm_operand(PyObject *o, int ndim, const int64_t *shape, const char *what) {
    if (!tt_check(o) || tt_data(o)->dtype != TB_F32 || tt_data(o)->ndim != ndim)
        return 0;
    for (int d = 0; d < ndim; d++)
        if (tt_data(o)->shape[d] != shape[d]) {
            PyErr_Format(PyExc_RuntimeError, "LSTM: %s has the wrong shape", what);
            return -1;
        }
    return 1;
}

/* _tt_lstm_layer(x [T, B, I], h0 [B, H], c0 [B, H], w_ih [4H, I], w_hh [4H, H], b_ih|None, b_hh|None)
 *   -> Y [T + 1, B, H] (see the top of the file), or None when the operands are not float32 of these
 *      ranks (the caller then runs the cell step by step) */
static PyObject *py_lstm_layer(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7)
        return PyErr_Format(PyExc_TypeError, "_tt_lstm_layer(x, h0, c0, w_ih, w_hh, b_ih, b_hh)"), NULL;
    if (!tt_check(args[0]) || !tt_check(args[1]) || tt_data(args[0])->ndim != 3 || tt_data(args[1])->ndim != 2)
        Py_RETURN_NONE;
    const int64_t T = tt_data(args[0])->shape[0], B = tt_data(args[0])->shape[1], I = tt_data(args[0])->shape[2];
    const int64_t H = tt_data(args[1])->shape[1];
    const int has_bias = args[5] != Py_None;
    if (T < 1 || B < 1 || H < 1 || (args[5] == Py_None) != (args[6] == Py_None))
        Py_RETURN_NONE;
    const int64_t shapes[7][3] = {{T, B, I}, {B, H}, {B, H}, {4 * H, I}, {4 * H, H}, {4 * H}, {4 * H}};
    const int ranks[7] = {3, 2, 2, 2, 2, 1, 1};
    static const char *const names[7] = {"input", "h0", "c0", "weight_ih", "weight_hh", "bias_ih", "bias_hh"};
    for (int k = 0; k < (has_bias ? 7 : 5); k++) {
        int ok = lstm_operand(args[k], ranks[k], shapes[k], names[k]);
        if (ok < 0)
            return NULL;
        if (!ok)
            Py_RETURN_NONE;
    }
    lstm_saved *s = PyMem_Calloc(1, sizeof *s);
    if (!s)
        return PyErr_NoMemory();
    s->has_bias = has_bias;
    tb_tensor y = {0}, bias[2] = {{0}};
    tb_status status = TB_OK;
    for (int k = 0; k < LSTM_SAVED_INPUTS && status == TB_OK; k++) {
        status = tb_tensor_contiguous(tt_data(args[k]), TB_F32, &s->inputs[k]);
        s->versions[k] = tt_version(&s->inputs[k]);
    }
    for (int k = 0; k < 2 && has_bias && status == TB_OK; k++)
        status = tb_tensor_contiguous(tt_data(args[5 + k]), TB_F32, &bias[k]);
    if (status == TB_OK)
        status = empty_f32(3, (int64_t[]){T + 1, B, H}, &y);
    if (status == TB_OK)
        status = empty_f32(3, (int64_t[]){T, B, 4 * H}, &s->gates);
    if (status == TB_OK)
        status = empty_f32(3, (int64_t[]){T, B, H}, &s->cells);
    if (status == TB_OK) {
        Py_BEGIN_ALLOW_THREADS
        status = lstm_forward(T, B, I, H, tb_tensor_data(&s->inputs[LSTM_X]), tb_tensor_data(&s->inputs[LSTM_H0]),
                              tb_tensor_data(&s->inputs[LSTM_C0]), tb_tensor_data(&s->inputs[LSTM_W_IH]),
                              tb_tensor_data(&s->inputs[LSTM_W_HH]), has_bias ? tb_tensor_data(&bias[0]) : NULL,
                              has_bias ? tb_tensor_data(&bias[1]) : NULL, tb_tensor_data(&y),
                              tb_tensor_data(&s->gates), tb_tensor_data(&s->cells));
        Py_END_ALLOW_THREADS
    }
    tb_tensor_release(&bias[0]);
    tb_tensor_release(&bias[1]);
    PyObject *capsule = status == TB_OK ? PyCapsule_New(s, "turbo_torch.lstm", lstm_saved_free) : NULL;
    if (!capsule) {
        tb_tensor_release(&y);
        for (int k = 0; k < LSTM_SAVED_INPUTS; k++)
            tb_tensor_release(&s->inputs[k]);
        tb_tensor_release(&s->gates);
        tb_tensor_release(&s->cells);
        PyMem_Free(s);
        return status != TB_OK ? tt_raise(status) : NULL;
    }
    PyObject *result = tt_wrap(&y);
    PyObject *inputs[7] = {args[0], args[1], args[2], args[3], args[4], has_bias ? args[5] : NULL,
                           has_bias ? args[6] : NULL};
    if (!result || !tt_needs_grad(7, inputs)) {
        Py_DECREF(capsule);
        return result;
    }
    tt_node *node = tt_node_new(TT_NODE_RNN, 0, "MkldnnRnnLayerBackward0", 7, inputs);
    if (!node) {
        Py_DECREF(capsule);
        Py_DECREF(result);
        return NULL;
    }
    node->object = capsule;
    tt_node_save(node, 0, tt_data(result));
    tt_set_grad_fn(result, node);
    return result;
}

static PyMethodDef rnn_functions[] = {
    {"_tt_lstm_layer", (PyCFunction)(void (*)(void))py_lstm_layer, METH_FASTCALL, NULL},
    {NULL},
};

int tt_register_rnn(PyObject *module);
int tt_register_rnn(PyObject *module) { return PyModule_AddFunctions(module, rnn_functions); }
