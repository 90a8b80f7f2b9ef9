// The elementwise parts of one level of the LSTM-RNN (graphtree/nn/lstm_rnn.py, Le & Zuidema 2015, sections 3-4),
// each fused into one pass over the level's rows. A parent reads its two children's m, their outputs and memories
// already projected by every map a parent applies (eight d-wide blocks: W_i1, W_f1, W_i2, W_f2, W_c1, W_o1, W_c2,
// W_o2). The output gate peeks at the parent's new memory through W_co, a matrix product in the middle of the
// level, so forward and backward each come in two halves around it.
//
// g is the composition's activation: 0 tanh, 1 softsign, 2 sigmoid (the gates are always logistic). Its
// derivative is written in terms of its output y, which is all the backward pass keeps.

#include <vector>

#include "common.h"
#include "level_loop.h"

using graphtree::check_all;
using graphtree::for_rows;
using graphtree::sigmoid;
using graphtree::tanh_of;

namespace {

inline float activate(float v, int64_t kind) {
  if (kind == 0) return tanh_of(v);
  if (kind == 1) return v / (1.f + std::fabs(v));
  return sigmoid(v);
}

inline float slope(float y, int64_t kind) {  // g'(v) as a function of y = g(v)
  if (kind == 0) return 1.f - y * y;
  if (kind == 1) return (1.f - std::fabs(y)) * (1.f - std::fabs(y));
  return y * (1.f - y);
}

}  // namespace

// Gates (i_k, f_k) of both children, g(a) with a = W_c1 x i_1 + W_c2 y i_2 + b_c, and c_p = f_1 c_x + f_2 c_y + g(a).
// m_children [n, 2, 8d], c_children [n, 2, d], b [4d] (b_i, b_f, b_c, b_o). Returns gates [n, 2, 2d], g(a), c_p.
// Each kernel comes twice: its *_into form writes into given contiguous tensors (the compiled level loop passes
// rows of its state buffers), the other allocates them (the Python level loop's bindings).
static void lstm_rnn_level_cell_into(const torch::Tensor& m_children, const torch::Tensor& c_children,
                                     const torch::Tensor& b, int64_t kind, const torch::Tensor& gates,
                                     const torch::Tensor& g_a, const torch::Tensor& c) {
  const int64_t n = c_children.size(0), d = c_children.size(2);
  const float *M = m_children.data_ptr<float>(), *Cj = c_children.data_ptr<float>(), *B = b.data_ptr<float>();
  float *G = gates.data_ptr<float>(), *Ga = g_a.data_ptr<float>(), *C = c.data_ptr<float>();
  for_rows(n, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float *mx = M + r * 16 * d, *my = mx + 8 * d, *cx = Cj + r * 2 * d, *cy = cx + d;
      float *gx = G + r * 4 * d, *gy = gx + 2 * d, *ga = Ga + r * d, *cr = C + r * d;
      // Child k's (i_k, f_k): its own W_i1, W_f1 blocks plus the sibling's W_i2, W_f2 blocks.
#pragma omp simd
      for (int64_t k = 0; k < 2 * d; ++k) {
        gx[k] = sigmoid(mx[k] + my[2 * d + k] + B[k]);
        gy[k] = sigmoid(my[k] + mx[2 * d + k] + B[k]);
      }
      const float *Wc_x = mx + 4 * d, *Wc_y = my + 6 * d;  // W_c1 x, W_c2 y
#pragma omp simd
      for (int64_t k = 0; k < d; ++k) {
        ga[k] = activate(Wc_x[k] * gx[k] + Wc_y[k] * gy[k] + B[2 * d + k], kind);
        cr[k] = gx[d + k] * cx[k] + gy[d + k] * cy[k] + ga[k];
      }
    }
  });
}

