/* turbo_torch's F.interpolate: nearest, nearest-exact and (bi)linear resampling of [N, C, W] and
 * [N, C, H, W] float32/float64 tensors, forward and backward, with PyTorch's index and weight rules
 * (aten upsample_*: the scale is in/out or 1/scale_factor, computed in the tensor's precision). */
#include <math.h>
#include <string.h>

#include "eager_nn.h"

#include "torchburn/alloc.h"
#include "torchburn/thread_pool.h"

typedef enum resize_mode { RESIZE_NEAREST, RESIZE_NEAREST_EXACT, RESIZE_LINEAR, RESIZE_MODE_COUNT } resize_mode;

/* One output index's sources along an axis: out[o] = weight0 * in[index0] + weight1 * in[index1];
 * nearest modes have weight1 = 0. Weights hold values of the tensor's precision (float32 values
 * are exact in a double). */
typedef struct resize_tap {
    int64_t index0, index1;
    double weight0, weight1;
} resize_tap;

/* The geometry of one resampling, as the autograd node keeps it. scale[d] <= 0: none given. */
typedef struct resize_geometry {
    resize_mode mode;
    bool align_corners;
    int spatial;             /* 1 (W) or 2 (H, W) */
    int64_t in_size[2];      /* H, W (H = 1 when spatial == 1) */
    int64_t out_size[2];
    double scale_factor[2];
    tb_dtype dtype;
} resize_geometry;

static double round_to(tb_dtype dtype, double v) { return dtype == TB_F32 ? (double)(float)v : v; }

/* aten's area_pixel_compute_scale / compute_scales_value, in the tensor's precision */
static double axis_scale(const resize_geometry *geo, int d) {
    int64_t in = geo->in_size[d], out = geo->out_size[d];
    if (geo->mode == RESIZE_LINEAR && geo->align_corners)
        return out > 1 ? round_to(geo->dtype, round_to(geo->dtype, (double)(in - 1)) / (double)(out - 1)) : 0.0;
    if (geo->scale_factor[d] > 0.0)
        return round_to(geo->dtype, 1.0 / geo->scale_factor[d]);
    return round_to(geo->dtype, round_to(geo->dtype, (double)in) / (double)out);
}

static void axis_taps(const resize_geometry *geo, int d, resize_tap *taps) {
    int64_t in = geo->in_size[d], out = geo->out_size[d];
    double scale = axis_scale(geo, d);
    tb_dtype t = geo->dtype;
    for (int64_t o = 0; o < out; o++) {
        resize_tap *tap = &taps[o];
        tap->weight0 = 1.0;
        tap->weight1 = 0.0;
        if (geo->mode == RESIZE_NEAREST) {
            int64_t i = out == in ? o : out == 2 * in ? o >> 1 : (int64_t)floor(round_to(t, (double)o * scale));
            tap->index0 = tap->index1 = i < in - 1 ? i : in - 1;
        } else if (geo->mode == RESIZE_NEAREST_EXACT) {
            int64_t i = out == in ? o : (int64_t)floor(round_to(t, ((double)o + 0.5) * scale));
            tap->index0 = tap->index1 = i < in - 1 ? i : in - 1;
        } else if (out == in) {
            tap->index0 = tap->index1 = o;
        } else {
            double real = geo->align_corners ? round_to(t, scale * (double)o)
                                             : round_to(t, round_to(t, scale * round_to(t, (double)o + 0.5)) - 0.5);
            if (!geo->align_corners && real < 0.0)
                real = 0.0;
            int64_t i = (int64_t)floor(real);
            if (i > in - 1)
                i = in - 1;
            double lambda = round_to(t, real - (double)i);
            lambda = lambda < 0.0 ? 0.0 : lambda > 1.0 ? 1.0 : lambda;
            tap->index0 = i;
            tap->index1 = i < in - 1 ? i + 1 : i;
            tap->weight1 = lambda;
            tap->weight0 = round_to(t, 1.0 - lambda);
        }
    }
}

typedef struct resize_job {
    const resize_geometry *geo;
    const resize_tap *rows, *cols; /* [out_size[0]], [out_size[1]] */
    const void *src;               /* forward: x planes; backward: grad_output planes */
    void *dst;                     /* forward: y planes; backward: zeroed grad_input planes */
} resize_job;

