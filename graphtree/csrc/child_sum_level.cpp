// The elementwise part of one level of the Child-Sum Tree-LSTM (graphtree/nn/child_sum.py, Tai et al. 2015,
// eqs 2-8), forward and backward, each in one pass over the level's rows. K is the level's slot count; an
// empty slot has zero child states, so its forget gate multiplies a zero memory and gets a zero gradient.
//
// Wx rows (d wide each): W x + b for i, o, u, f. iou_terms: U^(iou) h~ + b for i, o, u. uf_terms: U^(f) h_k + b
// for every child slot k. "activated" rows: i, o, u.

#include <vector>

#include "common.h"
#include "level_loop.h"

using graphtree::check_all;
using graphtree::for_rows;
using graphtree::sigmoid;
using graphtree::tanh_of;

namespace {

// Eqs 3-8 on n rows with K child slots each (pointers to contiguous rows; see the file comment).
void forward_rows(const float* X, const float* Tiou, const float* Uf, const float* Cj, float* H, float* C, float* T,
                  float* A, float* F, int64_t n, int64_t K, int64_t d) {
  for_rows(n, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float *x = X + r * 4 * d, *t = Tiou + r * 3 * d;
      float *a = A + r * 3 * d, *cr = C + r * d, *hr = H + r * d, *tr = T + r * d;
#pragma omp simd
      for (int64_t k = 0; k < 2 * d; ++k) a[k] = sigmoid(x[k] + t[k]);  // eqs 3, 5
#pragma omp simd
      for (int64_t k = 0; k < d; ++k) {
        a[2 * d + k] = tanh_of(x[2 * d + k] + t[2 * d + k]);  // eq 6
        cr[k] = a[k] * a[2 * d + k];
      }
      for (int64_t l = 0; l < K; ++l) {
        const float *uf = Uf + (r * K + l) * d, *cl = Cj + (r * K + l) * d;
        float* fl = F + (r * K + l) * d;
#pragma omp simd
        for (int64_t k = 0; k < d; ++k) {
          fl[k] = sigmoid(x[3 * d + k] + uf[k]);  // eq 4, one gate per child
          cr[k] += fl[k] * cl[k];                 // eq 7
        }
      }
#pragma omp simd
      for (int64_t k = 0; k < d; ++k) {
        tr[k] = tanh_of(cr[k]);
        hr[k] = a[d + k] * tr[k];  // eq 8
      }
    }
  });
}

// Derivatives of forward_rows: gX [n, 4d] (the first 3d columns: of iou_terms; the last d: the forget gates'
// gradients summed over the children), gF [n, K, d] (of uf_terms) and gCj [n, K, d].
void backward_rows(const float* gH, const float* gC, const float* A, const float* F, const float* Cj, const float* T,
                   float* gX, float* gF, float* gCj, int64_t n, int64_t K, int64_t d) {
  for_rows(n, [&](int64_t begin, int64_t end) {
    std::vector<float> total(d);  // dL/dc of the row
    float* gc = total.data();
    for (int64_t r = begin; r < end; ++r) {
      const float *gh = gH + r * d, *gcr = gC + r * d, *a = A + r * 3 * d, *t = T + r * d;
      float* gx = gX + r * 4 * d;
#pragma omp simd
      for (int64_t k = 0; k < d; ++k) {
        const float i = a[k], o = a[d + k], u = a[2 * d + k];
        gc[k] = gcr[k] + gh[k] * o * (1.f - t[k] * t[k]);
        gx[k] = gc[k] * u * i * (1.f - i);
        gx[d + k] = gh[k] * t[k] * o * (1.f - o);
        gx[2 * d + k] = gc[k] * i * (1.f - u * u);
        gx[3 * d + k] = 0.f;
      }
      for (int64_t l = 0; l < K; ++l) {
        const float *fl = F + (r * K + l) * d, *cl = Cj + (r * K + l) * d;
        float *gfl = gF + (r * K + l) * d, *gcl = gCj + (r * K + l) * d;
#pragma omp simd
        for (int64_t k = 0; k < d; ++k) {
          gfl[k] = gc[k] * cl[k] * fl[k] * (1.f - fl[k]);
          gx[3 * d + k] += gfl[k];
          gcl[k] = gc[k] * fl[k];
        }
      }
    }
  });
}

}  // namespace

