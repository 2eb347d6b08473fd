/* The elementwise executor: runs an elementwise program (one node, or a chain fused by the passes) in
 * one sweep over the output. The output is walked in tiles of TILE elements along its (merged) last
 * dim; each tile loads its inputs (direct pointers when f32 with unit step, a repeated scalar when
 * broadcast, else gathered and converted), runs the instructions on f32 registers that stay in L1
 * with the active ISA's kernels, and stores the last register (directly into f32 outputs). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "graph/graph_internal.h"
#include "torchburn/eager.h"
#include "torchburn/alloc.h"
#include "torchburn/thread_pool.h"

enum { TILE = 256 };

/* ---- building programs ---- */

static void instr_for_node(const tb_node *node, const int *operands, int dst, tb_ew_instr *in) {
    memset(in, 0, sizeof *in);
    in->dst = (int16_t)dst;
    in->a = (int16_t)operands[0];
    in->b = (int16_t)(node->ninputs > 1 ? operands[1] : 0);
    in->c = (int16_t)(node->ninputs > 2 ? operands[2] : 0);
    const tb_graph_params *p = &node->params;
    switch (node->op) {
    case TB_OP_UNARY:
        in->kind = TB_EW_UNARY;
        in->op = (uint8_t)p->unary.op;
        in->alpha = (float)p->unary.alpha;
        in->lo = (float)p->unary.lo;
        in->hi = (float)p->unary.hi;
        break;
    case TB_OP_BINARY:
        in->kind = TB_EW_BINARY;
        in->op = (uint8_t)p->binary.op;
        in->alpha = (float)p->binary.alpha;
        break;
    case TB_OP_BINARY_SCALAR:
        in->kind = TB_EW_SCALAR;
        in->op = (uint8_t)p->scalar.op;
        in->reverse = (uint8_t)(p->scalar.reverse != 0);
        in->scalar = (float)p->scalar.scalar;
        in->alpha = (float)p->scalar.alpha;
        break;
    case TB_OP_COMPARE:
        in->kind = TB_EW_COMPARE;
        in->op = (uint8_t)p->compare.op;
        break;
    case TB_OP_COMPARE_SCALAR:
        in->kind = TB_EW_COMPARE_SCALAR;
        in->op = (uint8_t)p->compare.op;
        in->reverse = (uint8_t)(p->compare.reverse != 0);
        in->scalar = (float)p->compare.scalar;
        break;
    case TB_OP_WHERE:
        in->kind = TB_EW_WHERE;
        break;
    default: /* COPY: identity (the store converts) */
        in->kind = TB_EW_UNARY;
        in->op = TB_GRAPH_UNARY_IDENTITY;
        break;
    }
}

/* Appends the instruction(s) of one node; operands are registers or program inputs. A float16/bfloat16
 * intermediate result is rounded as eager would store it. */
tb_status tb_ew_append_node(tb_ew_program *program, const tb_node *node, const int *operands, tb_dtype dtype,
                            bool round_result, int *result_register) {
    if (program->ninstr + 2 > TB_EW_MAX_INSTR)
        return tb_error_set(TB_ERR_UNSUPPORTED, "elementwise program too long");
    int dst = program->ninstr;
    instr_for_node(node, operands, dst, &program->instr[program->ninstr++]);
    if (round_result && (dtype == TB_F16 || dtype == TB_BF16)) {
        tb_ew_instr *round = &program->instr[program->ninstr];
        memset(round, 0, sizeof *round);
        round->kind = TB_EW_ROUND;
        round->op = (uint8_t)dtype;
        round->a = (int16_t)dst;
        round->dst = (int16_t)program->ninstr;
        dst = program->ninstr++;
    }
    program->nregs = program->ninstr;
    *result_register = dst;
    return TB_OK;
}

