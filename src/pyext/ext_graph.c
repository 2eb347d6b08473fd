/* Python bindings of the graph layer (placeholder until that layer lands). */
#include "pyext.h"

int tb_pyext_register_graph(PyObject *module) {
    (void)module;
    return 0;
}