namespace {

// The Child-Sum Tree-LSTM (graphtree/nn/child_sum.py, eqs 2-8) as a LevelKernel for the engine's compiled level
// loop: its update and the update's derivatives, in C++. Input: W x + b for every node. Parameter gradients:
// U_iou.weight, U_iou.bias, U_f.weight, U_f.bias (graphtree/backend/compiled.py, child_sum).
class ChildSumLevels : public graphtree::LevelKernel {
 public:
  ChildSumLevels(torch::Tensor U_iou_weight, torch::Tensor U_iou_bias, torch::Tensor U_f_weight,
                 torch::Tensor U_f_bias)
      : U_iou_(U_iou_weight.contiguous()),
        b_iou_(U_iou_bias.contiguous()),
        U_f_(U_f_weight.contiguous()),
        b_f_(U_f_bias.contiguous()) {
    for (auto* t : {&U_iou_, &b_iou_, &U_f_, &b_f_}) graphtree::check(*t, "every weight");
    d_ = U_f_.size(0);
    TORCH_CHECK(U_iou_.size(0) == 3 * d_ && U_iou_.size(1) == d_ && U_f_.size(1) == d_,
                "ChildSumLevels: weight shapes do not agree");
    auto made = derive(U_iou_, U_iou_bias, U_f_, U_f_bias);
    U_iou_t_ = graphtree::transposed_at(made, 0, U_iou_, "ChildSumLevels");
    U_f_t_ = graphtree::transposed_at(made, 1, U_f_, "ChildSumLevels");
  }

  // The weights transposed (the level products read them row by row).
  static std::vector<torch::Tensor> derive(const torch::Tensor& U_iou_weight, const torch::Tensor& /*U_iou_bias*/,
                                           const torch::Tensor& U_f_weight, const torch::Tensor& /*U_f_bias*/) {
    return {graphtree::transposed(U_iou_weight), graphtree::transposed(U_f_weight)};
  }

  void begin(const std::vector<graphtree::Level>& levels, bool save) override {
    save_ = save;
    contexts_.assign(levels.size(), {});
    int64_t rows = 0, slots = 0;
    for (const auto& level : levels) {
      contexts_[level.index] = {rows, slots};
      rows += level.end - level.begin;
      slots += level.slots.numel();
    }
    // Every node's h~ and every slot's child h, level after level: the rows of the weight gradients.
    h_tilde_ = torch::empty({rows, d_}, U_f_.options());
    h_children_ = torch::empty({slots, d_}, U_f_.options());
  }

  torch::Tensor gather_destination(const graphtree::Level& level, int64_t state) override {
    if (state != 0) return {};
    return h_children_.narrow(0, contexts_[level.index].slot_offset, level.slots.numel());
  }

  void forward(const graphtree::Level& level, const std::vector<torch::Tensor>& inputs,
               const std::vector<torch::Tensor>& children, std::vector<torch::Tensor>& buffers, bool save) override {
    const int64_t n = level.end - level.begin, K = level.width, d = d_;
    Context& context = contexts_[level.index];
    auto Wx = inputs[0].contiguous();
    graphtree::check(Wx, "Wx");
    auto h_k = children[0].view({n, K, d});
    auto c_k = children[1].contiguous().view({n, K, d});
    auto h_tilde = h_tilde_.narrow(0, context.row_offset, n);
    at::sum_out(h_tilde, h_k, {1});  // eq 2 (zeros at the leaves)
    auto iou_terms = at::addmm(b_iou_, h_tilde, U_iou_t_);
    auto uf_terms = at::addmm(b_f_, children[0], U_f_t_);
    auto tanh_c = torch::empty({n, d}, Wx.options()), activated = torch::empty({n, 3 * d}, Wx.options());
    auto f = torch::empty({n, K, d}, Wx.options());
    forward_rows(Wx.data_ptr<float>(), iou_terms.data_ptr<float>(), uf_terms.data_ptr<float>(),
                 c_k.data_ptr<float>(), buffers[0].narrow(0, level.begin, n).data_ptr<float>(),
                 buffers[1].narrow(0, level.begin, n).data_ptr<float>(), tanh_c.data_ptr<float>(),
                 activated.data_ptr<float>(), f.data_ptr<float>(), n, K, d);
    if (save) {
      context.activated = activated;
      context.f = f;
      context.c_children = c_k;
      context.tanh_c = tanh_c;
    }
  }

