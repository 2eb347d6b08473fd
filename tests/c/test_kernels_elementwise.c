/* Tests the elementwise / reduction / softmax / norm / rotary / conversion kernel tables: every SIMD
 * table the CPU supports against the scalar reference (odd sizes, special values, broadcast steps,
 * in-place calls, inputs that end at an unmapped page and outputs with sentinels), the SIMD vector
 * math against double-precision libm, and the reference itself against independent double formulas.
 *
 * Tolerances (SIMD vs reference, in ulps of the reference value):
 *   exact (bitwise, any NaN matches any NaN): neg abs sqrt rsqrt relu leaky_relu clamp, add sub mul div
 *     pow, compare, where, max/min reductions, argmax/argmin, conversions (maximum/minimum: by value,
 *     so a +0/-0 tie may pick either zero)
 *   exp 2, log 2, sin 3, cos 3, tanh 3, sigmoid 3, silu 4, gelu 3 + 1e-11 |x| absolute (its table of
 *     polynomials is relative-accurate while Phi(x) >= 1e-5, i.e. x > -4.26, absolute below),
 *   gelu_tanh 4 * (1 + condition number): its argument u is rounded in float and the negative tail
 *     amplifies that by |2u| (values there are below 1e-3 and far more accurate than PyTorch's own)
 *   results below FLT_MIN may differ by 1e-37 absolute (gradual underflow rounds twice)
 *   sum: 8 eps * sum|x|; logsumexp 8 eps * (|m| + |result|); var: 32 eps relative; mean: 4 ulps plus
 *   4 eps * mean|x|; softmax (4 + |x - max|) ulps (the exponent x - max is rounded in float);
 *   log_softmax 8 eps (|x - max| + L) + 2 eps L * (largest finite max - x), L the log-sum, plus 1e-15
 *   absolute (the log of a double sum near 1); layer_norm 8 eps (|normalized * w| + |b|) + 2 eps |w|;
 *   rms_norm 4 ulps; rope 4 eps (|a cos| + |b sin| + |b cos| + |a sin|).
 * Sums whose float partial sums would overflow (values near FLT_MAX) are out of scope: PyTorch
 * overflows there too. */
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kernels/elementwise.h"
#include "tb_test.h"
#include "torchburn/cpu.h"
#include "torchburn/dtype.h"

static const int64_t SIZES[] = {0, 1, 3, 7, 15, 16, 17, 31, 33, 127, 129, 1023, 4099};
enum { NUM_SIZES = sizeof SIZES / sizeof SIZES[0], MAX_SIZE = 4099 };

/* ------------------------------------------------------------------------------------------------
 * buffers: inputs end flush against a PROT_NONE page (any read past n faults); outputs carry 64
 * sentinel bytes on both sides. */

typedef struct fenced {
    void *map;
    size_t map_bytes;
    void *data;
} fenced;

