/* C tests of the graph layer: plans against naive double-precision loops (fused GEMM epilogues,
 * elementwise chains, views that need copies), the same plan at every supported ISA against the
 * scalar one, structural hashing, the plan caches (hits, sharing, LRU eviction), memory planning
 * (arena reuse), ops computed by the eager core, builder errors and allocation failures. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tb_test.h"
#include "torchburn/alloc.h"
#include "torchburn/cpu.h"
#include "torchburn/graph.h"

static int op_index(const char *const *names, const char *name) {
    for (int i = 0; names[i]; i++)
        if (strcmp(names[i], name) == 0)
            return i;
    return -1;
}

static tb_tensor random_tensor(int ndim, const int64_t *shape, uint64_t seed) {
    tb_tensor t;
    if (tb_tensor_empty(TB_F32, ndim, shape, 0, &t) != TB_OK)
        abort(); /* test setup only */
    tb_test_fill_uniform(tb_tensor_data(&t), tb_tensor_numel(&t), -1.0f, 1.0f, seed);
    return t;
}

static float max_abs_diff(const float *a, const double *b, int64_t n) {
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= worst))
            worst = d;
    }
    return (float)worst;
}

static int add(tb_graph *g, tb_graph_op op, const tb_graph_params *p, int n, const int *inputs) {
    int out = -1;
    tb_status status = tb_graph_add_node(g, op, p, n, inputs, &out, NULL);
    TB_CHECK_MSG(status == TB_OK, "%s: %s", tb_graph_op_name(op), tb_error_message());
    return out;
}

/* y = gelu(x @ w1^T + b1) @ w2^T + b2 + x  (x [B, D], w1 [H, D], w2 [D, H]) */
static tb_graph *build_mlp(int64_t batch, int64_t dim, int64_t hidden) {
    tb_graph *g;
    if (tb_graph_new(&g) != TB_OK)
        return NULL;
    int64_t xs[2] = {batch, dim}, w1s[2] = {hidden, dim}, b1s[1] = {hidden}, w2s[2] = {dim, hidden}, b2s[1] = {dim};
    int x, w1, b1, w2, b2;
    TB_CHECK(tb_graph_add_input(g, TB_F32, 2, xs, NULL, &x) == TB_OK);
    TB_CHECK(tb_graph_add_input(g, TB_F32, 2, w1s, NULL, &w1) == TB_OK);
    TB_CHECK(tb_graph_add_input(g, TB_F32, 1, b1s, NULL, &b1) == TB_OK);
    TB_CHECK(tb_graph_add_input(g, TB_F32, 2, w2s, NULL, &w2) == TB_OK);
    TB_CHECK(tb_graph_add_input(g, TB_F32, 1, b2s, NULL, &b2) == TB_OK);
    tb_graph_params p;
    memset(&p, 0, sizeof p);
    p.permute.ndim = 2;
    p.permute.dims[0] = 1;
    p.permute.dims[1] = 0;
    int w1t = add(g, TB_OP_PERMUTE, &p, 1, &w1);
    int w2t = add(g, TB_OP_PERMUTE, &p, 1, &w2);
    memset(&p, 0, sizeof p);
    int in1[2] = {x, w1t};
    int h = add(g, TB_OP_MATMUL, &p, 2, in1);
    memset(&p, 0, sizeof p);
    p.binary.op = op_index(tb_graph_binary_names, "add");
    p.binary.dtype = TB_F32;
    int hb_in[2] = {h, b1};
    int hb = add(g, TB_OP_BINARY, &p, 2, hb_in);
    memset(&p, 0, sizeof p);
    p.unary.op = op_index(tb_graph_unary_names, "gelu");
    p.unary.dtype = TB_F32;
    int act = add(g, TB_OP_UNARY, &p, 1, &hb);
    memset(&p, 0, sizeof p);
    p.matmul.has_bias = 1;
    int in2[3] = {act, w2t, b2};
    int y = add(g, TB_OP_MATMUL, &p, 3, in2);
    memset(&p, 0, sizeof p);
    p.binary.op = op_index(tb_graph_binary_names, "add");
    p.binary.dtype = TB_F32;
    int res_in[2] = {y, x};
    int out = add(g, TB_OP_BINARY, &p, 2, res_in);
    TB_CHECK(tb_graph_add_output(g, out) == TB_OK);
    return g;
}

