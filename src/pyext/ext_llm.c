/* Python bindings of the llm layer: torchburn._C._LLMModel (load + info), _LLMSession (KV cache, logits,
 * generation with a per-token callback), _LLMGeneration (step-wise generation for Python generators) and
 * two sampler hooks for tests. The GIL is released around every forward pass; the token callback takes it
 * back once per token, runs the Python callback and checks for signals, so Ctrl-C stops generation
 * between tokens and leaves the session consistent. torchburn.llm.LLM is the documented Python API. */
#include <string.h>

#include "pyext.h"
#include "torchburn/alloc.h"
#include "torchburn/llm.h"

typedef struct py_llm_model {
    PyObject_HEAD
    tb_llm_model *model;
} py_llm_model;

typedef struct py_llm_session {
    PyObject_HEAD
    tb_llm_session *session;
    PyObject *model; /* keeps the weights alive */
    int busy;        /* a call is running with the GIL released */
    uint64_t epoch;  /* bumped by every call that changes the cache; invalidates older generations */
} py_llm_session;

typedef struct py_llm_generation {
    PyObject_HEAD
    tb_llm_generation *generation;
    py_llm_session *session; /* owned reference */
    uint64_t epoch;
} py_llm_generation;

static PyTypeObject *model_type, *session_type, *generation_type;

/* ---- helpers ---- */

static int32_t *ids_from_sequence(PyObject *seq, const char *what, int64_t *count) {
    PyObject *fast = PySequence_Fast(seq, "token ids must be a sequence of ints");
    if (!fast)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    int32_t *ids = PyMem_Malloc((size_t)(n ? n : 1) * sizeof *ids);
    if (!ids) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(fast, i);
        if (!PyLong_Check(item)) {
            PyErr_Format(PyExc_TypeError, "%s[%zd] is %.80s, not an int", what, i, Py_TYPE(item)->tp_name);
            PyMem_Free(ids);
            Py_DECREF(fast);
            return NULL;
        }
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(item, &overflow);
        if (overflow || v < INT32_MIN || v > INT32_MAX) {
            PyErr_Format(PyExc_ValueError, "%s[%zd] = %S is out of range", what, i, item);
            PyMem_Free(ids);
            Py_DECREF(fast);
            return NULL;
        }
        ids[i] = (int32_t)v;
    }
    Py_DECREF(fast);
    *count = n;
    return ids;
}

static PyObject *list_from_ids(const int32_t *ids, int64_t count) {
    PyObject *list = PyList_New((Py_ssize_t)count);
    for (int64_t i = 0; list && i < count; i++) {
        PyObject *v = PyLong_FromLong(ids[i]);
        if (!v) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, v);
    }
    return list;
}

static PyObject *stats_dict(const tb_llm_stats *s) {
    const double prefill_tokens = (double)(s->prompt_tokens - s->reused_tokens);
    const double decode_tokens = (double)(s->generated_tokens > 1 ? s->generated_tokens - 1 : 0);
    return Py_BuildValue("{s:L,s:L,s:L,s:d,s:d,s:d,s:d,s:d,s:s}", "prompt_tokens", (long long)s->prompt_tokens,
                         "reused_tokens", (long long)s->reused_tokens, "generated_tokens",
                         (long long)s->generated_tokens, "ttft_s", s->ttft_seconds, "prefill_s", s->prefill_seconds,
                         "prefill_tok_s", s->prefill_seconds > 0 ? prefill_tokens / s->prefill_seconds : 0.0,
                         "decode_s", s->decode_seconds, "decode_tok_s",
                         s->decode_seconds > 0 ? decode_tokens / s->decode_seconds : 0.0, "finish_reason",
                         tb_llm_finish_name(s->finish));
}

/* Parses the sampling keywords shared by generate/begin and the sampler hooks. */
static int parse_sampling(PyObject *temperature, PyObject *top_k, PyObject *top_p, PyObject *min_p,
                          PyObject *repetition_penalty, PyObject *seed, tb_llm_sampling *out) {
    tb_llm_sampling_default(out);
    out->temperature = (float)PyFloat_AsDouble(temperature);
    out->top_p = (float)PyFloat_AsDouble(top_p);
    out->min_p = (float)PyFloat_AsDouble(min_p);
    out->repetition_penalty = (float)PyFloat_AsDouble(repetition_penalty);
    out->top_k = PyLong_AsLongLong(top_k);
    if (PyErr_Occurred())
        return -1;
    if (seed && seed != Py_None) {
        out->seed = PyLong_AsUnsignedLongLongMask(seed);
        if (PyErr_Occurred())
            return -1;
    }
    tb_status status = tb_llm_sampling_check(out);
    if (status != TB_OK) {
        tb_py_raise(status);
        return -1;
    }
    return 0;
}

