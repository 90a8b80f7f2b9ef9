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

namespace graphtree {
namespace {

// c_t = sum_k f_k c_k + i tanh(g), written into activated [n, (N + 2) d] and c [n, d]. Every tensor holds
// contiguous rows (c: a level's rows of the state buffer); c_terms may be undefined.
void cell_into(const Tensor& pre, const Tensor& c_terms, const Tensor& c_children, const Tensor& activated,
               const Tensor& c) {
  const bool peep = c_terms.defined();
  const int64_t n = c_children.size(0), N = c_children.size(1), d = c_children.size(2);
  const float *P = pre.data_ptr<float>(), *Ct = peep ? c_terms.data_ptr<float>() : nullptr;
  const float* Cj = c_children.data_ptr<float>();
  float *A = activated.data_ptr<float>(), *C = c.data_ptr<float>();
  for_rows(n, [&](int64_t r) {
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
    add_forgotten(cr, a + d, cj, N, d);  // + sum_l f_l c_l
  });
}

// o = sigmoid(pre_o + W_co c_t), h = o tanh(c_t), given co = W_co c_t: written into o, tanh_c and h, each [n, d].
void output_into(const Tensor& pre, const Tensor& co, const Tensor& c_t, const Tensor& o,
                 const Tensor& tanh_c, const Tensor& h) {
  const int64_t n = c_t.size(0), d = c_t.size(1), width = pre.size(1);
  const float *P = pre.data_ptr<float>(), *Co = co.data_ptr<float>(), *C = c_t.data_ptr<float>();
  float *O = o.data_ptr<float>(), *T = tanh_c.data_ptr<float>(), *H = h.data_ptr<float>();
  for_rows(n, [&](int64_t r) {
    const float *po = P + r * width + width - d, *co_r = Co + r * d, *cr = C + r * d;
    float *orow = O + r * d, *tr = T + r * d, *hr = H + r * d;
#pragma omp simd
    for (int64_t k = 0; k < d; ++k) {
      orow[k] = sigmoid(po[k] + co_r[k]);
      tr[k] = tanh_of(cr[k]);
      hr[k] = orow[k] * tr[k];
    }
  });
}

// The output gate's pre-activation gradient grad_h tanh(c) o (1 - o), written into grad_o [n, d].
void output_backward_into(const Tensor& grad_h, const Tensor& o, const Tensor& tanh_c, const Tensor& grad_o) {
  const float *gH = grad_h.data_ptr<float>(), *O = o.data_ptr<float>(), *T = tanh_c.data_ptr<float>();
  float* gO = grad_o.data_ptr<float>();
#pragma omp simd
  for (int64_t k = 0; k < o.numel(); ++k) gO[k] = gH[k] * T[k] * O[k] * (1.f - O[k]);
}

// The rest of the level's derivatives. grad_c_from_o: W_co^T grad_o, the cell's gradient through the output gate.
// Writes grad_pre [n, (N + 3) d] (its first (N + 1) d columns are also the gradient of c_terms) and returns the
// children's cell gradients through c_t = sum_k f_k c_k + ... alone, [n, N, d] (the caller adds the peepholes').
Tensor cell_backward_into(const Tensor& grad_c, const Tensor& grad_h, const Tensor& o,
                          const Tensor& tanh_c, const Tensor& grad_c_from_o,
                          const Tensor& grad_o, const Tensor& activated,
                          const Tensor& c_children, const Tensor& grad_pre) {
  const int64_t n = c_children.size(0), N = c_children.size(1), d = c_children.size(2), width = (N + 3) * d;
  auto grad_cj = torch::empty({n, N, d}, activated.options());
  const float *gC = grad_c.data_ptr<float>(), *gH = grad_h.data_ptr<float>(), *O = o.data_ptr<float>();
  const float *T = tanh_c.data_ptr<float>(), *gCo = grad_c_from_o.data_ptr<float>(), *gO = grad_o.data_ptr<float>();
  const float *A = activated.data_ptr<float>(), *Cj = c_children.data_ptr<float>();
  float *gP = grad_pre.data_ptr<float>(), *gCj = grad_cj.data_ptr<float>();
  std::vector<float> total(d);  // dL/dc_t of the row: from c_t itself, through h = o tanh(c_t), and through o
  float* gc = total.data();
  for_rows(n, [&](int64_t r) {
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
    forgotten_backward(gc, a + d, cj, g + d, gcj, N, d);  // the forget gates, the children's memories
  });
  return grad_cj;
}

// gates [n, (N + 3) d] += W_x x laid out as i, f_1 .. f_N, g, o: the W_xf block goes to every f_k.
void add_lexical_terms(const Tensor& gates, const Tensor& Wx, int64_t N, int64_t d) {
  const int64_t n = gates.size(0), width = (N + 3) * d;
  float* G = gates.data_ptr<float>();
  const float* X = Wx.data_ptr<float>();
  for_rows(n, [&](int64_t r) {
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
  });
}

// The gradient of W_x x from that of the gates, written into `folded` ([n, 4 d], contiguous rows): i, the sum
// over the f_k, g, o.
void fold_lexical_terms(const Tensor& grad_gates, const Tensor& folded, int64_t N, int64_t d) {
  const int64_t n = grad_gates.size(0), width = (N + 3) * d;
  const float* G = grad_gates.data_ptr<float>();
  float* F = folded.data_ptr<float>();
  for_rows(n, [&](int64_t r) {
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
  });
}

struct PeepholeSaved {
  Tensor x, activated, c, o, tanh_c, c_children;  // x, c: a lexicalized leaf's
  LeafUnit::Saved leaf;                           // an S-LSTM leaf unit's
};

// The internal levels of the S-LSTM and of the lexicalized cell, bottom-up: gates i, f_1 .. f_N, g, o from
// W_h [h_1 .. h_N] + b, the peepholes W_c [c_1 .. c_N] on i and the f_k, and W_co c_t on o (eqs 1-7 of Zhu et
// al. 2015; eqs 10-11 of Teng & Zhang 2017). Their inner rows are one block of the state buffers, so W_co's
// rows, the new cells, are read from the c buffer.
class PeepholeLevels : public Levels<PeepholeSaved> {
 protected:
  PeepholeLevels(const char* name, Tensor W_h, Tensor W_c, Tensor W_co, Tensor b)
      : Levels(name, W_h.options()), W_h_(W_h), W_c_(W_c), W_co_(W_co), b_(b) {
    check_all({&W_h_, &W_c_, &W_co_, &b_});
    d_ = W_co_.size(0);
    N_ = W_h_.size(1) / d_;
    TORCH_CHECK(N_ >= 1 && W_h_.size(1) == N_ * d_ && W_h_.size(0) == (N_ + 3) * d_ &&
                    W_c_.size(0) == (N_ + 1) * d_ && W_c_.size(1) == N_ * d_ && b_.numel() == (N_ + 3) * d_,
                name, ": weight shapes do not agree");
    expect(N_, {d_, d_});
    W_h_t_ = transposed(W_h_);
    W_c_t_ = transposed(W_c_);
    W_co_t_ = transposed(W_co_);
  }

