/* The optimizer steps of turbo_torch.optim (see torchburn/eager_optim.h): each parameter is walked
 * in chunks that are widened to double, updated with PyTorch's single-tensor formula, and rounded
 * back to the tensor's dtype once per stored value; float32 SGD instead computes in float32 with
 * PyTorch's own roundings (sgd_f32_range). The step counters are bumped first, one per
 * parameter; then the (parameter, chunk) items of a large step are spread over the thread pool.
 * Every element is updated alone, so the split never changes a result. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "eager/eager_internal.h"
#include "eager/optim_sgd.h"
#include "torchburn/alloc.h"
#include "torchburn/cpu.h"
#include "torchburn/eager_optim.h"
#include "torchburn/thread_pool.h"

enum { CHUNK = 256 };

static const char *const KIND_NAMES[TB_OPTIM_COUNT] = {"SGD", "Adam", "RMSprop", "Adagrad"};

/* The state slots each kind reads for these options. */
static unsigned used_state_mask(tb_optim_kind kind, const tb_optim_options *o) {
    switch (kind) {
    case TB_OPTIM_SGD: return o->momentum != 0 ? 1u : 0u;
    case TB_OPTIM_ADAM: return 3u | (o->amsgrad ? 4u : 0u);
    case TB_OPTIM_RMSPROP: return 1u | (o->momentum > 0 ? 2u : 0u) | (o->centered ? 4u : 0u);
    case TB_OPTIM_ADAGRAD: return 1u;
    default: return 0;
    }
}

static tb_status check_like(const char *kind, int64_t index, const char *what, const tb_tensor *t,
                            const tb_tensor *param, bool written) {
    if (!t || !t->storage)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%s step: parameter %lld has no %s tensor", kind,
                            (long long)index, what);
    if (t->dtype != param->dtype)
        return tb_error_set(TB_ERR_DTYPE, "%s step: %s of parameter %lld has dtype %s, the parameter %s", kind, what,
                            (long long)index, tb_dtype_name(t->dtype), tb_dtype_name(param->dtype));
    if (t->ndim != param->ndim || memcmp(t->shape, param->shape, sizeof(int64_t) * (size_t)t->ndim) != 0)
        return tb_error_set(TB_ERR_SHAPE, "%s step: %s of parameter %lld does not have the parameter's shape", kind,
                            what, (long long)index);
    if (!tb_tensor_is_contiguous(t))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%s step: %s of parameter %lld is not contiguous", kind, what,
                            (long long)index);
    if (written && t->storage->read_only)
        return tb_error_set(TB_ERR_READ_ONLY, "%s step: %s of parameter %lld is read-only", kind, what,
                            (long long)index);
    return TB_OK;
}

static tb_status check_slot(tb_optim_kind kind, unsigned mask, const tb_optim_slot *s, int64_t index) {
    const char *name = KIND_NAMES[kind];
    const tb_tensor *p = s->param;
    if (!p || !p->storage)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%s step: parameter %lld is missing", name, (long long)index);
    if (p->dtype != TB_F32 && p->dtype != TB_F64)
        return tb_error_set(TB_ERR_DTYPE, "%s step: parameter %lld has dtype %s; float32 and float64 are supported",
                            name, (long long)index, tb_dtype_name(p->dtype));
    tb_status st = check_like(name, index, "parameter", p, p, true);
    if (st == TB_OK)
        st = check_like(name, index, "grad", s->grad, p, false);
    static const char *const state_names[TB_OPTIM_COUNT][TB_OPTIM_MAX_STATE] = {
        {"momentum_buffer", "", ""},
        {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"},
        {"square_avg", "momentum_buffer", "grad_avg"},
        {"sum", "", ""},
    };
    for (int k = 0; st == TB_OK && k < TB_OPTIM_MAX_STATE; k++)
        if (mask >> k & 1)
            st = check_like(name, index, state_names[kind][k], s->state[k], p, true);
    if (st != TB_OK || kind == TB_OPTIM_SGD)
        return st;
    const tb_tensor *step = s->step;
    if (!step || !step->storage || step->ndim != 0 || (step->dtype != TB_F32 && step->dtype != TB_F64))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%s step: 'step' of parameter %lld must be a 0-dim float tensor",
                            name, (long long)index);
    if (step->storage->read_only)
        return tb_error_set(TB_ERR_READ_ONLY, "%s step: 'step' of parameter %lld is read-only", name, (long long)index);
    return TB_OK;
}

static void load(const tb_tensor *t, int64_t start, int64_t n, double *out) {
    if (t->dtype == TB_F32) {
        const float *src = (const float *)tb_tensor_data(t) + start;
        for (int64_t i = 0; i < n; i++)
            out[i] = src[i];
    } else {
        memcpy(out, (const double *)tb_tensor_data(t) + start, sizeof(double) * (size_t)n);
    }
}

