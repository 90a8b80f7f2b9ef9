// One level of a peephole Tree-LSTM with N ordered predecessors, written once (PeepholeLevels::step) for the
// three cells of this form: the S-LSTM (Zhu et al. 2015, eqs 1-7; N = 2 children), Teng & Zhang's lexicalized
// bottom-up cell (eqs 4, 10-11; any N, and N = 0 at its leaves) and their top-down cell (eqs 13-14; N = 1, the
// parent). Its elementwise parts are each fused into one pass over the level's rows. The output gate peeks at the
// new cell through W_co, a matrix product in the middle of the level, so forward and backward each come in two
// halves around it.
//
// pre rows (d wide each): the pre-activations of i, f_1 .. f_N, g, o from everything but the children's cells;
// c_terms rows: the peepholes on the children's cells, for i, f_1 .. f_N (none at a level without predecessors).
// "activated" rows: i, f_1 .. f_N, tanh(g).

#include "leaf_unit.h"
#include "kernels.h"

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
  auto grad_cj = at::empty({n, N, d}, activated.options());
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

struct PeepholeSaved {
  std::vector<Block> blocks;  // the level's rows by the weight set that multiplies them
  struct Step {
    Tensor activated, c, o, tanh_c, c_children, h_children;  // h_children: undefined without predecessors
  } step;                 // what the step's backward needs (below)
  Tensor grad_pre, grad_o;  // the step's gradients, kept for the weights' (peephole_grads)
  LeafUnit::Saved leaf;     // an S-LSTM leaf unit's
};

// The weights on a node's predecessors' states and on its new cell, W_h [(N + 3) d, N d], W_c [(N + 1) d, N d]
// and W_co [d, d].
struct Weights {
  Weight W_h, W_c, W_co;
};

// The level step of the three cells: from the pre-activations that do not depend on the predecessors' states,
// gates i, f_1 .. f_N, g, o plus W_h [h_1 .. h_N], the peepholes W_c [c_1 .. c_N] on i and the f_k, and W_co c_t
// on o. Bottom-up, one weight set multiplies every row; top-down, each position under the parent has its own,
// and a level's rows come grouped by position (blocks_of), so each set multiplies one contiguous block.
class PeepholeLevels : public Levels<PeepholeSaved> {
 protected:
  PeepholeLevels(const char* name, at::TensorOptions options) : Levels(name, options) {}

  void add_weights(const Tensor& W_h, const Tensor& W_c, const Tensor& W_co) {
    sets_.push_back({with_transposed(W_h), with_transposed(W_c), with_transposed(W_co)});
  }

  // The level's rows by weight set: every row set 0's unless the kernel groups them.
  virtual std::vector<Block> blocks_of(const Level& level) const { return {{0, 0, level.rows()}}; }

  void start(const std::vector<Level>& levels) override {
    for (const auto& level : levels) saved(level).blocks = blocks_of(level);
    grad_o_ = save_ && !levels.empty() ? fresh(levels.back().end, d_) : Tensor();  // every row's, by row
  }

  // Writes the level's h and c from `pre` ([n, (N + 3) d], the pre-activations from everything but the
  // predecessors' states; the children's terms are added into it) and the gathered predecessor states (none at a
  // level without: zero cells, as many as pre's width has forget gates).
  void step(const Level& level, const Tensor& pre, const Tensors& children, Tensors& buffers, bool save) {
    auto& s = saved(level);
    const int64_t n = level.rows(), d = d_, N = pre.size(1) / d - 3;
    auto h = rows_of(buffers[0], level), c = rows_of(buffers[1], level);
    Tensor c_terms, h_children, c_children = level.width == 0 ? at::zeros({n, N, d}, options_)
                                                               : children[1].view({n, N, d});
    if (level.width > 0) {
      h_children = children[0].view({n, N * d});
      auto c_flat = children[1].view({n, N * d});
      c_terms = fresh(n, (N + 1) * d);
      each_block(
          s.blocks, [&](const Block& b) { rows_of(pre, b).addmm_(rows_of(h_children, b), set(b).W_h.t); },
          [&](const Block& b) { mm_into(rows_of(c_terms, b), rows_of(c_flat, b), set(b).W_c.t); });
    }
    auto activated = fresh(n, (N + 2) * d), co = fresh(n, d), o = fresh(n, d), tanh_c = fresh(n, d);
    cell_into(pre, c_terms, c_children, activated, c);
    // o peeks at the new cell: W_co c_t
    each_block(s.blocks, [&](const Block& b) { mm_into(rows_of(co, b), rows_of(c, b), set(b).W_co.t); });
    output_into(pre, co, c, o, tanh_c, h);
    if (save) s.step = {activated, c, o, tanh_c, c_children, h_children};
  }