// o = sigmoid(W_o1 x + W_o2 y + W_co c_p + b_o) and p = o g(c_p), given cell_terms = W_cell c_p [n, 5d] (W_co last).
// Returns o, g(c_p) and p, each [n, d].
static void lstm_rnn_level_output_into(const torch::Tensor& m_children, const torch::Tensor& cell_terms,
                                       const torch::Tensor& c, const torch::Tensor& b, int64_t kind,
                                       const torch::Tensor& o, const torch::Tensor& g_c, const torch::Tensor& p) {
  const int64_t n = c.size(0), d = c.size(1);
  const float *M = m_children.data_ptr<float>(), *Ct = cell_terms.data_ptr<float>(), *C = c.data_ptr<float>();
  const float* B = b.data_ptr<float>();
  float *O = o.data_ptr<float>(), *Gc = g_c.data_ptr<float>(), *P = p.data_ptr<float>();
  for_rows(n, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float *Wo_x = M + r * 16 * d + 5 * d, *Wo_y = M + r * 16 * d + 15 * d;  // W_o1 x, W_o2 y
      const float *co = Ct + r * 5 * d + 4 * d, *cr = C + r * d;
      float *orow = O + r * d, *gc = Gc + r * d, *pr = P + r * d;
#pragma omp simd
      for (int64_t k = 0; k < d; ++k) {
        orow[k] = sigmoid(Wo_x[k] + Wo_y[k] + co[k] + B[3 * d + k]);
        gc[k] = activate(cr[k], kind);
        pr[k] = orow[k] * gc[k];
      }
    }
  });
}

// The gradient reaching W_cell c_p: the peephole blocks of grad_m (first 4d columns) and the output gate's
// pre-activation gradient grad_p g(c_p) o (1 - o). grad_p already includes W_inner^T grad_m. Returns [n, 5d].
static void lstm_rnn_level_output_backward_into(const torch::Tensor& grad_m, const torch::Tensor& grad_p,
                                                const torch::Tensor& o, const torch::Tensor& g_c,
                                                const torch::Tensor& grad_cell) {
  const int64_t n = o.size(0), d = o.size(1);
  const float *gM = grad_m.data_ptr<float>(), *gP = grad_p.data_ptr<float>(), *O = o.data_ptr<float>();
  const float* Gc = g_c.data_ptr<float>();
  float* gCell = grad_cell.data_ptr<float>();
  for_rows(n, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float *gm = gM + r * 8 * d, *gp = gP + r * d, *orow = O + r * d, *gc = Gc + r * d;
      float* out = gCell + r * 5 * d;
      std::memcpy(out, gm, sizeof(float) * 4 * d);
#pragma omp simd
      for (int64_t k = 0; k < d; ++k) out[4 * d + k] = gp[k] * gc[k] * orow[k] * (1.f - orow[k]);
    }
  });
}