static void store(tb_tensor *t, int64_t start, int64_t n, const double *values) {
    if (t->dtype == TB_F32) {
        float *dst = (float *)tb_tensor_data(t) + start;
        for (int64_t i = 0; i < n; i++)
            dst[i] = (float)values[i];
    } else {
        memcpy((double *)tb_tensor_data(t) + start, values, sizeof(double) * (size_t)n);
    }
}

/* Increments the counter and returns its new value, as PyTorch reads it (rounded to its dtype). */
static double bump_step(tb_tensor *step) {
    double value;
    if (step->dtype == TB_F32) {
        float *p = tb_tensor_data(step);
        *p = (float)(*p + 1.0);
        value = *p;
    } else {
        double *p = tb_tensor_data(step);
        *p += 1.0;
        value = *p;
    }
    step->storage->version++;
    return value;
}

/* The gradient as the update reads it: negated under maximize, plus L2 weight decay (not for AdamW,
 * which decays the parameter itself). */
static void effective_grad(const tb_optim_options *o, bool coupled_decay, int64_t n, const double *restrict param,
                           double *restrict grad) {
    const double sign = o->maximize ? -1.0 : 1.0, decay = coupled_decay ? o->weight_decay : 0.0;
    if (decay == 0) { /* not g + 0 * p: an infinite parameter would make that NaN */
        for (int64_t i = 0; i < n; i++)
            grad[i] = sign * grad[i];
        return;
    }
    for (int64_t i = 0; i < n; i++)
        grad[i] = sign * grad[i] + decay * param[i];
}

/* The chunk of one parameter, widened to double. The kernels copy the options they read into locals
 * first: with -fno-strict-aliasing a double field of *o could alias the arrays, which would keep the
 * loops from vectorizing. */
typedef struct chunk {
    double p[CHUNK], g[CHUNK], s[TB_OPTIM_MAX_STATE][CHUNK];
} chunk;

static void sgd_chunk(const tb_optim_options *o, bool fresh, int64_t n, chunk *c) {
    effective_grad(o, true, n, c->p, c->g);
    const double lr = o->lr, momentum = o->momentum, keep = 1 - o->dampening;
    double *restrict p = c->p, *restrict g = c->g, *restrict buf = c->s[0];
    if (momentum == 0) {
        for (int64_t i = 0; i < n; i++)
            p[i] -= lr * g[i];
        return;
    }
    const bool nesterov = o->nesterov; /* nesterov: step along g + momentum * buf */
    for (int64_t i = 0; i < n; i++) {
        double b = fresh ? g[i] : momentum * buf[i] + keep * g[i];
        buf[i] = b;
        p[i] -= lr * (nesterov ? g[i] + momentum * b : b);
    }
}

static void adam_chunk(const tb_optim_options *o, double step, int64_t n, chunk *c) {
    const double lr = o->lr, beta1 = o->beta1, beta2 = o->beta2, eps = o->eps;
    double *restrict p = c->p, *restrict g = c->g, *restrict m = c->s[0], *restrict v = c->s[1];
    double *restrict vmax = c->s[2];
    if (o->decoupled_weight_decay) {
        const double factor = 1 - lr * o->weight_decay;
        for (int64_t i = 0; i < n; i++)
            p[i] *= factor;
    }
    effective_grad(o, !o->decoupled_weight_decay, n, p, g);
    const double step_size = lr / (1 - pow(beta1, step));
    const double inv_correction2_sqrt = 1 / sqrt(1 - pow(beta2, step)); /* x / c as x * (1 / c): double rounding only */
    const double weight = 1 - beta1;
    /* torch.lerp: start + w * (end - start) for w < 0.5, end - (end - start) * (1 - w) otherwise */
    for (int64_t i = 0; i < n; i++) {
        m[i] = weight < 0.5 ? m[i] + weight * (g[i] - m[i]) : g[i] - (g[i] - m[i]) * (1 - weight);
        v[i] = v[i] * beta2 + (1 - beta2) * g[i] * g[i];
    }
    const double *restrict second = v;
    if (o->amsgrad) {
        for (int64_t i = 0; i < n; i++)
            vmax[i] = v[i] > vmax[i] ? v[i] : vmax[i];
        second = vmax;
    }
    for (int64_t i = 0; i < n; i++)
        p[i] -= step_size * m[i] / (sqrt(second[i]) * inv_correction2_sqrt + eps);
}

