// graphtree's compiled level kernels as PyTorch operators: torch.ops.graphtree.* once the library is loaded
// (torch.ops.load_library, by graphtree/backend/native.py). Registered with TORCH_LIBRARY rather than bound
// through pybind11: the library holds no Python module, and this is the one source that includes PyTorch's
// registration headers (the others include ATen's tensor and operators only, common.h), so the build stays short.
//
// Each cell's kernel is made by an operator named after its C++ class (ChildSumLevels, ...), which takes the
// weights in the kernel's layout (the cell's level_kernel method in graphtree/nn/ hands them over) and returns a
// LevelKernel, the one custom class (torch.classes.graphtree.LevelKernel) that every kernel is held in; the
// engine's loops take it back. The schemas name every argument, as the Python side passes them.
#include <torch/custom_class.h>
#include <torch/library.h>

#include "kernels.h"

namespace graphtree {
namespace {

// A cell's kernel as PyTorch holds it: the level loops receive it back from Python.
struct Kernel : torch::CustomClassHolder {
  explicit Kernel(KernelPtr made) : kernel(std::move(made)) {}
  KernelPtr kernel;
};

using Handle = c10::intrusive_ptr<Kernel>;

Handle held(KernelPtr kernel) { return c10::make_intrusive<Kernel>(std::move(kernel)); }

// The operators' list arguments as the loops (engine_ops.cpp) take them.
std::vector<int64_t> ints(const c10::List<int64_t>& list) { return list.vec(); }

std::vector<std::vector<int64_t>> nested(const c10::List<c10::List<int64_t>>& lists) {
  std::vector<std::vector<int64_t>> out;
  out.reserve(lists.size());
  for (const c10::List<int64_t> list : lists) out.push_back(list.vec());
  return out;
}

template <typename T>
std::vector<std::vector<T>> per_pass(const c10::List<c10::List<T>>& lists) {
  std::vector<std::vector<T>> out;
  out.reserve(lists.size());
  for (const c10::List<T> list : lists) out.push_back(list.vec());
  return out;
}

std::vector<KernelPtr> kernels_of(const c10::List<Handle>& handles) {
  std::vector<KernelPtr> out;
  out.reserve(handles.size());
  for (const Handle handle : handles) out.push_back(handle->kernel);
  return out;
}

void levels_forward(const Handle& kernel, at::TensorList buffers, at::TensorList inputs, at::IntArrayRef ptr,
                    at::TensorList slots, const c10::List<c10::List<int64_t>>& position_groups, bool save) {
  run_levels_forward(*kernel->kernel, buffers.vec(), inputs.vec(), ptr.vec(), slots.vec(), nested(position_groups),
                     save);
}

std::vector<Tensor> levels_backward(const Handle& kernel, at::TensorList grad_states,
                                    const c10::List<std::optional<Tensor>>& grad_inputs, at::IntArrayRef ptr,
                                    at::TensorList slots, const c10::List<c10::List<int64_t>>& position_groups) {
  return run_levels_backward(*kernel->kernel, grad_states.vec(), grad_inputs.vec(), ptr.vec(), slots.vec(),
                             nested(position_groups));
}

void passes_forward(const c10::List<Handle>& kernels, const c10::List<c10::List<Tensor>>& buffers,
                    const c10::List<c10::List<Tensor>>& inputs, const c10::List<c10::List<int64_t>>& ptrs,
                    const c10::List<c10::List<Tensor>>& slots,
                    const c10::List<c10::List<c10::List<int64_t>>>& position_groups, bool save) {
  std::vector<std::vector<std::vector<int64_t>>> groups;
  for (const c10::List<c10::List<int64_t>> pass : position_groups) groups.push_back(nested(pass));
  run_passes_forward(kernels_of(kernels), per_pass(buffers), per_pass(inputs), per_pass(ptrs), per_pass(slots),
                     std::move(groups), save);
}

c10::List<c10::List<Tensor>> passes_backward(const c10::List<Handle>& kernels,
                                             const c10::List<c10::List<Tensor>>& grad_states,
                                             const c10::List<c10::List<std::optional<Tensor>>>& grad_inputs,
                                             const c10::List<c10::List<int64_t>>& ptrs,
                                             const c10::List<c10::List<Tensor>>& slots,
                                             const c10::List<c10::List<c10::List<int64_t>>>& position_groups) {
  std::vector<std::vector<std::vector<int64_t>>> groups;
  for (const c10::List<c10::List<int64_t>> pass : position_groups) groups.push_back(nested(pass));
  auto grads = run_passes_backward(kernels_of(kernels), per_pass(grad_states), per_pass(grad_inputs),
                                   per_pass(ptrs), per_pass(slots), std::move(groups));
  c10::List<c10::List<Tensor>> out;
  for (auto& pass : grads) out.push_back(c10::List<Tensor>(pass));
  return out;
}

}  // namespace
}  // namespace graphtree

