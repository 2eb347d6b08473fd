/* Lowering and execution of the remaining ops: constants, copies, concatenation, softmax and layer/RMS
 * norm (row kernels run directly on planned buffers), eval batch_norm (per-channel scale and shift),
 * and every other nn op through the ops layer (ops.h / ops_nn.h), whose freshly allocated result is
 * stored into the planned location. */
#include <math.h>
#include <string.h>

#include "graph/graph_internal.h"
#include "torchburn/ops.h"
#include "torchburn/ops_nn.h"
#include "torchburn/thread_pool.h"

/* ---- tensors over locations ---- */

bool tb_exec_tensor(const tb_exec_context *context, int loc, tb_storage *storage, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    void *data = tb_exec_ptr(context, loc);
    const tb_value_info *info = tb_exec_info(context, loc);
    if (!data) {
        /* an empty value may come without memory (torch hands NULL for 0-element tensors): give it a
         * valid address that nothing reads, so the ops see a proper empty tensor */
        static _Alignas(64) char no_elements[64];
        bool has_zero_dim = false;
        for (int d = 0; d < info->ndim; d++)
            has_zero_dim |= info->shape[d] == 0;
        if (!has_zero_dim)
            return false;
        data = no_elements;
    }
    int64_t last = 0;
    bool empty = false;
    for (int d = 0; d < info->ndim; d++) {
        if (info->shape[d] == 0)
            empty = true;
        else
            last += (info->shape[d] - 1) * info->strides[d];
    }
    memset(storage, 0, sizeof *storage);
    atomic_init(&storage->refcount, 1); /* ours, never dropped: the memory belongs to the plan run */
    storage->data = data;
    storage->nbytes = empty ? 0 : (size_t)(last + 1) * tb_dtype_size(info->dtype);
    out->storage = storage;
    out->dtype = info->dtype;
    out->ndim = info->ndim;
    memcpy(out->shape, info->shape, sizeof out->shape);
    memcpy(out->strides, info->strides, sizeof out->strides);
    out->offset = 0;
    return true;
}

tb_status tb_exec_store(const tb_exec_context *context, int loc, const tb_tensor *value) {
    tb_storage storage;
    tb_tensor dst;
    if (loc < 0 || !value->storage)
        return TB_OK;
    if (!tb_exec_tensor(context, loc, &storage, &dst)) {
        char got[96], want[96];
        const tb_value_info *info = tb_exec_info(context, loc);
        return tb_error_set(TB_ERR_INTERNAL, "store: result %s %s does not fit its unbound location %s %s",
                            tb_dtype_name(value->dtype), tb_shape_string(value->ndim, value->shape, got, sizeof got),
                            tb_dtype_name(info->dtype), tb_shape_string(info->ndim, info->shape, want, sizeof want));
    }
    return tb_tensor_copy(&dst, value);
}

tb_status tb_exec_adopt(const tb_exec_context *context, int loc, tb_tensor *value) {
    if (loc < 0 || !value->storage)
        return TB_OK;
    const tb_plan *plan = context->plan;
    const tb_loc *l = &plan->locs[loc];
    int first_dynamic = 1 + plan->ninputs + plan->noutputs;
    const tb_value_info *info = &l->info;
    bool same = l->base >= first_dynamic && value->dtype == info->dtype && value->ndim == info->ndim &&
                memcmp(value->shape, info->shape, sizeof(int64_t) * (size_t)info->ndim) == 0 &&
                tb_tensor_is_contiguous(value) && l->offset == 0;
    if (!same)
        return tb_exec_store(context, loc, value);
    int k = l->base - first_dynamic;
    tb_tensor_release(&context->dynamic[k]);
    context->dynamic[k] = *value;
    memset(value, 0, sizeof *value);
    context->bases[l->base] = tb_tensor_data(&context->dynamic[k]);
    return TB_OK;
}

