/* The graph builder: the op table derived from TB_GRAPH_OP_LIST, the by-name param field tables
 * derived from the param set lists, sub-op names, and node/value bookkeeping. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"

/* ---- the op table ---- */

typedef struct op_info {
    const char *name;
    int min_inputs, max_inputs, outputs;
    int param_set;
    tb_infer_fn infer;
    tb_lower_fn lower;
} op_info;

enum param_set_id {
#define PARAM_SET_ENUM(set) PARAM_SET_##set,
    TB_GRAPH_PARAM_SET_LIST(PARAM_SET_ENUM)
#undef PARAM_SET_ENUM
    PARAM_SET_COUNT
};

static const op_info OPS[TB_OP_COUNT] = {
#define OP_INFO(id, name, min_in, max_in, n_out, params, infer, lower) \
    [TB_OP_##id] = {name, min_in, max_in, n_out, PARAM_SET_##params, infer, lower},
    TB_GRAPH_OP_LIST(OP_INFO)
#undef OP_INFO
};

const char *const tb_graph_unary_names[] = {
#define NAME(id, name) name,
#define TABLE_NAME(id, name, simd) #name,
    TB_UNARY_OP_LIST(NAME) TB_PW_UNARY_LIST(TABLE_NAME) "identity", NULL};
#define TABLE_BACKWARD_NAME(id, name, simd) #name "_backward",
const char *const tb_graph_binary_names[] = {TB_BINARY_OP_LIST(NAME) "threshold_backward" ,
    TB_PW_BINARY_LIST(TABLE_NAME) TB_PW_UNARY_LIST(TABLE_BACKWARD_NAME) NULL};
#undef TABLE_BACKWARD_NAME
#undef TABLE_NAME
const char *const tb_graph_compare_names[] = {TB_COMPARE_OP_LIST(NAME) NULL};
const char *const tb_graph_reduce_names[] = {TB_REDUCE_OP_LIST(NAME) "mean", NULL};
#undef NAME

/* ---- param field tables, built once from the param set lists ---- */

enum { MAX_FIELDS = 16 };
static tb_param_field field_tables[PARAM_SET_COUNT][MAX_FIELDS];
static int field_counts[PARAM_SET_COUNT];
static pthread_once_t fields_once = PTHREAD_ONCE_INIT;

/* Each builder has a local `p` of the set's struct type, so offsets come from its members (every
 * union member starts at offset 0 of tb_graph_params). */
#define FIELD_I(name) fields[n++] = (tb_param_field){#name, TB_PARAM_INT, 1, (size_t)((char *)&p.name - (char *)&p)};
#define FIELD_IA(name, count) \
    fields[n++] = (tb_param_field){#name, TB_PARAM_INT, count, (size_t)((char *)&p.name - (char *)&p)};
#define FIELD_F(name) fields[n++] = (tb_param_field){#name, TB_PARAM_FLOAT, 1, (size_t)((char *)&p.name - (char *)&p)};
#define FIELD_BUILDER(set)                                           \
    static int build_fields_##set(tb_param_field *fields) {          \
        tb_params_##set p;                                           \
        int n = 0;                                                   \
        TB_PARAMS_##set(FIELD_I, FIELD_IA, FIELD_F) return n;        \
    }
TB_GRAPH_PARAM_SET_LIST(FIELD_BUILDER)
#undef FIELD_BUILDER
#undef FIELD_I
#undef FIELD_IA
#undef FIELD_F

static void build_field_tables(void) {
#define BUILD(set) field_counts[PARAM_SET_##set] = build_fields_##set(field_tables[PARAM_SET_##set]);
    TB_GRAPH_PARAM_SET_LIST(BUILD)
#undef BUILD
}

static bool op_valid(int op) { return op >= 0 && op < TB_OP_COUNT; }

const char *tb_graph_op_name(tb_graph_op op) { return op_valid(op) ? OPS[op].name : "invalid"; }

tb_status tb_graph_op_from_name(const char *name, tb_graph_op *out) {
    for (int op = 0; op < TB_OP_COUNT; op++) {
        if (strcmp(OPS[op].name, name) == 0) {
            *out = (tb_graph_op)op;
            return TB_OK;
        }
    }
    return tb_error_set(TB_ERR_INVALID_ARGUMENT, "graph: unknown op '%s'", name);
}

const tb_param_field *tb_graph_op_fields(tb_graph_op op, int *count) {
    pthread_once(&fields_once, build_field_tables);
    if (!op_valid(op)) {
        *count = 0;
        return NULL;
    }
    *count = field_counts[OPS[op].param_set];
    return field_tables[OPS[op].param_set];
}

void tb_graph_op_arity(tb_graph_op op, int *min_inputs, int *max_inputs, int *outputs) {
    const op_info *info = op_valid(op) ? &OPS[op] : &OPS[0];
    *min_inputs = info->min_inputs;
    *max_inputs = info->max_inputs;
    *outputs = info->outputs;
}

tb_lower_fn tb_graph_op_lowering(tb_graph_op op) { return OPS[op].lower; }
tb_infer_fn tb_graph_op_infer(tb_graph_op op) { return OPS[op].infer; }

/* ---- value info helpers ---- */

bool tb_dtype_is_float(tb_dtype dtype) { return dtype == TB_F32 || dtype == TB_F16 || dtype == TB_BF16; }

int64_t tb_info_numel(const tb_value_info *info) {
    int64_t n = 1;
    for (int d = 0; d < info->ndim; d++)
        n *= info->shape[d];
    return n;
}

bool tb_info_is_contiguous(const tb_value_info *info) {
    int64_t expected = 1;
    for (int d = info->ndim - 1; d >= 0; d--) {
        if (info->shape[d] != 1 && info->strides[d] != expected)
            return false;
        expected *= info->shape[d];
    }
    return true;
}

void tb_info_contiguous(tb_value_info *info, tb_dtype dtype, int ndim, const int64_t *shape) {
    int64_t copy[TB_MAX_DIMS] = {0};
    for (int d = 0; d < ndim; d++)
        copy[d] = shape[d]; /* shape may point into *info */
    memset(info, 0, sizeof *info);
    info->dtype = dtype;
    info->ndim = ndim;
    for (int d = 0; d < ndim; d++)
        info->shape[d] = copy[d];
    tb_contiguous_strides(ndim, info->shape, info->strides);
}

/* ---- building ---- */

tb_status tb_graph_new(tb_graph **out) {
    *out = calloc(1, sizeof **out);
    if (!*out)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "graph: out of memory creating a graph");
    return TB_OK;
}