static void mlp_reference(const tb_tensor *in, int64_t batch, int64_t dim, int64_t hidden, double *out) {
    const float *x = tb_tensor_data(&in[0]), *w1 = tb_tensor_data(&in[1]), *b1 = tb_tensor_data(&in[2]);
    const float *w2 = tb_tensor_data(&in[3]), *b2 = tb_tensor_data(&in[4]);
    double *h = malloc(sizeof(double) * (size_t)hidden);
    for (int64_t i = 0; i < batch; i++) {
        for (int64_t j = 0; j < hidden; j++) {
            double s = b1[j];
            for (int64_t k = 0; k < dim; k++)
                s += (double)x[i * dim + k] * w1[j * dim + k];
            h[j] = 0.5 * s * (1.0 + erf(s / sqrt(2.0)));
        }
        for (int64_t j = 0; j < dim; j++) {
            double s = b2[j] + x[i * dim + j];
            for (int64_t k = 0; k < hidden; k++)
                s += h[k] * w2[j * hidden + k];
            out[i * dim + j] = s;
        }
    }
    free(h);
}

static void test_mlp_plan(void) {
    const int64_t batch = 7, dim = 33, hidden = 70;
    tb_graph *g = build_mlp(batch, dim, hidden);
    tb_plan *plan;
    bool hit = true;
    TB_CHECK_MSG(tb_graph_compile(g, &plan, &hit) == TB_OK, "%s", tb_error_message());
    TB_CHECK(!hit);
    char *text;
    TB_CHECK(tb_plan_describe(plan, &text) == TB_OK);
    /* both epilogues fused: bias + gelu into the first GEMM, bias + residual into the second */
    TB_CHECK_MSG(strstr(text, "gemm+bias+gelu") && strstr(text, "gemm+bias+residual") && tb_plan_num_steps(plan) == 2,
                 "%s", text);
    free(text);
    int64_t shapes[5][2] = {{batch, dim}, {hidden, dim}, {hidden, 0}, {dim, hidden}, {dim, 0}};
    int ndims[5] = {2, 2, 1, 2, 1};
    tb_tensor in[5];
    for (int i = 0; i < 5; i++)
        in[i] = random_tensor(ndims[i], shapes[i], 100 + (uint64_t)i);
    double *expected = malloc(sizeof(double) * (size_t)(batch * dim));
    mlp_reference(in, batch, dim, hidden, expected);
    tb_isa best = tb_isa_active();
    for (int isa = 0; isa < TB_ISA_COUNT; isa++) {
        if (!tb_isa_supported((tb_isa)isa))
            continue;
        TB_CHECK(tb_isa_set((tb_isa)isa) == TB_OK);
        tb_tensor out;
        TB_CHECK_MSG(tb_plan_run_tensors(plan, in, &out) == TB_OK, "%s", tb_error_message());
        float diff = max_abs_diff(tb_tensor_data(&out), expected, batch * dim);
        TB_CHECK_MSG(diff < 2e-4f, "isa %s: max diff %g", tb_isa_name((tb_isa)isa), diff);
        tb_tensor_release(&out);
    }
    TB_CHECK(tb_isa_set(best) == TB_OK);
    /* wrong input layout */
    tb_tensor out;
    tb_tensor swapped[5] = {in[1], in[0], in[2], in[3], in[4]};
    TB_CHECK(tb_plan_run_tensors(plan, swapped, &out) == TB_ERR_SHAPE);
    for (int i = 0; i < 5; i++)
        tb_tensor_release(&in[i]);
    free(expected);
    tb_plan_release(plan);
    tb_graph_free(g);
}

/* out = where(sigmoid(a) * b + 0.5 > 1, exp(a), -b) over a [4, 1, 6] and b [5, 1] (broadcast), plus
 * a view of a permuted input that cannot be a view (a copy) and a slice. */
