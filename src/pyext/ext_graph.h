/* Shared between the graph binding files: the Plan type (ext_graph_plan.c) and the builder and
 * module functions (ext_graph.c). */
#ifndef TORCHBURN_PYEXT_EXT_GRAPH_H
#define TORCHBURN_PYEXT_EXT_GRAPH_H

#include "pyext.h"
#include "torchburn/engine.h"
#include "torchburn/graph.h"

/* A new torchburn._C.Plan owning one reference to `plan` (stolen, also on failure). */
PyObject *tb_py_plan_wrap(tb_plan *plan);

/* Puts the graph on the active engine when that is a GPU engine (the plan stays the CPU path when the
 * engine does not take every node; Plan.engine says which node). -1 with an exception when the active
 * engine cannot be had (TORCHBURN_DEVICE=gpu without a GPU). */
int tb_py_plan_attach_engine(PyObject *plan, const tb_graph *graph);

/* Adds the Plan type and the PlanInputMismatch exception to the module. */
int tb_pyext_register_plan(PyObject *module);

#endif
