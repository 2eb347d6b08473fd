/* Lowering and execution of the compute-heavy ops: MATMUL (the packed GEMM with its bias/activation/
 * residual epilogue, batched with strides), ATTENTION (the tiled attention kernel, writing the output
 * in the layout the graph asked for, and the log-sum-exp when used), ATTENTION_BACKWARD and CONV2D (the ops layer's fused convolution, with an eval
 * batch_norm folded into its epilogue). */
#include <math.h>
#include <string.h>

#include "graph/graph_internal.h"
#include "torchburn/ops_nn.h"

/* ---- MATMUL ---- */

/* Iteration over the broadcast batch dims of a matmul: per operand, element strides of each batch dim
 * (0 when broadcast). Dims are merged where every operand allows it; the last merged dim becomes the
 * GEMM's own batch, the others are looped over. */
typedef struct batch_walk {
    int ndim;
    int64_t shape[TB_MAX_DIMS];
    int64_t strides[4][TB_MAX_DIMS]; /* a, b, c, residual */
} batch_walk;

static void batch_strides(const tb_value_info *x, int batch_ndim, const int64_t *batch_shape, int64_t *out) {
    int x_batch = x->ndim - 2;
    for (int d = 0; d < batch_ndim; d++) {
        int xd = d - (batch_ndim - x_batch);
        out[d] = (xd < 0 || x->shape[xd] == 1) ? 0 : x->strides[xd];
    }
    (void)batch_shape;
}

static tb_status exec_matmul(const tb_exec_context *context, const tb_step *step) {
    const tb_params_matmul *p = &step->params.matmul;
    const tb_value_info *a = tb_exec_info(context, step->inputs[0]), *b = tb_exec_info(context, step->inputs[1]);
    const tb_value_info *c = tb_exec_info(context, step->outputs[0]);
    int next = 2;
    const float *bias = p->has_bias ? tb_exec_ptr(context, step->inputs[next++]) : NULL;
    int residual_loc = p->has_residual ? step->inputs[next] : -1;
    const tb_value_info *r = residual_loc >= 0 ? tb_exec_info(context, residual_loc) : NULL;

    tb_gemm_desc desc;
    memset(&desc, 0, sizeof desc);
    desc.m = c->shape[c->ndim - 2];
    desc.n = c->shape[c->ndim - 1];
    desc.k = a->shape[a->ndim - 1];
    desc.a_row_stride = a->strides[a->ndim - 2];
    desc.a_col_stride = a->strides[a->ndim - 1];
    desc.b_row_stride = b->strides[b->ndim - 2];
    desc.b_col_stride = b->strides[b->ndim - 1];
    desc.c_row_stride = c->strides[c->ndim - 2];
    desc.alpha = 1.0f;
    desc.beta = 0.0f;
    desc.bias_kind = bias ? TB_BIAS_PER_COLUMN : TB_BIAS_NONE;
    desc.bias = bias;
    desc.activation = (tb_activation)p->activation;
    desc.residual_row_stride = r ? r->strides[r->ndim - 2] : 0;
    if (desc.m == 0 || desc.n == 0)
        return TB_OK;

    batch_walk walk;
    memset(&walk, 0, sizeof walk);
    int batch_ndim = c->ndim - 2;
    int64_t merged_shape[TB_MAX_DIMS], raw[4][TB_MAX_DIMS];
    batch_strides(a, batch_ndim, c->shape, raw[0]);
    batch_strides(b, batch_ndim, c->shape, raw[1]);
    batch_strides(c, batch_ndim, c->shape, raw[2]);
    if (r)
        batch_strides(r, batch_ndim, c->shape, raw[3]);
    else
        memset(raw[3], 0, sizeof raw[3]);
    int merged = 0;
    for (int d = 0; d < batch_ndim; d++) {
        int64_t size = c->shape[d];
        if (size == 1)
            continue;
        bool can_merge = merged > 0;
        for (int o = 0; can_merge && o < 4; o++)
            can_merge = walk.strides[o][merged - 1] == raw[o][d] * size;
        if (can_merge) {
            merged_shape[merged - 1] *= size;
            for (int o = 0; o < 4; o++)
                walk.strides[o][merged - 1] = raw[o][d];
        } else {
            merged_shape[merged] = size;
            for (int o = 0; o < 4; o++)
                walk.strides[o][merged] = raw[o][d];
            merged++;
        }
    }
    const float *a_base = tb_exec_ptr(context, step->inputs[0]);
    const float *b_base = tb_exec_ptr(context, step->inputs[1]);
    float *c_base = tb_exec_ptr(context, step->outputs[0]);
    const float *r_base = r ? tb_exec_ptr(context, residual_loc) : NULL;

    /* b shared by every batch entry and a/c/residual rows evenly spaced: fold the batch into M */
    if (merged == 1 && walk.strides[1][0] == 0 && walk.strides[0][0] == desc.m * desc.a_row_stride &&
        walk.strides[2][0] == desc.m * desc.c_row_stride && (!r || walk.strides[3][0] == desc.m * desc.residual_row_stride)) {
        desc.m *= merged_shape[0];
        merged = 0;
    }
    int64_t outer = 1;
    for (int d = 0; d + 1 < merged; d++)
        outer *= merged_shape[d];
    desc.batch = merged > 0 ? merged_shape[merged - 1] : 1;
    if (merged > 0) {
        desc.a_batch_stride = walk.strides[0][merged - 1];
        desc.b_batch_stride = walk.strides[1][merged - 1];
        desc.c_batch_stride = walk.strides[2][merged - 1];
        desc.residual_batch_stride = walk.strides[3][merged - 1];
    }
    for (int64_t o = 0; o < outer; o++) {
        int64_t offsets[4] = {0, 0, 0, 0}, rest = o;
        for (int d = merged - 2; d >= 0; d--) {
            int64_t index = rest % merged_shape[d];
            rest /= merged_shape[d];
            for (int k = 0; k < 4; k++)
                offsets[k] += index * walk.strides[k][d];
        }
        desc.a = a_base + offsets[0];
        desc.b = b_base + offsets[1];
        desc.c = c_base + offsets[2];
        desc.residual = r_base ? r_base + offsets[3] : NULL;
        /* B read straight from an input of known storage (a weight): its packed copy can be kept */
        tb_storage *b_storage = outer == 1 ? tb_exec_input_storage(context, step->inputs[1]) : NULL;
        TB_TRY(b_storage ? tb_gemm_f32_cached_b(&desc, b_storage) : tb_gemm_f32(&desc));
    }
    return TB_OK;
}