  // The step's derivatives: writes grad_pre (pre's gradient; its first (N + 1) d columns are also that of the
  // peephole terms) and the output gate's pre-activation gradient, keeps both for peephole_grads, and returns the
  // predecessors' state gradients (none at a level without).
  Tensors step_backward(const Level& level, const Tensors& grad_states, const Tensor& grad_pre) {
    auto& saved_level = saved(level);
    const auto& blocks = saved_level.blocks;
    const auto& s = saved_level.step;
    const int64_t n = level.rows(), d = d_, N = s.c_children.size(1);
    const auto &grad_h = grad_states[0], &grad_c = grad_states[1];
    auto grad_o = rows_of(grad_o_, level);
    saved_level.grad_pre = grad_pre;
    saved_level.grad_o = grad_o;
    output_backward_into(grad_h, s.o, s.tanh_c, grad_o);
    auto grad_c_from_o = fresh(n, d);
    each_block(blocks, [&](const Block& b) { mm_into(rows_of(grad_c_from_o, b), rows_of(grad_o, b), set(b).W_co.w); });
    // Through c_t = sum_k f_k c_k + ... alone; the peepholes' part added below.
    auto grad_c_children = cell_backward_into(grad_c, grad_h, s.o, s.tanh_c, grad_c_from_o, grad_o, s.activated,
                                              s.c_children, grad_pre).view({n, N * d});
    if (level.width == 0) return {};
    auto grad_h_children = fresh(n, N * d), grad_if = grad_pre.narrow(1, 0, (N + 1) * d);
    each_block(
        blocks, [&](const Block& b) { mm_into(rows_of(grad_h_children, b), rows_of(grad_pre, b), set(b).W_h.w); },
        [&](const Block& b) { rows_of(grad_c_children, b).addmm_(rows_of(grad_if, b), set(b).W_c.w); });
    return {grad_h_children.view({-1, d}), grad_c_children.view({-1, d})};
  }

  // The gradients of W_h, W_c and W_co, each [sets, ...]: every level's rows of a weight set gathered so that
  // each gradient is one product (GradientRows: one block of rows where they follow one another, as bottom-up).
  // A level without predecessors has gradients for W_co alone.
  Tensors peephole_grads() const {
    const int64_t sets = static_cast<int64_t>(sets_.size());
    std::vector<GradientRows> rows(3 * sets);  // W_h, W_c, W_co of each set
    for (const auto& s : all_saved()) {
      if (!s.grad_pre.defined()) continue;
      for (const auto& b : s.blocks) {
        auto* set_rows = &rows[3 * b.position];
        set_rows[2].add(rows_of(s.grad_o, b), rows_of(s.step.c, b));
        if (!s.step.h_children.defined()) continue;
        auto grad_pre = rows_of(s.grad_pre, b), c_children = s.step.c_children.view({s.grad_pre.size(0), -1});
        set_rows[0].add(grad_pre, rows_of(s.step.h_children, b));
        set_rows[1].add(grad_pre.narrow(1, 0, c_children.size(1) + d_), rows_of(c_children, b));
      }
    }
    Tensors grads;
    for (int64_t k = 0; k < 3; ++k) {
      const auto& w = k == 0 ? sets_[0].W_h.w : (k == 1 ? sets_[0].W_c.w : sets_[0].W_co.w);
      grads.push_back(at::zeros({sets, w.size(0), w.size(1)}, options_));
      for (int64_t p = 0; p < sets; ++p) rows[3 * p + k].add_into(grads[k][p]);
    }
    return grads;
  }

  const Weights& set(const Block& block) const { return sets_[block.position]; }

