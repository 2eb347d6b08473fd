/* Tests tb_optim_step (src/eager/optim.c): Adam/AdamW (amsgrad), SGD (fresh and running momentum,
 * nesterov), RMSprop (centered, momentum) and Adagrad over float32 and float64 parameters whose
 * sizes cross the kernel's chunk boundary, against an element-at-a-time double formula written here
 * from PyTorch's algorithm boxes; step counters and storage versions; and that a bad slot anywhere
 * leaves every tensor unwritten; that a step split over threads writes the bits of the one-thread
 * step; that an allocation failure writes nothing; and that float32 SGD has the bits of PyTorch's
 * float32 formula at every ISA. (The Python tests compare whole trajectories with PyTorch.) */
#include <math.h>
#include <string.h>

#include "tb_test.h"
#include "torchburn/alloc.h"
#include "torchburn/cpu.h"
#include "torchburn/eager_optim.h"
#include "torchburn/thread_pool.h"

enum { N = 1001 }; /* not a multiple of the 256-element chunk */

static tb_tensor make(tb_dtype dtype, int64_t n, uint64_t seed, float lo, float hi) {
    tb_tensor t = {0};
    int64_t shape[1] = {n};
    if (tb_tensor_empty(dtype, n < 0 ? 0 : 1, shape, TB_ALLOC_ZERO, &t) != TB_OK)
        return t;
    if (seed) {
        float values[N];
        tb_test_fill_uniform(values, n, lo, hi, seed);
        for (int64_t i = 0; i < n; i++) {
            if (dtype == TB_F32)
                ((float *)tb_tensor_data(&t))[i] = values[i];
            else
                ((double *)tb_tensor_data(&t))[i] = values[i];
        }
    }
    return t;
}

static double get(const tb_tensor *t, int64_t i) {
    return t->dtype == TB_F32 ? ((const float *)tb_tensor_data(t))[i] : ((const double *)tb_tensor_data(t))[i];
}

static double rounded(tb_dtype dtype, double x) { return dtype == TB_F32 ? (double)(float)x : x; }

/* The kernel uses a state value unrounded within the step where this reference rounds it first, and
 * parameters are O(1): a few float32 (or float64) roundings of O(1) values apart. */
static int close_to(double got, double want, tb_dtype dtype) {
    double tol = dtype == TB_F32 ? 1e-6 : 1e-13;
    return fabs(got - want) <= tol * (1 + fabs(want));
}

/* One element of each kind, evaluated the plain way (state in s[], updated in place). */
static double reference_element(tb_optim_kind kind, const tb_optim_options *o, double step, bool fresh, double p,
                                double g, double s[3], tb_dtype dtype) {
    if (o->maximize)
        g = -g;
    if (kind == TB_OPTIM_ADAM && o->decoupled_weight_decay)
        p = p * (1 - o->lr * o->weight_decay);
    else if (o->weight_decay != 0)
        g = g + o->weight_decay * p;
    switch (kind) {
    case TB_OPTIM_SGD:
        if (o->momentum != 0) {
            s[0] = rounded(dtype, fresh ? g : o->momentum * s[0] + (1 - o->dampening) * g);
            g = o->nesterov ? g + o->momentum * s[0] : s[0];
        }
        return p - o->lr * g;
    case TB_OPTIM_ADAM: {
        s[0] = rounded(dtype, s[0] + (1 - o->beta1) * (g - s[0]));
        s[1] = rounded(dtype, o->beta2 * s[1] + (1 - o->beta2) * g * g);
        double second = s[1];
        if (o->amsgrad)
            second = s[2] = fmax(s[2], s[1]);
        double denom = sqrt(second) / sqrt(1 - pow(o->beta2, step)) + o->eps;
        return p - o->lr / (1 - pow(o->beta1, step)) * s[0] / denom;
    }
    case TB_OPTIM_RMSPROP: {
        s[0] = rounded(dtype, o->alpha * s[0] + (1 - o->alpha) * g * g);
        double avg = s[0];
        if (o->centered) {
            s[2] = rounded(dtype, s[2] + (1 - o->alpha) * (g - s[2]));
            avg -= s[2] * s[2];
        }
        avg = sqrt(avg) + o->eps;
        if (o->momentum > 0) {
            s[1] = rounded(dtype, o->momentum * s[1] + g / avg);
            return p - o->lr * s[1];
        }
        return p - o->lr * g / avg;
    }
    case TB_OPTIM_ADAGRAD:
        s[0] = rounded(dtype, s[0] + g * g);
        return p - o->lr / (1 + (step - 1) * o->lr_decay) * g / (sqrt(s[0]) + o->eps);
    default: return NAN;
    }
}

