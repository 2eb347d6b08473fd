/* Python binding of the continuous-batching engine: torchburn._C._LLMBatch(model, slots, ctx_size,
 * prefill_chunk=0, kv_f16=False, batch_tokens=0, tokenizer=None, kv_blocks=0) (the _Tokenizer enables submit(...,
 * json=True)). Every method is short and non-blocking except wait() (GIL
 * released); the engine runs on its own C thread, so the GIL never serializes model work. fileno() is
 * readable while events are pending (asyncio's add_reader drives torchburn.llm.serve with it). */
#include "pyext.h"
#include "torchburn/llm_batch.h"

typedef struct py_llm_batch {
    PyObject_HEAD
    tb_llm_batch *batch;
    PyObject *model; /* keeps the weights alive while the engine thread runs */
} py_llm_batch;

static PyTypeObject *batch_type;

static PyObject *batch_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"model", "slots", "ctx_size", "prefill_chunk", "kv_f16", "batch_tokens", "tokenizer",
                               "kv_blocks", NULL};
    PyObject *model_obj, *tokenizer_obj = Py_None;
    long long slots, ctx_size, prefill_chunk = 0, batch_tokens = 0, kv_blocks = 0;
    int kv_f16 = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OLL|LpLOL:_LLMBatch", keywords, &model_obj, &slots, &ctx_size,
                                     &prefill_chunk, &kv_f16, &batch_tokens, &tokenizer_obj, &kv_blocks))
        return NULL;
    const tb_llm_model *model = tb_pyext_llm_model(model_obj);
    if (!model)
        return NULL;
    const tb_tokenizer *tokenizer = NULL;
    if (tokenizer_obj != Py_None && !(tokenizer = tb_pyext_tokenizer(tokenizer_obj)))
        return NULL;
    tb_llm_batch_options options = {.slots = slots, .ctx_size = ctx_size, .prefill_chunk = prefill_chunk,
                                    .kv_f16 = kv_f16 != 0, .batch_tokens = batch_tokens, .tokenizer = tokenizer,
                                    .kv_blocks = kv_blocks};
    tb_llm_batch *batch = NULL;
    tb_status status;
    Py_BEGIN_ALLOW_THREADS /* reads every token's bytes when a tokenizer is given */
    status = tb_llm_batch_new(model, &options, &batch);
    Py_END_ALLOW_THREADS
    if (status != TB_OK)
        return tb_py_raise(status);
    py_llm_batch *self = (py_llm_batch *)type->tp_alloc(type, 0);
    if (!self) {
        tb_llm_batch_free(batch);
        return NULL;
    }
    self->batch = batch;
    Py_INCREF(model_obj);
    self->model = model_obj;
    return (PyObject *)self;
}

static void batch_close_engine(py_llm_batch *self) {
    if (!self->batch)
        return;
    tb_llm_batch *batch = self->batch;
    self->batch = NULL;
    Py_BEGIN_ALLOW_THREADS /* joins the engine thread, which may be inside a step */
    tb_llm_batch_free(batch);
    Py_END_ALLOW_THREADS
}

static void batch_dealloc(py_llm_batch *self) {
    PyTypeObject *type = Py_TYPE(self);
    batch_close_engine(self);
    Py_XDECREF(self->model);
    type->tp_free((PyObject *)self);
    Py_DECREF(type);
}

static int batch_open(py_llm_batch *self) {
    if (!self->batch) {
        PyErr_SetString(PyExc_RuntimeError, "the batch engine is closed");
        return -1;
    }
    return 0;
}