static fenced fenced_alloc(size_t bytes) {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t body = (bytes + page - 1) / page * page;
    fenced f = {NULL, body + page, NULL};
    f.map = mmap(NULL, f.map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (f.map == MAP_FAILED) {
        fprintf(stderr, "mmap failed\n");
        exit(2);
    }
    mprotect((char *)f.map + body, page, PROT_NONE);
    f.data = (char *)f.map + body - bytes;
    return f;
}

static void fenced_free(fenced *f) { munmap(f->map, f->map_bytes); }

enum { GUARD = 64, SENTINEL = 0xA5 };

static void *guarded_alloc(size_t bytes) {
    unsigned char *raw = malloc(bytes + 2 * GUARD);
    if (!raw) {
        fprintf(stderr, "malloc failed\n");
        exit(2);
    }
    memset(raw, SENTINEL, bytes + 2 * GUARD);
    return raw + GUARD;
}

static bool guarded_ok(const void *p, size_t bytes) {
    const unsigned char *raw = (const unsigned char *)p - GUARD;
    for (size_t i = 0; i < GUARD; i++)
        if (raw[i] != SENTINEL || raw[GUARD + bytes + i] != SENTINEL)
            return false;
    return true;
}

static void guarded_free(void *p) { free((unsigned char *)p - GUARD); }

/* ------------------------------------------------------------------------------------------------
 * values */

static uint64_t rng_state = 0x243F6A8885A308D3ull;
static uint64_t rng_next(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}
static float rng_uniform(float lo, float hi) {
    return (float)(lo + ((double)hi - lo) * ((rng_next() >> 40) * (1.0 / 16777216.0)));
}
/* any finite float magnitude (including subnormals) with a random sign */
static float rng_wide(void) {
    uint32_t bits = (uint32_t)rng_next();
    bits = (bits & 0x807fffffu) | ((uint32_t)(rng_next() % 255) << 23);
    return tb_f32_from_bits(bits);
}

static const float SPECIALS[] = {
    NAN, -NAN, INFINITY, -INFINITY, 0.0f, -0.0f, FLT_MAX, -FLT_MAX, 1e30f, -1e30f, FLT_MIN, -FLT_MIN,
    1e-40f, -1e-40f, 1.4e-45f, -1.4e-45f, 88.72f, -88.72f, 89.5f, -103.9f, -110.0f, 0.5f, -0.5f, 1.0f, -1.0f,
    2.0f, 9.5f, -9.5f, 131072.5f, -3e5f, 1e7f, 3.0e12f, -7.1e12f, 0.625f, -0.625f, 1e-20f, 14.1421f, -14.1421f,
};
enum { NUM_SPECIALS = sizeof SPECIALS / sizeof SPECIALS[0] };

enum { CASE_SMALL, CASE_MEDIUM, CASE_LARGE, CASE_WIDE, CASE_SPECIAL, CASE_POSITIVE, NUM_CASES };
static const char *const CASE_NAMES[NUM_CASES] = {"[-10,10]", "[-100,100]", "[-1e4,1e4]", "wide", "special", "[0,100]"};

static void fill_case(float *x, int64_t n, int which) {
    for (int64_t i = 0; i < n; i++) {
        switch (which) {
        case CASE_SMALL: x[i] = rng_uniform(-10, 10); break;
        case CASE_MEDIUM: x[i] = rng_uniform(-100, 100); break;
        case CASE_LARGE: x[i] = rng_uniform(-1e4f, 1e4f); break;
        case CASE_WIDE: x[i] = rng_wide(); break;
        case CASE_SPECIAL: x[i] = (i % 3 == 1) ? SPECIALS[(i / 3) % NUM_SPECIALS] : rng_uniform(-3, 3); break;
        default: x[i] = rng_uniform(0, 100); break;
        }
    }
}

static double ulp_of(double v) {
    v = fabs(v);
    if (v < FLT_MIN)
        return ldexp(1.0, -149);
    int e;
    frexp(v, &e);
    return ldexp(1.0, e - 24);
}

static bool same_bits_or_nan(float a, float b) {
    return (isnan(a) && isnan(b)) || tb_f32_to_bits(a) == tb_f32_to_bits(b);
}

/* |got - want| <= tol (absolute), infinities and NaN exact */
static bool within(float got, float want, double tol) {
    if (isnan(want) || isnan(got))
        return isnan(want) && isnan(got);
    if (isinf(want) || isinf(got))
        return got == want;
    return fabs((double)got - (double)want) <= tol;
}

/* ------------------------------------------------------------------------------------------------
 * unary */

static double unary_tolerance_ulps(int op, float x) {
    switch (op) {
    case TB_UNARY_EXP:
    case TB_UNARY_LOG: return 2;
    case TB_UNARY_SIN:
    case TB_UNARY_COS:
    case TB_UNARY_TANH:
    case TB_UNARY_SIGMOID: return 3;
    case TB_UNARY_SILU: return 4;
    case TB_UNARY_GELU: return 3;
    case TB_UNARY_GELU_TANH: {
        const double k = sqrt(2.0 / M_PI), xd = x;
        const double u2 = 2 * k * (xd + 0.044715 * xd * xd * xd);
        const double sig = 1.0 / (1.0 + exp(-u2));
        const double cond = fabs(1.0 + xd * (1.0 - sig) * 2 * k * (1 + 3 * 0.044715 * xd * xd));
        return 4 * (1 + (isfinite(cond) ? cond : 0));
    }
    default: return 0; /* exact */
    }
}

static void test_unary(const tb_elementwise_kernels *simd, const tb_elementwise_kernels *ref) {
    const tb_unary_params params = {.alpha = 0.01f, .lo = -1.5f, .hi = 2.25f};
    for (int op = 0; op < TB_UNARY_COUNT; op++) {
        int failures = 0;
        for (int s = 0; s < NUM_SIZES; s++) {
            const int64_t n = SIZES[s];
            for (int which = 0; which < NUM_CASES; which++) {
                fenced in = fenced_alloc((size_t)n * sizeof(float));
                float *x = in.data, *want = malloc((size_t)(n + 1) * sizeof(float));
                float *got = guarded_alloc((size_t)n * sizeof(float));
                float *inplace = guarded_alloc((size_t)n * sizeof(float));
                fill_case(x, n, which);
                ref->unary[op](x, want, n, &params);
                simd->unary[op](x, got, n, &params);
                memcpy(inplace, x, (size_t)n * sizeof(float));
                simd->unary[op](inplace, inplace, n, &params);
                int bad = 0;
                for (int64_t i = 0; i < n; i++) {
                    const double ulps = unary_tolerance_ulps(op, x[i]);
                    bool ok;
                    if (ulps == 0)
                        ok = same_bits_or_nan(got[i], want[i]) && same_bits_or_nan(inplace[i], want[i]);
                    else {
                        const double tol = ulps * ulp_of(want[i]) + 1e-37 + (op == TB_UNARY_GELU ? 1e-11 * fabs(x[i]) : 0);
                        ok = within(got[i], want[i], tol) && within(inplace[i], want[i], tol);
                    }
                    if (!ok && bad++ < 3 && failures < 10)
                        fprintf(stderr, "  %s %s n=%lld %s: x=%.9g got %.9g (in place %.9g) want %.9g\n", simd->isa_name,
                                tb_unary_op_names[op], (long long)n, CASE_NAMES[which], x[i], got[i], inplace[i], want[i]);
                }
                failures += bad;
                TB_CHECK_MSG(bad == 0, "%s unary %s n=%lld %s: %d mismatches", simd->isa_name, tb_unary_op_names[op],
                             (long long)n, CASE_NAMES[which], bad);
                TB_CHECK_MSG(guarded_ok(got, (size_t)n * 4) && guarded_ok(inplace, (size_t)n * 4),
                             "%s unary %s n=%lld wrote outside its output", simd->isa_name, tb_unary_op_names[op], (long long)n);
                fenced_free(&in);
                free(want);
                guarded_free(got);
                guarded_free(inplace);
            }
        }
    }
    /* clamp with NaN bounds (all NaN, like PyTorch) and with lo > hi (hi wins) */
    float x[37], got[37], want[37];
    fill_case(x, 37, CASE_SPECIAL);
    const tb_unary_params odd[] = {{0, NAN, 1.0f}, {0, -1.0f, NAN}, {0, 3.0f, -2.0f}, {0, -INFINITY, INFINITY}};
    for (size_t k = 0; k < sizeof odd / sizeof odd[0]; k++) {
        ref->unary[TB_UNARY_CLAMP](x, want, 37, &odd[k]);
        simd->unary[TB_UNARY_CLAMP](x, got, 37, &odd[k]);
        bool ok = true;
        for (int i = 0; i < 37; i++)
            ok = ok && same_bits_or_nan(got[i], want[i]);
        TB_CHECK_MSG(ok, "%s clamp with bounds (%g, %g)", simd->isa_name, odd[k].lo, odd[k].hi);
    }
}

/* ------------------------------------------------------------------------------------------------
 * binary, compare, where */

static void fill_binary(float *a, float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        a[i] = (i % 5 == 2) ? SPECIALS[(uint64_t)rng_next() % NUM_SPECIALS] : rng_uniform(-8, 8);
        b[i] = (i % 7 == 3) ? SPECIALS[(uint64_t)rng_next() % NUM_SPECIALS] : rng_uniform(-8, 8);
        if (i % 11 == 4)
            b[i] = a[i]; /* ties for compare/maximum */
        if (i % 13 == 6)
            b[i] = rng_uniform(0, 1) < 0.5f ? 2.0f : 0.5f;
    }
}