static void test_elementwise_and_views(void) {
    tb_graph *g;
    TB_CHECK(tb_graph_new(&g) == TB_OK);
    int64_t as[3] = {4, 1, 6}, bs[2] = {5, 1}, cs[2] = {3, 4};
    int a, b, c;
    TB_CHECK(tb_graph_add_input(g, TB_F32, 3, as, NULL, &a) == TB_OK);
    TB_CHECK(tb_graph_add_input(g, TB_F32, 2, bs, NULL, &b) == TB_OK);
    TB_CHECK(tb_graph_add_input(g, TB_F32, 2, cs, NULL, &c) == TB_OK);
    tb_graph_params p;
    memset(&p, 0, sizeof p);
    p.unary.op = op_index(tb_graph_unary_names, "sigmoid");
    p.unary.dtype = TB_F32;
    int s = add(g, TB_OP_UNARY, &p, 1, &a);
    memset(&p, 0, sizeof p);
    p.binary.op = op_index(tb_graph_binary_names, "mul");
    p.binary.dtype = TB_F32;
    int sb_in[2] = {s, b};
    int sb = add(g, TB_OP_BINARY, &p, 2, sb_in);
    memset(&p, 0, sizeof p);
    p.scalar.op = op_index(tb_graph_binary_names, "add");
    p.scalar.dtype = TB_F32;
    p.scalar.scalar = 0.5;
    int half = add(g, TB_OP_BINARY_SCALAR, &p, 1, &sb);
    memset(&p, 0, sizeof p);
    p.compare.op = op_index(tb_graph_compare_names, "gt");
    p.compare.scalar = 1.0;
    int cond = add(g, TB_OP_COMPARE_SCALAR, &p, 1, &half);
    memset(&p, 0, sizeof p);
    p.unary.op = op_index(tb_graph_unary_names, "exp");
    p.unary.dtype = TB_F32;
    int e = add(g, TB_OP_UNARY, &p, 1, &a);
    p.unary.op = op_index(tb_graph_unary_names, "neg");
    int nb = add(g, TB_OP_UNARY, &p, 1, &b);
    memset(&p, 0, sizeof p);
    p.dtype.dtype = TB_F32;
    int w_in[3] = {cond, e, nb};
    int w = add(g, TB_OP_WHERE, &p, 3, w_in);
    TB_CHECK(tb_graph_add_output(g, w) == TB_OK);
    /* views: c^T [4, 3] flattened to [12] (needs a copy), then elements 2..10 step 3 */
    memset(&p, 0, sizeof p);
    p.permute.ndim = 2;
    p.permute.dims[0] = 1;
    p.permute.dims[1] = 0;
    int ct = add(g, TB_OP_PERMUTE, &p, 1, &c);
    memset(&p, 0, sizeof p);
    p.shape.ndim = 1;
    p.shape.shape[0] = 12;
    int flat = add(g, TB_OP_VIEW, &p, 1, &ct);
    memset(&p, 0, sizeof p);
    p.slice.dim = 0;
    p.slice.start = 2;
    p.slice.end = 10;
    p.slice.step = 3;
    int sl = add(g, TB_OP_SLICE, &p, 1, &flat);
    TB_CHECK(tb_graph_add_output(g, sl) == TB_OK);

    tb_plan *plan;
    TB_CHECK_MSG(tb_graph_compile(g, &plan, NULL) == TB_OK, "%s", tb_error_message());
    char *text;
    TB_CHECK(tb_plan_describe(plan, &text) == TB_OK);
    TB_CHECK_MSG(strstr(text, "fused_elementwise") != NULL, "%s", text);
    free(text);
    tb_tensor in[3] = {random_tensor(3, as, 1), random_tensor(2, bs, 2), random_tensor(2, cs, 3)};
    tb_tensor out[2];
    TB_CHECK_MSG(tb_plan_run_tensors(plan, in, out) == TB_OK, "%s", tb_error_message());
    TB_CHECK(out[0].ndim == 3 && out[0].shape[0] == 4 && out[0].shape[1] == 5 && out[0].shape[2] == 6);
    const float *av = tb_tensor_data(&in[0]), *bv = tb_tensor_data(&in[1]), *cv = tb_tensor_data(&in[2]);
    double expected[120], expected_slice[3];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 5; j++)
            for (int k = 0; k < 6; k++) {
                double x = av[i * 6 + k], y = bv[j];
                double v = 1.0 / (1.0 + exp(-x)) * y + 0.5;
                expected[(i * 5 + j) * 6 + k] = v > 1.0 ? exp(x) : -y;
            }
    for (int i = 0; i < 3; i++) {
        int flat_index = 2 + 3 * i; /* element of c^T [4, 3] in row-major order */
        expected_slice[i] = cv[(flat_index % 3) * 4 + flat_index / 3];
    }
    TB_CHECK(max_abs_diff(tb_tensor_data(&out[0]), expected, 120) < 1e-5f);
    TB_CHECK(out[1].ndim == 1 && out[1].shape[0] == 3);
    TB_CHECK(max_abs_diff(tb_tensor_data(&out[1]), expected_slice, 3) == 0.0f);
    for (int i = 0; i < 3; i++)
        tb_tensor_release(&in[i]);
    tb_tensor_release(&out[0]);
    tb_tensor_release(&out[1]);
    tb_plan_release(plan);
    tb_graph_free(g);
}