static int session_enter(py_llm_session *self) {
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "this LLM is already running a call in another thread");
        return -1;
    }
    self->busy = 1;
    return 0;
}

/* ---- model ---- */

typedef struct progress_context {
    PyObject *callback;
    PyThreadState *saved;
    int failed;
} progress_context;

static void progress_trampoline(void *context, int64_t done, int64_t total) {
    progress_context *p = context;
    if (p->failed)
        return;
    PyEval_RestoreThread(p->saved);
    PyObject *result = PyObject_CallFunction(p->callback, "LL", (long long)done, (long long)total);
    if (!result) {
        p->failed = 1;
        /* a failing progress display must not break loading, but Ctrl-C inside it must stop it: the
         * exception stays set and the next cancel point (signal_hook) sees it */
        if (!PyErr_ExceptionMatches(PyExc_KeyboardInterrupt))
            PyErr_Clear();
    }
    Py_XDECREF(result);
    p->saved = PyEval_SaveThread();
}

static PyObject *model_load(PyObject *cls, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"path", "quant", "group_size", "cache_path", "cache_key", "progress",
                               "exact_activations", NULL};
    PyObject *path_obj, *cache_obj = Py_None, *progress = Py_None;
    const char *quant_name = "int4", *cache_key = "";
    long long group_size = 64;
    int exact = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O&|sLOsOp:load", keywords, PyUnicode_FSConverter, &path_obj,
                                     &quant_name, &group_size, &cache_obj, &cache_key, &progress, &exact))
        return NULL;
    PyObject *cache_bytes = NULL;
    if (cache_obj != Py_None && !PyUnicode_FSConverter(cache_obj, &cache_bytes)) {
        Py_DECREF(path_obj);
        return NULL;
    }
    tb_llm_load_options options = {.group_size = group_size,
                                   .cache_path = cache_bytes ? PyBytes_AS_STRING(cache_bytes) : NULL,
                                   .cache_key = cache_key,
                                   .exact_activations = exact != 0};
    tb_status status = tb_llm_quant_from_name(quant_name, &options.quant);
    tb_llm_model *model = NULL;
    progress_context pc = {.callback = progress};
    if (status == TB_OK) {
        if (progress != Py_None) {
            options.progress = progress_trampoline;
            options.progress_context = &pc;
        }
        tb_py_interrupt interrupt;
        tb_py_interrupt_begin(&pc.saved, &interrupt);
        pc.saved = PyEval_SaveThread();
        status = tb_llm_model_load(PyBytes_AS_STRING(path_obj), &options, &model);
        PyEval_RestoreThread(pc.saved);
        tb_py_interrupt_end(&interrupt);
    }
    Py_DECREF(path_obj);
    Py_XDECREF(cache_bytes);
    if (status == TB_OK && PyErr_Occurred()) { /* Ctrl-C in the progress display after the last cancel point */
        tb_llm_model_free(model);
        return NULL;
    }
    if (status != TB_OK)
        return tb_py_raise(status);
    py_llm_model *self = PyObject_New(py_llm_model, model_type);
    if (!self) {
        tb_llm_model_free(model);
        return NULL;
    }
    self->model = model;
    return (PyObject *)self;
}

static void model_dealloc(py_llm_model *self) {
    PyTypeObject *type = Py_TYPE(self);
    tb_llm_model_free(self->model);
    PyObject_Free(self);
    Py_DECREF(type);
}

static const char *cache_state_name(tb_llm_cache_state state) {
    switch (state) {
    case TB_LLM_CACHE_HIT: return "hit";
    case TB_LLM_CACHE_WRITTEN: return "written";
    case TB_LLM_CACHE_WRITE_FAILED: return "write_failed";
    case TB_LLM_CACHE_REBUILT: return "rebuilt";
    default: return "unused";
    }
}

