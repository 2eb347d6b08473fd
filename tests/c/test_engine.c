/* Tests the engine layer in C: the registry and its aliases, selection from the environment (the
 * reference engine forces the scalar ISA and one thread; unknown names and contradictions are errors;
 * a GPU request without a GPU is an error only when asked for the active engine), op validation, the
 * CPU engines against each other, and -- when a Vulkan device exists (lavapipe is allowed here) --
 * a batched sequence on the vulkan engine against the reference engine, with exactly one submission. */
#include <dlfcn.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "kernels/elementwise.h"
#include "tb_test.h"
#include "torchburn/cpu.h"
#include "torchburn/engine.h"
#include "torchburn/thread_pool.h"

static void test_registry(void) {
    TB_CHECK(tb_engine_count() == 3);
    TB_CHECK(tb_engine_find("native_cpu") == &tb_engine_native_cpu);
    TB_CHECK(tb_engine_find("reference") == &tb_engine_reference);
    TB_CHECK(tb_engine_find("burn") == &tb_engine_reference);
    TB_CHECK(tb_engine_find("Vulkan") == &tb_engine_vulkan);
    TB_CHECK(tb_engine_find("gpu") == &tb_engine_vulkan);
    TB_CHECK(tb_engine_find("cuda") == NULL && tb_engine_find(NULL) == NULL);
    for (int i = 0; i < tb_engine_count(); i++) {
        const tb_engine *e = tb_engine_at(i);
        TB_CHECK(e && e->name && e->init && e->device_info && e->supports_op && e->buffer_alloc && e->buffer_free &&
                 e->buffer_upload && e->buffer_download && e->run && e->synchronize);
    }
    TB_CHECK(tb_engine_at(3) == NULL && tb_engine_at(-1) == NULL);
}

static void test_selection(void) {
    const tb_engine *active;
    unsetenv("TORCHBURN_DEVICE");
    setenv("TORCHBURN_ENGINE", "nonsense", 1);
    TB_CHECK(tb_engine_select_from_env() == TB_ERR_INVALID_ARGUMENT);
    TB_CHECK(strstr(tb_error_message(), "TORCHBURN_ENGINE='nonsense'") != NULL);
    TB_CHECK(tb_engine_active(&active) == TB_OK && active == &tb_engine_native_cpu);

    tb_isa before = tb_isa_active();
    int threads_before = tb_num_threads();
    setenv("TORCHBURN_ENGINE", "burn", 1);
    TB_CHECK(tb_engine_select_from_env() == TB_OK);
    TB_CHECK(tb_engine_active(&active) == TB_OK && active == &tb_engine_reference);
    TB_CHECK(tb_isa_active() == TB_ISA_SCALAR && tb_num_threads() == 1);
    TB_CHECK(tb_isa_set(before) == TB_OK && tb_set_num_threads(threads_before) == TB_OK);

    setenv("TORCHBURN_ENGINE", "reference", 1);
    setenv("TORCHBURN_DEVICE", "gpu", 1);
    TB_CHECK(tb_engine_select_from_env() == TB_ERR_INVALID_ARGUMENT);
    TB_CHECK(strstr(tb_error_message(), "contradicts TORCHBURN_DEVICE=gpu") != NULL);
    unsetenv("TORCHBURN_ENGINE");
    setenv("TORCHBURN_DEVICE", "tpu", 1);
    TB_CHECK(tb_engine_select_from_env() == TB_ERR_INVALID_ARGUMENT);

    /* a GPU request with the loader hidden: selection succeeds, asking for the engine says why not */
    setenv("TORCHBURN_VULKAN_LOADER", "/nonexistent/libvulkan.so.1", 1);
    TB_CHECK(tb_engine_vulkan_reset() == TB_OK);
    setenv("TORCHBURN_DEVICE", "gpu", 1);
    TB_CHECK(tb_engine_select_from_env() == TB_OK);
    tb_engine_device_info probe;
    tb_engine_vulkan.device_info(&probe);
    /* a build without <vulkan/vulkan.h> has the stub engine, whose reason is always the same */
    const bool stub = strstr(probe.reason, "headers were absent") != NULL;
    TB_CHECK(tb_engine_active(&active) == TB_ERR_UNSUPPORTED && active == NULL);
    TB_CHECK(strstr(tb_error_message(), "TORCHBURN_DEVICE=gpu asks for a GPU") != NULL);
    TB_CHECK(strstr(tb_error_message(), stub ? "headers were absent" : "could not be loaded") != NULL);
    setenv("TORCHBURN_DEVICE", "auto", 1);
    TB_CHECK(tb_engine_select_from_env() == TB_OK);
    TB_CHECK(tb_engine_active(&active) == TB_OK && active == &tb_engine_native_cpu);
    tb_engine_device_info info;
    tb_engine_vulkan.device_info(&info);
    TB_CHECK(!info.available && (stub || strstr(info.reason, "/nonexistent/libvulkan.so.1") != NULL));
    unsetenv("TORCHBURN_VULKAN_LOADER");
    unsetenv("TORCHBURN_DEVICE");
    TB_CHECK(tb_engine_vulkan_reset() == TB_OK);
    TB_CHECK(tb_engine_select_from_env() == TB_OK);
}