static tb_graph *softmax_chain(int count, int64_t n, const char *label) {
    tb_graph *g;
    if (tb_graph_new(&g) != TB_OK)
        return NULL;
    int64_t shape[2] = {4, n};
    int v;
    TB_CHECK(tb_graph_add_input(g, TB_F32, 2, shape, NULL, &v) == TB_OK);
    tb_graph_params p;
    memset(&p, 0, sizeof p);
    p.softmax.dim = -1;
    p.softmax.dtype = TB_F32;
    for (int i = 0; i < count; i++) {
        v = add(g, TB_OP_SOFTMAX, &p, 1, &v);
        TB_CHECK(tb_graph_set_label(g, v, label) == TB_OK);
    }
    TB_CHECK(tb_graph_add_output(g, v) == TB_OK);
    return g;
}

static void test_hash_cache_and_memory_plan(void) {
    tb_plan_cache_clear();
    tb_graph *a = softmax_chain(4, 256, "first"), *b = softmax_chain(4, 256, "second"), *c = softmax_chain(4, 128, "x");
    uint8_t ha[32], hb[32], hc[32];
    TB_CHECK(tb_graph_hash(a, ha) == TB_OK && tb_graph_hash(b, hb) == TB_OK && tb_graph_hash(c, hc) == TB_OK);
    TB_CHECK(memcmp(ha, hb, 32) == 0); /* labels are not structure */
    TB_CHECK(memcmp(ha, hc, 32) != 0); /* shapes are */
    tb_plan *pa, *pb, *pc;
    bool hit;
    TB_CHECK(tb_graph_compile(a, &pa, &hit) == TB_OK && !hit);
    TB_CHECK(tb_graph_compile(b, &pb, &hit) == TB_OK && hit);
    TB_CHECK(pa == pb); /* structurally equal graphs share one plan */
    /* four softmax steps; each may overwrite its dying input, so the three intermediates share one buffer */
    TB_CHECK(tb_plan_num_steps(pa) == 4);
    TB_CHECK_MSG(tb_plan_arena_bytes(pa) == 4 * 256 * sizeof(float), "arena %zu", tb_plan_arena_bytes(pa));
    tb_cache_stats prepared, graphs;
    tb_plan_cache_stats(&prepared, &graphs);
    TB_CHECK(prepared.size == 1 && prepared.hits == 1 && prepared.misses == 1);
    TB_CHECK(graphs.size == 1 && graphs.misses == 1);
    /* LRU: capacity 1, a second structure evicts the first */
    TB_CHECK(tb_plan_cache_set_capacity(1, 1) == TB_OK);
    TB_CHECK(tb_graph_compile(c, &pc, &hit) == TB_OK && !hit);
    tb_plan_cache_stats(&prepared, &graphs);
    TB_CHECK(prepared.size == 1 && prepared.evictions == 1 && graphs.evictions == 1);
    tb_plan *again;
    TB_CHECK(tb_graph_compile(a, &again, &hit) == TB_OK && !hit); /* evicted: compiled again */
    tb_plan_release(again);
    /* the evicted plan stays usable by its holders */
    int64_t shape[2] = {4, 256};
    tb_tensor x = random_tensor(2, shape, 9), out;
    TB_CHECK(tb_plan_run_tensors(pa, &x, &out) == TB_OK);
    float sum = 0;
    for (int i = 0; i < 256; i++)
        sum += ((float *)tb_tensor_data(&out))[i];
    TB_CHECK(fabsf(sum - 1.0f) < 1e-4f);
    tb_tensor_release(&out);
    tb_tensor_release(&x);
    TB_CHECK(tb_plan_cache_set_capacity(1024, 1024) == TB_OK);
    tb_plan_release(pa);
    tb_plan_release(pb);
    tb_plan_release(pc);
    tb_graph_free(a);
    tb_graph_free(b);
    tb_graph_free(c);
}