static PyObject *model_get_info(py_llm_model *self, void *closure) {
    tb_llm_model_info info;
    tb_llm_model_get_info(self->model, &info);
    return Py_BuildValue("{s:s,s:L,s:L,s:L,s:L,s:s,s:s}", "quant", tb_llm_quant_name(info.quant), "group_size",
                         (long long)info.group_size, "parameters", (long long)info.parameters, "weight_bytes",
                         (long long)info.weight_bytes, "decode_bytes_per_token", (long long)info.decode_bytes_per_token,
                         "cache", cache_state_name(info.cache_state), "cache_message", info.cache_message);
}

static PyObject *token_id_list(const tb_hf_token_ids *ids) {
    PyObject *list = PyList_New(0);
    for (int i = 0; list && i < ids->count; i++) {
        PyObject *v = PyLong_FromLongLong(ids->ids[i]);
        if (!v || PyList_Append(list, v) != 0)
            Py_CLEAR(list);
        Py_XDECREF(v);
    }
    return list;
}

static PyObject *optional_int(int64_t v) {
    if (v < 0)
        Py_RETURN_NONE;
    return PyLong_FromLongLong(v);
}

static PyObject *model_get_config(py_llm_model *self, void *closure) {
    const tb_hf_config *c = tb_llm_model_config(self->model);
    const tb_hf_generation_config *g = &c->generation;
    PyObject *generation = Py_BuildValue(
        "{s:d,s:d,s:L,s:d,s:O,s:L,s:L,s:N,s:N,s:O}", "temperature", g->temperature, "top_p", g->top_p, "top_k",
        (long long)g->top_k, "repetition_penalty", g->repetition_penalty, "do_sample", g->do_sample ? Py_True : Py_False,
        "max_new_tokens", (long long)g->max_new_tokens, "max_length", (long long)g->max_length, "eos_token_ids",
        token_id_list(&g->eos), "bos_token_id", optional_int(g->bos_token_id), "present",
        c->has_generation_config ? Py_True : Py_False);
    if (!generation)
        return NULL;
    PyObject *present = PyDict_New();
    if (!present) {
        Py_DECREF(generation);
        return NULL;
    }
    struct { const char *name; unsigned bit; } bits[] = {
        {"temperature", TB_HF_GEN_TEMPERATURE}, {"top_p", TB_HF_GEN_TOP_P}, {"top_k", TB_HF_GEN_TOP_K},
        {"repetition_penalty", TB_HF_GEN_REPETITION_PENALTY}, {"do_sample", TB_HF_GEN_DO_SAMPLE},
        {"max_new_tokens", TB_HF_GEN_MAX_NEW_TOKENS},
    };
    for (size_t i = 0; i < sizeof bits / sizeof bits[0]; i++)
        PyDict_SetItemString(present, bits[i].name, (g->present & bits[i].bit) ? Py_True : Py_False);
    PyDict_SetItemString(generation, "fields_set", present);
    Py_DECREF(present);
    return Py_BuildValue("{s:s,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:d,s:O,s:L,s:s,s:d,s:N,s:N,s:s,s:N}", "model_type",
                         tb_hf_model_type_name(c->model_type), "vocab_size", (long long)c->vocab_size, "hidden_size",
                         (long long)c->hidden_size, "intermediate_size", (long long)c->intermediate_size,
                         "num_hidden_layers", (long long)c->num_hidden_layers, "num_attention_heads",
                         (long long)c->num_attention_heads, "num_key_value_heads", (long long)c->num_key_value_heads,
                         "head_dim", (long long)c->head_dim, "max_position_embeddings",
                         (long long)c->max_position_embeddings, "rms_norm_eps", c->rms_norm_eps, "tie_word_embeddings",
                         c->tie_word_embeddings ? Py_True : Py_False, "sliding_window", (long long)c->sliding_window,
                         "rope_type", tb_hf_rope_type_name(c->rope.type), "rope_theta", c->rope.theta, "bos_token_id",
                         optional_int(c->bos_token_id), "eos_token_ids", token_id_list(&c->eos), "dtype", c->dtype,
                         "generation", generation);
}

static PyObject *model_to_engine(py_llm_model *self, PyObject *arg) {
    const char *name = PyUnicode_AsUTF8(arg);
    if (!name)
        return NULL;
    tb_status status;
    Py_BEGIN_ALLOW_THREADS
    status = tb_llm_model_to_engine(self->model, name);
    Py_END_ALLOW_THREADS
    if (status != TB_OK)
        return tb_py_raise(status);
    Py_RETURN_NONE;
}

