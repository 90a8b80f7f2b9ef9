// Teng & Zhang's gated head lexicalization of binary nodes (graphtree/nn/head_lexicalization.py, eqs 8-9) as a
// LevelKernel for the engine's compiled level loop: its update and the update's derivatives, in C++. Parameter
// gradients: W_zx, b_z.
//
// A node's head is x_t = z x^L + (1 - z) x^R with the gate z = sigmoid(W_zx [x^L, x^R] + b_z), both children's
// heads read bottom-up; a leaf's head is its word vector. A unary node takes its one child's head (z = 1 for a
// left child alone, 0 for a right one), as the softmax over one present child does.
//
// Also the left, right and average heads of Table 5 (FixedHeadLevels) and the leaf sums of BiTreeLSTM's
// classifier input (LeafSumLevels), parameterless bottom-up passes.

#include <vector>

#include "common.h"
#include "level_loop.h"

using graphtree::for_rows;
using graphtree::sigmoid;

namespace {

class GatedHeadLevels : public graphtree::LevelKernel {
 public:
  // W_zx: [D, 2 D] (columns [W_zx^L, W_zx^R]), b_z: [D].
  GatedHeadLevels(torch::Tensor W_zx, torch::Tensor b_z)
      : W_zx_(W_zx.contiguous()), b_z_(b_z.contiguous()) {
    graphtree::check(W_zx_, "W_zx");
    graphtree::check(b_z_, "b_z");
    D_ = W_zx_.size(0);
    TORCH_CHECK(W_zx_.dim() == 2 && W_zx_.size(1) == 2 * D_ && b_z_.numel() == D_,
                "GatedHeadLevels: W_zx must be [D, 2 D] and b_z [D]");
    auto made = derive(W_zx_, b_z_);
    W_zx_t_ = graphtree::transposed_at(made, 0, W_zx_, "GatedHeadLevels");
  }

  // W_zx transposed (the level products read it row by row).
  static std::vector<torch::Tensor> derive(const torch::Tensor& W_zx, const torch::Tensor& /*b_z*/) {
    return {graphtree::transposed(W_zx)};
  }

  void begin(const std::vector<graphtree::Level>& levels, bool save) override {
    save_ = save;
    gates_.assign(levels.size(), torch::Tensor());
    const int64_t internal = graphtree::internal_row_offsets(levels, offsets_);
    // Every inner node's [x^L, x^R]: the rows of W_zx's gradient.
    children_ = torch::empty({internal, 2 * D_}, W_zx_.options());
    grad_logits_ = save ? torch::empty({internal, D_}, W_zx_.options()) : torch::Tensor();
  }

  torch::Tensor gather_destination(const graphtree::Level& level, int64_t state) override {
    if (level.width == 0) return {};
    TORCH_CHECK(level.width == 2, "GatedHeadLevels: a level with ", level.width, " slots, expected 2");
    return children_.narrow(0, offsets_[level.index], level.end - level.begin).view({-1, D_});
  }

  void forward(const graphtree::Level& level, const std::vector<torch::Tensor>& inputs,
               const std::vector<torch::Tensor>& children, std::vector<torch::Tensor>& buffers, bool save) override {
    const int64_t n = level.end - level.begin, D = D_;
    auto heads = buffers[0].narrow(0, level.begin, n);
    if (level.width == 0) {  // a leaf: its word vector
      heads.copy_(inputs[0]);
      return;
    }
    auto pair = children_.narrow(0, offsets_[level.index], n);
    auto z = at::addmm(b_z_, pair, W_zx_t_);  // the gate's logits, replaced by the gate
    const int64_t pad = buffers[0].size(0) - 1;  // empty slots point at the zero row past the nodes
    const int64_t* S = level.slots.data_ptr<int64_t>();
    const float* X = pair.data_ptr<float>();
    float *Z = z.data_ptr<float>(), *H = heads.data_ptr<float>();
    for_rows(n, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
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
      }
    });
    if (save) gates_[level.index] = z;
  }

  std::vector<torch::Tensor> backward(const graphtree::Level& level, const std::vector<torch::Tensor>& grad_states,
                                      std::vector<torch::Tensor>& grad_inputs) override {
    TORCH_CHECK(save_, "GatedHeadLevels: backward after a forward that saved nothing");
    const int64_t n = level.end - level.begin, D = D_;
    auto grad_head = grad_states[0].contiguous();
    if (level.width == 0) {
      if (!grad_inputs.empty() && grad_inputs[0].defined()) grad_inputs[0].add_(grad_head);
      return {torch::Tensor()};
    }
    auto pair = children_.narrow(0, offsets_[level.index], n);
    auto grad_logits = grad_logits_.narrow(0, offsets_[level.index], n);
    auto grad_pair = torch::empty({n, 2 * D}, grad_head.options());
    const float *G = grad_head.data_ptr<float>(), *Z = gates_[level.index].data_ptr<float>();
    const float* X = pair.data_ptr<float>();
    float *gA = grad_logits.data_ptr<float>(), *gP = grad_pair.data_ptr<float>();
    for_rows(n, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const float *g = G + r * D, *z = Z + r * D, *xl = X + r * 2 * D, *xr = xl + D;
        float *ga = gA + r * D, *gl = gP + r * 2 * D, *gr = gl + D;
#pragma omp simd
        for (int64_t k = 0; k < D; ++k) {
          gl[k] = g[k] * z[k];
          gr[k] = g[k] - gl[k];
          ga[k] = gl[k] * (1.f - z[k]) * (xl[k] - xr[k]);  // sigmoid' = z (1 - z); d x_t / d z = x^L - x^R
        }
      }
    });
    grad_pair.addmm_(grad_logits, W_zx_);  // the children's share through the gate's logits
    return {grad_pair.view({-1, D})};
  }

  std::vector<torch::Tensor> param_grads() override {
    auto grad_W_zx = torch::zeros_like(W_zx_), grad_b_z = torch::zeros_like(b_z_);
    if (grad_logits_.defined() && grad_logits_.size(0) > 0) {
      grad_W_zx.addmm_(grad_logits_.t(), children_);
      grad_b_z += grad_logits_.sum(0);
    }
    return {grad_W_zx, grad_b_z};
  }

 private:
  torch::Tensor W_zx_, b_z_, W_zx_t_;
  int64_t D_ = 0;
  bool save_ = false;
  std::vector<torch::Tensor> gates_;  // each inner level's z
  std::vector<int64_t> offsets_;      // each level's first row in children_ and grad_logits_
  torch::Tensor children_, grad_logits_;
};

}  // namespace