// The rest of the level's derivatives. grad_c_from_cell: W_cell^T grad_cell. Returns the bias rows
// [n, 4d] (their column sums are b's gradient), the children's m gradients [n, 2, 8d] and their memories'
// gradients [n, 2, d]. The children's outputs reach the parent only through their m.
static void lstm_rnn_level_cell_backward_into(const torch::Tensor& grad_c, const torch::Tensor& grad_c_from_cell,
                                              const torch::Tensor& grad_p, const torch::Tensor& grad_cell,
                                              const torch::Tensor& o, const torch::Tensor& g_c,
                                              const torch::Tensor& g_a, const torch::Tensor& gates,
                                              const torch::Tensor& m_children, const torch::Tensor& c_children,
                                              int64_t kind, const torch::Tensor& grad_b, const torch::Tensor& grad_m,
                                              const torch::Tensor& grad_cj) {
  const int64_t n = c_children.size(0), d = c_children.size(2);
  const float *gCin = grad_c.data_ptr<float>(), *gCc = grad_c_from_cell.data_ptr<float>();
  const float *gP = grad_p.data_ptr<float>(), *gCell = grad_cell.data_ptr<float>(), *O = o.data_ptr<float>();
  const float *Gc = g_c.data_ptr<float>(), *Ga = g_a.data_ptr<float>(), *G = gates.data_ptr<float>();
  const float *M = m_children.data_ptr<float>(), *Cj = c_children.data_ptr<float>();
  float *gB = grad_b.data_ptr<float>(), *gM = grad_m.data_ptr<float>(), *gCj = grad_cj.data_ptr<float>();
  for_rows(n, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float *gc_in = gCin + r * d, *gcc = gCc + r * d, *gp = gP + r * d, *go = gCell + r * 5 * d + 4 * d;
      const float *orow = O + r * d, *gcr = Gc + r * d, *ga = Ga + r * d;
      const float *gx = G + r * 4 * d, *gy = gx + 2 * d;
      const float *Wc_x = M + r * 16 * d + 4 * d, *Wc_y = M + r * 16 * d + 14 * d;
      const float *cx = Cj + r * 2 * d, *cy = cx + d;
      float *gb = gB + r * 4 * d, *gmx = gM + r * 16 * d, *gmy = gmx + 8 * d, *gcx = gCj + r * 2 * d, *gcy = gcx + d;
#pragma omp simd
      for (int64_t k = 0; k < d; ++k) {
        const float gc = gc_in[k] + gcc[k] + gp[k] * orow[k] * slope(gcr[k], kind);  // dL/dc_p
        const float grad_a = gc * slope(ga[k], kind);
        const float ix = gx[k], fx = gx[d + k], iy = gy[k], fy = gy[d + k];
        const float gix = grad_a * Wc_x[k] * ix * (1.f - ix), gfx = gc * cx[k] * fx * (1.f - fx);
        const float giy = grad_a * Wc_y[k] * iy * (1.f - iy), gfy = gc * cy[k] * fy * (1.f - fy);
        gb[k] = gix + giy;
        gb[d + k] = gfx + gfy;
        gb[2 * d + k] = grad_a;
        gb[3 * d + k] = go[k];
        // Child x's first blocks feed its own gates and its second blocks y's; likewise for y.
        gmx[k] = gix;
        gmx[d + k] = gfx;
        gmx[2 * d + k] = giy;
        gmx[3 * d + k] = gfy;
        gmy[k] = giy;
        gmy[d + k] = gfy;
        gmy[2 * d + k] = gix;
        gmy[3 * d + k] = gfx;
        gmx[4 * d + k] = grad_a * ix;  // W_c1 x
        gmx[5 * d + k] = go[k];        // W_o1 x
        gmy[6 * d + k] = grad_a * iy;  // W_c2 y
        gmy[7 * d + k] = go[k];        // W_o2 y
        gmx[6 * d + k] = gmx[7 * d + k] = 0.f;  // a first child's W_c2, W_o2 blocks are not read
        gmy[4 * d + k] = gmy[5 * d + k] = 0.f;  // nor a second child's W_c1, W_o1
        gcx[k] = gc * fx;
        gcy[k] = gc * fy;
      }
    }
  });
}

