// The elementwise part of one level of the Child-Sum Tree-LSTM (graphtree/nn/child_sum.py, Tai et al. 2015,
// eqs 2-8), forward and backward, each in one pass over the level's rows. K is the level's slot count; an
// empty slot has zero child states, so its forget gate multiplies a zero memory and gets a zero gradient.
//
// Wx rows (d wide each): W x + b for i, o, u, f. iou_terms: U^(iou) h~ + b for i, o, u. uf_terms: U^(f) h_k + b
// for every child slot k. "activated" rows: i, o, u.

#include "kernels.h"

namespace graphtree {
namespace {

// Eqs 3-8 on n rows with K child slots each (pointers to contiguous rows; see the file comment).
void forward_rows(const float* X, const float* Tiou, const float* Uf, const float* Cj, float* H, float* C, float* T,
                  float* A, float* F, int64_t n, int64_t K, int64_t d) {
  for_rows(n, [&](int64_t r) {
    const float *x = X + r * 4 * d, *t = Tiou + r * 3 * d;
    float *a = A + r * 3 * d, *cr = C + r * d, *hr = H + r * d, *tr = T + r * d;
#pragma omp simd
    for (int64_t k = 0; k < 2 * d; ++k) a[k] = sigmoid(x[k] + t[k]);  // eqs 3, 5
#pragma omp simd
    for (int64_t k = 0; k < d; ++k) {
      a[2 * d + k] = tanh_of(x[2 * d + k] + t[2 * d + k]);  // eq 6
      cr[k] = a[k] * a[2 * d + k];
    }
    float* f = F + r * K * d;
    for (int64_t l = 0; l < K; ++l) {
      const float* uf = Uf + (r * K + l) * d;
#pragma omp simd
      for (int64_t k = 0; k < d; ++k) f[l * d + k] = sigmoid(x[3 * d + k] + uf[k]);  // eq 4, one gate per child
    }
    add_forgotten(cr, f, Cj + r * K * d, K, d);  // eq 7
#pragma omp simd
    for (int64_t k = 0; k < d; ++k) {
      tr[k] = tanh_of(cr[k]);
      hr[k] = a[d + k] * tr[k];  // eq 8
    }
  });
}

// Derivatives of forward_rows: gX [n, 4d] (the first 3d columns: of iou_terms; the last d: the forget gates'
// gradients summed over the children), gF [n, K, d] (of uf_terms) and gCj [n, K, d].
void backward_rows(const float* gH, const float* gC, const float* A, const float* F, const float* Cj, const float* T,
                   float* gX, float* gF, float* gCj, int64_t n, int64_t K, int64_t d) {
  std::vector<float> total(d);  // dL/dc of the row
  float* gc = total.data();
  for_rows(n, [&](int64_t r) {
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
    forgotten_backward(gc, F + r * K * d, Cj + r * K * d, gF + r * K * d, gCj + r * K * d, K, d);
    for (int64_t l = 0; l < K; ++l) {
      const float* gfl = gF + (r * K + l) * d;
#pragma omp simd
      for (int64_t k = 0; k < d; ++k) gx[3 * d + k] += gfl[k];
    }
  });
}

struct ChildSumSaved {
  Tensor activated, f, c_children, tanh_c;
};

// The Child-Sum Tree-LSTM (graphtree/nn/child_sum.py, eqs 2-8) as a LevelKernel. Input: W x + b for every node.
// Parameter gradients: U_iou.weight, U_iou.bias, U_f.weight, U_f.bias (ChildSumTreeLSTM.compiled_weights).
class ChildSumLevels : public Levels<ChildSumSaved> {
 public:
  ChildSumLevels(Tensor U_iou, Tensor b_iou, Tensor U_f, Tensor b_f)
      : Levels("ChildSumLevels", U_f.options()), U_iou_(with_transposed(U_iou)), U_f_(with_transposed(U_f)),
        b_iou_(b_iou), b_f_(b_f) {
    check_all({&b_iou_, &b_f_});
    d_ = U_f.size(0);
    TORCH_CHECK(U_iou.size(0) == 3 * d_ && U_iou.size(1) == d_ && U_f.size(1) == d_,
                "ChildSumLevels: weight shapes do not agree");
    expect(0, {d_, 0});
  }