void bind_gated_head_levels(pybind11::module& m) {
  pybind11::class_<GatedHeadLevels, graphtree::LevelKernel, std::shared_ptr<GatedHeadLevels>>(
      m, "GatedHeadLevels", "Teng & Zhang's gated head lexicalization (binary) for the compiled level loop")
      .def(pybind11::init<torch::Tensor, torch::Tensor>(), pybind11::arg("W_zx"), pybind11::arg("b_z"));
}

namespace {

// Teng & Zhang's Table 5 baselines of head lexicalization (graphtree/nn/head_lexicalization.py): a node's head
// is its leftmost child's head (method 0), its rightmost child's (1) or the mean of its children's (2); a leaf's
// is its word vector. No parameters: the level loop moves rows, which in C++ spares each level the
// interpreter's calls of the Python update.
class FixedHeadLevels : public graphtree::LevelKernel {
 public:
  explicit FixedHeadLevels(int64_t method) : method_(method) {
    TORCH_CHECK(method >= 0 && method <= 2, "FixedHeadLevels: method must be 0 (left), 1 (right) or 2 (average)");
  }

  void begin(const std::vector<graphtree::Level>& levels, bool save) override {
    save_ = save;
    pad_ = -1;
  }

  void forward(const graphtree::Level& level, const std::vector<torch::Tensor>& inputs,
               const std::vector<torch::Tensor>& children, std::vector<torch::Tensor>& buffers, bool save) override {
    const int64_t n = level.end - level.begin, K = level.width;
    auto heads = buffers[0].narrow(0, level.begin, n);
    pad_ = buffers[0].size(0) - 1;  // empty slots point at the zero row past the nodes
    if (K == 0) {  // a leaf: its word vector
      heads.copy_(inputs[0]);
      return;
    }
    auto kids = children[0].contiguous();
    const int64_t D = heads.size(1), pad = pad_, method = method_;
    const int64_t* S = level.slots.data_ptr<int64_t>();
    const float* X = kids.data_ptr<float>();
    float* H = heads.data_ptr<float>();
    for_rows(n, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        float* h = H + r * D;
        if (method < 2) {
          const float* x = X + (r * K + pick(S + r * K, K, pad)) * D;
#pragma omp simd
          for (int64_t k = 0; k < D; ++k) h[k] = x[k];
          continue;
        }
        int64_t count = 0;
        for (int64_t l = 0; l < K; ++l) count += S[r * K + l] != pad;
        const float* x0 = X + r * K * D;
#pragma omp simd
        for (int64_t k = 0; k < D; ++k) h[k] = x0[k];
        for (int64_t l = 1; l < K; ++l) {
          const float* x = x0 + l * D;
#pragma omp simd
          for (int64_t k = 0; k < D; ++k) h[k] += x[k];  // empty slots hold zeros
        }
        const float c = static_cast<float>(count);
#pragma omp simd
        for (int64_t k = 0; k < D; ++k) h[k] /= c;
      }
    });
  }

  std::vector<torch::Tensor> backward(const graphtree::Level& level, const std::vector<torch::Tensor>& grad_states,
                                      std::vector<torch::Tensor>& grad_inputs) override {
    TORCH_CHECK(save_, "FixedHeadLevels: backward after a forward that saved nothing");
    const int64_t n = level.end - level.begin, K = level.width;
    auto grad_head = grad_states[0].contiguous();
    if (K == 0) {
      if (!grad_inputs.empty() && grad_inputs[0].defined()) grad_inputs[0].add_(grad_head);
      return {torch::Tensor()};
    }
    const int64_t D = grad_head.size(1), pad = pad_, method = method_;
    auto grad_children = torch::zeros({n * K, D}, grad_head.options());
    const int64_t* S = level.slots.data_ptr<int64_t>();
    const float* G = grad_head.data_ptr<float>();
    float* gX = grad_children.data_ptr<float>();
    for_rows(n, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const float* g = G + r * D;
        if (method < 2) {
          float* gx = gX + (r * K + pick(S + r * K, K, pad)) * D;
#pragma omp simd
          for (int64_t k = 0; k < D; ++k) gx[k] = g[k];
          continue;
        }
        int64_t count = 0;
        for (int64_t l = 0; l < K; ++l) count += S[r * K + l] != pad;
        const float c = static_cast<float>(count);
        for (int64_t l = 0; l < K; ++l) {
          if (S[r * K + l] == pad) continue;
          float* gx = gX + (r * K + l) * D;
#pragma omp simd
          for (int64_t k = 0; k < D; ++k) gx[k] = g[k] / c;
        }
      }
    });
    return {grad_children};
  }

  std::vector<torch::Tensor> param_grads() override { return {}; }

 private:
  // The slot of the leftmost (method 0) or rightmost (1) child present among a node's K slots.
  int64_t pick(const int64_t* slots, int64_t K, int64_t pad) const {
    if (method_ == 0) {
      for (int64_t l = 0; l < K; ++l)
        if (slots[l] != pad) return l;
    } else {
      for (int64_t l = K - 1; l >= 0; --l)
        if (slots[l] != pad) return l;
    }
    return 0;  // unreachable: an internal node has a child
  }

  int64_t method_;
  int64_t pad_ = -1;
  bool save_ = false;
};

}  // namespace

