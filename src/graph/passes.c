/* The graph passes run on a cache miss, in order:
 *   1. pattern rewrites: the tanh-GELU formula spelled out in elementwise ops becomes one GELU_TANH;
 *   2. GEMM epilogues: matmul (through reshapes) + bias add + activation + residual add -> one MATMUL;
 *   3. conv epilogues: conv2d + eval batch_norm (folded) + activation + residual add -> one CONV2D;
 *   4. elementwise fusion: chains of elementwise ops whose intermediates have no other use become one
 *      FUSED_ELEMENTWISE program, evaluated in a single sweep; a layer/RMS norm whose output only
 *      feeds such a chain runs the chain on each normalized row while it is in cache (an epilogue);
 *   5. compaction: dead code elimination and a topological re-sort (nodes added by the rewrites may
 *      sit after their consumers), rebuilding through tb_graph_add_node so every rewrite is re-checked.
 * Rewrites mutate nodes in place and redirect uses; nodes left without uses are dropped by step 5. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"

typedef struct pass_state {
    tb_graph *graph;
    int *uses; /* per value: consumers among live nodes + graph outputs */
    bool *dead;
    int node_capacity;
} pass_state;

static tb_status refresh(pass_state *s) {
    tb_graph *g = s->graph;
    int *uses = realloc(s->uses, sizeof(int) * (size_t)(g->nvalues + 1));
    if (!uses)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "passes: out of memory");
    s->uses = uses;
    if (g->nnodes > s->node_capacity) {
        bool *dead = realloc(s->dead, sizeof(bool) * (size_t)g->nnodes);
        if (!dead)
            return tb_error_set(TB_ERR_OUT_OF_MEMORY, "passes: out of memory");
        for (int n = s->node_capacity; n < g->nnodes; n++)
            dead[n] = false;
        s->dead = dead;
        s->node_capacity = g->nnodes;
    }
    memset(uses, 0, sizeof(int) * (size_t)(g->nvalues + 1));
    for (int n = 0; n < g->nnodes; n++)
        if (!s->dead[n])
            for (int i = 0; i < g->nodes[n].ninputs; i++)
                uses[g->nodes[n].inputs[i]]++;
    for (int o = 0; o < g->noutputs; o++)
        uses[g->outputs[o]]++;
    return TB_OK;
}

static void replace_uses(pass_state *s, int old_value, int new_value) {
    tb_graph *g = s->graph;
    for (int n = 0; n < g->nnodes; n++)
        if (!s->dead[n])
            for (int i = 0; i < g->nodes[n].ninputs; i++)
                if (g->nodes[n].inputs[i] == old_value)
                    g->nodes[n].inputs[i] = new_value;
    for (int o = 0; o < g->noutputs; o++)
        if (g->outputs[o] == old_value)
            g->outputs[o] = new_value;
}

/* The single live consumer of value v (uses == 1 and not a graph output), or -1. */
static int sole_consumer(const pass_state *s, int v) {
    const tb_graph *g = s->graph;
    if (s->uses[v] != 1)
        return -1;
    for (int o = 0; o < g->noutputs; o++)
        if (g->outputs[o] == v)
            return -1;
    for (int n = 0; n < g->nnodes; n++)
        if (!s->dead[n])
            for (int i = 0; i < g->nodes[n].ninputs; i++)
                if (g->nodes[n].inputs[i] == v)
                    return n;
    return -1;
}

static const tb_node *producer(const pass_state *s, int v) { return &s->graph->nodes[s->graph->values[v].node]; }
static const tb_value_info *info_of(const pass_state *s, int v) { return &s->graph->values[v].info; }

/* Whether value v is computed from node `target` (walks v's ancestors). */
static bool depends_on(const pass_state *s, int v, int target) {
    const tb_graph *g = s->graph;
    int *stack = malloc(sizeof(int) * (size_t)(g->nnodes + 1));
    bool *seen = calloc((size_t)g->nnodes + 1, 1);
    bool found = !stack || !seen; /* on allocation failure answer "yes": the rewrite is skipped */
    int top = 0;
    if (!found) {
        stack[top++] = g->values[v].node;
        seen[g->values[v].node] = true;
    }
    while (!found && top > 0) {
        int n = stack[--top];
        if (n == target) {
            found = true;
            break;
        }
        for (int i = 0; i < g->nodes[n].ninputs; i++) {
            int p = g->values[g->nodes[n].inputs[i]].node;
            if (!seen[p]) {
                seen[p] = true;
                stack[top++] = p;
            }
        }
    }
    free(stack);
    free(seen);
    return found;
}

