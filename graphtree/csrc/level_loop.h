// The propagation engine's level loop in C++ (engine_ops.cpp), and the frame of the cells' kernels that it runs.
// The loop is run_update_levels of graphtree/engine/definition.py and its derivative, over the same level-sorted
// buffers and slot indices; running it in C++ spares each level the Python interpreter between its operators,
// which on a tree level's few rows costs as much as the arithmetic.
#pragma once

#include "common.h"

namespace graphtree {

using Tensors = std::vector<Tensor>;

// One level of a pass: its rows [begin, end) of the level-sorted buffers, the flat slot index of its
// nodes' predecessors ([n * width], the padding row where a slot is empty), and, bottom-up, the sizes of its
// consecutive row groups by the nodes' own position under their parents (LevelPlan.position_groups in
// graphtree/schedule.py: position 0, 1, ..., several positions, no parent; empty where not grouped).
struct Level {
  int64_t index, begin, end, width;
  Tensor slots;
  std::vector<int64_t> position_groups;

  int64_t rows() const { return end - begin; }
};

// What the level loop asks of a cell. Forward: begin(), then per level gather_destination() and forward();
// backward: begin_backward(), then levels in reverse backward(), then finish_backward() and param_grads(). The
// loop hands every kernel checked float32 CPU tensors of contiguous rows (engine_ops.cpp), so a kernel indexes
// its rows of inputs, states and gradients directly.
class LevelKernel {
 public:
  virtual ~LevelKernel() = default;

  // Called before the forward loop with every level of the pass, the whole level-sorted inputs and the state
  // buffers that the levels write; `save`: a backward loop will follow.
  virtual void begin(const std::vector<Level>& levels, const Tensors& inputs, const Tensors& buffers, bool save) = 0;

  // Where to gather state component `state` of the level's predecessors ([n * width, d] rows), or an undefined
  // tensor to let the engine allocate it: a kernel that keeps the gathered states can have them written in place.
  virtual Tensor gather_destination(const Level& level, int64_t state) { return {}; }

  // The level's states, written into rows [begin, end) of `buffers`, from its rows of `inputs` and the
  // gathered predecessor states `children` (one [n * width, d] tensor per state component).
  virtual void forward(const Level& level, const Tensors& inputs, const Tensors& children,
                       Tensors& buffers, bool save) = 0;

  // Called before the backward loop with the gradients of the whole state buffers, which the loop adds into. A
  // kernel may add its children's gradients into their rows there itself, in the order in which the loop would
  // scatter them, and return none.
  virtual void begin_backward(const Tensors& grad_states) = 0;

  // Given the gradients of the level's states, adds into `grad_inputs` (the level's rows; undefined where no
  // gradient is needed) and returns the gradients of the gathered predecessor states (undefined or missing:
  // none; a level without predecessors returns none).
  virtual Tensors backward(const Level& level, const Tensors& grad_states, Tensors& grad_inputs) = 0;

  // Called once after the backward loop, with the gradients of the whole inputs (undefined where none is
  // needed): a kernel that deferred its input gradients adds them here, in one product.
  virtual void finish_backward(Tensors& grad_inputs) {}