tb_status tb_ew_program_from_node(const tb_graph *graph, const tb_node *node, tb_ew_program *out) {
    memset(out, 0, sizeof *out);
    int operands[3] = {-1, -2, -3};
    int result;
    return tb_ew_append_node(out, node, operands, TB_F32, false, &result);
}

/* ---- scalar evaluation of the ops the kernel tables do not have ---- */

static float unary_extra(int op, float x, const tb_ew_instr *in) {
    if (op >= TB_GRAPH_UNARY_TABLE && op < TB_GRAPH_UNARY_IDENTITY) {
        tb_pw_params p = {in->alpha, in->lo, in->hi};
        return (float)tb_pw_eval_unary((tb_pw_unary)(op - TB_GRAPH_UNARY_TABLE), x, &p);
    }
    return x; /* identity */
}

static float binary_extra(int op, float a, float b, float alpha) {
    if (op == TB_GRAPH_BINARY_THRESHOLD_BACKWARD)
        return b <= alpha ? 0.0f : a;
    if (op >= TB_GRAPH_BINARY_TABLE && op < TB_GRAPH_BINARY_GRAD) {
        tb_pw_params p = {alpha == 0 ? 1.0 : alpha, 0, 0};
        return (float)tb_pw_eval_binary((tb_pw_binary)(op - TB_GRAPH_BINARY_TABLE), a, b, &p);
    }
    if (op >= TB_GRAPH_BINARY_GRAD && op < TB_GRAPH_BINARY_COUNT) {
        tb_pw_params p = {0, 0, 0};
        return (float)((double)a * tb_pw_eval_unary_grad((tb_pw_unary)(op - TB_GRAPH_BINARY_GRAD), b, b, &p));
    }
    return NAN;
}

static bool compare(int op, float a, float b) {
    switch (op) {
    case TB_COMPARE_EQ: return a == b;
    case TB_COMPARE_NE: return a != b;
    case TB_COMPARE_LT: return a < b;
    case TB_COMPARE_LE: return a <= b;
    case TB_COMPARE_GT: return a > b;
    default: return a >= b;
    }
}

/* ---- the sweep ---- */

typedef tb_ew_job ew_job;

static _Thread_local float *thread_scratch;
static _Thread_local size_t thread_scratch_floats;

static float *scratch(size_t floats) {
    if (thread_scratch_floats < floats) {
        void *grown;
        if (tb_alloc(floats * sizeof(float), 0, &grown) != TB_OK)
            return NULL;
        tb_free(thread_scratch);
        thread_scratch = grown;
        thread_scratch_floats = floats;
    }
    return thread_scratch;
}

typedef struct operand {
    const float *ptr;
    int64_t step; /* 0 or 1 */
} operand;

/* Loads n elements of input i starting at element offset `offset` (stride `step` elements). */
static operand load_input(const ew_job *job, int i, int64_t offset, int64_t step, int64_t n, float *buf, float *one) {
    tb_dtype dtype = job->in_dtype[i];
    size_t size = tb_dtype_size(dtype);
    const char *base = job->in_base[i] + offset * (int64_t)size;
    if (dtype == TB_F32 && step == 1)
        return (operand){(const float *)base, 1};
    if (step == 0 || n == 1) {
        tb_dtype_table[dtype].to_f32(base, one, 1);
        return (operand){one, 0};
    }
    if (step == 1) {
        tb_dtype_table[dtype].to_f32(base, buf, n);
    } else if (dtype == TB_F32) {
        const float *src = (const float *)base;
        for (int64_t e = 0; e < n; e++)
            buf[e] = src[e * step];
    } else {
        for (int64_t e = 0; e < n; e++)
            tb_dtype_table[dtype].to_f32(base + e * step * (int64_t)size, &buf[e], 1);
    }
    return (operand){buf, 1};
}