/* Uploads `n` floats into a new buffer of `engine`. */
static tb_engine_buffer *buffer_with(const tb_engine *engine, const float *values, int64_t n) {
    tb_engine_buffer *buffer = NULL;
    if (engine->buffer_alloc((size_t)n * sizeof(float), &buffer) != TB_OK)
        return NULL;
    if (values && engine->buffer_upload(buffer, 0, values, (size_t)n * sizeof(float)) != TB_OK) {
        engine->buffer_free(buffer);
        return NULL;
    }
    return buffer;
}

static void test_validation(void) {
    const tb_engine *e = &tb_engine_reference;
    float values[8] = {0};
    tb_engine_buffer *small = buffer_with(e, values, 4), *large = buffer_with(e, values, 8);
    tb_engine_buffer *other = buffer_with(&tb_engine_native_cpu, values, 8);
    TB_CHECK(small && large && other);
    tb_engine_op op = {.kind = TB_ENGINE_OP_UNARY, .code = 0, .n = 8, .a = large, .y = small};
    TB_CHECK(e->run(&op, 1) == TB_ERR_SHAPE && strstr(tb_error_message(), "operand y needs 32 bytes") != NULL);
    op.y = other;
    TB_CHECK(e->run(&op, 1) == TB_ERR_INVALID_ARGUMENT && strstr(tb_error_message(), "belongs to engine native_cpu"));
    op = (tb_engine_op){.kind = TB_ENGINE_OP_BINARY, .code = 99, .n = 8, .b_len = 8, .a = large, .b = large, .y = large};
    TB_CHECK(e->run(&op, 1) == TB_ERR_INVALID_ARGUMENT);
    op = (tb_engine_op){.kind = TB_ENGINE_OP_MATMUL, .m = 1, .n = 2, .k = 2, .a = large, .b = large, .y = large};
    TB_CHECK(e->run(&op, 1) == TB_ERR_INVALID_ARGUMENT && strstr(tb_error_message(), "must not alias"));
    op = (tb_engine_op){.kind = TB_ENGINE_OP_RMS_NORM, .rows = 2, .len = 4, .eps = NAN, .a = large, .y = large};
    TB_CHECK(e->run(&op, 1) == TB_ERR_INVALID_ARGUMENT && strstr(tb_error_message(), "eps"));
    op = (tb_engine_op){.kind = TB_ENGINE_OP_COUNT, .a = large, .y = large};
    TB_CHECK(e->run(&op, 1) == TB_ERR_INVALID_ARGUMENT);
    /* the LLM ops: shape rules, then the CPU engines refuse them (GPU-only) */
    op = (tb_engine_op){.kind = TB_ENGINE_OP_QMATMUL, .code = 5, .m = 1, .n = 2, .k = 4, .a = large, .b = small,
                        .d = small, .y = other};
    TB_CHECK(e->run(&op, 1) == TB_ERR_INVALID_ARGUMENT && strstr(tb_error_message(), "code must be 8"));
    op.code = 8;
    op.y = large;
    op.a = small;
    TB_CHECK(e->run(&op, 1) == TB_ERR_UNSUPPORTED && strstr(tb_error_message(), "does not run this qmatmul op"));
    op = (tb_engine_op){.kind = TB_ENGINE_OP_LLM_ATTENTION, .a = large, .b = small, .c = small, .y = other};
    op.llm.heads = 3;
    op.llm.kv_heads = 2;
    op.llm.head_dim = 2;
    TB_CHECK(e->run(&op, 1) == TB_ERR_SHAPE && strstr(tb_error_message(), "llm_attention op"));
    TB_CHECK(e->buffer_upload(small, 8, values, 12) == TB_ERR_INVALID_ARGUMENT);
    TB_CHECK(e->buffer_download(small, 0, values, 20) == TB_ERR_INVALID_ARGUMENT);
    e->buffer_free(small);
    e->buffer_free(large);
    tb_engine_native_cpu.buffer_free(other);
    e->buffer_free(NULL);
}

