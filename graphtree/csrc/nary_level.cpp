// The elementwise part of one level of the N-ary Tree-LSTM (graphtree/nn/nary.py), fused into one pass over
// the level's rows, forward and backward. The matrix products stay in PyTorch; these loops replace the dozen
// small elementwise operators between them, whose per-call cost dominates on a tree level's few rows.
//
// Gate layout of a row (d = hidden size, N = children): i, o, u, f_1 .. f_N, each d wide. The u block's
// weights are doubled by the caller, so one sigmoid serves every gate: u = 2 sigmoid(2 z) - 1 = tanh(z).

#include "leaf_unit.h"
#include "kernels.h"

namespace graphtree {
namespace {

// Eqs 9-14 of Tai et al. 2015 on n rows. G: [n, (3 + N) d] pre-activations, replaced by the activations;
// Cj: [n, N, d] the children's memories. Writes h, c and tanh(c), each [n, d].
void forward_rows(float* G, const float* Cj, float* H, float* C, float* T, int64_t n, int64_t N, int64_t d) {
  const int64_t width = (3 + N) * d;
  for_rows(n, [&](int64_t r) {
    float* g = G + r * width;
    const float* cj = Cj + r * N * d;
    float *hr = H + r * d, *cr = C + r * d, *tr = T + r * d;
#pragma omp simd
    for (int64_t k = 0; k < width; ++k) g[k] = sigmoid(g[k]);
#pragma omp simd
    for (int64_t k = 0; k < d; ++k) cr[k] = g[k] * (2.f * g[2 * d + k] - 1.f);  // i * u
    add_forgotten(cr, g + 3 * d, cj, N, d);  // + sum_l f_l * c_l
#pragma omp simd
    for (int64_t k = 0; k < d; ++k) {
      tr[k] = tanh_of(cr[k]);
      hr[k] = g[d + k] * tr[k];
    }
  });
}

// Derivatives of forward_rows. A: the activations it left in G; gH, gC: [n, d]. Writes the gradient of the
// (undoubled) pre-activations, gG [n, (3 + N) d], and of the children's memories, gCj [n, N, d].
void backward_rows(const float* gH, const float* gC, const float* A, const float* Cj, const float* T, float* gG,
                   float* gCj, int64_t n, int64_t N, int64_t d) {
  const int64_t width = (3 + N) * d;
  std::vector<float> total(d);  // dL/dc of the row: from c itself and through h = o tanh(c)
  float* gc = total.data();
  for_rows(n, [&](int64_t r) {
    const float *a = A + r * width, *gh = gH + r * d, *gcr = gC + r * d, *t = T + r * d;
    const float* cj = Cj + r * N * d;
    float *gg = gG + r * width, *gcj = gCj + r * N * d;
#pragma omp simd
    for (int64_t k = 0; k < d; ++k) {
      const float i = a[k], o = a[d + k], s = a[2 * d + k], u = 2.f * s - 1.f;
      gc[k] = gcr[k] + gh[k] * o * (1.f - t[k] * t[k]);
      gg[k] = gc[k] * u * i * (1.f - i);                   // input gate
      gg[d + k] = gh[k] * t[k] * o * (1.f - o);            // output gate
      gg[2 * d + k] = 4.f * gc[k] * i * s * (1.f - s);     // u = 2 sigmoid(2 z) - 1: du/dz = 4 s (1 - s)
    }
    forgotten_backward(gc, a + 3 * d, cj, gg + 3 * d, gcj, N, d);  // the forget gates, the children's memories
  });
}

struct NarySaved {
  Tensor activated, tanh_c, c_children;
  LeafUnit::Saved leaf;
};

// The N-ary Tree-LSTM (forget="full") as a LevelKernel (graphtree/nn/nary.py's update, and its derivatives).
// Constituency setting: leaves use the leaf unit c = W^(c) x + b^(c), o = sigmoid(W^(o) x + b^(o)); internal
// levels eqs 9-14 from their children's states alone. General setting: eqs 9-14 at every node, plus the node's
// input terms W x + b (computed for all nodes before the pass, their gradient returned through the level's input
// rows); a leaf is a step from zero children.
class NaryLevels : public Levels<NarySaved> {
 public:
  // gate_weights_t: [N d, R] the gate rows of U transposed (R = (3 + N) d), their u block doubled (one
  // sigmoid serves every gate: tanh(z) = 2 sigmoid(2 z) - 1); gate_bias: [R] the summed biases b_U, doubled
  // likewise; U: [R, N d] as it is, for the children's gradients; leaf_weight: [2 d, E] and leaf_bias: [2 d],
  // W_leaf's (constituency; empty in the general setting).
  NaryLevels(Tensor gate_weights_t, Tensor gate_bias, Tensor U, Tensor leaf_weight, Tensor leaf_bias, bool general)
      : Levels("NaryLevels", U.options()), gate_bias_(gate_bias), general_(general) {
    check_all({&gate_weights_t, &gate_bias_, &U});
    U_ = {U, gate_weights_t};
    if (!general_) leaf_ = LeafUnit(leaf_weight, leaf_bias);
    rows_ = U.size(0);
    d_ = (rows_ - U.size(1)) / 3;  // R = 3 d + N d
    N_ = d_ > 0 ? U.size(1) / d_ : 0;
    TORCH_CHECK(d_ > 0 && rows_ == (3 + N_) * d_ && gate_weights_t.size(0) == N_ * d_ &&
                    gate_weights_t.size(1) == rows_ && (general_ || leaf_weight.size(0) == 2 * d_),
                "NaryLevels: weight shapes do not agree");
    expect(N_, {d_, 0});
  }

