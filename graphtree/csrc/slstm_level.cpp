// The elementwise parts of one level of the S-LSTM (graphtree/nn/slstm.py, Zhu et al. 2015, eqs 1-7), each fused
// into one pass over the level's rows. A level has a matrix product in the middle (the output gate peeks at the
// new cell through W_co, eq 6), so forward and backward each come in two halves around it.
//
// h_terms rows (d wide each): W_h [h^L, h^R] + b for the gates i, f_L, f_R, the candidate x and o;
// c_terms rows: W_c [c^L, c^R] for i, f_L, f_R. "activated" rows: i, f_L, f_R, tanh(x).

#include <vector>

#include "common.h"

using graphtree::check;
using graphtree::grain_rows;
using graphtree::sigmoid;
using graphtree::tanh_of;

// Eqs 1-5: returns activated [n, 4d] and c_t [n, d].
std::vector<torch::Tensor> slstm_level_cell(torch::Tensor h_terms, torch::Tensor c_terms, torch::Tensor c_children) {
  for (auto* t : {&h_terms, &c_terms, &c_children}) {
    check(*t, "every argument");
    *t = t->contiguous();
  }
  const int64_t n = c_children.size(0), d = c_children.size(2);
  TORCH_CHECK(c_children.size(1) == 2 && h_terms.size(1) == 5 * d && c_terms.size(1) == 3 * d,
              "expected h_terms [n, 5d], c_terms [n, 3d], c_children [n, 2, d]");
  auto activated = torch::empty({n, 4 * d}, h_terms.options());
  auto c = torch::empty({n, d}, h_terms.options());
  const float *Ht = h_terms.data_ptr<float>(), *Ct = c_terms.data_ptr<float>(), *Cj = c_children.data_ptr<float>();
  float *A = activated.data_ptr<float>(), *C = c.data_ptr<float>();
  at::parallel_for(0, n, grain_rows(5 * d), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float *ht = Ht + r * 5 * d, *ct = Ct + r * 3 * d, *cL = Cj + r * 2 * d, *cR = cL + d;
      float *a = A + r * 4 * d, *cr = C + r * d;
#pragma omp simd
      for (int64_t k = 0; k < 3 * d; ++k) a[k] = sigmoid(ht[k] + ct[k]);  // eqs 1-3
#pragma omp simd
      for (int64_t k = 0; k < d; ++k) {
        a[3 * d + k] = tanh_of(ht[3 * d + k]);                                     // tanh of x_t, eq 4
        cr[k] = a[d + k] * cL[k] + a[2 * d + k] * cR[k] + a[k] * a[3 * d + k];  // eq 5
      }
    }
  });
  return {activated, c};
}

// Eqs 6-7, given W_co c_t: returns o_t, tanh(c_t) and h_t, each [n, d].
std::vector<torch::Tensor> slstm_level_output(torch::Tensor h_terms, torch::Tensor co, torch::Tensor c_t) {
  for (auto* t : {&h_terms, &co, &c_t}) {
    check(*t, "every argument");
    *t = t->contiguous();
  }
  const int64_t n = c_t.size(0), d = c_t.size(1);
  TORCH_CHECK(h_terms.size(1) == 5 * d && co.size(1) == d, "expected h_terms [n, 5d], co and c_t [n, d]");
  auto o = torch::empty({n, d}, c_t.options()), tanh_c = torch::empty({n, d}, c_t.options());
  auto h = torch::empty({n, d}, c_t.options());
  const float *Ht = h_terms.data_ptr<float>(), *Co = co.data_ptr<float>(), *C = c_t.data_ptr<float>();
  float *O = o.data_ptr<float>(), *T = tanh_c.data_ptr<float>(), *H = h.data_ptr<float>();
  at::parallel_for(0, n, grain_rows(3 * d), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float *ht = Ht + r * 5 * d + 4 * d, *co_r = Co + r * d, *cr = C + r * d;
      float *orow = O + r * d, *tr = T + r * d, *hr = H + r * d;
#pragma omp simd
      for (int64_t k = 0; k < d; ++k) {
        orow[k] = sigmoid(ht[k] + co_r[k]);  // eq 6
        tr[k] = tanh_of(cr[k]);
        hr[k] = orow[k] * tr[k];  // eq 7
      }
    }
  });
  return {o, tanh_c, h};
}