  void start(const std::vector<Level>& levels) override {
    grad_gates_ = save_ ? internal((N_ + 3) * d_) : Tensor();
    grad_o_ = save_ ? internal(d_) : Tensor();
  }

  // lexical: the level's W_x x (i, f, g, o), or undefined.
  void forward_internal(const Level& level, const std::vector<Tensor>& children,
                        std::vector<Tensor>& buffers, bool save, const Tensor& lexical) {
    const int64_t n = level.rows(), d = d_, N = N_;
    auto h_out = rows_of(buffers[0], level), c_out = rows_of(buffers[1], level);
    auto c_children = children[1].view({n, N, d});
    Tensor gates, c_terms;
    side_by_side({[&] { gates = at::addmm(b_, children[0].view({n, N * d}), W_h_t_); },
                  [&] { c_terms = at::mm(children[1].view({n, N * d}), W_c_t_); }});
    if (lexical.defined()) add_lexical_terms(gates, lexical, N, d);
    auto activated = fresh(n, (N + 2) * d), o = fresh(n, d), tanh_c = fresh(n, d);
    cell_into(gates, c_terms, c_children, activated, c_out);
    output_into(gates, at::mm(c_out, W_co_t_), c_out, o, tanh_c, h_out);  // o peeks at the new cell
    if (save) saved(level) = {{}, activated, {}, o, tanh_c, c_children, {}};
  }