tb_status tb_exec_copy(const tb_exec_context *context, const tb_step *step) {
    tb_storage storage;
    tb_tensor src;
    if (!tb_exec_tensor(context, step->inputs[0], &storage, &src))
        return tb_error_set(TB_ERR_INTERNAL, "copy: missing source");
    return tb_exec_store(context, step->outputs[0], &src);
}

tb_status tb_exec_layout_copy(const tb_exec_context *context, const tb_step *step) {
    tb_tensor_note_copy();
    return tb_exec_copy(context, step);
}

static tb_status simple_step_with(tb_planner *planner, int node, const char *kernel, tb_step_fn run, bool dynamic) {
    const tb_node *n = &tb_planner_graph(planner)->nodes[node];
    tb_step step;
    tb_step_init(&step, planner, node, kernel, run);
    step.ninputs = n->ninputs;
    for (int i = 0; i < n->ninputs; i++)
        step.inputs[i] = tb_planner_value_loc(planner, n->inputs[i]);
    step.noutputs = n->noutputs;
    if (dynamic)
        TB_TRY(tb_planner_node_outputs_dynamic(planner, node, step.outputs));
    else
        TB_TRY(tb_planner_node_outputs(planner, node, step.outputs));
    bool any = false;
    for (int o = 0; o < n->noutputs; o++)
        any |= step.outputs[o] >= 0;
    return any ? tb_planner_add_step(planner, &step, NULL) : TB_OK;
}

tb_status tb_lower_dynamic_step(tb_planner *planner, int node, tb_step_fn run) {
    return simple_step_with(planner, node, tb_graph_op_name(tb_planner_graph(planner)->nodes[node].op), run, true);
}

static tb_status simple_step(tb_planner *planner, int node, const char *kernel, tb_step_fn run) {
    return simple_step_with(planner, node, kernel, run, false);
}

/* ---- FULL ---- */

static tb_status exec_full(const tb_exec_context *context, const tb_step *step) {
    const tb_value_info *info = tb_exec_info(context, step->outputs[0]);
    char *data = tb_exec_ptr(context, step->outputs[0]);
    int64_t n = tb_info_numel(info);
    double value = step->params.full.value;
    size_t size = tb_dtype_size(info->dtype);
    char element[8];
    switch (info->dtype) {
    case TB_F64: memcpy(element, &value, 8); break;
    case TB_I64: { int64_t v = (int64_t)value; memcpy(element, &v, 8); break; }
    case TB_I32: { int32_t v = (int32_t)value; memcpy(element, &v, 4); break; }
    case TB_I16: { int16_t v = (int16_t)value; memcpy(element, &v, 2); break; }
    case TB_I8: { int8_t v = (int8_t)value; memcpy(element, &v, 1); break; }
    case TB_U8: { uint8_t v = (uint8_t)value; memcpy(element, &v, 1); break; }
    case TB_BOOL: element[0] = value != 0.0; break;
    default: {
        float f = (float)value;
        tb_dtype_table[info->dtype].from_f32(&f, element, 1);
    }
    }
    for (int64_t i = 0; i < n; i++)
        memcpy(data + (size_t)i * size, element, size);
    return TB_OK;
}

tb_status tb_lower_full(tb_planner *planner, int node) { return simple_step(planner, node, "full", exec_full); }

/* ---- CAT: each input copied into its slice of the output ---- */

static tb_status exec_cat(const tb_exec_context *context, const tb_step *step) {
    tb_storage out_storage;
    tb_tensor out;
    tb_exec_tensor(context, step->outputs[0], &out_storage, &out);
    int dim;
    TB_TRY(tb_normalize_dim(step->params.cat.dim, out.ndim, &dim));
    int64_t start = 0;
    for (int i = 0; i < step->ninputs; i++) {
        tb_storage storage;
        tb_tensor src, slot;
        tb_exec_tensor(context, step->inputs[i], &storage, &src);
        int64_t size = src.shape[dim];
        TB_TRY(tb_tensor_slice(&out, dim, start, start + size, 1, &slot));
        tb_status status = tb_tensor_copy(&slot, &src);
        tb_tensor_release(&slot);
        TB_TRY(status);
        start += size;
    }
    return TB_OK;
}