static void test_binary(const tb_elementwise_kernels *simd, const tb_elementwise_kernels *ref) {
    for (int op = 0; op < TB_BINARY_COUNT; op++) {
        for (int s = 0; s < NUM_SIZES; s++) {
            const int64_t n = SIZES[s];
            for (int steps = 0; steps < 4; steps++) {
                const int64_t as = steps & 1 ? 0 : 1, bs = steps & 2 ? 0 : 1;
                const int64_t na = as ? n : 1, nb = bs ? n : 1;
                fenced fa = fenced_alloc((size_t)na * 4), fb = fenced_alloc((size_t)nb * 4);
                float *a = fa.data, *b = fb.data;
                float *abuf = malloc((size_t)(n + 1) * 4), *bbuf = malloc((size_t)(n + 1) * 4);
                fill_binary(abuf, bbuf, n > 0 ? n : 1);
                if (op == TB_BINARY_POW && steps == 2 && n % 2) /* scalar exponent 2: the a*a path */
                    bbuf[0] = 2.0f;
                memcpy(a, abuf, (size_t)na * 4);
                memcpy(b, bbuf, (size_t)nb * 4);
                float *want = malloc((size_t)(n + 1) * 4), *got = guarded_alloc((size_t)n * 4);
                ref->binary[op](a, as, b, bs, want, n);
                simd->binary[op](a, as, b, bs, got, n);
                int bad = 0;
                for (int64_t i = 0; i < n; i++) {
                    bool ok = (op == TB_BINARY_MAXIMUM || op == TB_BINARY_MINIMUM)
                                  ? ((isnan(got[i]) && isnan(want[i])) || got[i] == want[i])
                                  : same_bits_or_nan(got[i], want[i]);
                    if (!ok && bad++ < 3)
                        fprintf(stderr, "  %s %s n=%lld steps %lld/%lld: %.9g, %.9g -> %.9g want %.9g\n", simd->isa_name,
                                tb_binary_op_names[op], (long long)n, (long long)as, (long long)bs, a[i * as], b[i * bs],
                                got[i], want[i]);
                }
                TB_CHECK_MSG(bad == 0 && guarded_ok(got, (size_t)n * 4), "%s binary %s n=%lld steps %lld/%lld",
                             simd->isa_name, tb_binary_op_names[op], (long long)n, (long long)as, (long long)bs);
                /* in place over an operand with step 1 */
                if (as == 1 || bs == 1) {
                    float *io = guarded_alloc((size_t)n * 4);
                    memcpy(io, as == 1 ? a : b, (size_t)n * 4);
                    if (as == 1)
                        simd->binary[op](io, 1, b, bs, io, n);
                    else
                        simd->binary[op](a, as, io, 1, io, n);
                    bool ok = guarded_ok(io, (size_t)n * 4);
                    for (int64_t i = 0; i < n; i++)
                        ok = ok && ((isnan(io[i]) && isnan(want[i])) || io[i] == want[i]);
                    TB_CHECK_MSG(ok, "%s binary %s in place n=%lld", simd->isa_name, tb_binary_op_names[op], (long long)n);
                    guarded_free(io);
                }
                /* compare (same operands) */
                if (op < TB_COMPARE_COUNT) {
                    uint8_t *cw = malloc((size_t)n + 1), *cg = guarded_alloc((size_t)n);
                    ref->compare[op](a, as, b, bs, cw, n);
                    simd->compare[op](a, as, b, bs, cg, n);
                    TB_CHECK_MSG(memcmp(cw, cg, (size_t)n) == 0 && guarded_ok(cg, (size_t)n), "%s compare %s n=%lld steps %lld/%lld",
                                 simd->isa_name, tb_compare_op_names[op], (long long)n, (long long)as, (long long)bs);
                    free(cw);
                    guarded_free(cg);
                }
                /* where with this step combination for a/b and both cond steps */
                if (op == 0) {
                    for (int cs = 0; cs < 2; cs++) {
                        const int64_t nc = cs ? n : 1;
                        fenced fc = fenced_alloc((size_t)nc);
                        uint8_t *cond = fc.data;
                        for (int64_t i = 0; i < nc; i++)
                            cond[i] = (uint8_t)(rng_next() % 3); /* 0, 1 and a non-canonical 2 */
                        float *ww = malloc((size_t)(n + 1) * 4), *wg = guarded_alloc((size_t)n * 4);
                        ref->where(cond, cs, a, as, b, bs, ww, n);
                        simd->where(cond, cs, a, as, b, bs, wg, n);
                        bool ok = guarded_ok(wg, (size_t)n * 4);
                        for (int64_t i = 0; i < n; i++)
                            ok = ok && same_bits_or_nan(wg[i], ww[i]);
                        TB_CHECK_MSG(ok, "%s where n=%lld steps %d/%lld/%lld", simd->isa_name, (long long)n, cs,
                                     (long long)as, (long long)bs);
                        free(ww);
                        guarded_free(wg);
                        fenced_free(&fc);
                    }
                }
                free(abuf);
                free(bbuf);
                free(want);
                guarded_free(got);
                fenced_free(&fa);
                fenced_free(&fb);
            }
        }
    }
}

/* ------------------------------------------------------------------------------------------------
 * reductions and softmax over [outer, len, inner] */

enum { RED_RANDOM, RED_POSITIVE, RED_SPECIAL, RED_TIES, RED_LARGE_MEAN, RED_MASKED, NUM_RED_CASES };
static const char *const RED_NAMES[NUM_RED_CASES] = {"random", "positive", "special", "ties", "large-mean", "masked"};

static void fill_reduce(float *x, int64_t n, int which) {
    for (int64_t i = 0; i < n; i++) {
        switch (which) {
        case RED_RANDOM: x[i] = rng_uniform(-4, 4); break;
        case RED_POSITIVE: x[i] = rng_uniform(0, 1); break;
        case RED_SPECIAL: /* NaN, +-inf, +-0 and +-1e18 (values whose float partial sums overflow are out of
                             scope: PyTorch overflows there too) */
            x[i] = rng_uniform(-30, 30);
            if (rng_next() % 97 == 0)
                x[i] = SPECIALS[rng_next() % 6];
            if (rng_next() % 211 == 0)
                x[i] = rng_next() % 2 ? 1e18f : -1e18f;
            break;
        case RED_TIES: /* -1, +-0, 1, 2: many ties, and zeros of both signs */
            x[i] = (float)((int)(rng_next() % 4) - 1);
            if (x[i] == 0.0f && rng_next() % 2)
                x[i] = -0.0f;
            break;
        case RED_LARGE_MEAN: x[i] = 1000.0f + rng_uniform(-0.01f, 0.01f); break;
        default: x[i] = rng_next() % 4 == 0 ? -INFINITY : rng_uniform(-100, 100); break; /* attention masks */
        }
    }
}