enum { M = 7, K = 37, N = 19 };

/* matmul (+bias) -> gelu in place -> row-broadcast mul -> layer_norm, as one run on `engine`. */
static bool run_chain(const tb_engine *engine, float out[M * N]) {
    float a[M * K], w[N * K], bias[N], gamma[N];
    tb_test_fill_uniform(a, M * K, -1.0f, 1.0f, 1);
    tb_test_fill_uniform(w, N * K, -1.0f, 1.0f, 2);
    tb_test_fill_uniform(bias, N, -1.0f, 1.0f, 3);
    tb_test_fill_uniform(gamma, N, 0.5f, 1.5f, 4);
    tb_engine_buffer *ba = buffer_with(engine, a, M * K), *bw = buffer_with(engine, w, N * K);
    tb_engine_buffer *bb = buffer_with(engine, bias, N), *bg = buffer_with(engine, gamma, N);
    tb_engine_buffer *h = buffer_with(engine, NULL, M * N), *y = buffer_with(engine, NULL, M * N);
    bool ok = ba && bw && bb && bg && h && y;
    if (ok) {
        tb_engine_op ops[4] = {
            {.kind = TB_ENGINE_OP_MATMUL, .m = M, .n = N, .k = K, .trans_b = true, .a = ba, .b = bw, .c = bb, .y = h},
            {.kind = TB_ENGINE_OP_UNARY, .code = 11 /* gelu */, .n = M * N, .a = h, .y = h},
            {.kind = TB_ENGINE_OP_BINARY, .code = 2 /* mul */, .n = M * N, .b_len = N, .a = h, .b = bg, .y = h},
            {.kind = TB_ENGINE_OP_LAYER_NORM, .rows = M, .len = N, .eps = 1e-5f, .a = h, .b = bg, .c = bb, .y = y},
        };
        tb_status status = engine->run(ops, 4);
        TB_CHECK_MSG(status == TB_OK, "%s: %s", engine->name, tb_error_message());
        ok = status == TB_OK && engine->buffer_download(y, 0, out, sizeof(float) * M * N) == TB_OK;
    }
    tb_engine_buffer *all[6] = {ba, bw, bb, bg, h, y};
    for (int i = 0; i < 6; i++)
        engine->buffer_free(all[i]);
    return ok;
}

static void check_close(const char *what, const float *got, const float *want, int n, float tolerance) {
    int bad = 0;
    for (int i = 0; i < n; i++)
        if (!(fabsf(got[i] - want[i]) <= tolerance * (1.0f + fabsf(want[i]))))
            bad++;
    TB_CHECK_MSG(bad == 0, "%s: %d of %d values differ from the reference", what, bad, n);
}