  // Called once after the backward loop: the parameter gradients, in the order of the weights the kernel was made
  // from (the cell's compiled_weights(), which its level_kernel method in graphtree/nn/ hands the kernel).
  virtual Tensors param_grads() = 0;
};

// Rows of several tensors, one after the other (no copy for one).
inline Tensor cat_rows(const Tensors& parts) {
  return parts.size() == 1 ? parts[0] : at::cat(parts);
}

// The level's rows of a level-sorted tensor.
inline Tensor rows_of(const Tensor& t, const Level& level) { return t.narrow(0, level.begin, level.rows()); }

// Rows [begin, begin + count) of a level, whose nodes are all at `position` under their parents (-1: several).
struct Block {
  int64_t position, begin, count;
};

inline Tensor rows_of(const Tensor& t, const Block& block) { return t.narrow(0, block.begin, block.count); }

// A level's rows as consecutive blocks by the nodes' position under their parents (Level::position_groups): one
// per position that has rows, then one of the rows at several positions. The rows with no parent, last, are in
// none; a level without position groups is one block at several positions.
inline std::vector<Block> position_blocks(const Level& level) {
  const auto& groups = level.position_groups;
  if (groups.size() < 2) return {{-1, 0, level.rows()}};
  const int64_t several = static_cast<int64_t>(groups.size()) - 2;  // the groups: each position, several, none
  std::vector<Block> blocks;
  for (int64_t g = 0, begin = 0; g <= several; begin += groups[g++]) {
    if (groups[g] > 0) blocks.push_back({g == several ? -1 : g, begin, groups[g]});
  }
  return blocks;
}

// f(block) for each block of a level's rows, side by side (common.h): the blocks write different rows, with
// different weights where a kernel has a set per position. With two functions, f(block) and g(block) are parts
// of their own (two products of every block).
template <typename F>
void each_block(const std::vector<Block>& blocks, const F& f) {
  side_by_side(static_cast<int64_t>(blocks.size()), [&](int64_t k) { f(blocks[k]); });
}

template <typename F, typename G>
void each_block(const std::vector<Block>& blocks, const F& f, const G& g) {
  side_by_side(2 * static_cast<int64_t>(blocks.size()), [&](int64_t k) {
    if (k % 2 == 0) return f(blocks[k / 2]);
    g(blocks[k / 2]);
  });
}

// out = a b into rows of a larger tensor (at::mm_out takes its output by reference).
inline void mm_into(Tensor out, const Tensor& a, const Tensor& b) { at::mm_out(out, a, b); }

// Where a level's input gradient goes, or nullptr where none is needed.
inline Tensor* input_grad(Tensors& grad_inputs) {
  return grad_inputs.empty() || !grad_inputs[0].defined() ? nullptr : &grad_inputs[0];
}

// The gradient of a weight w that multiplied `rows` into the rows whose gradient is `grad`, and of a bias added
// to them: zeros where no row reached them.
inline Tensor weight_grad(const Tensor& w, const Tensor& grad, const Tensor& rows) {
  auto out = at::zeros_like(w);
  if (grad.defined() && grad.size(0) > 0) out.addmm_(grad.t(), rows);
  return out;
}

inline Tensor bias_grad(const Tensor& b, const Tensor& grad) {
  auto out = at::zeros_like(b);
  if (grad.defined() && grad.size(0) > 0) out += grad.sum(0);
  return out;
}

// A new [n * times, w] tensor holding each row of t ([n, w]) `times` times. Always a copy: for one row,
// expand().contiguous() would be t itself (a size-1 dimension of stride 0 counts as contiguous), and the caller
// writes into the result or adds it into the rows t came from.
inline Tensor repeated_rows(const Tensor& t, int64_t n, int64_t times) {
  return t.reshape({n, 1, -1}).expand({n, times, t.size(-1)}).clone(at::MemoryFormat::Contiguous).view({n * times, -1});
}

// A weight's gradient deferred to param_grads: the gradient rows of the weight's products and the rows it
// multiplied, level by level, for one product over them all. Rows that follow the previous ones in the same
// tensor extend them: every level's rows of one whole tensor (a bottom-up pass's internal rows) are that tensor's
// block again, not a copy.
class GradientRows {
 public:
  void clear() {
    grads_.clear();
    rows_.clear();
  }

  void add(const Tensor& grad, const Tensor& rows) {
    append(grads_, grad);
    append(rows_, rows);
  }

  // Every level's rows, in the order added (undefined where none).
  Tensor grads() const { return grads_.empty() ? Tensor() : cat_rows(grads_); }
  Tensor rows() const { return rows_.empty() ? Tensor() : cat_rows(rows_); }

  // out += grads^T rows, nothing where no level added rows.
  void add_into(const Tensor& out) const {
    if (!grads_.empty()) out.addmm_(grads().t(), rows());
  }

 private:
  static void append(Tensors& parts, const Tensor& t) {
    if (!parts.empty()) {
      auto& last = parts.back();
      if (t.is_alias_of(last) && t.size(1) == last.size(1) && t.strides() == last.strides() &&
          t.storage_offset() == last.storage_offset() + last.size(0) * last.stride(0)) {
        last = last.as_strided({last.size(0) + t.size(0), last.size(1)}, last.strides());
        return;
      }
    }
    parts.push_back(t);
  }

