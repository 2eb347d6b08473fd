/* Maps tb_status codes to Python exceptions carrying the thread-local message. */
#include "pyext.h"

PyObject *tb_py_raise(tb_status status) {
    if (status == TB_ERR_INTERRUPTED && PyErr_Occurred())
        return NULL; /* the signal handler's exception (KeyboardInterrupt) */
    const char *message = tb_error_message();
    if (!message || !message[0])
        message = tb_status_name(status);
    PyObject *type;
    switch (status) {
    case TB_ERR_DTYPE:
        type = PyExc_TypeError;
        break;
    case TB_ERR_OUT_OF_MEMORY:
        type = PyExc_MemoryError;
        break;
    case TB_ERR_IO:
        type = PyExc_OSError;
        break;
    case TB_ERR_INTERRUPTED:
        type = PyExc_KeyboardInterrupt;
        break;
    case TB_ERR_UNSUPPORTED:
    case TB_ERR_INTERNAL:
        type = PyExc_RuntimeError;
        break;
    case TB_ERR_INVALID_ARGUMENT:
    case TB_ERR_SHAPE:
    case TB_ERR_FORMAT:
    case TB_ERR_READ_ONLY:
    default:
        type = PyExc_ValueError;
        break;
    }
    PyErr_SetString(type, message);
    return NULL;
}

static int signal_hook(void *context) {
    PyThreadState **saved = context;
    PyEval_RestoreThread(*saved);
    /* an exception already set came from a callback of the same call (Ctrl-C in a progress display) */
    const int stop = PyErr_Occurred() != NULL || PyErr_CheckSignals() != 0;
    *saved = PyEval_SaveThread();
    return stop;
}

/* Python runs signal handlers on the main thread only; elsewhere a poll would just wait for the GIL. */
static int on_main_thread(void) {
    static unsigned long main_ident;
    if (!main_ident) {
        PyObject *threading = PyImport_ImportModule("threading");
        PyObject *main = threading ? PyObject_CallMethod(threading, "main_thread", NULL) : NULL;
        PyObject *ident = main ? PyObject_GetAttrString(main, "ident") : NULL;
        if (ident)
            main_ident = PyLong_AsUnsignedLong(ident);
        Py_XDECREF(ident);
        Py_XDECREF(main);
        Py_XDECREF(threading);
        if (PyErr_Occurred()) {
            PyErr_Clear();
            return 0;
        }
    }
    return PyThread_get_thread_ident() == main_ident;
}

void tb_py_interrupt_begin(PyThreadState **saved, tb_py_interrupt *state) {
    state->installed = on_main_thread();
    if (state->installed)
        state->previous = tb_interrupt_hook_set(signal_hook, saved, &state->previous_context);
}

void tb_py_interrupt_end(tb_py_interrupt *state) {
    if (state->installed)
        tb_interrupt_hook_set(state->previous, state->previous_context, NULL);
}