  std::vector<Weights> sets_;
  int64_t d_ = 0;
  Tensor grad_o_;
};

// The internal levels of the S-LSTM and of the lexicalized cell, bottom-up (eqs 1-7 of Zhu et al. 2015; eqs 10-11
// of Teng & Zhang 2017): the step from b (and the lexicalized cell's W_x x) over N children.
class BottomUpLevels : public PeepholeLevels {
 protected:
  BottomUpLevels(const char* name, Tensor W_h, Tensor W_c, Tensor W_co, Tensor b)
      : PeepholeLevels(name, W_h.options()), b_(b) {
    check_all({&b_});
    d_ = W_co.size(0);
    N_ = W_h.size(1) / d_;
    TORCH_CHECK(N_ >= 1 && W_h.size(1) == N_ * d_ && W_h.size(0) == (N_ + 3) * d_ && W_c.size(0) == (N_ + 1) * d_ &&
                    W_c.size(1) == N_ * d_ && b_.numel() == (N_ + 3) * d_,
                name, ": weight shapes do not agree");
    expect(N_, {d_, d_});
    add_weights(W_h, W_c, W_co);
  }

  void start(const std::vector<Level>& levels) override {
    PeepholeLevels::start(levels);
    grad_gates_ = save_ ? internal((N_ + 3) * d_) : Tensor();
  }

  // lexical: the level's W_x x (i, f, g, o), or undefined.
  void forward_internal(const Level& level, const Tensors& children, Tensors& buffers,
                        bool save, const Tensor& lexical) {
    auto pre = repeated_rows(b_, 1, level.rows());  // a copy of b for every row, written in place
    if (lexical.defined()) add_input_terms(pre, lexical, N_, d_, 1);  // W_x x: i, f, g, o
    step(level, pre, children, buffers, save);
  }

  // grad_lexical: where the gradient of the level's W_x x goes, or undefined.
  Tensors backward_internal(const Level& level, const Tensors& grad_states, const Tensor& grad_lexical) {
    auto grad_gates = internal_rows(grad_gates_, level);
    auto grads = step_backward(level, grad_states, grad_gates);
    if (grad_lexical.defined()) add_input_terms_grad(grad_gates, grad_lexical, N_, d_, 1);
    return grads;
  }

  // The gradients of W_h, W_c, W_co and b.
  Tensors internal_grads() const {
    auto grads = peephole_grads();
    return {grads[0][0], grads[1][0], grads[2][0], bias_grad(b_, grad_gates_)};
  }

  Tensor b_;
  int64_t N_ = 0;
  Tensor grad_gates_;
};

// The S-LSTM (graphtree/nn/slstm.py, Zhu et al. 2015, eqs 1-7) as a LevelKernel. Leaves: h = x, c = 0
// ("embedding"), or the leaf unit c = W^(c) x + b^(c), o = sigmoid(W^(o) x + b^(o)) ("lstm": leaf_weight given).
class SLSTMLevels : public BottomUpLevels {
 public:
  SLSTMLevels(Tensor W_h, Tensor W_c, Tensor W_co, Tensor b,
              std::optional<Tensor> leaf_weight, std::optional<Tensor> leaf_bias)
      : BottomUpLevels("SLSTMLevels", W_h, W_c, W_co, b) {
    TORCH_CHECK(N_ == 2, "SLSTMLevels: weight shapes do not agree");
    if (leaf_weight && leaf_weight->defined()) {
      TORCH_CHECK(leaf_bias && leaf_bias->defined(), "SLSTMLevels: leaf_weight without leaf_bias");
      leaf_ = LeafUnit(*leaf_weight, *leaf_bias);
    }
  }

  void start(const std::vector<Level>& levels) override {
    BottomUpLevels::start(levels);
    leaf_.reset();
  }

  void forward(const Level& level, const Tensors& inputs,
               const Tensors& children, Tensors& buffers, bool save) override {
    if (level.width > 0) return forward_internal(level, children, buffers, save, {});
    if (!leaf_.defined()) return copy_input(level, inputs, buffers);  // h = x, c = 0 (the buffers start at zero)
    saved(level).leaf = leaf_.forward(inputs[0], rows_of(buffers[0], level), rows_of(buffers[1], level), save);
  }