/* Without fusion: a = exp(x); b = -a; c = softmax(b); out = c * a. b may overwrite nothing that is
 * still needed (a lives until the end), c may overwrite b; values must match a naive loop. */
static void test_in_place_respects_lifetimes(void) {
    setenv("TORCHBURN_NO_FUSION", "1", 1);
    tb_graph *g;
    TB_CHECK(tb_graph_new(&g) == TB_OK);
    int64_t shape[2] = {3, 50};
    int x;
    TB_CHECK(tb_graph_add_input(g, TB_F32, 2, shape, NULL, &x) == TB_OK);
    tb_graph_params p;
    memset(&p, 0, sizeof p);
    p.unary.op = op_index(tb_graph_unary_names, "exp");
    p.unary.dtype = TB_F32;
    int a = add(g, TB_OP_UNARY, &p, 1, &x);
    p.unary.op = op_index(tb_graph_unary_names, "neg");
    int b = add(g, TB_OP_UNARY, &p, 1, &a);
    memset(&p, 0, sizeof p);
    p.softmax.dim = 1;
    p.softmax.dtype = TB_F32;
    int c = add(g, TB_OP_SOFTMAX, &p, 1, &b);
    memset(&p, 0, sizeof p);
    p.binary.op = op_index(tb_graph_binary_names, "mul");
    p.binary.dtype = TB_F32;
    int ca[2] = {c, a};
    int out = add(g, TB_OP_BINARY, &p, 2, ca);
    TB_CHECK(tb_graph_add_output(g, out) == TB_OK);
    tb_plan *plan;
    TB_CHECK(tb_graph_compile(g, &plan, NULL) == TB_OK);
    TB_CHECK(tb_plan_num_steps(plan) == 4);
    /* a lives to the end; b and c share one buffer: two 64-byte-aligned buffers of 150 floats */
    TB_CHECK_MSG(tb_plan_arena_bytes(plan) == 2 * ((150 * sizeof(float) + 63) & ~(size_t)63), "arena %zu",
                 tb_plan_arena_bytes(plan));
    tb_tensor in = random_tensor(2, shape, 11), result;
    TB_CHECK(tb_plan_run_tensors(plan, &in, &result) == TB_OK);
    const float *xv = tb_tensor_data(&in);
    double expected[150];
    for (int r = 0; r < 3; r++) {
        double m = -INFINITY, sum = 0;
        for (int i = 0; i < 50; i++)
            m = fmax(m, -exp(xv[r * 50 + i]));
        for (int i = 0; i < 50; i++)
            sum += exp(-exp(xv[r * 50 + i]) - m);
        for (int i = 0; i < 50; i++)
            expected[r * 50 + i] = exp(-exp(xv[r * 50 + i]) - m) / sum * exp(xv[r * 50 + i]);
    }
    TB_CHECK(max_abs_diff(tb_tensor_data(&result), expected, 150) < 1e-5f);
    tb_tensor_release(&in);
    tb_tensor_release(&result);
    tb_plan_release(plan);
    tb_graph_free(g);
    unsetenv("TORCHBURN_NO_FUSION");
}

