/* Vector transcendental functions (exp, log, sin/cos, tanh, sigmoid, exact GELU, tanh GELU) written
 * against the float-vector API of the including ISA (x86_avx2/simd_api_avx2.h,
 * x86_avx512/simd_api_avx512.h). Static inline only: every ISA translation unit compiles its own copy.
 *
 * Accuracy (checked by tests/c/test_kernels_elementwise.c against double-precision libm): exp, log
 * < 1 ulp; sin, cos, tanh < 1.5 ulp; sigmoid < 2.5 ulp; silu < 3.5 ulp; GELU < 2.5 ulp for |x| < 4.26
 * (absolute < 1e-11 |x| beyond). The polynomial coefficients are near-minimax fits (Lawson's iteration
 * in double precision against mpmath values, tools/fit_vec_math.py) rounded to float; their fitted
 * error is quoted with each. */
#ifndef TB_SIMD_VEC_MATH_H
#define TB_SIMD_VEC_MATH_H

#include <math.h>

/* e^x. x in [-104, 89] is reduced as x = n*ln2 + r, |r| <= ln2/2 (Cody-Waite with an FMA: the first
 * step is exact), e^r = 1 + r + r^2 Q(r) (Q degree 4, relative error 3.1e-9), then scaled by 2^n with
 * correct overflow to inf and gradual underflow. NaN stays NaN (the clamps keep it: the constant is the
 * first operand of max/min, which return their second operand on NaN). */
static inline vf vmath_exp(vf x) {
    x = vf_max(vf_set1(-104.0f), x);
    x = vf_min(vf_set1(89.0f), x);
    vf n = vf_round(vf_mul(x, vf_set1(1.44269504088896341f)));
    vf r = vf_fnmadd(n, vf_set1(0.693147182464599609375f), x);
    r = vf_fnmadd(n, vf_set1(-1.904654323148236e-09f), r);
    vf q = vf_set1(1.381461043e-03f);
    q = vf_fmadd(q, r, vf_set1(8.368710987e-03f));
    q = vf_fmadd(q, r, vf_set1(4.166838899e-02f));
    q = vf_fmadd(q, r, vf_set1(1.666652113e-01f));
    q = vf_fmadd(q, r, vf_set1(4.999999404e-01f));
    vf p = vf_add(vf_fmadd(vf_mul(r, r), q, r), vf_set1(1.0f));
    return vf_scale2(p, n);
}

/* log(x). x = 2^e * m with m in [sqrt(1/2), sqrt(2)) (subnormals pre-scaled by 2^23), f = m - 1,
 * log(1 + f) = f - f^2/2 + f^3 Q(f) (Q degree 7, relative error 5.8e-9), result = e*ln2 + log(1+f) with
 * ln2 split so that e*ln2_hi is exact. log(0) = -inf, log(x<0) = NaN, log(inf) = inf, NaN stays NaN. */