  Tensors backward(const Level& level, const Tensors& grad_states, Tensors& grad_inputs) override {
    if (level.width > 0) return backward_internal(level, grad_states, {});
    if (!leaf_.defined()) return pass_gradient_to_input(grad_states, grad_inputs);
    leaf_.backward(saved(level).leaf, grad_states[0], grad_states[1], input_grad(grad_inputs));
    return {};
  }

  Tensors param_grads() override { return leaf_.with_param_grads(internal_grads()); }

 private:
  LeafUnit leaf_;  // undefined for "embedding" leaves
};

// Teng & Zhang's lexicalized bottom-up cell (graphtree/nn/lexicalized.py, eqs 4, 10-11; ConTree with
// lexicalized=false) as a LevelKernel. Internal nodes: BottomUpLevels, plus (lexicalized) W_x x with its one
// W_xf block feeding every f_k. Leaves: the step with no children (N = 0), gates i, g, o from W_x x and the
// matching rows of b.
class LexicalizedLevels : public BottomUpLevels {
 public:
  LexicalizedLevels(Tensor W_x, Tensor W_h, Tensor W_c, Tensor W_co, Tensor b, bool lexicalized)
      : BottomUpLevels("LexicalizedLevels", W_h, W_c, W_co, b), lexicalized_(lexicalized) {
    check_all({&W_x});
    const int64_t d = d_, N = N_;
    TORCH_CHECK(W_x.size(0) == (lexicalized ? 4 : 3) * d, "LexicalizedLevels: weight shapes do not agree");
    // The leaves' rows i, g, o of W_x and b (a leaf has no forget gate).
    W_x_ = lexicalized ? with_transposed(W_x) : Weight{W_x, Tensor()};
    W_igo_ = lexicalized ? with_transposed(at::cat({W_x.narrow(0, 0, d), W_x.narrow(0, 2 * d, 2 * d)}))
                         : with_transposed(W_x);
    b_igo_ = at::cat({b_.narrow(0, 0, d), b_.narrow(0, (N + 1) * d, 2 * d)});
  }

  void start(const std::vector<Level>& levels) override {
    BottomUpLevels::start(levels);
    leaf_x_.clear();
    if (!lexicalized_) return;
    // The inner rows are one block, whose W_x x is one product here rather than one per level.
    x_terms_ = at::mm(internal_block(input(0)), W_x_.t);
    grad_x_terms_ = save_ ? at::zeros({internal_, 4 * d_}, options_) : Tensor();  // added into
  }

  void forward(const Level& level, const Tensors& inputs,
               const Tensors& children, Tensors& buffers, bool save) override {
    if (level.width > 0) return forward_internal(level, children, buffers, save, lexical_rows(x_terms_, level));
    step(level, at::addmm(b_igo_, inputs[0], W_igo_.t), children, buffers, save);  // i, g, o
  }

  Tensors backward(const Level& level, const Tensors& grad_states, Tensors& grad_inputs) override {
    if (level.width > 0) return backward_internal(level, grad_states, lexical_rows(grad_x_terms_, level));
    auto grad_igo = fresh(level.rows(), 3 * d_);
    step_backward(level, grad_states, grad_igo);
    leaf_x_.add(grad_igo, rows_of(input(0), level));
    if (auto* grad_x = input_grad(grad_inputs)) grad_x->addmm_(grad_igo, W_igo_.w);
    return {};
  }

  void finish_backward(Tensors& grad_inputs) override {
    auto* grad_x = input_grad(grad_inputs);
    if (!lexicalized_ || !grad_x_terms_.defined() || grad_x == nullptr) return;
    internal_block(*grad_x).addmm_(grad_x_terms_, W_x_.w);
  }

