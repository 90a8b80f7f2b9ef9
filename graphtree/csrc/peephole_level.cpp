// The elementwise parts of one level of a peephole Tree-LSTM with N ordered children, each fused into one pass
// over the level's rows. Three cells share this form: the S-LSTM (Zhu et al. 2015, eqs 1-7; N = 2), Teng &
// Zhang's lexicalized bottom-up cell (eqs 4, 10-11; any N, and N = 0 at its leaves) and their top-down cell
// (eqs 13-14; N = 1, the parent). The output gate peeks at the new cell through W_co, a matrix product in the
// middle of the level, so forward and backward each come in two halves around it.
//
// pre rows (d wide each): the pre-activations of i, f_1 .. f_N, g, o from everything but the children's cells;
// c_terms rows: the peepholes on the children's cells, for i, f_1 .. f_N (or none: already inside pre).
// "activated" rows: i, f_1 .. f_N, tanh(g).

#include <optional>
#include <vector>

#include "common.h"

using graphtree::check_all;
using graphtree::grain_rows;
using graphtree::sigmoid;
using graphtree::tanh_of;

// c_t = sum_k f_k c_k + i tanh(g): returns activated [n, (N + 2) d] and c_t [n, d]. c_terms may be undefined.
std::vector<torch::Tensor> peephole_level_cell(torch::Tensor pre, std::optional<torch::Tensor> c_terms_opt,
                                               torch::Tensor c_children) {
  const bool peep = c_terms_opt.has_value() && c_terms_opt->defined();
  torch::Tensor c_terms = peep ? *c_terms_opt : torch::Tensor();
  check_all({&pre, &c_children});
  if (peep) check_all({&c_terms});
  const int64_t n = c_children.size(0), N = c_children.size(1), d = c_children.size(2);
  TORCH_CHECK(pre.dim() == 2 && pre.size(0) == n && pre.size(1) == (N + 3) * d,
              "pre must be [n, (N + 3) d] for c_children [n, N, d]");
  TORCH_CHECK(!peep || (c_terms.size(0) == n && c_terms.size(1) == (N + 1) * d), "c_terms must be [n, (N + 1) d]");
  auto activated = torch::empty({n, (N + 2) * d}, pre.options());
  auto c = torch::empty({n, d}, pre.options());
  const float *P = pre.data_ptr<float>(), *Ct = peep ? c_terms.data_ptr<float>() : nullptr;
  const float* Cj = c_children.data_ptr<float>();
  float *A = activated.data_ptr<float>(), *C = c.data_ptr<float>();
  at::parallel_for(0, n, grain_rows((N + 3) * d), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float *p = P + r * (N + 3) * d, *cj = Cj + r * N * d;
      float *a = A + r * (N + 2) * d, *cr = C + r * d;
      if (peep) {
        const float* ct = Ct + r * (N + 1) * d;
#pragma omp simd
        for (int64_t k = 0; k < (N + 1) * d; ++k) a[k] = sigmoid(p[k] + ct[k]);  // i, f_1 .. f_N
      } else {
#pragma omp simd
        for (int64_t k = 0; k < (N + 1) * d; ++k) a[k] = sigmoid(p[k]);
      }
      const float* g = p + (N + 1) * d;
      float* tg = a + (N + 1) * d;
#pragma omp simd
      for (int64_t k = 0; k < d; ++k) {
        tg[k] = tanh_of(g[k]);
        cr[k] = a[k] * tg[k];  // i tanh(g)
      }
      for (int64_t l = 0; l < N; ++l) {
        const float *f = a + (1 + l) * d, *cl = cj + l * d;
#pragma omp simd
        for (int64_t k = 0; k < d; ++k) cr[k] += f[k] * cl[k];  // + f_l c_l
      }
    }
  });
  return {activated, c};
}

// o = sigmoid(pre_o + W_co c_t), h = o tanh(c_t), given co = W_co c_t: returns o, tanh(c_t) and h, each [n, d].
std::vector<torch::Tensor> peephole_level_output(torch::Tensor pre, torch::Tensor co, torch::Tensor c_t) {
  check_all({&pre, &co, &c_t});
  const int64_t n = c_t.size(0), d = c_t.size(1), width = pre.size(1);
  TORCH_CHECK(pre.size(0) == n && width % d == 0 && width >= 3 * d && co.sizes() == c_t.sizes(),
              "expected pre [n, (N + 3) d], co and c_t [n, d]");
  auto o = torch::empty({n, d}, c_t.options()), tanh_c = torch::empty({n, d}, c_t.options());
  auto h = torch::empty({n, d}, c_t.options());
  const float *P = pre.data_ptr<float>(), *Co = co.data_ptr<float>(), *C = c_t.data_ptr<float>();
  float *O = o.data_ptr<float>(), *T = tanh_c.data_ptr<float>(), *H = h.data_ptr<float>();
  at::parallel_for(0, n, grain_rows(3 * d), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float *po = P + r * width + width - d, *co_r = Co + r * d, *cr = C + r * d;
      float *orow = O + r * d, *tr = T + r * d, *hr = H + r * d;
#pragma omp simd
      for (int64_t k = 0; k < d; ++k) {
        orow[k] = sigmoid(po[k] + co_r[k]);
        tr[k] = tanh_of(cr[k]);
        hr[k] = orow[k] * tr[k];
      }
    }
  });
  return {o, tanh_c, h};
}