static inline vf vmath_log(vf x) {
    vm tiny = vf_lt(x, vf_set1(1.17549435e-38f));
    vf xs = vf_select(tiny, vf_mul(x, vf_set1(8388608.0f)), x);
    vf e_bias = vf_select(tiny, vf_set1(-150.0f), vf_set1(-127.0f));
    vi bits = vf_as_vi(xs);
    vf e = vf_add(vi_to_vf(vi_shr(bits, 23)), e_bias);
    vf m = vi_as_vf(vi_or(vi_and(bits, vi_set1(0x007fffff)), vi_set1(0x3f800000)));
    vm big = vf_gt(m, vf_set1(1.41421356f));
    m = vf_select(big, vf_mul(m, vf_set1(0.5f)), m);
    e = vf_select(big, vf_add(e, vf_set1(1.0f)), e);
    vf f = vf_sub(m, vf_set1(1.0f));
    vf q = vf_set1(-7.634498924e-02f);
    q = vf_fmadd(q, f, vf_set1(1.276157796e-01f));
    q = vf_fmadd(q, f, vf_set1(-1.316018254e-01f));
    q = vf_fmadd(q, f, vf_set1(1.420175731e-01f));
    q = vf_fmadd(q, f, vf_set1(-1.662335694e-01f));
    q = vf_fmadd(q, f, vf_set1(2.000122666e-01f));
    q = vf_fmadd(q, f, vf_set1(-2.500081956e-01f));
    q = vf_fmadd(q, f, vf_set1(3.333333135e-01f));
    vf f2 = vf_mul(f, f);
    vf tail = vf_mul(f2, vf_fmsub(f, q, vf_set1(0.5f))); /* f^2 (f Q - 1/2) */
    tail = vf_fmadd(e, vf_set1(-2.12194440e-4f), tail);   /* + e * ln2_lo */
    vf r = vf_fmadd(e, vf_set1(0.693359375f), vf_add(f, tail)); /* e * ln2_hi is exact */
    r = vf_select(vf_eq(x, vf_set1(INFINITY)), x, r);
    r = vf_select(vf_eq(x, vf_zero()), vf_set1(-INFINITY), r);
    r = vf_select(vf_lt(x, vf_zero()), vf_set1(NAN), r);
    return vf_select(vf_isnan(x), x, r);
}

/* |x| at or below this is reduced in vector code; larger magnitudes (and inf) go through libm. The
 * three-part pi/2 with FMAs keeps the reduced argument accurate to an ulp well past this bound. */
#define VMATH_TRIG_VECTOR_LIMIT 131072.0f

/* sin (is_cos false) or cos of x: a = |x|, q = round(a * 2/pi), r = a - q*pi/2 in three FMA steps,
 * sin r = r + r^3 S(r^2) (rel. error 3.8e-9), cos r = 1 - r^2/2 + r^4 C(r^2) (1.2e-10), the quadrant
 * (q + is_cos) mod 4 picks the polynomial and the sign; sin takes the sign of x. */
static inline vf vmath_sincos(vf x, bool is_cos) {
    vf a = vf_abs(x);
    vf q = vf_round(vf_mul(a, vf_set1(0.636619772367581343f)));
    vf r = vf_fnmadd(q, vf_set1(1.57079637050628662109375f), a);
    r = vf_fnmadd(q, vf_set1(-4.371138828673793e-08f), r);
    r = vf_fnmadd(q, vf_set1(-1.7151245100058819e-15f), r);
    vf z = vf_mul(r, r);
    vf s = vf_set1(-1.951445447e-04f);
    s = vf_fmadd(s, z, vf_set1(8.332154714e-03f));
    s = vf_fmadd(s, z, vf_set1(-1.666665524e-01f));
    s = vf_fmadd(vf_mul(r, z), s, r);
    vf c = vf_set1(2.443220910e-05f);
    c = vf_fmadd(c, z, vf_set1(-1.388730831e-03f));
    c = vf_fmadd(c, z, vf_set1(4.166664556e-02f));
    c = vf_fmadd(vf_mul(z, z), c, vf_fnmadd(z, vf_set1(0.5f), vf_set1(1.0f)));
    vi quadrant = vf_to_vi(q);
    if (is_cos)
        quadrant = vi_add(quadrant, vi_set1(1));
    vm odd = vi_gt(vi_and(quadrant, vi_set1(1)), vi_set1(0));
    vf result = vf_select(odd, c, s);
    vf flip = vi_as_vf(vi_shl(vi_and(quadrant, vi_set1(2)), 30));
    result = vf_xor(result, flip);
    if (!is_cos)
        result = vf_xor(result, vf_signbit(x));
    vm huge = vf_gt(a, vf_set1(VMATH_TRIG_VECTOR_LIMIT));
    if (vm_any(huge)) {
        float in[VF_LANES], out[VF_LANES];
        vf_store(in, x);
        vf_store(out, result);
        unsigned bits = vm_bits(huge);
        for (int lane = 0; lane < VF_LANES; lane++) {
            if (bits & (1u << lane))
                out[lane] = is_cos ? cosf(in[lane]) : sinf(in[lane]);
        }
        result = vf_load(out);
    }
    return result;
}