tb_status tb_lower_cat(tb_planner *planner, int node) { return simple_step(planner, node, "cat", exec_cat); }

/* ---- row kernels: softmax, layer norm, RMS norm ---- */

typedef struct rows_job {
    const tb_elementwise_kernels *kernels;
    tb_ew_job *epilogue; /* norm epilogue over the rows just written, or NULL */
    const float *x, *weight, *bias;
    float *y, *mean, *rstd;
    int64_t outer, len, inner;
    float eps;
    int kind; /* 0 softmax, 1 log_softmax, 2 layer norm, 3 RMS norm */
} rows_job;

static void rows_chunk(void *context, int64_t begin, int64_t end, int thread_index) {
    const rows_job *job = context;
    int64_t count = end - begin;
    if (job->kind <= 1) {
        int64_t offset = begin * job->len * job->inner;
        job->kernels->softmax(job->x + offset, job->y + offset, count, job->len, job->inner, job->kind == 1);
    } else if (job->kind == 2) {
        int64_t offset = begin * job->len;
        job->kernels->layer_norm(job->x + offset, job->weight, job->bias, job->y + offset, count, job->len, job->eps,
                                 job->mean ? job->mean + begin : NULL, job->rstd ? job->rstd + begin : NULL);
    } else {
        int64_t offset = begin * job->len;
        job->kernels->rms_norm(job->x + offset, job->weight, job->y + offset, count, job->len, job->eps);
    }
    if (job->epilogue)
        tb_ew_run_range(job->epilogue, begin * job->len, end * job->len);
    (void)thread_index;
}

static tb_status exec_softmax(const tb_exec_context *context, const tb_step *step) {
    const tb_value_info *info = tb_exec_info(context, step->inputs[0]);
    int dim;
    TB_TRY(tb_normalize_dim(step->params.softmax.dim, info->ndim > 0 ? info->ndim : 1, &dim));
    rows_job job = {.kernels = tb_elementwise_kernels_active(), .x = tb_exec_ptr(context, step->inputs[0]),
                    .y = tb_exec_ptr(context, step->outputs[0]), .outer = 1, .len = 1, .inner = 1,
                    .kind = step->params.softmax.log ? 1 : 0};
    for (int d = 0; d < info->ndim; d++) {
        if (d < dim)
            job.outer *= info->shape[d];
        else if (d == dim)
            job.len = info->shape[d];
        else
            job.inner *= info->shape[d];
    }
    if (job.outer * job.len * job.inner == 0)
        return TB_OK;
    int64_t grain = 16384 / (job.len * job.inner) + 1;
    tb_parallel_for(job.outer, grain, rows_chunk, &job);
    return TB_OK;
}

