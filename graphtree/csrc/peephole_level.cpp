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
#include "leaf_unit.h"
#include "level_loop.h"

using graphtree::check_all;
using graphtree::for_rows;
using graphtree::sigmoid;
using graphtree::tanh_of;

// c_t = sum_k f_k c_k + i tanh(g), written into activated [n, (N + 2) d] and c [n, d] (contiguous rows, which may
// be a level's rows of a larger buffer). c_terms may be undefined.
void peephole_level_cell_into(torch::Tensor pre, const std::optional<torch::Tensor>& c_terms_opt,
                              torch::Tensor c_children, const torch::Tensor& activated, const torch::Tensor& c) {
  const bool peep = c_terms_opt.has_value() && c_terms_opt->defined();
  torch::Tensor c_terms = peep ? *c_terms_opt : torch::Tensor();
  check_all({&pre, &c_children});
  if (peep) check_all({&c_terms});
  const int64_t n = c_children.size(0), N = c_children.size(1), d = c_children.size(2);
  TORCH_CHECK(pre.dim() == 2 && pre.size(0) == n && pre.size(1) == (N + 3) * d,
              "pre must be [n, (N + 3) d] for c_children [n, N, d]");
  TORCH_CHECK(!peep || (c_terms.size(0) == n && c_terms.size(1) == (N + 1) * d), "c_terms must be [n, (N + 1) d]");
  graphtree::check_destination(activated, n, (N + 2) * d, "activated");
  graphtree::check_destination(c, n, d, "c");
  const float *P = pre.data_ptr<float>(), *Ct = peep ? c_terms.data_ptr<float>() : nullptr;
  const float* Cj = c_children.data_ptr<float>();
  float *A = activated.data_ptr<float>(), *C = c.data_ptr<float>();
  for_rows(n, [&](int64_t begin, int64_t end) {
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
}

// o = sigmoid(pre_o + W_co c_t), h = o tanh(c_t), given co = W_co c_t: written into o, tanh_c and h, each [n, d]
// (contiguous rows).
void peephole_level_output_into(torch::Tensor pre, torch::Tensor co, torch::Tensor c_t, const torch::Tensor& o,
                                const torch::Tensor& tanh_c, const torch::Tensor& h) {
  check_all({&pre, &co, &c_t});
  const int64_t n = c_t.size(0), d = c_t.size(1), width = pre.size(1);
  TORCH_CHECK(pre.size(0) == n && width % d == 0 && width >= 3 * d && co.sizes() == c_t.sizes(),
              "expected pre [n, (N + 3) d], co and c_t [n, d]");
  for (const auto* t : {&o, &tanh_c, &h}) graphtree::check_destination(*t, n, d, "o, tanh_c and h");
  const float *P = pre.data_ptr<float>(), *Co = co.data_ptr<float>(), *C = c_t.data_ptr<float>();
  float *O = o.data_ptr<float>(), *T = tanh_c.data_ptr<float>(), *H = h.data_ptr<float>();
  for_rows(n, [&](int64_t begin, int64_t end) {
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
}

// Gradient of the output gate's pre-activation, grad_h tanh(c) o (1 - o), written into grad_o [n, d].
void peephole_level_output_backward_into(torch::Tensor grad_h, torch::Tensor o, torch::Tensor tanh_c,
                                         const torch::Tensor& grad_o) {
  check_all({&grad_h, &o, &tanh_c});
  TORCH_CHECK(grad_h.sizes() == o.sizes() && o.sizes() == tanh_c.sizes(), "grad_h, o and tanh_c must match");
  graphtree::check_destination(grad_o, o.size(0), o.size(1), "grad_o");
  const int64_t total = o.numel();
  const float *gH = grad_h.data_ptr<float>(), *O = o.data_ptr<float>(), *T = tanh_c.data_ptr<float>();
  float* gO = grad_o.data_ptr<float>();
  for_rows(total, [&](int64_t begin, int64_t end) {
#pragma omp simd
    for (int64_t k = begin; k < end; ++k) gO[k] = gH[k] * T[k] * O[k] * (1.f - O[k]);
  });
}

// peephole_level_output_backward_into on a new tensor.
torch::Tensor peephole_level_output_backward(torch::Tensor grad_h, torch::Tensor o, torch::Tensor tanh_c) {
  auto grad_o = torch::empty_like(o, at::MemoryFormat::Contiguous);
  peephole_level_output_backward_into(grad_h, o, tanh_c, grad_o);
  return grad_o;
}

// The rest of the level's derivatives. grad_c_from_o: W_co^T grad_o, the cell's gradient through the output gate.
// Writes grad_pre [n, (N + 3) d] (contiguous rows; its first (N + 1) d columns are also the gradient of c_terms)
// and returns the children's cell gradients through c_t = sum_k f_k c_k + ... alone, [n, N, d] (the caller adds
// the peepholes').
torch::Tensor peephole_level_cell_backward_into(torch::Tensor grad_c, torch::Tensor grad_h, torch::Tensor o,
                                                torch::Tensor tanh_c, torch::Tensor grad_c_from_o,
                                                torch::Tensor grad_o, torch::Tensor activated,
                                                torch::Tensor c_children,
                                                const torch::Tensor& grad_pre) {
  check_all({&grad_c, &grad_h, &o, &tanh_c, &grad_c_from_o, &grad_o, &activated, &c_children});
  const int64_t n = c_children.size(0), N = c_children.size(1), d = c_children.size(2);
  TORCH_CHECK(activated.size(0) == n && activated.size(1) == (N + 2) * d, "activated must be [n, (N + 2) d]");
  for (auto* t : {&grad_c, &grad_h, &o, &tanh_c, &grad_c_from_o, &grad_o}) {
    TORCH_CHECK(t->size(0) == n && t->size(1) == d, "the gradients, o and tanh_c must be [n, d]");
  }
  const int64_t width = (N + 3) * d;
  graphtree::check_destination(grad_pre, n, width, "grad_pre");
  auto grad_cj = torch::empty({n, N, d}, activated.options());
  const float *gC = grad_c.data_ptr<float>(), *gH = grad_h.data_ptr<float>(), *O = o.data_ptr<float>();
  const float *T = tanh_c.data_ptr<float>(), *gCo = grad_c_from_o.data_ptr<float>(), *gO = grad_o.data_ptr<float>();
  const float *A = activated.data_ptr<float>(), *Cj = c_children.data_ptr<float>();
  float *gP = grad_pre.data_ptr<float>(), *gCj = grad_cj.data_ptr<float>();
  for_rows(n, [&](int64_t begin, int64_t end) {
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
  return grad_cj;
}

// peephole_level_cell_backward_into on a new grad_pre: returns grad_pre and the children's cell gradients.
std::vector<torch::Tensor> peephole_level_cell_backward(torch::Tensor grad_c, torch::Tensor grad_h, torch::Tensor o,
                                                        torch::Tensor tanh_c, torch::Tensor grad_c_from_o,
                                                        torch::Tensor grad_o, torch::Tensor activated,
                                                        torch::Tensor c_children) {
  TORCH_CHECK(c_children.dim() == 3, "c_children must be [n, N, d]");
  const int64_t n = c_children.size(0), N = c_children.size(1), d = c_children.size(2);
  auto grad_pre = torch::empty({n, (N + 3) * d}, activated.options());
  auto grad_cj = peephole_level_cell_backward_into(grad_c, grad_h, o, tanh_c, grad_c_from_o, grad_o, activated,
                                                   c_children, grad_pre);
  return {grad_pre, grad_cj};
}

namespace {

using graphtree::cat_rows;

// The S-LSTM (graphtree/nn/slstm.py, Zhu et al. 2015, eqs 1-7) as a LevelKernel for the engine's compiled level
// loop: its update and the update's derivatives, in C++, on the kernels above. Leaves: h = x, c = 0
// ("embedding"), or the leaf unit c = W^(c) x + b^(c), o = sigmoid(W^(o) x + b^(o)) ("lstm": leaf_weight given).
class SLSTMLevels : public graphtree::LevelKernel {
 public:
  SLSTMLevels(torch::Tensor W_h, torch::Tensor W_c, torch::Tensor W_co, torch::Tensor b,
              std::optional<torch::Tensor> leaf_weight, std::optional<torch::Tensor> leaf_bias)
      : W_h_(W_h.contiguous()), W_c_(W_c.contiguous()), W_co_(W_co.contiguous()), b_(b.contiguous()) {
    for (auto* t : {&W_h_, &W_c_, &W_co_, &b_}) graphtree::check(*t, "every weight");
    d_ = W_co_.size(0);
    TORCH_CHECK(W_h_.size(0) == 5 * d_ && W_h_.size(1) == 2 * d_ && W_c_.size(0) == 3 * d_ &&
                    W_c_.size(1) == 2 * d_ && b_.numel() == 5 * d_,
                "SLSTMLevels: weight shapes do not agree");
    auto made = derive(W_h_, W_c_, W_co_, b_, std::nullopt, std::nullopt);
    W_h_t_ = graphtree::transposed_at(made, 0, W_h_, "SLSTMLevels");
    W_c_t_ = graphtree::transposed_at(made, 1, W_c_, "SLSTMLevels");
    W_co_t_ = graphtree::transposed_at(made, 2, W_co_, "SLSTMLevels");
    if (leaf_weight && leaf_weight->defined()) {
      TORCH_CHECK(leaf_bias && leaf_bias->defined(), "SLSTMLevels: leaf_weight without leaf_bias");
      leaf_ = graphtree::LeafUnit(*leaf_weight, *leaf_bias);
    }
  }

  // The weights transposed (the level products read them row by row).
  static std::vector<torch::Tensor> derive(const torch::Tensor& W_h, const torch::Tensor& W_c,
                                           const torch::Tensor& W_co, const torch::Tensor& /*b*/,
                                           const std::optional<torch::Tensor>& /*leaf_weight*/,
                                           const std::optional<torch::Tensor>& /*leaf_bias*/) {
    return {graphtree::transposed(W_h), graphtree::transposed(W_c), graphtree::transposed(W_co)};
  }

  void begin(const std::vector<graphtree::Level>& levels, bool save) override {
    save_ = save;
    contexts_.assign(levels.size(), {});
    leaf_.reset();
    const int64_t internal = graphtree::internal_row_offsets(levels, offsets_);
    // The children's [h^L, h^R] and [c^L, c^R] of every internal node: the rows of W_h's and W_c's gradients.
    children_h_ = torch::empty({internal, 2 * d_}, W_h_.options());
    children_c_ = torch::empty({internal, 2 * d_}, W_h_.options());
    // W_co's rows are the internal nodes' new cells, written straight into the c buffer's rows from here on.
    internal_begin_ = graphtree::internal_rows_begin(levels, "SLSTMLevels");
    grad_h_terms_ = grad_o_ = torch::Tensor();
  }

  torch::Tensor gather_destination(const graphtree::Level& level, int64_t state) override {
    if (level.width == 0) return {};
    TORCH_CHECK(level.width == 2, "SLSTMLevels: a level with ", level.width, " slots, expected 2");
    const auto& all = state == 0 ? children_h_ : children_c_;
    return all.narrow(0, offsets_[level.index], level.end - level.begin).view({-1, d_});
  }

  void forward(const graphtree::Level& level, const std::vector<torch::Tensor>& inputs,
               const std::vector<torch::Tensor>& children, std::vector<torch::Tensor>& buffers, bool save) override {
    const int64_t n = level.end - level.begin, d = d_;
    Context& context = contexts_[level.index];
    auto h_out = buffers[0].narrow(0, level.begin, n), c_out = buffers[1].narrow(0, level.begin, n);
    if (level.width == 0) {
      if (leaf_.defined()) {
        context.leaf = leaf_.forward(inputs[0], h_out, c_out, save);
      } else {  // h = x, c = 0 (the buffers start at zero)
        graphtree::check(inputs[0], "x");
        h_out.copy_(inputs[0]);
      }
      return;
    }
    c_buffer_ = buffers[1];
    auto h_cat = children[0].view({n, 2 * d}), c_cat = children[1].view({n, 2 * d});
    auto c_LR = children[1].view({n, 2, d});
    torch::Tensor h_terms, c_terms;  // all W_h h + b of eqs 1-4, 6; the peepholes on the children's cells, eqs 1-3
    graphtree::side_by_side({[&] { h_terms = at::addmm(b_, h_cat, W_h_t_); },
                             [&] { c_terms = at::mm(c_cat, W_c_t_); }});
    auto activated = torch::empty({n, 4 * d}, h_terms.options());
    peephole_level_cell_into(h_terms, c_terms, c_LR, activated, c_out);
    auto o = torch::empty({n, d}, h_terms.options()), tanh_c = torch::empty({n, d}, h_terms.options());
    peephole_level_output_into(h_terms, at::mm(c_out, W_co_t_), c_out, o, tanh_c, h_out);  // eq 6 peeks at c_t
    if (save) context.node = {activated, o, tanh_c, c_LR};
  }

  std::vector<torch::Tensor> backward(const graphtree::Level& level, const std::vector<torch::Tensor>& grad_states,
                                      std::vector<torch::Tensor>& grad_inputs) override {
    TORCH_CHECK(save_, "SLSTMLevels: backward after a forward that saved nothing");
    const int64_t n = level.end - level.begin, d = d_;
    const Context& context = contexts_[level.index];
    if (level.width == 0) {
      if (leaf_.defined()) {
        leaf_.backward(context.leaf, grad_states[0], grad_states[1], grad_inputs.empty() ? nullptr : &grad_inputs[0]);
      } else if (!grad_inputs.empty() && grad_inputs[0].defined()) {
        grad_inputs[0].add_(grad_states[0]);
      }
      return {torch::Tensor(), torch::Tensor()};
    }
    const auto& activated = context.node[0];
    const auto& o_t = context.node[1];
    const auto& tanh_c = context.node[2];
    const auto& c_LR = context.node[3];
    // Every internal level's gradients land in one buffer, in level order: W_h, W_c, W_co and b take them in one
    // product each (param_grads).
    if (!grad_h_terms_.defined()) {
      grad_h_terms_ = torch::empty({children_h_.size(0), 5 * d}, W_h_.options());
      grad_o_ = torch::empty({children_h_.size(0), d}, W_h_.options());
    }
    auto grad_h_terms = grad_h_terms_.narrow(0, offsets_[level.index], n);
    auto grad_o = grad_o_.narrow(0, offsets_[level.index], n);
    peephole_level_output_backward_into(grad_states[0], o_t, tanh_c, grad_o);
    auto grad_c_from_o = at::mm(grad_o, W_co_);
    auto grad_c_direct = peephole_level_cell_backward_into(grad_states[1], grad_states[0], o_t, tanh_c, grad_c_from_o,
                                                           grad_o, activated, c_LR, grad_h_terms);
    auto grad_ifr = grad_h_terms.narrow(1, 0, 3 * d);  // the gates that also read W_c [c^L, c^R]
    torch::Tensor grad_h_LR, grad_c_LR;
    graphtree::side_by_side({[&] { grad_h_LR = at::mm(grad_h_terms, W_h_); },
                             [&] { grad_c_LR = at::mm(grad_ifr, W_c_); }});
    grad_c_LR = grad_c_LR.view({n, 2, d}).add_(grad_c_direct);
    return {grad_h_LR.view({-1, d}), grad_c_LR.view({-1, d})};
  }

  std::vector<torch::Tensor> param_grads() override {
    auto grad_W_h = torch::zeros_like(W_h_), grad_W_c = torch::zeros_like(W_c_);
    auto grad_W_co = torch::zeros_like(W_co_), grad_b = torch::zeros_like(b_);
    if (grad_h_terms_.defined() && grad_h_terms_.size(0) > 0) {
      grad_W_h.addmm_(grad_h_terms_.t(), children_h_);
      grad_W_c.addmm_(grad_h_terms_.narrow(1, 0, 3 * d_).t(), children_c_);
      grad_W_co.addmm_(grad_o_.t(), c_buffer_.narrow(0, internal_begin_, grad_o_.size(0)));
      grad_b += grad_h_terms_.sum(0);
    }
    std::vector<torch::Tensor> grads = {grad_W_h, grad_W_c, grad_W_co, grad_b};
    if (leaf_.defined()) {
      auto [grad_weight, grad_bias] = leaf_.param_grads();
      grads.push_back(grad_weight);
      grads.push_back(grad_bias);
    }
    return grads;
  }

 private:
  struct Context {
    std::vector<torch::Tensor> node;  // activated, o, tanh(c), c_LR
    graphtree::LeafUnit::Saved leaf;
  };

  torch::Tensor W_h_, W_c_, W_co_, b_, W_h_t_, W_c_t_, W_co_t_;
  graphtree::LeafUnit leaf_;  // undefined for "embedding" leaves
  int64_t d_ = 0, internal_begin_ = 0;
  bool save_ = false;
  std::vector<Context> contexts_;
  std::vector<int64_t> offsets_;  // each level's first row in children_h_, children_c_, grad_h_terms_ and grad_o_
  torch::Tensor children_h_, children_c_, c_buffer_, grad_h_terms_, grad_o_;
};

// Teng & Zhang's lexicalized bottom-up cell (graphtree/nn/lexicalized.py, eqs 4, 10-11; ConTree with
// lexicalized=false) as a LevelKernel: its update and the update's derivatives, in C++, on the kernels above.
// Gate rows i, f_1 .. f_N, g, o. Internal nodes: W_h [h_1 .. h_N] + b, the peepholes W_c [c_1 .. c_N] on i and
// the f_k, and (lexicalized) W_x x with its one W_xf block feeding every f_k. Leaves: gates i, g, o from W_x x
// and the matching rows of b, no children.
class LexicalizedLevels : public graphtree::LevelKernel {
 public:
  LexicalizedLevels(torch::Tensor W_x, torch::Tensor W_h, torch::Tensor W_c, torch::Tensor W_co, torch::Tensor b,
                    bool lexicalized)
      : W_x_(W_x.contiguous()), W_h_(W_h.contiguous()), W_c_(W_c.contiguous()), W_co_(W_co.contiguous()),
        b_(b.contiguous()), lexicalized_(lexicalized) {
    for (auto* t : {&W_x_, &W_h_, &W_c_, &W_co_, &b_}) graphtree::check(*t, "every weight");
    d_ = W_co_.size(0);
    N_ = W_h_.size(1) / d_;
    const int64_t d = d_, N = N_;
    TORCH_CHECK(N >= 1 && W_h_.size(1) == N * d && W_h_.size(0) == (N + 3) * d && W_c_.size(0) == (N + 1) * d &&
                    W_c_.size(1) == N * d && b_.numel() == (N + 3) * d && W_x_.size(0) == (lexicalized ? 4 : 3) * d,
                "LexicalizedLevels: weight shapes do not agree");
    auto made = derive(W_x_, W_h_, W_c_, W_co_, b_, lexicalized);
    W_h_t_ = graphtree::transposed_at(made, 0, W_h_, "LexicalizedLevels");
    W_c_t_ = graphtree::transposed_at(made, 1, W_c_, "LexicalizedLevels");
    W_co_t_ = graphtree::transposed_at(made, 2, W_co_, "LexicalizedLevels");
    W_igo_ = made[3];
    b_igo_ = made[5];
    TORCH_CHECK(W_igo_.dim() == 2 && W_igo_.size(0) == 3 * d && W_igo_.size(1) == W_x_.size(1) &&
                    b_igo_.numel() == 3 * d, "LexicalizedLevels: derived leaf weights of the wrong shape");
    W_igo_t_ = graphtree::transposed_at(made, 4, W_igo_, "LexicalizedLevels");
    if (lexicalized) W_x_t_ = graphtree::transposed_at(made, 6, W_x_, "LexicalizedLevels");
  }

  // The weights transposed (the level products read them row by row); the leaf unit's rows i, g, o of W_x and
  // b (a leaf has no forget gate), W_x's also transposed; W_x transposed (lexicalized; else empty).
  static std::vector<torch::Tensor> derive(const torch::Tensor& W_x, const torch::Tensor& W_h,
                                           const torch::Tensor& W_c, const torch::Tensor& W_co,
                                           const torch::Tensor& b, bool lexicalized) {
    const int64_t d = W_co.size(0), N = W_h.size(1) / d;
    auto W_igo = lexicalized ? torch::cat({W_x.narrow(0, 0, d), W_x.narrow(0, 2 * d, 2 * d)}) : W_x.contiguous();
    return {graphtree::transposed(W_h),
            graphtree::transposed(W_c),
            graphtree::transposed(W_co),
            W_igo,
            graphtree::transposed(W_igo),
            torch::cat({b.narrow(0, 0, d), b.narrow(0, (N + 1) * d, 2 * d)}),
            lexicalized ? graphtree::transposed(W_x) : torch::empty({0}, W_x.options())};
  }

  void prepare(const std::vector<graphtree::Level>& levels, const std::vector<torch::Tensor>& inputs,
               bool save) override {
    begin(levels, save);
    if (!lexicalized_ || levels.empty()) return;
    // Level 0 holds the leaves, every later level inner nodes: the inner rows are one block, whose W_x x is
    // one product here rather than one per level.
    x_ = inputs[0].contiguous();
    graphtree::check(x_, "x");
    const int64_t rows = x_.size(0) - internal_begin_;
    x_terms_ = at::mm(x_.narrow(0, internal_begin_, rows), W_x_t_);
    grad_x_terms_ = save ? torch::empty({rows, 4 * d_}, x_.options()) : torch::Tensor();
  }

  void begin(const std::vector<graphtree::Level>& levels, bool save) override {
    save_ = save;
    contexts_.assign(levels.size(), {});
    const int64_t internal = graphtree::internal_row_offsets(levels, offsets_);
    // Every internal node's gathered [h_1 .. h_N], [c_1 .. c_N] and its own c_t: the rows of W_h's, W_c's and
    // W_co's gradients.
    children_h_ = torch::empty({internal, N_ * d_}, W_h_.options());
    children_c_ = torch::empty({internal, N_ * d_}, W_h_.options());
    // W_co's rows are the new cells, written straight into the c buffer's rows; the internal ones are one block.
    internal_begin_ = graphtree::internal_rows_begin(levels, "LexicalizedLevels");
    grad_gates_ = torch::Tensor();
    leaf_grads_.clear();
    leaf_inputs_.clear();
    leaf_cells_.clear();
  }

  torch::Tensor gather_destination(const graphtree::Level& level, int64_t state) override {
    if (level.width == 0) return {};
    TORCH_CHECK(level.width == N_, "LexicalizedLevels: a level with ", level.width, " slots, expected ", N_);
    const auto& all = state == 0 ? children_h_ : children_c_;
    return all.narrow(0, offsets_[level.index], level.end - level.begin).view({-1, d_});
  }

  void forward(const graphtree::Level& level, const std::vector<torch::Tensor>& inputs,
               const std::vector<torch::Tensor>& children, std::vector<torch::Tensor>& buffers, bool save) override {
    const int64_t n = level.end - level.begin, d = d_, N = N_;
    Context& context = contexts_[level.index];
    auto h_out = buffers[0].narrow(0, level.begin, n), c_out = buffers[1].narrow(0, level.begin, n);
    auto o = torch::empty({n, d}, W_h_.options()), tanh_c = torch::empty({n, d}, W_h_.options());
    if (level.width == 0) {
      auto x = inputs[0].contiguous();
      graphtree::check(x, "x");
      auto gates = at::addmm(b_igo_, x, W_igo_t_);  // i, g, o
      auto activated = torch::empty({n, 2 * d}, W_h_.options());
      peephole_level_cell_into(gates, std::nullopt, gates.new_empty({n, 0, d}), activated, c_out);
      peephole_level_output_into(gates, at::mm(c_out, W_co_t_), c_out, o, tanh_c, h_out);
      if (save) context = Context{x, activated, c_out, o, tanh_c, {}};
      return;
    }
    c_buffer_ = buffers[1];
    auto h_cat = children[0].view({n, N * d}), c_cat = children[1].view({n, N * d});
    torch::Tensor gates, c_terms;
    graphtree::side_by_side({[&] { gates = at::addmm(b_, h_cat, W_h_t_); },
                             [&] { c_terms = at::mm(c_cat, W_c_t_); }});
    if (lexicalized_) add_lexical_terms(gates, x_terms_.narrow(0, level.begin - internal_begin_, n));
    auto activated = torch::empty({n, (N + 2) * d}, W_h_.options());
    peephole_level_cell_into(gates, c_terms, children[1].view({n, N, d}), activated, c_out);
    peephole_level_output_into(gates, at::mm(c_out, W_co_t_), c_out, o, tanh_c, h_out);  // eq 11 peeks at c_t
    if (save) context = Context{{}, activated, {}, o, tanh_c, children[1].view({n, N, d})};
  }

  std::vector<torch::Tensor> backward(const graphtree::Level& level, const std::vector<torch::Tensor>& grad_states,
                                      std::vector<torch::Tensor>& grad_inputs) override {
    TORCH_CHECK(save_, "LexicalizedLevels: backward after a forward that saved nothing");
    const int64_t n = level.end - level.begin, d = d_, N = N_;
    const Context& context = contexts_[level.index];
    const bool input_grad = !grad_inputs.empty() && grad_inputs[0].defined();
    auto grad_h = grad_states[0].contiguous(), grad_c = grad_states[1].contiguous();
    auto grad_o = peephole_level_output_backward(grad_h, context.o, context.tanh_c);
    auto grad_c_from_o = at::mm(grad_o, W_co_);
    if (level.width == 0) {
      auto cell = peephole_level_cell_backward(grad_c, grad_h, context.o, context.tanh_c, grad_c_from_o, grad_o,
                                               context.activated, grad_h.new_empty({n, 0, d}));
      leaf_grads_.push_back(cell[0]);  // i, g, o
      leaf_inputs_.push_back(context.x);
      leaf_cells_.push_back(context.c);
      if (input_grad) grad_inputs[0].addmm_(cell[0], W_igo_);
      return {torch::Tensor(), torch::Tensor()};
    }
    // Every internal level's gate gradients land in one buffer, in level order: W_h, W_c, W_co and b take them in
    // one product each (param_grads).
    if (!grad_gates_.defined()) grad_gates_ = torch::empty({children_h_.size(0), (N + 3) * d}, W_h_.options());
    auto grad_gates = grad_gates_.narrow(0, offsets_[level.index], n);
    auto grad_c_direct = peephole_level_cell_backward_into(grad_c, grad_h, context.o, context.tanh_c, grad_c_from_o,
                                                           grad_o, context.activated, context.c_children, grad_gates);
    auto grad_if = grad_gates.narrow(1, 0, (N + 1) * d);  // the gates that also read W_c [c_1 .. c_N]
    if (lexicalized_) fold_lexical_terms(grad_gates, grad_x_terms_.narrow(0, level.begin - internal_begin_, n));
    torch::Tensor grad_h_children, grad_c_children;
    graphtree::side_by_side({[&] { grad_h_children = at::mm(grad_gates, W_h_); },
                             [&] { grad_c_children = at::mm(grad_if, W_c_); }});
    grad_c_children = grad_c_children.view({n, N, d}).add_(grad_c_direct);
    return {grad_h_children.view({-1, d}), grad_c_children.view({-1, d})};
  }

  void finish_backward(std::vector<torch::Tensor>& grad_inputs) override {
    if (!lexicalized_ || !grad_x_terms_.defined() || grad_inputs.empty() || !grad_inputs[0].defined()) return;
    grad_inputs[0].narrow(0, internal_begin_, grad_x_terms_.size(0)).addmm_(grad_x_terms_, W_x_);
  }

  std::vector<torch::Tensor> param_grads() override {
    const int64_t d = d_, N = N_;
    auto grad_W_x = torch::zeros_like(W_x_), grad_W_h = torch::zeros_like(W_h_), grad_W_c = torch::zeros_like(W_c_);
    auto grad_W_co = torch::zeros_like(W_co_), grad_b = torch::zeros_like(b_);
    if (grad_gates_.defined() && grad_gates_.size(0) > 0) {
      const auto& grad_gates = grad_gates_;
      grad_W_h.addmm_(grad_gates.t(), children_h_);
      grad_W_c.addmm_(grad_gates.narrow(1, 0, (N + 1) * d).t(), children_c_);
      auto c_internal = c_buffer_.narrow(0, internal_begin_, grad_gates.size(0));
      grad_W_co.addmm_(grad_gates.narrow(1, (N + 2) * d, d).t(), c_internal);
      grad_b += grad_gates.sum(0);
      if (lexicalized_) grad_W_x.addmm_(grad_x_terms_.t(), x_.narrow(0, internal_begin_, grad_x_terms_.size(0)));
    }
    if (!leaf_grads_.empty()) {
      auto grad_igo = cat_rows(leaf_grads_), x = cat_rows(leaf_inputs_);
      grad_W_co.addmm_(grad_igo.narrow(1, 2 * d, d).t(), cat_rows(leaf_cells_));
      auto grad_b_igo = grad_igo.sum(0);
      grad_b.narrow(0, 0, d) += grad_b_igo.narrow(0, 0, d);
      grad_b.narrow(0, (N + 1) * d, 2 * d) += grad_b_igo.narrow(0, d, 2 * d);
      if (lexicalized_) {  // rows i and g, o of W_x; W_xf gets nothing from the leaves
        grad_W_x.narrow(0, 0, d).addmm_(grad_igo.narrow(1, 0, d).t(), x);
        grad_W_x.narrow(0, 2 * d, 2 * d).addmm_(grad_igo.narrow(1, d, 2 * d).t(), x);
      } else {
        grad_W_x.addmm_(grad_igo.t(), x);
      }
    }
    return {grad_W_x, grad_W_h, grad_W_c, grad_W_co, grad_b};
  }

 private:
  struct Context {
    torch::Tensor x, activated, c, o, tanh_c, c_children;  // x, c: a leaf's (internal cells are in c_buffer_)
  };

  // gates [n, (N + 3) d] += W_x x laid out as i, f_1 .. f_N, g, o: the W_xf block goes to every f_k.
  void add_lexical_terms(torch::Tensor& gates, const torch::Tensor& Wx) const {
    const int64_t n = gates.size(0), d = d_, N = N_, width = (N + 3) * d;
    float* G = gates.data_ptr<float>();
    const float* X = Wx.data_ptr<float>();
    for_rows(n, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        float* g = G + r * width;
        const float* x = X + r * 4 * d;
#pragma omp simd
        for (int64_t k = 0; k < d; ++k) g[k] += x[k];
        for (int64_t l = 0; l < N; ++l) {
#pragma omp simd
          for (int64_t k = 0; k < d; ++k) g[(1 + l) * d + k] += x[d + k];
        }
#pragma omp simd
        for (int64_t k = 0; k < 2 * d; ++k) g[(N + 1) * d + k] += x[2 * d + k];
      }
    });
  }

  // The gradient of W_x x from that of the gates, written into `folded` ([n, 4 d], contiguous rows): i, the sum
  // over the f_k, g, o.
  void fold_lexical_terms(const torch::Tensor& grad_gates, torch::Tensor folded) const {
    const int64_t n = grad_gates.size(0), d = d_, N = N_, width = (N + 3) * d;
    const float* G = grad_gates.data_ptr<float>();
    float* F = folded.data_ptr<float>();
    for_rows(n, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const float* g = G + r * width;
        float* f = F + r * 4 * d;
#pragma omp simd
        for (int64_t k = 0; k < d; ++k) {
          f[k] = g[k];
          f[d + k] = 0.f;
        }
        for (int64_t l = 0; l < N; ++l) {
#pragma omp simd
          for (int64_t k = 0; k < d; ++k) f[d + k] += g[(1 + l) * d + k];
        }
#pragma omp simd
        for (int64_t k = 0; k < 2 * d; ++k) f[2 * d + k] = g[(N + 1) * d + k];
      }
    });
  }

  torch::Tensor W_x_, W_h_, W_c_, W_co_, b_, W_x_t_, W_h_t_, W_c_t_, W_co_t_, W_igo_, W_igo_t_, b_igo_;
  bool lexicalized_;
  int64_t d_ = 0, N_ = 0, internal_begin_ = 0;
  bool save_ = false;
  std::vector<Context> contexts_;
  std::vector<int64_t> offsets_;  // each level's first row in children_h_, children_c_ and grad_gates_
  torch::Tensor children_h_, children_c_, c_buffer_, grad_gates_;
  std::vector<torch::Tensor> leaf_grads_, leaf_inputs_, leaf_cells_;
  // Lexicalized: the level-sorted inputs, the inner rows' W_x x and its gradient, from row internal_begin_ on.
  torch::Tensor x_, x_terms_, grad_x_terms_;
};

// Teng & Zhang's top-down cell (graphtree/nn/top_down.py, eqs 13-14) as a LevelKernel, for passes in which
// every node has at most one parent (trees and forests; a node with several parents takes the Python loop).
// A level's rows come grouped by their position under the parent (LevelPlan.position_groups), so each
// position's parameter set multiplies one contiguous block; the roots (level 0) use position 0's set and a zero
// predecessor. Gate rows i, f, g, o; W_c feeds i and f.
class TopDownLevels : public graphtree::LevelKernel {
 public:
  // W_x: [P, 4 d, D] and b: [P, 4 d], one input set per position (P = N) or one shared (P = 1); W_h: [N, 4 d, d],
  // W_c: [N, 2 d, d], W_co: [N, d, d].
  TopDownLevels(torch::Tensor W_x, torch::Tensor b, torch::Tensor W_h, torch::Tensor W_c, torch::Tensor W_co)
      : W_x_(W_x.contiguous()), b_(b.contiguous()), W_h_(W_h.contiguous()), W_c_(W_c.contiguous()),
        W_co_(W_co.contiguous()) {
    for (auto* t : {&W_x_, &b_, &W_h_, &W_c_, &W_co_}) graphtree::check(*t, "every weight");
    N_ = W_h_.size(0);
    d_ = W_co_.size(1);
    const int64_t P = W_x_.size(0), d = d_;
    TORCH_CHECK((P == N_ || P == 1) && W_x_.size(1) == 4 * d && b_.size(0) == P && b_.size(1) == 4 * d &&
                    W_h_.size(1) == 4 * d && W_h_.size(2) == d && W_c_.size(0) == N_ && W_c_.size(1) == 2 * d &&
                    W_c_.size(2) == d && W_co_.size(0) == N_ && W_co_.size(2) == d,
                "TopDownLevels: weight shapes do not agree");
    auto made = derive(W_x_, b_, W_h_, W_c_, W_co_);
    for (int64_t s = 0; s < P; ++s) W_x_t_.push_back(graphtree::transposed_at(made, s, W_x_[s], "TopDownLevels"));
    for (int64_t p = 0; p < N_; ++p) {
      W_h_t_.push_back(graphtree::transposed_at(made, P + 3 * p, W_h_[p], "TopDownLevels"));
      W_c_t_.push_back(graphtree::transposed_at(made, P + 3 * p + 1, W_c_[p], "TopDownLevels"));
      W_co_t_.push_back(graphtree::transposed_at(made, P + 3 * p + 2, W_co_[p], "TopDownLevels"));
    }
  }

  // Each input set's W_x transposed, then each position's W_h, W_c and W_co transposed (the level products read
  // them row by row).
  static std::vector<torch::Tensor> derive(const torch::Tensor& W_x, const torch::Tensor& /*b*/,
                                           const torch::Tensor& W_h, const torch::Tensor& W_c,
                                           const torch::Tensor& W_co) {
    std::vector<torch::Tensor> made;
    for (int64_t s = 0; s < W_x.size(0); ++s) made.push_back(graphtree::transposed(W_x[s]));
    for (int64_t p = 0; p < W_h.size(0); ++p) {
      made.push_back(graphtree::transposed(W_h[p]));
      made.push_back(graphtree::transposed(W_c[p]));
      made.push_back(graphtree::transposed(W_co[p]));
    }
    return made;
  }

  void prepare(const std::vector<graphtree::Level>& levels, const std::vector<torch::Tensor>& inputs,
               bool save) override {
    save_ = save;
    contexts_.assign(levels.size(), {});
    const int64_t P = W_x_.size(0), d = d_;
    x_ = inputs[0].contiguous();
    graphtree::check(x_, "x");
    // W_x x + b of every node, one product per input set over all levels (its rows gathered where the sets
    // differ by position) rather than one per level and position.
    std::vector<std::vector<int64_t>> rows(P);
    for (const auto& level : levels) {
      TORCH_CHECK(level.width <= 1, "TopDownLevels: a node with ", level.width, " parents (use the Python loop)");
      auto& blocks = contexts_[level.index].blocks = blocks_of(level);
      for (const auto& [p, begin, count] : blocks) {
        for (int64_t r = 0; r < count; ++r) rows[input_set(p)].push_back(level.begin + begin + r);
      }
    }
    x_terms_ = torch::empty({x_.size(0), 4 * d}, x_.options());
    set_rows_.assign(P, torch::Tensor());
    all_rows_.assign(P, false);
    for (int64_t s = 0; s < P; ++s) {
      if (static_cast<int64_t>(rows[s].size()) == x_.size(0)) {
        all_rows_[s] = true;
        at::addmm_out(x_terms_, b_[s], x_, W_x_t_[s]);
      } else if (!rows[s].empty()) {
        set_rows_[s] = torch::tensor(rows[s], torch::kLong);
        x_terms_.index_copy_(0, set_rows_[s], at::addmm(b_[s], x_.index_select(0, set_rows_[s]), W_x_t_[s]));
      }
    }
    grad_a_ = save ? torch::empty({x_.size(0), 4 * d}, x_.options()) : torch::Tensor();
  }

  void forward(const graphtree::Level& level, const std::vector<torch::Tensor>& inputs,
               const std::vector<torch::Tensor>& children, std::vector<torch::Tensor>& buffers, bool save) override {
    const int64_t n = level.end - level.begin, d = d_;
    Context& context = contexts_[level.index];
    auto a = x_terms_.narrow(0, level.begin, n);  // W_x x + b from prepare(); the parent's terms added below
    torch::Tensor c_terms, h_parent, c_parent;
    if (level.width == 0) {
      c_parent = torch::zeros({n, d}, a.options());
    } else {
      h_parent = children[0];
      c_parent = children[1];
      c_terms = torch::empty({n, 2 * d}, a.options());
      each_block(context.blocks, [&](int64_t p, int64_t begin, int64_t count) {
        a.narrow(0, begin, count).addmm_(h_parent.narrow(0, begin, count), W_h_t_[p]);
        auto c_terms_block = c_terms.narrow(0, begin, count);
        at::mm_out(c_terms_block, c_parent.narrow(0, begin, count), W_c_t_[p]);
      });
    }
    auto c = buffers[1].narrow(0, level.begin, n), h = buffers[0].narrow(0, level.begin, n);
    auto activated = torch::empty({n, 3 * d}, a.options());
    peephole_level_cell_into(a, c_terms.defined() ? std::optional<torch::Tensor>(c_terms) : std::nullopt,
                             c_parent.view({n, 1, d}), activated, c);
    auto co = torch::empty({n, d}, a.options());  // W_co c_t: the output gate peeks at the new cell
    each_block(context.blocks, [&](int64_t p, int64_t begin, int64_t count) {
      auto co_block = co.narrow(0, begin, count);
      at::mm_out(co_block, c.narrow(0, begin, count), W_co_t_[p]);
    });
    auto o = torch::empty({n, d}, a.options()), tanh_c = torch::empty({n, d}, a.options());
    peephole_level_output_into(a, co, c, o, tanh_c, h);
    if (!save) return;
    context.h_parent = h_parent;
    context.c_parent = c_parent;
    context.activated = activated;
    context.c = c;
    context.o = o;
    context.tanh_c = tanh_c;
  }

  std::vector<torch::Tensor> backward(const graphtree::Level& level, const std::vector<torch::Tensor>& grad_states,
                                      std::vector<torch::Tensor>& grad_inputs) override {
    TORCH_CHECK(save_, "TopDownLevels: backward after a forward that saved nothing");
    const int64_t n = level.end - level.begin, d = d_;
    Context& context = contexts_[level.index];
    auto grad_h = grad_states[0].contiguous(), grad_c = grad_states[1].contiguous();
    auto grad_o = peephole_level_output_backward(grad_h, context.o, context.tanh_c);
    auto grad_c_from_o = torch::empty({n, d}, grad_h.options());
    each_block(context.blocks, [&](int64_t p, int64_t begin, int64_t count) {
      auto block = grad_c_from_o.narrow(0, begin, count);
      at::mm_out(block, grad_o.narrow(0, begin, count), W_co_[p]);
    });
    auto cell = peephole_level_cell_backward(grad_c, grad_h, context.o, context.tanh_c, grad_c_from_o, grad_o,
                                             context.activated, context.c_parent.view({n, 1, d}));
    // Kept for finish_backward() and param_grads(), which multiply every level's rows at once.
    context.grad_a = grad_a_.narrow(0, level.begin, n);
    context.grad_a.copy_(cell[0]);
    context.grad_o = grad_o;
    if (level.width == 0) return {torch::Tensor(), torch::Tensor()};
    auto grad_h_parent = torch::empty({n, d}, grad_h.options());
    auto grad_c_parent = cell[1].view({n, d});  // through c_t = f c_{t-1} + ...; the peepholes' part added below
    each_block(context.blocks, [&](int64_t p, int64_t begin, int64_t count) {
      auto grad_a = context.grad_a.narrow(0, begin, count);
      auto h_block = grad_h_parent.narrow(0, begin, count);
      at::mm_out(h_block, grad_a, W_h_[p]);
      grad_c_parent.narrow(0, begin, count).addmm_(grad_a.narrow(1, 0, 2 * d), W_c_[p]);
    });
    return {grad_h_parent, grad_c_parent};
  }

  void finish_backward(std::vector<torch::Tensor>& grad_inputs) override {
    if (grad_inputs.empty() || !grad_inputs[0].defined()) return;
    for (int64_t s = 0; s < W_x_.size(0); ++s) {
      if (all_rows_[s]) {
        grad_inputs[0].addmm_(grad_a_, W_x_[s]);
      } else if (set_rows_[s].defined()) {
        grad_inputs[0].index_add_(0, set_rows_[s], at::mm(grad_a_.index_select(0, set_rows_[s]), W_x_[s]));
      }
    }
  }

  std::vector<torch::Tensor> param_grads() override {
    const int64_t d = d_, P = W_x_.size(0);
    auto grad_W_x = torch::zeros_like(W_x_), grad_b = torch::zeros_like(b_), grad_W_h = torch::zeros_like(W_h_);
    auto grad_W_c = torch::zeros_like(W_c_), grad_W_co = torch::zeros_like(W_co_);
    if (grad_a_.defined()) {
      for (int64_t s = 0; s < P; ++s) {
        if (!all_rows_[s] && !set_rows_[s].defined()) continue;
        auto grad_a = all_rows_[s] ? grad_a_ : grad_a_.index_select(0, set_rows_[s]);
        grad_W_x[s].addmm_(grad_a.t(), all_rows_[s] ? x_ : x_.index_select(0, set_rows_[s]));
        grad_b[s] += grad_a.sum(0);
      }
    }
    // Every level's rows of one position, gathered so that each gradient is one product.
    std::vector<std::vector<torch::Tensor>> a_by_pos(N_), h_by_pos(N_), cp_by_pos(N_), o_by_pos(N_), c_by_pos(N_);
    for (const auto& context : contexts_) {
      if (!context.grad_a.defined()) continue;
      for (const auto& [p, begin, count] : context.blocks) {
        o_by_pos[p].push_back(context.grad_o.narrow(0, begin, count));
        c_by_pos[p].push_back(context.c.narrow(0, begin, count));
        if (!context.h_parent.defined()) continue;  // the roots: no parent, nothing for W_h and W_c
        a_by_pos[p].push_back(context.grad_a.narrow(0, begin, count));
        h_by_pos[p].push_back(context.h_parent.narrow(0, begin, count));
        cp_by_pos[p].push_back(context.c_parent.narrow(0, begin, count));
      }
    }
    for (int64_t p = 0; p < N_; ++p) {
      if (!o_by_pos[p].empty()) grad_W_co[p].addmm_(cat_rows(o_by_pos[p]).t(), cat_rows(c_by_pos[p]));
      if (a_by_pos[p].empty()) continue;
      auto grad_a = cat_rows(a_by_pos[p]);
      grad_W_h[p].addmm_(grad_a.t(), cat_rows(h_by_pos[p]));
      grad_W_c[p].addmm_(grad_a.narrow(1, 0, 2 * d).t(), cat_rows(cp_by_pos[p]));
    }
    return {grad_W_x, grad_b, grad_W_h, grad_W_c, grad_W_co};
  }

 private:
  struct Block {
    int64_t position, begin, count;  // rows [begin, begin + count) of the level use the set of `position`
  };

  // f(position, begin, count) for each of a level's position blocks, side by side (common.h): the blocks use
  // different weights and write different rows.
  template <typename F>
  static void each_block(const std::vector<Block>& blocks, const F& f) {
    std::vector<std::function<void()>> parts;
    for (const auto& block : blocks) parts.push_back([&f, block] { f(block.position, block.begin, block.count); });
    graphtree::side_by_side(parts);
  }
  struct Context {
    std::vector<Block> blocks;
    torch::Tensor h_parent, c_parent, activated, c, o, tanh_c, grad_a, grad_o;
  };

  int64_t input_set(int64_t position) const { return W_x_.size(0) == 1 ? 0 : position; }

  // The level's rows by position: the roots are all position 0; below, the position groups of the plan.
  std::vector<Block> blocks_of(const graphtree::Level& level) const {
    const int64_t n = level.end - level.begin;
    if (level.width == 0) return {{0, 0, n}};
    const auto& groups = level.position_groups;
    TORCH_CHECK(groups.size() >= 2, "TopDownLevels: the plan has no position groups");
    const int64_t widest = static_cast<int64_t>(groups.size()) - 2;
    std::vector<Block> blocks;
    int64_t begin = 0;
    for (int64_t g = 0; g < static_cast<int64_t>(groups.size()); ++g) {
      if (groups[g] == 0) continue;
      TORCH_CHECK(g < widest && g < N_, "TopDownLevels: rows at position ", g, " of a model with ", N_,
                  " positions, or at several positions");
      blocks.push_back({g, begin, groups[g]});
      begin += groups[g];
    }
    return blocks;
  }

  torch::Tensor W_x_, b_, W_h_, W_c_, W_co_;
  std::vector<torch::Tensor> W_x_t_, W_h_t_, W_c_t_, W_co_t_;
  torch::Tensor x_, x_terms_, grad_a_;  // the level-sorted inputs, their W_x x + b, the gates' gradients
  std::vector<torch::Tensor> set_rows_;  // each input set's rows, where it has some but not all
  std::vector<bool> all_rows_;           // an input set that every row uses
  int64_t N_ = 0, d_ = 0;
  bool save_ = false;
  std::vector<Context> contexts_;
};

}  // namespace

void bind_top_down_levels(pybind11::module& m) {
  pybind11::class_<TopDownLevels, graphtree::LevelKernel, std::shared_ptr<TopDownLevels>>(
      m, "TopDownLevels", "Teng & Zhang's top-down cell's level math for the compiled level loop (one parent)")
      .def(pybind11::init<torch::Tensor, torch::Tensor, torch::Tensor, torch::Tensor, torch::Tensor>(),
           pybind11::arg("W_x"), pybind11::arg("b"), pybind11::arg("W_h"), pybind11::arg("W_c"),
           pybind11::arg("W_co"));
}

void bind_lexicalized_levels(pybind11::module& m) {
  pybind11::class_<LexicalizedLevels, graphtree::LevelKernel, std::shared_ptr<LexicalizedLevels>>(
      m, "LexicalizedLevels", "Teng & Zhang's lexicalized bottom-up cell's level math for the compiled level loop")
      .def(pybind11::init<torch::Tensor, torch::Tensor, torch::Tensor, torch::Tensor, torch::Tensor, bool>(),
           pybind11::arg("W_x"), pybind11::arg("W_h"), pybind11::arg("W_c"), pybind11::arg("W_co"),
           pybind11::arg("b"), pybind11::arg("lexicalized"));
}

void bind_slstm_levels(pybind11::module& m) {
  pybind11::class_<SLSTMLevels, graphtree::LevelKernel, std::shared_ptr<SLSTMLevels>>(
      m, "SLSTMLevels", "The S-LSTM's level math for the engine's compiled level loop")
      .def(pybind11::init<torch::Tensor, torch::Tensor, torch::Tensor, torch::Tensor, std::optional<torch::Tensor>,
                          std::optional<torch::Tensor>>(),
           pybind11::arg("W_h"), pybind11::arg("W_c"), pybind11::arg("W_co"), pybind11::arg("b"),
           pybind11::arg("leaf_weight") = pybind11::none(), pybind11::arg("leaf_bias") = pybind11::none());
}