void tb_graph_free(tb_graph *graph) {
    if (!graph)
        return;
    for (int i = 0; i < graph->nnodes; i++)
        free(graph->nodes[i].label);
    free(graph->nodes);
    free(graph->values);
    free(graph->outputs);
    free(graph->programs);
    free(graph);
}

static tb_status grow(void **array, int *capacity, int needed, size_t item) {
    if (needed <= *capacity)
        return TB_OK;
    int capacity_new = *capacity ? *capacity * 2 : 16;
    while (capacity_new < needed)
        capacity_new *= 2;
    void *grown = realloc(*array, (size_t)capacity_new * item);
    if (!grown)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "graph: out of memory growing a graph");
    *array = grown;
    *capacity = capacity_new;
    return TB_OK;
}

tb_status tb_graph_add_node(tb_graph *graph, tb_graph_op op, const tb_graph_params *params, int ninputs,
                            const int *inputs, int *first_output, int *outputs) {
    if (!graph || !op_valid(op))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "graph: invalid op %d", (int)op);
    const op_info *info = &OPS[op];
    if (ninputs < info->min_inputs || ninputs > info->max_inputs)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "graph: %s takes %d to %d inputs, got %d", info->name,
                            info->min_inputs, info->max_inputs, ninputs);
    const tb_value_info *input_infos[TB_GRAPH_MAX_INPUTS];
    for (int i = 0; i < ninputs; i++) {
        if (inputs[i] < 0 || inputs[i] >= graph->nvalues)
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "graph: %s input %d refers to value %d, which does not exist",
                                info->name, i, inputs[i]);
        input_infos[i] = &graph->values[inputs[i]].info;
    }
    tb_graph_params zero;
    if (!params) {
        memset(&zero, 0, sizeof zero);
        params = &zero;
    }
    tb_value_info out_infos[TB_GRAPH_MAX_OUTPUTS];
    memset(out_infos, 0, sizeof out_infos);
    tb_status status = info->infer(params, ninputs, input_infos, out_infos);
    if (status != TB_OK)
        return tb_error_prefix(status, "graph: %s", info->name);
    TB_TRY(grow((void **)&graph->nodes, &graph->node_capacity, graph->nnodes + 1, sizeof(tb_node)));
    TB_TRY(grow((void **)&graph->values, &graph->value_capacity, graph->nvalues + info->outputs, sizeof(tb_value)));
    tb_node *node = &graph->nodes[graph->nnodes];
    memset(node, 0, sizeof *node);
    node->op = op;
    node->params = *params;
    node->ninputs = ninputs;
    for (int i = 0; i < ninputs; i++)
        node->inputs[i] = inputs[i];
    node->first_output = graph->nvalues;
    node->noutputs = info->outputs;
    for (int o = 0; o < info->outputs; o++) {
        tb_value *value = &graph->values[graph->nvalues + o];
        value->info = out_infos[o];
        value->node = graph->nnodes;
        value->output_index = o;
    }
    if (op == TB_OP_INPUT)
        graph->ninputs++;
    graph->nnodes++;
    graph->nvalues += info->outputs;
    if (first_output)
        *first_output = node->first_output;
    if (outputs)
        *outputs = info->outputs;
    return TB_OK;
}