/* |x| summed per output, for the sum tolerance */
static double column_abs_sum(const float *x, int64_t o, int64_t i, int64_t len, int64_t inner) {
    double s = 0;
    for (int64_t r = 0; r < len; r++)
        s += fabs(x[(o * len + r) * inner + i]);
    return s;
}

static void check_reduce_shape(const tb_elementwise_kernels *simd, const tb_elementwise_kernels *ref, int64_t outer,
                               int64_t len, int64_t inner, int which) {
    const int64_t n = outer * len * inner, m = outer * inner;
    fenced in = fenced_alloc((size_t)n * 4);
    float *x = in.data;
    fill_reduce(x, n, which);
    /* all -inf and all-NaN-free columns are interesting for logsumexp/softmax: make the first one -inf */
    if (which == RED_MASKED)
        for (int64_t r = 0; r < len; r++)
            x[r * inner] = -INFINITY;
    float *want = malloc((size_t)m * 4 + 4), *got = guarded_alloc((size_t)m * 4);
    float *col_max = malloc((size_t)m * 4 + 4);
    ref->reduce[TB_REDUCE_MAX](x, outer, len, inner, col_max);
    const char *isa = simd->isa_name;
    for (int op = 0; op < TB_REDUCE_COUNT; op++) {
        ref->reduce[op](x, outer, len, inner, want);
        simd->reduce[op](x, outer, len, inner, got);
        int bad = 0;
        for (int64_t o = 0; o < outer; o++)
            for (int64_t i = 0; i < inner; i++) {
                const int64_t k = o * inner + i;
                bool ok;
                if (op == TB_REDUCE_MAX || op == TB_REDUCE_MIN)
                    ok = (isnan(got[k]) && isnan(want[k])) || got[k] == want[k];
                else if (op == TB_REDUCE_SUM)
                    ok = within(got[k], want[k], 8 * FLT_EPSILON * column_abs_sum(x, o, i, len, inner) + 1e-37);
                else
                    ok = within(got[k], want[k], 8 * FLT_EPSILON * (fabs(col_max[k]) + fabs(want[k])) + 1e-37);
                if (!ok && bad++ < 3)
                    fprintf(stderr, "  %s %s [%lld,%lld,%lld] %s at %lld: got %.9g want %.9g\n", isa, tb_reduce_op_names[op],
                            (long long)outer, (long long)len, (long long)inner, RED_NAMES[which], (long long)k, got[k], want[k]);
            }
        TB_CHECK_MSG(bad == 0 && guarded_ok(got, (size_t)m * 4), "%s reduce %s [%lld,%lld,%lld] %s", isa,
                     tb_reduce_op_names[op], (long long)outer, (long long)len, (long long)inner, RED_NAMES[which]);
    }
    /* argmax / argmin: exact indices */
    int64_t *iw = malloc((size_t)m * 8 + 8), *ig = guarded_alloc((size_t)m * 8);
    for (int k = 0; k < 2; k++) {
        (k ? ref->argmin : ref->argmax)(x, outer, len, inner, iw);
        (k ? simd->argmin : simd->argmax)(x, outer, len, inner, ig);
        TB_CHECK_MSG(memcmp(iw, ig, (size_t)m * 8) == 0 && guarded_ok(ig, (size_t)m * 8), "%s %s [%lld,%lld,%lld] %s", isa,
                     k ? "argmin" : "argmax", (long long)outer, (long long)len, (long long)inner, RED_NAMES[which]);
    }
    free(iw);
    guarded_free(ig);
    /* var / mean with corrections 0, 1 and len (the last gives NaN) */
    const int64_t corrections[] = {0, 1, len};
    for (int c = 0; c < 3; c++) {
        float *mw = malloc((size_t)m * 4 + 4), *mg = guarded_alloc((size_t)m * 4), *vg = guarded_alloc((size_t)m * 4);
        ref->var(x, outer, len, inner, corrections[c], mw, want);
        simd->var(x, outer, len, inner, corrections[c], mg, vg);
        simd->var(x, outer, len, inner, corrections[c], NULL, got); /* mean_out may be NULL */
        bool ok = guarded_ok(mg, (size_t)m * 4) && guarded_ok(vg, (size_t)m * 4);
        for (int64_t k = 0; k < m; k++) {
            /* the mean is accurate to a few eps of the mean magnitude, not of the (maybe tiny) mean */
            const double scale = column_abs_sum(x, k / inner, k % inner, len, inner) / (double)len;
            bool this_ok = within(vg[k], want[k], 32 * FLT_EPSILON * fabs(want[k]) + 1e-30) && same_bits_or_nan(vg[k], got[k]) &&
                           within(mg[k], mw[k], 4 * ulp_of(mw[k]) + 4 * FLT_EPSILON * (isfinite(scale) ? scale : 0));
            if (!this_ok && ok)
                fprintf(stderr, "  %s var at %lld: var %.9g (without mean %.9g) want %.9g, mean %.9g want %.9g\n", isa,
                        (long long)k, vg[k], got[k], want[k], mg[k], mw[k]);
            ok = ok && this_ok;
        }
        TB_CHECK_MSG(ok, "%s var correction %lld [%lld,%lld,%lld] %s", isa, (long long)corrections[c], (long long)outer,
                     (long long)len, (long long)inner, RED_NAMES[which]);
        free(mw);
        guarded_free(mg);
        guarded_free(vg);
    }
    free(want);
    guarded_free(got);

    /* softmax and log_softmax, out of place and in place */
    float *sw = malloc((size_t)n * 4 + 4), *sg = guarded_alloc((size_t)n * 4), *si = guarded_alloc((size_t)n * 4);
    /* the largest finite distance below the max per column: the exponent x - max is rounded in float, so
     * log-sum-exp carries a relative error up to eps times it */
    double *col_spread = calloc((size_t)m + 1, sizeof(double));
    for (int64_t k = 0; k < n; k++) {
        const int64_t c = k / (len * inner) * inner + k % inner;
        const double d = (double)col_max[c] - x[k];
        if (isfinite(d) && d > col_spread[c])
            col_spread[c] = d;
    }
    for (int log = 0; log < 2; log++) {
        ref->softmax(x, sw, outer, len, inner, log);
        simd->softmax(x, sg, outer, len, inner, log);
        memcpy(si, x, (size_t)n * 4);
        simd->softmax(si, si, outer, len, inner, log);
        int bad = 0;
        for (int64_t o = 0; o < outer; o++)
            for (int64_t r = 0; r < len; r++)
                for (int64_t i = 0; i < inner; i++) {
                    const int64_t k = (o * len + r) * inner + i;
                    const double d = fabs((double)x[k] - col_max[o * inner + i]);
                    double tol;
                    if (log) {
                        const double ls = fabs(fabs((double)sw[k]) - d); /* y = -d - ls */
                        /* log of a double sum near 1 is good to ~1e-16 absolute (reference and SIMD alike) */
                        tol = 8 * FLT_EPSILON * (d + ls) + 2 * FLT_EPSILON * ls * col_spread[o * inner + i] + 4 * DBL_EPSILON;
                    } else {
                        tol = (4 + (isfinite(d) ? d : 0)) * ulp_of(sw[k]) + 1e-37;
                    }
                    bool ok = within(sg[k], sw[k], tol) && within(si[k], sw[k], tol);
                    if (!ok && bad++ < 3)
                        fprintf(stderr, "  %s %s [%lld,%lld,%lld] %s at %lld: x=%.9g got %.9g (in place %.9g) want %.9g\n", isa,
                                log ? "log_softmax" : "softmax", (long long)outer, (long long)len, (long long)inner,
                                RED_NAMES[which], (long long)k, x[k], sg[k], si[k], sw[k]);
                }
        TB_CHECK_MSG(bad == 0 && guarded_ok(sg, (size_t)n * 4) && guarded_ok(si, (size_t)n * 4), "%s %s [%lld,%lld,%lld] %s",
                     isa, log ? "log_softmax" : "softmax", (long long)outer, (long long)len, (long long)inner, RED_NAMES[which]);
    }
    free(col_max);
    free(col_spread);
    free(sw);
    guarded_free(sg);
    guarded_free(si);
    fenced_free(&in);
}