static tb_status exec_norm(const tb_exec_context *context, const tb_step *step) {
    const tb_params_norm *p = &step->params.norm;
    const tb_value_info *info = tb_exec_info(context, step->inputs[0]);
    int next = 1;
    rows_job job = {.kernels = tb_elementwise_kernels_active(), .x = tb_exec_ptr(context, step->inputs[0]),
                    .y = tb_exec_ptr(context, step->outputs[0]), .eps = (float)p->eps,
                    .kind = step->op == TB_OP_RMS_NORM ? 3 : 2, .len = 1};
    job.weight = p->has_weight ? tb_exec_ptr(context, step->inputs[next++]) : NULL;
    job.bias = p->has_bias ? tb_exec_ptr(context, step->inputs[next++]) : NULL;
    tb_ew_job epilogue;
    if (p->epilogue) {
        /* program input 0 is the normalized output itself, the rest are the step's remaining inputs */
        int locs[TB_EW_MAX_INPUTS];
        int count = step->ninputs - next + 1;
        locs[0] = step->outputs[0];
        for (int i = 1; i < count; i++)
            locs[i] = step->inputs[next + i - 1];
        TB_TRY(tb_ew_job_init(&epilogue, context, &context->plan->programs[step->program], count, locs,
                              step->outputs[0]));
        job.epilogue = &epilogue;
    }
    if (step->op == TB_OP_LAYER_NORM) {
        job.mean = tb_exec_ptr(context, step->outputs[1]);
        job.rstd = tb_exec_ptr(context, step->outputs[2]);
    }
    for (int d = info->ndim - (int)p->normalized_ndim; d < info->ndim; d++)
        job.len *= info->shape[d];
    job.outer = job.len ? tb_info_numel(info) / job.len : 0;
    if (job.outer == 0 || job.len == 0)
        return TB_OK;
    tb_parallel_for(job.outer, 16384 / job.len + 1, rows_chunk, &job);
    if (job.epilogue && atomic_load(&job.epilogue->failed))
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "norm epilogue: out of memory for scratch tiles");
    return TB_OK;
}

/* Row kernels read contiguous f32 and write contiguous f32: stage the inputs; a non-f32 result is
 * computed into an f32 temporary and converted by a copy. */
static tb_status lower_rows(tb_planner *planner, int node, const char *kernel, tb_step_fn run, int program) {
    const tb_node *n = &tb_planner_graph(planner)->nodes[node];
    tb_step step;
    tb_step_init(&step, planner, node, kernel, run);
    step.program = program;
    step.ninputs = n->ninputs;
    for (int i = 0; i < n->ninputs; i++)
        TB_TRY(tb_planner_stage(planner, n->inputs[i], true, true, &step.inputs[i]));
    step.noutputs = n->noutputs;
    int final[TB_GRAPH_MAX_OUTPUTS];
    TB_TRY(tb_planner_node_outputs(planner, node, final));
    for (int o = 0; o < n->noutputs; o++) {
        step.outputs[o] = final[o];
        if (final[o] >= 0 && tb_planner_loc_info(planner, final[o])->dtype != TB_F32) {
            tb_value_info info = *tb_planner_loc_info(planner, final[o]);
            info.dtype = TB_F32;
            TB_TRY(tb_planner_new_buffer(planner, &info, &step.outputs[o]));
        }
    }
    if (step.outputs[0] < 0) /* the stats are only computed alongside the output */
        TB_TRY(tb_planner_new_buffer(planner, &tb_planner_graph(planner)->values[n->first_output].info, &step.outputs[0]));
    step.inplace_input = program < 0 ? 0 : -1; /* row kernels allow y == x (an epilogue may not) */
    TB_TRY(tb_planner_add_step(planner, &step, NULL));
    for (int o = 0; o < n->noutputs; o++) {
        if (final[o] >= 0 && step.outputs[o] != final[o]) {
            tb_step copy;
            tb_step_init(&copy, planner, -1, "copy", tb_exec_layout_copy);
            copy.ninputs = 1;
            copy.inputs[0] = step.outputs[o];
            copy.noutputs = 1;
            copy.outputs[0] = final[o];
            TB_TRY(tb_planner_add_step(planner, &copy, NULL));
        }
    }
    return TB_OK;
}

tb_status tb_lower_softmax(tb_planner *planner, int node) {
    return lower_rows(planner, node, "softmax", exec_softmax, -1);
}

tb_status tb_lower_norm(tb_planner *planner, int node) {
    const tb_graph *graph = tb_planner_graph(planner);
    const tb_node *n = &graph->nodes[node];
    int64_t epilogue = n->params.norm.epilogue;
    const char *kernel = n->op == TB_OP_RMS_NORM ? (epilogue ? "rms_norm+elementwise" : "rms_norm")
                                                 : (epilogue ? "layer_norm+elementwise" : "layer_norm");
    int program = -1;
    if (epilogue)
        TB_TRY(tb_planner_add_program(planner, &graph->programs[epilogue - 1], &program));
    return lower_rows(planner, node, kernel, exec_norm, program);
}