  // grad_lexical: where the gradient of the level's W_x x goes, or undefined.
  std::vector<Tensor> backward_internal(const Level& level, const std::vector<Tensor>& grad_states,
                                        const Tensor& grad_lexical) {
    const auto& s = saved(level);
    const int64_t n = level.rows(), d = d_, N = N_;
    const auto &grad_h = grad_states[0], &grad_c = grad_states[1];
    auto grad_gates = internal_rows(grad_gates_, level), grad_o = internal_rows(grad_o_, level);
    output_backward_into(grad_h, s.o, s.tanh_c, grad_o);
    auto grad_c_direct = cell_backward_into(grad_c, grad_h, s.o, s.tanh_c, at::mm(grad_o, W_co_), grad_o,
                                            s.activated, s.c_children, grad_gates);
    if (grad_lexical.defined()) fold_lexical_terms(grad_gates, grad_lexical, N, d);
    auto grad_if = grad_gates.narrow(1, 0, (N + 1) * d);  // the gates that also read W_c [c_1 .. c_N]
    Tensor grad_h_children, grad_c_children;
    side_by_side({[&] { grad_h_children = at::mm(grad_gates, W_h_); },
                  [&] { grad_c_children = at::mm(grad_if, W_c_); }});
    grad_c_children = grad_c_children.view({n, N, d}).add_(grad_c_direct);
    return {grad_h_children.view({-1, d}), grad_c_children.view({-1, d})};
  }

  // The gradients of W_h, W_c, W_co and b from the internal levels; W_co's rows are the new cells.
  std::vector<Tensor> internal_grads() const {
    const int64_t d = d_, N = N_;
    return {weight_grad(W_h_, grad_gates_, gathered(0, N * d)),
            weight_grad(W_c_, grad_gates_.narrow(1, 0, (N + 1) * d), gathered(1, N * d)),
            weight_grad(W_co_, grad_o_, internal_block(buffer(1))), bias_grad(b_, grad_gates_)};
  }

  Tensor W_h_, W_c_, W_co_, b_, W_h_t_, W_c_t_, W_co_t_;
  int64_t d_ = 0, N_ = 0;
  Tensor grad_gates_, grad_o_;
};

// The S-LSTM (graphtree/nn/slstm.py, Zhu et al. 2015, eqs 1-7) as a LevelKernel. Leaves: h = x, c = 0
// ("embedding"), or the leaf unit c = W^(c) x + b^(c), o = sigmoid(W^(o) x + b^(o)) ("lstm": leaf_weight given).
class SLSTMLevels : public PeepholeLevels {
 public:
  SLSTMLevels(Tensor W_h, Tensor W_c, Tensor W_co, Tensor b,
              std::optional<Tensor> leaf_weight, std::optional<Tensor> leaf_bias)
      : PeepholeLevels("SLSTMLevels", W_h, W_c, W_co, b) {
    TORCH_CHECK(N_ == 2, "SLSTMLevels: weight shapes do not agree");
    if (leaf_weight && leaf_weight->defined()) {
      TORCH_CHECK(leaf_bias && leaf_bias->defined(), "SLSTMLevels: leaf_weight without leaf_bias");
      leaf_ = LeafUnit(*leaf_weight, *leaf_bias);
    }
  }