static void run_instr(const ew_job *job, const tb_ew_instr *in, const operand *ops, float *dst, int64_t n,
                      float *expand) {
    const tb_elementwise_kernels *k = job->kernels;
    operand a = ops[0], b = ops[1], c = ops[2];
    switch (in->kind) {
    case TB_EW_UNARY: {
        const float *src = a.ptr;
        if (a.step == 0) {
            for (int64_t e = 0; e < n; e++)
                expand[e] = a.ptr[0];
            src = expand;
        }
        if (in->op < TB_UNARY_COUNT) {
            tb_unary_params params = {in->alpha, in->lo, in->hi};
            k->unary[in->op](src, dst, n, &params);
        } else if (in->op == TB_GRAPH_UNARY_IDENTITY) {
            if (dst != src)
                memcpy(dst, src, (size_t)n * sizeof(float));
        } else {
            for (int64_t e = 0; e < n; e++)
                dst[e] = unary_extra(in->op, src[e], in);
        }
        return;
    }
    case TB_EW_BINARY:
    case TB_EW_SCALAR: {
        operand x = a, y = b;
        if (in->kind == TB_EW_SCALAR) {
            y = (operand){&in->scalar, 0};
            if (in->reverse) {
                y = a;
                x = (operand){&in->scalar, 0};
            }
        }
        if (in->op < TB_BINARY_COUNT) {
            k->binary[in->op](x.ptr, x.step, y.ptr, y.step, dst, n);
        } else {
            for (int64_t e = 0; e < n; e++)
                dst[e] = binary_extra(in->op, x.ptr[e * x.step], y.ptr[e * y.step], in->alpha);
        }
        return;
    }
    case TB_EW_COMPARE:
    case TB_EW_COMPARE_SCALAR: {
        operand x = a, y = b;
        if (in->kind == TB_EW_COMPARE_SCALAR) {
            y = (operand){&in->scalar, 0};
            if (in->reverse) {
                y = a;
                x = (operand){&in->scalar, 0};
            }
        }
        for (int64_t e = 0; e < n; e++)
            dst[e] = compare(in->op, x.ptr[e * x.step], y.ptr[e * y.step]) ? 1.0f : 0.0f;
        return;
    }
    case TB_EW_WHERE:
        for (int64_t e = 0; e < n; e++)
            dst[e] = a.ptr[e * a.step] != 0.0f ? b.ptr[e * b.step] : c.ptr[e * c.step];
        return;
    case TB_EW_ROUND:
        for (int64_t e = 0; e < n; e++) {
            float v = a.ptr[e * a.step];
            dst[e] = in->op == TB_BF16 ? tb_bf16_to_f32(tb_f32_to_bf16(v)) : tb_f16_to_f32(tb_f32_to_f16(v));
        }
        return;
    default:
        return;
    }
}

/* Scratch of one thread: registers, gathered inputs, a broadcast expansion and a store buffer. */
static float *job_scratch(const ew_job *job) {
    return scratch(((size_t)job->program->nregs + (size_t)job->ninputs + 2) * TILE);
}