static void test_builder_errors(void) {
    tb_graph *g;
    TB_CHECK(tb_graph_new(&g) == TB_OK);
    int64_t s1[2] = {2, 3}, s2[2] = {4, 5};
    int x, y, out;
    TB_CHECK(tb_graph_add_input(g, TB_F32, 2, s1, NULL, &x) == TB_OK);
    TB_CHECK(tb_graph_add_input(g, TB_F32, 2, s2, NULL, &y) == TB_OK);
    int pair[2] = {x, y};
    TB_CHECK(tb_graph_add_node(g, TB_OP_MATMUL, NULL, 2, pair, &out, NULL) == TB_ERR_SHAPE);
    TB_CHECK(strstr(tb_error_message(), "matmul") != NULL);
    int missing[1] = {42};
    TB_CHECK(tb_graph_add_node(g, TB_OP_COPY, NULL, 1, missing, &out, NULL) == TB_ERR_INVALID_ARGUMENT);
    TB_CHECK(tb_graph_add_node(g, TB_OP_COPY, NULL, 2, pair, &out, NULL) == TB_ERR_INVALID_ARGUMENT);
    tb_graph_params p;
    memset(&p, 0, sizeof p);
    p.unary.op = 999;
    TB_CHECK(tb_graph_add_node(g, TB_OP_UNARY, &p, 1, &x, &out, NULL) == TB_ERR_INVALID_ARGUMENT);
    tb_graph_op op;
    TB_CHECK(tb_graph_op_from_name("no_such_op", &op) == TB_ERR_INVALID_ARGUMENT);
    TB_CHECK(tb_graph_op_from_name("matmul", &op) == TB_OK && op == TB_OP_MATMUL);
    tb_plan *plan;
    TB_CHECK(tb_graph_compile(g, &plan, NULL) == TB_ERR_INVALID_ARGUMENT); /* no outputs */
    TB_CHECK(tb_graph_num_values(g) == 2); /* failed adds left the graph unchanged */
    tb_graph_free(g);
}

static void test_allocation_failures(void) {
    tb_plan_cache_clear();
    /* every allocation count from 0 up: compiling either fails cleanly or succeeds */
    int successes = 0;
    for (int64_t budget = 0; budget < 40 && successes == 0; budget++) {
        tb_graph *g = softmax_chain(3, 64, "s");
        tb_alloc_fail_after(budget);
        tb_plan *plan = NULL;
        tb_status status = tb_graph_compile(g, &plan, NULL);
        int64_t shape[2] = {4, 64};
        tb_tensor x, out;
        tb_alloc_fail_after(-1);
        if (status == TB_OK) {
            x = random_tensor(2, shape, 4);
            tb_alloc_fail_after(0); /* the run's arena and output allocations fail */
            tb_status run = tb_plan_run_tensors(plan, &x, &out);
            tb_alloc_fail_after(-1);
            TB_CHECK(run == TB_ERR_OUT_OF_MEMORY);
            tb_tensor_release(&x);
            tb_plan_release(plan);
            successes++;
        } else {
            TB_CHECK(status == TB_ERR_OUT_OF_MEMORY);
        }
        tb_graph_free(g);
    }
    TB_CHECK(successes == 1);
    tb_plan_cache_clear();
}

/* Several threads compiling and running structurally overlapping graphs through the shared plan cache,
 * with a capacity small enough that entries are evicted while other threads hold their plans (the
 * ThreadSanitizer stage of tools/run_tests.sh runs this). */
typedef struct cache_worker {
    int index, failures;
} cache_worker;

