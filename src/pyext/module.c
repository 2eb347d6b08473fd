/* The torchburn._C module: initialization (ISA selection), machine facts, memory statistics and
 * thread settings; each binding file registers its own functions through a tb_pyext_register_* hook. */
#include "pyext.h"
#include "torchburn/alloc.h"
#include "torchburn/cpu.h"
#include "torchburn/engine.h"
#include "torchburn/ops_nn.h"
#include "torchburn/probe.h"
#include "torchburn/thread_pool.h"
#include "kernels/conv_winograd.h"
#include "kernels/gemm_internal.h"

#include <string.h>

static int add_bool(PyObject *dict, const char *key, int value) {
    PyObject *item = PyBool_FromLong(value);
    int result = PyDict_SetItemString(dict, key, item);
    Py_DECREF(item);
    return result;
}

static PyObject *py_cpu_info(PyObject *module, PyObject *unused) {
    const tb_cpu_features *f = tb_cpu_get_features();
    PyObject *features = PyDict_New();
    if (!features)
        return NULL;
    struct { const char *name; int value; } flags[] = {
        {"sse4_2", f->sse42}, {"avx", f->avx}, {"avx2", f->avx2}, {"fma", f->fma}, {"f16c", f->f16c},
        {"bmi2", f->bmi2}, {"avx512f", f->avx512f}, {"avx512bw", f->avx512bw}, {"avx512vl", f->avx512vl},
        {"avx512dq", f->avx512dq}, {"avx512_vnni", f->avx512vnni}, {"avx512_bf16", f->avx512bf16},
        {"avx512_fp16", f->avx512fp16}, {"avx_vnni", f->avx_vnni}, {"amx_tile", f->amx_tile},
        {"amx_bf16", f->amx_bf16}, {"amx_int8", f->amx_int8}, {"amx_os_enabled", f->amx_os}, {"neon", f->neon},
        {"asimd_dotprod", f->asimd_dotprod},
    };
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        if (add_bool(features, flags[i].name, flags[i].value) != 0) {
            Py_DECREF(features);
            return NULL;
        }
    }
    PyObject *supported = PyList_New(0);
    for (int isa = 0; supported && isa < TB_ISA_COUNT; isa++) {
        if (tb_isa_supported((tb_isa)isa)) {
            PyObject *name = PyUnicode_FromString(tb_isa_name((tb_isa)isa));
            PyList_Append(supported, name);
            Py_XDECREF(name);
        }
    }
    const tb_cache_level *levels[3] = {&f->l1d, &f->l2, &f->l3};
    PyObject *caches = PyDict_New();
    static const char *const level_names[3] = {"l1d", "l2", "l3"};
    for (int i = 0; caches && i < 3; i++) {
        PyObject *level = Py_BuildValue("{s:L,s:i,s:i,s:i}", "size_bytes", (long long)levels[i]->size_bytes,
                                        "line_bytes", levels[i]->line_bytes, "ways", levels[i]->ways, "shared_by",
                                        levels[i]->shared_by);
        if (!level || PyDict_SetItemString(caches, level_names[i], level) != 0)
            Py_CLEAR(caches);
        Py_XDECREF(level);
    }
    tb_isa isa = tb_isa_active();
    char gemm_f32[160], gemm_bf16[96], conv[160], qmatmul[64];
    tb_kernel_variants(isa, gemm_f32, gemm_bf16, conv, qmatmul);
    PyObject *kernels = Py_BuildValue("{s:s,s:s,s:s,s:s}", "gemm_f32", gemm_f32, "gemm_bf16", gemm_bf16, "conv", conv,
                                      "int8_qmatmul", qmatmul);
    if (!supported || !caches || !kernels) {
        Py_XDECREF(features);
        Py_XDECREF(supported);
        Py_XDECREF(caches);
        Py_XDECREF(kernels);
        return NULL;
    }
    PyObject *result = Py_BuildValue(
        "{s:s,s:s,s:N,s:s,s:s,s:N,s:i,s:i,s:s,s:I,s:I,s:I,s:s,s:N,s:N}", "vendor", f->vendor, "brand", f->brand,
        "features", features, "isa", tb_isa_name(isa), "best_isa", tb_isa_name(tb_isa_best()), "supported_isas",
        supported, "physical_cores", tb_physical_cores(), "num_threads", tb_num_threads(),
        "parallel_runtime", tb_get_parallel_runtime() == TB_PARALLEL_HOST_OPENMP ? "openmp" : "pool", "family", f->family,
        "model", f->model, "stepping", f->stepping, "microarchitecture", tb_cpu_uarch_name(), "caches", caches,
        "kernels", kernels);
    return result;
}

