// The leaf unit of the constituency Tree-LSTMs, c = W^(c) x + b^(c), h = sigmoid(W^(o) x + b^(o)) tanh(c)
// (that of Tai et al. 2015's released code; the S-LSTM's "lstm" leaves take the same), for the level kernels whose
// leaves use it (NaryLevels, SLSTMLevels). One product and one pass over the rows each way; the weight gradient
// is deferred to param_grads, one product over every leaf level.
#pragma once

#include <utility>
#include <vector>

#include "common.h"
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
  LeafUnit(const Tensor& weight, const Tensor& bias)
      : weight_(weight.contiguous()), bias_(bias.contiguous()) {
    check(weight_, "leaf_weight");
    check(bias_, "leaf_bias");
    TORCH_CHECK(weight_.dim() == 2 && weight_.size(0) % 2 == 0 && bias_.numel() == weight_.size(0),
                "leaf_weight must be [2 d, E] and leaf_bias [2 d]");
  }

  bool defined() const { return weight_.defined(); }

  // Forgets the gradients of an earlier pass (at the start of a pass).
  void reset() {
    grads_.clear();
    inputs_.clear();
  }

  // Writes the level's h and c (contiguous [n, d] rows of the state buffers) from its inputs x [n, E].
  Saved forward(const Tensor& x_in, const Tensor& h, const Tensor& c, bool save) const {
    auto x = x_in.contiguous();
    check(x, "x");
    const int64_t n = x.size(0), d = weight_.size(0) / 2;
    auto gates = at::addmm(bias_, x, weight_.t());  // [c, o] pre-activations
    auto tanh_c = torch::empty({n, d}, x.options());
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
  void backward(const Saved& saved, const Tensor& grad_h_in, const Tensor& grad_c_in, Tensor* grad_x) {
    TORCH_CHECK(saved.gates.defined(), "LeafUnit: backward after a forward that saved nothing");
    auto grad_h = grad_h_in.contiguous(), grad_c = grad_c_in.contiguous();
    const int64_t n = saved.x.size(0), d = weight_.size(0) / 2;
    auto grad_gates = torch::empty({n, 2 * d}, saved.x.options());
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
    grads_.push_back(grad_gates);
    inputs_.push_back(saved.x);
    if (grad_x != nullptr && grad_x->defined()) grad_x->addmm_(grad_gates, weight_);
  }

  // The gradients of the weight and the bias, over every leaf level that ran backward.
  std::pair<Tensor, Tensor> param_grads() const {
    if (grads_.empty()) return {torch::zeros_like(weight_), torch::zeros_like(bias_)};
    auto grads = cat_rows(grads_);
    return {weight_grad(weight_, grads, cat_rows(inputs_)), bias_grad(bias_, grads)};
  }

 private:
  Tensor weight_, bias_;
  std::vector<Tensor> grads_, inputs_;
};

}  // namespace graphtree