/* One body for both precisions (T = float, double), as in src/eager/pointwise.c. Nearest modes copy
 * (forward) and add (backward) single values. Linear: y = w0r * (w0c * x00 + w1c * x01) + w1r * (w0c *
 * x10 + w1c * x11), aten's order, every weight applied even when 0 (so an inf next to a sample point
 * gives NaN as in torch); 1-D input has no row term. Backward scatters (wr * wc) * g in output order. */
#define RESIZE_LOOPS(T, SUFFIX)                                                                               \
    static void resize_forward_##SUFFIX(void *context, int64_t begin, int64_t end, int thread_index) {        \
        (void)thread_index;                                                                                   \
        const resize_job *job = context;                                                                      \
        const resize_geometry *geo = job->geo;                                                                \
        int64_t in_plane = geo->in_size[0] * geo->in_size[1], out_plane = geo->out_size[0] * geo->out_size[1]; \
        for (int64_t p = begin; p < end; p++) {                                                               \
            const T *x = (const T *)job->src + p * in_plane;                                                  \
            T *y = (T *)job->dst + p * out_plane;                                                             \
            for (int64_t oh = 0; oh < geo->out_size[0]; oh++) {                                               \
                const resize_tap *r = &job->rows[oh];                                                         \
                const T *x0 = x + r->index0 * geo->in_size[1], *x1 = x + r->index1 * geo->in_size[1];         \
                for (int64_t ow = 0; ow < geo->out_size[1]; ow++) {                                           \
                    const resize_tap *c = &job->cols[ow];                                                     \
                    T cw0 = (T)c->weight0, cw1 = (T)c->weight1, top;                                          \
                    if (geo->mode != RESIZE_LINEAR) {                                                         \
                        top = x0[c->index0];                                                                  \
                    } else {                                                                                  \
                        top = cw0 * x0[c->index0] + cw1 * x0[c->index1];                                      \
                        if (geo->spatial == 2)                                                                \
                            top = (T)r->weight0 * top + (T)r->weight1 * (cw0 * x1[c->index0] + cw1 * x1[c->index1]); \
                    }                                                                                         \
                    y[oh * geo->out_size[1] + ow] = top;                                                      \
                }                                                                                             \
            }                                                                                                 \
        }                                                                                                     \
    }                                                                                                         \
    static void resize_backward_##SUFFIX(void *context, int64_t begin, int64_t end, int thread_index) {       \
        (void)thread_index;                                                                                   \
        const resize_job *job = context;                                                                      \
        const resize_geometry *geo = job->geo;                                                                \
        int64_t in_plane = geo->in_size[0] * geo->in_size[1], out_plane = geo->out_size[0] * geo->out_size[1]; \
        int64_t in_w = geo->in_size[1];                                                                       \
        for (int64_t p = begin; p < end; p++) {                                                               \
            const T *g = (const T *)job->src + p * out_plane;                                                 \
            T *dx = (T *)job->dst + p * in_plane;                                                             \
            for (int64_t oh = 0; oh < geo->out_size[0]; oh++) {                                               \
                const resize_tap *r = &job->rows[oh];                                                         \
                for (int64_t ow = 0; ow < geo->out_size[1]; ow++) {                                           \
                    const resize_tap *c = &job->cols[ow];                                                     \
                    T v = g[oh * geo->out_size[1] + ow];                                                      \
                    if (geo->mode != RESIZE_LINEAR) {                                                         \
                        dx[r->index0 * in_w + c->index0] += v;                                                \
                        continue;                                                                             \
                    }                                                                                         \
                    double rw[2] = {r->weight0, r->weight1}, cw[2] = {c->weight0, c->weight1};               \
                    int64_t ri[2] = {r->index0, r->index1}, ci[2] = {c->index0, c->index1};                   \
                    for (int a = 0; a < geo->spatial; a++)                                                    \
                        for (int b = 0; b < 2; b++)                                                           \
                            dx[ri[a] * in_w + ci[b]] += (T)rw[a] * (T)cw[b] * v;                              \
                }                                                                                             \
            }                                                                                                 \
        }                                                                                                     \
    }