static void *plan_cache_worker(void *arg) {
    cache_worker *w = arg;
    for (int round = 0; round < 12; round++) {
        const int64_t n = 32 * (1 + (round + w->index) % 3);
        tb_graph *g = softmax_chain(2, n, "worker");
        tb_plan *plan = NULL;
        bool hit;
        int64_t shape[2] = {4, n};
        tb_tensor x = random_tensor(2, shape, (uint64_t)(w->index * 100 + round)), out;
        if (!g || tb_graph_compile(g, &plan, &hit) != TB_OK || tb_plan_run_tensors(plan, &x, &out) != TB_OK) {
            w->failures++;
        } else {
            float sum = 0;
            for (int64_t i = 0; i < n; i++)
                sum += ((float *)tb_tensor_data(&out))[i];
            w->failures += fabsf(sum - 1.0f) > 1e-4f;
            tb_tensor_release(&out);
        }
        tb_tensor_release(&x);
        tb_plan_release(plan);
        tb_graph_free(g);
    }
    return NULL;
}

static void test_plan_cache_from_many_threads(void) {
    enum { THREADS = 4 };
    tb_plan_cache_clear();
    TB_CHECK(tb_plan_cache_set_capacity(2, 2) == TB_OK);
    pthread_t threads[THREADS];
    cache_worker workers[THREADS];
    for (int i = 0; i < THREADS; i++) {
        workers[i] = (cache_worker){.index = i};
        TB_CHECK(pthread_create(&threads[i], NULL, plan_cache_worker, &workers[i]) == 0);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(threads[i], NULL);
        TB_CHECK_MSG(workers[i].failures == 0, "worker %d: %d failures", i, workers[i].failures);
    }
    TB_CHECK(tb_plan_cache_set_capacity(1024, 1024) == TB_OK);
    tb_plan_cache_clear();
}

/* Ops computed by the eager core: gather and max along dim 1 against naive loops, a bad index is an
 * error (never an out-of-bounds read), and a float index is rejected when the node is added. */
static void test_eager_core_ops(void) {
    tb_graph *g;
    TB_CHECK(tb_graph_new(&g) == TB_OK);
    int64_t shape[2] = {3, 5};
    int x, index;
    TB_CHECK(tb_graph_add_input(g, TB_F32, 2, shape, NULL, &x) == TB_OK);
    TB_CHECK(tb_graph_add_input(g, TB_I64, 2, shape, NULL, &index) == TB_OK);
    tb_graph_params p;
    memset(&p, 0, sizeof p);
    p.index.dim = 1;
    int pair[2] = {x, index};
    int gathered = add(g, TB_OP_GATHER, &p, 2, pair);
    memset(&p, 0, sizeof p);
    p.max_dim.dim = 1;
    p.max_dim.is_max = 1;
    int values = add(g, TB_OP_MAX_DIM, &p, 1, &x);
    TB_CHECK(tb_graph_add_output(g, gathered) == TB_OK);
    TB_CHECK(tb_graph_add_output(g, values) == TB_OK);
    TB_CHECK(tb_graph_add_output(g, values + 1) == TB_OK);
    int bad_pair[2] = {x, x}, out = -1;
    memset(&p, 0, sizeof p);
    TB_CHECK(tb_graph_add_node(g, TB_OP_GATHER, &p, 2, bad_pair, &out, NULL) == TB_ERR_DTYPE);

    tb_plan *plan;
    TB_CHECK_MSG(tb_graph_compile(g, &plan, NULL) == TB_OK, "%s", tb_error_message());
    tb_tensor in[2] = {random_tensor(2, shape, 7)};
    TB_CHECK(tb_tensor_empty(TB_I64, 2, shape, 0, &in[1]) == TB_OK);
    int64_t *idx = tb_tensor_data(&in[1]);
    for (int i = 0; i < 15; i++)
        idx[i] = (i * 7) % 5;
    tb_tensor outs[3];
    TB_CHECK_MSG(tb_plan_run_tensors(plan, in, outs) == TB_OK, "%s", tb_error_message());
    const float *xv = tb_tensor_data(&in[0]);
    double want_gather[15], want_max[3];
    bool indices_ok = outs[2].dtype == TB_I64 && outs[2].ndim == 1 && outs[2].shape[0] == 3;
    for (int r = 0; r < 3; r++) {
        int best = 0;
        for (int c = 0; c < 5; c++) {
            want_gather[r * 5 + c] = xv[r * 5 + idx[r * 5 + c]];
            best = xv[r * 5 + c] > xv[r * 5 + best] ? c : best;
        }
        want_max[r] = xv[r * 5 + best];
        indices_ok = indices_ok && ((const int64_t *)tb_tensor_data(&outs[2]))[r] == best;
    }
    TB_CHECK(max_abs_diff(tb_tensor_data(&outs[0]), want_gather, 15) == 0.0f);
    TB_CHECK(outs[1].ndim == 1 && max_abs_diff(tb_tensor_data(&outs[1]), want_max, 3) == 0.0f);
    TB_CHECK(indices_ok);
    for (int o = 0; o < 3; o++)
        tb_tensor_release(&outs[o]);
    idx[4] = 5; /* out of range for a dim of 5 */
    TB_CHECK(tb_plan_run_tensors(plan, in, outs) == TB_ERR_INVALID_ARGUMENT);
    TB_CHECK_MSG(strstr(tb_error_message(), "out of bounds") != NULL, "%s", tb_error_message());
    tb_tensor_release(&in[0]);
    tb_tensor_release(&in[1]);
    tb_plan_release(plan);
    tb_graph_free(g);
}