static int32_t *ids_from(PyObject *seq, const char *what, int64_t *count) {
    PyObject *fast = PySequence_Fast(seq, "token ids must be a sequence of ints");
    if (!fast)
        return NULL;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    int32_t *ids = PyMem_Malloc((size_t)(n ? n : 1) * sizeof *ids);
    if (!ids) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(fast, i);
        int overflow = 0;
        const long long v = PyLong_Check(item) ? PyLong_AsLongLongAndOverflow(item, &overflow) : 0;
        if (!PyLong_Check(item) || overflow || v < INT32_MIN || v > INT32_MAX) {
            PyErr_Format(PyExc_ValueError, "%s[%zd] must be an int32 token id", what, i);
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

static PyObject *batch_submit(py_llm_batch *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"prompt", "max_tokens", "temperature", "top_k", "top_p", "min_p",
                               "repetition_penalty", "seed", "presence_penalty", "frequency_penalty", "stop_ids",
                               "logprobs", "json", NULL};
    PyObject *prompt_obj, *stop_obj = Py_None;
    long long max_tokens, top_k = 0;
    unsigned long long seed = 0;
    double temperature = 0.0, top_p = 1.0, min_p = 0.0, repetition = 1.0, presence = 0.0, frequency = 0.0;
    int logprobs = -1, json = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OL|dLddd$KddOip:submit", keywords, &prompt_obj, &max_tokens,
                                     &temperature, &top_k, &top_p, &min_p, &repetition, &seed, &presence, &frequency,
                                     &stop_obj, &logprobs, &json))
        return NULL;
    if (batch_open(self) != 0)
        return NULL;
    int64_t prompt_count = 0, stop_count = 0;
    int32_t *prompt = ids_from(prompt_obj, "prompt", &prompt_count);
    if (!prompt)
        return NULL;
    int32_t *stops = NULL;
    if (stop_obj != Py_None && !(stops = ids_from(stop_obj, "stop_ids", &stop_count))) {
        PyMem_Free(prompt);
        return NULL;
    }
    tb_llm_batch_request request = {.prompt = prompt, .prompt_count = prompt_count, .max_tokens = max_tokens,
                                    .presence_penalty = (float)presence, .frequency_penalty = (float)frequency,
                                    .stop_ids = stops, .stop_count = stop_count, .logprobs = logprobs,
                                    .constraint = json ? TB_LLM_CONSTRAINT_JSON_OBJECT : TB_LLM_CONSTRAINT_NONE};
    tb_llm_sampling_default(&request.sampling);
    request.sampling.temperature = (float)temperature;
    request.sampling.top_k = top_k;
    request.sampling.top_p = (float)top_p;
    request.sampling.min_p = (float)min_p;
    request.sampling.repetition_penalty = (float)repetition;
    request.sampling.seed = seed;
    uint64_t id = 0;
    const tb_status status = tb_llm_batch_submit(self->batch, &request, &id);
    PyMem_Free(prompt);
    PyMem_Free(stops);
    if (status != TB_OK)
        return tb_py_raise(status);
    return PyLong_FromUnsignedLongLong(id);
}

static PyObject *batch_cancel(py_llm_batch *self, PyObject *arg) {
    const unsigned long long id = PyLong_AsUnsignedLongLong(arg);
    if (PyErr_Occurred())
        return NULL;
    if (self->batch)
        tb_llm_batch_cancel(self->batch, id);
    Py_RETURN_NONE;
}

/* (id, token, finish, logprob, top, final): finish is None while running; logprob None unless asked;
 * top a list of (token, logprob); final a dict of counts in the last event, else None (a failed request's
 * adds "error", its message, and "status", the tb_status name such as "TB_ERR_OUT_OF_MEMORY"). */
