/* Memory per rank of a layout (plan.h): the ZeRO paper's accounting. With Psi
 * parameters, K bytes of optimizer state per parameter and 2-byte parameters
 * and gradients (mixed precision), one of Nd data-parallel ranks holds
 *   baseline (2 + 2 + K) Psi;  P_os 2Psi + 2Psi + K Psi/Nd;
 *   P_os+g 2Psi + (2 + K) Psi/Nd;  P_os+g+p (2 + 2 + K) Psi/Nd,
 * which for Psi = 7.5e9, Nd = 64, K = 12 are 120, 31.4, 16.6 and 1.9 GB (the
 * paper's figure 1). Tensor and pipeline parallelism divide Psi first. What
 * dtrain itself allocates per rank (every stage's arenas, ZeRO-2's staging,
 * the unsharded copy, activations at its batch sizes) is layout_memory.c's.
 * Cost: a handful of flops. */
#include "dtrain/plan.h"

dt_status dt_plan_memory(const dt_plan_mem_in *in, dt_plan_mem *out) {
    if (in->dp < 1 || in->tp < 1 || in->pp < 1)
        return dt_errorf(DT_ERR_INVALID, "plan: degrees must be at least 1 (dp %d, tp %d, pp %d)", in->dp, in->tp, in->pp);
    if (in->zero < 0 || in->zero > 3) return dt_errorf(DT_ERR_INVALID, "plan: ZeRO stage %d is not 0..3", in->zero);
    if (in->params < 0 || in->param_bytes < 0 || in->grad_bytes < 0 || in->optim_bytes < 0 || in->act_bytes < 0 ||
        in->buffer_bytes < 0)
        return dt_errorf(DT_ERR_INVALID, "plan: sizes must not be negative");
    double share = in->params / ((double)in->tp * in->pp), dp = in->dp;
    out->params = share * in->param_bytes / (in->zero >= 3 ? dp : 1);
    out->grads = share * in->grad_bytes / (in->zero >= 2 ? dp : 1);
    out->optim = share * in->optim_bytes / (in->zero >= 1 ? dp : 1);
    out->acts = in->act_bytes;
    out->buffers = in->buffer_bytes;
    out->staging = out->copy = out->base = out->setup = 0; /* dtrain's own kinds: dt_plan_predict's */
    out->total = out->params + out->grads + out->optim + out->acts + out->buffers;
    return DT_OK;
}
