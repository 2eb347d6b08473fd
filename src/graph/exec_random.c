/* Random ops of the graph layer: DROPOUT_MASK, the keep mask of a training-mode dropout.
 *
 * The mask is counter-based: element i's draw depends only on (seed, i), so the result does not depend
 * on the thread count or on how the loop is split. The stream is SplitMix64 (a Weyl sequence through
 * a 64-bit finalizer) keyed by the seed: draw j is mix(key + (j + 1) * golden), and each 64-bit draw
 * gives the 32-bit uniforms of elements 2j (low half) and 2j + 1 (high half). An element is kept when
 * its uniform u (in [0, 2^32)) satisfies u >= threshold, threshold = ceil(p * 2^32), so
 * P(keep) = 1 - threshold / 2^32, within 2^-32 of 1 - p. The seed is a plan input: the compile
 * backend draws it from PyTorch's default generator on every call (torch.manual_seed reproduces it). */
#include <math.h>
#include <string.h>

#include "core/random.h"
#include "graph/graph_internal.h"
#include "torchburn/thread_pool.h"

typedef struct mask_job {
    bool *mask;
    int64_t count;
    uint64_t key, threshold; /* threshold in [0, 2^32]: 2^32 keeps nothing */
} mask_job;

static void mask_pairs(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    const mask_job *job = context;
    for (int64_t j = begin; j < end; j++) {
        const uint64_t draw = tb_splitmix64_mix(job->key + (uint64_t)(j + 1) * TB_SPLITMIX64_GOLDEN);
        const int64_t i = 2 * j;
        job->mask[i] = (draw & 0xffffffffull) >= job->threshold;
        if (i + 1 < job->count)
            job->mask[i + 1] = (draw >> 32) >= job->threshold;
    }
}

tb_status tb_dropout_keep_mask(bool *mask, int64_t count, int64_t seed, double p) {
    if (!(p >= 0.0 && p <= 1.0))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "dropout: probability must be in [0, 1], got %g", p);
    if (count <= 0)
        return TB_OK;
    mask_job job = {.mask = mask, .count = count, .key = tb_splitmix64_mix((uint64_t)seed), .threshold = (uint64_t)ceil(p * 4294967296.0)};
    tb_parallel_for((count + 1) / 2, 16384, mask_pairs, &job);
    return TB_OK;
}

tb_status tb_infer_dropout_mask(const tb_graph_params *p, int n, const tb_value_info *const *in, tb_value_info *out) {
    (void)n;
    if (!(p->dropout.p >= 0.0 && p->dropout.p <= 1.0))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "dropout_mask: p must be in [0, 1], got %g", p->dropout.p);
    if (in[1]->dtype != TB_I64 || tb_info_numel(in[1]) != 1)
        return tb_error_set(TB_ERR_DTYPE, "dropout_mask: the seed must be one int64 element, got %s with %lld",
                            tb_dtype_name(in[1]->dtype), (long long)tb_info_numel(in[1]));
    tb_info_contiguous(out, TB_BOOL, in[0]->ndim, in[0]->shape);
    return TB_OK;
}

static tb_status exec_dropout_mask(const tb_exec_context *context, const tb_step *step) {
    const tb_value_info *info = tb_exec_info(context, step->outputs[0]);
    const int64_t count = tb_info_numel(info);
    if (count == 0)
        return TB_OK;
    int64_t seed;
    memcpy(&seed, tb_exec_ptr(context, step->inputs[1]), sizeof seed);
    return tb_dropout_keep_mask(tb_exec_ptr(context, step->outputs[0]), count, seed, step->params.dropout.p);
}

tb_status tb_lower_dropout_mask(tb_planner *planner, int node) {
    const tb_node *n = &tb_planner_graph(planner)->nodes[node];
    tb_step step;
    tb_step_init(&step, planner, node, "dropout_mask", exec_dropout_mask);
    step.ninputs = n->ninputs;
    for (int i = 0; i < n->ninputs; i++)
        step.inputs[i] = tb_planner_value_loc(planner, n->inputs[i]);
    step.noutputs = 1;
    TB_TRY(tb_planner_node_outputs(planner, node, step.outputs));
    return step.outputs[0] >= 0 ? tb_planner_add_step(planner, &step, NULL) : TB_OK;
}