static void test_reductions(const tb_elementwise_kernels *simd, const tb_elementwise_kernels *ref) {
    const int64_t inners[] = {1, 2, 5, 16, 17, 33};
    for (int s = 0; s < NUM_SIZES; s++) {
        const int64_t len = SIZES[s];
        if (len == 0)
            continue; /* the ops layer handles empty reductions */
        for (size_t k = 0; k < sizeof inners / sizeof inners[0]; k++) {
            const int64_t inner = inners[k];
            if (len * inner > 40000)
                continue;
            for (int which = 0; which < NUM_RED_CASES; which++)
                check_reduce_shape(simd, ref, len * inner > 5000 ? 1 : 3, len, inner, which);
        }
    }
    /* more columns than one stack chunk of the streaming column reductions (512 or 1024) */
    check_reduce_shape(simd, ref, 2, 19, 1100, RED_RANDOM);
    check_reduce_shape(simd, ref, 1, 3, 2100, RED_SPECIAL);
    check_reduce_shape(simd, ref, 1, 40, 1025, RED_TIES);
    /* long rows: the block cascade of sums and the online softmax (len >= 65536) */
    check_reduce_shape(simd, ref, 2, 65536 + 37, 1, RED_RANDOM);
    check_reduce_shape(simd, ref, 2, 65536 + 37, 1, RED_MASKED);
    check_reduce_shape(simd, ref, 1, 70001, 1, RED_SPECIAL);
    check_reduce_shape(simd, ref, 1, 70001, 1, RED_POSITIVE);
    check_reduce_shape(simd, ref, 1, 1 << 20, 1, RED_POSITIVE);

    /* a row of all -inf, a row with +inf, a row with NaN, at a length that takes the online path too */
    const int64_t lens[] = {37, 70000};
    for (int l = 0; l < 2; l++) {
        const int64_t len = lens[l];
        float *x = malloc((size_t)len * 3 * 4), *y = malloc((size_t)len * 3 * 4), *w = malloc((size_t)len * 3 * 4);
        for (int64_t i = 0; i < 3 * len; i++)
            x[i] = i < len ? -INFINITY : rng_uniform(-5, 5);
        x[len + len / 2] = INFINITY;
        x[2 * len + len / 3] = NAN;
        for (int log = 0; log < 2; log++) {
            ref->softmax(x, w, 3, len, 1, log);
            simd->softmax(x, y, 3, len, 1, log);
            bool ok = true;
            for (int64_t i = 0; i < 3 * len; i++)
                ok = ok && isnan(y[i]) && isnan(w[i]);
            TB_CHECK_MSG(ok, "%s %s of -inf / +inf / NaN rows (len %lld) is all NaN", simd->isa_name,
                         log ? "log_softmax" : "softmax", (long long)len);
        }
        float lw[3], lg[3];
        ref->reduce[TB_REDUCE_LOGSUMEXP](x, 3, len, 1, lw);
        simd->reduce[TB_REDUCE_LOGSUMEXP](x, 3, len, 1, lg);
        TB_CHECK_MSG(lg[0] == -INFINITY && lw[0] == -INFINITY && lg[1] == INFINITY && lw[1] == INFINITY && isnan(lg[2]) &&
                         isnan(lw[2]),
                     "%s logsumexp of -inf / +inf / NaN rows", simd->isa_name);
        free(x);
        free(y);
        free(w);
    }
}

/* ------------------------------------------------------------------------------------------------
 * layer_norm, rms_norm, rope */

