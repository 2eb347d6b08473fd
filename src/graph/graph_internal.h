/* Private structures of the graph layer: the IR (nodes and values), elementwise programs made by the
 * fusion pass, prepared plans (steps, value locations, buffers) and the declarations that the op
 * table (TB_GRAPH_OP_LIST in graph.h) expands into: one shape-inference and one lowering function
 * per op. */
#ifndef TORCHBURN_GRAPH_INTERNAL_H
#define TORCHBURN_GRAPH_INTERNAL_H

#include <stdatomic.h>

#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "torchburn/graph.h"
#include "torchburn/op_table.h"

/* ---- elementwise sub-ops evaluated by the graph layer itself (beyond the kernel tables) ---- */

/* Unary sub-ops: the f32 kernel ops of kernels/elementwise.h (SIMD), then every op of the op table
 * (include/torchburn/op_table.h, evaluated by its scalar formula; op-table op k is
 * TB_GRAPH_UNARY_TABLE + k), then identity. A table op that also has a kernel appears twice; names
 * resolve to the first (the kernel). Params follow tb_pw_params: alpha, lo, hi. */
#define TB_GRAPH_UNARY_OP(ID) (TB_GRAPH_UNARY_TABLE + TB_PW_##ID)

/* Binary sub-ops: the f32 kernel ops, threshold_backward (grad, x): x > alpha ? grad : 0, then every
 * binary op of the op table (evaluated by its scalar formula), then for every unary table op its
 * backward "<name>_backward" (grad, saved) = grad * d op (saved is x, or y for the ops of
 * TB_PW_GRAD_FROM_RESULT_LIST: gelu_backward, silu_backward take x; sigmoid_backward, tanh_backward y). */
#define TB_GRAPH_BINARY_OP(ID) (TB_GRAPH_BINARY_TABLE + TB_PWB_##ID)
#define TB_GRAPH_UNARY_BACKWARD_OP(ID) (TB_GRAPH_BINARY_GRAD + TB_PW_##ID)

enum {
    TB_GRAPH_UNARY_TABLE = TB_UNARY_COUNT,
    TB_GRAPH_UNARY_IDENTITY = TB_UNARY_COUNT + TB_PW_UNARY_COUNT,
    TB_GRAPH_UNARY_COUNT
};
enum {
    TB_GRAPH_BINARY_THRESHOLD_BACKWARD = TB_BINARY_COUNT,
    TB_GRAPH_BINARY_TABLE,
    TB_GRAPH_BINARY_GRAD = TB_GRAPH_BINARY_TABLE + TB_PW_BINARY_COUNT,
    TB_GRAPH_BINARY_COUNT = TB_GRAPH_BINARY_GRAD + TB_PW_UNARY_COUNT
};
/* REDUCE ops: the kernel reductions, then mean. */
enum { TB_GRAPH_REDUCE_MEAN = TB_REDUCE_COUNT, TB_GRAPH_REDUCE_COUNT };

/* ---- the IR ---- */

typedef struct tb_node {
    tb_graph_op op;
    tb_graph_params params;
    int ninputs;
    int inputs[TB_GRAPH_MAX_INPUTS];
    int first_output, noutputs;
    char *label; /* malloc'ed or NULL */
} tb_node;

typedef struct tb_value {
    tb_value_info info;
    int node;         /* defining node */
    int output_index; /* which output of it */
} tb_value;

/* One instruction of an elementwise program. Operands >= 0 are registers, < 0 are program inputs
 * (-1 - i: the node's input i). Registers hold f32 tiles. */
typedef enum tb_ew_kind {
    TB_EW_UNARY,
    TB_EW_BINARY,
    TB_EW_SCALAR,         /* a op scalar (reverse: scalar op a) */
    TB_EW_COMPARE,        /* 0/1 result */
    TB_EW_COMPARE_SCALAR, /* a op scalar (reverse: scalar op a) */
    TB_EW_WHERE,          /* a ? b : c */
    TB_EW_ROUND,          /* round to a narrower float dtype (op: tb_dtype) and back, as an eager store would */
} tb_ew_kind;

typedef struct tb_ew_instr {
    uint8_t kind, op;
    int16_t dst, a, b, c;
    uint8_t reverse;
    float scalar, alpha, lo, hi;
} tb_ew_instr;