tb_status tb_lower_matmul(tb_planner *planner, int node) {
    const tb_node *n = &tb_planner_graph(planner)->nodes[node];
    const tb_params_matmul *p = &n->params.matmul;
    tb_step step;
    tb_step_init(&step, planner, node, "gemm", exec_matmul);
    step.ninputs = n->ninputs;
    for (int i = 0; i < n->ninputs; i++) {
        int loc = tb_planner_value_loc(planner, n->inputs[i]);
        bool is_bias = p->has_bias && i == 2;
        bool is_residual = p->has_residual && i == n->ninputs - 1;
        if (is_bias || is_residual) {
            /* the epilogue reads the bias as a unit-stride vector and residual rows with unit columns */
            TB_TRY(tb_planner_stage_loc(planner, loc, true, true, &loc));
        }
        step.inputs[i] = loc;
    }
    step.noutputs = 1;
    TB_TRY(tb_planner_node_outputs(planner, node, step.outputs));
    if (step.outputs[0] < 0)
        return TB_OK;
    return tb_planner_add_step(planner, &step, NULL);
}

/* ---- ATTENTION ---- */

static void attention_strides(const tb_value_info *x, int64_t *out) {
    if (x->ndim == 4) {
        memcpy(out, x->strides, 4 * sizeof(int64_t));
    } else { /* [B, T, D] -> [B, 1, T, D] */
        out[0] = x->strides[0];
        out[1] = 0;
        out[2] = x->strides[1];
        out[3] = x->strides[2];
    }
}

/* The mask input as kernel strides over [B, Hq, Tq, Tk] (0 where it broadcasts). */
static void attention_mask(const tb_exec_context *context, int loc, int nd, const float **float_mask,
                           int64_t *float_strides, const uint8_t **bool_mask, int64_t *bool_strides) {
    const tb_value_info *m = tb_exec_info(context, loc);
    int64_t strides[4] = {0, 0, 0, 0};
    for (int d = 0; d < m->ndim; d++) {
        int target = d + (4 - m->ndim);
        strides[target] = m->shape[d] == 1 ? 0 : m->strides[d];
    }
    if (nd == 3 && m->ndim >= 3) {
        /* a 3-D problem's batch is dim 0 of the scores; the mask's dim 1 (heads) must be 1 */
        strides[0] = m->ndim == 4 ? strides[0] : (m->shape[0] == 1 ? 0 : m->strides[0]);
        if (m->ndim == 3)
            strides[1] = 0;
    }
    if (m->dtype == TB_BOOL) {
        *bool_mask = tb_exec_ptr(context, loc);
        memcpy(bool_strides, strides, sizeof strides);
    } else {
        *float_mask = tb_exec_ptr(context, loc);
        memcpy(float_strides, strides, sizeof strides);
    }
}