static void test_norms(const tb_elementwise_kernels *simd, const tb_elementwise_kernels *ref) {
    const int64_t row_counts[] = {1, 3};
    for (int s = 1; s < NUM_SIZES; s++) {
        const int64_t len = SIZES[s];
        for (int rc = 0; rc < 2; rc++) {
            const int64_t rows = row_counts[rc], n = rows * len;
            for (int which = 0; which < 4; which++) { /* random, large mean, constant rows, NaN/inf */
                fenced fx = fenced_alloc((size_t)n * 4), fw = fenced_alloc((size_t)len * 4), fb = fenced_alloc((size_t)len * 4);
                float *x = fx.data, *w = fw.data, *b = fb.data;
                for (int64_t i = 0; i < n; i++)
                    x[i] = which == 1 ? 1000.0f + rng_uniform(-1, 1) : which == 2 ? 3.25f : rng_uniform(-3, 3);
                if (which == 3 && n > 2) {
                    x[n / 2] = NAN;
                    x[0] = INFINITY;
                }
                for (int64_t i = 0; i < len; i++) {
                    w[i] = rng_uniform(0.5f, 1.5f);
                    b[i] = rng_uniform(-1, 1);
                }
                float *want = malloc((size_t)n * 4 + 4), *got = guarded_alloc((size_t)n * 4);
                float mean_w[3], rstd_w[3], mean_g[3], rstd_g[3];
                for (int variant = 0; variant < 4; variant++) {
                    const float *wp = variant & 1 ? w : NULL, *bp = variant & 2 ? b : NULL;
                    ref->layer_norm(x, wp, bp, want, rows, len, 1e-5f, mean_w, rstd_w);
                    if (variant == 3) { /* in place, no stats */
                        memcpy(got, x, (size_t)n * 4);
                        simd->layer_norm(got, wp, bp, got, rows, len, 1e-5f, NULL, NULL);
                        memcpy(mean_g, mean_w, sizeof mean_g);
                        memcpy(rstd_g, rstd_w, sizeof rstd_g);
                    } else {
                        simd->layer_norm(x, wp, bp, got, rows, len, 1e-5f, mean_g, rstd_g);
                    }
                    bool ok = guarded_ok(got, (size_t)n * 4);
                    for (int64_t r = 0; r < rows; r++) {
                        ok = ok && within(rstd_g[r], rstd_w[r], 8 * ulp_of(rstd_w[r]));
                        ok = ok && within(mean_g[r], mean_w[r], 4 * ulp_of(mean_w[r]) + 4 * FLT_EPSILON / (rstd_w[r] > 0 ? rstd_w[r] : 1));
                        for (int64_t i = 0; i < len; i++) {
                            const int64_t k = r * len + i;
                            const double scale = wp ? w[i] : 1.0f;
                            const double normalized = ((double)x[k] - mean_w[r]) * rstd_w[r] * scale;
                            /* the mean is known to ~eps * std, i.e. ~eps in normalized units */
                            const double tol = 8 * FLT_EPSILON * (fabs(normalized) + (bp ? fabs(b[i]) : 0)) + 2 * FLT_EPSILON * scale;
                            if (!within(got[k], want[k], tol)) {
                                if (ok)
                                    fprintf(stderr, "  %s layer_norm [%lld,%lld] case %d variant %d at %lld: got %.9g want %.9g\n",
                                            simd->isa_name, (long long)rows, (long long)len, which, variant, (long long)k, got[k], want[k]);
                                ok = false;
                            }
                        }
                    }
                    TB_CHECK_MSG(ok, "%s layer_norm [%lld,%lld] case %d variant %d", simd->isa_name, (long long)rows,
                                 (long long)len, which, variant);
                    /* rms_norm: weight or not, in place or not */
                    ref->rms_norm(x, wp, want, rows, len, 1e-6f);
                    if (variant & 2) {
                        memcpy(got, x, (size_t)n * 4);
                        simd->rms_norm(got, wp, got, rows, len, 1e-6f);
                    } else {
                        simd->rms_norm(x, wp, got, rows, len, 1e-6f);
                    }
                    ok = guarded_ok(got, (size_t)n * 4);
                    for (int64_t k = 0; k < n; k++)
                        ok = ok && within(got[k], want[k], 4 * ulp_of(want[k]) + 1e-37);
                    TB_CHECK_MSG(ok, "%s rms_norm [%lld,%lld] case %d variant %d", simd->isa_name, (long long)rows,
                                 (long long)len, which, variant);
                }
                free(want);
                guarded_free(got);
                fenced_free(&fx);
                fenced_free(&fw);
                fenced_free(&fb);
            }
        }
    }
    /* rope over `half` pairs */
    for (int s = 0; s < NUM_SIZES; s++) {
        const int64_t half = SIZES[s];
        fenced fx = fenced_alloc((size_t)half * 8), fc = fenced_alloc((size_t)half * 4), fs = fenced_alloc((size_t)half * 4);
        float *x = fx.data, *c = fc.data, *sn = fs.data;
        for (int64_t i = 0; i < 2 * half; i++)
            x[i] = rng_uniform(-4, 4);
        for (int64_t i = 0; i < half; i++) {
            const float angle = rng_uniform(-100, 100);
            c[i] = cosf(angle);
            sn[i] = sinf(angle);
        }
        for (int interleaved = 0; interleaved < 2; interleaved++) {
            float *want = malloc((size_t)half * 8 + 4), *got = guarded_alloc((size_t)half * 8), *io = guarded_alloc((size_t)half * 8);
            ref->rope(x, c, sn, want, half, interleaved);
            simd->rope(x, c, sn, got, half, interleaved);
            memcpy(io, x, (size_t)half * 8);
            simd->rope(io, c, sn, io, half, interleaved);
            bool ok = guarded_ok(got, (size_t)half * 8) && guarded_ok(io, (size_t)half * 8);
            for (int64_t i = 0; i < half; i++) {
                const int64_t ia = interleaved ? 2 * i : i, ib = interleaved ? 2 * i + 1 : i + half;
                const double tol = 4 * FLT_EPSILON * (fabs(x[ia] * c[i]) + fabs(x[ib] * sn[i]) + fabs(x[ib] * c[i]) + fabs(x[ia] * sn[i]));
                ok = ok && within(got[ia], want[ia], tol) && within(got[ib], want[ib], tol);
                ok = ok && within(io[ia], want[ia], tol) && within(io[ib], want[ib], tol);
            }
            TB_CHECK_MSG(ok, "%s rope half=%lld interleaved=%d", simd->isa_name, (long long)half, interleaved);
            free(want);
            guarded_free(got);
            guarded_free(io);
        }
        fenced_free(&fx);
        fenced_free(&fc);
        fenced_free(&fs);
    }
}

/* ------------------------------------------------------------------------------------------------
 * conversions */