  void start(const std::vector<Level>& levels) override {
    PeepholeLevels::start(levels);
    leaf_.reset();
  }

  void forward(const Level& level, const std::vector<Tensor>& inputs,
               const std::vector<Tensor>& children, std::vector<Tensor>& buffers, bool save) override {
    if (level.width > 0) return forward_internal(level, children, buffers, save, {});
    if (!leaf_.defined()) return copy_input(level, inputs, buffers);  // h = x, c = 0 (the buffers start at zero)
    saved(level).leaf = leaf_.forward(inputs[0], rows_of(buffers[0], level), rows_of(buffers[1], level), save);
  }

  std::vector<Tensor> backward(const Level& level, const std::vector<Tensor>& grad_states,
                               std::vector<Tensor>& grad_inputs) override {
    if (level.width > 0) return backward_internal(level, grad_states, {});
    if (!leaf_.defined()) return pass_gradient_to_input(grad_states, grad_inputs);
    leaf_.backward(saved(level).leaf, grad_states[0], grad_states[1], input_grad(grad_inputs));
    return {};
  }

  std::vector<Tensor> param_grads() override { return leaf_.with_param_grads(internal_grads()); }

 private:
  LeafUnit leaf_;  // undefined for "embedding" leaves
};

// Teng & Zhang's lexicalized bottom-up cell (graphtree/nn/lexicalized.py, eqs 4, 10-11; ConTree with
// lexicalized=false) as a LevelKernel. Internal nodes: PeepholeLevels, plus (lexicalized) W_x x with its one
// W_xf block feeding every f_k. Leaves: gates i, g, o from W_x x and the matching rows of b, no children.
class LexicalizedLevels : public PeepholeLevels {
 public:
  LexicalizedLevels(Tensor W_x, Tensor W_h, Tensor W_c, Tensor W_co, Tensor b, bool lexicalized)
      : PeepholeLevels("LexicalizedLevels", W_h, W_c, W_co, b), W_x_(W_x), lexicalized_(lexicalized) {
    check_all({&W_x_});
    const int64_t d = d_, N = N_;
    TORCH_CHECK(W_x_.size(0) == (lexicalized ? 4 : 3) * d, "LexicalizedLevels: weight shapes do not agree");
    // The leaves' rows i, g, o of W_x and b (a leaf has no forget gate).
    W_igo_ = lexicalized ? torch::cat({W_x_.narrow(0, 0, d), W_x_.narrow(0, 2 * d, 2 * d)}) : W_x_;
    W_igo_t_ = transposed(W_igo_);
    b_igo_ = torch::cat({b_.narrow(0, 0, d), b_.narrow(0, (N + 1) * d, 2 * d)});
    if (lexicalized) W_x_t_ = transposed(W_x_);
  }

  void start(const std::vector<Level>& levels) override {
    PeepholeLevels::start(levels);
    leaf_x_.clear();
    leaf_co_.clear();
    if (!lexicalized_) return;
    // The inner rows are one block, whose W_x x is one product here rather than one per level.
    x_terms_ = at::mm(internal_block(input(0)), W_x_t_);
    grad_x_terms_ = save_ ? internal(4 * d_) : Tensor();
  }

  void forward(const Level& level, const std::vector<Tensor>& inputs,
               const std::vector<Tensor>& children, std::vector<Tensor>& buffers, bool save) override {
    if (level.width > 0) return forward_internal(level, children, buffers, save, lexical_rows(x_terms_, level));
    const int64_t n = level.rows(), d = d_;
    auto h_out = rows_of(buffers[0], level), c_out = rows_of(buffers[1], level);
    const auto& x = inputs[0];
    auto gates = at::addmm(b_igo_, x, W_igo_t_);  // i, g, o
    auto activated = fresh(n, 2 * d), o = fresh(n, d), tanh_c = fresh(n, d), none = fresh(n, 0).view({n, 0, d});
    cell_into(gates, {}, none, activated, c_out);
    output_into(gates, at::mm(c_out, W_co_t_), c_out, o, tanh_c, h_out);
    if (save) saved(level) = {x, activated, c_out, o, tanh_c, none, {}};
  }

