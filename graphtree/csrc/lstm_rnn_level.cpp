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
using graphtree::grain_rows;
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
std::vector<torch::Tensor> lstm_rnn_level_cell(torch::Tensor m_children, torch::Tensor c_children, torch::Tensor b,
                                               int64_t kind) {
  check_all({&m_children, &c_children, &b});
  const int64_t n = c_children.size(0), d = c_children.size(2);
  TORCH_CHECK(c_children.size(1) == 2 && m_children.size(0) == n && m_children.size(1) == 2 &&
                  m_children.size(2) == 8 * d && b.numel() == 4 * d,
              "expected m_children [n, 2, 8d], c_children [n, 2, d], b [4d]");
  auto gates = torch::empty({n, 2, 2 * d}, m_children.options());
  auto g_a = torch::empty({n, d}, m_children.options()), c = torch::empty({n, d}, m_children.options());
  const float *M = m_children.data_ptr<float>(), *Cj = c_children.data_ptr<float>(), *B = b.data_ptr<float>();
  float *G = gates.data_ptr<float>(), *Ga = g_a.data_ptr<float>(), *C = c.data_ptr<float>();
  at::parallel_for(0, n, grain_rows(16 * d), [&](int64_t begin, int64_t end) {
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
  return {gates, g_a, c};
}

// o = sigmoid(W_o1 x + W_o2 y + W_co c_p + b_o) and p = o g(c_p), given cell_terms = W_cell c_p [n, 5d] (W_co last).
// Returns o, g(c_p) and p, each [n, d].
std::vector<torch::Tensor> lstm_rnn_level_output(torch::Tensor m_children, torch::Tensor cell_terms, torch::Tensor c,
                                                 torch::Tensor b, int64_t kind) {
  check_all({&m_children, &cell_terms, &c, &b});
  const int64_t n = c.size(0), d = c.size(1);
  TORCH_CHECK(m_children.size(0) == n && m_children.size(2) == 8 * d && cell_terms.size(1) == 5 * d,
              "expected m_children [n, 2, 8d], cell_terms [n, 5d], c [n, d]");
  auto o = torch::empty({n, d}, c.options()), g_c = torch::empty({n, d}, c.options());
  auto p = torch::empty({n, d}, c.options());
  const float *M = m_children.data_ptr<float>(), *Ct = cell_terms.data_ptr<float>(), *C = c.data_ptr<float>();
  const float* B = b.data_ptr<float>();
  float *O = o.data_ptr<float>(), *Gc = g_c.data_ptr<float>(), *P = p.data_ptr<float>();
  at::parallel_for(0, n, grain_rows(4 * d), [&](int64_t begin, int64_t end) {
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
  return {o, g_c, p};
}

// The gradient reaching W_cell c_p: the peephole blocks of grad_m (first 4d columns) and the output gate's
// pre-activation gradient grad_p g(c_p) o (1 - o). grad_p already includes W_inner^T grad_m. Returns [n, 5d].
torch::Tensor lstm_rnn_level_output_backward(torch::Tensor grad_m, torch::Tensor grad_p, torch::Tensor o,
                                             torch::Tensor g_c) {
  check_all({&grad_m, &grad_p, &o, &g_c});
  const int64_t n = o.size(0), d = o.size(1);
  TORCH_CHECK(grad_m.size(0) == n && grad_m.size(1) == 8 * d && grad_p.sizes() == o.sizes(),
              "expected grad_m [n, 8d], grad_p, o and g_c [n, d]");
  auto grad_cell = torch::empty({n, 5 * d}, o.options());
  const float *gM = grad_m.data_ptr<float>(), *gP = grad_p.data_ptr<float>(), *O = o.data_ptr<float>();
  const float* Gc = g_c.data_ptr<float>();
  float* gCell = grad_cell.data_ptr<float>();
  at::parallel_for(0, n, grain_rows(5 * d), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float *gm = gM + r * 8 * d, *gp = gP + r * d, *orow = O + r * d, *gc = Gc + r * d;
      float* out = gCell + r * 5 * d;
      std::memcpy(out, gm, sizeof(float) * 4 * d);
#pragma omp simd
      for (int64_t k = 0; k < d; ++k) out[4 * d + k] = gp[k] * gc[k] * orow[k] * (1.f - orow[k]);
    }
  });
  return grad_cell;
}

// The rest of the level's derivatives. grad_c_from_cell: W_cell^T grad_cell. Returns the bias rows
// [n, 4d] (their column sums are b's gradient), the children's m gradients [n, 2, 8d] and their memories'
// gradients [n, 2, d]. The children's outputs reach the parent only through their m.
std::vector<torch::Tensor> lstm_rnn_level_cell_backward(torch::Tensor grad_c, torch::Tensor grad_c_from_cell,
                                                        torch::Tensor grad_p, torch::Tensor grad_cell,
                                                        torch::Tensor o, torch::Tensor g_c, torch::Tensor g_a,
                                                        torch::Tensor gates, torch::Tensor m_children,
                                                        torch::Tensor c_children, int64_t kind) {
  check_all({&grad_c, &grad_c_from_cell, &grad_p, &grad_cell, &o, &g_c, &g_a, &gates, &m_children, &c_children});
  const int64_t n = c_children.size(0), d = c_children.size(2);
  TORCH_CHECK(gates.size(0) == n && gates.size(2) == 2 * d && grad_cell.size(1) == 5 * d,
              "expected gates [n, 2, 2d] and grad_cell [n, 5d]");
  auto grad_b = torch::empty({n, 4 * d}, o.options());
  auto grad_m = torch::zeros({n, 2, 8 * d}, o.options());
  auto grad_cj = torch::empty({n, 2, d}, o.options());
  const float *gCin = grad_c.data_ptr<float>(), *gCc = grad_c_from_cell.data_ptr<float>();
  const float *gP = grad_p.data_ptr<float>(), *gCell = grad_cell.data_ptr<float>(), *O = o.data_ptr<float>();
  const float *Gc = g_c.data_ptr<float>(), *Ga = g_a.data_ptr<float>(), *G = gates.data_ptr<float>();
  const float *M = m_children.data_ptr<float>(), *Cj = c_children.data_ptr<float>();
  float *gB = grad_b.data_ptr<float>(), *gM = grad_m.data_ptr<float>(), *gCj = grad_cj.data_ptr<float>();
  at::parallel_for(0, n, grain_rows(20 * d), [&](int64_t begin, int64_t end) {
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
        gcx[k] = gc * fx;
        gcy[k] = gc * fy;
      }
    }
  });
  return {grad_b, grad_m, grad_cj};
}

