/* Plan preparation: lowers an optimized graph into steps over value locations, then plans memory.
 * Views become locations that alias their base (no step); graph outputs are written in place by the
 * step producing them when its buffer fits, else copied; every other buffer gets an offset in one
 * arena per plan, reusing space between buffers whose lifetimes (first to last step touching them)
 * do not overlap. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"
#include "torchburn/alloc.h"

/* ARENA: planned space; INPUT/OUTPUT: caller memory; DYNAMIC: the result tensor an ops-layer call
 * allocates at run time, adopted as is (its base pointer is bound when the step runs). */
enum { BUFFER_ARENA, BUFFER_INPUT, BUFFER_OUTPUT, BUFFER_DYNAMIC };

typedef struct planner_buffer {
    int kind;
    int index; /* input or output index */
    size_t bytes;
    int first_step, last_step;
    int64_t offset;
} planner_buffer;

struct tb_planner {
    const tb_graph *graph;
    int *value_loc;
    int *value_uses;
    tb_loc *locs;
    int nlocs, loc_capacity;
    planner_buffer *buffers;
    int nbuffers, buffer_capacity;
    tb_step *steps;
    int nsteps, step_capacity;
    tb_ew_program *programs;
    int nprograms, program_capacity;
    int ndynamic;
};

static tb_status grow(void **array, int *capacity, int needed, size_t item) {
    if (needed <= *capacity)
        return TB_OK;
    int capacity_new = *capacity ? *capacity * 2 : 32;
    while (capacity_new < needed)
        capacity_new *= 2;
    void *grown = realloc(*array, (size_t)capacity_new * item);
    if (!grown)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "plan: out of memory while planning");
    *array = grown;
    *capacity = capacity_new;
    return TB_OK;
}

const tb_graph *tb_planner_graph(const tb_planner *planner) { return planner->graph; }

int tb_planner_value_loc(const tb_planner *planner, int value) { return planner->value_loc[value]; }

const tb_value_info *tb_planner_loc_info(const tb_planner *planner, int loc) { return &planner->locs[loc].info; }

void tb_planner_bind(tb_planner *planner, int value, int loc) { planner->value_loc[value] = loc; }

static tb_status new_buffer(tb_planner *planner, int kind, int index, size_t bytes, int *id) {
    TB_TRY(grow((void **)&planner->buffers, &planner->buffer_capacity, planner->nbuffers + 1, sizeof(planner_buffer)));
    planner_buffer *b = &planner->buffers[planner->nbuffers];
    b->kind = kind;
    b->index = index;
    b->bytes = (bytes + 63) & ~(size_t)63;
    b->first_step = -1;
    b->last_step = -1;
    b->offset = 0;
    *id = planner->nbuffers++;
    return TB_OK;
}

static tb_status new_loc(tb_planner *planner, int buffer, int64_t offset, const tb_value_info *info, int *loc) {
    TB_TRY(grow((void **)&planner->locs, &planner->loc_capacity, planner->nlocs + 1, sizeof(tb_loc)));
    tb_loc *l = &planner->locs[planner->nlocs];
    l->base = buffer;
    l->offset = offset;
    l->info = *info;
    *loc = planner->nlocs++;
    return TB_OK;
}

tb_status tb_planner_new_buffer(tb_planner *planner, const tb_value_info *info, int *loc) {
    tb_value_info contiguous;
    tb_info_contiguous(&contiguous, info->dtype, info->ndim, info->shape);
    int buffer;
    TB_TRY(new_buffer(planner, BUFFER_ARENA, 0, (size_t)tb_info_numel(&contiguous) * tb_dtype_size(info->dtype), &buffer));
    return new_loc(planner, buffer, 0, &contiguous, loc);
}

tb_status tb_planner_view_loc(tb_planner *planner, int loc, const tb_value_info *info, int64_t extra_offset_bytes,
                              int *out) {
    tb_loc base = planner->locs[loc];
    return new_loc(planner, base.base, base.offset + extra_offset_bytes, info, out);
}

tb_status tb_planner_scratch(tb_planner *planner, int64_t floats, int *loc) {
    int64_t shape[1] = {floats > 0 ? floats : 1};
    tb_value_info info;
    tb_info_contiguous(&info, TB_F32, 1, shape);
    return tb_planner_new_buffer(planner, &info, loc);
}

tb_status tb_planner_add_program(tb_planner *planner, const tb_ew_program *program, int *index) {
    TB_TRY(grow((void **)&planner->programs, &planner->program_capacity, planner->nprograms + 1, sizeof(tb_ew_program)));
    planner->programs[planner->nprograms] = *program;
    *index = planner->nprograms++;
    return TB_OK;
}

