/* Running prepared plans: binds the input/output pointers and the arena, runs the steps in order,
 * and reports which step failed. Also the plan accessors and the human-readable description. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "graph/graph_internal.h"
#include "torchburn/alloc.h"

int tb_plan_num_inputs(const tb_plan *plan) { return plan->ninputs; }
int tb_plan_num_outputs(const tb_plan *plan) { return plan->noutputs; }
const tb_value_info *tb_plan_input_info(const tb_plan *plan, int index) { return &plan->input_info[index]; }
const tb_value_info *tb_plan_output_info(const tb_plan *plan, int index) { return &plan->output_info[index]; }
int tb_plan_output_alias(const tb_plan *plan, int index) {
    return (index >= 0 && index < plan->noutputs) ? plan->output_alias[index] : -1;
}
void tb_plan_key(const tb_plan *plan, uint8_t out[32]) { memcpy(out, plan->key, 32); }
size_t tb_plan_arena_bytes(const tb_plan *plan) { return plan->arena_bytes; }
int tb_plan_num_steps(const tb_plan *plan) { return plan->nsteps; }

bool tb_plan_input_matches(const tb_plan *plan, int index, tb_dtype dtype, int ndim, const int64_t *shape,
                           const int64_t *strides) {
    const tb_value_info *info = &plan->input_info[index];
    if (info->dtype != dtype || info->ndim != ndim)
        return false;
    int64_t expected = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        if (shape[d] != info->shape[d])
            return false;
        int64_t stride = strides ? strides[d] : expected;
        if (shape[d] != 1 && stride != info->strides[d])
            return false;
        expected *= shape[d];
    }
    return true;
}

static double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

const char *tb_plan_step_kernel(const tb_plan *plan, int step) {
    return (step >= 0 && step < plan->nsteps) ? plan->steps[step].kernel : "";
}

static tb_status run(const tb_plan *plan, void *const *inputs, struct tb_storage *const *input_storages,
                     void *const *outputs, double *step_seconds);

tb_status tb_plan_run(const tb_plan *plan, void *const *inputs, void *const *outputs) {
    return run(plan, inputs, NULL, outputs, NULL);
}

tb_status tb_plan_run_storages(const tb_plan *plan, void *const *inputs, struct tb_storage *const *input_storages,
                               void *const *outputs) {
    return run(plan, inputs, input_storages, outputs, NULL);
}

tb_status tb_plan_run_profiled(const tb_plan *plan, void *const *inputs, void *const *outputs, double *step_seconds) {
    return run(plan, inputs, NULL, outputs, step_seconds);
}

static tb_status run(const tb_plan *plan, void *const *inputs, struct tb_storage *const *input_storages,
                     void *const *outputs, double *step_seconds) {
    enum { STACK_BASES = 64 };
    char *stack_bases[STACK_BASES];
    int nbases = 1 + plan->ninputs + plan->noutputs + plan->ndynamic;
    char **bases = nbases <= STACK_BASES ? stack_bases : malloc(sizeof(char *) * (size_t)nbases);
    tb_tensor stack_dynamic[8];
    tb_tensor *dynamic = plan->ndynamic <= 8 ? stack_dynamic : calloc((size_t)plan->ndynamic, sizeof(tb_tensor));
    if (!bases || !dynamic) {
        if (bases != stack_bases)
            free(bases);
        if (dynamic != stack_dynamic)
            free(dynamic);
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "plan: out of memory binding buffers");
    }
    if (dynamic == stack_dynamic)
        memset(stack_dynamic, 0, sizeof stack_dynamic);
    tb_plan *mutable_plan = (tb_plan *)plan; /* only the spare arena slot changes */
    void *arena = NULL;
    tb_status status = TB_OK;
    if (plan->arena_bytes > 0) {
        arena = atomic_exchange(&mutable_plan->spare_arena, NULL);
        if (!arena)
            status = tb_alloc(plan->arena_bytes, TB_ALLOC_DEFAULT, &arena);
    }
    if (status == TB_OK) {
        bases[0] = arena;
        for (int i = 0; i < plan->ninputs; i++)
            bases[1 + i] = inputs[i];
        for (int j = 0; j < plan->noutputs; j++)
            bases[1 + plan->ninputs + j] = outputs[j];
        for (int k = 0; k < plan->ndynamic; k++)
            bases[1 + plan->ninputs + plan->noutputs + k] = NULL;
        tb_exec_context context = {.plan = plan, .bases = bases, .dynamic = dynamic, .input_storages = input_storages};
        for (int s = 0; s < plan->nsteps; s++) {
            const tb_step *step = &plan->steps[s];
            double start = step_seconds ? now_seconds() : 0.0;
            status = step->run(&context, step);
            if (step_seconds)
                step_seconds[s] += now_seconds() - start;
            if (status != TB_OK) {
                status = tb_error_prefix(status, "plan step %d (%s)", s, step->kernel);
                break;
            }
        }
    }
    if (arena) {
        void *expected = NULL;
        if (!atomic_compare_exchange_strong(&mutable_plan->spare_arena, &expected, arena))
            tb_free(arena);
    }
    for (int k = 0; k < plan->ndynamic; k++)
        tb_tensor_release(&dynamic[k]);
    if (dynamic != stack_dynamic)
        free(dynamic);
    if (bases != stack_bases)
        free(bases);
    return status;
}