/* [B, H, T] (or [B, T] -> [B, 1, T]) log-sum-exp strides */
static void lse_strides(const tb_value_info *x, int64_t *out) {
    if (x->ndim == 3) {
        memcpy(out, x->strides, 3 * sizeof(int64_t));
    } else {
        out[0] = x->strides[0];
        out[1] = 0;
        out[2] = x->strides[1];
    }
}

static tb_status exec_attention(const tb_exec_context *context, const tb_step *step) {
    const tb_params_attention *p = &step->params.attention;
    const tb_value_info *q = tb_exec_info(context, step->inputs[0]), *k = tb_exec_info(context, step->inputs[1]),
                        *v = tb_exec_info(context, step->inputs[2]);
    tb_attention_desc desc;
    memset(&desc, 0, sizeof desc);
    int nd = q->ndim;
    desc.batch = q->shape[0];
    desc.q_heads = nd == 4 ? q->shape[1] : 1;
    desc.kv_heads = nd == 4 ? k->shape[1] : 1;
    desc.q_len = q->shape[nd - 2];
    desc.kv_len = k->shape[nd - 2];
    desc.head_dim = q->shape[nd - 1];
    desc.value_dim = v->shape[nd - 1];
    desc.q = tb_exec_ptr(context, step->inputs[0]);
    desc.k = tb_exec_ptr(context, step->inputs[1]);
    desc.v = tb_exec_ptr(context, step->inputs[2]);
    desc.out = tb_exec_ptr(context, step->outputs[0]);
    attention_strides(q, desc.q_strides);
    attention_strides(k, desc.k_strides);
    attention_strides(v, desc.v_strides);
    if (desc.out)
        attention_strides(tb_exec_info(context, step->outputs[0]), desc.out_strides);
    desc.causal = p->causal != 0;
    desc.scale = (float)p->scale;
    if (!(desc.scale > 0.0f) && !(desc.scale < 0.0f))
        desc.scale = 1.0f / sqrtf((float)desc.head_dim);
    if (p->has_mask)
        attention_mask(context, step->inputs[3], nd, &desc.float_mask, desc.float_mask_strides, &desc.bool_mask,
                       desc.bool_mask_strides);
    desc.lse = tb_exec_ptr(context, step->outputs[1]);
    if (desc.lse)
        lse_strides(tb_exec_info(context, step->outputs[1]), desc.lse_strides);
    if (!desc.out)
        desc.value_dim = 0; /* only the log-sum-exp is used */
    if (desc.batch == 0 || desc.q_len == 0 || (desc.value_dim == 0 && !desc.lse))
        return TB_OK;
    return tb_attention_f32(&desc);
}

tb_status tb_lower_attention(tb_planner *planner, int node) {
    const tb_node *n = &tb_planner_graph(planner)->nodes[node];
    tb_step step;
    tb_step_init(&step, planner, node, "attention", exec_attention);
    step.ninputs = n->ninputs;
    for (int i = 0; i < n->ninputs; i++) {
        int loc = tb_planner_value_loc(planner, n->inputs[i]);
        const tb_value_info *info = tb_planner_loc_info(planner, loc);
        /* the kernel needs q/k/v with a unit stride along the head dim */
        bool strided = info->shape[info->ndim - 1] > 1 && info->strides[info->ndim - 1] != 1;
        if (i < 3 && strided)
            TB_TRY(tb_planner_stage_loc(planner, loc, true, true, &loc));
        step.inputs[i] = loc;
    }
    step.noutputs = 2;
    TB_TRY(tb_planner_node_outputs(planner, node, step.outputs));
    if (step.outputs[0] < 0 && step.outputs[1] < 0)
        return TB_OK;
    /* the graph may ask for a physical layout of the output (e.g. [B, T, H, D] memory order) */
    const tb_value_info *wanted = &tb_planner_graph(planner)->values[n->first_output].info;
    if (step.outputs[0] >= 0 && !tb_info_is_contiguous(wanted)) {
        int view;
        TB_TRY(tb_planner_view_loc(planner, step.outputs[0], wanted, 0, &view));
        tb_planner_bind(planner, n->first_output, view);
        step.outputs[0] = view;
    }
    return tb_planner_add_step(planner, &step, NULL);
}