static void append_label(tb_node *into, const tb_node *from) {
    if (!from->label)
        return;
    size_t a = into->label ? strlen(into->label) : 0, b = strlen(from->label);
    if (a + b + 2 > 240)
        return;
    char *joined = malloc(a + b + 2);
    if (!joined)
        return;
    if (a) {
        memcpy(joined, into->label, a);
        joined[a] = '+';
        memcpy(joined + a + 1, from->label, b + 1);
    } else {
        memcpy(joined, from->label, b + 1);
    }
    free(into->label);
    into->label = joined;
}

static bool is_scalar_op(const tb_node *n, int op, double scalar) {
    return n->op == TB_OP_BINARY_SCALAR && n->params.scalar.op == op &&
           fabs(n->params.scalar.scalar - scalar) <= 1e-6 * fabs(scalar);
}

/* ---- 1. x * 0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))  ->  gelu_tanh(x) ---- */

static int single_input_value(const pass_state *s, const tb_node *n, int which) {
    int v = n->inputs[which];
    return s->uses[v] == 1 ? v : -1;
}

/* On a match, *x_out is the input and matched[0..6] the interior nodes (their uses all lie inside). */
static bool match_gelu_tanh(const pass_state *s, const tb_node *root, int *x_out, int *matched) {
    if (root->op != TB_OP_BINARY || root->params.binary.op != TB_BINARY_MUL)
        return false;
    for (int order = 0; order < 2; order++) {
        int va = single_input_value(s, root, order), vb = single_input_value(s, root, 1 - order);
        if (va < 0 || vb < 0)
            continue;
        const tb_node *half = producer(s, va), *one_plus = producer(s, vb);
        if (!is_scalar_op(half, TB_BINARY_MUL, 0.5) || !is_scalar_op(one_plus, TB_BINARY_ADD, 1.0))
            continue;
        int x = half->inputs[0];
        int vt = single_input_value(s, one_plus, 0);
        if (vt < 0)
            continue;
        const tb_node *t = producer(s, vt);
        if (t->op != TB_OP_UNARY || t->params.unary.op != TB_UNARY_TANH || s->uses[t->inputs[0]] != 1)
            continue;
        const tb_node *m = producer(s, t->inputs[0]);
        if (!is_scalar_op(m, TB_BINARY_MUL, 0.7978845608028654) || s->uses[m->inputs[0]] != 1)
            continue;
        const tb_node *sum = producer(s, m->inputs[0]);
        if (sum->op != TB_OP_BINARY || sum->params.binary.op != TB_BINARY_ADD)
            continue;
        int cubic = sum->inputs[0] == x ? sum->inputs[1] : (sum->inputs[1] == x ? sum->inputs[0] : -1);
        if (cubic < 0 || s->uses[cubic] != 1)
            continue;
        const tb_node *q = producer(s, cubic);
        if (!is_scalar_op(q, TB_BINARY_MUL, 0.044715) || s->uses[q->inputs[0]] != 1)
            continue;
        const tb_node *p = producer(s, q->inputs[0]);
        if (!is_scalar_op(p, TB_BINARY_POW, 3.0) || p->params.scalar.reverse || p->inputs[0] != x)
            continue;
        *x_out = x;
        const tb_node *interior[7] = {half, one_plus, t, m, sum, q, p};
        for (int i = 0; i < 7; i++)
            matched[i] = (int)(interior[i] - s->graph->nodes);
        return true;
    }
    return false;
}

static void pass_gelu_tanh(pass_state *s) {
    tb_graph *g = s->graph;
    for (int n = 0; n < g->nnodes; n++) {
        tb_node *root = &g->nodes[n];
        int x, matched[7];
        if (s->dead[n] || !match_gelu_tanh(s, root, &x, matched))
            continue;
        for (int i = 0; i < 7; i++)
            s->dead[matched[i]] = true;
        tb_dtype dtype = (tb_dtype)root->params.binary.dtype;
        memset(&root->params, 0, sizeof root->params);
        root->op = TB_OP_UNARY;
        root->params.unary.op = TB_UNARY_GELU_TANH;
        root->params.unary.dtype = dtype;
        root->ninputs = 1;
        root->inputs[0] = x;
        (void)refresh(s); /* the matched nodes lost their uses; compaction drops them */
    }
}