static void check_kind(tb_optim_kind kind, const tb_optim_options *o, tb_dtype dtype, const char *label) {
    tb_tensor param = make(dtype, N, 11, -1, 1), grad = make(dtype, N, 12, -1, 1), step = {0};
    tb_tensor state[3] = {make(dtype, N, 0, 0, 0), make(dtype, N, 0, 0, 0), make(dtype, N, 0, 0, 0)};
    TB_CHECK(tb_tensor_empty(TB_F32, 0, NULL, TB_ALLOC_ZERO, &step) == TB_OK);
    double p_ref[N], s_ref[N][3];
    for (int64_t i = 0; i < N; i++) {
        p_ref[i] = get(&param, i);
        s_ref[i][0] = s_ref[i][1] = s_ref[i][2] = 0;
    }
    tb_optim_slot slot = {&param, &grad, {&state[0], &state[1], &state[2]}, kind == TB_OPTIM_SGD ? NULL : &step,
                          true};
    uint64_t version = param.storage->version;
    int bad = 0;
    for (int round = 1; round <= 3; round++) {
        TB_CHECK(tb_optim_step(kind, o, &slot, 1) == TB_OK);
        for (int64_t i = 0; i < N; i++) {
            p_ref[i] = rounded(dtype, reference_element(kind, o, round, round == 1, p_ref[i], get(&grad, i), s_ref[i],
                                                        dtype));
            if (!close_to(get(&param, i), p_ref[i], dtype) && bad++ < 3)
                TB_CHECK_MSG(0, "%s %s step %d element %lld: %.17g, expected %.17g", label, tb_dtype_name(dtype),
                             round, (long long)i, get(&param, i), p_ref[i]);
        }
        slot.fresh = false;
    }
    TB_CHECK_MSG(bad == 0, "%s %s: %d elements differ", label, tb_dtype_name(dtype), bad);
    TB_CHECK(param.storage->version == version + 3);
    if (kind != TB_OPTIM_SGD)
        TB_CHECK(*(float *)tb_tensor_data(&step) == 3.0f);
    tb_tensor_release(&param);
    tb_tensor_release(&grad);
    tb_tensor_release(&step);
    for (int k = 0; k < 3; k++)
        tb_tensor_release(&state[k]);
}

static void test_kinds(void) {
    static const tb_dtype dtypes[2] = {TB_F32, TB_F64};
    for (int d = 0; d < 2; d++) {
        tb_dtype dt = dtypes[d];
        check_kind(TB_OPTIM_SGD, &(tb_optim_options){.lr = 0.1}, dt, "sgd");
        check_kind(TB_OPTIM_SGD, &(tb_optim_options){.lr = 0.1, .momentum = 0.9, .dampening = 0.2, .weight_decay = 0.1},
                   dt, "sgd momentum");
        check_kind(TB_OPTIM_SGD, &(tb_optim_options){.lr = 0.1, .momentum = 0.9, .nesterov = true, .maximize = true},
                   dt, "sgd nesterov");
        check_kind(TB_OPTIM_ADAM, &(tb_optim_options){.lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8}, dt,
                   "adam");
        check_kind(TB_OPTIM_ADAM,
                   &(tb_optim_options){.lr = 0.01, .beta1 = 0.3, .beta2 = 0.9, .eps = 1e-6, .weight_decay = 0.1,
                                       .amsgrad = true, .maximize = true},
                   dt, "adam amsgrad");
        check_kind(TB_OPTIM_ADAM,
                   &(tb_optim_options){.lr = 0.01, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.3,
                                       .decoupled_weight_decay = true},
                   dt, "adamw");
        check_kind(TB_OPTIM_RMSPROP, &(tb_optim_options){.lr = 0.01, .alpha = 0.99, .eps = 1e-8}, dt, "rmsprop");
        check_kind(TB_OPTIM_RMSPROP,
                   &(tb_optim_options){.lr = 0.01, .alpha = 0.9, .eps = 1e-4, .momentum = 0.5, .centered = true,
                                       .weight_decay = 0.1},
                   dt, "rmsprop centered");
        check_kind(TB_OPTIM_ADAGRAD, &(tb_optim_options){.lr = 0.1, .lr_decay = 0.1, .eps = 1e-10}, dt, "adagrad");
    }
}

