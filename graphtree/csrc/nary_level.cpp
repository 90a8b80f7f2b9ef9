// The elementwise part of one level of the N-ary Tree-LSTM (graphtree/nn/nary.py), fused into one pass over
// the level's rows, forward and backward. The matrix products stay in PyTorch; these loops replace the dozen
// small elementwise operators between them, whose per-call cost dominates on a tree level's few rows.
//
// Gate layout of a row (d = hidden size, N = children): i, o, u, f_1 .. f_N, each d wide. The u block's
// weights are doubled by the caller, so one sigmoid serves every gate: u = 2 sigmoid(2 z) - 1 = tanh(z).

#include <vector>

#include "common.h"

using graphtree::check;
using graphtree::check_all;
using graphtree::grain_rows;
using graphtree::sigmoid;
using graphtree::tanh_of;

// gates: [n, (3 + N) d] pre-activations, replaced by the activations; c_children: [n, N, d].
// Returns h, c and tanh(c), each [n, d] (eqs 9-14 of Tai et al. 2015).
std::vector<torch::Tensor> nary_level_forward(torch::Tensor gates, torch::Tensor c_children) {
  check(gates, "gates");
  check(c_children, "c_children");
  TORCH_CHECK(gates.is_contiguous(), "gates must be contiguous (it is overwritten in place)");
  c_children = c_children.contiguous();
  const int64_t n = c_children.size(0), N = c_children.size(1), d = c_children.size(2);
  TORCH_CHECK(gates.dim() == 2 && gates.size(0) == n && gates.size(1) == (3 + N) * d,
              "gates must be [n, (3 + N) d] for c_children [n, N, d]");
  auto h = torch::empty({n, d}, gates.options());
  auto c = torch::empty({n, d}, gates.options());
  auto tanh_c = torch::empty({n, d}, gates.options());
  float* G = gates.data_ptr<float>();
  const float* Cj = c_children.data_ptr<float>();
  float *H = h.data_ptr<float>(), *C = c.data_ptr<float>(), *T = tanh_c.data_ptr<float>();
  const int64_t width = (3 + N) * d;
  at::parallel_for(0, n, grain_rows(width), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* g = G + r * width;
      const float* cj = Cj + r * N * d;
      float *hr = H + r * d, *cr = C + r * d, *tr = T + r * d;
#pragma omp simd
      for (int64_t k = 0; k < width; ++k) g[k] = sigmoid(g[k]);
#pragma omp simd
      for (int64_t k = 0; k < d; ++k) cr[k] = g[k] * (2.f * g[2 * d + k] - 1.f);  // i * u
      for (int64_t l = 0; l < N; ++l) {
        const float* f = g + (3 + l) * d;
        const float* cl = cj + l * d;
#pragma omp simd
        for (int64_t k = 0; k < d; ++k) cr[k] += f[k] * cl[k];  // + f_l * c_l
      }
#pragma omp simd
      for (int64_t k = 0; k < d; ++k) {
        tr[k] = tanh_of(cr[k]);
        hr[k] = g[d + k] * tr[k];
      }
    }
  });
  return {h, c, tanh_c};
}

// Derivatives of nary_level_forward. activated: the gates it returned; grad_h, grad_c: [n, d].
// Returns the gradient of the (undoubled) pre-activations, [n, (3 + N) d], and of c_children, [n, N, d].
std::vector<torch::Tensor> nary_level_backward(torch::Tensor grad_h, torch::Tensor grad_c, torch::Tensor activated,
                                               torch::Tensor c_children, torch::Tensor tanh_c) {
  check_all({&grad_h, &grad_c, &activated, &c_children, &tanh_c});
  const int64_t n = c_children.size(0), N = c_children.size(1), d = c_children.size(2);
  const int64_t width = (3 + N) * d;
  TORCH_CHECK(activated.size(0) == n && activated.size(1) == width, "activated must be [n, (3 + N) d]");
  auto grad_gates = torch::empty({n, width}, activated.options());
  auto grad_cj = torch::empty({n, N, d}, activated.options());
  const float *gH = grad_h.data_ptr<float>(), *gC = grad_c.data_ptr<float>(), *A = activated.data_ptr<float>();
  const float *Cj = c_children.data_ptr<float>(), *T = tanh_c.data_ptr<float>();
  float *gG = grad_gates.data_ptr<float>(), *gCj = grad_cj.data_ptr<float>();
  at::parallel_for(0, n, grain_rows(width), [&](int64_t begin, int64_t end) {
    std::vector<float> total(d);  // dL/dc of the row: from c itself and through h = o tanh(c)
    float* gc = total.data();
    for (int64_t r = begin; r < end; ++r) {
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
      for (int64_t l = 0; l < N; ++l) {
        const float* f = a + (3 + l) * d;
        const float* cl = cj + l * d;
        float* gf = gg + (3 + l) * d;
        float* gcl = gcj + l * d;
#pragma omp simd
        for (int64_t k = 0; k < d; ++k) {
          gf[k] = gc[k] * cl[k] * f[k] * (1.f - f[k]);     // forget gate of child l
          gcl[k] = gc[k] * f[k];
        }
      }
    }
  });
  return {grad_gates, grad_cj};
}