static PyObject *model_get_on_gpu(py_llm_model *self, void *closure) {
    (void)closure;
    return PyBool_FromLong(tb_llm_model_on_gpu(self->model));
}

static PyMethodDef model_methods[] = {
    {"to_engine", (PyCFunction)model_to_engine, METH_O,
     "to_engine(name): upload the weights once to a GPU engine ('vulkan'); later sessions run there"},
    {"load", (PyCFunction)(void (*)(void))model_load, METH_VARARGS | METH_KEYWORDS | METH_CLASS,
     "load(path, quant='int4', group_size=64, cache_path=None, cache_key='', progress=None, "
     "exact_activations=False) -> _LLMModel"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef model_getset[] = {
    {"info", (getter)model_get_info, NULL, "run format, sizes and quantized-cache state", NULL},
    {"config", (getter)model_get_config, NULL, "the parsed config.json and generation defaults", NULL},
    {"on_gpu", (getter)model_get_on_gpu, NULL, "whether the forward runs on a GPU engine", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot model_slots[] = {
    {Py_tp_dealloc, model_dealloc},
    {Py_tp_methods, model_methods},
    {Py_tp_getset, model_getset},
    {Py_tp_doc, "Weights of a llama-family model in their run format (see torchburn.llm.LLM)."},
    {0, NULL},
};

static PyType_Spec model_spec = {
    .name = "torchburn._C._LLMModel",
    .basicsize = sizeof(py_llm_model),
    .flags = Py_TPFLAGS_DEFAULT,
    .slots = model_slots,
};

/* ---- session ---- */

static PyObject *session_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"model", "max_seq_len", "kv_f16", NULL};
    PyObject *model;
    long long max_seq_len;
    int kv_f16 = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!L|p:_LLMSession", keywords, model_type, &model, &max_seq_len,
                                     &kv_f16))
        return NULL;
    tb_llm_session *session = NULL;
    tb_status status = tb_llm_session_new(((py_llm_model *)model)->model, max_seq_len, kv_f16 != 0, &session);
    if (status != TB_OK)
        return tb_py_raise(status);
    py_llm_session *self = (py_llm_session *)type->tp_alloc(type, 0);
    if (!self) {
        tb_llm_session_free(session);
        return NULL;
    }
    self->session = session;
    Py_INCREF(model);
    self->model = model;
    return (PyObject *)self;
}

static void session_dealloc(py_llm_session *self) {
    PyTypeObject *type = Py_TYPE(self);
    tb_llm_session_free(self->session);
    Py_XDECREF(self->model);
    type->tp_free(self);
    Py_DECREF(type);
}

static PyObject *session_truncate(py_llm_session *self, PyObject *arg) {
    long long length = PyLong_AsLongLong(arg);
    if (length == -1 && PyErr_Occurred())
        return NULL;
    if (session_enter(self) != 0)
        return NULL;
    tb_status status = tb_llm_session_truncate(self->session, length);
    self->busy = 0;
    self->epoch++;
    if (status != TB_OK)
        return tb_py_raise(status);
    Py_RETURN_NONE;
}

static PyObject *session_get_tokens(py_llm_session *self, void *closure) {
    return list_from_ids(tb_llm_session_tokens(self->session), tb_llm_session_length(self->session));
}

static PyObject *session_get_max_seq_len(py_llm_session *self, void *closure) {
    return PyLong_FromLongLong(tb_llm_session_max_seq_len(self->session));
}