/* Test hook: forces the GEMM cache blocking (0 = computed from CPUID); see kernels/gemm_blocking.c. */
static PyObject *py_gemm_set_blocking(PyObject *module, PyObject *args) {
    long long mc, kc, nc;
    if (!PyArg_ParseTuple(args, "LLL", &mc, &kc, &nc))
        return NULL;
    tb_gemm_set_blocking_override(mc, kc, nc);
    tb_gemm_blocking b = tb_gemm_blocking_for(tb_gemm_microkernel_for(tb_isa_active()));
    return Py_BuildValue("{s:L,s:L,s:L,s:s}", "mc", (long long)b.mc, "kc", (long long)b.kc, "nc", (long long)b.nc,
                         "source", b.source);
}

/* "highest" or "bf16": the precision f32 products run at by default (TORCHBURN_MATMUL_PRECISION). */
static PyObject *py_set_matmul_precision(PyObject *module, PyObject *arg) {
    const char *name = PyUnicode_AsUTF8(arg);
    if (!name)
        return NULL;
    if (strcmp(name, "highest") == 0 || strcmp(name, "high") == 0)
        tb_gemm_set_default_precision(TB_GEMM_PRECISION_HIGHEST);
    else if (strcmp(name, "medium") == 0 || strcmp(name, "bf16") == 0)
        tb_gemm_set_default_precision(TB_GEMM_PRECISION_BF16);
    else
        return PyErr_Format(PyExc_ValueError, "matmul precision '%s': expected highest, high, medium or bf16", name);
    Py_RETURN_NONE;
}

static PyObject *py_get_matmul_precision(PyObject *module, PyObject *unused) {
    return PyUnicode_FromString(tb_gemm_default_precision() == TB_GEMM_PRECISION_BF16 ? "bf16" : "highest");
}

/* set_prepack(bool): keep packed copies of GEMM weights on their storage (TORCHBURN_PREPACK). */
static PyObject *py_set_prepack(PyObject *module, PyObject *arg) {
    int enabled = PyObject_IsTrue(arg);
    if (enabled < 0)
        return NULL;
    tb_gemm_set_prepack(enabled != 0);
    Py_RETURN_NONE;
}

static PyObject *py_get_prepack(PyObject *module, PyObject *unused) { return PyBool_FromLong(tb_gemm_prepack_enabled()); }

/* conv_set_winograd(bool): let 3x3 stride-1 convolutions take the Winograd path (TORCHBURN_CONV_WINOGRAD). */
static PyObject *py_conv_set_winograd(PyObject *module, PyObject *arg) {
    int enabled = PyObject_IsTrue(arg);
    if (enabled < 0)
        return NULL;
    tb_winograd_set_enabled(enabled != 0);
    Py_RETURN_NONE;
}

static PyObject *py_conv_get_winograd(PyObject *module, PyObject *unused) { return PyBool_FromLong(tb_winograd_enabled()); }

static PyObject *py_conv_winograd_calls(PyObject *module, PyObject *unused) {
    return PyLong_FromLongLong((long long)tb_winograd_calls());
}

/* weight_cache_counts() -> dict: weights packed into the caches and calls that reused a cached pack. */
static PyObject *py_weight_cache_counts(PyObject *module, PyObject *unused) {
    tb_weight_cache_counts c;
    tb_weight_cache_counts_get(&c);
    return Py_BuildValue("{s:L,s:L,s:L,s:L}", "gemm_packs", (long long)c.gemm_packs, "gemm_hits", (long long)c.gemm_hits,
                         "conv_packs", (long long)c.conv_packs, "conv_hits", (long long)c.conv_hits);
}

/* prepacked_bytes(tensor) -> int: bytes of the packed GEMM copy cached on the tensor's storage. */
static PyObject *py_prepacked_bytes(PyObject *module, PyObject *arg) {
    if (!tb_py_tensor_check(arg))
        return PyErr_Format(PyExc_TypeError, "prepacked_bytes() takes a torchburn tensor, got %s", Py_TYPE(arg)->tp_name);
    return PyLong_FromSize_t(tb_gemm_cached_b_bytes(((tb_py_tensor *)arg)->tensor.storage));
}

static PyObject *py_set_isa(PyObject *module, PyObject *arg) {
    const char *name = PyUnicode_AsUTF8(arg);
    if (!name)
        return NULL;
    tb_isa isa;
    tb_status status = tb_isa_from_name(name, &isa);
    if (status == TB_OK)
        status = tb_isa_set(isa);
    if (status != TB_OK)
        return tb_py_raise(status);
    Py_RETURN_NONE;
}