static void rmsprop_chunk(const tb_optim_options *o, int64_t n, chunk *c) {
    effective_grad(o, true, n, c->p, c->g);
    const double lr = o->lr, alpha = o->alpha, eps = o->eps, momentum = o->momentum, weight = 1 - alpha;
    double *restrict p = c->p, *restrict g = c->g, *restrict square = c->s[0], *restrict buf = c->s[1];
    double *restrict grad_avg = c->s[2];
    double avg[CHUNK];
    for (int64_t i = 0; i < n; i++) {
        square[i] = alpha * square[i] + (1 - alpha) * g[i] * g[i];
        avg[i] = square[i];
    }
    if (o->centered)
        for (int64_t i = 0; i < n; i++) {
            double a = weight < 0.5 ? grad_avg[i] + weight * (g[i] - grad_avg[i])
                                    : g[i] - (g[i] - grad_avg[i]) * (1 - weight);
            grad_avg[i] = a;
            avg[i] -= a * a;
        }
    for (int64_t i = 0; i < n; i++)
        avg[i] = sqrt(avg[i]) + eps;
    if (momentum > 0) {
        for (int64_t i = 0; i < n; i++) {
            buf[i] = momentum * buf[i] + g[i] / avg[i];
            p[i] -= lr * buf[i];
        }
    } else {
        for (int64_t i = 0; i < n; i++)
            p[i] -= lr * g[i] / avg[i];
    }
}

static void adagrad_chunk(const tb_optim_options *o, double step, int64_t n, chunk *c) {
    effective_grad(o, true, n, c->p, c->g);
    const double clr = o->lr / (1 + (step - 1) * o->lr_decay), eps = o->eps;
    double *restrict p = c->p, *restrict g = c->g, *restrict sum = c->s[0];
    for (int64_t i = 0; i < n; i++) {
        sum[i] += g[i] * g[i];
        p[i] -= clr * g[i] / (sqrt(sum[i]) + eps);
    }
}

/* float32 SGD, computed in float32 as PyTorch's CPU SGD (single-tensor and foreach) does: each of its
 * tensor ops is one float32 rounding, and its `add(x, alpha=a)` is a fused multiply-add with a rounded
 * to float32 (ATen's vectorized fmadd):
 *   d = maximize ? -g : g;   d = fma(p, wd, d)                     (weight_decay != 0)
 *   buf = fresh ? d : fma(d, 1 - dampening, buf * momentum)         (momentum != 0)
 *   d = nesterov ? fma(buf, momentum, d) : buf;   p = fma(d, -lr, p)
 * so float32 trajectories are PyTorch's bit for bit (fmaf is exact; so is the AVX2 body's vfmadd,
 * src/eager/x86_avx2/optim_sgd_avx2.c). The scalar body, tb_sgd_f32_scalar, is in optim_sgd.h. */
static tb_sgd_f32 sgd_f32_constants(const tb_optim_options *o, bool fresh) {
    tb_sgd_f32 k = {(float)-o->lr, (float)o->weight_decay, (float)o->momentum, (float)(1 - o->dampening),
                    o->maximize, o->weight_decay != 0, o->momentum != 0, o->nesterov, fresh};
    return k;
}

/* float32 SGD on elements [begin, end) of one parameter in one pass (no double chunk). */
static void sgd_f32_range(const tb_optim_options *o, tb_optim_slot *s, int64_t begin, int64_t end) {
    const tb_sgd_f32 k = sgd_f32_constants(o, s->fresh);
    float *p = (float *)tb_tensor_data(s->param) + begin;
    const float *g = (const float *)tb_tensor_data(s->grad) + begin;
    float *buf = k.has_momentum ? (float *)tb_tensor_data(s->state[0]) + begin : NULL;
#ifdef TB_HAVE_X86
    tb_isa isa = tb_isa_active(); /* avx2 and avx512 both have AVX2 + FMA */
    if (isa == TB_ISA_AVX2 || isa == TB_ISA_AVX512) {
        tb_sgd_f32_avx2(&k, end - begin, p, g, buf);
        return;
    }
#endif
    tb_sgd_f32_scalar(&k, end - begin, p, g, buf);
}

/* One chunk of one parameter: load, update, store. */
static void run_chunk(tb_optim_kind kind, const tb_optim_options *o, unsigned mask, tb_optim_slot *s, double step,
                      int64_t start, chunk *c) {
    int64_t numel = tb_tensor_numel(s->param);
    int64_t n = numel - start < CHUNK ? numel - start : CHUNK;
    load(s->param, start, n, c->p);
    load(s->grad, start, n, c->g);
    for (int k = 0; k < TB_OPTIM_MAX_STATE; k++)
        if (mask >> k & 1 && !(kind == TB_OPTIM_SGD && s->fresh))
            load(s->state[k], start, n, c->s[k]);
    switch (kind) {
    case TB_OPTIM_SGD: sgd_chunk(o, s->fresh, n, c); break;
    case TB_OPTIM_ADAM: adam_chunk(o, step, n, c); break;
    case TB_OPTIM_RMSPROP: rmsprop_chunk(o, n, c); break;
    case TB_OPTIM_ADAGRAD: adagrad_chunk(o, step, n, c); break;
    default: break;
    }
    store(s->param, start, n, c->p);
    for (int k = 0; k < TB_OPTIM_MAX_STATE; k++)
        if (mask >> k & 1)
            store(s->state[k], start, n, c->s[k]);
}