/* Evaluates n <= TILE elements of the output starting at (merged) row `row`, column `start`. */
static void ew_tile(const ew_job *job, float *area, int64_t row, int64_t start, int64_t n) {
    const tb_ew_program *program = job->program;
    float *inputs_area = area + (size_t)program->nregs * TILE;
    float *expand = inputs_area + (size_t)job->ninputs * TILE;
    float *store = expand + TILE;
    float ones[TB_EW_MAX_INPUTS];
    operand loaded[TB_EW_MAX_INPUTS];
    int last = job->ndim - 1;
    /* element offsets of this row in every input */
    int64_t offsets[TB_EW_MAX_INPUTS] = {0};
    int64_t rest = row;
    for (int d = last - 1; d >= 0; d--) {
        int64_t index = rest % job->shape[d];
        rest /= job->shape[d];
        for (int i = 0; i < job->ninputs; i++)
            offsets[i] += index * job->in_strides[i][d];
    }
    for (int i = 0; i < job->ninputs; i++) {
        int64_t step = job->in_strides[i][last];
        loaded[i] = load_input(job, i, offsets[i] + start * step, step, n, inputs_area + (size_t)i * TILE, &ones[i]);
    }
    int64_t out_offset = row * job->row_len + start;
    float *final_dst = job->out_dtype == TB_F32 ? (float *)job->out_base + out_offset : store;
    for (int s = 0; s < program->ninstr; s++) {
        const tb_ew_instr *in = &program->instr[s];
        operand ops[3];
        const int16_t refs[3] = {in->a, in->b, in->c};
        for (int r = 0; r < 3; r++)
            ops[r] = refs[r] >= 0 ? (operand){area + (size_t)refs[r] * TILE, 1} : loaded[-1 - refs[r]];
        float *dst = s == program->ninstr - 1 ? final_dst : area + (size_t)in->dst * TILE;
        run_instr(job, in, ops, dst, n, expand);
    }
    if (job->out_dtype != TB_F32)
        tb_dtype_table[job->out_dtype].from_f32(store, job->out_base + out_offset * (int64_t)tb_dtype_size(job->out_dtype), n);
}

static void ew_tiles(void *context, int64_t begin, int64_t end, int thread_index) {
    ew_job *job = context;
    float *area = job_scratch(job);
    if (!area) {
        atomic_store(&job->failed, 1);
        return;
    }
    for (int64_t task = begin; task < end; task++) {
        int64_t row = task / job->tiles_per_row;
        int64_t start = (task % job->tiles_per_row) * TILE;
        int64_t n = job->row_len - start < TILE ? job->row_len - start : TILE;
        ew_tile(job, area, row, start, n);
    }
    (void)thread_index;
}

bool tb_ew_run_range(tb_ew_job *job, int64_t begin, int64_t end) {
    float *area = job_scratch(job);
    if (!area) {
        atomic_store(&job->failed, 1);
        return false;
    }
    for (int64_t pos = begin; pos < end;) {
        int64_t row = pos / job->row_len, start = pos % job->row_len;
        int64_t n = job->row_len - start;
        if (n > TILE)
            n = TILE;
        if (n > end - pos)
            n = end - pos;
        ew_tile(job, area, row, start, n);
        pos += n;
    }
    return true;
}

tb_status tb_ew_job_init(tb_ew_job *job, const tb_exec_context *context, const tb_ew_program *program, int ninputs,
                         const int *input_locs, int output_loc) {
    const tb_value_info *out_info = tb_exec_info(context, output_loc);
    memset(job, 0, sizeof *job);
    job->program = program;
    job->kernels = tb_elementwise_kernels_active();
    job->ninputs = ninputs;
    job->out_base = tb_exec_ptr(context, output_loc);
    job->out_dtype = out_info->dtype;
    job->numel = tb_info_numel(out_info);
    /* expanded strides of every operand over the output shape, then merge dims */
    int ndim = out_info->ndim;
    int64_t shape[TB_MAX_DIMS], strides[TB_EW_MAX_INPUTS + 1][TB_MAX_DIMS];
    for (int d = 0; d < ndim; d++)
        shape[d] = out_info->shape[d];
    for (int i = 0; i < ninputs; i++) {
        const tb_value_info *info = tb_exec_info(context, input_locs[i]);
        job->in_base[i] = tb_exec_ptr(context, input_locs[i]);
        job->in_dtype[i] = info->dtype;
        for (int d = 0; d < ndim; d++) {
            int xd = d - (ndim - info->ndim);
            strides[i][d] = (xd < 0 || info->shape[xd] == 1) ? 0 : info->strides[xd];
        }
    }
    int merged = 0;
    int64_t mshape[TB_MAX_DIMS], mstrides[TB_EW_MAX_INPUTS + 1][TB_MAX_DIMS];
    for (int d = 0; d < ndim; d++) {
        if (shape[d] == 1)
            continue;
        bool can_merge = merged > 0;
        for (int i = 0; can_merge && i < ninputs; i++)
            can_merge = mstrides[i][merged - 1] == strides[i][d] * shape[d];
        if (can_merge) {
            mshape[merged - 1] *= shape[d];
            for (int i = 0; i < ninputs; i++)
                mstrides[i][merged - 1] = strides[i][d];
        } else {
            mshape[merged] = shape[d];
            for (int i = 0; i < ninputs; i++)
                mstrides[i][merged] = strides[i][d];
            merged++;
        }
    }
    if (merged == 0) {
        mshape[0] = 1;
        for (int i = 0; i < ninputs; i++)
            mstrides[i][0] = 0;
        merged = 1;
    }
    job->ndim = merged;
    memcpy(job->shape, mshape, sizeof mshape);
    for (int i = 0; i < ninputs; i++)
        memcpy(job->in_strides[i], mstrides[i], sizeof mstrides[i]);
    job->row_len = mshape[merged - 1];
    job->tiles_per_row = (job->row_len + TILE - 1) / TILE;
    return TB_OK;
}

