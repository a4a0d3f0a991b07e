// runtime_shim/optim.cpp: the fused optimizer steps of runtime_shim/optim.py, for
// float32 tensors on the CPU. Each call updates every tensor of a parameter group
// in one pass over its elements (PyTorch's `foreach` steps make one pass per
// arithmetic op), the tensors given as tables of addresses. The arithmetic is
// torch.optim's, in its order (see optim.py).
#include "runtime_shim/kernels.h"

// AdamW: decay the parameter, move the averages, step by the bias-corrected ratio.
extern "C" void adamw_f32(
    int64_t n,
    const int64_t* params,
    const int64_t* grads,
    const int64_t* exp_avgs,
    const int64_t* exp_avg_sqs,
    const int64_t* numels,
    const double* steps,
    double lr,
    double beta1,
    double beta2,
    double eps,
    double weight_decay
) {
    for (int64_t t = 0; t < n; ++t) {
        float* p = reinterpret_cast<float*>(params[t]);
        const float* g = reinterpret_cast<const float*>(grads[t]);
        float* m = reinterpret_cast<float*>(exp_avgs[t]);
        float* v = reinterpret_cast<float*>(exp_avg_sqs[t]);
        const float decay = static_cast<float>(1.0 - lr * weight_decay);
        const float w1 = static_cast<float>(1.0 - beta1);
        const float b2 = static_cast<float>(beta2);
        const float w2 = static_cast<float>(1.0 - beta2);
        const double correction1 = 1.0 - std::pow(beta1, steps[t]);
        const double correction2 = 1.0 - std::pow(beta2, steps[t]);
        const float step_size = static_cast<float>(lr / correction1);
        const float root2 = static_cast<float>(std::sqrt(correction2));
        const float e = static_cast<float>(eps);
        #pragma omp parallel for simd if (numels[t] >= 65536)
        for (int64_t i = 0; i < numels[t]; ++i) {
            const float gi = g[i];
            const float mi = m[i] + w1 * (gi - m[i]);  // lerp toward the gradient
            const float vi = v[i] * b2 + w2 * (gi * gi);
            m[i] = mi;
            v[i] = vi;
            const float denom = std::sqrt(vi) / root2 + e;
            p[i] = p[i] * decay - step_size * (mi / denom);
        }
    }
}

// SGD with momentum: the buffer takes the gradient (plus weight decay), the
// parameter steps along the buffer (Nesterov: along the gradient plus it).
extern "C" void sgd_f32(
    int64_t n,
    const int64_t* params,
    const int64_t* grads,
    const int64_t* buffers,
    const int64_t* numels,
    const int64_t* first,
    double lr,
    double momentum,
    double dampening,
    double weight_decay,
    int64_t nesterov
) {
    for (int64_t t = 0; t < n; ++t) {
        float* p = reinterpret_cast<float*>(params[t]);
        const float* g = reinterpret_cast<const float*>(grads[t]);
        float* b = reinterpret_cast<float*>(buffers[t]);
        const float wd = static_cast<float>(weight_decay);
        const float mu = static_cast<float>(momentum);
        const float keep = static_cast<float>(1.0 - dampening);
        const float step = static_cast<float>(lr);
        const bool start = first[t] != 0;
        #pragma omp parallel for simd if (numels[t] >= 65536)
        for (int64_t i = 0; i < numels[t]; ++i) {
            const float d = wd != 0 ? g[i] + wd * p[i] : g[i];
            const float bi = start ? d : b[i] * mu + keep * d;
            b[i] = bi;
            const float along = nesterov ? d + mu * bi : bi;
            p[i] = p[i] - step * along;
        }
    }
}