  void start(const std::vector<Level>& levels) override {
    first_ = levels.empty() ? 0 : levels.front().begin;
    const int64_t rows = levels.empty() ? 0 : levels.back().end - first_;
    // Every node's h~ (zeros at the leaves), and the gates' gradients: the rows of the weight gradients.
    h_tilde_ = fresh(rows, d_);
    grad_iou_ = save_ ? fresh(rows, 3 * d_) : Tensor();
    grad_f_ = save_ ? fresh(gathered(0).size(0), d_) : Tensor();
  }

  void forward(const Level& level, const Tensors& inputs,
               const Tensors& children, Tensors& buffers, bool save) override {
    const int64_t n = level.rows(), K = level.width, d = d_;
    auto h_k = children[0].view({n, K, d}), c_k = children[1].view({n, K, d});
    auto h_tilde = h_tilde_.narrow(0, level.begin - first_, n);
    at::sum_out(h_tilde, h_k, {1});  // eq 2
    auto iou_terms = at::addmm(b_iou_, h_tilde, U_iou_.t);
    auto uf_terms = at::addmm(b_f_, children[0], U_f_.t);
    auto tanh_c = fresh(n, d), activated = fresh(n, 3 * d), f = fresh(n * K, d);
    forward_rows(inputs[0].data_ptr<float>(), iou_terms.data_ptr<float>(), uf_terms.data_ptr<float>(),
                 c_k.data_ptr<float>(), rows_of(buffers[0], level).data_ptr<float>(),
                 rows_of(buffers[1], level).data_ptr<float>(), tanh_c.data_ptr<float>(), activated.data_ptr<float>(),
                 f.data_ptr<float>(), n, K, d);
    if (save) saved(level) = {activated, f, c_k, tanh_c};
  }

  Tensors backward(const Level& level, const Tensors& grad_states, Tensors& grad_inputs) override {
    const auto& s = saved(level);
    const int64_t n = level.rows(), K = level.width, d = d_;
    auto grad_wx = fresh(n, 4 * d), grad_c_k = fresh(n * K, d);
    auto grad_f = grad_f_.narrow(0, first_slot(level), n * K);
    backward_rows(grad_states[0].data_ptr<float>(), grad_states[1].data_ptr<float>(), s.activated.data_ptr<float>(),
                  s.f.data_ptr<float>(), s.c_children.data_ptr<float>(), s.tanh_c.data_ptr<float>(),
                  grad_wx.data_ptr<float>(), grad_f.data_ptr<float>(), grad_c_k.data_ptr<float>(), n, K, d);
    auto grad_iou = grad_iou_.narrow(0, level.begin - first_, n);
    grad_iou.copy_(grad_wx.narrow(1, 0, 3 * d));
    if (auto* grad_x = input_grad(grad_inputs)) grad_x->add_(grad_wx);
    if (K == 0) return {};
    auto grad_h_k = at::mm(grad_f, U_f_.w).view({n, K, d});
    grad_h_k.add_(at::mm(grad_iou, U_iou_.w).unsqueeze(1));
    return {grad_h_k.view({n * K, d}), grad_c_k};
  }

  Tensors param_grads() override {
    return {weight_grad(U_iou_.w, grad_iou_, h_tilde_), bias_grad(b_iou_, grad_iou_),
            weight_grad(U_f_.w, grad_f_, gathered(0)), bias_grad(b_f_, grad_f_)};
  }

 private:
  Weight U_iou_, U_f_;
  Tensor b_iou_, b_f_;
  int64_t d_ = 0, first_ = 0;
  Tensor h_tilde_, grad_iou_, grad_f_;
};

}  // namespace

KernelPtr child_sum_levels(Tensor U_iou, Tensor b_iou, Tensor U_f, Tensor b_f) {
  return std::make_shared<ChildSumLevels>(U_iou, b_iou, U_f, b_f);
}

}  // namespace graphtree