tb_status tb_planner_add_step(tb_planner *planner, const tb_step *step, int *index) {
    TB_TRY(grow((void **)&planner->steps, &planner->step_capacity, planner->nsteps + 1, sizeof(tb_step)));
    planner->steps[planner->nsteps] = *step;
    if (index)
        *index = planner->nsteps;
    planner->nsteps++;
    return TB_OK;
}

void tb_step_init(tb_step *step, const tb_planner *planner, int node, const char *kernel, tb_step_fn run) {
    memset(step, 0, sizeof *step);
    step->run = run;
    step->kernel = kernel;
    step->node = node;
    step->scratch = -1;
    step->program = -1;
    step->inplace_input = -1;
    if (node >= 0) {
        step->op = planner->graph->nodes[node].op;
        step->params = planner->graph->nodes[node].params;
    }
    for (int i = 0; i < TB_GRAPH_MAX_INPUTS; i++)
        step->inputs[i] = -1;
    for (int o = 0; o < TB_GRAPH_MAX_OUTPUTS; o++)
        step->outputs[o] = -1;
}

tb_status tb_planner_node_outputs_dynamic(tb_planner *planner, int node, int *locs) {
    const tb_node *n = &planner->graph->nodes[node];
    for (int o = 0; o < n->noutputs; o++) {
        int value = n->first_output + o;
        locs[o] = -1;
        if (planner->value_uses[value] > 0) {
            tb_value_info info;
            const tb_value_info *v = &planner->graph->values[value].info;
            tb_info_contiguous(&info, v->dtype, v->ndim, v->shape);
            int buffer;
            TB_TRY(new_buffer(planner, BUFFER_DYNAMIC, planner->ndynamic++, 0, &buffer));
            TB_TRY(new_loc(planner, buffer, 0, &info, &locs[o]));
            planner->value_loc[value] = locs[o];
        }
    }
    return TB_OK;
}

tb_status tb_planner_node_outputs(tb_planner *planner, int node, int *locs) {
    const tb_node *n = &planner->graph->nodes[node];
    for (int o = 0; o < n->noutputs; o++) {
        int value = n->first_output + o;
        locs[o] = -1;
        if (planner->value_uses[value] > 0) {
            TB_TRY(tb_planner_new_buffer(planner, &planner->graph->values[value].info, &locs[o]));
            planner->value_loc[value] = locs[o];
        }
    }
    return TB_OK;
}

/* A copy step the planner inserts because a kernel needs another layout or dtype, or an output is a
 * view: dst <- src (any layouts). Counted in tb_tensor_copy_count when it runs. */
static tb_status add_copy(tb_planner *planner, int src, int dst, int node) {
    tb_step step;
    tb_step_init(&step, planner, -1, "copy", tb_exec_layout_copy);
    step.node = node;
    step.op = TB_OP_COPY;
    step.ninputs = 1;
    step.inputs[0] = src;
    step.noutputs = 1;
    step.outputs[0] = dst;
    return tb_planner_add_step(planner, &step, NULL);
}

tb_status tb_planner_stage_loc(tb_planner *planner, int loc, bool contiguous, bool want_f32, int *out) {
    const tb_loc *l = &planner->locs[loc];
    bool ok = (!contiguous || tb_info_is_contiguous(&l->info)) && (!want_f32 || l->info.dtype == TB_F32);
    if (ok) {
        *out = loc;
        return TB_OK;
    }
    tb_value_info info = l->info;
    if (want_f32)
        info.dtype = TB_F32;
    TB_TRY(tb_planner_new_buffer(planner, &info, out));
    return add_copy(planner, loc, *out, -1);
}

tb_status tb_planner_stage(tb_planner *planner, int value, bool contiguous, bool want_f32, int *loc) {
    return tb_planner_stage_loc(planner, planner->value_loc[value], contiguous, want_f32, loc);
}

/* ---- view lowering (VIEW, PERMUTE, EXPAND, SLICE): a new loc over the input's buffer ---- */

tb_status tb_lower_none(tb_planner *planner, int node) { return TB_OK; }

