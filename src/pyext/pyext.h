/* Shared declarations of the torchburn._C extension: the Tensor type, conversions between Python
 * objects and tb_tensor, status -> exception mapping, and the registration hooks of each binding file. */
#ifndef TORCHBURN_PYEXT_H
#define TORCHBURN_PYEXT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "torchburn/status.h"
#include "torchburn/tensor.h"

/* torchburn._C.Tensor: a subclassable heap type laid out like an ndarray. */
typedef struct tb_py_tensor {
    PyObject_HEAD
    tb_tensor tensor;   /* owns one storage reference */
    PyObject *weakrefs;
    PyObject *dict;     /* instance __dict__ for subclasses */
    Py_ssize_t exports; /* live buffer-protocol views */
} tb_py_tensor;

extern PyTypeObject *tb_py_tensor_type;

static inline int tb_py_tensor_check(PyObject *object) {
    return PyObject_TypeCheck(object, tb_py_tensor_type);
}

/* A new torchburn Tensor taking over `tensor`'s reference (tensor is zeroed). NULL + exception on
 * failure (the reference is released then too). */
PyObject *tb_py_tensor_wrap(tb_tensor *tensor);

/* Imports any array-like as a tb_tensor view without copying: a torchburn Tensor, an object with
 * __dlpack__ (torch, numpy, ...), or a buffer-protocol object. `name` names the argument in errors.
 * Returns 0 and a new reference in *out, or -1 with a Python exception set (TypeError for CUDA
 * tensors, unsupported dtypes or non-array objects; ValueError for bad layouts). */
int tb_py_import_tensor(PyObject *object, const char *name, tb_tensor *out);

/* Raises the Python exception matching `status` with tb_error_message(); returns NULL. */
PyObject *tb_py_raise(tb_status status);

/* Ctrl-C during a long C call made with the GIL released. On the main thread, begin() installs the C
 * interrupt hook (status.h) for the call: at each cancel point, at most every TB_INTERRUPT_POLL_NS, it
 * takes the GIL back through *saved (the PyThreadState the caller saved), runs Python's signal handlers
 * and stops the call with TB_ERR_INTERRUPTED if one raised; tb_py_raise then leaves that exception
 * (KeyboardInterrupt) set. Call begin() with the GIL held, before saving the thread state; end() after. */
typedef struct tb_py_interrupt {
    int installed;
    tb_interrupt_fn previous;
    void *previous_context;
} tb_py_interrupt;
void tb_py_interrupt_begin(PyThreadState **saved, tb_py_interrupt *state);
void tb_py_interrupt_end(tb_py_interrupt *state);

/* Registration hooks called from the module init, one per binding file; each adds its functions and
 * types to the module and returns 0, or -1 with an exception set. */
int tb_pyext_register_tensor(PyObject *module);
int tb_pyext_register_ops(PyObject *module);
int tb_pyext_register_files(PyObject *module);
int tb_pyext_register_tokenizer(PyObject *module);
int tb_pyext_register_quant(PyObject *module);
int tb_pyext_register_nn(PyObject *module);
int tb_pyext_register_graph(PyObject *module);
int tb_pyext_register_llm(PyObject *module);
int tb_pyext_register_eager(PyObject *module); /* turbo_torch's layer (eager_*.c) */
int tb_pyext_register_engine(PyObject *module);
int tb_pyext_register_llm_batch(PyObject *module);

/* The model inside a torchburn._C._LLMModel (borrowed), or NULL with TypeError set. */
struct tb_llm_model *tb_pyext_llm_model(PyObject *object);
/* The tokenizer of a torchburn._C._Tokenizer, or NULL with TypeError set. */
const struct tb_tokenizer *tb_pyext_tokenizer(PyObject *object);

#endif