RESIZE_LOOPS(float, f32)
RESIZE_LOOPS(double, f64)
#undef RESIZE_LOOPS

/* src: contiguous [planes, *in or *out], dst: a new [planes, ...] tensor of `shape` (zeroed for the
 * backward). The taps of both axes are built once; planes run in parallel (each is written by one
 * thread, so results do not depend on the thread count). */
static tb_status resize_run(const resize_geometry *geo, bool backward, const tb_tensor *src, int ndim,
                            const int64_t *shape, tb_tensor *dst) {
    int64_t planes = shape[0] * shape[1];
    tb_tensor taps = {0};
    int64_t tap_count = geo->out_size[0] + geo->out_size[1];
    int64_t tap_bytes = (tap_count > 0 ? tap_count : 1) * (int64_t)sizeof(resize_tap);
    TB_TRY(tb_tensor_empty(TB_U8, 1, &tap_bytes, TB_ALLOC_DEFAULT, &taps));
    tb_status status = tb_tensor_empty(geo->dtype, ndim, shape, backward ? TB_ALLOC_ZERO : TB_ALLOC_DEFAULT, dst);
    if (status == TB_OK) {
        resize_tap *rows = tb_tensor_data(&taps), *cols = rows + geo->out_size[0];
        axis_taps(geo, 0, rows);
        axis_taps(geo, 1, cols);
        resize_job job = {geo, rows, cols, tb_tensor_data(src), tb_tensor_data(dst)};
        bool single = geo->dtype == TB_F32;
        tb_parallel_fn fn = backward ? (single ? resize_backward_f32 : resize_backward_f64)
                                     : (single ? resize_forward_f32 : resize_forward_f64);
        tb_parallel_for(planes, 1, fn, &job);
    }
    tb_tensor_release(&taps);
    return status;
}

static tb_status resize_backward(const resize_geometry *geo, const tb_tensor *g, const int64_t *in_shape,
                                 tb_tensor *grad_input) {
    tb_tensor gc = {0};
    TB_TRY(tb_tensor_contiguous(g, geo->dtype, &gc));
    tb_status status = resize_run(geo, true, &gc, geo->spatial + 2, in_shape, grad_input);
    tb_tensor_release(&gc);
    return status;
}

/* The node keeps: ints [mode, align_corners, spatial, N, C, in H, in W, out H, out W], the two
 * scale factors' bits in ints[9], ints[10], and the dtype in ints[11]. */
tb_status tt_nn_resize_backward(tt_node *node, const tb_tensor *g, tb_tensor *grads);
tb_status tt_nn_resize_backward(tt_node *node, const tb_tensor *g, tb_tensor *grads) {
    resize_geometry geo = {(resize_mode)node->ints[0], node->ints[1] != 0, (int)node->ints[2],
                           {node->ints[5], node->ints[6]}, {node->ints[7], node->ints[8]}, {0, 0},
                           (tb_dtype)node->ints[11]};
    memcpy(&geo.scale_factor[0], &node->ints[9], sizeof(double));
    memcpy(&geo.scale_factor[1], &node->ints[10], sizeof(double));
    int64_t shape[4] = {node->ints[3], node->ints[4], geo.in_size[0], geo.in_size[1]};
    if (geo.spatial == 1)
        shape[2] = geo.in_size[1];
    return resize_backward(&geo, g, shape, &grads[0]);
}

static int scale_of(PyObject *o, double *out) {
    *out = o == Py_None ? 0.0 : PyFloat_AsDouble(o);
    return PyErr_Occurred() ? -1 : 0;
}

/* _tt_interpolate(x, mode, align_corners, out_sizes, scale_factors): x [N, C, W] or [N, C, H, W];
 * mode 0 nearest, 1 nearest-exact, 2 (bi)linear; out_sizes a tuple of spatial sizes; scale_factors a
 * tuple of floats or Nones (the scale the kernel uses; None: in / out). */