// Gradient of the output gate's pre-activation: grad_h tanh(c) o (1 - o), [n, d].
torch::Tensor slstm_level_output_backward(torch::Tensor grad_h, torch::Tensor o, torch::Tensor tanh_c) {
  for (auto* t : {&grad_h, &o, &tanh_c}) {
    check(*t, "every argument");
    *t = t->contiguous();
  }
  auto grad_o = torch::empty_like(o);
  const int64_t total = o.numel();
  const float *gH = grad_h.data_ptr<float>(), *O = o.data_ptr<float>(), *T = tanh_c.data_ptr<float>();
  float* gO = grad_o.data_ptr<float>();
  at::parallel_for(0, total, at::internal::GRAIN_SIZE, [&](int64_t begin, int64_t end) {
#pragma omp simd
    for (int64_t k = begin; k < end; ++k) gO[k] = gH[k] * T[k] * O[k] * (1.f - O[k]);
  });
  return grad_o;
}

// The rest of the level's derivatives. grad_c_from_o: W_co^T grad_o, the cell's gradient through eq 6.
// Returns grad_h_terms [n, 5d] (the gradient of h_terms; its first 3d columns are also that of c_terms) and
// the children's cell gradients through eq 5 alone, [n, 2, d] (the caller adds those through W_c).
std::vector<torch::Tensor> slstm_level_cell_backward(torch::Tensor grad_c, torch::Tensor grad_h, torch::Tensor o,
                                                     torch::Tensor tanh_c, torch::Tensor grad_c_from_o,
                                                     torch::Tensor grad_o, torch::Tensor activated,
                                                     torch::Tensor c_children) {
  for (auto* t : {&grad_c, &grad_h, &o, &tanh_c, &grad_c_from_o, &grad_o, &activated, &c_children}) {
    check(*t, "every argument");
    *t = t->contiguous();
  }
  const int64_t n = c_children.size(0), d = c_children.size(2);
  TORCH_CHECK(activated.size(1) == 4 * d, "activated must be [n, 4d]");
  auto grad_h_terms = torch::empty({n, 5 * d}, activated.options());
  auto grad_cj = torch::empty({n, 2, d}, activated.options());
  const float *gC = grad_c.data_ptr<float>(), *gH = grad_h.data_ptr<float>(), *O = o.data_ptr<float>();
  const float *T = tanh_c.data_ptr<float>(), *gCo = grad_c_from_o.data_ptr<float>(), *gO = grad_o.data_ptr<float>();
  const float *A = activated.data_ptr<float>(), *Cj = c_children.data_ptr<float>();
  float *gHt = grad_h_terms.data_ptr<float>(), *gCj = grad_cj.data_ptr<float>();
  at::parallel_for(0, n, grain_rows(5 * d), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float *gc_in = gC + r * d, *gh = gH + r * d, *orow = O + r * d, *t = T + r * d;
      const float *gco = gCo + r * d, *go = gO + r * d, *a = A + r * 4 * d, *cL = Cj + r * 2 * d, *cR = cL + d;
      float *g = gHt + r * 5 * d, *gcL = gCj + r * 2 * d, *gcR = gcL + d;
#pragma omp simd
      for (int64_t k = 0; k < d; ++k) {
        const float gc = gc_in[k] + gh[k] * orow[k] * (1.f - t[k] * t[k]) + gco[k];  // dL/dc_t
        const float i = a[k], fL = a[d + k], fR = a[2 * d + k], tx = a[3 * d + k];
        g[k] = gc * tx * i * (1.f - i);
        g[d + k] = gc * cL[k] * fL * (1.f - fL);
        g[2 * d + k] = gc * cR[k] * fR * (1.f - fR);
        g[3 * d + k] = gc * i * (1.f - tx * tx);
        g[4 * d + k] = go[k];
        gcL[k] = gc * fL;
        gcR[k] = gc * fR;
      }
    }
  });
  return {grad_h_terms, grad_cj};
}
