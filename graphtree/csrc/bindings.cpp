// Python bindings of graphtree's compiled level kernels (loaded by graphtree/nn/native.py).
#include <torch/extension.h>

#include <vector>

std::vector<torch::Tensor> nary_level_forward(torch::Tensor gates, torch::Tensor c_children);
std::vector<torch::Tensor> nary_level_backward(torch::Tensor grad_h, torch::Tensor grad_c, torch::Tensor activated,
                                               torch::Tensor c_children, torch::Tensor tanh_c);
std::vector<torch::Tensor> slstm_level_cell(torch::Tensor h_terms, torch::Tensor c_terms, torch::Tensor c_children);
std::vector<torch::Tensor> slstm_level_output(torch::Tensor h_terms, torch::Tensor co, torch::Tensor c_t);
torch::Tensor slstm_level_output_backward(torch::Tensor grad_h, torch::Tensor o, torch::Tensor tanh_c);
std::vector<torch::Tensor> slstm_level_cell_backward(torch::Tensor grad_c, torch::Tensor grad_h, torch::Tensor o,
                                                     torch::Tensor tanh_c, torch::Tensor grad_c_from_o,
                                                     torch::Tensor grad_o, torch::Tensor activated,
                                                     torch::Tensor c_children);
std::vector<torch::Tensor> child_sum_level_forward(torch::Tensor Wx, torch::Tensor iou_terms, torch::Tensor uf_terms,
                                                   torch::Tensor c_children);
std::vector<torch::Tensor> child_sum_level_backward(torch::Tensor grad_h, torch::Tensor grad_c,
                                                    torch::Tensor activated, torch::Tensor f,
                                                    torch::Tensor c_children, torch::Tensor tanh_c);

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("nary_level_forward", &nary_level_forward, "N-ary Tree-LSTM level, elementwise forward (in place on gates)");
  m.def("nary_level_backward", &nary_level_backward, "N-ary Tree-LSTM level, elementwise backward");
  m.def("child_sum_level_forward", &child_sum_level_forward, "Child-Sum Tree-LSTM level, elementwise forward");
  m.def("child_sum_level_backward", &child_sum_level_backward, "Child-Sum Tree-LSTM level, elementwise backward");
  m.def("slstm_level_cell", &slstm_level_cell, "S-LSTM level, eqs 1-5");
  m.def("slstm_level_output", &slstm_level_output, "S-LSTM level, eqs 6-7");
  m.def("slstm_level_output_backward", &slstm_level_output_backward, "S-LSTM level, output gate gradient");
  m.def("slstm_level_cell_backward", &slstm_level_cell_backward, "S-LSTM level, remaining gradients");
}
