// Teng & Zhang's gated head lexicalization of binary nodes (graphtree/nn/head_lexicalization.py, eqs 8-9) as a
// LevelKernel for the engine's compiled level loop: its update and the update's derivatives, in C++. Parameter
// gradients: W_zx, b_z.
//
// A node's head is x_t = z x^L + (1 - z) x^R with the gate z = sigmoid(W_zx [x^L, x^R] + b_z), both children's
// heads read bottom-up; a leaf's head is its word vector. A unary node takes its one child's head (z = 1 for a
// left child alone, 0 for a right one), as the softmax over one present child does.
//
// Also the left, right and average heads of Table 5 and the leaf sums of BiTreeLSTM's classifier input, parameterless
// bottom-up passes (FixedCombinationLevels).

#include "kernels.h"

namespace graphtree {
namespace {

struct Nothing {};  // saved by the parameterless kernels

class GatedHeadLevels : public Levels<Tensor> {  // saved: each inner level's z
 public:
  // W_zx: [D, 2 D] (columns [W_zx^L, W_zx^R]), b_z: [D].
  GatedHeadLevels(Tensor W_zx, Tensor b_z)
      : Levels("GatedHeadLevels", W_zx.options()), W_zx_(with_transposed(W_zx)), b_z_(b_z) {
    check_all({&b_z_});
    D_ = W_zx.size(0);
    TORCH_CHECK(W_zx.size(1) == 2 * D_ && b_z_.numel() == D_, "GatedHeadLevels: W_zx must be [D, 2 D] and b_z [D]");
    expect(2, {D_});
  }

  void start(const std::vector<Level>& levels) override {
    grad_logits_ = save_ ? internal(D_) : Tensor();
  }

  void forward(const Level& level, const Tensors& inputs,
               const Tensors& children, Tensors& buffers, bool save) override {
    if (level.width == 0) return copy_input(level, inputs, buffers);  // a leaf: its word vector
    const int64_t n = level.rows(), D = D_, pad = padding_row();
    auto heads = rows_of(buffers[0], level), pair = gathered(0, level, 2 * D);
    auto z = at::addmm(b_z_, pair, W_zx_.t);  // the gate's logits, replaced by the gate
    const int64_t* S = level.slots.data_ptr<int64_t>();
    const float* X = pair.data_ptr<float>();
    float *Z = z.data_ptr<float>(), *H = heads.data_ptr<float>();
    for_rows(n, [&](int64_t r) {
      const bool left = S[2 * r] != pad, right = S[2 * r + 1] != pad;
      const float *xl = X + r * 2 * D, *xr = xl + D;
      float *zr = Z + r * D, *h = H + r * D;
#pragma omp simd
      for (int64_t k = 0; k < D; ++k) {
        const float g = left && right ? sigmoid(zr[k]) : (left ? 1.f : 0.f);
        zr[k] = g;
        // lerp(x^R, x^L, z) as torch.lerp computes it: exact at z = 0 and z = 1.
        h[k] = g < 0.5f ? xr[k] + g * (xl[k] - xr[k]) : xl[k] - (xl[k] - xr[k]) * (1.f - g);
      }
    });
    if (save) saved(level) = z;
  }

  Tensors backward(const Level& level, const Tensors& grad_states, Tensors& grad_inputs) override {
    if (level.width == 0) return pass_gradient_to_input(grad_states, grad_inputs);
    const auto& gate = saved(level);
    const int64_t n = level.rows(), D = D_;
    const auto& grad_head = grad_states[0];
    auto pair = gathered(0, level, 2 * D), grad_logits = internal_rows(grad_logits_, level);
    auto grad_pair = fresh(n, 2 * D);
    const float *G = grad_head.data_ptr<float>(), *Z = gate.data_ptr<float>();
    const float* X = pair.data_ptr<float>();
    float *gA = grad_logits.data_ptr<float>(), *gP = grad_pair.data_ptr<float>();
    for_rows(n, [&](int64_t r) {
      const float *g = G + r * D, *z = Z + r * D, *xl = X + r * 2 * D, *xr = xl + D;
      float *ga = gA + r * D, *gl = gP + r * 2 * D, *gr = gl + D;
#pragma omp simd
      for (int64_t k = 0; k < D; ++k) {
        gl[k] = g[k] * z[k];
        gr[k] = g[k] - gl[k];
        ga[k] = gl[k] * (1.f - z[k]) * (xl[k] - xr[k]);  // sigmoid' = z (1 - z); d x_t / d z = x^L - x^R
      }
    });
    grad_pair.addmm_(grad_logits, W_zx_.w);  // the children's share through the gate's logits
    return {grad_pair.view({-1, D})};
  }

  Tensors param_grads() override {
    return {weight_grad(W_zx_.w, grad_logits_, gathered(0, 2 * D_)), bias_grad(b_z_, grad_logits_)};
  }