tb_status tb_lower_view(tb_planner *planner, int node) {
    const tb_node *n = &planner->graph->nodes[node];
    int in_loc = planner->value_loc[n->inputs[0]];
    const tb_loc source = planner->locs[in_loc];
    const tb_value_info *inputs[1] = {&source.info};
    tb_value_info info;
    /* re-infer from the location's actual layout: an earlier copy may have made it contiguous */
    TB_TRY(tb_graph_op_infer(n->op)(&n->params, 1, inputs, &info));
    int64_t offset_bytes = 0;
    if (n->op == TB_OP_SLICE) {
        int dim;
        TB_TRY(tb_normalize_dim(n->params.slice.dim, source.info.ndim, &dim));
        int64_t start, end;
        tb_slice_bounds(&n->params.slice, source.info.shape[dim], &start, &end);
        offset_bytes = start * source.info.strides[dim] * (int64_t)tb_dtype_size(source.info.dtype);
    }
    if (n->op == TB_OP_VIEW && !tb_view_strides(&source.info, info.ndim, info.shape, info.strides)) {
        int staged;
        TB_TRY(tb_planner_stage_loc(planner, in_loc, true, false, &staged));
        int64_t shape[TB_MAX_DIMS];
        memcpy(shape, info.shape, sizeof shape); /* tb_info_contiguous clears its output first */
        tb_info_contiguous(&info, source.info.dtype, info.ndim, shape);
        in_loc = staged;
    }
    int loc;
    TB_TRY(tb_planner_view_loc(planner, in_loc, &info, offset_bytes, &loc));
    planner->value_loc[n->first_output] = loc;
    return TB_OK;
}

/* ---- memory planning ---- */

static void touch(tb_planner *planner, int loc, int step) {
    if (loc < 0)
        return;
    int b = planner->locs[loc].base;
    if (b < 0)
        return;
    planner_buffer *buffer = &planner->buffers[b];
    if (buffer->first_step < 0 || step < buffer->first_step)
        buffer->first_step = step;
    if (step > buffer->last_step)
        buffer->last_step = step;
}

static int compare_by_size(const void *a, const void *b, void *context) {
    const planner_buffer *buffers = context;
    size_t sa = buffers[*(const int *)a].bytes, sb = buffers[*(const int *)b].bytes;
    if (sa != sb)
        return sa < sb ? 1 : -1;
    return *(const int *)a - *(const int *)b;
}

/* In place: a step whose kernel may overwrite input `inplace_input` (same element positions, read
 * before written) writes its output into that input's buffer when the input dies at this step, is
 * the whole of an arena buffer of the same dtype, shape and size, and is contiguous. The output's
 * buffer is then dropped and every loc on it moves to the input's. */
static bool can_share(const tb_planner *planner, const tb_step *step, int s, int k) {
    if (k >= step->ninputs || step->inputs[k] < 0 || step->outputs[0] < 0)
        return false;
    const tb_loc *in = &planner->locs[step->inputs[k]], *out = &planner->locs[step->outputs[0]];
    if (in->base < 0 || out->base < 0 || in->base == out->base)
        return false;
    const planner_buffer *bi = &planner->buffers[in->base], *bo = &planner->buffers[out->base];
    bool same_layout = in->offset == 0 && out->offset == 0 && tb_info_is_contiguous(&in->info) &&
                       tb_info_is_contiguous(&out->info) && in->info.dtype == out->info.dtype &&
                       in->info.ndim == out->info.ndim &&
                       memcmp(in->info.shape, out->info.shape, sizeof(int64_t) * (size_t)in->info.ndim) == 0;
    if (!same_layout || bi->kind != BUFFER_ARENA || bo->kind != BUFFER_ARENA || bi->last_step != s ||
        bo->first_step != s || bi->bytes != bo->bytes)
        return false;
    /* another input reading the same buffer through a different view could see overwritten data */
    for (int i = 0; i < step->ninputs; i++)
        if (i != k && step->inputs[i] >= 0 && step->inputs[i] != step->inputs[k] &&
            planner->locs[step->inputs[i]].base == in->base)
            return false;
    return true;
}

static void plan_in_place(tb_planner *planner) {
    for (int s = 0; s < planner->nsteps; s++) {
        const tb_step *step = &planner->steps[s];
        if (step->inplace_input == -1)
            continue;
        int chosen = -1;
        for (int k = 0; k < step->ninputs && chosen < 0; k++)
            if ((step->inplace_input == TB_INPLACE_ANY || step->inplace_input == k) && can_share(planner, step, s, k))
                chosen = k;
        if (chosen < 0)
            continue;
        int from = planner->locs[step->outputs[0]].base, into = planner->locs[step->inputs[chosen]].base;
        for (int l = 0; l < planner->nlocs; l++)
            if (planner->locs[l].base == from)
                planner->locs[l].base = into;
        planner->buffers[into].last_step = planner->buffers[from].last_step;
        planner->buffers[from].first_step = planner->buffers[from].last_step = -1;
    }
}

/* Greedy offsets: largest buffers first, each at the lowest offset not overlapping any placed buffer
 * whose lifetime intersects its own. */