static PyObject *py_memory_stats(PyObject *module, PyObject *unused) {
    tb_alloc_stats stats;
    tb_alloc_get_stats(&stats);
    return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K}", "bytes_live", (unsigned long long)stats.bytes_live,
                         "bytes_peak", (unsigned long long)stats.bytes_peak, "bytes_cached",
                         (unsigned long long)stats.bytes_cached, "allocations", (unsigned long long)stats.allocations,
                         "frees", (unsigned long long)stats.frees, "reuse_hits", (unsigned long long)stats.reuse_hits,
                         "failures", (unsigned long long)stats.failures, "copies",
                         (unsigned long long)tb_tensor_copy_count());
}

static PyObject *py_memory_trim(PyObject *module, PyObject *unused) {
    tb_alloc_trim();
    Py_RETURN_NONE;
}

static PyObject *py_set_num_threads(PyObject *module, PyObject *arg) {
    int overflow = 0;
    long long n = PyLong_AsLongLongAndOverflow(arg, &overflow);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    if (overflow < 0 || n < 1) {
        PyObject *text = PyObject_Repr(arg);
        PyErr_Format(PyExc_ValueError, "set_num_threads: n must be >= 1, got %s", text ? PyUnicode_AsUTF8(text) : "?");
        Py_XDECREF(text);
        return NULL;
    }
    tb_status status = tb_set_num_threads((int)(overflow > 0 || n > 1 << 20 ? 1 << 20 : n));
    if (status != TB_OK)
        return tb_py_raise(status);
    Py_RETURN_NONE;
}

static PyObject *py_get_num_threads(PyObject *module, PyObject *unused) { return PyLong_FromLong(tb_num_threads()); }

static const char *const parallel_runtime_names[] = {"pool", "openmp"};

static PyObject *py_set_parallel_runtime(PyObject *module, PyObject *arg) {
    const char *name = PyUnicode_Check(arg) ? PyUnicode_AsUTF8(arg) : NULL;
    if (!name) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "set_parallel_runtime: expected 'pool' or 'openmp'");
        return NULL;
    }
    int runtime = -1;
    for (int i = 0; i < 2; i++)
        if (strcmp(name, parallel_runtime_names[i]) == 0)
            runtime = i;
    if (runtime < 0) {
        PyErr_Format(PyExc_ValueError, "set_parallel_runtime: expected 'pool' or 'openmp', got %R", arg);
        return NULL;
    }
    tb_status status = tb_set_parallel_runtime((tb_parallel_runtime)runtime);
    if (status != TB_OK)
        return tb_py_raise(status);
    Py_RETURN_NONE;
}

static PyObject *py_get_parallel_runtime(PyObject *module, PyObject *unused) {
    return PyUnicode_FromString(parallel_runtime_names[tb_get_parallel_runtime() == TB_PARALLEL_HOST_OPENMP]);
}

static PyObject *py_host_openmp_library(PyObject *module, PyObject *unused) {
    const char *path = tb_host_openmp_library();
    if (!path)
        Py_RETURN_NONE;
    return PyUnicode_DecodeFSDefault(path);
}

static PyObject *py_probe_peak_gflops(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "probe_peak_gflops(isa, seconds)");
        return NULL;
    }
    const char *name = PyUnicode_AsUTF8(args[0]);
    double seconds = PyFloat_AsDouble(args[1]);
    if (!name || PyErr_Occurred())
        return NULL;
    tb_isa isa;
    double gflops = 0;
    tb_status status = tb_isa_from_name(name, &isa);
    if (status == TB_OK) {
        Py_BEGIN_ALLOW_THREADS
        status = tb_probe_peak_gflops(isa, seconds, &gflops);
        Py_END_ALLOW_THREADS
    }
    if (status != TB_OK)
        return tb_py_raise(status);
    return PyFloat_FromDouble(gflops);
}

static PyObject *py_probe_read_bandwidth(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "probe_read_bandwidth(nbytes, repeats)");
        return NULL;
    }
    Py_ssize_t nbytes = PyLong_AsSsize_t(args[0]);
    long repeats = PyLong_AsLong(args[1]);
    if (PyErr_Occurred())
        return NULL;
    if (nbytes <= 0) {
        PyErr_SetString(PyExc_ValueError, "probe_read_bandwidth: nbytes must be positive");
        return NULL;
    }
    double gbps = 0;
    tb_status status;
    Py_BEGIN_ALLOW_THREADS
    status = tb_probe_read_bandwidth((size_t)nbytes, (int)repeats, &gbps);
    Py_END_ALLOW_THREADS
    if (status != TB_OK)
        return tb_py_raise(status);
    return PyFloat_FromDouble(gbps);
}