void bind_fixed_head_levels(pybind11::module& m) {
  pybind11::class_<FixedHeadLevels, graphtree::LevelKernel, std::shared_ptr<FixedHeadLevels>>(
      m, "FixedHeadLevels", "Teng & Zhang's left, right and average heads (Table 5) for the compiled level loop")
      .def(pybind11::init<int64_t>(), pybind11::arg("method"));
}

namespace {

// The sums of the leaf rows below every node and their number (a leaf counts itself), bottom-up: the leaf means
// that BiTreeLSTM feeds its classifier (graphtree/models/bicontree.py, _LeafSum), as a LevelKernel. No
// parameters; a node's gradient is copied into each of its children's slots.
class LeafSumLevels : public graphtree::LevelKernel {
 public:
  void begin(const std::vector<graphtree::Level>& levels, bool save) override { save_ = save; }

  void forward(const graphtree::Level& level, const std::vector<torch::Tensor>& inputs,
               const std::vector<torch::Tensor>& children, std::vector<torch::Tensor>& buffers, bool save) override {
    const int64_t n = level.end - level.begin;
    auto total = buffers[0].narrow(0, level.begin, n), count = buffers[1].narrow(0, level.begin, n);
    if (level.width == 0) {
      total.copy_(inputs[0]);
      count.fill_(1.f);
      return;
    }
    at::sum_out(total, children[0].view({n, level.width, -1}), 1);
    at::sum_out(count, children[1].view({n, level.width, 1}), 1);
  }

  std::vector<torch::Tensor> backward(const graphtree::Level& level, const std::vector<torch::Tensor>& grad_states,
                                      std::vector<torch::Tensor>& grad_inputs) override {
    TORCH_CHECK(save_, "LeafSumLevels: backward after a forward that saved nothing");
    const int64_t n = level.end - level.begin;
    const auto& grad_total = grad_states[0];  // the counts are constants
    if (level.width == 0) {
      if (!grad_inputs.empty() && grad_inputs[0].defined()) grad_inputs[0].add_(grad_total);
      return {torch::Tensor(), torch::Tensor()};
    }
    // A copy, never a view: for one child per node expand().contiguous() is grad_total itself, rows of the
    // gradient buffer that the children's rows are then added into.
    auto grad_children = grad_total.unsqueeze(1).expand({n, level.width, grad_total.size(1)})
                             .clone(at::MemoryFormat::Contiguous);
    return {grad_children.view({n * level.width, -1}), torch::Tensor()};
  }

  std::vector<torch::Tensor> param_grads() override { return {}; }

 private:
  bool save_ = false;
};

}  // namespace

void bind_leaf_sum_levels(pybind11::module& m) {
  pybind11::class_<LeafSumLevels, graphtree::LevelKernel, std::shared_ptr<LeafSumLevels>>(
      m, "LeafSumLevels", "Sums and counts of the leaf rows below every node, for the compiled level loop")
      .def(pybind11::init<>());
}