static void test_cpu_engines_agree(void) {
    float golden[M * N], native[M * N];
    TB_CHECK(run_chain(&tb_engine_reference, golden));
    TB_CHECK(run_chain(&tb_engine_native_cpu, native));
    check_close("native_cpu chain", native, golden, M * N, 1e-5f);
}

static void test_vulkan(void) {
    setenv("TORCHBURN_VULKAN_ALLOW_CPU", "1", 1);
    TB_CHECK(tb_engine_vulkan_reset() == TB_OK);
    tb_engine_device_info before;
    tb_engine_vulkan.device_info(&before);
    if (!before.available) {
        const char *require = getenv("TORCHBURN_TEST_REQUIRE_VULKAN");
        TB_CHECK_MSG(!(require && strcmp(require, "1") == 0), "a Vulkan device is required: %s", before.reason);
        printf("test_engine: no Vulkan device (%s); vulkan checks not run\n", before.reason);
        return;
    }
    printf("test_engine: vulkan on %s (%s)\n", before.adapter_name, before.device_type);
    /* Keep Mesa's lavapipe mapped after the loader lets go of it at vkDestroyInstance, so LeakSanitizer
     * can name the driver's process-lifetime allocations (tests/c/lsan.supp) instead of an unknown module. */
    (void)dlopen("libvulkan_lvp.so", RTLD_LAZY | RTLD_NOLOAD);
    TB_CHECK(strcmp(before.backend, "Vulkan") == 0 && before.max_storage_buffer_range > 0);
    float golden[M * N], gpu[M * N];
    TB_CHECK(run_chain(&tb_engine_reference, golden));
    TB_CHECK(run_chain(&tb_engine_vulkan, gpu));
    check_close("vulkan chain", gpu, golden, M * N, 1e-5f);
    tb_engine_device_info after;
    tb_engine_vulkan.device_info(&after);
    TB_CHECK(after.submits == before.submits + 1);
    TB_CHECK(after.dispatches == before.dispatches + 4);
    /* a reset with a buffer alive is refused; after freeing it succeeds */
    tb_engine_buffer *alive = buffer_with(&tb_engine_vulkan, NULL, 4);
    TB_CHECK(alive != NULL);
    TB_CHECK(tb_engine_vulkan_reset() == TB_ERR_INVALID_ARGUMENT);
    tb_engine_vulkan.buffer_free(alive);
    TB_CHECK(tb_engine_vulkan_reset() == TB_OK);
    unsetenv("TORCHBURN_VULKAN_ALLOW_CPU");
}

/* Staging mode (forced): uploads queue and ride in the next run, the later of two overlapping uploads
 * wins, run_download's results come back in the same submit, freeing a queued upload's target flushes. */