  Tensors param_grads() override {
    const int64_t d = d_, N = N_;
    auto grads = internal_grads();  // W_h, W_c, W_co, b
    auto& grad_b = grads[3];
    auto grad_W_x = weight_grad(W_x_.w, grad_x_terms_, lexicalized_ ? internal_block(input(0)) : Tensor());
    // The leaves' share: into rows i and g, o of b and W_x (g's row given); W_xf gets nothing from the leaves.
    auto add_igo = [d](const Tensor& grad, const Tensor& igo, int64_t g) {
      grad.narrow(0, 0, d) += igo.narrow(0, 0, d);
      grad.narrow(0, g, 2 * d) += igo.narrow(0, d, 2 * d);
    };
    if (auto grad_igo = leaf_x_.grads(); grad_igo.defined()) {
      add_igo(grad_b, grad_igo.sum(0), (N + 1) * d);
      add_igo(grad_W_x, at::mm(grad_igo.t(), leaf_x_.rows()), lexicalized_ ? 2 * d : d);
    }
    return {grad_W_x, grads[0], grads[1], grads[2], grad_b};
  }

 private:
  // The level's rows of a tensor of the inner rows, or undefined where not lexicalized.
  Tensor lexical_rows(const Tensor& t, const Level& level) const {
    return lexicalized_ ? internal_rows(t, level) : Tensor();
  }

  Weight W_x_, W_igo_;  // W_x_.t: lexicalized only (the inner rows' W_x x)
  Tensor b_igo_;
  bool lexicalized_;
  GradientRows leaf_x_;            // the leaves' gate gradients (i, g, o) with their inputs
  Tensor x_terms_, grad_x_terms_;  // lexicalized: the inner rows' W_x x and its gradient
};

// Teng & Zhang's top-down cell (graphtree/nn/top_down.py, eqs 13-14) as a LevelKernel, for passes in which
// every node has at most one parent (trees and forests; a node with several parents takes the Python loop): the
// step over N = 1 predecessor, the parent, with a weight set per position under it (LevelPlan.position_groups
// groups a level's rows so). The roots (level 0) use position 0's set and a zero predecessor. Gate rows i, f, g,
// o; W_c feeds i and f.
class TopDownLevels : public PeepholeLevels {
 public:
  // W_x: [P, 4 d, D] and b: [P, 4 d], one input set per position (P = N) or one shared (P = 1); W_h: [N, 4 d, d],
  // W_c: [N, 2 d, d], W_co: [N, d, d].
  TopDownLevels(Tensor W_x, Tensor b, Tensor W_h, Tensor W_c, Tensor W_co)
      : PeepholeLevels("TopDownLevels", W_h.options()), b_(b) {
    check_all({&W_x, &b_, &W_h, &W_c, &W_co});
    N_ = W_h.size(0);
    d_ = W_co.size(1);
    const int64_t P = W_x.size(0), d = d_;
    TORCH_CHECK((P == N_ || P == 1) && W_x.size(1) == 4 * d && b_.size(0) == P && b_.size(1) == 4 * d &&
                    W_h.size(1) == 4 * d && W_h.size(2) == d && W_c.size(0) == N_ && W_c.size(1) == 2 * d &&
                    W_c.size(2) == d && W_co.size(0) == N_ && W_co.size(2) == d,
                "TopDownLevels: weight shapes do not agree");
    expect(1);  // one parent a node (a node with several takes the Python loop)
    for (int64_t s = 0; s < P; ++s) W_x_.push_back(with_transposed(W_x[s]));
    for (int64_t p = 0; p < N_; ++p) add_weights(W_h[p], W_c[p], W_co[p]);
  }

  void start(const std::vector<Level>& levels) override {
    PeepholeLevels::start(levels);
    const int64_t P = b_.size(0);
    const auto& x = input(0);
    // W_x x + b of every node, one product per input set over all levels (its rows gathered where a set has some
    // rows but not all, as where the sets differ by position) rather than one per level and position.
    std::vector<std::vector<int64_t>> rows(P);
    for (const auto& level : levels) {
      for (const auto& [p, begin, count] : saved(level).blocks) {
        for (int64_t r = 0; r < count; ++r) rows[P == 1 ? 0 : p].push_back(level.begin + begin + r);
      }
    }
    x_terms_ = fresh(x.size(0), 4 * d_);
    set_rows_.assign(P, Tensor());
    for (int64_t s = 0; s < P; ++s) {
      if (static_cast<int64_t>(rows[s].size()) == x.size(0)) {
        at::addmm_out(x_terms_, b_[s], x, W_x_[s].t);
      } else {
        set_rows_[s] = index_tensor(rows[s]);
        x_terms_.index_copy_(0, set_rows_[s], at::addmm(b_[s], of_set(x, s), W_x_[s].t));
      }
    }
    grad_a_ = save_ ? fresh(x.size(0), 4 * d_) : Tensor();
  }