/* dropout_mask refuses a probability outside [0, 1] (NaN included) and a seed that is not one int64,
 * naming the problem; a valid node has x's shape and bool dtype. */
static void test_dropout_mask_validation(void) {
    tb_graph *g;
    TB_CHECK(tb_graph_new(&g) == TB_OK);
    int64_t xs[2] = {3, 5}, one[1] = {1}, two[1] = {2};
    int x, seed, float_seed, two_seeds;
    TB_CHECK(tb_graph_add_input(g, TB_F32, 2, xs, NULL, &x) == TB_OK);
    TB_CHECK(tb_graph_add_input(g, TB_I64, 1, one, NULL, &seed) == TB_OK);
    TB_CHECK(tb_graph_add_input(g, TB_F32, 1, one, NULL, &float_seed) == TB_OK);
    TB_CHECK(tb_graph_add_input(g, TB_I64, 1, two, NULL, &two_seeds) == TB_OK);
    tb_graph_params p;
    memset(&p, 0, sizeof p);
    int out = -1;
    const double bad[] = {-0.1, 1.5, NAN};
    for (int i = 0; i < 3; i++) {
        p.dropout.p = bad[i];
        int in[2] = {x, seed};
        TB_CHECK(tb_graph_add_node(g, TB_OP_DROPOUT_MASK, &p, 2, in, &out, NULL) == TB_ERR_INVALID_ARGUMENT);
        TB_CHECK(strstr(tb_error_message(), "must be in [0, 1]") != NULL);
    }
    p.dropout.p = 0.5;
    int with_float[2] = {x, float_seed}, with_two[2] = {x, two_seeds}, good[2] = {x, seed};
    TB_CHECK(tb_graph_add_node(g, TB_OP_DROPOUT_MASK, &p, 2, with_float, &out, NULL) == TB_ERR_DTYPE);
    TB_CHECK(tb_graph_add_node(g, TB_OP_DROPOUT_MASK, &p, 2, with_two, &out, NULL) == TB_ERR_DTYPE);
    TB_CHECK(strstr(tb_error_message(), "seed must be one int64 element") != NULL);
    TB_CHECK(tb_graph_add_node(g, TB_OP_DROPOUT_MASK, &p, 2, good, &out, NULL) == TB_OK);
    tb_graph_free(g);
}

int main(void) {
    test_dropout_mask_validation();
    test_mlp_plan();
    test_elementwise_and_views();
    test_hash_cache_and_memory_plan();
    test_in_place_respects_lifetimes();
    test_builder_errors();
    test_eager_core_ops();
    test_allocation_failures();
    test_plan_cache_from_many_threads();
    return tb_test_finish("graph");
}