/* tanh: |x| < 0.625 uses x + x^3 T(x^2) (T degree 4, rel. error 4.4e-9); otherwise
 * 1 - 2/(e^{2|x|} + 1), which saturates to 1 without overflow trouble. Odd; NaN stays NaN. */
static inline vf vmath_tanh(vf x) {
    vf a = vf_abs(x);
    vf z = vf_mul(a, a);
    vf t = vf_set1(-5.704987328e-03f);
    t = vf_fmadd(t, z, vf_set1(2.063908800e-02f));
    t = vf_fmadd(t, z, vf_set1(-5.373971537e-02f));
    t = vf_fmadd(t, z, vf_set1(1.333144158e-01f));
    t = vf_fmadd(t, z, vf_set1(-3.333328068e-01f));
    vf small = vf_fmadd(vf_mul(a, z), t, a);
    vf e = vmath_exp(vf_add(a, a));
    vf large = vf_sub(vf_set1(1.0f), vf_div(vf_set1(2.0f), vf_add(e, vf_set1(1.0f))));
    vf r = vf_select(vf_lt(a, vf_set1(0.625f)), small, large);
    return vf_or(r, vf_signbit(x));
}

/* 1 / (1 + e^-x) computed from e = e^-|x| so that neither side loses relative accuracy:
 * x >= 0: 1/(1+e); x < 0: e/(1+e). NaN stays NaN. */
static inline vf vmath_sigmoid(vf x) {
    vf e = vmath_exp(vf_neg(vf_abs(x)));
    vf r = vf_div(vf_set1(1.0f), vf_add(vf_set1(1.0f), e));
    return vf_select(vf_ge(x, vf_zero()), r, vf_mul(e, r));
}

/* exact GELU: x * Phi(x), Phi the standard normal CDF (= (1 + erf(x/sqrt2))/2), through
 * Q(a) = Phi(-a) = erfc(a/sqrt2)/2 for a = |x|: Phi(x) = 1 - Q(a) for x >= 0 and Q(a) for x < 0, so the
 * negative tail keeps its relative accuracy (no 1 + erf cancellation) and x needs no rounding.
 * Q is piecewise polynomial over VF_TABLE_SIZE equal intervals, each with its own polynomial in a local
 * variable, the coefficients looked up per lane from registers. With 32 entries (AVX-512) the intervals
 * are centred on k / 4 (k = round(4a)), v = 4a - k in [-1/2, 1/2]: centred, so that Horner's rounding
 * is not magnified by the decay of Q across the interval. With 8 entries (AVX2, one vpermps a lookup)
 * the intervals are [k, k + 1) and v = k + 1 - a in (0, 1] (v = a in the first): Q falls by up to e^4 across such an interval,
 * which a centred variable would turn into alternating Taylor terms ten times the result (6 ulp seen);
 * measured from the right end the terms that matter are positive and nothing cancels. No
 * division and no exp: 2-3x cheaper than an erfc through exp. The coefficients (tools/fit_vec_math.py)
 * are near-minimax fits of |error| / max(Q, floor), rounded to float one at a time with the rest
 * refitted: relative error < 4.5e-8 wherever Q >= floor = 1e-5 (|x| < 4.26), absolute below that. Past
 * the last interval (a >= 7.875 with 32 entries, 8 with 8) Q < 5e-15, so the result is x (x > 0) or
 * -0 (x < 0).
 * gelu(inf) = inf, gelu(-inf) = NaN (as PyTorch), NaN stays NaN. */
