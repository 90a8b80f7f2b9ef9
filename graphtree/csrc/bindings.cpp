// Python bindings of graphtree's compiled level kernels (loaded by graphtree/nn/native.py).
#include <torch/extension.h>

#include "level_loop.h"

#include <optional>
#include <vector>

std::vector<torch::Tensor> nary_level_forward(torch::Tensor gates, torch::Tensor c_children);
std::vector<torch::Tensor> nary_level_backward(torch::Tensor grad_h, torch::Tensor grad_c, torch::Tensor activated,
                                               torch::Tensor c_children, torch::Tensor tanh_c);
std::vector<torch::Tensor> peephole_level_cell(torch::Tensor pre, std::optional<torch::Tensor> c_terms,
                                               torch::Tensor c_children);
std::vector<torch::Tensor> peephole_level_output(torch::Tensor pre, torch::Tensor co, torch::Tensor c_t);
torch::Tensor peephole_level_output_backward(torch::Tensor grad_h, torch::Tensor o, torch::Tensor tanh_c);
std::vector<torch::Tensor> peephole_level_cell_backward(torch::Tensor grad_c, torch::Tensor grad_h, torch::Tensor o,
                                                        torch::Tensor tanh_c, torch::Tensor grad_c_from_o,
                                                        torch::Tensor grad_o, torch::Tensor activated,
                                                        torch::Tensor c_children);
std::vector<torch::Tensor> child_sum_level_forward(torch::Tensor Wx, torch::Tensor iou_terms, torch::Tensor uf_terms,
                                                   torch::Tensor c_children);
std::vector<torch::Tensor> child_sum_level_backward(torch::Tensor grad_h, torch::Tensor grad_c,
                                                    torch::Tensor activated, torch::Tensor f,
                                                    torch::Tensor c_children, torch::Tensor tanh_c);
std::vector<torch::Tensor> lstm_rnn_level_cell(torch::Tensor m_children, torch::Tensor c_children, torch::Tensor b,
                                               int64_t kind);
std::vector<torch::Tensor> lstm_rnn_level_output(torch::Tensor m_children, torch::Tensor cell_terms, torch::Tensor c,
                                                 torch::Tensor b, int64_t kind);
torch::Tensor lstm_rnn_level_output_backward(torch::Tensor grad_m, torch::Tensor grad_p, torch::Tensor o,
                                             torch::Tensor g_c);
std::vector<torch::Tensor> lstm_rnn_level_cell_backward(torch::Tensor grad_c, torch::Tensor grad_c_from_cell,
                                                        torch::Tensor grad_p, torch::Tensor grad_cell,
                                                        torch::Tensor o, torch::Tensor g_c, torch::Tensor g_a,
                                                        torch::Tensor gates, torch::Tensor m_children,
                                                        torch::Tensor c_children, int64_t kind);
void scatter_add_rows_(torch::Tensor dst, torch::Tensor index, torch::Tensor src);
void run_levels_forward(graphtree::LevelKernel& kernel, std::vector<torch::Tensor> buffers,
                        std::vector<torch::Tensor> inputs, std::vector<int64_t> ptr, std::vector<torch::Tensor> slots,
                        std::vector<std::vector<int64_t>> position_groups, bool save);
std::vector<std::pair<std::string, torch::Tensor>> run_levels_backward(
    graphtree::LevelKernel& kernel, std::vector<torch::Tensor> grad_states,
    std::vector<std::optional<torch::Tensor>> grad_inputs, std::vector<int64_t> ptr,
    std::vector<torch::Tensor> slots, std::vector<std::vector<int64_t>> position_groups);
void bind_nary_levels(pybind11::module& m);
void bind_child_sum_levels(pybind11::module& m);
void bind_slstm_levels(pybind11::module& m);
void bind_lexicalized_levels(pybind11::module& m);
void bind_top_down_levels(pybind11::module& m);
void bind_gated_head_levels(pybind11::module& m);
void bind_leaf_sum_levels(pybind11::module& m);
void bind_lstm_rnn_levels(pybind11::module& m);

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("nary_level_forward", &nary_level_forward, "N-ary Tree-LSTM level, elementwise forward (in place on gates)");
  m.def("nary_level_backward", &nary_level_backward, "N-ary Tree-LSTM level, elementwise backward");
  m.def("child_sum_level_forward", &child_sum_level_forward, "Child-Sum Tree-LSTM level, elementwise forward");
  m.def("child_sum_level_backward", &child_sum_level_backward, "Child-Sum Tree-LSTM level, elementwise backward");
  m.def("peephole_level_cell", &peephole_level_cell, "peephole Tree-LSTM level: gates and new cell",
        py::arg("pre"), py::arg("c_terms"), py::arg("c_children"));
  m.def("peephole_level_output", &peephole_level_output, "peephole Tree-LSTM level: output gate and h");
  m.def("peephole_level_output_backward", &peephole_level_output_backward,
        "peephole Tree-LSTM level: output gate gradient");
  m.def("peephole_level_cell_backward", &peephole_level_cell_backward,
        "peephole Tree-LSTM level: remaining gradients");
  m.def("lstm_rnn_level_cell", &lstm_rnn_level_cell, "LSTM-RNN level: gates and the parent's memory");
  m.def("lstm_rnn_level_output", &lstm_rnn_level_output, "LSTM-RNN level: output gate and output");
  m.def("lstm_rnn_level_output_backward", &lstm_rnn_level_output_backward,
        "LSTM-RNN level: gradient reaching W_cell c_p");
  m.def("lstm_rnn_level_cell_backward", &lstm_rnn_level_cell_backward, "LSTM-RNN level: remaining gradients");
  py::class_<graphtree::LevelKernel, std::shared_ptr<graphtree::LevelKernel>>(
      m, "LevelKernel", "A cell's level math for the engine's compiled level loop (graphtree/csrc/level_loop.h)");
  bind_nary_levels(m);
  bind_child_sum_levels(m);
  bind_slstm_levels(m);
  bind_lexicalized_levels(m);
  bind_top_down_levels(m);
  bind_gated_head_levels(m);
  bind_leaf_sum_levels(m);
  bind_lstm_rnn_levels(m);
  m.def("run_levels_forward", &run_levels_forward, "the engine's forward level loop over a LevelKernel",
        py::arg("kernel"), py::arg("buffers"), py::arg("inputs"), py::arg("ptr"), py::arg("slots"),
        py::arg("position_groups"), py::arg("save"));
  m.def("run_levels_backward", &run_levels_backward,
        "the engine's backward level loop over a LevelKernel; returns its parameter gradients by name",
        py::arg("kernel"), py::arg("grad_states"), py::arg("grad_inputs"), py::arg("ptr"), py::arg("slots"),
        py::arg("position_groups"));
  m.def("scatter_add_rows_", &scatter_add_rows_, "dst[index[r]] += src[r], in place (the engine's child gradients)");
}