  std::vector<Tensor> backward(const Level& level, const std::vector<Tensor>& grad_states,
                               std::vector<Tensor>& grad_inputs) override {
    if (level.width > 0) return backward_internal(level, grad_states, lexical_rows(grad_x_terms_, level));
    const auto& s = saved(level);
    const int64_t n = level.rows(), d = d_;
    const auto &grad_h = grad_states[0], &grad_c = grad_states[1];
    auto grad_o = fresh(n, d), grad_igo = fresh(n, 3 * d);
    output_backward_into(grad_h, s.o, s.tanh_c, grad_o);
    cell_backward_into(grad_c, grad_h, s.o, s.tanh_c, at::mm(grad_o, W_co_), grad_o, s.activated, s.c_children,
                       grad_igo);
    leaf_x_.add(grad_igo, s.x);
    leaf_co_.add(grad_igo.narrow(1, 2 * d, d), s.c);
    if (auto* grad_x = input_grad(grad_inputs)) grad_x->addmm_(grad_igo, W_igo_);
    return {};
  }

  void finish_backward(std::vector<Tensor>& grad_inputs) override {
    auto* grad_x = input_grad(grad_inputs);
    if (!lexicalized_ || !grad_x_terms_.defined() || grad_x == nullptr) return;
    internal_block(*grad_x).addmm_(grad_x_terms_, W_x_);
  }

  std::vector<Tensor> param_grads() override {
    const int64_t d = d_, N = N_;
    auto grads = internal_grads();  // W_h, W_c, W_co, b
    auto &grad_W_co = grads[2], &grad_b = grads[3];
    auto grad_W_x = weight_grad(W_x_, grad_x_terms_, lexicalized_ ? internal_block(input(0)) : Tensor());
    leaf_co_.add_into(grad_W_co);
    if (auto grad_igo = leaf_x_.grads(); grad_igo.defined()) {
      auto x = leaf_x_.rows();
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
    return {grad_W_x, grads[0], grads[1], grad_W_co, grad_b};
  }

 private:
  // The level's rows of a tensor of the inner rows, or undefined where not lexicalized.
  Tensor lexical_rows(const Tensor& t, const Level& level) const {
    return lexicalized_ ? internal_rows(t, level) : Tensor();
  }

  Tensor W_x_, W_x_t_, W_igo_, W_igo_t_, b_igo_;
  bool lexicalized_;
  GradientRows leaf_x_, leaf_co_;  // the leaves' gate gradients (i, g, o; o alone) with their inputs, cells
  Tensor x_terms_, grad_x_terms_;  // lexicalized: the inner rows' W_x x and its gradient
};

// Rows [begin, begin + count) of a top-down level, whose nodes are all at `position` under their parents.
struct Block {
  int64_t position, begin, count;
};

struct TopDownSaved {
  std::vector<Block> blocks;
  Tensor h_parent, c_parent, activated, c, o, tanh_c, grad_a, grad_o;
};

// Teng & Zhang's top-down cell (graphtree/nn/top_down.py, eqs 13-14) as a LevelKernel, for passes in which
// every node has at most one parent (trees and forests; a node with several parents takes the Python loop).
// A level's rows come grouped by their position under the parent (LevelPlan.position_groups), so each
// position's parameter set multiplies one contiguous block; the roots (level 0) use position 0's set and a zero
// predecessor. Gate rows i, f, g, o; W_c feeds i and f.
class TopDownLevels : public Levels<TopDownSaved> {
 public:
  // W_x: [P, 4 d, D] and b: [P, 4 d], one input set per position (P = N) or one shared (P = 1); W_h: [N, 4 d, d],
  // W_c: [N, 2 d, d], W_co: [N, d, d].
  TopDownLevels(Tensor W_x, Tensor b, Tensor W_h, Tensor W_c, Tensor W_co)
      : Levels("TopDownLevels", W_h.options()), W_x_(W_x), b_(b), W_h_(W_h), W_c_(W_c), W_co_(W_co) {
    check_all({&W_x_, &b_, &W_h_, &W_c_, &W_co_});
    N_ = W_h_.size(0);
    d_ = W_co_.size(1);
    const int64_t P = W_x_.size(0), d = d_;
    TORCH_CHECK((P == N_ || P == 1) && W_x_.size(1) == 4 * d && b_.size(0) == P && b_.size(1) == 4 * d &&
                    W_h_.size(1) == 4 * d && W_h_.size(2) == d && W_c_.size(0) == N_ && W_c_.size(1) == 2 * d &&
                    W_c_.size(2) == d && W_co_.size(0) == N_ && W_co_.size(2) == d,
                "TopDownLevels: weight shapes do not agree");
    expect(1);  // one parent a node (a node with several takes the Python loop)
    for (int64_t s = 0; s < P; ++s) W_x_t_.push_back(transposed(W_x_[s]));
    for (int64_t p = 0; p < N_; ++p) {
      W_h_t_.push_back(transposed(W_h_[p]));
      W_c_t_.push_back(transposed(W_c_[p]));
      W_co_t_.push_back(transposed(W_co_[p]));
    }
  }

