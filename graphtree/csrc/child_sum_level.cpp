// The elementwise part of one level of the Child-Sum Tree-LSTM (graphtree/nn/child_sum.py, Tai et al. 2015,
// eqs 2-8), forward and backward, each in one pass over the level's rows. K is the level's slot count; an
// empty slot has zero child states, so its forget gate multiplies a zero memory and gets a zero gradient.
//
// Wx rows (d wide each): W x + b for i, o, u, f. iou_terms: U^(iou) h~ + b for i, o, u. uf_terms: U^(f) h_k + b
// for every child slot k. "activated" rows: i, o, u.

#include <vector>

#include "common.h"

using graphtree::check_all;
using graphtree::grain_rows;
using graphtree::sigmoid;
using graphtree::tanh_of;

// Returns h, c, tanh(c) [n, d], activated [n, 3d] and the forget gates f [n, K, d].
std::vector<torch::Tensor> child_sum_level_forward(torch::Tensor Wx, torch::Tensor iou_terms, torch::Tensor uf_terms,
                                                   torch::Tensor c_children) {
  check_all({&Wx, &iou_terms, &uf_terms, &c_children});
  const int64_t n = c_children.size(0), K = c_children.size(1), d = c_children.size(2);
  TORCH_CHECK(Wx.size(1) == 4 * d && iou_terms.size(1) == 3 * d && uf_terms.sizes() == c_children.sizes(),
              "expected Wx [n, 4d], iou_terms [n, 3d], uf_terms and c_children [n, K, d]");
  auto opts = Wx.options();
  auto h = torch::empty({n, d}, opts), c = torch::empty({n, d}, opts), tanh_c = torch::empty({n, d}, opts);
  auto activated = torch::empty({n, 3 * d}, opts), f = torch::empty({n, K, d}, opts);
  const float *X = Wx.data_ptr<float>(), *Tiou = iou_terms.data_ptr<float>(), *Uf = uf_terms.data_ptr<float>();
  const float* Cj = c_children.data_ptr<float>();
  float *H = h.data_ptr<float>(), *C = c.data_ptr<float>(), *T = tanh_c.data_ptr<float>();
  float *A = activated.data_ptr<float>(), *F = f.data_ptr<float>();
  at::parallel_for(0, n, grain_rows((4 + 2 * K) * d), [&](int64_t begin, int64_t end) {
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
  return {h, c, tanh_c, activated, f};
}

// Returns grad_Wx [n, 4d] (its first 3d columns are the gradient of iou_terms, the last d the forget gates'
// gradients summed over the children), grad_f [n, K, d] (the gradient of uf_terms) and grad_c_children [n, K, d].
std::vector<torch::Tensor> child_sum_level_backward(torch::Tensor grad_h, torch::Tensor grad_c,
                                                    torch::Tensor activated, torch::Tensor f,
                                                    torch::Tensor c_children, torch::Tensor tanh_c) {
  check_all({&grad_h, &grad_c, &activated, &f, &c_children, &tanh_c});
  const int64_t n = c_children.size(0), K = c_children.size(1), d = c_children.size(2);
  TORCH_CHECK(activated.size(1) == 3 * d && f.sizes() == c_children.sizes(), "expected activated [n, 3d], f [n, K, d]");
  auto opts = activated.options();
  auto grad_wx = torch::empty({n, 4 * d}, opts), grad_f = torch::empty({n, K, d}, opts);
  auto grad_cj = torch::empty({n, K, d}, opts);
  const float *gH = grad_h.data_ptr<float>(), *gC = grad_c.data_ptr<float>(), *A = activated.data_ptr<float>();
  const float *F = f.data_ptr<float>(), *Cj = c_children.data_ptr<float>(), *T = tanh_c.data_ptr<float>();
  float *gX = grad_wx.data_ptr<float>(), *gF = grad_f.data_ptr<float>(), *gCj = grad_cj.data_ptr<float>();
  at::parallel_for(0, n, grain_rows((4 + 3 * K) * d), [&](int64_t begin, int64_t end) {
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
  return {grad_wx, grad_f, grad_cj};
}