static PyObject *event_tuple(const tb_llm_batch_event *e, bool with_logprobs) {
    PyObject *finish = e->finish == TB_LLM_FINISH_NONE ? Py_NewRef(Py_None)
                                                        : PyUnicode_FromString(e->failed ? "error"
                                                                                         : tb_llm_finish_name(e->finish));
    PyObject *logprob = with_logprobs && e->token >= 0 ? PyFloat_FromDouble(e->logprob) : Py_NewRef(Py_None);
    PyObject *top = PyList_New(e->top_count);
    for (int32_t i = 0; top && i < e->top_count; i++)
        PyList_SET_ITEM(top, i, Py_BuildValue("(id)", (int)e->top_ids[i], (double)e->top_logprobs[i]));
    PyObject *final = e->finish == TB_LLM_FINISH_NONE
                          ? Py_NewRef(Py_None)
                          : Py_BuildValue("{s:L,s:L,s:L}", "prompt_tokens", (long long)e->prompt_tokens, "reused_tokens",
                                          (long long)e->reused_tokens, "generated_tokens", (long long)e->generated_tokens);
    if (final && e->failed) {
        PyObject *error = PyUnicode_DecodeUTF8(e->error, (Py_ssize_t)strlen(e->error), "replace");
        PyObject *status = PyUnicode_FromString(tb_status_name(e->status));
        if (!error || !status || PyDict_SetItemString(final, "error", error) != 0 ||
            PyDict_SetItemString(final, "status", status) != 0)
            Py_CLEAR(final);
        Py_XDECREF(error);
        Py_XDECREF(status);
    }
    PyObject *tuple = NULL;
    if (finish && logprob && top && final)
        tuple = Py_BuildValue("(KiOOOO)", (unsigned long long)e->id, (int)e->token, finish, logprob, top, final);
    Py_XDECREF(finish);
    Py_XDECREF(logprob);
    Py_XDECREF(top);
    Py_XDECREF(final);
    return tuple;
}

static PyObject *batch_poll(py_llm_batch *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"logprobs", NULL};
    int logprobs = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|p:poll", keywords, &logprobs))
        return NULL;
    PyObject *list = PyList_New(0);
    if (!list || !self->batch)
        return list;
    enum { CHUNK = 256 };
    tb_llm_batch_event *events = PyMem_Malloc(CHUNK * sizeof *events);
    if (!events) {
        Py_DECREF(list);
        return PyErr_NoMemory();
    }
    for (;;) {
        const int64_t n = tb_llm_batch_poll(self->batch, events, CHUNK);
        for (int64_t i = 0; i < n; i++) {
            PyObject *tuple = event_tuple(&events[i], logprobs != 0);
            if (!tuple || PyList_Append(list, tuple) != 0) {
                Py_XDECREF(tuple);
                Py_DECREF(list);
                PyMem_Free(events);
                return NULL;
            }
            Py_DECREF(tuple);
        }
        if (n < CHUNK)
            break;
    }
    PyMem_Free(events);
    return list;
}

static PyObject *batch_wait(py_llm_batch *self, PyObject *arg) {
    const double timeout = PyFloat_AsDouble(arg);
    if (PyErr_Occurred())
        return NULL;
    if (batch_open(self) != 0)
        return NULL;
    bool pending;
    Py_BEGIN_ALLOW_THREADS
    pending = tb_llm_batch_wait(self->batch, timeout);
    Py_END_ALLOW_THREADS
    return PyBool_FromLong(pending);
}

static PyObject *batch_fileno(py_llm_batch *self, PyObject *unused) {
    (void)unused;
    if (batch_open(self) != 0)
        return NULL;
    return PyLong_FromLong(tb_llm_batch_notify_fd(self->batch));
}

static PyObject *batch_close(py_llm_batch *self, PyObject *unused) {
    (void)unused;
    batch_close_engine(self);
    Py_RETURN_NONE;
}

