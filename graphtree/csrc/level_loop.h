// The propagation engine's level loop in C++ (engine_ops.cpp), and the frame of the cells' kernels that it runs.
// The loop is run_update_levels of graphtree/engine/definition.py and its derivative, over the same level-sorted
// buffers and slot indices; running it in C++ spares each level the Python interpreter between its operators,
// which on a tree level's few rows costs as much as the arithmetic.
#pragma once

#include <torch/extension.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "common.h"

namespace graphtree {

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

// What the level loop asks of a cell. Forward: begin() (or prepare()), then per level gather_destination() and
// forward(); backward, levels in reverse: backward(), then finish_backward() and param_grads().
class LevelKernel {
 public:
  virtual ~LevelKernel() = default;

  // Called before the forward loop with every level of the pass; `save`: a backward loop will follow.
  virtual void begin(const std::vector<Level>& levels, bool save) {}

  // begin() with the whole level-sorted inputs too: a kernel that multiplies every node's input by the same
  // weights can do it here, for all levels in one product, instead of once per level.
  virtual void prepare(const std::vector<Level>& levels, const std::vector<Tensor>& inputs, bool save) {
    begin(levels, save);
  }

  // Where to gather state component `state` of the level's predecessors ([n * width, d] rows), or an undefined
  // tensor to let the engine allocate it: a kernel that keeps the gathered states can have them written in place.
  virtual Tensor gather_destination(const Level& level, int64_t state) { return {}; }

  // The level's states, written into rows [begin, end) of `buffers`, from its rows of `inputs` and the
  // gathered predecessor states `children` (one [n * width, d] tensor per state component).
  virtual void forward(const Level& level, const std::vector<Tensor>& inputs, const std::vector<Tensor>& children,
                       std::vector<Tensor>& buffers, bool save) = 0;

  // Given the gradients of the level's states, adds into `grad_inputs` (the level's rows; undefined where no
  // gradient is needed) and returns the gradients of the gathered predecessor states (undefined: none).
  virtual std::vector<Tensor> backward(const Level& level, const std::vector<Tensor>& grad_states,
                                       std::vector<Tensor>& grad_inputs) = 0;

  // Called once after the backward loop, with the gradients of the whole inputs (undefined where none is
  // needed): a kernel that deferred its input gradients adds them here, in one product.
  virtual void finish_backward(std::vector<Tensor>& grad_inputs) {}

  // Called once after the backward loop: the parameter gradients, in the order in which the kernel's maker in
  // graphtree/backend/compiled.py lists the cell's parameters.
  virtual std::vector<Tensor> param_grads() = 0;
};

// The first row of the internal levels in the level-sorted state buffers (the end of the last level where there
// are none), checking that those levels follow one another there, as a bottom-up plan's do (only its level 0 has
// no predecessors): a kernel can then read every internal node's rows back as one block.
inline int64_t internal_rows_begin(const std::vector<Level>& levels, const char* kernel) {
  int64_t begin = -1, next = -1;
  for (const auto& level : levels) {
    if (level.width == 0) continue;
    if (begin < 0) begin = next = level.begin;
    TORCH_CHECK(level.begin == next, kernel, ": the internal levels' rows are not consecutive");
    next = level.end;
  }
  return begin >= 0 ? begin : (levels.empty() ? 0 : levels.back().end);
}

// Rows of several tensors, one after the other (no copy for one).
inline Tensor cat_rows(const std::vector<Tensor>& parts) {
  return parts.size() == 1 ? parts[0] : torch::cat(parts);
}

// The level's rows of a level-sorted tensor.
inline Tensor rows_of(const Tensor& t, const Level& level) { return t.narrow(0, level.begin, level.rows()); }

// Where a level's input gradient goes, or nullptr where none is needed.
inline Tensor* input_grad(std::vector<Tensor>& grad_inputs) {
  return grad_inputs.empty() || !grad_inputs[0].defined() ? nullptr : &grad_inputs[0];
}

// The gradient of a weight w that multiplied `rows` into the rows whose gradient is `grad`, and of a bias added
// to them: zeros where no row reached them.
inline Tensor weight_grad(const Tensor& w, const Tensor& grad, const Tensor& rows) {
  auto out = torch::zeros_like(w);
  if (grad.defined() && grad.size(0) > 0) out.addmm_(grad.t(), rows);
  return out;
}

inline Tensor bias_grad(const Tensor& b, const Tensor& grad) {
  auto out = torch::zeros_like(b);
  if (grad.defined() && grad.size(0) > 0) out += grad.sum(0);
  return out;
}

// A new [n * times, w] tensor holding each row of t ([n, w]) `times` times. Always a copy: for one row,
// expand().contiguous() would be t itself (a size-1 dimension of stride 0 counts as contiguous), and the caller
// writes into the result or adds it into the rows t came from.
inline Tensor repeated_rows(const Tensor& t, int64_t n, int64_t times) {
  return t.reshape({n, 1, -1}).expand({n, times, t.size(-1)}).clone(at::MemoryFormat::Contiguous).view({n * times, -1});
}

// The frame of every cell's kernel: what forward saves per level for backward (Saved), and the rows that its
// weights' gradients multiply, kept for all levels at once so that each gradient is one product (a level's
// few rows make many small products cost more than the arithmetic).
//
// begin() numbers the internal nodes (those with predecessors) level after level, and the slots. A kernel that
// names states to keep (kept_states: each one's width) has the children's states gathered straight into one
// tensor per state, [slots, width]: gathered(state) whole, gathered(state, w) as [internal nodes, w] where every
// internal node has the same slot count. internal(w) is a new [internal nodes, w] tensor for the gates'
// gradients, internal_rows() a level's rows of one. Every buffer the frame hands out is new (fresh()), never a
// view of another that the kernel writes.
template <typename Saved>
class Levels : public LevelKernel {
 public:
  void begin(const std::vector<Level>& levels, bool save) override {
    save_ = save;
    saved_.assign(levels.size(), Saved{});
    internal_rows_.assign(levels.size(), 0);
    slots_.assign(levels.size(), 0);
    internal_ = 0;
    int64_t slots = 0;
    for (const auto& level : levels) {
      internal_rows_[level.index] = internal_;
      slots_[level.index] = slots;
      if (level.width > 0) internal_ += level.rows();
      slots += level.slots.numel();
    }
    gathered_.assign(kept_states_.size(), Tensor());
    for (size_t s = 0; s < kept_states_.size(); ++s) {
      if (kept_states_[s] > 0) gathered_[s] = torch::empty({slots, kept_states_[s]}, options_);
    }
    start(levels);
  }