static PyMethodDef module_functions[] = {
    {"probe_peak_gflops", (PyCFunction)(void (*)(void))py_probe_peak_gflops, METH_FASTCALL,
     "probe_peak_gflops(isa, seconds) -> float: measured f32 FMA peak on all kernel threads."},
    {"probe_read_bandwidth", (PyCFunction)(void (*)(void))py_probe_read_bandwidth, METH_FASTCALL,
     "probe_read_bandwidth(nbytes, repeats) -> float: measured memory read GB/s on all kernel threads."},
    {"gemm_set_blocking", py_gemm_set_blocking, METH_VARARGS,
     "gemm_set_blocking(mc, kc, nc): force the GEMM cache blocking (0 = from CPUID); returns the blocking in use."},
    {"set_matmul_precision", py_set_matmul_precision, METH_O,
     "set_matmul_precision('highest' | 'high' | 'medium' | 'bf16'): the precision of f32 matmuls."},
    {"get_matmul_precision", py_get_matmul_precision, METH_NOARGS, "'highest' or 'bf16'."},
    {"weight_cache_counts", py_weight_cache_counts, METH_NOARGS,
     "weight_cache_counts() -> {gemm_packs, gemm_hits, conv_packs, conv_hits}: weights packed into the caches "
     "kept on their storage, and calls that reused one (process-wide)"},
    {"conv_set_winograd", py_conv_set_winograd, METH_O,
     "conv_set_winograd(bool): 3x3 stride-1 convolutions of 16+ channels on Winograd F(2x2,3x3) (default on; "
     "TORCHBURN_CONV_WINOGRAD=0 off)."},
    {"conv_get_winograd", py_conv_get_winograd, METH_NOARGS, "conv_get_winograd() -> bool: whether the Winograd path is on."},
    {"conv_winograd_calls", py_conv_winograd_calls, METH_NOARGS,
     "conv_winograd_calls() -> int: convolutions run on the Winograd path since the process started."},
    {"set_prepack", py_set_prepack, METH_O,
     "set_prepack(bool): keep packed copies of matmul weights with them (default on; TORCHBURN_PREPACK=0 off)."},
    {"get_prepack", (PyCFunction)(void (*)(void))py_get_prepack, METH_NOARGS, "Whether weights are prepacked."},
    {"prepacked_bytes", py_prepacked_bytes, METH_O,
     "prepacked_bytes(tensor) -> int: bytes of the packed matmul copy cached with the tensor's storage (0: none)."},
    {"cpu_info", py_cpu_info, METH_NOARGS, "CPU vendor, brand, features, selected and supported ISAs, cores, threads."},
    {"set_isa", py_set_isa, METH_O, "Forces the kernel ISA ('scalar', 'avx2', 'avx512'); refuses one the CPU lacks."},
    {"memory_stats", py_memory_stats, METH_NOARGS, "Allocator statistics and the count of layout/dtype copies."},
    {"memory_trim", py_memory_trim, METH_NOARGS, "Returns cached allocator blocks to the system."},
    {"set_num_threads", py_set_num_threads, METH_O, "Sets the number of threads kernels use."},
    {"get_num_threads", py_get_num_threads, METH_NOARGS, "The number of threads kernels use."},
    {"set_parallel_runtime", py_set_parallel_runtime, METH_O,
     "Runs parallel loops on torchburn's pool ('pool') or the loaded OpenMP runtime's team ('openmp')."},
    {"get_parallel_runtime", py_get_parallel_runtime, METH_NOARGS, "'pool' or 'openmp'."},
    {"host_openmp_library", py_host_openmp_library, METH_NOARGS,
     "The path of the OpenMP runtime loaded in this process, or None."},
    {NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, .m_name = "torchburn._C",
    .m_doc = "torchburn's C runtime: tensors, kernels, and the layers built on them.", .m_size = -1,
    .m_methods = module_functions,
};

PyMODINIT_FUNC PyInit__C(void) {
    tb_status status = tb_isa_init();
    if (status != TB_OK) {
        tb_py_raise(status);
        return NULL;
    }
    status = tb_gemm_blocking_init();
    if (status == TB_OK)
        status = tb_gemm_precision_init();
    if (status == TB_OK)
        status = tb_gemm_amx_init();
    if (status != TB_OK) {
        tb_py_raise(status);
        return NULL;
    }
    /* after the ISA: TORCHBURN_ENGINE=reference forces the scalar level and one thread */
    status = tb_engine_select_from_env();
    if (status != TB_OK) {
        tb_py_raise(status);
        return NULL;
    }
    PyObject *module = PyModule_Create(&module_def);
    if (!module)
        return NULL;
    if (tb_pyext_register_tensor(module) != 0 || tb_pyext_register_ops(module) != 0 ||
        tb_pyext_register_files(module) != 0 || tb_pyext_register_tokenizer(module) != 0 ||
        tb_pyext_register_quant(module) != 0 || tb_pyext_register_nn(module) != 0 ||
        tb_pyext_register_graph(module) != 0 || tb_pyext_register_llm(module) != 0 ||
        tb_pyext_register_eager(module) != 0 || tb_pyext_register_engine(module) != 0 ||
        tb_pyext_register_llm_batch(module) != 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