/* ---- ATTENTION_BACKWARD ---- */

static tb_status exec_attention_backward(const tb_exec_context *context, const tb_step *step) {
    const tb_params_attention *p = &step->params.attention;
    const tb_value_info *q = tb_exec_info(context, step->inputs[1]), *k = tb_exec_info(context, step->inputs[2]),
                        *v = tb_exec_info(context, step->inputs[3]);
    tb_attention_backward_desc desc;
    memset(&desc, 0, sizeof desc);
    int nd = q->ndim;
    desc.batch = q->shape[0];
    desc.q_heads = nd == 4 ? q->shape[1] : 1;
    desc.kv_heads = nd == 4 ? k->shape[1] : 1;
    desc.q_len = q->shape[nd - 2];
    desc.kv_len = k->shape[nd - 2];
    desc.head_dim = q->shape[nd - 1];
    desc.value_dim = v->shape[nd - 1];
    desc.grad_out = tb_exec_ptr(context, step->inputs[0]);
    desc.q = tb_exec_ptr(context, step->inputs[1]);
    desc.k = tb_exec_ptr(context, step->inputs[2]);
    desc.v = tb_exec_ptr(context, step->inputs[3]);
    desc.out = tb_exec_ptr(context, step->inputs[4]);
    desc.lse = tb_exec_ptr(context, step->inputs[5]);
    attention_strides(tb_exec_info(context, step->inputs[0]), desc.grad_out_strides);
    attention_strides(q, desc.q_strides);
    attention_strides(k, desc.k_strides);
    attention_strides(v, desc.v_strides);
    attention_strides(tb_exec_info(context, step->inputs[4]), desc.out_strides);
    lse_strides(tb_exec_info(context, step->inputs[5]), desc.lse_strides);
    if (p->has_mask)
        attention_mask(context, step->inputs[6], nd, &desc.float_mask, desc.float_mask_strides, &desc.bool_mask,
                       desc.bool_mask_strides);
    desc.causal = p->causal != 0;
    desc.scale = (float)p->scale;
    if (!(desc.scale > 0.0f) && !(desc.scale < 0.0f))
        desc.scale = 1.0f / sqrtf((float)desc.head_dim);
    /* the kernel writes all three gradients; unused ones go to the step's scratch, one after another */
    float *grads[3], *spare = tb_exec_ptr(context, step->scratch);
    int64_t *grad_strides[3] = {desc.grad_q_strides, desc.grad_k_strides, desc.grad_v_strides};
    const int64_t rows[3] = {desc.q_len, desc.kv_len, desc.kv_len};
    const int64_t heads[3] = {desc.q_heads, desc.kv_heads, desc.kv_heads};
    const int64_t cols[3] = {desc.head_dim, desc.head_dim, desc.value_dim};
    for (int i = 0; i < 3; i++) {
        if (step->outputs[i] >= 0) {
            grads[i] = tb_exec_ptr(context, step->outputs[i]);
            attention_strides(tb_exec_info(context, step->outputs[i]), grad_strides[i]);
            continue;
        }
        grads[i] = spare; /* dense [B, H, T, C] */
        grad_strides[i][3] = 1;
        grad_strides[i][2] = cols[i];
        grad_strides[i][1] = rows[i] * cols[i];
        grad_strides[i][0] = heads[i] * rows[i] * cols[i];
        spare += desc.batch * grad_strides[i][0];
    }
    desc.grad_q = grads[0];
    desc.grad_k = grads[1];
    desc.grad_v = grads[2];
    return tb_attention_backward_f32(&desc);
}

tb_status tb_lower_attention_backward(tb_planner *planner, int node) {
    const tb_graph *graph = tb_planner_graph(planner);
    const tb_node *n = &graph->nodes[node];
    tb_step step;
    tb_step_init(&step, planner, node, "attention_backward", exec_attention_backward);
    step.ninputs = n->ninputs;
    for (int i = 0; i < n->ninputs; i++) {
        int loc = tb_planner_value_loc(planner, n->inputs[i]);
        const tb_value_info *info = tb_planner_loc_info(planner, loc);
        /* grad_out, q, k, v, out need a unit stride along their last dim */
        bool strided = info->ndim > 0 && info->shape[info->ndim - 1] > 1 && info->strides[info->ndim - 1] != 1;
        if (i < 5 && strided)
            TB_TRY(tb_planner_stage_loc(planner, loc, true, true, &loc));
        step.inputs[i] = loc;
    }
    step.noutputs = 3;
    TB_TRY(tb_planner_node_outputs(planner, node, step.outputs));
    if (step.outputs[0] < 0 && step.outputs[1] < 0 && step.outputs[2] < 0)
        return TB_OK;
    /* step scratch for the gradients nobody uses (the kernel computes all three) */
    int64_t spare = 0;
    for (int i = 0; i < 3; i++)
        if (step.outputs[i] < 0)
            spare += tb_info_numel(&graph->values[n->first_output + i].info);
    if (spare > 0)
        TB_TRY(tb_planner_scratch(planner, spare, &step.scratch));
    return tb_planner_add_step(planner, &step, NULL);
}

