// The elementwise parts of one level of the LSTM-RNN (graphtree/nn/lstm_rnn.py, Le & Zuidema 2015, sections 3-4),
// each fused into one pass over the level's rows. A parent reads its two children's m, their outputs and memories
// already projected by every map a parent applies (eight d-wide blocks: W_i1, W_f1, W_i2, W_f2, W_c1, W_o1, W_c2,
// W_o2). The output gate peeks at the parent's new memory through W_co, a matrix product in the middle of the
// level, so forward and backward each come in two halves around it.
//
// g is the composition's activation: 0 tanh, 1 softsign, 2 sigmoid (the gates are always logistic). Its
// derivative is written in terms of its output y, which is all the backward pass keeps.

#include "kernels.h"

namespace graphtree {
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

// Gates (i_k, f_k) of both children, g(a) with a = W_c1 x i_1 + W_c2 y i_2 + b_c, and c_p = f_1 c_x + f_2 c_y + g(a).
// m_children [n, 2, 8d], c_children [n, 2, d], b [4d] (b_i, b_f, b_c, b_o). Writes gates [n, 2, 2d], g(a) and c_p
// (every tensor contiguous rows; c_p: a level's rows of the state buffer).
void cell_into(const Tensor& m_children, const Tensor& c_children, const Tensor& b, int64_t kind,
               const Tensor& gates, const Tensor& g_a, const Tensor& c) {
  const int64_t n = c_children.size(0), d = c_children.size(2);
  const float *M = m_children.data_ptr<float>(), *Cj = c_children.data_ptr<float>(), *B = b.data_ptr<float>();
  float *G = gates.data_ptr<float>(), *Ga = g_a.data_ptr<float>(), *C = c.data_ptr<float>();
  for_rows(n, [&](int64_t r) {
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
  });
}

// o = sigmoid(W_o1 x + W_o2 y + W_co c_p + b_o) and p = o g(c_p), given cell_terms = W_cell c_p [n, 5d] (W_co last).
// Writes o, g(c_p) and p, each [n, d].
void output_into(const Tensor& m_children, const Tensor& cell_terms, const Tensor& c,
                 const Tensor& b, int64_t kind, const Tensor& o, const Tensor& g_c, const Tensor& p) {
  const int64_t n = c.size(0), d = c.size(1);
  const float *M = m_children.data_ptr<float>(), *Ct = cell_terms.data_ptr<float>(), *C = c.data_ptr<float>();
  const float* B = b.data_ptr<float>();
  float *O = o.data_ptr<float>(), *Gc = g_c.data_ptr<float>(), *P = p.data_ptr<float>();
  for_rows(n, [&](int64_t r) {
    const float *Wo_x = M + r * 16 * d + 5 * d, *Wo_y = M + r * 16 * d + 15 * d;  // W_o1 x, W_o2 y
    const float *co = Ct + r * 5 * d + 4 * d, *cr = C + r * d;
    float *orow = O + r * d, *gc = Gc + r * d, *pr = P + r * d;
#pragma omp simd
    for (int64_t k = 0; k < d; ++k) {
      orow[k] = sigmoid(Wo_x[k] + Wo_y[k] + co[k] + B[3 * d + k]);
      gc[k] = activate(cr[k], kind);
      pr[k] = orow[k] * gc[k];
    }
  });
}

// The gradient reaching W_cell c_p: the peephole blocks of grad_m (first 4d columns) and the output gate's
// pre-activation gradient grad_p g(c_p) o (1 - o). grad_p already includes W_inner^T grad_m. Writes [n, 5d].
void output_backward_into(const Tensor& grad_m, const Tensor& grad_p, const Tensor& o,
                          const Tensor& g_c, const Tensor& grad_cell) {
  const int64_t n = o.size(0), d = o.size(1);
  const float *gM = grad_m.data_ptr<float>(), *gP = grad_p.data_ptr<float>(), *O = o.data_ptr<float>();
  const float* Gc = g_c.data_ptr<float>();
  float* gCell = grad_cell.data_ptr<float>();
  for_rows(n, [&](int64_t r) {
    const float *gm = gM + r * 8 * d, *gp = gP + r * d, *orow = O + r * d, *gc = Gc + r * d;
    float* out = gCell + r * 5 * d;
    std::memcpy(out, gm, sizeof(float) * 4 * d);
#pragma omp simd
    for (int64_t k = 0; k < d; ++k) out[4 * d + k] = gp[k] * gc[k] * orow[k] * (1.f - orow[k]);
  });
}

// The rest of the level's derivatives. grad_c_from_cell: W_cell^T grad_cell. Writes the bias rows
// [n, 4d] (their column sums are b's gradient), the children's m gradients [n, 2, 8d] and their memories'
// gradients [n, 2, d]. The children's outputs reach the parent only through their m.
void cell_backward_into(const Tensor& grad_c, const Tensor& grad_c_from_cell, const Tensor& grad_p,
                        const Tensor& grad_cell, const Tensor& o, const Tensor& g_c,
                        const Tensor& g_a, const Tensor& gates, const Tensor& m_children,
                        const Tensor& c_children, int64_t kind, const Tensor& grad_b,
                        const Tensor& grad_m, const Tensor& grad_cj) {
  const int64_t n = c_children.size(0), d = c_children.size(2);
  const float *gCin = grad_c.data_ptr<float>(), *gCc = grad_c_from_cell.data_ptr<float>();
  const float *gP = grad_p.data_ptr<float>(), *gCell = grad_cell.data_ptr<float>(), *O = o.data_ptr<float>();
  const float *Gc = g_c.data_ptr<float>(), *Ga = g_a.data_ptr<float>(), *G = gates.data_ptr<float>();
  const float *M = m_children.data_ptr<float>(), *Cj = c_children.data_ptr<float>();
  float *gB = grad_b.data_ptr<float>(), *gM = grad_m.data_ptr<float>(), *gCj = grad_cj.data_ptr<float>();
  for_rows(n, [&](int64_t r) {
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
      // Child x's first blocks feed its own gates and its second blocks y's, likewise for y; then W_c1 x, W_o1 x,
      // W_c2 y, W_o2 y (a first child's W_c2, W_o2 blocks are not read, nor a second child's W_c1, W_o1: zero).
      const float blocks_x[8] = {gix, gfx, giy, gfy, grad_a * ix, go[k], 0.f, 0.f};
      const float blocks_y[8] = {giy, gfy, gix, gfx, 0.f, 0.f, grad_a * iy, go[k]};
      for (int64_t j = 0; j < 8; ++j) {
        gmx[j * d + k] = blocks_x[j];
        gmy[j * d + k] = blocks_y[j];
      }
      gcx[k] = gc * fx;
      gcy[k] = gc * fy;
    }
  });
}

