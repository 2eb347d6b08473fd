/* Memory read bandwidth as the LLM benchmark's roofline sees it: the shared machine probe (parallel
 * sweeps with the widest vector loads of the active ISA, best of several repeats). */
#include "llm/llm_internal.h"
#include "torchburn/probe.h"

tb_status tb_llm_read_bandwidth(size_t nbytes, int repeats, double *gbps) {
    return tb_probe_read_bandwidth(nbytes, repeats, gbps);
}