  Tensor gather_destination(const Level& level, int64_t state) override {
    if (level.width == 0 || state >= static_cast<int64_t>(gathered_.size()) || !gathered_[state].defined()) return {};
    return gathered_[state].narrow(0, slots_[level.index], level.slots.numel());
  }

 protected:
  // options: of every tensor the frame makes; kept_states: each state's width, where the kernel keeps it (0: not).
  Levels(const char* name, torch::TensorOptions options, std::vector<int64_t> kept_states = {})
      : name_(name), options_(options), kept_states_(std::move(kept_states)) {}

  // The kernel's own part of begin(): its buffers for the pass.
  virtual void start(const std::vector<Level>& levels) {}

  Saved& saved(const Level& level) { return saved_[level.index]; }

  // What forward saved of the level, for its backward.
  Saved& saved_for_backward(const Level& level) {
    TORCH_CHECK(save_, name_, ": backward after a forward that saved nothing");
    return saved_[level.index];
  }

  const std::vector<Saved>& all_saved() const { return saved_; }

  void expect_width(const Level& level, int64_t width) const {
    TORCH_CHECK(level.width == width, name_, ": a level with ", level.width, " slots, expected ", width);
  }

  Tensor fresh(int64_t n, int64_t width) const { return torch::empty({n, width}, options_); }
  Tensor internal(int64_t width) const { return fresh(internal_, width); }
  Tensor internal_rows(const Tensor& all, const Level& level) const {
    return all.narrow(0, internal_rows_[level.index], level.rows());
  }

  int64_t first_slot(const Level& level) const { return slots_[level.index]; }
  Tensor gathered(int64_t state) const { return gathered_[state]; }
  Tensor gathered(int64_t state, int64_t width) const { return gathered_[state].view({internal_, width}); }
  Tensor gathered(int64_t state, const Level& level, int64_t width) const {
    return internal_rows(gathered(state, width), level);
  }

  const char* name_;
  torch::TensorOptions options_;
  bool save_ = false;
  int64_t internal_ = 0;  // internal nodes in the pass

 private:
  std::vector<int64_t> kept_states_;
  std::vector<Saved> saved_;
  std::vector<int64_t> internal_rows_, slots_;
  std::vector<Tensor> gathered_;
};

// The Python class of kernel K, made from constructor arguments Args (named by `names`).
template <typename K, typename... Args, typename... Names>
void bind_kernel(pybind11::module& m, const char* name, const char* doc, Names... names) {
  pybind11::class_<K, LevelKernel, std::shared_ptr<K>>(m, name, doc).def(pybind11::init<Args...>(), names...);
}

}  // namespace graphtree
