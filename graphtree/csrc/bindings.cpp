// Python bindings of graphtree's compiled level kernels (built and loaded by graphtree/backend/native.py).
#include <torch/extension.h>

#include "common.h"
#include "level_loop.h"

#include <optional>
#include <vector>

void scatter_add_rows_(torch::Tensor dst, torch::Tensor index, torch::Tensor src);
void bernoulli_(torch::Tensor out, double p, std::optional<at::Generator> generator, double value);
void run_levels_forward(graphtree::LevelKernel& kernel, std::vector<torch::Tensor> buffers,
                        std::vector<torch::Tensor> inputs, std::vector<int64_t> ptr, std::vector<torch::Tensor> slots,
                        std::vector<std::vector<int64_t>> position_groups, bool save);
std::vector<torch::Tensor> run_levels_backward(
    graphtree::LevelKernel& kernel, std::vector<torch::Tensor> grad_states,
    std::vector<std::optional<torch::Tensor>> grad_inputs, std::vector<int64_t> ptr,
    std::vector<torch::Tensor> slots, std::vector<std::vector<int64_t>> position_groups);
void run_passes_forward(std::vector<std::shared_ptr<graphtree::LevelKernel>> kernels,
                        std::vector<std::vector<torch::Tensor>> buffers, std::vector<std::vector<torch::Tensor>> inputs,
                        std::vector<std::vector<int64_t>> ptrs, std::vector<std::vector<torch::Tensor>> slots,
                        std::vector<std::vector<std::vector<int64_t>>> position_groups, bool save);
std::vector<std::vector<torch::Tensor>> run_passes_backward(
    std::vector<std::shared_ptr<graphtree::LevelKernel>> kernels, std::vector<std::vector<torch::Tensor>> grad_states,
    std::vector<std::vector<std::optional<torch::Tensor>>> grad_inputs, std::vector<std::vector<int64_t>> ptrs,
    std::vector<std::vector<torch::Tensor>> slots, std::vector<std::vector<std::vector<int64_t>>> position_groups);
namespace graphtree {
// Each kernel file's classes.
void bind_child_sum_levels(pybind11::module& m);
void bind_nary_levels(pybind11::module& m);
void bind_peephole_levels(pybind11::module& m);
void bind_lstm_rnn_levels(pybind11::module& m);
void bind_head_levels(pybind11::module& m);
}  // namespace graphtree

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  py::class_<graphtree::LevelKernel, std::shared_ptr<graphtree::LevelKernel>>(
      m, "LevelKernel", "A cell's level math for the engine's compiled level loop (graphtree/csrc/level_loop.h)");
  graphtree::bind_child_sum_levels(m);
  graphtree::bind_nary_levels(m);
  graphtree::bind_peephole_levels(m);
  graphtree::bind_lstm_rnn_levels(m);
  graphtree::bind_head_levels(m);
  m.def("run_levels_forward", &run_levels_forward, "the engine's forward level loop over a LevelKernel",
        py::arg("kernel"), py::arg("buffers"), py::arg("inputs"), py::arg("ptr"), py::arg("slots"),
        py::arg("position_groups"), py::arg("save"));
  m.def("run_levels_backward", &run_levels_backward,
        "the engine's backward level loop over a LevelKernel; returns its parameter gradients",
        py::arg("kernel"), py::arg("grad_states"), py::arg("grad_inputs"), py::arg("ptr"), py::arg("slots"),
        py::arg("position_groups"));
  m.def("run_passes_forward", &run_passes_forward,
        "run_levels_forward of several independent passes, side by side on PyTorch's threads (one pass a thread)",
        py::arg("kernels"), py::arg("buffers"), py::arg("inputs"), py::arg("ptrs"), py::arg("slots"),
        py::arg("position_groups"), py::arg("save"));
  m.def("run_passes_backward", &run_passes_backward,
        "run_levels_backward of the passes of a saving run_passes_forward, side by side; each pass's parameter "
        "gradients",
        py::arg("kernels"), py::arg("grad_states"), py::arg("grad_inputs"), py::arg("ptrs"), py::arg("slots"),
        py::arg("position_groups"));
  m.def("bernoulli_", &bernoulli_,
        "out.bernoulli_(p, generator) for a contiguous float32 tensor (kept elements set to `value`): the same mask "
        "and generator state, drawn in blocks",
        py::arg("out"), py::arg("p"), py::arg("generator") = py::none(), py::arg("value") = 1.0);
  m.def("transposed", &graphtree::transposed, "w.t().contiguous() for a float32 matrix, in tiles split over threads",
        py::arg("w"));
  m.def("scatter_add_rows_", &scatter_add_rows_, "dst[index[r]] += src[r], in place (the engine's child gradients)");
}