 private:
  Weight W_zx_;
  Tensor b_z_;
  int64_t D_ = 0;
  Tensor grad_logits_;
};

// Parameterless bottom-up passes in which a node's state is a fixed combination of its children's and a leaf's
// is its input. Teng & Zhang's Table 5 baselines of head lexicalization (graphtree/nn/head_lexicalization.py): a
// node's head is its leftmost child's head (mode 0), its rightmost child's (1) or the mean of its children's (2).
// And the sums of the leaf rows below every node with their number (3; a leaf counts itself, and the counts, a
// second state, are constants without gradient): the leaf means that BiTreeLSTM feeds its classifier
// (graphtree/models/bicontree.py, _LeafSum). The level loop moves rows, which in C++ spares each level the
// interpreter's calls of the Python update.
class FixedCombinationLevels : public Levels<Nothing> {
 public:
  enum Mode : int64_t { kLeft, kRight, kAverage, kSum };

  explicit FixedCombinationLevels(int64_t mode) : Levels("FixedCombinationLevels", at::kFloat), mode_(mode) {
    TORCH_CHECK(mode >= kLeft && mode <= kSum,
                "FixedCombinationLevels: mode must be 0 (left), 1 (right), 2 (average) or 3 (sum)");
  }

  void forward(const Level& level, const Tensors& inputs,
               const Tensors& children, Tensors& buffers, bool save) override {
    const bool sum = mode_ == kSum;
    if (level.width == 0) {  // a leaf: its word vector, or its row counted once
      copy_input(level, inputs, buffers);
      if (sum) rows_of(buffers[1], level).fill_(1.f);
      return;
    }
    const int64_t n = level.rows(), K = level.width;
    auto heads = rows_of(buffers[0], level);
    const int64_t D = heads.size(1), pad = padding_row();
    const int64_t* S = level.slots.data_ptr<int64_t>();
    const float *X = children[0].data_ptr<float>(), *leaves = sum ? children[1].data_ptr<float>() : nullptr;
    float *H = heads.data_ptr<float>(), *counts = sum ? rows_of(buffers[1], level).data_ptr<float>() : nullptr;
    for_rows(n, [&](int64_t r) {
      float* h = H + r * D;
      std::fill(h, h + D, 0.f);
      float below = 0.f;  // the leaves below the node (sums)
      const float count = each_read(S + r * K, K, pad, [&](int64_t l) {
        const float* x = X + (r * K + l) * D;
#pragma omp simd
        for (int64_t k = 0; k < D; ++k) h[k] += x[k];
        if (sum) below += leaves[r * K + l];
      });
      if (sum) counts[r] = below;
      if (mode_ != kAverage) return;
#pragma omp simd
      for (int64_t k = 0; k < D; ++k) h[k] /= count;
    });
  }

  Tensors backward(const Level& level, const Tensors& grad_states, Tensors& grad_inputs) override {
    if (level.width == 0) return pass_gradient_to_input(grad_states, grad_inputs);
    const int64_t n = level.rows(), K = level.width;
    const auto& grad_head = grad_states[0];
    const int64_t D = grad_head.size(1), pad = padding_row();
    // Added straight into the children's rows of the heads' gradient, in the order in which the loop would
    // scatter them (the level's own rows, read here, are none of them): no [n * K, D] rows, mostly zeros, for the
    // loop to fill and scatter.
    const int64_t* S = level.slots.data_ptr<int64_t>();
    const float* G = grad_head.data_ptr<float>();
    float* gX = grad_state(0).data_ptr<float>();
    for_rows(n, [&](int64_t r) {
      const float* g = G + r * D;
      const float count = mode_ == kAverage ? each_read(S + r * K, K, pad, [](int64_t) {}) : 1.f;
      each_read(S + r * K, K, pad, [&](int64_t l) {
        float* gx = gX + S[r * K + l] * D;
        if (count == 1.f) {  // no division in the other modes' loop
#pragma omp simd
          for (int64_t k = 0; k < D; ++k) gx[k] += g[k];
        } else {
#pragma omp simd
          for (int64_t k = 0; k < D; ++k) gx[k] += g[k] / count;
        }
      });
    });
    return {};
  }

  Tensors param_grads() override { return {}; }

 private:
  // f(l) for each of a node's K slots whose child's state the node's reads: the leftmost child's (left), the
  // rightmost's (right) or every child's (average, sum; empty slots hold the padding row). Returns how many.
  template <typename F>
  float each_read(const int64_t* slots, int64_t K, int64_t pad, const F& f) const {
    float count = 0.f;
    for (int64_t j = 0; j < K; ++j) {
      const int64_t l = mode_ == kRight ? K - 1 - j : j;
      if (slots[l] == pad) continue;
      f(l);
      count += 1.f;
      if (mode_ <= kRight) break;
    }
    return count;
  }

  int64_t mode_;
};

}  // namespace

KernelPtr gated_head_levels(Tensor W_zx, Tensor b_z) { return std::make_shared<GatedHeadLevels>(W_zx, b_z); }

KernelPtr fixed_combination_levels(int64_t mode) { return std::make_shared<FixedCombinationLevels>(mode); }

}  // namespace graphtree