#if VF_TABLE_SIZE == 32
#define VMATH_GELU_DEGREE 6
#define VMATH_GELU_INTERVALS_PER_UNIT 4.0f
/* 32 intervals of width 1/4 centred on k/4, degree 6, floor 1e-5 (|x| < 4.26) */
static const float vmath_gelu_q[7][32] = {
    {5.000000000e-01f, 4.012936652e-01f, 3.085375428e-01f, 2.266273499e-01f, 1.586552560e-01f, 1.056497768e-01f, 6.680720299e-02f, 4.005915672e-02f, 2.275013179e-02f, 1.222447306e-02f, 6.209665444e-03f, 2.979763318e-03f, 1.349898055e-03f, 5.770250573e-04f, 2.326290851e-04f, 8.841728413e-05f, 3.167124305e-05f, 1.068852544e-05f, 3.397673026e-06f, 1.017083264e-06f, 2.866515842e-07f, 7.604960217e-08f, 1.898956192e-08f, 4.462172409e-09f, 9.865875894e-10f, 2.052263359e-10f, 4.016000379e-11f, 7.392256945e-12f, 1.279812411e-12f, 2.083857853e-13f, 3.190891019e-14f, 4.594626461e-15f},
    {-9.973557293e-02f, -9.666702896e-02f, -8.801633120e-02f, -7.528435439e-02f, -6.049268320e-02f, -4.566227272e-02f, -3.237939999e-02f, -2.156933025e-02f, -1.349774189e-02f, -7.934913039e-03f, -4.382075276e-03f, -2.273390768e-03f, -1.107962104e-03f, -5.072620115e-04f, -2.181706805e-04f, -8.814891771e-05f, -3.345755613e-05f, -1.192965919e-05f, -3.995935458e-06f, -1.257377221e-06f, -3.716800165e-07f, -1.032118533e-07f, -2.692443246e-08f, -6.598119828e-09f, -1.518974169e-09f, -3.285015038e-10f, -6.673919750e-11f, -1.273741269e-11f, -2.283696019e-12f, -3.846378782e-13f, -6.085868707e-14f, -9.045862102e-15f},
    {7.958359305e-08f, 3.021478653e-03f, 5.500737578e-03f, 7.058073301e-03f, 7.561446168e-03f, 7.134524174e-03f, 6.071023643e-03f, 4.718301818e-03f, 3.374446882e-03f, 2.231667982e-03f, 1.369391335e-03f, 7.814731216e-04f, 4.154843045e-04f, 2.060742409e-04f, 9.544929344e-05f, 4.131985042e-05f, 1.672869075e-05f, 6.337647392e-06f, 2.247715884e-06f, 7.465669682e-07f, 2.322997261e-07f, 6.773283445e-08f, 1.851055131e-08f, 4.742394477e-09f, 1.139230821e-09f, 2.566415969e-10f, 5.422555460e-11f, 1.074718699e-11f, 1.998231441e-12f, 3.485775308e-13f, 5.705491960e-14f, 8.763153845e-15f},
    {1.038184040e-03f, 9.439519490e-04f, 6.876470288e-04f, 3.430016804e-04f, 6.105046424e-08f, -2.674916177e-04f, -4.215649678e-04f, -4.633942735e-04f, -4.218015820e-04f, -3.357796813e-04f, -2.396403434e-04f, -1.554038026e-04f, -9.232979210e-05f, -5.052780762e-05f, -2.556660002e-05f, -1.199423878e-05f, -5.227696420e-06f, -2.120290219e-06f, -8.012469266e-07f, -2.824040166e-07f, -9.291384373e-08f, -2.855518133e-08f, -8.202458268e-09f, -2.203290217e-09f, -5.536771597e-10f, -1.302116054e-10f, -2.866786149e-11f, -5.910373753e-12f, -1.141328351e-12f, -2.064816281e-13f, -3.500337227e-14f, -5.561221497e-15f},
    {2.916247468e-06f, -5.274362775e-05f, -7.588444714e-05f, -9.120640607e-05f, -7.740114233e-05f, -5.138251436e-05f, -2.260503970e-05f, 1.418743864e-06f, 1.745637019e-05f, 2.422551734e-05f, 2.324474372e-05f, 1.861388046e-05f, 1.299763790e-05f, 8.125822205e-06f, 4.601938599e-06f, 2.380445949e-06f, 1.133588398e-06f, 4.970730174e-07f, 2.019260705e-07f, 7.606830366e-08f, 2.661802512e-08f, 8.663922912e-09f, 2.626811213e-09f, 7.424601489e-10f, 1.957670137e-10f, 4.819359495e-11f, 1.108217424e-11f, 2.381633085e-12f, 4.785570811e-13f, 8.993970662e-14f, 1.581515206e-14f, 2.602774911e-15f},
    {-1.506486660e-05f, -7.890055713e-06f, -4.616379101e-06f, 5.166908750e-07f, 3.659215736e-06f, 5.536938716e-06f, 5.525304914e-06f, 4.176223683e-06f, 2.193288083e-06f, 4.133486868e-07f, -6.658636380e-07f, -1.109282039e-06f, -1.083045277e-06f, -8.466103054e-07f, -5.665793310e-07f, -3.343393473e-07f, -1.781126002e-07f, -8.610034996e-08f, -3.815185323e-08f, -1.554269247e-08f, -5.838154848e-09f, -2.029900026e-09f, -6.542426045e-10f, -1.958066348e-10f, -5.447533397e-11f, -1.411199803e-11f, -3.405813175e-12f, -7.663949228e-13f, -1.609453402e-13f, -3.155411520e-14f, -5.778847131e-15f, -9.891104422e-16f},
    {3.665668146e-06f, 1.728310599e-05f, -6.714982646e-06f, 4.674486263e-06f, -2.878326313e-06f, -4.909777999e-06f, -2.884399009e-06f, -7.536073987e-09f, -2.270720856e-08f, -8.500029480e-07f, -2.753925799e-07f, -1.284677751e-07f, -5.073228948e-09f, 2.570519086e-08f, 3.605567045e-08f, 3.280812422e-08f, 1.780802528e-08f, 1.128929306e-08f, 5.477208909e-09f, 2.423399037e-09f, 9.876490736e-10f, 3.712744279e-10f, 1.276446310e-10f, 4.050881852e-11f, 1.194589653e-11f, 3.258846751e-12f, 8.265008686e-13f, 1.948925776e-13f, 4.275892113e-14f, 8.741330041e-15f, 1.666279085e-15f, 2.962207624e-16f},
};
#elif VF_TABLE_SIZE == 8
#define VMATH_GELU_DEGREE 9
#define VMATH_GELU_INTERVALS_PER_UNIT 1.0f
#define VMATH_GELU_FROM_RIGHT 1
/* 8 intervals [k, k + 1), degree 9 in v = k + 1 - a (v = a in [0, 1)), floor 1e-5 (|x| < 4.26): max |error| / max(Q, floor)
 * 3.8e-8 */