enum { TB_EW_MAX_INSTR = 48, TB_EW_MAX_INPUTS = 16 };

typedef struct tb_ew_program {
    int ninstr;
    int nregs;
    tb_ew_instr instr[TB_EW_MAX_INSTR];
    char covers[256]; /* the fused nodes, for describe */
} tb_ew_program;

struct tb_graph {
    tb_node *nodes;
    int nnodes, node_capacity;
    tb_value *values;
    int nvalues, value_capacity;
    int *outputs;
    int noutputs, output_capacity;
    int ninputs;
    tb_ew_program *programs; /* referenced by FUSED_ELEMENTWISE params */
    int nprograms, program_capacity;
};

/* Deep copy. */
tb_status tb_graph_clone(const tb_graph *graph, tb_graph **out);
/* Appends a node without re-validating (passes); infers outputs. */
tb_status tb_graph_append(tb_graph *graph, tb_graph_op op, const tb_graph_params *params, int ninputs,
                          const int *inputs, int *first_output);
/* Appends the instruction(s) of one elementwise node to a program (operands: registers >= 0 or program
 * inputs -1 - i); a float16/bfloat16 intermediate is rounded when round_result. */
tb_status tb_ew_append_node(tb_ew_program *program, const tb_node *node, const int *operands, tb_dtype dtype,
                            bool round_result, int *result_register);
/* Builds the elementwise program of a single (unfused) elementwise node. */
tb_status tb_ew_program_from_node(const tb_graph *graph, const tb_node *node, tb_ew_program *out);
tb_status tb_graph_add_program(tb_graph *graph, const tb_ew_program *program, int *index);

/* The passes (passes.c): run in order by tb_graph_optimize, which replaces *graph by a compacted,
 * topologically sorted copy without dead nodes. */
tb_status tb_graph_optimize(tb_graph **graph);

/* Helpers shared by inference and lowering. */
/* Strides for viewing x as new_shape, or false when its layout does not allow a view. */
bool tb_view_strides(const tb_value_info *x, int ndim, const int64_t *new_shape, int64_t *new_strides);
/* A slice's [start, end) after PyTorch's negative-index wrap and clamping to [0, size]. */
void tb_slice_bounds(const tb_params_slice *slice, int64_t size, int64_t *start, int64_t *end);
bool tb_info_is_contiguous(const tb_value_info *info);
int64_t tb_info_numel(const tb_value_info *info);
void tb_info_contiguous(tb_value_info *info, tb_dtype dtype, int ndim, const int64_t *shape);
bool tb_dtype_is_float(tb_dtype dtype);
/* The info of x reduced over dim mask (0: all dims), keeping the reduced dims as 1 when keepdim. */
tb_status tb_reduced_shape(const tb_value_info *x, int64_t mask, int64_t keepdim, tb_dtype dtype, tb_value_info *out);

/* ---- shape inference: fills the outputs' infos from the inputs' ---- */

typedef tb_status (*tb_infer_fn)(const tb_graph_params *params, int ninputs, const tb_value_info *const *inputs,
                                 tb_value_info *outputs);

/* ---- prepared plans ---- */

enum { TB_BUFFER_ARENA = 0, TB_INPLACE_ANY = -2 };

/* Where a value lives at run time: base pointer `base` (0: the arena, 1 + i: input i, 1 + ninputs + j:
 * output j) plus a byte offset, with the value's layout. base -1: not materialized (an unused
 * output of a multi-output op). During planning `base` holds an internal buffer id instead. */
typedef struct tb_loc {
    int32_t base;
    int64_t offset;
    tb_value_info info;
} tb_loc;

typedef struct tb_exec_context {
    const struct tb_plan *plan;
    char **bases;        /* arena, inputs, outputs, dynamic results (bound as their steps run) */
    tb_tensor *dynamic;  /* the adopted results, released when the run ends */
    struct tb_storage *const *input_storages; /* per input, its storage when known (else NULL); may be NULL */
} tb_exec_context;

/* The storage a loc reads straight from, when it is a plan input of known storage (else NULL). */
static inline struct tb_storage *tb_exec_input_storage(const tb_exec_context *context, int loc);