namespace {

// A level's rows by the blocks of m their parents read (the level is grouped by position, Level::position_groups):
// [0, first) are child 0 of their parents, which read W_i1 .. W_o1 (the first 6d columns); [first, second)
// child 1, which read W_i1 .. W_f2 and W_c2, W_o2 (the first 4d and the last 2d); [second, all) every block (a
// DAG node at both positions, or a level that is not grouped); [all, n) have no parent and need no m.
struct MRows {
  int64_t first, second, all;
};

MRows m_rows(const graphtree::Level& level) {
  const int64_t n = level.end - level.begin;
  const auto& groups = level.position_groups;
  if (groups.size() < 2) return {0, 0, n};
  const size_t widest = groups.size() - 2;  // the groups: each position, then several, then no parent
  TORCH_CHECK(widest <= 2, "LSTMRNNLevels: a child at position ", widest - 1, " of a binary cell");
  const int64_t first = widest >= 1 ? groups[0] : 0, second = first + (widest >= 2 ? groups[1] : 0);
  return {first, second, second + groups[widest]};
}

torch::Tensor rows(const torch::Tensor& t, int64_t begin, int64_t end) { return t.narrow(0, begin, end - begin); }

// m = u W^T (W_t = W^T, [d, 8d]) on the blocks each row's parent reads; the other blocks are left as they are.
// mm_out writes into the strided column blocks directly (BLAS's leading dimension).
void project_read_blocks(const torch::Tensor& m, const torch::Tensor& u, const torch::Tensor& W_t, const MRows& r,
                         int64_t d) {
  auto product = [](torch::Tensor out, const torch::Tensor& a, const torch::Tensor& b) { at::mm_out(out, a, b); };
  std::vector<std::function<void()>> parts;  // the row groups' products write different rows
  if (r.first > 0) {
    parts.push_back([&] {
      product(rows(m, 0, r.first).narrow(1, 0, 6 * d), rows(u, 0, r.first), W_t.narrow(1, 0, 6 * d));
    });
  }
  if (r.second > r.first) {
    parts.push_back([&] {
      auto m_1 = rows(m, r.first, r.second), u_1 = rows(u, r.first, r.second);
      product(m_1.narrow(1, 0, 4 * d), u_1, W_t.narrow(1, 0, 4 * d));
      product(m_1.narrow(1, 6 * d, 2 * d), u_1, W_t.narrow(1, 6 * d, 2 * d));
    });
  }
  if (r.all > r.second) parts.push_back([&] { product(rows(m, r.second, r.all), rows(u, r.second, r.all), W_t); });
  graphtree::side_by_side(parts);
}

// grad_u += grad_m W on the blocks each row's parent read (grad_m is zero on the others).
void add_read_blocks_back(const torch::Tensor& grad_u, const torch::Tensor& grad_m, const torch::Tensor& W,
                          const MRows& r, int64_t d) {
  std::vector<std::function<void()>> parts;  // the row groups' products write different rows
  if (r.first > 0) {
    parts.push_back([&] {
      rows(grad_u, 0, r.first).addmm_(rows(grad_m, 0, r.first).narrow(1, 0, 6 * d), W.narrow(0, 0, 6 * d));
    });
  }
  if (r.second > r.first) {
    parts.push_back([&] {
      auto grad_u_1 = rows(grad_u, r.first, r.second), grad_m_1 = rows(grad_m, r.first, r.second);
      grad_u_1.addmm_(grad_m_1.narrow(1, 0, 4 * d), W.narrow(0, 0, 4 * d));
      grad_u_1.addmm_(grad_m_1.narrow(1, 6 * d, 2 * d), W.narrow(0, 6 * d, 2 * d));
    });
  }
  if (r.all > r.second) {
    parts.push_back([&] { rows(grad_u, r.second, r.all).addmm_(rows(grad_m, r.second, r.all), W); });
  }
  graphtree::side_by_side(parts);
}

// The LSTM-RNN (graphtree/nn/lstm_rnn.py, Le & Zuidema 2015) as a LevelKernel for the engine's compiled level
// loop: its update and the update's derivatives, in C++, on the kernels above. States: p, c_p and the internal
// m, of which each node computes only the blocks its parents read (MRows). The level's p and c_p are written
// straight into the state buffers; the weight gradients are products over all inner rows at once, read from
// those buffers and from per-kernel tensors that each level fills in place (no concatenation).
class LSTMRNNLevels : public graphtree::LevelKernel {
 public:
  LSTMRNNLevels(torch::Tensor W_leaf, torch::Tensor W_inner, torch::Tensor W_cell, torch::Tensor b, int64_t kind)
      : W_leaf_(W_leaf.contiguous()), W_inner_(W_inner.contiguous()), W_cell_(W_cell.contiguous()),
        b_(b.contiguous()), kind_(kind) {
    for (auto* t : {&W_leaf_, &W_inner_, &W_cell_, &b_}) graphtree::check(*t, "every weight");
    d_ = W_inner_.size(1);
    TORCH_CHECK(W_inner_.size(0) == 8 * d_ && W_leaf_.size(0) == 8 * d_ && W_cell_.size(0) == 5 * d_ &&
                    W_cell_.size(1) == d_ && b_.numel() == 4 * d_,
                "LSTMRNNLevels: weight shapes do not agree");
    auto made = derive(W_leaf_, W_inner_, W_cell_, b_, kind_);
    W_leaf_t_ = graphtree::transposed_at(made, 0, W_leaf_, "LSTMRNNLevels");
    W_inner_t_ = graphtree::transposed_at(made, 1, W_inner_, "LSTMRNNLevels");
    W_cell_t_ = graphtree::transposed_at(made, 2, W_cell_, "LSTMRNNLevels");
  }

  // The weights transposed (the level products read them row by row).
  static std::vector<torch::Tensor> derive(const torch::Tensor& W_leaf, const torch::Tensor& W_inner,
                                           const torch::Tensor& W_cell, const torch::Tensor& /*b*/,
                                           int64_t /*kind*/) {
    return {graphtree::transposed(W_leaf), graphtree::transposed(W_inner), graphtree::transposed(W_cell)};
  }

