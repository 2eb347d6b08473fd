/* Shared between the graph binding files: the Plan type (ext_graph_plan.c) and the builder and
 * module functions (ext_graph.c). */
#ifndef TORCHBURN_PYEXT_EXT_GRAPH_H
#define TORCHBURN_PYEXT_EXT_GRAPH_H

#include "pyext.h"
#include "torchburn/graph.h"

/* A new torchburn._C.Plan owning one reference to `plan` (stolen, also on failure). */
PyObject *tb_py_plan_wrap(tb_plan *plan);

/* Adds the Plan type and the PlanInputMismatch exception to the module. */
int tb_pyext_register_plan(PyObject *module);

#endif