struct tb_step;
typedef tb_status (*tb_step_fn)(const tb_exec_context *context, const struct tb_step *step);

typedef struct tb_step {
    tb_step_fn run;
    const char *kernel; /* what runs, for describe */
    int node;           /* the graph node it came from (-1: inserted by planning) */
    tb_graph_op op;
    tb_graph_params params;
    int ninputs, noutputs;
    int inputs[TB_GRAPH_MAX_INPUTS]; /* loc ids; -1 for an absent optional input */
    int outputs[TB_GRAPH_MAX_OUTPUTS];
    int scratch; /* loc id of a scratch area (f32), or -1 */
    int inplace_input; /* an input whose buffer output 0 may reuse (the kernel allows y == x), -1 none,
                          TB_INPLACE_ANY any input */
    int program; /* elementwise program index, or -1 */
} tb_step;

struct tb_plan {
    atomic_long refcount;
    uint8_t key[32];
    int ninputs, noutputs;
    int ndynamic; /* results of ops-layer calls adopted at run time */
    tb_value_info *input_info, *output_info;
    int *output_alias; /* per output: an earlier output holding the same value (shared buffer), or -1 */
    tb_step *steps;
    int nsteps;
    tb_loc *locs;
    int nlocs;
    tb_ew_program *programs;
    int nprograms;
    size_t arena_bytes;
    _Atomic(void *) spare_arena; /* one arena kept between runs; concurrent runs allocate their own */
    char *description;           /* built at prepare time */
};

/* Lowering: a builder of steps and locations used while preparing a plan (memory_plan.c). */
typedef struct tb_planner tb_planner;

typedef tb_status (*tb_lower_fn)(tb_planner *planner, int node);
/* One step running `run` on the node's inputs; its outputs are results adopted at run time
 * (tb_exec_adopt), as for the ops-layer calls. */
tb_status tb_lower_dynamic_step(tb_planner *planner, int node, tb_step_fn run);
tb_lower_fn tb_graph_op_lowering(tb_graph_op op);
tb_infer_fn tb_graph_op_infer(tb_graph_op op);

/* Planner services for lowering functions. */
const tb_graph *tb_planner_graph(const tb_planner *planner);
/* The loc of a graph value (materialized by earlier nodes), and the layout of a loc. */
int tb_planner_value_loc(const tb_planner *planner, int value);
const tb_value_info *tb_planner_loc_info(const tb_planner *planner, int loc);
/* A loc of `value`'s data in a layout the kernel can take: contiguous (and f32 when want_f32), copying
 * into a new temporary when needed. */
tb_status tb_planner_stage(tb_planner *planner, int value, bool contiguous, bool want_f32, int *loc);
tb_status tb_planner_stage_loc(tb_planner *planner, int loc, bool contiguous, bool want_f32, int *out);
/* A new buffer-backed contiguous loc of the given dtype/shape (a fresh arena buffer). */
tb_status tb_planner_new_buffer(tb_planner *planner, const tb_value_info *info, int *loc);
/* A loc viewing an existing loc with another layout (same base buffer). */
tb_status tb_planner_view_loc(tb_planner *planner, int loc, const tb_value_info *info, int64_t extra_offset_bytes,
                              int *out);
/* Binds a graph value to a loc. */
void tb_planner_bind(tb_planner *planner, int value, int loc);
/* Appends a step (copied); *index may be NULL. */
tb_status tb_planner_add_step(tb_planner *planner, const tb_step *step, int *index);
/* Output locs of a compute node: one fresh contiguous buffer per output (unused outputs get -1). */
tb_status tb_planner_node_outputs(tb_planner *planner, int node, int *locs);
/* The same for a step that calls the ops layer: each output is the tensor the op allocates, adopted
 * at run time through tb_exec_adopt (no arena space, no copy). */
tb_status tb_planner_node_outputs_dynamic(tb_planner *planner, int node, int *locs);
/* The scratch loc for a step: `floats` f32 elements of arena space live only during the step. */
tb_status tb_planner_scratch(tb_planner *planner, int64_t floats, int *loc);
/* Registers an elementwise program with the plan. */
tb_status tb_planner_add_program(tb_planner *planner, const tb_ew_program *program, int *index);
/* Initializes a step for `node` with the given kernel and run function (inputs/outputs unset). */
void tb_step_init(tb_step *step, const tb_planner *planner, int node, const char *kernel, tb_step_fn run);