  Tensors grads_, rows_;
};

// The frame of every cell's kernel: what forward saves per level for backward (Saved), the pass's whole
// tensors, and the rows that its weights' gradients multiply, kept for all levels at once so that each gradient
// is one product (a level's few rows make many small products cost more than the arithmetic).
//
// begin() checks that every internal level (one with predecessors) has the slot count that the kernel expect()s,
// numbers the internal nodes level after level, and the slots. A kernel that names states to keep (kept_states:
// each one's width) has the children's states gathered straight into one tensor per state, [slots, width]:
// gathered(state) whole, gathered(state, w) as [internal nodes, w] where every internal node has the same slot
// count. internal(w) is a new [internal nodes, w] tensor for the gates' gradients, internal_rows() a level's rows
// of one. Where the internal levels follow one another in the level-sorted rows, as a bottom-up plan's do (only
// its level 0 has no predecessors), internal_block() reads every internal node's rows of a whole tensor (an
// input, a state buffer, a state's gradient) as one block. Every buffer the frame hands out is new (fresh()),
// never a view of another that the kernel writes.
template <typename Saved>
class Levels : public LevelKernel {
 public:
  void begin(const std::vector<Level>& levels, const Tensors& inputs, const Tensors& buffers, bool save) override {
    save_ = save;
    inputs_ = inputs;
    buffers_ = buffers;
    grad_states_.clear();
    saved_.assign(levels.size(), Saved{});
    internal_rows_.assign(levels.size(), 0);
    slots_.assign(levels.size(), 0);
    internal_ = 0;
    internal_begin_ = levels.empty() ? 0 : levels.back().end;
    consecutive_ = true;
    int64_t slots = 0, next = -1;
    for (const auto& level : levels) {
      internal_rows_[level.index] = internal_;
      slots_[level.index] = slots;
      slots += level.slots.numel();
      if (level.width == 0) continue;
      TORCH_CHECK(width_ == 0 || level.width == width_, name_, ": a level with ", level.width, " slots, expected ",
                  width_);
      if (internal_ == 0) internal_begin_ = next = level.begin;
      consecutive_ = consecutive_ && level.begin == next;
      next = level.end;
      internal_ += level.rows();
    }
    gathered_.assign(kept_states_.size(), Tensor());
    for (size_t s = 0; s < kept_states_.size(); ++s) {
      if (kept_states_[s] > 0) gathered_[s] = at::empty({slots, kept_states_[s]}, options_);
    }
    start(levels);
  }

  Tensor gather_destination(const Level& level, int64_t state) override {
    if (level.width == 0 || state >= static_cast<int64_t>(gathered_.size()) || !gathered_[state].defined()) return {};
    return gathered_[state].narrow(0, slots_[level.index], level.slots.numel());
  }

  void begin_backward(const Tensors& grad_states) override {
    TORCH_CHECK(save_, name_, ": backward after a forward that saved nothing");
    grad_states_ = grad_states;
  }

 protected:
  // options: of every tensor the frame makes.
  Levels(const char* name, at::TensorOptions options) : name_(name), options_(options) {}

  // What the kernel's constructor tells the frame, once it has checked its weights: every internal level's slot
  // count (0: any), and the width of each state that it keeps gathered (0: not kept).
  void expect(int64_t width, std::vector<int64_t> kept_states = {}) {
    width_ = width;
    kept_states_ = std::move(kept_states);
  }

  // The kernel's own part of begin(): its buffers for the pass.
  virtual void start(const std::vector<Level>& levels) {}

  Saved& saved(const Level& level) { return saved_[level.index]; }
  const std::vector<Saved>& all_saved() const { return saved_; }

  // The pass's whole inputs, state buffers and (in backward) the states' gradients.
  const Tensor& input(size_t k) const { return inputs_[k]; }
  const Tensor& buffer(size_t s) const { return buffers_[s]; }
  const Tensor& grad_state(size_t s) const { return grad_states_[s]; }

  // The row that empty slots point at: the zero row past the nodes in the state buffers.
  int64_t padding_row() const { return buffers_[0].size(0) - 1; }

  // A leaf level whose first state is its input (a word vector): the input's rows copied forward, and the
  // state's gradient added into the input's backward.
  void copy_input(const Level& level, const Tensors& inputs, Tensors& buffers) const {
    rows_of(buffers[0], level).copy_(inputs[0]);
  }
  Tensors pass_gradient_to_input(const Tensors& grad_states, Tensors& grad_inputs) const {
    if (auto* grad_x = input_grad(grad_inputs)) grad_x->add_(grad_states[0]);
    return {};
  }

  Tensor fresh(int64_t n, int64_t width) const { return at::empty({n, width}, options_); }
  Tensor internal(int64_t width) const { return fresh(internal_, width); }
  Tensor internal_rows(const Tensor& all, const Level& level) const {
    return all.narrow(0, internal_rows_[level.index], level.rows());
  }
  Tensor internal_block(const Tensor& t) const {
    TORCH_CHECK(consecutive_, name_, ": the internal levels' rows are not consecutive");
    return t.narrow(0, internal_begin_, internal_);
  }

  int64_t first_slot(const Level& level) const { return slots_[level.index]; }
  Tensor gathered(int64_t state) const { return gathered_[state]; }
  Tensor gathered(int64_t state, int64_t width) const { return gathered_[state].view({internal_, width}); }
  Tensor gathered(int64_t state, const Level& level, int64_t width) const {
    return internal_rows(gathered(state, width), level);
  }

  const char* name_;
  at::TensorOptions options_;
  bool save_ = false;
  int64_t internal_ = 0;        // internal nodes in the pass
  int64_t internal_begin_ = 0;  // the first internal row (the end of the last level where there is none)

 private:
  int64_t width_ = 0;
  std::vector<int64_t> kept_states_;
  Tensors inputs_, buffers_, grad_states_;
  std::vector<Saved> saved_;
  std::vector<int64_t> internal_rows_, slots_;
  bool consecutive_ = true;
  Tensors gathered_;
};

}  // namespace graphtree