static void test_vulkan_staging_queue(void) {
    setenv("TORCHBURN_VULKAN_ALLOW_CPU", "1", 1);
    setenv("TORCHBURN_VULKAN_FORCE_STAGING", "1", 1);
    TB_CHECK(tb_engine_vulkan_reset() == TB_OK);
    tb_engine_device_info before, after;
    tb_engine_vulkan.device_info(&before);
    if (before.available) {
        enum { COUNT = 64 };
        float first[COUNT], patch[16], got[COUNT];
        for (int i = 0; i < COUNT; i++)
            first[i] = (float)i;
        for (int i = 0; i < 16; i++)
            patch[i] = 1000.0f + (float)i;
        tb_engine_buffer *a = buffer_with(&tb_engine_vulkan, first, COUNT), *y = buffer_with(&tb_engine_vulkan, NULL, COUNT);
        TB_CHECK(a && y && tb_engine_vulkan.buffer_upload(a, 16 * sizeof(float), patch, sizeof patch) == TB_OK);
        tb_engine_op neg = {.kind = TB_ENGINE_OP_UNARY, .code = TB_UNARY_NEG, .n = COUNT, .a = a, .y = y};
        tb_engine_download down = {.buffer = y, .bytes = sizeof got, .dst = got};
        tb_engine_vulkan.device_info(&before);
        TB_CHECK(tb_engine_run_download(&tb_engine_vulkan, &neg, 1, &down, 1) == TB_OK);
        tb_engine_vulkan.device_info(&after);
        bool same = true;
        for (int i = 0; i < COUNT; i++)
            same = same && got[i] == -(i >= 16 && i < 32 ? patch[i - 16] : first[i]);
        TB_CHECK_MSG(same, "staged uploads: the later overlapping upload must win");
        TB_CHECK(after.submits == before.submits + 1 && after.transfers == before.transfers);
        TB_CHECK(after.batched_copies == before.batched_copies + 3); /* a, the patch, the download */
        TB_CHECK(tb_engine_vulkan.buffer_upload(a, 0, patch, sizeof patch) == TB_OK);
        tb_engine_vulkan.buffer_free(a); /* its queued upload goes first */
        tb_engine_vulkan.device_info(&before);
        TB_CHECK(before.transfers == after.transfers + 1);
        tb_engine_vulkan.buffer_free(y);
    }
    unsetenv("TORCHBURN_VULKAN_FORCE_STAGING");
    TB_CHECK(tb_engine_vulkan_reset() == TB_OK);
    unsetenv("TORCHBURN_VULKAN_ALLOW_CPU");
}

/* A fused chain on each CPU engine equals the same steps as separate unary/binary ops (bit for bit:
 * the same kernels), with a row-broadcast input ([3, 1] against [3, 5]) expanded by hand for the
 * unfused side; reductions over [rows, len, inner] against a direct loop; bad chains are refused. */