/* Run-time access to a loc. */
static inline void *tb_exec_ptr(const tb_exec_context *context, int loc) {
    if (loc < 0)
        return NULL;
    const tb_loc *l = &context->plan->locs[loc];
    if (l->base < 0)
        return NULL;
    return context->bases[l->base] + l->offset;
}
static inline const tb_value_info *tb_exec_info(const tb_exec_context *context, int loc) {
    return &context->plan->locs[loc].info;
}
static inline struct tb_storage *tb_exec_input_storage(const tb_exec_context *context, int loc) {
    if (loc < 0 || !context->input_storages)
        return NULL;
    int base = context->plan->locs[loc].base;
    return base >= 1 && base <= context->plan->ninputs ? context->input_storages[base - 1] : NULL;
}

/* A tb_tensor view over a loc without taking ownership: the storage lives in `storage` (on the
 * caller's stack) with one reference that is never dropped. Returns false for an absent loc. */
bool tb_exec_tensor(const tb_exec_context *context, int loc, tb_storage *storage, tb_tensor *out);
/* Copies (with dtype conversion and broadcasting) a tensor into a loc. */
tb_status tb_exec_store(const tb_exec_context *context, int loc, const tb_tensor *value);
/* Hands an op's result to a loc: a dynamic loc adopts the tensor itself when it has the loc's dtype
 * and shape and is contiguous (*value is then zeroed), anything else is a copy (tb_exec_store). */
tb_status tb_exec_adopt(const tb_exec_context *context, int loc, tb_tensor *value);

/* An elementwise program bound to its operands for one run: output elements are walked over the
 * output shape with dims merged where every operand allows it; rows of row_len elements. */
typedef struct tb_ew_job {
    const tb_ew_program *program;
    const tb_elementwise_kernels *kernels;
    int ninputs;
    const char *in_base[TB_EW_MAX_INPUTS];
    tb_dtype in_dtype[TB_EW_MAX_INPUTS];
    int64_t in_strides[TB_EW_MAX_INPUTS][TB_MAX_DIMS]; /* elements, over the merged output dims */
    char *out_base;
    tb_dtype out_dtype;
    int ndim;
    int64_t shape[TB_MAX_DIMS];
    int64_t numel, row_len, tiles_per_row;
    atomic_int failed;
} tb_ew_job;

tb_status tb_ew_job_init(tb_ew_job *job, const tb_exec_context *context, const tb_ew_program *program, int ninputs,
                         const int *input_locs, int output_loc);
/* Evaluates output elements [begin, end) (flat, row-major) on the calling thread; false (and
 * job->failed set) when the thread's scratch cannot be allocated. */
bool tb_ew_run_range(tb_ew_job *job, int64_t begin, int64_t end);

/* Step functions shared across files. */
tb_status tb_exec_elementwise(const tb_exec_context *context, const tb_step *step);
tb_status tb_exec_copy(const tb_exec_context *context, const tb_step *step);
/* tb_exec_copy for copies the planner inserted (layout or dtype staging): counted as copies. */
tb_status tb_exec_layout_copy(const tb_exec_context *context, const tb_step *step);

/* Writes dropout's keep mask of `count` elements for `seed` (exec_random.c); p in [0, 1]. */
tb_status tb_dropout_keep_mask(bool *mask, int64_t count, int64_t seed, double p);

/* The op table entries. */
#define TB_GRAPH_DECLARE_FUNCTIONS(id, name, min_in, max_in, n_out, params, infer, lower) \
    tb_status infer(const tb_graph_params *, int, const tb_value_info *const *, tb_value_info *); \
    tb_status lower(tb_planner *, int);
TB_GRAPH_OP_LIST(TB_GRAPH_DECLARE_FUNCTIONS)
#undef TB_GRAPH_DECLARE_FUNCTIONS

/* Prepares a plan from an optimized graph (memory_plan.c); the plan keeps a reference to nothing
 * but its own copies (graph is borrowed). */
tb_status tb_plan_prepare(const tb_graph *graph, const uint8_t key[32], tb_plan **out);

#endif