static tb_status assign_offsets(tb_planner *planner, size_t *arena_bytes) {
    int count = 0;
    int *order = malloc(sizeof(int) * (size_t)(planner->nbuffers + 1));
    if (!order)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "plan: out of memory planning the arena");
    for (int b = 0; b < planner->nbuffers; b++)
        if (planner->buffers[b].kind == BUFFER_ARENA && planner->buffers[b].first_step >= 0)
            order[count++] = b;
    qsort_r(order, (size_t)count, sizeof(int), compare_by_size, planner->buffers);
    size_t total = 0;
    for (int i = 0; i < count; i++) {
        planner_buffer *buffer = &planner->buffers[order[i]];
        int64_t offset = 0;
        bool moved = true;
        while (moved) {
            moved = false;
            for (int j = 0; j < i; j++) {
                const planner_buffer *other = &planner->buffers[order[j]];
                bool live_together = other->first_step <= buffer->last_step && buffer->first_step <= other->last_step;
                bool overlap = offset < other->offset + (int64_t)other->bytes && other->offset < offset + (int64_t)buffer->bytes;
                if (live_together && overlap) {
                    offset = other->offset + (int64_t)other->bytes;
                    moved = true;
                }
            }
        }
        buffer->offset = offset;
        if ((size_t)offset + buffer->bytes > total)
            total = (size_t)offset + buffer->bytes;
    }
    free(order);
    *arena_bytes = total;
    return TB_OK;
}

/* Points graph output j at an output buffer: none when an earlier output is the same value (j is
 * then its alias), the producing buffer itself when the value is all of a contiguous arena buffer,
 * else a copy into a fresh output buffer. */
static tb_status bind_output(tb_planner *planner, int j, int *alias) {
    int value = planner->graph->outputs[j];
    int loc = planner->value_loc[value];
    *alias = -1;
    for (int k = 0; k < j && *alias < 0; k++)
        if (planner->graph->outputs[k] == value)
            *alias = k;
    if (*alias >= 0)
        return TB_OK;
    const tb_loc *l = &planner->locs[loc];
    tb_value_info info;
    tb_info_contiguous(&info, l->info.dtype, l->info.ndim, l->info.shape);
    size_t bytes = (size_t)tb_info_numel(&info) * tb_dtype_size(info.dtype);
    planner_buffer *b = &planner->buffers[l->base];
    if (b->kind == BUFFER_ARENA && l->offset == 0 && tb_info_is_contiguous(&l->info) &&
        b->bytes == ((bytes + 63) & ~(size_t)63)) {
        b->kind = BUFFER_OUTPUT;
        b->index = j;
        return TB_OK;
    }
    int buffer, out_loc;
    TB_TRY(new_buffer(planner, BUFFER_OUTPUT, j, bytes, &buffer));
    TB_TRY(new_loc(planner, buffer, 0, &info, &out_loc));
    return add_copy(planner, loc, out_loc, -1);
}

static void planner_free(tb_planner *planner) {
    free(planner->value_loc);
    free(planner->value_uses);
    free(planner->locs);
    free(planner->buffers);
    free(planner->steps);
    free(planner->programs);
}

void tb_plan_release(tb_plan *plan) {
    if (!plan || atomic_fetch_sub(&plan->refcount, 1) != 1)
        return;
    tb_free(atomic_load(&plan->spare_arena));
    free(plan->input_info);
    free(plan->output_info);
    free(plan->output_alias);
    free(plan->steps);
    free(plan->locs);
    free(plan->programs);
    free(plan->description);
    free(plan);
}

void tb_plan_retain(tb_plan *plan) { atomic_fetch_add(&plan->refcount, 1); }

char *tb_plan_build_description(const tb_plan *plan, const tb_graph *graph);

static tb_status lower_all(tb_planner *planner) {
    const tb_graph *graph = planner->graph;
    int input_index = 0;
    for (int n = 0; n < graph->nnodes; n++) {
        const tb_node *node = &graph->nodes[n];
        if (node->op == TB_OP_INPUT) {
            int buffer, loc;
            const tb_value_info *info = &graph->values[node->first_output].info;
            TB_TRY(new_buffer(planner, BUFFER_INPUT, input_index++, 0, &buffer));
            TB_TRY(new_loc(planner, buffer, 0, info, &loc));
            planner->value_loc[node->first_output] = loc;
            continue;
        }
        tb_status status = tb_graph_op_lowering(node->op)(planner, n);
        if (status != TB_OK)
            return tb_error_prefix(status, "plan: lowering %s%s%s", tb_graph_op_name(node->op),
                                   node->label ? " " : "", node->label ? node->label : "");
    }
    return TB_OK;
}