TORCH_LIBRARY(graphtree, m) {
  using namespace graphtree;
  m.class_<Kernel>("LevelKernel");
#define GRAPHTREE_KERNEL "__torch__.torch.classes.graphtree.LevelKernel"

  // The cells' kernels (level_loop.h's LevelKernel, one source file each), made from their weights.
  m.def("ChildSumLevels(Tensor U_iou, Tensor b_iou, Tensor U_f, Tensor b_f) -> " GRAPHTREE_KERNEL,
        [](Tensor U_iou, Tensor b_iou, Tensor U_f, Tensor b_f) { return held(child_sum_levels(U_iou, b_iou, U_f, b_f)); });
  m.def("NaryLevels(Tensor gate_weights_t, Tensor gate_bias, Tensor U, Tensor leaf_weight, Tensor leaf_bias, "
        "bool general) -> " GRAPHTREE_KERNEL,
        [](Tensor U_t, Tensor gate_bias, Tensor U, Tensor leaf_weight, Tensor leaf_bias, bool general) {
          return held(nary_levels(U_t, gate_bias, U, leaf_weight, leaf_bias, general));
        });
  m.def("SLSTMLevels(Tensor W_h, Tensor W_c, Tensor W_co, Tensor b, Tensor? leaf_weight=None, "
        "Tensor? leaf_bias=None) -> " GRAPHTREE_KERNEL,
        [](Tensor W_h, Tensor W_c, Tensor W_co, Tensor b, std::optional<Tensor> leaf_weight,
           std::optional<Tensor> leaf_bias) { return held(slstm_levels(W_h, W_c, W_co, b, leaf_weight, leaf_bias)); });
  m.def("LexicalizedLevels(Tensor W_x, Tensor W_h, Tensor W_c, Tensor W_co, Tensor b, bool lexicalized) -> "
        GRAPHTREE_KERNEL,
        [](Tensor W_x, Tensor W_h, Tensor W_c, Tensor W_co, Tensor b, bool lexicalized) {
          return held(lexicalized_levels(W_x, W_h, W_c, W_co, b, lexicalized));
        });
  m.def("TopDownLevels(Tensor W_x, Tensor b, Tensor W_h, Tensor W_c, Tensor W_co) -> " GRAPHTREE_KERNEL,
        [](Tensor W_x, Tensor b, Tensor W_h, Tensor W_c, Tensor W_co) {
          return held(top_down_levels(W_x, b, W_h, W_c, W_co));
        });
  m.def("LSTMRNNLevels(Tensor W_leaf, Tensor W_inner, Tensor W_cell, Tensor b, int kind) -> " GRAPHTREE_KERNEL,
        [](Tensor W_leaf, Tensor W_inner, Tensor W_cell, Tensor b, int64_t kind) {
          return held(lstm_rnn_levels(W_leaf, W_inner, W_cell, b, kind));
        });
  m.def("GatedHeadLevels(Tensor W_zx, Tensor b_z) -> " GRAPHTREE_KERNEL,
        [](Tensor W_zx, Tensor b_z) { return held(gated_head_levels(W_zx, b_z)); });
  m.def("FixedCombinationLevels(int mode) -> " GRAPHTREE_KERNEL,
        [](int64_t mode) { return held(fixed_combination_levels(mode)); });

  // The engine's loops over a kernel (engine_ops.cpp). They write the state buffers and add into the gradients
  // in place; run_passes_* take one entry per pass in every argument.
  m.def("run_levels_forward(" GRAPHTREE_KERNEL " kernel, Tensor(a!)[] buffers, Tensor[] inputs, int[] ptr, "
        "Tensor[] slots, int[][] position_groups, bool save) -> ()",
        levels_forward);
  m.def("run_levels_backward(" GRAPHTREE_KERNEL " kernel, Tensor(a!)[] grad_states, Tensor(b!)?[] grad_inputs, "
        "int[] ptr, Tensor[] slots, int[][] position_groups) -> Tensor[]",
        levels_backward);
  m.def("run_passes_forward(" GRAPHTREE_KERNEL "[] kernels, Tensor[][] buffers, Tensor[][] inputs, int[][] ptrs, "
        "Tensor[][] slots, int[][][] position_groups, bool save) -> ()",
        passes_forward);
  m.def("run_passes_backward(" GRAPHTREE_KERNEL "[] kernels, Tensor[][] grad_states, Tensor?[][] grad_inputs, "
        "int[][] ptrs, Tensor[][] slots, int[][][] position_groups) -> Tensor[][]",
        passes_backward);
  m.def("scatter_add_rows_(Tensor(a!) dst, Tensor index, Tensor src) -> ()", scatter_add_rows_);
  // w.t().contiguous() for a float32 matrix, in tiles split over threads (common.h).
  m.def("transposed(Tensor w) -> Tensor", [](const Tensor& w) { return transposed(w); });
  // out.bernoulli_(p, generator) for a contiguous float32 tensor, kept elements set to `value`: the same mask and
  // generator state as PyTorch's, drawn in blocks (dropout.cpp).
  m.def("bernoulli_(Tensor(a!) out, float p, Generator? generator=None, float value=1.0) -> ()", bernoulli_);
#undef GRAPHTREE_KERNEL
}
