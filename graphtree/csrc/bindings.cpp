// Python bindings of graphtree's compiled level kernels (built and loaded by graphtree/backend/native.py): the
// kernels' base class, then what each source file registered (a static Binding: its kernels and functions).
#include "level_loop.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  py::class_<graphtree::LevelKernel, std::shared_ptr<graphtree::LevelKernel>>(
      m, "LevelKernel", "A cell's level math for the engine's compiled level loop (graphtree/csrc/level_loop.h)");
  for (auto add : graphtree::binders()) add(m);
  m.def("transposed", &graphtree::transposed, "w.t().contiguous() for a float32 matrix, in tiles split over threads",
        py::arg("w"));
}