static void test_conversions(const tb_elementwise_kernels *simd, const tb_elementwise_kernels *ref) {
    /* every half and bfloat16 bit pattern to f32 */
    enum { ALL = 65536 };
    fenced fh = fenced_alloc(ALL * 2);
    uint16_t *h = fh.data;
    for (int i = 0; i < ALL; i++)
        h[i] = (uint16_t)i;
    float *want = malloc(ALL * 4), *got = guarded_alloc(ALL * 4);
    for (int k = 0; k < 2; k++) {
        (k ? ref->bf16_to_f32 : ref->f16_to_f32)(h, want, ALL);
        (k ? simd->bf16_to_f32 : simd->f16_to_f32)(h, got, ALL);
        int bad = 0;
        for (int i = 0; i < ALL; i++)
            bad += !same_bits_or_nan(got[i], want[i]);
        TB_CHECK_MSG(bad == 0 && guarded_ok(got, ALL * 4), "%s %s over all 65536 patterns: %d mismatches", simd->isa_name,
                     k ? "bf16_to_f32" : "f16_to_f32", bad);
    }
    /* f32 -> f16 / bf16: random bit patterns, values near the rounding and overflow boundaries, specials,
     * at every test size (tails) */
    enum { COUNT = 1 << 18 };
    fenced fx = fenced_alloc(COUNT * 4);
    float *x = fx.data;
    for (int i = 0; i < COUNT; i++) {
        switch (i % 4) {
        case 0: x[i] = tb_f32_from_bits((uint32_t)rng_next()); break;
        case 1: x[i] = tb_f32_from_bits(0x477fe000u + (uint32_t)(rng_next() % 0x4000)); break; /* ~65504..65536 */
        case 2: x[i] = tb_f32_from_bits(0x33000000u + (uint32_t)(rng_next() % 0x6000000u)) * (rng_next() % 2 ? 1 : -1); break;
        default: x[i] = SPECIALS[i / 4 % NUM_SPECIALS]; break;
        }
        if (i % 3 == 0) /* exact ties of the bf16 rounding */
            x[i] = tb_f32_from_bits((tb_f32_to_bits(x[i]) & ~0xffffu) | 0x8000u);
        if (i % 3 == 1) /* exact ties of the f16 rounding (for normal halves) */
            x[i] = tb_f32_from_bits((tb_f32_to_bits(x[i]) & ~0x1fffu) | 0x1000u);
    }
    uint16_t *hw = malloc(COUNT * 2);
    for (int k = 0; k < 2; k++) {
        for (int s = 0; s <= NUM_SIZES; s++) {
            const int64_t n = s < NUM_SIZES ? SIZES[s] : COUNT;
            uint16_t *hg = guarded_alloc((size_t)n * 2);
            const float *xs = x + COUNT - n; /* ends at the fence */
            (k ? ref->f32_to_bf16 : ref->f32_to_f16)(xs, hw, n);
            (k ? simd->f32_to_bf16 : simd->f32_to_f16)(xs, hg, n);
            int bad = 0;
            for (int64_t i = 0; i < n; i++) {
                bool nan_w = k ? isnan(tb_bf16_to_f32(hw[i])) : isnan(tb_f16_to_f32(hw[i]));
                bool nan_g = k ? isnan(tb_bf16_to_f32(hg[i])) : isnan(tb_f16_to_f32(hg[i]));
                /* bf16 NaNs follow tb_f32_to_bf16 bit for bit; half NaNs must just stay NaN */
                bool ok = hw[i] == hg[i] || (!k && nan_w && nan_g && ((hw[i] ^ hg[i]) & 0x8000u) == 0);
                if (!ok && bad++ < 3)
                    fprintf(stderr, "  %s %s: %.9g (0x%08x) -> 0x%04x want 0x%04x\n", simd->isa_name, k ? "f32_to_bf16" : "f32_to_f16",
                            xs[i], tb_f32_to_bits(xs[i]), hg[i], hw[i]);
            }
            TB_CHECK_MSG(bad == 0 && guarded_ok(hg, (size_t)n * 2), "%s %s n=%lld: %d mismatches", simd->isa_name,
                         k ? "f32_to_bf16" : "f32_to_f16", (long long)n, bad);
            guarded_free(hg);
        }
    }
    free(hw);
    free(want);
    guarded_free(got);
    fenced_free(&fh);
    fenced_free(&fx);
}

/* ------------------------------------------------------------------------------------------------
 * accuracy against double-precision libm: the SIMD math (documented bounds) and the reference */

typedef double (*double_fn)(double x);
static double d_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
static double d_silu(double x) { return x / (1.0 + exp(-x)); }
static double d_gelu_erf(double x) { return 0.5 * x * (1.0 + erf(x * M_SQRT1_2)); }
static double d_gelu_tanh(double x) { return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }

typedef struct accuracy_case {
    int op;
    double_fn truth;
    float lo, hi;      /* sampled range */
    double simd_ulps;  /* documented SIMD bound */
    double ref_ulps;   /* reference bound against this (independent) formula */
} accuracy_case;

static const accuracy_case ACCURACY[] = {
    {TB_UNARY_EXP, exp, -103.0f, 88.7f, 1.5, 0.51},
    {TB_UNARY_LOG, log, 1e-44f, 3e38f, 1.5, 0.51},
    {TB_UNARY_SIN, sin, -131072.0f, 131072.0f, 2.0, 0.51},
    {TB_UNARY_COS, cos, -131072.0f, 131072.0f, 2.0, 0.51},
    {TB_UNARY_SIN, sin, -3e38f, 3e38f, 2.0, 0.51},
    {TB_UNARY_TANH, tanh, -12.0f, 12.0f, 2.0, 0.51},
    {TB_UNARY_SIGMOID, d_sigmoid, -100.0f, 40.0f, 3.0, 0.51},
    {TB_UNARY_SILU, d_silu, -80.0f, 90.0f, 4.0, 0.51},
    /* 1 + erf cancels for x < -3 (up to 9 bits of 53 at -4.2): still far below a float ulp */
    {TB_UNARY_GELU, d_gelu_erf, -4.2f, 100.0f, 2.5, 1.0},
    /* below -1 the rounding of u is amplified (see the tolerance of the reference comparison) */
    {TB_UNARY_GELU_TANH, d_gelu_tanh, -1.0f, 100.0f, 4.0, 1.0},
};