static void test_bad_slot_writes_nothing(void) {
    tb_tensor p0 = make(TB_F32, 8, 1, -1, 1), g0 = make(TB_F32, 8, 2, -1, 1), m0 = make(TB_F32, 8, 0, 0, 0);
    tb_tensor v0 = make(TB_F32, 8, 0, 0, 0), p1 = make(TB_F32, 8, 3, -1, 1), g1 = make(TB_F32, 9, 4, -1, 1);
    tb_tensor m1 = make(TB_F32, 8, 0, 0, 0), v1 = make(TB_F32, 8, 0, 0, 0), s0 = {0}, s1 = {0};
    TB_CHECK(tb_tensor_empty(TB_F32, 0, NULL, TB_ALLOC_ZERO, &s0) == TB_OK);
    TB_CHECK(tb_tensor_empty(TB_F32, 0, NULL, TB_ALLOC_ZERO, &s1) == TB_OK);
    float before[8];
    memcpy(before, tb_tensor_data(&p0), sizeof before);
    tb_optim_slot slots[2] = {{&p0, &g0, {&m0, &v0, NULL}, &s0, false}, {&p1, &g1, {&m1, &v1, NULL}, &s1, false}};
    tb_optim_options o = {.lr = 0.1, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8};
    TB_CHECK(tb_optim_step(TB_OPTIM_ADAM, &o, slots, 2) == TB_ERR_SHAPE);
    TB_CHECK(strstr(tb_error_message(), "grad of parameter 1") != NULL);
    TB_CHECK(memcmp(before, tb_tensor_data(&p0), sizeof before) == 0);
    TB_CHECK(*(float *)tb_tensor_data(&s0) == 0.0f && p0.storage->version == 0);
    slots[1].grad = &g0;
    slots[1].state[1] = NULL; /* exp_avg_sq missing */
    TB_CHECK(tb_optim_step(TB_OPTIM_ADAM, &o, slots, 2) == TB_ERR_INVALID_ARGUMENT);
    slots[1].state[1] = &v1;
    p1.storage->read_only = true;
    TB_CHECK(tb_optim_step(TB_OPTIM_ADAM, &o, slots, 2) == TB_ERR_READ_ONLY);
    p1.storage->read_only = false;
    tb_tensor ints = {0};
    int64_t shape[1] = {8};
    TB_CHECK(tb_tensor_empty(TB_I64, 1, shape, TB_ALLOC_ZERO, &ints) == TB_OK);
    slots[1].param = &ints;
    TB_CHECK(tb_optim_step(TB_OPTIM_ADAM, &o, slots, 2) == TB_ERR_DTYPE);
    TB_CHECK(tb_optim_step(TB_OPTIM_COUNT, &o, slots, 2) == TB_ERR_INVALID_ARGUMENT);
    TB_CHECK(memcmp(before, tb_tensor_data(&p0), sizeof before) == 0);
    TB_CHECK(tb_optim_step(TB_OPTIM_ADAM, &o, slots, 0) == TB_OK); /* an empty group is a no-op */
    tb_tensor *all[] = {&p0, &g0, &m0, &v0, &p1, &g1, &m1, &v1, &s0, &s1, &ints};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        tb_tensor_release(all[i]);
}

/* Slots of sizes off the chunk (one empty) that together cross the threading threshold, filled with
 * values from a formula; `state_fill` 0 leaves the state zero. */
enum { BIG_SLOTS = 4 };
static const int64_t BIG_SIZES[BIG_SLOTS] = {70001, 0, 5, 300 * 257};