  void start(const std::vector<Level>& levels) override {
    const int64_t P = W_x_.size(0), d = d_;
    const auto& x = input(0);
    // W_x x + b of every node, one product per input set over all levels (its rows gathered where the sets
    // differ by position) rather than one per level and position.
    std::vector<std::vector<int64_t>> rows(P);
    for (const auto& level : levels) {
      auto& blocks = saved(level).blocks = blocks_of(level);
      for (const auto& [p, begin, count] : blocks) {
        for (int64_t r = 0; r < count; ++r) rows[input_set(p)].push_back(level.begin + begin + r);
      }
    }
    x_terms_ = fresh(x.size(0), 4 * d);
    set_rows_.assign(P, Tensor());
    all_rows_.assign(P, false);
    for (int64_t s = 0; s < P; ++s) {
      if (static_cast<int64_t>(rows[s].size()) == x.size(0)) {
        all_rows_[s] = true;
        at::addmm_out(x_terms_, b_[s], x, W_x_t_[s]);
      } else if (!rows[s].empty()) {
        set_rows_[s] = torch::tensor(rows[s], torch::kLong);
        x_terms_.index_copy_(0, set_rows_[s], at::addmm(b_[s], x.index_select(0, set_rows_[s]), W_x_t_[s]));
      }
    }
    grad_a_ = save_ ? fresh(x.size(0), 4 * d) : Tensor();
  }

  void forward(const Level& level, const std::vector<Tensor>& inputs,
               const std::vector<Tensor>& children, std::vector<Tensor>& buffers, bool save) override {
    const int64_t n = level.rows(), d = d_;
    auto& s = saved(level);
    auto a = rows_of(x_terms_, level);  // W_x x + b from start(); the parent's terms added below
    Tensor c_terms, h_parent, c_parent;
    if (level.width == 0) {
      c_parent = torch::zeros({n, d}, options_);
    } else {
      h_parent = children[0];
      c_parent = children[1];
      c_terms = fresh(n, 2 * d);
      each_block(s.blocks, [&](int64_t p, int64_t begin, int64_t count) {
        a.narrow(0, begin, count).addmm_(h_parent.narrow(0, begin, count), W_h_t_[p]);
        auto c_terms_block = c_terms.narrow(0, begin, count);
        at::mm_out(c_terms_block, c_parent.narrow(0, begin, count), W_c_t_[p]);
      });
    }
    auto c = rows_of(buffers[1], level), h = rows_of(buffers[0], level);
    auto activated = fresh(n, 3 * d);
    cell_into(a, c_terms, c_parent.view({n, 1, d}), activated, c);
    auto co = fresh(n, d);  // W_co c_t: the output gate peeks at the new cell
    each_block(s.blocks, [&](int64_t p, int64_t begin, int64_t count) {
      auto co_block = co.narrow(0, begin, count);
      at::mm_out(co_block, c.narrow(0, begin, count), W_co_t_[p]);
    });
    auto o = fresh(n, d), tanh_c = fresh(n, d);
    output_into(a, co, c, o, tanh_c, h);
    if (!save) return;
    s.h_parent = h_parent;
    s.c_parent = c_parent;
    s.activated = activated;
    s.c = c;
    s.o = o;
    s.tanh_c = tanh_c;
  }