/* logits(ids, all=True) -> Tensor [T, V] (or [1, V]): runs ids from an empty cache. */
static PyObject *session_logits(py_llm_session *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"ids", "all", NULL};
    PyObject *seq;
    int all = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|p:logits", keywords, &seq, &all))
        return NULL;
    int64_t count = 0;
    int32_t *ids = ids_from_sequence(seq, "token_ids", &count);
    if (!ids)
        return NULL;
    if (count < 1) {
        PyMem_Free(ids);
        PyErr_SetString(PyExc_ValueError, "logits() needs at least one token id");
        return NULL;
    }
    const int64_t vocab = tb_llm_model_config(((py_llm_model *)self->model)->model)->vocab_size;
    tb_tensor out = {0};
    const int64_t shape[2] = {all ? count : 1, vocab};
    tb_status status = tb_tensor_empty(TB_F32, 2, shape, TB_ALLOC_DEFAULT, &out);
    if (status != TB_OK) {
        PyMem_Free(ids);
        return tb_py_raise(status);
    }
    if (session_enter(self) != 0) {
        PyMem_Free(ids);
        tb_tensor_release(&out);
        return NULL;
    }
    self->epoch++;
    PyThreadState *saved;
    tb_py_interrupt interrupt;
    tb_py_interrupt_begin(&saved, &interrupt);
    saved = PyEval_SaveThread();
    status = tb_llm_session_truncate(self->session, 0);
    if (status == TB_OK)
        status = tb_llm_forward(self->session, ids, count, tb_tensor_data(&out), all != 0);
    PyEval_RestoreThread(saved);
    tb_py_interrupt_end(&interrupt);
    self->busy = 0;
    PyMem_Free(ids);
    if (status != TB_OK) {
        tb_tensor_release(&out);
        return tb_py_raise(status);
    }
    return tb_py_tensor_wrap(&out);
}

static int parse_generate_args(PyObject *args, PyObject *kwargs, const char *name, tb_llm_generate_desc *desc,
                               int32_t **prompt, int32_t **stops, PyObject **callback) {
    static char *keywords[] = {"prompt", "max_tokens", "temperature", "top_k", "top_p", "min_p",
                               "repetition_penalty", "seed", "stop_ids", "callback", "reproducible", NULL};
    PyObject *prompt_seq, *temperature, *top_k, *top_p, *min_p, *penalty, *seed = Py_None, *stop_seq = Py_None;
    long long max_tokens;
    int reproducible = 0;
    *callback = Py_None;
    char format[64];
    snprintf(format, sizeof format, "OLOOOOO|OOOp:%s", name);
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, format, keywords, &prompt_seq, &max_tokens, &temperature, &top_k,
                                     &top_p, &min_p, &penalty, &seed, &stop_seq, callback, &reproducible))
        return -1;
    memset(desc, 0, sizeof *desc);
    desc->max_tokens = max_tokens;
    desc->reproducible = reproducible != 0;
    if (parse_sampling(temperature, top_k, top_p, min_p, penalty, seed, &desc->sampling) != 0)
        return -1;
    *prompt = ids_from_sequence(prompt_seq, "prompt", &desc->prompt_count);
    if (!*prompt)
        return -1;
    desc->prompt = *prompt;
    *stops = NULL;
    if (stop_seq != Py_None) {
        *stops = ids_from_sequence(stop_seq, "stop_ids", &desc->stop_count);
        if (!*stops) {
            PyMem_Free(*prompt);
            return -1;
        }
        desc->stop_ids = *stops;
    }
    return 0;
}

typedef struct token_context {
    PyThreadState *saved;
    PyObject *callback; /* Python callable(token) -> truthy to stop, or None */
    PyObject *tokens;   /* list collecting every token */
    int error;          /* a Python exception is pending (KeyboardInterrupt, callback error) */
} token_context;

/* Runs with the GIL released by the caller: takes it back for one token. */
static int token_trampoline(void *context, int32_t token) {
    token_context *t = context;
    PyEval_RestoreThread(t->saved);
    int stop = 0;
    PyObject *value = PyLong_FromLong(token);
    if (!value || PyList_Append(t->tokens, value) != 0) {
        t->error = 1;
        stop = 1;
    }
    if (!stop && t->callback != Py_None) {
        PyObject *result = PyObject_CallOneArg(t->callback, value);
        if (!result) {
            t->error = 1;
            stop = 1;
        } else {
            stop = PyObject_IsTrue(result) == 1;
            Py_DECREF(result);
        }
    }
    Py_XDECREF(value);
    if (!stop && PyErr_CheckSignals() != 0) {
        t->error = 1;
        stop = 1;
    }
    t->saved = PyEval_SaveThread();
    return stop;
}

/* generate(prompt, max_tokens, temperature, top_k, top_p, min_p, repetition_penalty, seed=None,
 *          stop_ids=None, callback=None) -> (tokens, stats) */
