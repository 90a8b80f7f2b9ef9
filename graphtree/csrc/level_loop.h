// The propagation engine's level loop in C++ (engine_ops.cpp), for cells that supply their level math as a
// LevelKernel. It is the same loop as _run_levels and _fused_backward in graphtree/engine.py, level by level
// over the same level-sorted buffers and slot indices; running it in C++ spares each level the Python
// interpreter between its operators, which on a tree level's few rows costs as much as the arithmetic.
#pragma once

#include <torch/extension.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace graphtree {

// One level of a pass: its rows [begin, end) of the level-sorted buffers, the flat slot index of its
// nodes' predecessors ([n * width], the padding row where a slot is empty), and, bottom-up, the sizes of its
// consecutive row groups by the nodes' own position under their parents (LevelPlan.position_groups in
// graphtree/schedule.py: position 0, 1, ..., several positions, no parent; empty where not grouped).
struct Level {
  int64_t index, begin, end, width;
  torch::Tensor slots;
  std::vector<int64_t> position_groups;
};

// A cell's update and its derivatives in C++, level by level. The kernel keeps, between the two loops, what its
// backward needs, and collects its parameter gradients over all levels (param_grads).
class LevelKernel {
 public:
  virtual ~LevelKernel() = default;

  // Called before the forward loop with every level of the pass; `save`: a backward loop will follow.
  virtual void begin(const std::vector<Level>& levels, bool save) {}

  // begin() with the whole level-sorted inputs too: a kernel that multiplies every node's input by the same
  // weights can do it here, for all levels in one product, instead of once per level.
  virtual void prepare(const std::vector<Level>& levels, const std::vector<torch::Tensor>& inputs, bool save) {
    begin(levels, save);
  }

  // Where to gather state component `state` of the level's predecessors ([n * width, d] rows), or an undefined
  // tensor to let the engine allocate it: a kernel that keeps the gathered states can have them written in place.
  virtual torch::Tensor gather_destination(const Level& level, int64_t state) { return {}; }

  // The level's states, written into rows [begin, end) of `buffers`, from its rows of `inputs` and the
  // gathered predecessor states `children` (one [n * width, d] tensor per state component).
  virtual void forward(const Level& level, const std::vector<torch::Tensor>& inputs,
                       const std::vector<torch::Tensor>& children, std::vector<torch::Tensor>& buffers,
                       bool save) = 0;

  // Given the gradients of the level's states, adds into `grad_inputs` (the level's rows; undefined where no
  // gradient is needed) and returns the gradients of the gathered predecessor states (undefined: none).
  virtual std::vector<torch::Tensor> backward(const Level& level, const std::vector<torch::Tensor>& grad_states,
                                              std::vector<torch::Tensor>& grad_inputs) = 0;

  // Called once after the backward loop, with the gradients of the whole inputs (undefined where none is
  // needed): a kernel that deferred its input gradients adds them here, in one product.
  virtual void finish_backward(std::vector<torch::Tensor>& grad_inputs) {}

  // Called once after the backward loop: the parameter gradients, in the order in which the kernel's maker in
  // graphtree/backend/compiled.py lists the cell's parameters.
  virtual std::vector<torch::Tensor> param_grads() = 0;
};

// The first row of each level among the rows of the internal levels (those with predecessors), and their
// total: for a kernel that keeps a per-node tensor of every internal level in one, in level order.
inline int64_t internal_row_offsets(const std::vector<Level>& levels, std::vector<int64_t>& offsets) {
  offsets.assign(levels.size(), 0);
  int64_t rows = 0;
  for (const auto& level : levels) {
    offsets[level.index] = rows;
    if (level.width > 0) rows += level.end - level.begin;
  }
  return rows;
}

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
inline torch::Tensor cat_rows(const std::vector<torch::Tensor>& parts) {
  return parts.size() == 1 ? parts[0] : torch::cat(parts);
}

}  // namespace graphtree
