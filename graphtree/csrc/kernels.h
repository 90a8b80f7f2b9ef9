// What the kernels' sources give bindings.cpp to register with PyTorch: each cell's kernel maker (the kernel class
// itself stays inside its source file) and the engine's loops and helpers. Plain C++, so that no source but
// bindings.cpp includes PyTorch's registration headers.
#pragma once

#include "level_loop.h"

namespace graphtree {

using KernelPtr = std::shared_ptr<LevelKernel>;

// The cells' kernels (the weights in their kernels' layout, as each cell's level_kernel method hands them over).
KernelPtr child_sum_levels(Tensor U_iou, Tensor b_iou, Tensor U_f, Tensor b_f);                 // child_sum_level.cpp
KernelPtr nary_levels(Tensor gate_weights_t, Tensor gate_bias, Tensor U, Tensor leaf_weight, Tensor leaf_bias,
                      bool general);                                                             // nary_level.cpp
KernelPtr slstm_levels(Tensor W_h, Tensor W_c, Tensor W_co, Tensor b, std::optional<Tensor> leaf_weight,
                       std::optional<Tensor> leaf_bias);                                         // peephole_level.cpp
KernelPtr lexicalized_levels(Tensor W_x, Tensor W_h, Tensor W_c, Tensor W_co, Tensor b, bool lexicalized);
KernelPtr top_down_levels(Tensor W_x, Tensor b, Tensor W_h, Tensor W_c, Tensor W_co);
KernelPtr lstm_rnn_levels(Tensor W_leaf, Tensor W_inner, Tensor W_cell, Tensor b, int64_t kind);  // lstm_rnn_level.cpp
KernelPtr gated_head_levels(Tensor W_zx, Tensor b_z);                                            // head_level.cpp
KernelPtr fixed_combination_levels(int64_t mode);

// The engine's level loops (engine_ops.cpp): forward, and backward returning the kernel's weight gradients; several
// independent passes side by side; the child gradients' scatter-add.
void run_levels_forward(LevelKernel& kernel, std::vector<Tensor> buffers, std::vector<Tensor> inputs,
                        std::vector<int64_t> ptr, std::vector<Tensor> slots,
                        std::vector<std::vector<int64_t>> position_groups, bool save);
std::vector<Tensor> run_levels_backward(LevelKernel& kernel, std::vector<Tensor> grad_states,
                                        std::vector<std::optional<Tensor>> grad_inputs, std::vector<int64_t> ptr,
                                        std::vector<Tensor> slots, std::vector<std::vector<int64_t>> position_groups);
void run_passes_forward(std::vector<KernelPtr> kernels, std::vector<std::vector<Tensor>> buffers,
                        std::vector<std::vector<Tensor>> inputs, std::vector<std::vector<int64_t>> ptrs,
                        std::vector<std::vector<Tensor>> slots,
                        std::vector<std::vector<std::vector<int64_t>>> position_groups, bool save);
std::vector<std::vector<Tensor>> run_passes_backward(
    std::vector<KernelPtr> kernels, std::vector<std::vector<Tensor>> grad_states,
    std::vector<std::vector<std::optional<Tensor>>> grad_inputs, std::vector<std::vector<int64_t>> ptrs,
    std::vector<std::vector<Tensor>> slots, std::vector<std::vector<std::vector<int64_t>>> position_groups);
void scatter_add_rows_(Tensor dst, Tensor index, Tensor src);

// Dropout's mask (dropout.cpp).
void bernoulli_(Tensor out, double p, std::optional<at::Generator> generator, double value);

}  // namespace graphtree
