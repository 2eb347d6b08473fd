/* Maps tb_status codes to Python exceptions carrying the thread-local message. */
#include "pyext.h"

PyObject *tb_py_raise(tb_status status) {
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