static void fill_big(tb_tensor t[BIG_SLOTS][5], tb_tensor steps[BIG_SLOTS]) {
    for (int s = 0; s < BIG_SLOTS; s++) {
        for (int k = 0; k < 5; k++) { /* param, grad, 3 states */
            t[s][k] = make(TB_F32, BIG_SIZES[s], 0, 0, 0);
            float *d = tb_tensor_data(&t[s][k]);
            for (int64_t i = 0; i < BIG_SIZES[s]; i++)
                d[i] = k < 2 ? (float)sin((double)(i * (k + 2) + s)) : k == 3 ? 0.5f : 0.0f;
        }
        steps[s] = (tb_tensor){0};
        TB_CHECK(tb_tensor_empty(TB_F32, 0, NULL, TB_ALLOC_ZERO, &steps[s]) == TB_OK);
    }
}

static void run_big(tb_optim_kind kind, const tb_optim_options *o, int threads, tb_tensor t[BIG_SLOTS][5],
                    tb_tensor steps[BIG_SLOTS]) {
    tb_optim_slot slots[BIG_SLOTS];
    for (int s = 0; s < BIG_SLOTS; s++)
        slots[s] = (tb_optim_slot){&t[s][0], &t[s][1], {&t[s][2], &t[s][3], &t[s][4]}, &steps[s], false};
    TB_CHECK(tb_set_num_threads(threads) == TB_OK);
    for (int round = 0; round < 2; round++)
        TB_CHECK(tb_optim_step(kind, o, slots, BIG_SLOTS) == TB_OK);
}

/* The step split over threads writes the same bits as the step on one thread, and bumps each counter
 * and storage version once per step. */
static void test_threaded_split_changes_nothing(void) {
    int before = tb_num_threads();
    const tb_optim_kind kinds[3] = {TB_OPTIM_ADAM, TB_OPTIM_RMSPROP, TB_OPTIM_SGD};
    const tb_optim_options opts[3] = {
        {.lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .amsgrad = true},
        {.lr = 0.01, .alpha = 0.9, .eps = 1e-4, .momentum = 0.5, .centered = true},
        {.lr = 0.1, .momentum = 0.9, .nesterov = true},
    };
    for (int c = 0; c < 3; c++) {
        tb_tensor one[BIG_SLOTS][5], two[BIG_SLOTS][5], steps1[BIG_SLOTS], steps2[BIG_SLOTS];
        fill_big(one, steps1);
        fill_big(two, steps2);
        run_big(kinds[c], &opts[c], 1, one, steps1);
        run_big(kinds[c], &opts[c], 2, two, steps2);
        for (int s = 0; s < BIG_SLOTS; s++) {
            for (int k = 0; k < 5; k++)
                TB_CHECK_MSG(memcmp(tb_tensor_data(&one[s][k]), tb_tensor_data(&two[s][k]),
                                    sizeof(float) * (size_t)BIG_SIZES[s]) == 0,
                             "kind %d slot %d tensor %d differs between 1 and 2 threads", (int)kinds[c], s, k);
            TB_CHECK(*(float *)tb_tensor_data(&steps2[s]) == (kinds[c] == TB_OPTIM_SGD ? 0.0f : 2.0f));
            TB_CHECK(two[s][0].storage->version == 2);
            for (int k = 0; k < 5; k++) {
                tb_tensor_release(&one[s][k]);
                tb_tensor_release(&two[s][k]);
            }
            tb_tensor_release(&steps1[s]);
            tb_tensor_release(&steps2[s]);
        }
    }
    TB_CHECK(tb_set_num_threads(before) == TB_OK);
}

/* An allocation failure inside the step is reported and writes nothing. */
static void test_out_of_memory_writes_nothing(void) {
    tb_tensor p = make(TB_F32, 8, 1, -1, 1), g = make(TB_F32, 8, 2, -1, 1), m = make(TB_F32, 8, 0, 0, 0);
    tb_tensor v = make(TB_F32, 8, 0, 0, 0), step = {0};
    TB_CHECK(tb_tensor_empty(TB_F32, 0, NULL, TB_ALLOC_ZERO, &step) == TB_OK);
    float before[8];
    memcpy(before, tb_tensor_data(&p), sizeof before);
    tb_optim_slot slot = {&p, &g, {&m, &v, NULL}, &step, false};
    tb_optim_options o = {.lr = 0.1, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8};
    tb_alloc_fail_after(0);
    tb_status st = tb_optim_step(TB_OPTIM_ADAM, &o, &slot, 1);
    tb_alloc_fail_after(-1);
    TB_CHECK(st == TB_ERR_OUT_OF_MEMORY);
    TB_CHECK(memcmp(before, tb_tensor_data(&p), sizeof before) == 0 && p.storage->version == 0);
    TB_CHECK(*(float *)tb_tensor_data(&step) == 0.0f);
    tb_tensor *all[] = {&p, &g, &m, &v, &step};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        tb_tensor_release(all[i]);
}