  std::vector<Tensor> backward(const Level& level, const std::vector<Tensor>& grad_states,
                               std::vector<Tensor>& grad_inputs) override {
    auto& s = saved(level);
    const int64_t n = level.rows(), d = d_;
    const auto &grad_h = grad_states[0], &grad_c = grad_states[1];
    auto grad_o = fresh(n, d), grad_c_from_o = fresh(n, d);
    output_backward_into(grad_h, s.o, s.tanh_c, grad_o);
    each_block(s.blocks, [&](int64_t p, int64_t begin, int64_t count) {
      auto block = grad_c_from_o.narrow(0, begin, count);
      at::mm_out(block, grad_o.narrow(0, begin, count), W_co_[p]);
    });
    // Kept for finish_backward() and param_grads(), which multiply every level's rows at once.
    s.grad_a = rows_of(grad_a_, level);
    s.grad_o = grad_o;
    // Through c_t = f c_{t-1} + ...; the peepholes' part added below.
    auto grad_c_parent = cell_backward_into(grad_c, grad_h, s.o, s.tanh_c, grad_c_from_o, grad_o, s.activated,
                                            s.c_parent.view({n, 1, d}), s.grad_a).view({n, d});
    if (level.width == 0) return {};
    auto grad_h_parent = fresh(n, d);
    each_block(s.blocks, [&](int64_t p, int64_t begin, int64_t count) {
      auto grad_a = s.grad_a.narrow(0, begin, count);
      auto h_block = grad_h_parent.narrow(0, begin, count);
      at::mm_out(h_block, grad_a, W_h_[p]);
      grad_c_parent.narrow(0, begin, count).addmm_(grad_a.narrow(1, 0, 2 * d), W_c_[p]);
    });
    return {grad_h_parent, grad_c_parent};
  }

  void finish_backward(std::vector<Tensor>& grad_inputs) override {
    auto* grad_x = input_grad(grad_inputs);
    if (grad_x == nullptr) return;
    for (int64_t s = 0; s < W_x_.size(0); ++s) {
      if (all_rows_[s]) {
        grad_x->addmm_(grad_a_, W_x_[s]);
      } else if (set_rows_[s].defined()) {
        grad_x->index_add_(0, set_rows_[s], at::mm(grad_a_.index_select(0, set_rows_[s]), W_x_[s]));
      }
    }
  }