  void start(const std::vector<Level>& levels) override {
    leaf_.reset();
    leaf_grad_bias_ = at::zeros({rows_}, options_);
    grad_gates_ = save_ ? internal(rows_) : Tensor();
  }

  void forward(const Level& level, const Tensors& inputs,
               const Tensors& children, Tensors& buffers, bool save) override {
    const int64_t n = level.rows();
    auto h = rows_of(buffers[0], level), c = rows_of(buffers[1], level);
    if (level.width == 0 && !general_) {
      saved(level).leaf = leaf_.forward(inputs[0], h, c, save);
      return;
    }
    auto tanh_c = fresh(n, d_);
    Tensor gates, c_children;
    if (level.width == 0) {  // general leaves: a step from zero children
      gates = repeated_rows(gate_bias_, 1, n);  // written in place below
      c_children = at::zeros({n, N_, d_}, options_);
    } else {
      gates = at::addmm(gate_bias_, children[0].view({n, N_ * d_}), U_.t);
      c_children = children[1].view({n, N_, d_});
    }
    if (general_) {
      TORCH_CHECK(inputs[0].size(1) == 4 * d_, "NaryLevels: inputs must be [n, 4 d] (W x + b)");
      add_input_terms(gates, inputs[0], N_, d_, 3, 2);  // W x + b: gates i, o, u, f; u doubled like its weights
    }
    forward_rows(gates.data_ptr<float>(), c_children.data_ptr<float>(), h.data_ptr<float>(), c.data_ptr<float>(),
                 tanh_c.data_ptr<float>(), n, N_, d_);
    if (save) saved(level) = {gates, tanh_c, c_children, {}};
  }

  Tensors backward(const Level& level, const Tensors& grad_states, Tensors& grad_inputs) override {
    const auto& s = saved(level);
    const int64_t n = level.rows(), d = d_;
    const auto &grad_h = grad_states[0], &grad_c = grad_states[1];
    auto* grad_x = input_grad(grad_inputs);
    if (level.width == 0 && !general_) {
      leaf_.backward(s.leaf, grad_h, grad_c, grad_x);
      return {};
    }
    auto grad_gates = level.width == 0 ? fresh(n, rows_) : internal_rows(grad_gates_, level);
    auto grad_c_children = fresh(n, N_ * d);
    backward_rows(grad_h.data_ptr<float>(), grad_c.data_ptr<float>(), s.activated.data_ptr<float>(),
                  s.c_children.data_ptr<float>(), s.tanh_c.data_ptr<float>(), grad_gates.data_ptr<float>(),
                  grad_c_children.data_ptr<float>(), n, N_, d);
    if (general_ && grad_x != nullptr) add_input_terms_grad(grad_gates, *grad_x, N_, d, 3);
    if (level.width == 0) {  // general leaves: no children; their gates' bias gradient
      leaf_grad_bias_ += grad_gates.sum(0);
      return {};
    }
    return {at::mm(grad_gates, U_.w).view({-1, d}), grad_c_children.view({-1, d})};
  }

  Tensors param_grads() override {
    auto grad_U = weight_grad(U_.w, grad_gates_, gathered(0, N_ * d_));
    auto grad_b = leaf_grad_bias_.clone();
    if (grad_gates_.defined() && grad_gates_.size(0) > 0) grad_b += grad_gates_.sum(0);
    // Every child's bias block b_U[l] enters the gates the same way, so each gets the same gradient.
    return leaf_.with_param_grads({grad_U, repeated_rows(grad_b, 1, N_)});
  }

 private:
  Weight U_;  // t: gate_weights_t, the u block doubled
  Tensor gate_bias_;
  LeafUnit leaf_;  // constituency only
  bool general_ = false;
  int64_t rows_ = 0, d_ = 0, N_ = 0;
  Tensor leaf_grad_bias_;  // general setting: the leaves' share of the gates' bias gradient
  Tensor grad_gates_;
};

}  // namespace

KernelPtr nary_levels(Tensor gate_weights_t, Tensor gate_bias, Tensor U, Tensor leaf_weight, Tensor leaf_bias,
                      bool general) {
  return std::make_shared<NaryLevels>(gate_weights_t, gate_bias, U, leaf_weight, leaf_bias, general);
}

}  // namespace graphtree