// Gradient of the output gate's pre-activation: grad_h tanh(c) o (1 - o), [n, d].
torch::Tensor peephole_level_output_backward(torch::Tensor grad_h, torch::Tensor o, torch::Tensor tanh_c) {
  check_all({&grad_h, &o, &tanh_c});
  TORCH_CHECK(grad_h.sizes() == o.sizes() && o.sizes() == tanh_c.sizes(), "grad_h, o and tanh_c must match");
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

// The rest of the level's derivatives. grad_c_from_o: W_co^T grad_o, the cell's gradient through the output gate.
// Returns grad_pre [n, (N + 3) d] (its first (N + 1) d columns are also the gradient of c_terms) and the
// children's cell gradients through c_t = sum_k f_k c_k + ... alone, [n, N, d] (the caller adds the peepholes').
std::vector<torch::Tensor> peephole_level_cell_backward(torch::Tensor grad_c, torch::Tensor grad_h, torch::Tensor o,
                                                        torch::Tensor tanh_c, torch::Tensor grad_c_from_o,
                                                        torch::Tensor grad_o, torch::Tensor activated,
                                                        torch::Tensor c_children) {
  check_all({&grad_c, &grad_h, &o, &tanh_c, &grad_c_from_o, &grad_o, &activated, &c_children});
  const int64_t n = c_children.size(0), N = c_children.size(1), d = c_children.size(2);
  TORCH_CHECK(activated.size(0) == n && activated.size(1) == (N + 2) * d, "activated must be [n, (N + 2) d]");
  for (auto* t : {&grad_c, &grad_h, &o, &tanh_c, &grad_c_from_o, &grad_o}) {
    TORCH_CHECK(t->size(0) == n && t->size(1) == d, "the gradients, o and tanh_c must be [n, d]");
  }
  const int64_t width = (N + 3) * d;
  auto grad_pre = torch::empty({n, width}, activated.options());
  auto grad_cj = torch::empty({n, N, d}, activated.options());
  const float *gC = grad_c.data_ptr<float>(), *gH = grad_h.data_ptr<float>(), *O = o.data_ptr<float>();
  const float *T = tanh_c.data_ptr<float>(), *gCo = grad_c_from_o.data_ptr<float>(), *gO = grad_o.data_ptr<float>();
  const float *A = activated.data_ptr<float>(), *Cj = c_children.data_ptr<float>();
  float *gP = grad_pre.data_ptr<float>(), *gCj = grad_cj.data_ptr<float>();
  at::parallel_for(0, n, grain_rows(width), [&](int64_t begin, int64_t end) {
    std::vector<float> total(d);  // dL/dc_t of the row: from c_t itself, through h = o tanh(c_t), and through o
    float* gc = total.data();
    for (int64_t r = begin; r < end; ++r) {
      const float *gc_in = gC + r * d, *gh = gH + r * d, *orow = O + r * d, *t = T + r * d;
      const float *gco = gCo + r * d, *go = gO + r * d, *a = A + r * (N + 2) * d, *cj = Cj + r * N * d;
      const float* tg = a + (N + 1) * d;
      float *g = gP + r * width, *gcj = gCj + r * N * d;
#pragma omp simd
      for (int64_t k = 0; k < d; ++k) {
        gc[k] = gc_in[k] + gh[k] * orow[k] * (1.f - t[k] * t[k]) + gco[k];
        const float i = a[k];
        g[k] = gc[k] * tg[k] * i * (1.f - i);                       // input gate
        g[(N + 1) * d + k] = gc[k] * i * (1.f - tg[k] * tg[k]);     // candidate g
        g[(N + 2) * d + k] = go[k];                                 // output gate
      }
      for (int64_t l = 0; l < N; ++l) {
        const float *f = a + (1 + l) * d, *cl = cj + l * d;
        float *gf = g + (1 + l) * d, *gcl = gcj + l * d;
#pragma omp simd
        for (int64_t k = 0; k < d; ++k) {
          gf[k] = gc[k] * cl[k] * f[k] * (1.f - f[k]);  // forget gate of child l
          gcl[k] = gc[k] * f[k];
        }
      }
    }
  });
  return {grad_pre, grad_cj};
}