  std::vector<torch::Tensor> backward(const graphtree::Level& level, const std::vector<torch::Tensor>& grad_states,
                                      std::vector<torch::Tensor>& grad_inputs) override {
    TORCH_CHECK(save_, "ChildSumLevels: backward after a forward that saved nothing");
    const int64_t n = level.end - level.begin, K = level.width, d = d_;
    const Context& context = contexts_[level.index];
    if (!grad_iou_.defined()) {
      grad_iou_ = torch::empty({h_tilde_.size(0), 3 * d}, U_f_.options());
      grad_f_ = torch::empty({h_children_.size(0), d}, U_f_.options());
    }
    auto grad_h = grad_states[0].contiguous(), grad_c = grad_states[1].contiguous();
    auto grad_wx = torch::empty({n, 4 * d}, U_f_.options());
    auto grad_f = grad_f_.narrow(0, context.slot_offset, n * K);
    auto grad_c_k = torch::empty({n * K, d}, U_f_.options());
    backward_rows(grad_h.data_ptr<float>(), grad_c.data_ptr<float>(), context.activated.data_ptr<float>(),
                  context.f.data_ptr<float>(), context.c_children.data_ptr<float>(), context.tanh_c.data_ptr<float>(),
                  grad_wx.data_ptr<float>(), grad_f.data_ptr<float>(), grad_c_k.data_ptr<float>(), n, K, d);
    auto grad_iou = grad_iou_.narrow(0, context.row_offset, n);
    grad_iou.copy_(grad_wx.narrow(1, 0, 3 * d));
    if (!grad_inputs.empty() && grad_inputs[0].defined()) grad_inputs[0].add_(grad_wx);
    if (K == 0) return {torch::Tensor(), torch::Tensor()};
    auto grad_h_k = at::mm(grad_f, U_f_).view({n, K, d});
    grad_h_k.add_(at::mm(grad_iou, U_iou_).unsqueeze(1));
    return {grad_h_k.view({n * K, d}), grad_c_k};
  }

  std::vector<torch::Tensor> param_grads() override {
    auto grad_U_iou = torch::zeros_like(U_iou_), grad_U_f = torch::zeros_like(U_f_);
    auto grad_b_iou = torch::zeros_like(b_iou_), grad_b_f = torch::zeros_like(b_f_);
    if (grad_iou_.defined()) {
      grad_U_iou.addmm_(grad_iou_.t(), h_tilde_);
      grad_b_iou += grad_iou_.sum(0);
      if (grad_f_.size(0) > 0) {
        grad_U_f.addmm_(grad_f_.t(), h_children_);
        grad_b_f += grad_f_.sum(0);
      }
    }
    return {grad_U_iou, grad_b_iou, grad_U_f, grad_b_f};
  }

 private:
  struct Context {
    int64_t row_offset = 0, slot_offset = 0;  // the level's first row in h_tilde_ / grad_iou_, h_children_ / grad_f_
    torch::Tensor activated, f, c_children, tanh_c;
  };

  torch::Tensor U_iou_, b_iou_, U_f_, b_f_, U_iou_t_, U_f_t_;
  int64_t d_ = 0;
  bool save_ = false;
  std::vector<Context> contexts_;
  torch::Tensor h_tilde_, h_children_, grad_iou_, grad_f_;
};

}  // namespace

void bind_child_sum_levels(pybind11::module& m) {
  pybind11::class_<ChildSumLevels, graphtree::LevelKernel, std::shared_ptr<ChildSumLevels>>(
      m, "ChildSumLevels", "The Child-Sum Tree-LSTM's level math for the engine's compiled level loop")
      .def(pybind11::init<torch::Tensor, torch::Tensor, torch::Tensor, torch::Tensor>(),
           pybind11::arg("U_iou_weight"), pybind11::arg("U_iou_bias"), pybind11::arg("U_f_weight"),
           pybind11::arg("U_f_bias"));
}