// f(block, column, width) for each block of a level's rows (position_blocks) and each block of m that its rows'
// parents read, columns [column, column + width): a child 0 reads W_i1 .. W_o1 (the first 6d columns), a child 1
// W_i1 .. W_f2 and W_c2, W_o2 (the first 4d and the last 2d), a node at both positions (or a level that is not
// grouped) every block; the rows with no parent need no m. The row blocks side by side (they write different rows).
template <typename F>
void each_read_block(const std::vector<Block>& blocks, int64_t d, const F& f) {
  each_block(blocks, [&](const Block& b) {
    if (b.position != 1) return f(b, 0, b.position == 0 ? 6 * d : 8 * d);
    f(b, 0, 4 * d);
    f(b, 6 * d, 2 * d);
  });
}

// m = u W^T (W_t = W^T, [d, 8d]) on the blocks each row's parent reads; the other blocks are left as they are.
// mm_out writes into the strided column blocks directly (BLAS's leading dimension).
void project_read_blocks(const Tensor& m, const Tensor& u, const Tensor& W_t, const std::vector<Block>& blocks,
                         int64_t d) {
  each_read_block(blocks, d, [&](const Block& b, int64_t column, int64_t width) {
    mm_into(rows_of(m, b).narrow(1, column, width), rows_of(u, b), W_t.narrow(1, column, width));
  });
}

// grad_u += grad_m W on the blocks each row's parent read (grad_m is zero on the others).
void add_read_blocks_back(const Tensor& grad_u, const Tensor& grad_m, const Tensor& W,
                          const std::vector<Block>& blocks, int64_t d) {
  each_read_block(blocks, d, [&](const Block& b, int64_t column, int64_t width) {
    rows_of(grad_u, b).addmm_(rows_of(grad_m, b).narrow(1, column, width), W.narrow(0, column, width));
  });
}

struct LSTMRNNSaved {
  std::vector<Block> blocks;  // the level's rows by the blocks of m that their parents read (each_read_block)
  struct Step {
    Tensor c_xy, gates, m_xy, g_a, c_p, o, g_c;
  } step;  // an inner level's
};

// The LSTM-RNN (graphtree/nn/lstm_rnn.py, Le & Zuidema 2015) as a LevelKernel. States: p, c_p and the internal
// m, of which each node computes only the blocks its parents read (each_read_block). The weight gradients are
// products over all inner rows at once, read from the state buffers and their gradients (the leaves' from level
// 0's rows), whose inner rows are one block in a bottom-up pass.
class LSTMRNNLevels : public Levels<LSTMRNNSaved> {
 public:
  LSTMRNNLevels(Tensor W_leaf, Tensor W_inner, Tensor W_cell, Tensor b, int64_t kind)
      : Levels("LSTMRNNLevels", W_inner.options()), W_leaf_(with_transposed(W_leaf)),
        W_inner_(with_transposed(W_inner)), W_cell_(with_transposed(W_cell)), b_(b), kind_(kind) {
    check_all({&b_});
    d_ = W_inner.size(1);
    TORCH_CHECK(W_inner.size(0) == 8 * d_ && W_leaf.size(0) == 8 * d_ && W_cell.size(0) == 5 * d_ &&
                    W_cell.size(1) == d_ && b_.numel() == 4 * d_,
                "LSTMRNNLevels: weight shapes do not agree");
    expect(2);
  }