  void begin(const std::vector<graphtree::Level>& levels, bool save) override {
    save_ = save;
    contexts_.assign(levels.size(), {});
    // Bottom-up, only the first level has no children, so the inner levels are one block of buffer rows:
    // an inner level's rows in grad_cell_ and grad_b_ start at its begin - inner_begin_.
    inner_begin_ = graphtree::internal_rows_begin(levels, "LSTMRNNLevels");
    inner_rows_ = levels.empty() ? 0 : levels.back().end - inner_begin_;
    for (size_t l = 0; l < levels.size(); ++l) {
      TORCH_CHECK((levels[l].width > 0) == (l > 0), "LSTMRNNLevels: expected a bottom-up pass (leaves first, "
                  "then inner levels)");
    }
    grad_cell_ = grad_b_ = inner_grad_m_ = leaf_grad_m_ = leaf_inputs_ = torch::Tensor();
    outputs_.clear();
  }

  void forward(const graphtree::Level& level, const std::vector<torch::Tensor>& inputs,
               const std::vector<torch::Tensor>& children, std::vector<torch::Tensor>& buffers, bool save) override {
    const int64_t n = level.end - level.begin, d = d_;
    Context& context = contexts_[level.index];
    auto p_out = buffers[0].narrow(0, level.begin, n), c_out = buffers[1].narrow(0, level.begin, n);
    auto m_out = buffers[2].narrow(0, level.begin, n);
    if (level.width == 0) {  // leaves: output w, memory 0, so m is the leaf set applied to w alone
      auto x = inputs[0].contiguous();
      graphtree::check(x, "x");
      p_out.copy_(x);
      project_read_blocks(m_out, x, W_leaf_t_, m_rows(level), d);
      if (save) context.saved = {x};
      return;
    }
    TORCH_CHECK(level.width == 2, "LSTMRNNLevels: a level with ", level.width, " slots, expected 2");
    if (save && level.index == 1) outputs_ = {buffers[0], buffers[1]};
    auto c_xy = children[1].view({n, 2, d}), m_xy = children[2].view({n, 2, 8 * d});
    auto gates = torch::empty({n, 2, 2 * d}, b_.options()), g_a = torch::empty({n, d}, b_.options());
    lstm_rnn_level_cell_into(m_xy, c_xy, b_, kind_, gates, g_a, c_out);  // c_p
    auto cell_terms = at::mm(c_out, W_cell_t_);
    auto o = torch::empty({n, d}, b_.options()), g_c = torch::empty({n, d}, b_.options());
    lstm_rnn_level_output_into(m_xy, cell_terms, c_out, b_, kind_, o, g_c, p_out);  // p
    const auto read = m_rows(level);
    project_read_blocks(m_out, p_out, W_inner_t_, read, d);
    rows(m_out, 0, read.all).narrow(1, 0, 4 * d).add_(rows(cell_terms, 0, read.all).narrow(1, 0, 4 * d));
    if (save) context.saved = {c_xy, gates, m_xy, g_a, c_out, o, g_c};
  }