static PyObject *session_generate(py_llm_session *self, PyObject *args, PyObject *kwargs) {
    tb_llm_generate_desc desc;
    int32_t *prompt = NULL, *stops = NULL;
    PyObject *callback;
    if (parse_generate_args(args, kwargs, "generate", &desc, &prompt, &stops, &callback) != 0)
        return NULL;
    token_context context = {.callback = callback, .tokens = PyList_New(0)};
    if (!context.tokens || session_enter(self) != 0) {
        PyMem_Free(prompt);
        PyMem_Free(stops);
        Py_XDECREF(context.tokens);
        return NULL;
    }
    self->epoch++;
    tb_llm_stats stats;
    tb_py_interrupt interrupt;
    tb_py_interrupt_begin(&context.saved, &interrupt);
    context.saved = PyEval_SaveThread();
    tb_status status = tb_llm_generate(self->session, &desc, token_trampoline, &context, NULL, 0, &stats);
    PyEval_RestoreThread(context.saved);
    tb_py_interrupt_end(&interrupt);
    self->busy = 0;
    PyMem_Free(prompt);
    PyMem_Free(stops);
    if (context.error || status != TB_OK) {
        Py_DECREF(context.tokens);
        if (context.error)
            return NULL; /* the Python exception (KeyboardInterrupt, callback error) propagates */
        return tb_py_raise(status);
    }
    PyObject *stats_obj = stats_dict(&stats);
    if (!stats_obj) {
        Py_DECREF(context.tokens);
        return NULL;
    }
    return Py_BuildValue("(NN)", context.tokens, stats_obj);
}

/* begin(...same arguments, no callback...) -> _LLMGeneration (runs the prompt) */
static PyObject *session_begin(py_llm_session *self, PyObject *args, PyObject *kwargs) {
    tb_llm_generate_desc desc;
    int32_t *prompt = NULL, *stops = NULL;
    PyObject *callback;
    if (parse_generate_args(args, kwargs, "begin", &desc, &prompt, &stops, &callback) != 0)
        return NULL;
    if (session_enter(self) != 0) {
        PyMem_Free(prompt);
        PyMem_Free(stops);
        return NULL;
    }
    self->epoch++;
    tb_llm_generation *generation = NULL;
    tb_status status;
    PyThreadState *saved;
    tb_py_interrupt interrupt;
    tb_py_interrupt_begin(&saved, &interrupt);
    saved = PyEval_SaveThread();
    status = tb_llm_generation_begin(self->session, &desc, &generation);
    PyEval_RestoreThread(saved);
    tb_py_interrupt_end(&interrupt);
    self->busy = 0;
    PyMem_Free(prompt);
    PyMem_Free(stops);
    if (status != TB_OK)
        return tb_py_raise(status);
    py_llm_generation *g = PyObject_New(py_llm_generation, generation_type);
    if (!g) {
        tb_llm_generation_free(generation);
        return NULL;
    }
    g->generation = generation;
    Py_INCREF(self);
    g->session = self;
    g->epoch = self->epoch;
    return (PyObject *)g;
}

