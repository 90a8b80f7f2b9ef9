// The leaf unit of the constituency Tree-LSTMs, c = W^(c) x + b^(c), h = sigmoid(W^(o) x + b^(o)) tanh(c)
// (that of Tai et al. 2015's released code; the S-LSTM's "lstm" leaves take the same), for the level kernels whose
// leaves use it (NaryLevels, SLSTMLevels). One product and one pass over the rows each way; the weight gradient
// is deferred to param_grads, one product over every leaf level.
#pragma once

#include "level_loop.h"

namespace graphtree {

class LeafUnit {
 public:
  // What backward needs of one leaf level: its inputs, the pre-activations with sigmoid(o) in the o block, tanh(c).
  struct Saved {
    Tensor x, gates, tanh_c;
  };

  LeafUnit() = default;

  // weight: [2 d, E] (rows c, then o) and bias: [2 d].
  LeafUnit(const Tensor& weight, const Tensor& bias) : weight_(weight), bias_(bias) {
    check_all({&weight_, &bias_}, "leaf_weight and leaf_bias");
    TORCH_CHECK(weight_.dim() == 2 && weight_.size(0) % 2 == 0 && bias_.numel() == weight_.size(0),
                "leaf_weight must be [2 d, E] and leaf_bias [2 d]");
  }

  bool defined() const { return weight_.defined(); }

  // Forgets the gradients of an earlier pass (at the start of a pass).
  void reset() { grads_.clear(); }

  // Writes the level's h and c (contiguous [n, d] rows of the state buffers) from its inputs x [n, E].
  Saved forward(const Tensor& x, const Tensor& h, const Tensor& c, bool save) const {
    const int64_t n = x.size(0), d = weight_.size(0) / 2;
    auto gates = at::addmm(bias_, x, weight_.t());  // [c, o] pre-activations
    auto tanh_c = at::empty({n, d}, x.options());
    float *G = gates.data_ptr<float>(), *H = h.data_ptr<float>(), *C = c.data_ptr<float>();
    float* T = tanh_c.data_ptr<float>();
    for_rows(n, [&](int64_t r) {
      float *g = G + r * 2 * d, *hr = H + r * d, *cr = C + r * d, *tr = T + r * d;
#pragma omp simd
      for (int64_t k = 0; k < d; ++k) {
        const float o = sigmoid(g[d + k]);
        g[d + k] = o;
        cr[k] = g[k];
        tr[k] = tanh_of(g[k]);
        hr[k] = o * tr[k];
      }
    });
    return save ? Saved{x, gates, tanh_c} : Saved{};
  }

  // Keeps the gradient of the level's pre-activations for param_grads, and adds that of x into grad_x when given.
  void backward(const Saved& saved, const Tensor& grad_h, const Tensor& grad_c, Tensor* grad_x) {
    const int64_t n = saved.x.size(0), d = weight_.size(0) / 2;
    auto grad_gates = at::empty({n, 2 * d}, saved.x.options());
    const float *gH = grad_h.data_ptr<float>(), *gC = grad_c.data_ptr<float>();
    const float *A = saved.gates.data_ptr<float>(), *T = saved.tanh_c.data_ptr<float>();
    float* gG = grad_gates.data_ptr<float>();
    for_rows(n, [&](int64_t r) {
      const float *gh = gH + r * d, *gc = gC + r * d, *o = A + r * 2 * d + d, *t = T + r * d;
      float* gg = gG + r * 2 * d;
#pragma omp simd
      for (int64_t k = 0; k < d; ++k) {
        gg[k] = gc[k] + gh[k] * o[k] * (1.f - t[k] * t[k]);  // c
        gg[d + k] = gh[k] * t[k] * o[k] * (1.f - o[k]);      // o
      }
    });
    grads_.add(grad_gates, saved.x);
    if (grad_x != nullptr && grad_x->defined()) grad_x->addmm_(grad_gates, weight_);
  }

  // `grads` (a kernel's other parameter gradients), then those of the weight and the bias over every leaf level
  // that ran backward, where the unit is defined.
  Tensors with_param_grads(Tensors grads) const {
    if (!defined()) return grads;
    auto grad_gates = grads_.grads();
    grads.push_back(weight_grad(weight_, grad_gates, grads_.rows()));
    grads.push_back(bias_grad(bias_, grad_gates));
    return grads;
  }

 private:
  Tensor weight_, bias_;
  GradientRows grads_;  // of the pre-activations, and the inputs
};

}  // namespace graphtree