  std::vector<Tensor> param_grads() override {
    const int64_t d = d_, P = W_x_.size(0);
    const auto& x = input(0);
    auto grad_W_x = torch::zeros_like(W_x_), grad_b = torch::zeros_like(b_), grad_W_h = torch::zeros_like(W_h_);
    auto grad_W_c = torch::zeros_like(W_c_), grad_W_co = torch::zeros_like(W_co_);
    if (grad_a_.defined()) {
      for (int64_t s = 0; s < P; ++s) {
        if (!all_rows_[s] && !set_rows_[s].defined()) continue;
        auto grad_a = all_rows_[s] ? grad_a_ : grad_a_.index_select(0, set_rows_[s]);
        grad_W_x[s].addmm_(grad_a.t(), all_rows_[s] ? x : x.index_select(0, set_rows_[s]));
        grad_b[s] += grad_a.sum(0);
      }
    }
    // Every level's rows of one position, gathered so that each gradient is one product.
    std::vector<GradientRows> W_h_rows(N_), W_c_rows(N_), W_co_rows(N_);
    for (const auto& s : all_saved()) {
      if (!s.grad_a.defined()) continue;
      for (const auto& [p, begin, count] : s.blocks) {
        auto grad_a = s.grad_a.narrow(0, begin, count);
        W_co_rows[p].add(s.grad_o.narrow(0, begin, count), s.c.narrow(0, begin, count));
        if (!s.h_parent.defined()) continue;  // the roots: no parent, nothing for W_h and W_c
        W_h_rows[p].add(grad_a, s.h_parent.narrow(0, begin, count));
        W_c_rows[p].add(grad_a.narrow(1, 0, 2 * d), s.c_parent.narrow(0, begin, count));
      }
    }
    for (int64_t p = 0; p < N_; ++p) {
      W_co_rows[p].add_into(grad_W_co[p]);
      W_h_rows[p].add_into(grad_W_h[p]);
      W_c_rows[p].add_into(grad_W_c[p]);
    }
    return {grad_W_x, grad_b, grad_W_h, grad_W_c, grad_W_co};
  }

 private:
  // f(position, begin, count) for each of a level's position blocks, side by side (common.h): the blocks use
  // different weights and write different rows.
  template <typename F>
  static void each_block(const std::vector<Block>& blocks, const F& f) {
    std::vector<std::function<void()>> parts;
    for (const auto& block : blocks) parts.push_back([&f, block] { f(block.position, block.begin, block.count); });
    side_by_side(parts);
  }

  int64_t input_set(int64_t position) const { return W_x_.size(0) == 1 ? 0 : position; }

  // The level's rows by position: the roots are all position 0; below, the position groups of the plan.
  std::vector<Block> blocks_of(const Level& level) const {
    if (level.width == 0) return {{0, 0, level.rows()}};
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

  Tensor W_x_, b_, W_h_, W_c_, W_co_;
  std::vector<Tensor> W_x_t_, W_h_t_, W_c_t_, W_co_t_;
  Tensor x_terms_, grad_a_;  // the level-sorted inputs' W_x x + b, the gates' gradients
  std::vector<Tensor> set_rows_;  // each input set's rows, where it has some but not all
  std::vector<bool> all_rows_;           // an input set that every row uses
  int64_t N_ = 0, d_ = 0;
};

const Binding binding([](pybind11::module& m) {
  bind_kernel<SLSTMLevels, Tensor, Tensor, Tensor, Tensor, std::optional<Tensor>, std::optional<Tensor>>(
      m, "SLSTMLevels", "The S-LSTM's level math for the engine's compiled level loop", py::arg("W_h"),
      py::arg("W_c"), py::arg("W_co"), py::arg("b"), py::arg("leaf_weight") = py::none(),
      py::arg("leaf_bias") = py::none());
  bind_kernel<LexicalizedLevels, Tensor, Tensor, Tensor, Tensor, Tensor, bool>(
      m, "LexicalizedLevels", "Teng & Zhang's lexicalized bottom-up cell's level math for the compiled level loop",
      py::arg("W_x"), py::arg("W_h"), py::arg("W_c"), py::arg("W_co"), py::arg("b"),
      py::arg("lexicalized"));
  bind_kernel<TopDownLevels, Tensor, Tensor, Tensor, Tensor, Tensor>(
      m, "TopDownLevels", "Teng & Zhang's top-down cell's level math for the compiled level loop (one parent)",
      py::arg("W_x"), py::arg("b"), py::arg("W_h"), py::arg("W_c"), py::arg("W_co"));
});

}  // namespace
}  // namespace graphtree