static PyMethodDef session_methods[] = {
    {"truncate", (PyCFunction)session_truncate, METH_O, "truncate(length): keep the first cached positions"},
    {"logits", (PyCFunction)(void (*)(void))session_logits, METH_VARARGS | METH_KEYWORDS,
     "logits(ids, all=True) -> Tensor[T, V]: runs ids from an empty cache"},
    {"generate", (PyCFunction)(void (*)(void))session_generate, METH_VARARGS | METH_KEYWORDS,
     "generate(prompt, max_tokens, temperature, top_k, top_p, min_p, repetition_penalty, seed=None, stop_ids=None, "
     "callback=None) -> (tokens, stats)"},
    {"begin", (PyCFunction)(void (*)(void))session_begin, METH_VARARGS | METH_KEYWORDS,
     "begin(prompt, max_tokens, temperature, top_k, top_p, min_p, repetition_penalty, seed=None, stop_ids=None) "
     "-> _LLMGeneration"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef session_getset[] = {
    {"tokens", (getter)session_get_tokens, NULL, "token ids whose keys/values are cached", NULL},
    {"max_seq_len", (getter)session_get_max_seq_len, NULL, "positions the cache can hold", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot session_slots[] = {
    {Py_tp_new, session_new},
    {Py_tp_dealloc, session_dealloc},
    {Py_tp_methods, session_methods},
    {Py_tp_getset, session_getset},
    {Py_tp_doc, "_LLMSession(model, max_seq_len, kv_f16=False): a KV cache and generation state."},
    {0, NULL},
};

static PyType_Spec session_spec = {
    .name = "torchburn._C._LLMSession",
    .basicsize = sizeof(py_llm_session),
    .flags = Py_TPFLAGS_DEFAULT,
    .slots = session_slots,
};

/* ---- generation ---- */

static void generation_dealloc(py_llm_generation *self) {
    PyTypeObject *type = Py_TYPE(self);
    tb_llm_generation_free(self->generation);
    Py_XDECREF(self->session);
    PyObject_Free(self);
    Py_DECREF(type);
}

/* next() -> (token, finish_reason or None) */
static PyObject *generation_next(py_llm_generation *self, PyObject *unused) {
    py_llm_session *session = self->session;
    if (session->epoch != self->epoch) {
        PyErr_SetString(PyExc_RuntimeError,
                        "this generation was interrupted by another call on the same LLM; start a new one");
        return NULL;
    }
    if (session_enter(session) != 0)
        return NULL;
    int32_t token = -1;
    tb_llm_finish finish = TB_LLM_FINISH_NONE;
    tb_status status;
    Py_BEGIN_ALLOW_THREADS
    status = tb_llm_generation_next(self->generation, &token, &finish);
    Py_END_ALLOW_THREADS
    session->busy = 0;
    if (status != TB_OK)
        return tb_py_raise(status);
    if (finish == TB_LLM_FINISH_NONE)
        return Py_BuildValue("(iO)", (int)token, Py_None);
    return Py_BuildValue("(is)", (int)token, tb_llm_finish_name(finish));
}

static PyObject *generation_get_stats(py_llm_generation *self, void *closure) {
    tb_llm_stats stats;
    tb_llm_generation_stats(self->generation, &stats);
    return stats_dict(&stats);
}

static PyMethodDef generation_methods[] = {
    {"next", (PyCFunction)generation_next, METH_NOARGS, "next() -> (token, finish_reason or None)"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef generation_getset[] = {
    {"stats", (getter)generation_get_stats, NULL, "prompt/generated counts, timings, finish reason", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot generation_slots[] = {
    {Py_tp_dealloc, generation_dealloc},
    {Py_tp_methods, generation_methods},
    {Py_tp_getset, generation_getset},
    {Py_tp_doc, "Step-wise generation started by _LLMSession.begin()."},
    {0, NULL},
};

static PyType_Spec generation_spec = {
    .name = "torchburn._C._LLMGeneration",
    .basicsize = sizeof(py_llm_generation),
    .flags = Py_TPFLAGS_DEFAULT,
    .slots = generation_slots,
};

/* ---- sampler hooks (tests) ---- */

static int import_logits(PyObject *object, tb_tensor *out) {
    tb_tensor view = {0};
    if (tb_py_import_tensor(object, "logits", &view) != 0)
        return -1;
    if (view.ndim != 1) {
        tb_tensor_release(&view);
        PyErr_SetString(PyExc_ValueError, "logits must be 1-D");
        return -1;
    }
    tb_status status = tb_tensor_contiguous(&view, TB_F32, out);
    tb_tensor_release(&view);
    if (status != TB_OK) {
        tb_py_raise(status);
        return -1;
    }
    return 0;
}

/* _llm_sampling_probs(logits, history, temperature, top_k, top_p, min_p, repetition_penalty) -> Tensor[V] */
static PyObject *py_sampling_probs(PyObject *module, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"logits", "history", "temperature", "top_k", "top_p", "min_p", "repetition_penalty",
                               "seed", "draws", NULL};
    PyObject *logits_obj, *history_obj, *temperature, *top_k, *top_p, *min_p, *penalty, *seed = Py_None;
    long long draws = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOOOO|OL:_llm_sampling_probs", keywords, &logits_obj,
                                     &history_obj, &temperature, &top_k, &top_p, &min_p, &penalty, &seed, &draws))
        return NULL;
    tb_llm_sampling sampling;
    if (parse_sampling(temperature, top_k, top_p, min_p, penalty, seed, &sampling) != 0)
        return NULL;
    int64_t history_count = 0;
    int32_t *history = ids_from_sequence(history_obj, "history", &history_count);
    if (!history)
        return NULL;
    tb_tensor logits = {0};
    if (import_logits(logits_obj, &logits) != 0) {
        PyMem_Free(history);
        return NULL;
    }
    const int64_t vocab = logits.shape[0];
    tb_llm_sampler *sampler = NULL;
    tb_status status = tb_llm_sampler_new(vocab, &sampling, &sampler);
    PyObject *result = NULL;
    if (status == TB_OK && draws > 0) { /* draws > 0: a list of sampled tokens instead of probabilities */
        int32_t *tokens = PyMem_Malloc((size_t)draws * sizeof *tokens);
        if (!tokens) {
            PyErr_NoMemory();
        } else {
            for (long long i = 0; status == TB_OK && i < draws; i++)
                status = tb_llm_sampler_sample(sampler, tb_tensor_data(&logits), history, history_count, &tokens[i]);
            if (status == TB_OK)
                result = list_from_ids(tokens, draws);
            PyMem_Free(tokens);
        }
    } else if (status == TB_OK) {
        tb_tensor probs = {0};
        const int64_t shape[1] = {vocab};
        status = tb_tensor_empty(TB_F32, 1, shape, TB_ALLOC_DEFAULT, &probs);
        if (status == TB_OK)
            status = tb_llm_sampler_probs(sampler, tb_tensor_data(&logits), history, history_count, tb_tensor_data(&probs));
        if (status == TB_OK)
            result = tb_py_tensor_wrap(&probs);
        else
            tb_tensor_release(&probs);
    }
    tb_llm_sampler_free(sampler);
    tb_tensor_release(&logits);
    PyMem_Free(history);
    if (status != TB_OK)
        return tb_py_raise(status);
    return result;
}

static PyObject *py_read_bandwidth(PyObject *module, PyObject *args) {
    long long nbytes;
    int repeats;
    if (!PyArg_ParseTuple(args, "Li:_llm_read_bandwidth", &nbytes, &repeats))
        return NULL;
    if (nbytes < 4096) {
        PyErr_SetString(PyExc_ValueError, "_llm_read_bandwidth: nbytes must be at least 4096");
        return NULL;
    }
    double gbps = 0.0;
    tb_status status;
    Py_BEGIN_ALLOW_THREADS
    status = tb_llm_read_bandwidth((size_t)nbytes, repeats, &gbps);
    Py_END_ALLOW_THREADS
    if (status != TB_OK)
        return tb_py_raise(status);
    return PyFloat_FromDouble(gbps);
}

static PyMethodDef llm_functions[] = {
    {"_llm_read_bandwidth", (PyCFunction)py_read_bandwidth, METH_VARARGS,
     "_llm_read_bandwidth(nbytes, repeats) -> GB/s read with the widest vector loads on all kernel threads"},
    {"_llm_sampling_probs", (PyCFunction)(void (*)(void))py_sampling_probs, METH_VARARGS | METH_KEYWORDS,
     "_llm_sampling_probs(logits, history, temperature, top_k, top_p, min_p, repetition_penalty, seed=None, "
     "draws=0) -> Tensor[V] of draw probabilities (or a list of `draws` sampled tokens)"},
    {NULL, NULL, 0, NULL},
};

struct tb_llm_model *tb_pyext_llm_model(PyObject *object) {
    if (!model_type || !PyObject_TypeCheck(object, model_type)) {
        PyErr_Format(PyExc_TypeError, "expected a torchburn._C._LLMModel, got %.80s", Py_TYPE(object)->tp_name);
        return NULL;
    }
    return ((py_llm_model *)object)->model;
}

int tb_pyext_register_llm(PyObject *module) {
    model_type = (PyTypeObject *)PyType_FromSpec(&model_spec);
    session_type = model_type ? (PyTypeObject *)PyType_FromSpec(&session_spec) : NULL;
    generation_type = session_type ? (PyTypeObject *)PyType_FromSpec(&generation_spec) : NULL;
    if (!generation_type)
        return -1;
    if (PyModule_AddObjectRef(module, "_LLMModel", (PyObject *)model_type) != 0 ||
        PyModule_AddObjectRef(module, "_LLMSession", (PyObject *)session_type) != 0 ||
        PyModule_AddObjectRef(module, "_LLMGeneration", (PyObject *)generation_type) != 0)
        return -1;
    return PyModule_AddFunctions(module, llm_functions);
}