namespace {

using graphtree::cat_rows;

// The LSTM-RNN (graphtree/nn/lstm_rnn.py, Le & Zuidema 2015) as a LevelKernel for the engine's compiled level
// loop: forward_level and backward_level there, in C++, on the kernels above. States: p, c_p and the internal
// m (every map of the node's output and cell that its parent will read).
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
    W_leaf_t_ = W_leaf_.t().contiguous();
    W_inner_t_ = W_inner_.t().contiguous();
    W_cell_t_ = W_cell_.t().contiguous();
  }

  void begin(const std::vector<graphtree::Level>& levels, bool save) override {
    save_ = save;
    contexts_.assign(levels.size(), {});
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
      at::mm_out(m_out, x, W_leaf_t_);
      if (save) context.saved = {x};
      return;
    }
    TORCH_CHECK(level.width == 2, "LSTMRNNLevels: a level with ", level.width, " slots, expected 2");
    auto c_xy = children[1].view({n, 2, d}), m_xy = children[2].view({n, 2, 8 * d});
    auto cell = lstm_rnn_level_cell(m_xy, c_xy, b_, kind_);  // gates, g_a, c_p
    const auto& c_p = cell[2];
    auto cell_terms = at::mm(c_p, W_cell_t_);
    auto output = lstm_rnn_level_output(m_xy, cell_terms, c_p, b_, kind_);  // o, g_c, p
    const auto& p = output[2];
    at::mm_out(m_out, p, W_inner_t_);
    m_out.narrow(1, 0, 4 * d).add_(cell_terms.narrow(1, 0, 4 * d));
    p_out.copy_(p);
    c_out.copy_(c_p);
    if (save) context.saved = {c_xy, cell[0], m_xy, cell[1], c_p, output[0], output[1], p};
  }

  std::vector<torch::Tensor> backward(const graphtree::Level& level, const std::vector<torch::Tensor>& grad_states,
                                      std::vector<torch::Tensor>& grad_inputs) override {
    TORCH_CHECK(save_, "LSTMRNNLevels: backward after a forward that saved nothing");
    const auto& saved = contexts_[level.index].saved;
    const auto &grad_p = grad_states[0], &grad_c = grad_states[1], &grad_m = grad_states[2];
    if (level.width == 0) {
      leaf_grads_.push_back(grad_m);
      leaf_inputs_.push_back(saved[0]);
      // A leaf's memory is the constant 0, so grad_c does not reach x.
      if (!grad_inputs.empty() && grad_inputs[0].defined()) grad_inputs[0].add_(grad_p).addmm_(grad_m, W_leaf_);
      return {};
    }
    const auto &c_xy = saved[0], &gates = saved[1], &m_xy = saved[2], &g_a = saved[3], &c_p = saved[4];
    const auto &o = saved[5], &g_c = saved[6], &p = saved[7];
    inner_grads_.push_back(grad_m);
    inner_outputs_.push_back(p);
    auto grad_p_total = at::mm(grad_m, W_inner_).add_(grad_p);
    auto grad_cell = lstm_rnn_level_output_backward(grad_m, grad_p_total, o, g_c);  // peephole blocks, then o's
    cell_grads_.push_back(grad_cell);
    cells_.push_back(c_p);
    auto grad_c_from_cell = at::mm(grad_cell, W_cell_);
    auto rest = lstm_rnn_level_cell_backward(grad_c, grad_c_from_cell, grad_p_total, grad_cell, o, g_c, g_a, gates,
                                             m_xy, c_xy, kind_);  // grad_b, grad_m_xy, grad_c_xy
    bias_grads_.push_back(rest[0]);
    // The children's outputs p reach this node only through their m: no gradient for them here.
    return {torch::Tensor(), rest[2].reshape({-1, d_}), rest[1].reshape({-1, 8 * d_})};
  }

  std::vector<std::pair<std::string, torch::Tensor>> param_grads() override {
    auto grad_W_leaf = torch::zeros_like(W_leaf_), grad_W_inner = torch::zeros_like(W_inner_);
    auto grad_W_cell = torch::zeros_like(W_cell_), grad_b = torch::zeros_like(b_);
    if (!leaf_grads_.empty()) grad_W_leaf.addmm_(cat_rows(leaf_grads_).t(), cat_rows(leaf_inputs_));
    if (!inner_grads_.empty()) {
      grad_W_inner.addmm_(cat_rows(inner_grads_).t(), cat_rows(inner_outputs_));
      grad_W_cell.addmm_(cat_rows(cell_grads_).t(), cat_rows(cells_));
      grad_b += cat_rows(bias_grads_).sum(0);
    }
    return {{"W_leaf", grad_W_leaf}, {"W_inner", grad_W_inner}, {"W_cell", grad_W_cell}, {"b", grad_b}};
  }

 private:
  struct Context {
    std::vector<torch::Tensor> saved;  // leaves: x; inner: c_xy, gates, m_xy, g_a, c_p, o, g_c, p
  };

  torch::Tensor W_leaf_, W_inner_, W_cell_, b_, W_leaf_t_, W_inner_t_, W_cell_t_;
  int64_t kind_ = 0, d_ = 0;
  bool save_ = false;
  std::vector<Context> contexts_;
  std::vector<torch::Tensor> leaf_grads_, leaf_inputs_, inner_grads_, inner_outputs_, cell_grads_, cells_, bias_grads_;
};

}  // namespace

void bind_lstm_rnn_levels(pybind11::module& m) {
  pybind11::class_<LSTMRNNLevels, graphtree::LevelKernel, std::shared_ptr<LSTMRNNLevels>>(
      m, "LSTMRNNLevels", "The LSTM-RNN's level math for the engine's compiled level loop")
      .def(pybind11::init<torch::Tensor, torch::Tensor, torch::Tensor, torch::Tensor, int64_t>(),
           pybind11::arg("W_leaf"), pybind11::arg("W_inner"), pybind11::arg("W_cell"), pybind11::arg("b"),
           pybind11::arg("kind"));
}