static PyObject *batch_get_stats(py_llm_batch *self, void *closure) {
    (void)closure;
    if (batch_open(self) != 0)
        return NULL;
    tb_llm_batch_stats s;
    tb_llm_batch_get_stats(self->batch, &s);
    return Py_BuildValue(
        "{s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:d,s:d,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,"
        "s:L,s:L,s:L,s:s}", "slots",
        (long long)s.slots, "ctx_size", (long long)s.ctx_size, "prefill_chunk", (long long)s.prefill_chunk,
        "batch_tokens", (long long)s.batch_tokens, "prefill_chunks", (long long)s.prefill_chunks,
        "prefill_steps", (long long)s.prefill_steps, "queued",
        (long long)s.queued, "active", (long long)s.active, "requests_submitted", (long long)s.requests_submitted,
        "requests_finished", (long long)s.requests_finished, "requests_cancelled", (long long)s.requests_cancelled,
        "prompt_tokens", (long long)s.prompt_tokens, "reused_tokens", (long long)s.reused_tokens, "prefix_hits",
        (long long)s.prefix_hits, "generated_tokens", (long long)s.generated_tokens, "prefill_tokens_run",
        (long long)s.prefill_tokens_run, "decode_steps", (long long)s.decode_steps, "decode_rows",
        (long long)s.decode_rows, "prefill_seconds", s.prefill_seconds, "decode_seconds", s.decode_seconds,
        "kv_positions_used", (long long)s.kv_positions_used, "kv_positions_capacity",
        (long long)s.kv_positions_capacity, "kv_bytes", (long long)s.kv_bytes, "kv_blocks", (long long)s.kv_blocks,
        "kv_blocks_allocated", (long long)s.kv_blocks_allocated, "kv_blocks_in_use", (long long)s.kv_blocks_in_use,
        "kv_blocks_shared", (long long)s.kv_blocks_shared, "kv_blocks_cached", (long long)s.kv_blocks_cached,
        "kv_blocks_evicted", (long long)s.kv_blocks_evicted, "preemptions", (long long)s.preemptions,
        "admission_waits", (long long)s.admission_waits, "last_error", s.last_error);
}

static PyMethodDef batch_methods[] = {
    {"submit", (PyCFunction)(void (*)(void))batch_submit, METH_VARARGS | METH_KEYWORDS,
     "submit(prompt, max_tokens, temperature=0, top_k=0, top_p=1, min_p=0, repetition_penalty=1, *, seed=0, "
     "presence_penalty=0, frequency_penalty=0, stop_ids=None, logprobs=-1, json=False) -> request id (queued); json: "
     "the output is one JSON object (needs the engine made with tokenizer=)"},
    {"cancel", (PyCFunction)batch_cancel, METH_O, "cancel(id): drop the request before the next step"},
    {"poll", (PyCFunction)(void (*)(void))batch_poll, METH_VARARGS | METH_KEYWORDS,
     "poll() -> [(id, token, finish, logprob, top_logprobs, final_counts)] pending events, oldest first"},
    {"wait", (PyCFunction)batch_wait, METH_O, "wait(timeout_s) -> whether events are pending (GIL released)"},
    {"fileno", (PyCFunction)batch_fileno, METH_NOARGS, "a descriptor readable while events are pending"},
    {"close", (PyCFunction)batch_close, METH_NOARGS, "stop the engine thread and free the slots"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef batch_getset[] = {
    {"stats", (getter)batch_get_stats, NULL, "engine counters (queue depth, tokens, seconds, KV use)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot batch_slots[] = {
    {Py_tp_new, batch_new},
    {Py_tp_dealloc, batch_dealloc},
    {Py_tp_methods, batch_methods},
    {Py_tp_getset, batch_getset},
    {Py_tp_doc, "_LLMBatch(model, slots, ctx_size, prefill_chunk=0, kv_f16=False, batch_tokens=0, tokenizer=None, kv_blocks=0): continuous-batching "
                    "engine."},
    {0, NULL},
};

static PyType_Spec batch_spec = {
    .name = "torchburn._C._LLMBatch",
    .basicsize = sizeof(py_llm_batch),
    .flags = Py_TPFLAGS_DEFAULT,
    .slots = batch_slots,
};

int tb_pyext_register_llm_batch(PyObject *module) {
    batch_type = (PyTypeObject *)PyType_FromSpec(&batch_spec);
    if (!batch_type)
        return -1;
    return PyModule_AddObjectRef(module, "_LLMBatch", (PyObject *)batch_type);
}