tb_status tb_exec_elementwise(const tb_exec_context *context, const tb_step *step) {
    ew_job job;
    TB_TRY(tb_ew_job_init(&job, context, &context->plan->programs[step->program], step->ninputs, step->inputs,
                          step->outputs[0]));
    if (job.numel == 0)
        return TB_OK;
    int64_t tasks = job.numel / job.row_len * job.tiles_per_row;
    int64_t grain = 16384 / TILE / (job.program->ninstr > 4 ? 2 : 1);
    tb_parallel_for(tasks, grain > 0 ? grain : 1, ew_tiles, &job);
    if (atomic_load(&job.failed))
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "elementwise: out of memory for scratch tiles");
    return TB_OK;
}

/* ---- lowering ---- */

tb_status tb_lower_elementwise(tb_planner *planner, int node) {
    const tb_graph *graph = tb_planner_graph(planner);
    const tb_node *n = &graph->nodes[node];
    if (n->op == TB_OP_COPY) {
        int out;
        TB_TRY(tb_planner_node_outputs(planner, node, &out));
        tb_step step;
        tb_step_init(&step, planner, node, "copy", tb_exec_copy);
        step.ninputs = 1;
        step.inputs[0] = tb_planner_value_loc(planner, n->inputs[0]);
        step.noutputs = 1;
        step.outputs[0] = out;
        return tb_planner_add_step(planner, &step, NULL);
    }
    if (n->ninputs > TB_EW_MAX_INPUTS)
        return tb_error_set(TB_ERR_UNSUPPORTED, "elementwise node with %d inputs (at most %d)", n->ninputs,
                            TB_EW_MAX_INPUTS);
    tb_ew_program program;
    if (n->op == TB_OP_FUSED_ELEMENTWISE)
        program = graph->programs[n->params.fused.program];
    else
        TB_TRY(tb_ew_program_from_node(graph, n, &program));
    if (!program.covers[0] && n->label)
        snprintf(program.covers, sizeof program.covers, "%s", n->label);
    tb_step step;
    tb_step_init(&step, planner, node, n->op == TB_OP_FUSED_ELEMENTWISE ? "fused_elementwise" : "elementwise",
                 tb_exec_elementwise);
    TB_TRY(tb_planner_add_program(planner, &program, &step.program));
    step.ninputs = n->ninputs;
    for (int i = 0; i < n->ninputs; i++)
        step.inputs[i] = tb_planner_value_loc(planner, n->inputs[i]);
    step.noutputs = 1;
    TB_TRY(tb_planner_node_outputs(planner, node, step.outputs));
    /* every tile reads its inputs before its result is written: a full-size dying input may share */
    step.inplace_input = TB_INPLACE_ANY;
    return tb_planner_add_step(planner, &step, NULL);
}