tb_status tb_graph_append(tb_graph *graph, tb_graph_op op, const tb_graph_params *params, int ninputs,
                          const int *inputs, int *first_output) {
    return tb_graph_add_node(graph, op, params, ninputs, inputs, first_output, NULL);
}

tb_status tb_graph_add_input(tb_graph *graph, tb_dtype dtype, int ndim, const int64_t *shape, const int64_t *strides,
                             int *value) {
    if (!tb_dtype_valid((int)dtype) || ndim < 0 || ndim > TB_MAX_DIMS)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "graph: input with invalid dtype %d or ndim %d", (int)dtype, ndim);
    tb_graph_params params;
    memset(&params, 0, sizeof params);
    params.input.dtype = dtype;
    params.input.ndim = ndim;
    int64_t contiguous[TB_MAX_DIMS];
    tb_contiguous_strides(ndim, shape, contiguous);
    for (int d = 0; d < ndim; d++) {
        params.input.shape[d] = shape[d];
        /* a size-1 dim addresses nothing: canonical stride, so layouts differing there share a key */
        params.input.strides[d] = (strides && shape[d] != 1) ? strides[d] : contiguous[d];
    }
    return tb_graph_add_node(graph, TB_OP_INPUT, &params, 0, NULL, value, NULL);
}

tb_status tb_graph_add_output(tb_graph *graph, int value) {
    if (value < 0 || value >= graph->nvalues)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "graph: output refers to value %d, which does not exist", value);
    TB_TRY(grow((void **)&graph->outputs, &graph->output_capacity, graph->noutputs + 1, sizeof(int)));
    graph->outputs[graph->noutputs++] = value;
    return TB_OK;
}

tb_status tb_graph_set_label(tb_graph *graph, int value, const char *label) {
    if (value < 0 || value >= graph->nvalues)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "graph: label for value %d, which does not exist", value);
    tb_node *node = &graph->nodes[graph->values[value].node];
    char *copy = strdup(label ? label : "");
    if (!copy)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "graph: out of memory storing a label");
    free(node->label);
    node->label = copy;
    return TB_OK;
}

int tb_graph_num_values(const tb_graph *graph) { return graph->nvalues; }

tb_status tb_graph_value_info(const tb_graph *graph, int value, tb_value_info *out) {
    if (value < 0 || value >= graph->nvalues)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "graph: value %d does not exist", value);
    *out = graph->values[value].info;
    return TB_OK;
}

tb_status tb_graph_add_program(tb_graph *graph, const tb_ew_program *program, int *index) {
    TB_TRY(grow((void **)&graph->programs, &graph->program_capacity, graph->nprograms + 1, sizeof(tb_ew_program)));
    graph->programs[graph->nprograms] = *program;
    *index = graph->nprograms++;
    return TB_OK;
}

tb_status tb_graph_clone(const tb_graph *graph, tb_graph **out) {
    tb_graph *copy;
    TB_TRY(tb_graph_new(&copy));
    tb_status status = TB_OK;
    if ((status = grow((void **)&copy->nodes, &copy->node_capacity, graph->nnodes, sizeof(tb_node))) != TB_OK ||
        (status = grow((void **)&copy->values, &copy->value_capacity, graph->nvalues, sizeof(tb_value))) != TB_OK ||
        (status = grow((void **)&copy->outputs, &copy->output_capacity, graph->noutputs, sizeof(int))) != TB_OK ||
        (status = grow((void **)&copy->programs, &copy->program_capacity, graph->nprograms, sizeof(tb_ew_program))) !=
            TB_OK) {
        tb_graph_free(copy);
        return status;
    }
    if (graph->nnodes)
        memcpy(copy->nodes, graph->nodes, (size_t)graph->nnodes * sizeof(tb_node));
    if (graph->nvalues)
        memcpy(copy->values, graph->values, (size_t)graph->nvalues * sizeof(tb_value));
    if (graph->noutputs)
        memcpy(copy->outputs, graph->outputs, (size_t)graph->noutputs * sizeof(int));
    if (graph->nprograms)
        memcpy(copy->programs, graph->programs, (size_t)graph->nprograms * sizeof(tb_ew_program));
    copy->nnodes = graph->nnodes;
    copy->nvalues = graph->nvalues;
    copy->noutputs = graph->noutputs;
    copy->nprograms = graph->nprograms;
    copy->ninputs = graph->ninputs;
    for (int i = 0; i < copy->nnodes; i++) {
        if (graph->nodes[i].label) {
            copy->nodes[i].label = strdup(graph->nodes[i].label);
            if (!copy->nodes[i].label) {
                for (int j = i + 1; j < copy->nnodes; j++)
                    copy->nodes[j].label = NULL;
                tb_graph_free(copy);
                return tb_error_set(TB_ERR_OUT_OF_MEMORY, "graph: out of memory copying labels");
            }
        }
    }
    *out = copy;
    return TB_OK;
}