static const float vmath_gelu_q[10][8] = {
    {5.000000000e-01f, 2.275013179e-02f, 1.349898055e-03f, 3.167124305e-05f, 2.866516127e-07f, 9.865394057e-10f, 1.278682563e-12f, 6.164674026e-16f},
    {-3.989422619e-01f, 5.399099737e-02f, 4.431843758e-03f, 1.338299189e-04f, 1.486714041e-06f, 6.085290938e-09f, 9.352090283e-12f, 6.124312483e-15f},
    {-6.495031926e-07f, 5.399002507e-02f, 6.647920236e-03f, 2.676726435e-04f, 3.716912033e-06f, 1.792501436e-08f, 2.507944720e-11f, -1.343860715e-14f},
    {6.649833918e-02f, 2.700616606e-02f, 5.907410756e-03f, 3.343963472e-04f, 5.946222700e-06f, 3.921010006e-08f, 1.575577030e-10f, 4.610554018e-13f},
    {-4.821081529e-05f, 4.440484103e-03f, 3.333438188e-03f, 2.912492200e-04f, 6.813053460e-06f, 2.641190378e-08f, -4.000408060e-10f, -2.391083425e-12f},
    {-9.807601571e-03f, -2.074327553e-03f, 1.079964801e-03f, 1.766918722e-04f, 5.948493708e-06f, 1.399409371e-07f, 1.998123889e-09f, 8.802941015e-12f},
    {-3.448970383e-04f, -1.643003081e-03f, 1.544522383e-04f, 9.443647286e-05f, 3.905704489e-06f, -1.354687242e-07f, -3.693389594e-09f, -1.767867797e-11f},
    {1.624589670e-03f, 1.455961028e-04f, -1.156851213e-04f, 8.850409358e-06f, 2.449189651e-06f, 2.744028791e-07f, 5.025339700e-09f, 2.223643665e-11f},
    {-3.224150569e-04f, 1.278771651e-05f, -4.251016071e-05f, 1.744694055e-05f, 5.669083407e-07f, -1.593656407e-07f, -3.366397383e-09f, -1.503525603e-11f},
    {-1.638941853e-06f, 3.639745773e-05f, 3.398828085e-06f, -6.347086583e-06f, 5.513917358e-07f, 7.652322154e-08f, 1.229682800e-09f, 4.891089270e-12f},
};
#else
#error "vec_math.h: no GELU table for this VF_TABLE_SIZE"
#endif