static void test_accuracy(const tb_elementwise_kernels *table, bool is_ref) {
    enum { SAMPLES = 1 << 17 };
    float *x = malloc(SAMPLES * 4), *y = malloc(SAMPLES * 4);
    const tb_unary_params params = {0};
    for (size_t c = 0; c < sizeof ACCURACY / sizeof ACCURACY[0]; c++) {
        const accuracy_case *ac = &ACCURACY[c];
        /* half the samples uniform in value, half uniform in bit pattern (all magnitudes) */
        for (int i = 0; i < SAMPLES; i++) {
            if (i % 2)
                x[i] = rng_uniform(ac->lo, ac->hi);
            else {
                float v;
                do
                    v = rng_wide();
                while (!(v >= ac->lo && v <= ac->hi));
                x[i] = v;
            }
        }
        table->unary[ac->op](x, y, SAMPLES, &params);
        double worst = 0;
        float worst_x = 0;
        for (int i = 0; i < SAMPLES; i++) {
            const double want = ac->truth(x[i]);
            if (isnan(want) || isnan(y[i])) {
                if (!(isnan(want) && isnan(y[i]))) {
                    worst = INFINITY;
                    worst_x = x[i];
                }
                continue;
            }
            if (fabs(want) < FLT_MIN)
                continue; /* gradual underflow is checked against the reference elsewhere */
            const double err = fabs(y[i] - want) / ulp_of(want);
            if (!(err <= worst)) {
                worst = err;
                worst_x = x[i];
            }
        }
        const double bound = is_ref ? ac->ref_ulps : ac->simd_ulps;
        TB_CHECK_MSG(worst <= bound, "%s %s on [%g, %g]: %.3f ulp at x=%.9g (bound %.2f)", table->isa_name,
                     tb_unary_op_names[ac->op], ac->lo, ac->hi, worst, worst_x, bound);
        if (getenv("TB_TEST_VERBOSE"))
            printf("%s %-10s [%g, %g]: max %.3f ulp\n", table->isa_name, tb_unary_op_names[ac->op], ac->lo, ac->hi, worst);
    }
    free(x);
    free(y);
}

/* the reference reductions against long double sums */
static void test_reference_reductions(const tb_elementwise_kernels *ref) {
    enum { N = 100003 };
    float *x = malloc(N * 4), *y = malloc(N * 4);
    for (int i = 0; i < N; i++)
        x[i] = rng_uniform(-3, 3) + (i % 17 == 0 ? 100.0f : 0.0f);
    long double s = 0, m = -INFINITY;
    for (int i = 0; i < N; i++) {
        s += x[i];
        m = x[i] > m ? x[i] : m;
    }
    float out;
    ref->reduce[TB_REDUCE_SUM](x, 1, N, 1, &out);
    TB_CHECK_MSG(fabsl(out - s) <= ulp_of((double)s), "reference sum %.9g vs %.12Lg", out, s);
    long double es = 0;
    for (int i = 0; i < N; i++)
        es += expl((long double)x[i] - m);
    ref->reduce[TB_REDUCE_LOGSUMEXP](x, 1, N, 1, &out);
    TB_CHECK_MSG(fabsl(out - (m + logl(es))) <= ulp_of((double)(m + logl(es))), "reference logsumexp");
    ref->softmax(x, y, 1, N, 1, false);
    bool ok = true;
    for (int i = 0; i < N; i++)
        ok = ok && fabsl(y[i] - expl(x[i] - m) / es) <= ulp_of((double)(expl(x[i] - m) / es)) * 0.51;
    TB_CHECK_MSG(ok, "reference softmax vs long double");
    long double mean = s / N, var = 0;
    for (int i = 0; i < N; i++)
        var += (x[i] - mean) * (x[i] - mean);
    float v, mu;
    ref->var(x, 1, N, 1, 1, &mu, &v);
    TB_CHECK_MSG(fabsl(v - var / (N - 1)) <= ulp_of((double)(var / (N - 1))) && fabsl(mu - mean) <= ulp_of((double)mean),
                 "reference var/mean vs long double");
    free(x);
    free(y);
}

static bool table_complete(const tb_elementwise_kernels *t) {
    bool ok = t->isa_name && t->where && t->argmax && t->argmin && t->var && t->softmax && t->layer_norm && t->rms_norm &&
              t->rope && t->f16_to_f32 && t->bf16_to_f32 && t->f32_to_f16 && t->f32_to_bf16;
    for (int i = 0; i < TB_UNARY_COUNT; i++)
        ok = ok && t->unary[i];
    for (int i = 0; i < TB_BINARY_COUNT; i++)
        ok = ok && t->binary[i];
    for (int i = 0; i < TB_COMPARE_COUNT; i++)
        ok = ok && t->compare[i];
    for (int i = 0; i < TB_REDUCE_COUNT; i++)
        ok = ok && t->reduce[i];
    return ok;
}

int main(void) {
    const tb_elementwise_kernels *ref = &tb_elementwise_kernels_ref;
    TB_CHECK(table_complete(ref));
    TB_CHECK(tb_elementwise_kernels_for(TB_ISA_SCALAR)->unary[TB_UNARY_EXP] == ref->unary[TB_UNARY_EXP]);
    TB_CHECK(tb_elementwise_kernels_active() == tb_elementwise_kernels_for(tb_isa_active()));
    TB_CHECK(tb_elementwise_kernels_for((tb_isa)99) == tb_elementwise_kernels_for(TB_ISA_SCALAR));
    TB_CHECK(strcmp(tb_unary_op_names[TB_UNARY_GELU_TANH], "gelu_tanh") == 0);
    TB_CHECK(strcmp(tb_binary_op_names[TB_BINARY_MINIMUM], "minimum") == 0);
    TB_CHECK(strcmp(tb_compare_op_names[TB_COMPARE_GE], "ge") == 0);
    TB_CHECK(strcmp(tb_reduce_op_names[TB_REDUCE_LOGSUMEXP], "logsumexp") == 0);

    test_accuracy(ref, true);
    test_reference_reductions(ref);

    int tested = 0;
    for (int isa = TB_ISA_SCALAR + 1; isa < TB_ISA_COUNT; isa++) {
        const tb_elementwise_kernels *simd = tb_elementwise_kernels_for((tb_isa)isa);
        TB_CHECK(table_complete(simd));
        if (!tb_isa_supported((tb_isa)isa) || simd->unary[TB_UNARY_EXP] == ref->unary[TB_UNARY_EXP]) {
            printf("%s: not supported or no SIMD table here, skipped\n", tb_isa_name((tb_isa)isa));
            continue;
        }
        printf("testing %s against the reference\n", simd->isa_name);
        tested++;
        test_accuracy(simd, false);
        test_unary(simd, ref);
        test_binary(simd, ref);
        test_reductions(simd, ref);
        test_norms(simd, ref);
        test_conversions(simd, ref);
    }
    printf("SIMD levels tested: %d\n", tested);
    return tb_test_finish("test_kernels_elementwise");
}