/* ---- 2/3. epilogues of MATMUL and CONV2D ---- */

static int activation_of(const tb_node *n) {
    if (n->op != TB_OP_UNARY || n->params.unary.dtype != TB_F32)
        return -1;
    switch (n->params.unary.op) {
    case TB_UNARY_RELU: return TB_ACTIVATION_RELU;
    case TB_UNARY_GELU: return TB_ACTIVATION_GELU;
    case TB_UNARY_GELU_TANH: return TB_ACTIVATION_GELU_TANH;
    case TB_UNARY_SILU: return TB_ACTIVATION_SILU;
    case TB_UNARY_SIGMOID: return TB_ACTIVATION_SIGMOID;
    case TB_UNARY_TANH: return TB_ACTIVATION_TANH;
    default: return -1;
    }
}

static bool same_shape(const tb_value_info *a, const tb_value_info *b) {
    return a->ndim == b->ndim && memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim) == 0;
}

/* Appends a VIEW of value v with the given shape; returns its value id or -1. */
static int add_view(pass_state *s, int v, int ndim, const int64_t *shape) {
    tb_graph_params p;
    memset(&p, 0, sizeof p);
    p.shape.ndim = ndim;
    memcpy(p.shape.shape, shape, sizeof(int64_t) * (size_t)ndim);
    int out;
    if (tb_graph_append(s->graph, TB_OP_VIEW, &p, 1, &v, &out) != TB_OK || refresh(s) != TB_OK)
        return -1;
    return out;
}

static void fuse_epilogues(pass_state *s, int m) {
    tb_graph *g = s->graph;
    bool conv = g->nodes[m].op == TB_OP_CONV2D;
    int head = g->nodes[m].first_output;
    for (;;) {
        int c = sole_consumer(s, head);
        /* a matmul's result may be reshaped (views of a contiguous buffer) before its epilogue */
        while (!conv && c >= 0 && g->nodes[c].op == TB_OP_VIEW && tb_info_is_contiguous(info_of(s, g->nodes[c].first_output))) {
            head = g->nodes[c].first_output;
            c = sole_consumer(s, head);
        }
        if (c < 0)
            return;
        tb_node *consumer = &g->nodes[c];
        tb_node *node = &g->nodes[m];
        int64_t *activation = conv ? &node->params.conv2d.activation : &node->params.matmul.activation;
        int64_t *has_residual = conv ? &node->params.conv2d.has_residual : &node->params.matmul.has_residual;
        int64_t *has_bias = conv ? &node->params.conv2d.has_bias : &node->params.matmul.has_bias;
        int act = activation_of(consumer);
        if (act >= 0 && *activation == TB_ACTIVATION_NONE && !*has_residual) {
            *activation = act;
        } else if (conv && consumer->op == TB_OP_BATCH_NORM && consumer->inputs[0] == head &&
                   consumer->params.batch_norm.has_weight && consumer->params.batch_norm.has_bias &&
                   !node->params.conv2d.has_bn && *activation == TB_ACTIVATION_NONE && !*has_residual &&
                   info_of(s, consumer->first_output)->dtype == TB_F32) {
            bool f32 = true;
            for (int i = 1; i < 5; i++)
                f32 &= info_of(s, consumer->inputs[i])->dtype == TB_F32;
            if (!f32 || node->ninputs + 4 > TB_GRAPH_MAX_INPUTS)
                return;
            for (int i = 1; i < 5; i++)
                node->inputs[node->ninputs++] = consumer->inputs[i];
            node->params.conv2d.has_bn = 1;
            node->params.conv2d.bn_eps = consumer->params.batch_norm.eps;
        } else if (consumer->op == TB_OP_BINARY && consumer->params.binary.op == TB_BINARY_ADD &&
                   consumer->params.binary.dtype == TB_F32 && consumer->inputs[0] != consumer->inputs[1]) {
            int other = consumer->inputs[0] == head ? consumer->inputs[1] : consumer->inputs[0];
            const tb_value_info *oi = info_of(s, other), *hi = info_of(s, head);
            const tb_value_info *mi = info_of(s, node->first_output);
            if (oi->dtype != TB_F32 || !same_shape(info_of(s, consumer->first_output), hi) || depends_on(s, other, m))
                return;
            int64_t n_cols = mi->shape[mi->ndim - 1];
            /* a bias is a vector along the product's columns, which the reshapes kept as the last dim */
            bool vector = tb_info_numel(oi) == n_cols && oi->ndim >= 1 && oi->shape[oi->ndim - 1] == n_cols &&
                          hi->ndim >= 1 && hi->shape[hi->ndim - 1] == n_cols;
            if (!conv && vector && !*has_bias && *activation == TB_ACTIVATION_NONE && !*has_residual) {
                int bias = oi->ndim == 1 ? other : add_view(s, other, 1, &n_cols);
                if (bias < 0)
                    return;
                node = &g->nodes[m];
                /* bias goes right after a and b, before any residual (none yet) */
                node->inputs[node->ninputs++] = bias;
                node->params.matmul.has_bias = 1;
            } else if (!*has_residual && same_shape(oi, hi)) {
                int residual = same_shape(oi, mi) ? other : add_view(s, other, mi->ndim, mi->shape);
                if (residual < 0)
                    return;
                node = &g->nodes[m];
                node->inputs[node->ninputs++] = residual;
                if (conv)
                    node->params.conv2d.has_residual = 1;
                else
                    node->params.matmul.has_residual = 1;
            } else {
                return;
            }
        } else {
            return;
        }
        /* the consumer's result is now `head` (the fused node's output, possibly reshaped) */
        tb_node *fused = &g->nodes[m];
        append_label(fused, &g->nodes[c]);
        replace_uses(s, g->nodes[c].first_output, head);
        s->dead[c] = true;
        if (refresh(s) != TB_OK)
            return;
    }
}