tb_status tb_plan_run_tensors(const tb_plan *plan, const tb_tensor *inputs, tb_tensor *outputs) {
    enum { MAX_IO = 256 };
    if (plan->ninputs > MAX_IO || plan->noutputs > MAX_IO)
        return tb_error_set(TB_ERR_UNSUPPORTED, "plan: too many inputs or outputs for tb_plan_run_tensors");
    void *in_ptrs[MAX_IO], *out_ptrs[MAX_IO];
    tb_storage *in_storages[MAX_IO];
    for (int i = 0; i < plan->ninputs; i++) {
        const tb_tensor *t = &inputs[i];
        if (!tb_plan_input_matches(plan, i, t->dtype, t->ndim, t->shape, t->strides)) {
            char got[96], want[96];
            const tb_value_info *info = &plan->input_info[i];
            return tb_error_set(TB_ERR_SHAPE, "plan: input %d is %s %s, the plan expects %s %s (with its strides)", i,
                                tb_dtype_name(t->dtype), tb_shape_string(t->ndim, t->shape, got, sizeof got),
                                tb_dtype_name(info->dtype), tb_shape_string(info->ndim, info->shape, want, sizeof want));
        }
        in_ptrs[i] = tb_tensor_data(t);
        in_storages[i] = t->storage;
    }
    for (int j = 0; j < plan->noutputs; j++) {
        const tb_value_info *info = &plan->output_info[j];
        if (plan->output_alias[j] >= 0) {
            tb_tensor_retain(&outputs[plan->output_alias[j]], &outputs[j]);
            out_ptrs[j] = out_ptrs[plan->output_alias[j]];
            continue;
        }
        tb_status status = tb_tensor_empty(info->dtype, info->ndim, info->shape, TB_ALLOC_DEFAULT, &outputs[j]);
        if (status != TB_OK) {
            for (int k = 0; k < j; k++)
                tb_tensor_release(&outputs[k]);
            return status;
        }
        out_ptrs[j] = tb_tensor_data(&outputs[j]);
    }
    tb_status status = tb_plan_run_storages(plan, in_ptrs, in_storages, out_ptrs);
    if (status != TB_OK)
        for (int j = 0; j < plan->noutputs; j++)
            tb_tensor_release(&outputs[j]);
    return status;
}

/* ---- description ---- */

static void append(char **text, size_t *size, size_t *capacity, const char *piece) {
    size_t n = strlen(piece);
    if (!*text)
        return;
    if (*size + n + 1 > *capacity) {
        size_t grown_capacity = (*capacity + n + 1) * 2;
        char *grown = realloc(*text, grown_capacity);
        if (!grown) {
            free(*text);
            *text = NULL;
            return;
        }
        *text = grown;
        *capacity = grown_capacity;
    }
    memcpy(*text + *size, piece, n + 1);
    *size += n;
}

char *tb_plan_build_description(const tb_plan *plan, const tb_graph *graph) {
    size_t size = 0, capacity = 1024;
    char *text = malloc(capacity);
    if (!text)
        return NULL;
    text[0] = '\0';
    char line[512];
    for (int s = 0; s < plan->nsteps; s++) {
        const tb_step *step = &plan->steps[s];
        const char *covers = "";
        if (step->program >= 0 && plan->programs[step->program].covers[0])
            covers = plan->programs[step->program].covers;
        else if (step->node >= 0 && graph->nodes[step->node].label)
            covers = graph->nodes[step->node].label;
        const char *suffix = "";
        if (step->op == TB_OP_MATMUL || step->op == TB_OP_CONV2D) {
            static const char *const activations[] = {"", "+relu", "+gelu", "+gelu_tanh", "+silu", "+sigmoid", "+tanh"};
            int64_t act = step->op == TB_OP_MATMUL ? step->params.matmul.activation : step->params.conv2d.activation;
            int64_t bias = step->op == TB_OP_MATMUL ? step->params.matmul.has_bias : step->params.conv2d.has_bias;
            int64_t residual = step->op == TB_OP_MATMUL ? step->params.matmul.has_residual : step->params.conv2d.has_residual;
            snprintf(line, sizeof line, "%s%s%s", bias ? "+bias" : "", act > 0 && act < 7 ? activations[act] : "",
                     residual ? "+residual" : "");
            suffix = line;
        }
        char entry[1024];
        snprintf(entry, sizeof entry, "%s%s <- %s\n", step->kernel, suffix, covers[0] ? covers : "(planner)");
        append(&text, &size, &capacity, entry);
    }
    snprintf(line, sizeof line, "arena: %zu bytes\n", plan->arena_bytes);
    append(&text, &size, &capacity, line);
    return text;
}

tb_status tb_plan_describe(const tb_plan *plan, char **text) {
    *text = strdup(plan->description ? plan->description : "");
    if (!*text)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "plan: out of memory describing a plan");
    return TB_OK;
}