static void test_fused_and_reduce(void) {
    enum { ROWS = 3, COLS = 5, N = ROWS * COLS };
    float x[N], row[ROWS], row_full[N], want[N], got[N], scratch[N];
    for (int i = 0; i < N; i++)
        x[i] = (float)(i - 7) * 0.37f;
    for (int r = 0; r < ROWS; r++)
        row[r] = 0.5f + (float)r;
    for (int i = 0; i < N; i++)
        row_full[i] = row[i / COLS];
    const tb_engine *engines[2] = {&tb_engine_reference, &tb_engine_native_cpu};
    for (int e = 0; e < 2; e++) {
        const tb_engine *engine = engines[e];
        tb_engine_buffer *bx = buffer_with(engine, x, N), *brow = buffer_with(engine, row, ROWS);
        tb_engine_buffer *bfull = buffer_with(engine, row_full, N), *by = buffer_with(engine, NULL, N);
        tb_engine_buffer *bt = buffer_with(engine, NULL, N);
        TB_CHECK(bx && brow && bfull && by && bt);
        /* y = 1 - tanh(x) * row  (unary, binary with a [3, 1] operand, scalar first) */
        tb_engine_fused chain = {.ninputs = 2, .nsteps = 3, .len = {N, ROWS}, .inner = {1, COLS}};
        tb_engine_op fused = {.kind = TB_ENGINE_OP_FUSED, .n = N, .a = bx, .b = brow, .y = by, .fused = &chain};
        chain.steps[0] = (tb_engine_fused_step){.kind = TB_ENGINE_STEP_UNARY, .code = TB_UNARY_TANH, .lhs = 0};
        chain.steps[1] = (tb_engine_fused_step){.kind = TB_ENGINE_STEP_BINARY, .code = TB_BINARY_MUL, .lhs = 4, .rhs = 1};
        chain.steps[2] = (tb_engine_fused_step){.kind = TB_ENGINE_STEP_SCALAR_FIRST, .code = TB_BINARY_SUB, .lhs = 5,
                                                      .scalar = 1.0f};
        TB_CHECK(engine->run(&fused, 1) == TB_OK);
        TB_CHECK(engine->buffer_download(by, 0, got, sizeof got) == TB_OK);
        tb_engine_op steps[2] = {
            {.kind = TB_ENGINE_OP_UNARY, .code = TB_UNARY_TANH, .n = N, .a = bx, .y = bt},
            {.kind = TB_ENGINE_OP_BINARY, .code = TB_BINARY_MUL, .n = N, .b_len = N, .a = bt, .b = bfull, .y = bt},
        };
        TB_CHECK(engine->run(steps, 2) == TB_OK);
        TB_CHECK(engine->buffer_download(bt, 0, scratch, sizeof scratch) == TB_OK);
        for (int i = 0; i < N; i++)
            want[i] = 1.0f - scratch[i];
        TB_CHECK(memcmp(got, want, sizeof got) == 0);
        /* refusals: a register that holds nothing, an input that does not tile n, a missing input or chain */
        tb_engine_fused bad_chain = chain;
        tb_engine_op bad = fused;
        bad.fused = &bad_chain;
        bad_chain.steps[1].rhs = 6;
        TB_CHECK(engine->run(&bad, 1) == TB_ERR_INVALID_ARGUMENT && strstr(tb_error_message(), "reads register 6"));
        bad_chain = chain;
        bad_chain.len[1] = 4;
        TB_CHECK(engine->run(&bad, 1) == TB_ERR_SHAPE && strstr(tb_error_message(), "does not tile n=15"));
        bad_chain = chain;
        bad.b = NULL;
        TB_CHECK(engine->run(&bad, 1) == TB_ERR_INVALID_ARGUMENT && strstr(tb_error_message(), "input 1 of 2 is missing"));
        bad = fused;
        bad.fused = NULL;
        TB_CHECK(engine->run(&bad, 1) == TB_ERR_INVALID_ARGUMENT && strstr(tb_error_message(), "chain (op->fused) is missing"));
        /* reductions of x as [1, 3, 5] over the middle dim (inner 5) and as [3, 5, 1] (rows) */
        const int codes[4] = {TB_REDUCE_SUM, TB_REDUCE_MAX, TB_REDUCE_MIN, 4};
        for (int c = 0; c < 4; c++) {
            tb_engine_op reduce = {.kind = TB_ENGINE_OP_REDUCE, .code = codes[c], .rows = 1, .len = ROWS, .inner = COLS,
                                   .a = bx, .y = by};
            TB_CHECK(engine->run(&reduce, 1) == TB_OK);
            TB_CHECK(engine->buffer_download(by, 0, got, sizeof(float) * COLS) == TB_OK);
            for (int j = 0; j < COLS; j++) {
                float acc = x[j];
                for (int r = 1; r < ROWS; r++) {
                    const float v = x[r * COLS + j];
                    acc = codes[c] == TB_REDUCE_MAX ? fmaxf(acc, v) : codes[c] == TB_REDUCE_MIN ? fminf(acc, v) : acc + v;
                }
                if (codes[c] == 4)
                    acc /= (float)ROWS;
                TB_CHECK(fabsf(got[j] - acc) <= 1e-6f);
            }
        }
        tb_engine_op reduce = {.kind = TB_ENGINE_OP_REDUCE, .code = 5, .rows = ROWS, .len = COLS, .inner = 1, .a = bx, .y = by};
        TB_CHECK(engine->run(&reduce, 1) == TB_ERR_INVALID_ARGUMENT && strstr(tb_error_message(), "code 5"));
        reduce.code = TB_REDUCE_SUM;
        reduce.y = bx;
        TB_CHECK(engine->run(&reduce, 1) == TB_ERR_INVALID_ARGUMENT && strstr(tb_error_message(), "must not write it"));
        engine->buffer_free(bx);
        engine->buffer_free(brow);
        engine->buffer_free(bfull);
        engine->buffer_free(by);
        engine->buffer_free(bt);
    }
}

int main(void) {
    test_registry();
    test_selection();
    test_validation();
    test_cpu_engines_agree();
    test_fused_and_reduce();
    test_vulkan();
    test_vulkan_staging_queue();
    tb_engine_vulkan_reset();
    return tb_test_finish("engine");
}