/* ---- eval batch_norm: y = x * scale[c] + shift[c] ---- */

typedef struct bn_job {
    const float *x, *mean, *var, *weight, *bias;
    float *y;
    int64_t channels, plane;
    float eps;
} bn_job;

static void bn_chunk(void *context, int64_t begin, int64_t end, int thread_index) {
    const bn_job *job = context;
    for (int64_t p = begin; p < end; p++) {
        int64_t c = p % job->channels;
        float scale = 1.0f / sqrtf(job->var[c] + job->eps);
        if (job->weight)
            scale *= job->weight[c];
        float shift = (job->bias ? job->bias[c] : 0.0f) - job->mean[c] * scale;
        const float *x = job->x + p * job->plane;
        float *y = job->y + p * job->plane;
        for (int64_t i = 0; i < job->plane; i++)
            y[i] = x[i] * scale + shift;
    }
    (void)thread_index;
}

static tb_status exec_batch_norm(const tb_exec_context *context, const tb_step *step) {
    const tb_params_batch_norm *p = &step->params.batch_norm;
    const tb_value_info *info = tb_exec_info(context, step->inputs[0]);
    bn_job job = {.x = tb_exec_ptr(context, step->inputs[0]), .mean = tb_exec_ptr(context, step->inputs[1]),
                  .var = tb_exec_ptr(context, step->inputs[2]), .y = tb_exec_ptr(context, step->outputs[0]),
                  .channels = info->shape[1], .plane = 1, .eps = (float)p->eps};
    int next = 3;
    job.weight = p->has_weight ? tb_exec_ptr(context, step->inputs[next++]) : NULL;
    job.bias = p->has_bias ? tb_exec_ptr(context, step->inputs[next++]) : NULL;
    for (int d = 2; d < info->ndim; d++)
        job.plane *= info->shape[d];
    int64_t planes = info->shape[0] * info->shape[1];
    if (planes * job.plane == 0)
        return TB_OK;
    tb_parallel_for(planes, 16384 / job.plane + 1, bn_chunk, &job);
    return TB_OK;
}

tb_status tb_lower_batch_norm(tb_planner *planner, int node) {
    return lower_rows(planner, node, "batch_norm", exec_batch_norm, -1);
}

/* ---- reductions through the ops layer ---- */

static tb_status exec_reduce(const tb_exec_context *context, const tb_step *step) {
    tb_storage storage;
    tb_tensor x, result = {0};
    tb_exec_tensor(context, step->inputs[0], &storage, &x);
    tb_status status;
    if (step->op == TB_OP_VAR) {
        const tb_params_var *p = &step->params.var;
        status = tb_op_var(&x, (uint32_t)p->dim_mask, p->correction, p->keepdim != 0, p->take_sqrt != 0, &result);
    } else {
        const tb_params_reduce *p = &step->params.reduce;
        status = p->op == TB_GRAPH_REDUCE_MEAN ? tb_op_mean(&x, (uint32_t)p->dim_mask, p->keepdim != 0, &result)
                                               : tb_op_reduce((int)p->op, &x, (uint32_t)p->dim_mask, p->keepdim != 0, &result);
    }
    if (status == TB_OK)
        status = tb_exec_adopt(context, step->outputs[0], &result);
    tb_tensor_release(&result);
    return status;
}

tb_status tb_lower_reduce(tb_planner *planner, int node) {
    return simple_step_with(planner, node, "reduce", exec_reduce, true);
}
tb_status tb_lower_var(tb_planner *planner, int node) { return simple_step_with(planner, node, "var", exec_reduce, true); }

/* ---- every other nn op through ops_nn.h ---- */