static void pass_epilogues(pass_state *s) {
    int count = s->graph->nnodes;
    for (int n = 0; n < count; n++)
        if (!s->dead[n] && (s->graph->nodes[n].op == TB_OP_MATMUL || s->graph->nodes[n].op == TB_OP_CONV2D))
            fuse_epilogues(s, n);
}

/* ---- 4. elementwise chains ---- */

static bool is_elementwise(const tb_node *n) {
    return n->op == TB_OP_UNARY || n->op == TB_OP_BINARY || n->op == TB_OP_BINARY_SCALAR || n->op == TB_OP_COMPARE ||
           n->op == TB_OP_COMPARE_SCALAR || n->op == TB_OP_WHERE;
}

static int compare_ints(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

static tb_status fuse_group(pass_state *s, int root) {
    tb_graph *g = s->graph;
    int members[TB_EW_MAX_INSTR / 2], count = 1, externals[TB_EW_MAX_INPUTS], nexternal = 0;
    members[0] = root;
    for (int i = 0; i < count; i++) {
        const tb_node *n = &g->nodes[members[i]];
        for (int k = 0; k < n->ninputs; k++) {
            int v = n->inputs[k];
            int p = g->values[v].node;
            bool member = false;
            for (int j = 0; j < count; j++)
                member |= members[j] == p;
            if (member || s->dead[p] || !is_elementwise(&g->nodes[p]) || s->uses[v] != 1 ||
                count >= TB_EW_MAX_INSTR / 2 - 1)
                continue;
            members[count++] = p;
        }
    }
    if (count < 2)
        return TB_OK;
    qsort(members, (size_t)count, sizeof(int), compare_ints); /* program order: producers first */
    tb_ew_program program;
    memset(&program, 0, sizeof program);
    int result_reg[TB_EW_MAX_INSTR / 2];
    for (int i = 0; i < count; i++) {
        const tb_node *n = &g->nodes[members[i]];
        int operands[3] = {0, 0, 0};
        for (int k = 0; k < n->ninputs; k++) {
            int v = n->inputs[k], p = g->values[v].node, found = -1;
            for (int j = 0; j < i; j++)
                if (members[j] == p)
                    found = j;
            if (found >= 0) {
                operands[k] = result_reg[found];
                continue;
            }
            int e = 0;
            while (e < nexternal && externals[e] != v)
                e++;
            if (e == nexternal) {
                if (nexternal == TB_EW_MAX_INPUTS)
                    return TB_OK; /* too many inputs: leave the chain unfused */
                externals[nexternal++] = v;
            }
            operands[k] = -1 - e;
        }
        tb_dtype dtype = info_of(s, n->first_output)->dtype;
        if (tb_ew_append_node(&program, n, operands, dtype, members[i] != root, &result_reg[i]) != TB_OK)
            return TB_OK;
    }
    /* describe: the member labels */
    size_t used = 0;
    for (int i = 0; i < count; i++) {
        const char *label = g->nodes[members[i]].label ? g->nodes[members[i]].label : tb_graph_op_name(g->nodes[members[i]].op);
        int wrote = snprintf(program.covers + used, sizeof program.covers - used, "%s%s", i ? "+" : "", label);
        if (wrote < 0 || (size_t)wrote >= sizeof program.covers - used)
            break;
        used += (size_t)wrote;
    }
    int index;
    TB_TRY(tb_graph_add_program(g, &program, &index));
    tb_node *r = &g->nodes[root];
    tb_dtype dtype = info_of(s, r->first_output)->dtype;
    for (int i = 0; i < count; i++)
        if (members[i] != root) {
            append_label(r, &g->nodes[members[i]]);
            s->dead[members[i]] = true;
        }
    memset(&r->params, 0, sizeof r->params);
    r->op = TB_OP_FUSED_ELEMENTWISE;
    r->params.fused.program = index;
    r->params.fused.dtype = dtype;
    r->ninputs = nexternal;
    memcpy(r->inputs, externals, sizeof(int) * (size_t)nexternal);
    return refresh(s);
}

static tb_status pass_elementwise(pass_state *s) {
    for (int n = s->graph->nnodes - 1; n >= 0; n--)
        if (!s->dead[n] && is_elementwise(&s->graph->nodes[n]))
            TB_TRY(fuse_group(s, n));
    return TB_OK;
}

/* ---- 4b. norm epilogues: layer/RMS norm whose output feeds only an elementwise chain ---- */

static void pass_norm_epilogue(pass_state *s) {
    tb_graph *g = s->graph;
    for (int n = 0; n < g->nnodes; n++) {
        tb_node *norm = &g->nodes[n];
        if (s->dead[n] || (norm->op != TB_OP_LAYER_NORM && norm->op != TB_OP_RMS_NORM) || norm->params.norm.epilogue)
            continue;
        int v = norm->first_output;
        int c = sole_consumer(s, v);
        if (c < 0)
            continue;
        tb_node *e = &g->nodes[c];
        const tb_value_info *vi = info_of(s, v), *ei = info_of(s, e->first_output);
        if ((!is_elementwise(e) && e->op != TB_OP_FUSED_ELEMENTWISE) || vi->dtype != TB_F32 || ei->dtype != TB_F32 ||
            !same_shape(vi, ei) || norm->ninputs + e->ninputs > TB_GRAPH_MAX_INPUTS || e->ninputs > TB_EW_MAX_INPUTS)
            continue;
        tb_ew_program program;
        if (e->op == TB_OP_FUSED_ELEMENTWISE)
            program = g->programs[e->params.fused.program];
        else if (tb_ew_program_from_node(g, e, &program) != TB_OK)
            continue;
        /* program inputs: the normalized value first, then the consumer's other inputs in order */
        int map[TB_EW_MAX_INPUTS], extra[TB_EW_MAX_INPUTS], nextra = 0;
        for (int i = 0; i < e->ninputs; i++) {
            if (e->inputs[i] == v) {
                map[i] = 0;
            } else {
                int k = 0;
                while (k < nextra && extra[k] != e->inputs[i])
                    k++;
                if (k == nextra)
                    extra[nextra++] = e->inputs[i];
                map[i] = 1 + k;
            }
        }
        if (1 + nextra > TB_EW_MAX_INPUTS)
            continue;
        for (int k = 0; k < program.ninstr; k++) {
            int16_t *refs[3] = {&program.instr[k].a, &program.instr[k].b, &program.instr[k].c};
            for (int r = 0; r < 3; r++)
                if (*refs[r] < 0 && -1 - *refs[r] < e->ninputs)
                    *refs[r] = (int16_t)(-1 - map[-1 - *refs[r]]);
        }
        char covers[sizeof program.covers];
        snprintf(covers, sizeof covers, "%s", program.covers);
        snprintf(program.covers, sizeof program.covers, "%.100s+%.140s", norm->label ? norm->label : "norm",
                 covers[0] ? covers : (e->label ? e->label : "elementwise"));
        int index;
        if (tb_graph_add_program(g, &program, &index) != TB_OK)
            return;
        norm = &g->nodes[n];
        e = &g->nodes[c];
        for (int k = 0; k < nextra; k++)
            norm->inputs[norm->ninputs++] = extra[k];
        norm->params.norm.epilogue = index + 1;
        append_label(norm, e);
        replace_uses(s, e->first_output, v);
        s->dead[c] = true;
        if (refresh(s) != TB_OK)
            return;
    }
}

/* ---- 5. compaction ---- */

static tb_status compact(pass_state *s, tb_graph **out) {
    const tb_graph *g = s->graph;
    int *order = malloc(sizeof(int) * (size_t)(g->nnodes + 1));
    int *stack = malloc(sizeof(int) * (size_t)(2 * g->nnodes + 2 * g->noutputs + 2));
    char *state = calloc((size_t)g->nnodes + 1, 1); /* 0 new, 1 open, 2 emitted */
    int *value_map = malloc(sizeof(int) * (size_t)(g->nvalues + 1));
    tb_graph *c = NULL;
    tb_status status = TB_OK;
    if (!order || !stack || !state || !value_map) {
        status = tb_error_set(TB_ERR_OUT_OF_MEMORY, "passes: out of memory compacting");
        goto done;
    }
    int count = 0;
    for (int n = 0; n < g->nnodes; n++) /* inputs first, in their order (they are the plan's signature) */
        if (g->nodes[n].op == TB_OP_INPUT) {
            order[count++] = n;
            state[n] = 2;
        }
    int top = 0;
    for (int o = g->noutputs - 1; o >= 0; o--)
        stack[top++] = g->values[g->outputs[o]].node;
    while (top > 0) {
        int n = stack[top - 1];
        if (state[n] == 2) {
            top--;
            continue;
        }
        if (state[n] == 1) { /* children done */
            state[n] = 2;
            order[count++] = n;
            top--;
            continue;
        }
        state[n] = 1;
        for (int i = g->nodes[n].ninputs - 1; i >= 0; i--) {
            int p = g->values[g->nodes[n].inputs[i]].node;
            if (state[p] == 0)
                stack[top++] = p;
            else if (state[p] == 1) {
                status = tb_error_set(TB_ERR_INTERNAL, "passes: the rewritten graph has a cycle");
                goto done;
            }
        }
    }
    if ((status = tb_graph_new(&c)) != TB_OK)
        goto done;
    for (int v = 0; v < g->nvalues; v++)
        value_map[v] = -1;
    for (int p = 0; p < g->nprograms; p++) {
        int index;
        if ((status = tb_graph_add_program(c, &g->programs[p], &index)) != TB_OK)
            goto done;
    }
    for (int i = 0; i < count; i++) {
        const tb_node *n = &g->nodes[order[i]];
        int inputs[TB_GRAPH_MAX_INPUTS], first;
        for (int k = 0; k < n->ninputs; k++)
            inputs[k] = value_map[n->inputs[k]];
        status = tb_graph_add_node(c, n->op, &n->params, n->ninputs, inputs, &first, NULL);
        if (status != TB_OK) {
            status = tb_error_prefix(status, "passes: rebuilding %s", n->label ? n->label : tb_graph_op_name(n->op));
            goto done;
        }
        for (int o = 0; o < n->noutputs; o++)
            value_map[n->first_output + o] = first + o;
        if (n->label && (status = tb_graph_set_label(c, first, n->label)) != TB_OK)
            goto done;
    }
    for (int o = 0; o < g->noutputs; o++)
        if ((status = tb_graph_add_output(c, value_map[g->outputs[o]])) != TB_OK)
            goto done;
done:
    free(order);
    free(stack);
    free(state);
    free(value_map);
    if (status != TB_OK) {
        tb_graph_free(c);
        return status;
    }
    *out = c;
    return TB_OK;
}

tb_status tb_graph_optimize(tb_graph **graph) {
    pass_state s = {.graph = *graph};
    tb_status status = refresh(&s);
    if (status == TB_OK && !getenv("TORCHBURN_NO_FUSION")) {
        pass_gelu_tanh(&s);
        pass_epilogues(&s);
        status = refresh(&s);
        if (status == TB_OK)
            status = pass_elementwise(&s);
        if (status == TB_OK)
            pass_norm_epilogue(&s);
    }
    tb_graph *compacted = NULL;
    if (status == TB_OK)
        status = compact(&s, &compacted);
    free(s.uses);
    free(s.dead);
    if (status != TB_OK)
        return status;
    tb_graph_free(*graph);
    *graph = compacted;
    return TB_OK;
}
