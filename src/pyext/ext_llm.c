/* Python bindings of the llm layer (placeholder until that layer lands). */
#include "pyext.h"

int tb_pyext_register_llm(PyObject *module) {
    (void)module;
    return 0;
}