static inline vf vmath_gelu(vf x) {
    const float(*table)[VF_TABLE_SIZE] = vmath_gelu_q;
    /* Q is 0 in float terms past the last interval's end */
#ifdef VMATH_GELU_FROM_RIGHT
    const vf end = vf_set1((float)VF_TABLE_SIZE / VMATH_GELU_INTERVALS_PER_UNIT);
#else
    const vf end = vf_set1(((float)VF_TABLE_SIZE - 0.5f) / VMATH_GELU_INTERVALS_PER_UNIT);
#endif
    vf a = vf_abs(x);
    vf s = vf_mul(a, vf_set1(VMATH_GELU_INTERVALS_PER_UNIT));
#ifdef VMATH_GELU_FROM_RIGHT
    /* interval k = floor(s), v = k + 1 - s in (0, 1], exact for k >= 1 (past the end k wraps and is
     * masked); the first interval takes v = s, as 1 - s would round */
    vi interval = vf_to_vi_trunc(s);
    vf one = vf_set1(1.0f);
    vf v = vf_select(vf_lt(s, one), s, vf_sub(vf_add(vi_to_vf(interval), one), s));
#else
    vi interval = vf_to_vi(s); /* nearest: v in [-1/2, 1/2]; past the end it wraps and is masked below */
    vf v = vf_sub(s, vi_to_vf(interval));
#endif
    vf q = vtable_lookup(vtable_load(table[VMATH_GELU_DEGREE]), interval);
    for (int j = VMATH_GELU_DEGREE - 1; j >= 0; j--)
        q = vf_fmadd(q, v, vtable_lookup(vtable_load(table[j]), interval));
    q = vf_select(vf_lt(a, end), q, vf_zero());
    vf g = vf_select(vf_ge(x, vf_zero()), vf_sub(vf_set1(1.0f), q), q);
    return vf_mul(x, g);
}

/* tanh-approximated GELU: x/2 (1 + tanh(u)) = x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3).
 * u is rounded (a few ulp), which the negative tail amplifies by |2u|: the result there is accurate to
 * a few ulp times the problem's condition number, far inside PyTorch's own 1 + tanh cancellation. */
static inline vf vmath_gelu_tanh(vf x) {
    vf x3 = vf_mul(vf_mul(x, x), x);
    vf u2 = vf_mul(vf_fmadd(x3, vf_set1(0.044715f), x), vf_set1(1.595769121605730711f)); /* 2u */
    return vf_mul(x, vmath_sigmoid(u2));
}

#endif