/* float32 SGD rounds like PyTorch: every op in float32, each add(alpha=) one fma with alpha rounded to
 * float32. Here the formula is written with fmaf element by element; every ISA this CPU has (the AVX2
 * body and the scalar reference) must give exactly its bits, including the < 8-element tails. */
static void test_sgd_float32_bits(void) {
    static const tb_optim_options cases[4] = {
        {.lr = 0.01},
        {.lr = 0.1, .momentum = 0.9, .dampening = 0.3, .weight_decay = 0.01},
        {.lr = 0.05, .momentum = 0.9, .nesterov = true, .maximize = true, .weight_decay = 0.001},
        {.lr = 0.1, .weight_decay = 0.2, .maximize = true},
    };
    const tb_isa saved = tb_isa_active();
    for (int c = 0; c < 4; c++) {
        const tb_optim_options *o = &cases[c];
        for (int isa = 0; isa < TB_ISA_COUNT; isa++) {
            if (!tb_isa_supported((tb_isa)isa) || tb_isa_set((tb_isa)isa) != TB_OK)
                continue;
            tb_tensor p = make(TB_F32, N, 21, -1, 1), g = make(TB_F32, N, 22, -1, 1), buf = make(TB_F32, N, 0, 0, 0);
            float p_ref[N], buf_ref[N] = {0};
            memcpy(p_ref, tb_tensor_data(&p), sizeof p_ref);
            tb_optim_slot slot = {&p, &g, {&buf, NULL, NULL}, NULL, true};
            const float *gv = tb_tensor_data(&g);
            int bad = 0;
            for (int round = 0; round < 3; round++) {
                TB_CHECK(tb_optim_step(TB_OPTIM_SGD, o, &slot, 1) == TB_OK);
                for (int64_t i = 0; i < N; i++) {
                    float d = o->maximize ? -gv[i] : gv[i];
                    if (o->weight_decay != 0)
                        d = fmaf(p_ref[i], (float)o->weight_decay, d);
                    if (o->momentum != 0) {
                        const float kept = buf_ref[i] * (float)o->momentum;
                        buf_ref[i] = round == 0 ? d : fmaf(d, (float)(1 - o->dampening), kept);
                        d = o->nesterov ? fmaf(buf_ref[i], (float)o->momentum, d) : buf_ref[i];
                    }
                    p_ref[i] = fmaf(d, (float)-o->lr, p_ref[i]);
                    const float got = ((const float *)tb_tensor_data(&p))[i];
                    if (memcmp(&got, &p_ref[i], sizeof got) != 0 && bad++ < 3)
                        TB_CHECK_MSG(0, "sgd case %d isa %s step %d element %lld: %.9g, expected %.9g", c,
                                     tb_isa_name((tb_isa)isa), round, (long long)i, got, p_ref[i]);
                }
                slot.fresh = false;
            }
            if (o->momentum != 0)
                TB_CHECK(memcmp(buf_ref, tb_tensor_data(&buf), sizeof buf_ref) == 0);
            TB_CHECK_MSG(bad == 0, "sgd case %d isa %s: %d elements differ", c, tb_isa_name((tb_isa)isa), bad);
            tb_tensor_release(&p);
            tb_tensor_release(&g);
            tb_tensor_release(&buf);
        }
    }
    TB_CHECK(tb_isa_set(saved) == TB_OK);
}

int main(void) {
    test_kinds();
    test_sgd_float32_bits();
    test_bad_slot_writes_nothing();
    test_threaded_split_changes_nothing();
    test_out_of_memory_writes_nothing();
    return tb_test_finish("optim");
}