  void forward(const Level& level, const Tensors& inputs,
               const Tensors& children, Tensors& buffers, bool save) override {
    step(level, rows_of(x_terms_, level), children, buffers, save);  // W_x x + b from start(), the parent's added
  }

  Tensors backward(const Level& level, const Tensors& grad_states, Tensors& grad_inputs) override {
    // grad_a_'s rows: finish_backward() and param_grads() multiply every level's rows at once.
    return step_backward(level, grad_states, rows_of(grad_a_, level));
  }

  void finish_backward(Tensors& grad_inputs) override {
    auto* grad_x = input_grad(grad_inputs);
    for (int64_t s = 0; s < b_.size(0) && grad_x != nullptr; ++s) {
      if (set_rows_[s].defined()) {
        grad_x->index_add_(0, set_rows_[s], at::mm(of_set(grad_a_, s), W_x_[s].w));
      } else {
        grad_x->addmm_(grad_a_, W_x_[s].w);
      }
    }
  }

  Tensors param_grads() override {
    const int64_t P = b_.size(0);
    auto grad_W_x = at::zeros({P, 4 * d_, input(0).size(1)}, options_), grad_b = at::zeros_like(b_);
    for (int64_t s = 0; s < P && grad_a_.defined(); ++s) {
      auto grad_a = of_set(grad_a_, s);
      grad_W_x[s].addmm_(grad_a.t(), of_set(input(0), s));
      grad_b[s] += grad_a.sum(0);
    }
    auto grads = peephole_grads();  // W_h, W_c, W_co: [N, ...]
    return {grad_W_x, grad_b, grads[0], grads[1], grads[2]};
  }

 private:
  // t's rows that input set s multiplies: those of set_rows_[s], or all where it has none.
  Tensor of_set(const Tensor& t, int64_t s) const {
    return set_rows_[s].defined() ? t.index_select(0, set_rows_[s]) : t;
  }

  // The roots are all position 0; below, one block per position.
  std::vector<Block> blocks_of(const Level& level) const override {
    if (level.width == 0) return {{0, 0, level.rows()}};
    TORCH_CHECK(level.position_groups.size() >= 2, "TopDownLevels: the plan has no position groups");
    auto blocks = position_blocks(level);
    int64_t rows = 0;
    for (const auto& block : blocks) {
      TORCH_CHECK(block.position >= 0 && block.position < N_, "TopDownLevels: rows at position ", block.position,
                  " of a model with ", N_, " positions (-1: several)");
      rows += block.count;
    }
    TORCH_CHECK(rows == level.rows(), "TopDownLevels: a node below the roots without a parent");
    return blocks;
  }

  std::vector<Weight> W_x_;  // one per input set
  Tensor b_;
  Tensor x_terms_, grad_a_;     // the level-sorted inputs' W_x x + b, the gates' gradients
  Tensors set_rows_;  // each input set's rows, undefined for a set that every row uses
  int64_t N_ = 0;
};

}  // namespace

KernelPtr slstm_levels(Tensor W_h, Tensor W_c, Tensor W_co, Tensor b, std::optional<Tensor> leaf_weight,
                       std::optional<Tensor> leaf_bias) {
  return std::make_shared<SLSTMLevels>(W_h, W_c, W_co, b, leaf_weight, leaf_bias);
}

KernelPtr lexicalized_levels(Tensor W_x, Tensor W_h, Tensor W_c, Tensor W_co, Tensor b, bool lexicalized) {
  return std::make_shared<LexicalizedLevels>(W_x, W_h, W_c, W_co, b, lexicalized);
}

KernelPtr top_down_levels(Tensor W_x, Tensor b, Tensor W_h, Tensor W_c, Tensor W_co) {
  return std::make_shared<TopDownLevels>(W_x, b, W_h, W_c, W_co);
}

}  // namespace graphtree