  std::vector<torch::Tensor> backward(const graphtree::Level& level, const std::vector<torch::Tensor>& grad_states,
                                      std::vector<torch::Tensor>& grad_inputs) override {
    TORCH_CHECK(save_, "LSTMRNNLevels: backward after a forward that saved nothing");
    const int64_t n = level.end - level.begin, d = d_;
    const auto& saved = contexts_[level.index].saved;
    const auto &grad_p = grad_states[0], &grad_c = grad_states[1], &grad_m = grad_states[2];
    if (level.width == 0) {
      leaf_grad_m_ = grad_m;
      leaf_inputs_ = saved[0];
      // A leaf's memory is the constant 0, so grad_c does not reach x.
      if (!grad_inputs.empty() && grad_inputs[0].defined()) {
        add_read_blocks_back(grad_inputs[0].add_(grad_p), grad_m, W_leaf_, m_rows(level), d);
      }
      return {};
    }
    const auto &c_xy = saved[0], &gates = saved[1], &m_xy = saved[2], &g_a = saved[3], &c_p = saved[4];
    const auto &o = saved[5], &g_c = saved[6];
    if (!grad_cell_.defined()) {
      grad_cell_ = torch::empty({inner_rows_, 5 * d}, b_.options());
      grad_b_ = torch::empty({inner_rows_, 4 * d}, b_.options());
    }
    if (level.index == 1) inner_grad_m_ = grad_m;  // the last inner level: its rows start the inner block
    auto grad_p_total = grad_p.clone(at::MemoryFormat::Contiguous);
    add_read_blocks_back(grad_p_total, grad_m, W_inner_, m_rows(level), d);
    const int64_t inner_row = level.begin - inner_begin_;
    auto grad_cell = grad_cell_.narrow(0, inner_row, n);
    lstm_rnn_level_output_backward_into(grad_m, grad_p_total, o, g_c, grad_cell);  // peephole blocks, then o's
    auto grad_c_from_cell = at::mm(grad_cell, W_cell_);
    auto grad_m_xy = torch::empty({n, 2, 8 * d}, b_.options()), grad_c_xy = torch::empty({n, 2, d}, b_.options());
    lstm_rnn_level_cell_backward_into(grad_c, grad_c_from_cell, grad_p_total, grad_cell, o, g_c, g_a, gates, m_xy,
                                      c_xy, kind_, grad_b_.narrow(0, inner_row, n), grad_m_xy, grad_c_xy);
    // The children's outputs p reach this node only through their m: no gradient for them here.
    return {torch::Tensor(), grad_c_xy.view({-1, d}), grad_m_xy.view({-1, 8 * d})};
  }

  std::vector<torch::Tensor> param_grads() override {
    auto grad_W_leaf = torch::zeros_like(W_leaf_), grad_W_inner = torch::zeros_like(W_inner_);
    auto grad_W_cell = torch::zeros_like(W_cell_), grad_b = torch::zeros_like(b_);
    if (leaf_grad_m_.defined()) grad_W_leaf.addmm_(leaf_grad_m_.t(), leaf_inputs_);
    if (inner_rows_ > 0 && inner_grad_m_.defined()) {
      // The level narrows of grad_m, p and c_p all come from buffers whose inner rows are one block.
      auto block = [&](const torch::Tensor& level_rows, int64_t width) {
        return level_rows.as_strided({inner_rows_, width}, {width, 1}, level_rows.storage_offset());
      };
      auto p_inner = outputs_[0].narrow(0, inner_begin_, inner_rows_);
      auto c_inner = outputs_[1].narrow(0, inner_begin_, inner_rows_);
      grad_W_inner.addmm_(block(inner_grad_m_, 8 * d_).t(), p_inner);
      grad_W_cell.addmm_(grad_cell_.t(), c_inner);
      grad_b += grad_b_.sum(0);
    }
    return {grad_W_leaf, grad_W_inner, grad_W_cell, grad_b};
  }

 private:
  struct Context {
    std::vector<torch::Tensor> saved;  // leaves: x; inner: c_xy, gates, m_xy, g_a, c_p, o, g_c
  };

  torch::Tensor W_leaf_, W_inner_, W_cell_, b_, W_leaf_t_, W_inner_t_, W_cell_t_;
  int64_t kind_ = 0, d_ = 0, inner_rows_ = 0, inner_begin_ = 0;
  bool save_ = false;
  std::vector<Context> contexts_;
  std::vector<torch::Tensor> outputs_;  // the p and c_p buffers of the forward pass
  torch::Tensor grad_cell_, grad_b_, inner_grad_m_, leaf_grad_m_, leaf_inputs_;
};

}  // namespace

void bind_lstm_rnn_levels(pybind11::module& m) {
  pybind11::class_<LSTMRNNLevels, graphtree::LevelKernel, std::shared_ptr<LSTMRNNLevels>>(
      m, "LSTMRNNLevels", "The LSTM-RNN's level math for the engine's compiled level loop")
      .def(pybind11::init<torch::Tensor, torch::Tensor, torch::Tensor, torch::Tensor, int64_t>(),
           pybind11::arg("W_leaf"), pybind11::arg("W_inner"), pybind11::arg("W_cell"), pybind11::arg("b"),
           pybind11::arg("kind"));
}