tb_status tb_plan_prepare(const tb_graph *graph, const uint8_t key[32], tb_plan **out) {
    tb_planner planner;
    memset(&planner, 0, sizeof planner);
    planner.graph = graph;
    planner.value_loc = malloc(sizeof(int) * (size_t)(graph->nvalues + 1));
    planner.value_uses = calloc((size_t)graph->nvalues + 1, sizeof(int));
    tb_plan *plan = calloc(1, sizeof *plan);
    tb_status status = TB_OK;
    if (!planner.value_loc || !planner.value_uses || !plan) {
        status = tb_error_set(TB_ERR_OUT_OF_MEMORY, "plan: out of memory");
        goto fail;
    }
    for (int v = 0; v < graph->nvalues; v++)
        planner.value_loc[v] = -1;
    for (int n = 0; n < graph->nnodes; n++)
        for (int i = 0; i < graph->nodes[n].ninputs; i++)
            planner.value_uses[graph->nodes[n].inputs[i]]++;
    for (int o = 0; o < graph->noutputs; o++)
        planner.value_uses[graph->outputs[o]]++;

    plan->output_alias = malloc(sizeof(int) * ((size_t)graph->noutputs + 1));
    if (!plan->output_alias) {
        status = tb_error_set(TB_ERR_OUT_OF_MEMORY, "plan: out of memory");
        goto fail;
    }
    if ((status = lower_all(&planner)) != TB_OK)
        goto fail;
    for (int j = 0; j < graph->noutputs; j++)
        if ((status = bind_output(&planner, j, &plan->output_alias[j])) != TB_OK)
            goto fail;
    for (int s = 0; s < planner.nsteps; s++) {
        const tb_step *step = &planner.steps[s];
        for (int i = 0; i < step->ninputs; i++)
            touch(&planner, step->inputs[i], s);
        for (int o = 0; o < step->noutputs; o++)
            touch(&planner, step->outputs[o], s);
        touch(&planner, step->scratch, s);
    }
    plan_in_place(&planner);
    if ((status = assign_offsets(&planner, &plan->arena_bytes)) != TB_OK)
        goto fail;
    for (int l = 0; l < planner.nlocs; l++) {
        tb_loc *loc = &planner.locs[l];
        if (loc->base < 0)
            continue;
        const planner_buffer *b = &planner.buffers[loc->base];
        if (b->kind == BUFFER_ARENA) {
            loc->base = 0;
            loc->offset += b->offset;
        } else if (b->kind == BUFFER_INPUT) {
            loc->base = 1 + b->index;
        } else if (b->kind == BUFFER_OUTPUT) {
            loc->base = 1 + graph->ninputs + b->index;
        } else {
            loc->base = 1 + graph->ninputs + graph->noutputs + b->index;
        }
    }

    atomic_init(&plan->refcount, 1);
    atomic_init(&plan->spare_arena, NULL);
    memcpy(plan->key, key, 32);
    plan->ninputs = graph->ninputs;
    plan->noutputs = graph->noutputs;
    plan->ndynamic = planner.ndynamic;
    plan->input_info = calloc((size_t)graph->ninputs + 1, sizeof(tb_value_info));
    plan->output_info = calloc((size_t)graph->noutputs + 1, sizeof(tb_value_info));
    if (!plan->input_info || !plan->output_info) {
        status = tb_error_set(TB_ERR_OUT_OF_MEMORY, "plan: out of memory");
        goto fail;
    }
    int input_index = 0;
    for (int n = 0; n < graph->nnodes; n++)
        if (graph->nodes[n].op == TB_OP_INPUT)
            plan->input_info[input_index++] = graph->values[graph->nodes[n].first_output].info;
    for (int j = 0; j < graph->noutputs; j++) {
        const tb_value_info *info = &graph->values[graph->outputs[j]].info;
        tb_info_contiguous(&plan->output_info[j], info->dtype, info->ndim, info->shape);
    }
    plan->steps = planner.steps;
    plan->nsteps = planner.nsteps;
    plan->locs = planner.locs;
    plan->nlocs = planner.nlocs;
    plan->programs = planner.programs;
    plan->nprograms = planner.nprograms;
    planner.steps = NULL;
    planner.locs = NULL;
    planner.programs = NULL;
    plan->description = tb_plan_build_description(plan, graph);
    planner_free(&planner);
    *out = plan;
    return TB_OK;
fail:
    planner_free(&planner);
    if (plan) {
        free(plan->input_info);
        free(plan->output_info);
        free(plan->output_alias);
        free(plan);
    }
    return status;
}