  void start(const std::vector<Level>& levels) override {
    for (size_t l = 0; l < levels.size(); ++l) {
      TORCH_CHECK((levels[l].width > 0) == (l > 0), "LSTMRNNLevels: expected a bottom-up pass (leaves first, "
                  "then inner levels)");
      for (const auto& block : saved(levels[l]).blocks = position_blocks(levels[l])) {
        TORCH_CHECK(block.position < 2, "LSTMRNNLevels: a child at position ", block.position, " of a binary cell");
      }
    }
    grad_cell_ = save_ ? internal(5 * d_) : Tensor();
    grad_b_ = save_ ? internal(4 * d_) : Tensor();
  }

  void forward(const Level& level, const Tensors& inputs,
               const Tensors& children, Tensors& buffers, bool save) override {
    const int64_t n = level.rows(), d = d_;
    const auto& blocks = saved(level).blocks;
    auto p_out = rows_of(buffers[0], level), c_out = rows_of(buffers[1], level), m_out = rows_of(buffers[2], level);
    if (level.width == 0) {  // leaves: output w, memory 0, so m is the leaf set applied to w alone
      copy_input(level, inputs, buffers);
      project_read_blocks(m_out, inputs[0], W_leaf_.t, blocks, d);
      return;
    }
    auto c_xy = children[1].view({n, 2, d}), m_xy = children[2].view({n, 2, 8 * d});
    auto gates = fresh(n, 4 * d), g_a = fresh(n, d), o = fresh(n, d), g_c = fresh(n, d);
    cell_into(m_xy, c_xy, b_, kind_, gates, g_a, c_out);  // c_p
    auto cell_terms = at::mm(c_out, W_cell_.t);
    output_into(m_xy, cell_terms, c_out, b_, kind_, o, g_c, p_out);  // p
    project_read_blocks(m_out, p_out, W_inner_.t, blocks, d);
    const int64_t read = blocks.empty() ? 0 : blocks.back().begin + blocks.back().count;  // the rows with a parent
    m_out.narrow(0, 0, read).narrow(1, 0, 4 * d).add_(cell_terms.narrow(0, 0, read).narrow(1, 0, 4 * d));
    if (save) saved(level).step = {c_xy, gates, m_xy, g_a, c_out, o, g_c};
  }

  Tensors backward(const Level& level, const Tensors& grad_states, Tensors& grad_inputs) override {
    const auto& blocks = saved(level).blocks;
    const auto& s = saved(level).step;
    const int64_t n = level.rows(), d = d_;
    const auto &grad_p = grad_states[0], &grad_c = grad_states[1], &grad_m = grad_states[2];
    if (level.width == 0) {
      // A leaf's memory is the constant 0, so grad_c does not reach x.
      if (auto* grad_x = input_grad(grad_inputs)) {
        add_read_blocks_back(grad_x->add_(grad_p), grad_m, W_leaf_.w, blocks, d);
      }
      return {};
    }
    auto grad_p_total = grad_p.clone(at::MemoryFormat::Contiguous);
    add_read_blocks_back(grad_p_total, grad_m, W_inner_.w, blocks, d);
    auto grad_cell = internal_rows(grad_cell_, level);
    output_backward_into(grad_m, grad_p_total, s.o, s.g_c, grad_cell);  // peephole blocks, then o's
    auto grad_c_from_cell = at::mm(grad_cell, W_cell_.w);
    auto grad_m_xy = fresh(n, 16 * d), grad_c_xy = fresh(n, 2 * d);
    cell_backward_into(grad_c, grad_c_from_cell, grad_p_total, grad_cell, s.o, s.g_c, s.g_a, s.gates, s.m_xy, s.c_xy,
                       kind_, internal_rows(grad_b_, level), grad_m_xy, grad_c_xy);
    // The children's outputs p reach this node only through their m: no gradient for them here.
    return {Tensor(), grad_c_xy.view({-1, d}), grad_m_xy.view({-1, 8 * d})};
  }

  Tensors param_grads() override {
    auto leaves = [this](const Tensor& t) { return t.narrow(0, 0, internal_begin_); };  // level 0's rows
    return {weight_grad(W_leaf_.w, leaves(grad_state(2)), leaves(input(0))),
            weight_grad(W_inner_.w, internal_block(grad_state(2)), internal_block(buffer(0))),
            weight_grad(W_cell_.w, grad_cell_, internal_block(buffer(1))), bias_grad(b_, grad_b_)};
  }

 private:
  Weight W_leaf_, W_inner_, W_cell_;
  Tensor b_;
  int64_t kind_ = 0, d_ = 0;
  Tensor grad_cell_, grad_b_;
};

}  // namespace

KernelPtr lstm_rnn_levels(Tensor W_leaf, Tensor W_inner, Tensor W_cell, Tensor b, int64_t kind) {
  return std::make_shared<LSTMRNNLevels>(W_leaf, W_inner, W_cell, b, kind);
}

}  // namespace graphtree