/* ---- CONV2D (eval batch_norm folded, activation and residual fused) ---- */

static tb_status exec_conv2d(const tb_exec_context *context, const tb_step *step) {
    const tb_params_conv2d *p = &step->params.conv2d;
    tb_storage storages[8];
    tb_tensor t[8];
    for (int i = 0; i < step->ninputs; i++)
        tb_exec_tensor(context, step->inputs[i], &storages[i], &t[i]);
    int next = 2;
    const tb_tensor *bias = p->has_bias ? &t[next++] : NULL;
    tb_conv2d_params params;
    memset(&params, 0, sizeof params);
    for (int i = 0; i < 2; i++) {
        params.stride[i] = p->stride[i];
        params.padding[i] = p->padding[i];
        params.dilation[i] = p->dilation[i];
    }
    params.groups = p->groups;
    tb_tensor scale = {0}, shift = {0}, result = {0};
    tb_conv2d_epilogue epilogue;
    memset(&epilogue, 0, sizeof epilogue);
    epilogue.activation = (int)p->activation;
    epilogue.weight_storage = tb_exec_input_storage(context, step->inputs[1]); /* a weight: packed once */
    tb_status status = TB_OK;
    if (p->has_bn) {
        /* inputs: running mean, running var, weight, bias */
        status = tb_op_batch_norm_fold(&t[next + 2], &t[next + 3], &t[next], &t[next + 1], (float)p->bn_eps, &scale,
                                       &shift);
        next += 4;
        epilogue.scale = &scale;
        epilogue.shift = &shift;
    }
    if (status == TB_OK && p->has_residual)
        epilogue.residual = &t[next];
    /* a planned (arena or output) location is written in place; a dynamic one adopts the result */
    const tb_plan *plan = context->plan;
    bool planned = plan->locs[step->outputs[0]].base < 1 + plan->ninputs + plan->noutputs;
    float *into = planned ? tb_exec_ptr(context, step->outputs[0]) : NULL;
    if (status == TB_OK && into)
        status = tb_op_conv2d_fused_into(&t[0], &t[1], bias, &params, &epilogue, into);
    else if (status == TB_OK)
        status = tb_op_conv2d_fused(&t[0], &t[1], bias, &params, &epilogue, &result);
    if (status == TB_OK && !into)
        status = tb_exec_adopt(context, step->outputs[0], &result);
    tb_tensor_release(&result);
    tb_tensor_release(&scale);
    tb_tensor_release(&shift);
    return status;
}

tb_status tb_lower_conv2d(tb_planner *planner, int node) {
    const tb_node *n = &tb_planner_graph(planner)->nodes[node];
    tb_step step;
    tb_step_init(&step, planner, node, n->params.conv2d.has_bn ? "conv2d+batch_norm" : "conv2d", exec_conv2d);
    step.ninputs = n->ninputs;
    for (int i = 0; i < n->ninputs; i++)
        step.inputs[i] = tb_planner_value_loc(planner, n->inputs[i]);
    step.noutputs = 1;
    /* a float32 result is written straight into a planned buffer (an output buffer when it is a graph
     * output: no copy); other dtypes adopt the tensor the op allocates */
    bool all_f32 = tb_planner_graph(planner)->values[n->first_output].info.dtype == TB_F32;
    for (int i = 0; i < 2; i++)
        all_f32 &= tb_planner_loc_info(planner, step.inputs[i])->dtype == TB_F32;
    if (all_f32) {
        TB_TRY(tb_planner_node_outputs(planner, node, step.outputs));
    } else {
        TB_TRY(tb_planner_node_outputs_dynamic(planner, node, step.outputs));
    }
    if (step.outputs[0] < 0)
        return TB_OK;
    return tb_planner_add_step(planner, &step, NULL);
}