static PyObject *py_interpolate(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    (void)m;
    if (nargs != 5 || !tt_check(args[0]) || !PyTuple_Check(args[3]) || !PyTuple_Check(args[4]))
        return PyErr_Format(PyExc_TypeError, "_tt_interpolate(x, mode, align_corners, out_sizes, scales)"), NULL;
    const tb_tensor *x = tt_data(args[0]);
    long mode = PyLong_AsLong(args[1]);
    int align = PyObject_IsTrue(args[2]);
    if (PyErr_Occurred())
        return NULL;
    if (mode < 0 || mode >= RESIZE_MODE_COUNT)
        return PyErr_Format(PyExc_ValueError, "interpolate: unknown mode %ld", mode), NULL;
    if (x->ndim != 3 && x->ndim != 4)
        return PyErr_Format(PyExc_NotImplementedError, "turbo_torch: interpolate takes 3-D or 4-D input, got %d-D",
                            x->ndim), NULL;
    if (x->dtype != TB_F32 && x->dtype != TB_F64)
        return PyErr_Format(PyExc_NotImplementedError, "turbo_torch: interpolate runs in float32 and float64 only "
                            "(got %s)", tb_dtype_name(x->dtype)), NULL;
    int spatial = x->ndim - 2;
    if (PyTuple_GET_SIZE(args[3]) != spatial || PyTuple_GET_SIZE(args[4]) != spatial)
        return PyErr_Format(PyExc_ValueError, "interpolate: expected %d output sizes and scales", spatial), NULL;
    resize_geometry geo = {(resize_mode)mode, align != 0, spatial, {1, 1}, {1, 1}, {0, 0}, x->dtype};
    for (int d = 0; d < spatial; d++) {
        int slot = d + 2 - spatial;
        geo.in_size[slot] = x->shape[2 + d];
        geo.out_size[slot] = PyLong_AsLongLong(PyTuple_GET_ITEM(args[3], d));
        if (scale_of(PyTuple_GET_ITEM(args[4], d), &geo.scale_factor[slot]) != 0)
            return NULL;
        if (geo.out_size[slot] <= 0 || geo.in_size[slot] <= 0)
            return PyErr_Format(PyExc_RuntimeError, "Input and output sizes should be greater than 0, but got "
                                "input size %lld and output size %lld", (long long)geo.in_size[slot],
                                (long long)geo.out_size[slot]), NULL;
    }
    int64_t out_shape[4] = {x->shape[0], x->shape[1], geo.out_size[spatial == 1 ? 1 : 0], geo.out_size[1]};
    tb_tensor xc = {0}, out = {0};
    tb_status status = tb_tensor_contiguous(x, x->dtype, &xc);
    if (status == TB_OK) {
        Py_BEGIN_ALLOW_THREADS
        status = resize_run(&geo, false, &xc, x->ndim, out_shape, &out);
        Py_END_ALLOW_THREADS
    }
    tb_tensor_release(&xc);
    if (status != TB_OK)
        return tt_raise(status);
    PyObject *result = tt_wrap(&out);
    if (result && tt_needs_grad(1, &args[0])) {
        static const char *names[2][RESIZE_MODE_COUNT] = {
            {"UpsampleNearest1DBackward0", "UpsampleNearestExact1DBackward0", "UpsampleLinear1DBackward0"},
            {"UpsampleNearest2DBackward0", "UpsampleNearestExact2DBackward0", "UpsampleBilinear2DBackward0"}};
        tt_node *node = tt_node_new(TT_NODE_NN, TT_NN_RESIZE, names[spatial - 1][mode], 1, &args[0]);
        if (!node) {
            Py_DECREF(result);
            return NULL;
        }
        int64_t ints[12] = {mode, align != 0, spatial, x->shape[0], x->shape[1], geo.in_size[0], geo.in_size[1],
                            geo.out_size[0], geo.out_size[1], 0, 0, (int64_t)x->dtype};
        memcpy(&ints[9], &geo.scale_factor[0], sizeof(double));
        memcpy(&ints[10], &geo.scale_factor[1], sizeof(double));
        memcpy(node->ints, ints, sizeof ints);
        tt_set_grad_fn(result, node);
    }
    return result;
}

static PyMethodDef resize_functions[] = {
    {"_tt_interpolate", (PyCFunction)(void (*)(void))py_interpolate, METH_FASTCALL, NULL},
    {NULL},
};

int tt_register_nn_resize(PyObject *module);
int tt_register_nn_resize(PyObject *module) { return PyModule_AddFunctions(module, resize_functions); }