/* The work of one step: chunk j of the whole step is chunk j - first[i] of slot i, where
 * first[i] <= j < first[i + 1]; steps[i] is slot i's bumped counter. */
typedef struct step_job {
    tb_optim_kind kind;
    const tb_optim_options *o;
    unsigned mask;
    tb_optim_slot *slots;
    const double *steps;
    const int64_t *first;
    int64_t count;
} step_job;

static void run_chunks(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    const step_job *job = context;
    int64_t lo = 0, hi = job->count - 1; /* the slot holding chunk `begin`: the last i with first[i] <= begin */
    while (lo < hi) {
        int64_t mid = lo + (hi - lo + 1) / 2;
        if (job->first[mid] <= begin)
            lo = mid;
        else
            hi = mid - 1;
    }
    chunk c; /* 5 x 2 KiB of scratch on this thread's stack */
    for (int64_t i = lo, j = begin; j < end; i++) {
        int64_t stop = end < job->first[i + 1] ? end : job->first[i + 1];
        tb_optim_slot *s = &job->slots[i];
        if (job->kind == TB_OPTIM_SGD && s->param->dtype == TB_F32) {
            int64_t numel = tb_tensor_numel(s->param), limit = (stop - job->first[i]) * CHUNK;
            sgd_f32_range(job->o, s, (j - job->first[i]) * CHUNK, limit < numel ? limit : numel);
            j = stop;
        }
        for (; j < stop; j++)
            run_chunk(job->kind, job->o, job->mask, s, job->steps[i], (j - job->first[i]) * CHUNK, &c);
    }
}

static int compare_addresses(const void *a, const void *b) {
    const uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

/* Whether two slots update the same memory (a parameter listed twice): those must run in slot order, one
 * after the other, as the serial loop does, never on two threads at once. `scratch` holds count words. */
static bool params_repeat(const tb_optim_slot *slots, int64_t count, uintptr_t *scratch) {
    for (int64_t i = 0; i < count; i++)
        scratch[i] = (uintptr_t)tb_tensor_data(slots[i].param);
    qsort(scratch, (size_t)count, sizeof *scratch, compare_addresses);
    for (int64_t i = 1; i < count; i++)
        if (scratch[i] == scratch[i - 1] && tb_tensor_numel(slots[i].param) > 0)
            return true;
    return false;
}

tb_status tb_optim_step(tb_optim_kind kind, const tb_optim_options *options, tb_optim_slot *slots, int64_t count) {
    if ((unsigned)kind >= TB_OPTIM_COUNT || !options || (count > 0 && !slots) || count < 0)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "optimizer step: bad arguments (kind %d, count %lld)", (int)kind,
                            (long long)count);
    unsigned mask = used_state_mask(kind, options);
    for (int64_t i = 0; i < count; i++) {
        tb_status st = check_slot(kind, mask, &slots[i], i);
        if (st != TB_OK)
            return st;
    }
    if (count == 0)
        return TB_OK;
    void *scratch = NULL;
    tb_status st = tb_alloc(sizeof(int64_t) * (size_t)(count + 1) + sizeof(double) * (size_t)count +
                                sizeof(uintptr_t) * (size_t)count, TB_ALLOC_DEFAULT, &scratch);
    if (st != TB_OK)
        return st; /* nothing written yet */
    int64_t *first = scratch;
    double *steps = (double *)(first + count + 1);
    first[0] = 0;
    for (int64_t i = 0; i < count; i++) { /* each counter once, before any chunk reads it */
        steps[i] = kind == TB_OPTIM_SGD ? 0 : bump_step(slots[i].step);
        first[i + 1] = first[i] + (tb_tensor_numel(slots[i].param) + CHUNK - 1) / CHUNK;
    }
    step_job job = {kind, options, mask, slots, steps, first, count};
    int64_t chunks = first[count];
    /* elementwise per parameter, so the split changes no result */
    if (chunks * CHUNK >= TB_EAGER_PARALLEL_MIN && tb_num_threads() > 1 &&
        !params_repeat(slots, count, (uintptr_t *)(steps + count)))
        tb_parallel_for(chunks, TB_EAGER_PARALLEL_MIN / 4 / CHUNK, run_chunks, &job);
    else if (chunks > 0)
        run_chunks(&job, 0, chunks, 0);
    for (int64_t i = 0; i < count; i++) {
        slots[i].param->storage->version++;
        for (int k = 0; k < TB_OPTIM_MAX_STATE; k++)
            if (mask >> k & 1)
                slots[i].state[k]->storage->version++;
    }
    tb_free(scratch);
    return TB_OK;
}