static void pool_params(const tb_params_pool *p, tb_pool2d_params *out) {
    memset(out, 0, sizeof *out);
    for (int i = 0; i < 2; i++) {
        out->kernel[i] = p->kernel[i];
        out->stride[i] = p->stride[i];
        out->padding[i] = p->padding[i];
        out->dilation[i] = p->dilation[i] ? p->dilation[i] : 1;
    }
    out->ceil_mode = p->ceil_mode != 0;
    out->count_include_pad = p->count_include_pad != 0;
    out->divisor_override = p->divisor_override;
}

/* Pooling of a float32/float64 input writes straight into planned buffers (arena, or an output buffer
 * when the result is a graph output, as the values and indices a backward needs are): no copy. The
 * lowering plans those outputs (tb_lower_nn); other dtypes adopt the tensors the op allocates. */
static bool pool_writes_in_place(const tb_graph *graph, const tb_node *n) {
    if (n->op != TB_OP_MAX_POOL2D && n->op != TB_OP_AVG_POOL2D)
        return false;
    tb_dtype in = graph->values[n->inputs[0]].info.dtype, out = graph->values[n->first_output].info.dtype;
    return (in == TB_F32 || in == TB_F64) && out == in;
}

static bool pool_in_place(const tb_exec_context *context, const tb_step *step) {
    const tb_plan *plan = context->plan;
    if (step->outputs[0] < 0)
        return false;
    int base = plan->locs[step->outputs[0]].base;
    return base >= 0 && base < 1 + plan->ninputs + plan->noutputs;
}

static tb_status exec_nn(const tb_exec_context *context, const tb_step *step) {
    enum { MAX = 8 };
    tb_storage storages[MAX];
    tb_tensor in[MAX];
    const tb_tensor *t[MAX];
    for (int i = 0; i < step->ninputs && i < MAX; i++)
        t[i] = tb_exec_tensor(context, step->inputs[i], &storages[i], &in[i]) ? &in[i] : NULL;
    tb_tensor out[TB_GRAPH_MAX_OUTPUTS];
    memset(out, 0, sizeof out);
    bool want[TB_GRAPH_MAX_OUTPUTS];
    for (int o = 0; o < TB_GRAPH_MAX_OUTPUTS; o++)
        want[o] = o < step->noutputs && step->outputs[o] >= 0 && context->plan->locs[step->outputs[o]].base >= 0;
#define OUT(o) (want[o] ? &out[o] : NULL)
    const tb_graph_params *p = &step->params;
    tb_status status;
    switch (step->op) {
    case TB_OP_GROUP_NORM: {
        int next = 1;
        const tb_tensor *w = p->group_norm.has_weight ? t[next++] : NULL;
        const tb_tensor *b = p->group_norm.has_bias ? t[next++] : NULL;
        status = tb_op_group_norm(t[0], w, b, p->group_norm.groups, (float)p->group_norm.eps, &out[0], OUT(1), OUT(2));
        break;
    }
    case TB_OP_BATCH_NORM_TRAIN: {
        const tb_params_batch_norm_train *b = &p->batch_norm_train;
        int next = 1;
        const tb_tensor *w = b->has_weight ? t[next++] : NULL;
        const tb_tensor *bias = b->has_bias ? t[next++] : NULL;
        const tb_tensor *rm = b->has_running ? t[next++] : NULL;
        const tb_tensor *rv = b->has_running ? t[next++] : NULL;
        status = tb_op_batch_norm(t[0], w, bias, rm, rv, true, (float)b->momentum, (float)b->eps, &out[0], OUT(1), OUT(2),
                                  b->has_running ? OUT(3) : NULL, b->has_running ? OUT(4) : NULL);
        break;
    }
    case TB_OP_MAX_POOL2D: {
        tb_pool2d_params pp;
        pool_params(&p->pool, &pp);
        if (pool_in_place(context, step))
            status = tb_op_max_pool2d_into(t[0], &pp, tb_exec_ptr(context, step->outputs[0]),
                                           want[1] ? tb_exec_ptr(context, step->outputs[1]) : NULL);
        else
            status = tb_op_max_pool2d(t[0], &pp, &out[0], OUT(1));
        break;
    }
    case TB_OP_AVG_POOL2D: {
        tb_pool2d_params pp;
        pool_params(&p->pool, &pp);
        if (pool_in_place(context, step))
            status = tb_op_avg_pool2d_into(t[0], &pp, tb_exec_ptr(context, step->outputs[0]));
        else
            status = tb_op_avg_pool2d(t[0], &pp, &out[0]);
        break;
    }
    case TB_OP_ADAPTIVE_AVG_POOL2D:
        status = tb_op_adaptive_avg_pool2d(t[0], p->adaptive_pool.output_size[0], p->adaptive_pool.output_size[1], &out[0]);
        break;
    case TB_OP_EMBEDDING:
        status = tb_op_embedding(t[0], t[1], &out[0]);
        break;
    case TB_OP_CONV2D_BACKWARD: {
        const tb_params_conv2d_backward *c = &p->conv2d_backward;
        tb_conv2d_params cp;
        memset(&cp, 0, sizeof cp);
        for (int i = 0; i < 2; i++) {
            cp.stride[i] = c->stride[i];
            cp.padding[i] = c->padding[i];
            cp.dilation[i] = c->dilation[i];
        }
        cp.groups = c->groups;
        bool mask[3] = {c->output_mask[0] && want[0], c->output_mask[1] && want[1], c->output_mask[2] && want[2]};
        status = tb_op_conv2d_backward(t[0], t[1], t[2], &cp, mask, &out[0], &out[1], &out[2]);
        break;
    }
    case TB_OP_MAX_POOL2D_BACKWARD:
        status = tb_op_max_pool2d_backward(t[0], t[1], t[2], &out[0]);
        break;
    case TB_OP_AVG_POOL2D_BACKWARD: {
        tb_pool2d_params pp;
        pool_params(&p->pool, &pp);
        status = tb_op_avg_pool2d_backward(t[0], t[1], &pp, &out[0]);
        break;
    }
    case TB_OP_ADAPTIVE_AVG_POOL2D_BACKWARD:
        status = tb_op_adaptive_avg_pool2d_backward(t[0], t[1], &out[0]);
        break;
    case TB_OP_BATCH_NORM_BACKWARD: {
        const tb_params_batch_norm_backward *b = &p->batch_norm_backward;
        int next = 2;
        const tb_tensor *w = b->has_weight ? t[next++] : NULL;
        const tb_tensor *rm = b->has_running ? t[next++] : NULL;
        const tb_tensor *rv = b->has_running ? t[next++] : NULL;
        const tb_tensor *sm = b->has_save ? t[next++] : NULL;
        const tb_tensor *si = b->has_save ? t[next++] : NULL;
        bool mask[3] = {b->output_mask[0] && want[0], b->output_mask[1] && want[1], b->output_mask[2] && want[2]};
        status = tb_op_batch_norm_backward(t[0], t[1], w, rm, rv, sm, si, b->train != 0, (float)b->eps, mask, &out[0],
                                           &out[1], &out[2]);
        break;
    }
    case TB_OP_LAYER_NORM_BACKWARD: {
        const tb_params_layer_norm_backward *b = &p->layer_norm_backward;
        int next = 4;
        const tb_tensor *w = b->has_weight ? t[next++] : NULL;
        const tb_tensor *bias = b->has_bias ? t[next++] : NULL;
        bool mask[3] = {b->output_mask[0] && want[0], b->output_mask[1] && want[1], b->output_mask[2] && want[2]};
        status = tb_op_layer_norm_backward(t[0], t[1], (int)b->normalized_ndim, t[2], t[3], w, bias, mask, &out[0],
                                           &out[1], &out[2]);
        break;
    }
    case TB_OP_GROUP_NORM_BACKWARD: {
        const tb_params_group_norm_backward *b = &p->group_norm_backward;
        const tb_tensor *w = b->has_weight ? t[4] : NULL;
        bool mask[3] = {b->output_mask[0] && want[0], b->output_mask[1] && want[1], b->output_mask[2] && want[2]};
        status = tb_op_group_norm_backward(t[0], t[1], t[2], t[3], w, b->groups, mask, &out[0], &out[1], &out[2]);
        break;
    }
    case TB_OP_SOFTMAX_BACKWARD:
        status = tb_op_softmax_backward(t[0], t[1], p->softmax.dim, p->softmax.log != 0, (tb_dtype)p->softmax.dtype,
                                        &out[0]);
        break;
    case TB_OP_EMBEDDING_BACKWARD:
        status = tb_op_embedding_backward(t[0], t[1], p->embedding_backward.num_weights, p->embedding_backward.padding_idx,
                                          p->embedding_backward.scale_grad_by_freq != 0, &out[0]);
        break;
    case TB_OP_NLL_LOSS:
        status = tb_op_nll_loss(t[0], t[1], p->loss.has_weight ? t[2] : NULL, (int)p->loss.reduction,
                                p->loss.ignore_index, &out[0], OUT(1));
        break;
    case TB_OP_NLL_LOSS_BACKWARD:
        status = tb_op_nll_loss_backward(t[0], t[1], t[2], p->loss.has_weight ? t[4] : NULL, (int)p->loss.reduction,
                                         p->loss.ignore_index, t[3], &out[0]);
        break;
    case TB_OP_MSE_LOSS:
        status = tb_op_mse_loss(t[0], t[1], (int)p->loss.reduction, &out[0]);
        break;
    case TB_OP_MSE_LOSS_BACKWARD:
        status = tb_op_mse_loss_backward(t[0], t[1], t[2], (int)p->loss.reduction, &out[0]);
        break;
    case TB_OP_SMOOTH_L1_LOSS:
        status = tb_op_smooth_l1_loss(t[0], t[1], (int)p->loss.reduction, (float)p->loss.beta, &out[0]);
        break;
    case TB_OP_SMOOTH_L1_LOSS_BACKWARD:
        status = tb_op_smooth_l1_loss_backward(t[0], t[1], t[2], (int)p->loss.reduction, (float)p->loss.beta, &out[0]);
        break;
    case TB_OP_BCE_LOSS:
        status = tb_op_binary_cross_entropy(t[0], t[1], p->loss.has_weight ? t[2] : NULL, (int)p->loss.reduction, &out[0]);
        break;
    case TB_OP_BCE_LOSS_BACKWARD:
        status = tb_op_binary_cross_entropy_backward(t[0], t[1], t[2], p->loss.has_weight ? t[3] : NULL,
                                                     (int)p->loss.reduction, &out[0]);
        break;
    default:
        status = tb_error_set(TB_ERR_INTERNAL, "no nn lowering for %s", tb_graph_op_name(step->op));
    }
#undef OUT
    for (int o = 0; o < step->noutputs && status == TB_OK; o++)
        if (want[o])
            status = tb_exec_adopt(context, step->outputs[o], &out[o]);
    for (int o = 0; o < TB_GRAPH_MAX_OUTPUTS; o++)
        tb_tensor_release(&out[o]);
    return status;
}

tb_status tb_lower_nn(tb_planner *planner, int node) {
    const tb_node *n = &tb_planner_graph(planner)->nodes[node];
    if (n->ninputs > 8)
        return tb_error_set(TB_ERR_UNSUPPORTED, "too many inputs");
    if (pool_writes_in_place(tb_planner_graph(planner), n))
        return simple_step_with(planner, node, tb_graph_op_name(n->op), exec_nn, false);
    return simple_step_with(planner, node, tb_graph_op_name(n->op), exec_nn, true);
}
