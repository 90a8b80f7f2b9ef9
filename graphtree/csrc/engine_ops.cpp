// The propagation engine's compiled level loops over a LevelKernel (level_loop.h), and its row scatter-add
// (graphtree/engine/): a level's gradients flow back into its children's rows. On CPU,
// index_put_(accumulate=True) sorts its indices first, which dominates on large levels; this is one pass. Rows
// may repeat (a DAG node with several parents, the padding row of empty slots), so the pass is serial over rows
// and vectorized within a row.

#include "kernels.h"

namespace graphtree {

// dst[index[r]] += src[r] for every row r. dst: [m, w], index: [n] int64 in [0, m), src: [n, w]. In place.
void scatter_add_rows_(at::Tensor dst, at::Tensor index, at::Tensor src) {
  check(dst, "dst");
  check(src, "src");
  TORCH_CHECK(dst.is_contiguous(), "dst must be contiguous (it is written in place)");
  TORCH_CHECK(index.device().is_cpu() && index.scalar_type() == at::kLong && index.dim() == 1,
              "index must be a 1-d int64 CPU tensor");
  src = src.contiguous();
  index = index.contiguous();
  const int64_t n = index.numel(), w = dst.size(1), m = dst.size(0);
  TORCH_CHECK(dst.dim() == 2 && src.dim() == 2 && src.size(0) == n && src.size(1) == w,
              "expected dst [m, w], index [n], src [n, w]");
  const int64_t* I = index.data_ptr<int64_t>();
  for (int64_t r = 0; r < n; ++r) TORCH_CHECK(I[r] >= 0 && I[r] < m, "index ", I[r], " out of range for ", m, " rows");
  float* D = dst.data_ptr<float>();
  const float* S = src.data_ptr<float>();
  for (int64_t r = 0; r < n; ++r) {
    float* d = D + I[r] * w;
    const float* s = S + r * w;
#pragma omp simd
    for (int64_t k = 0; k < w; ++k) d[k] += s[k];
  }
}

// dst[r] = src[index[r]] for every row r; dst [n, w] and src [m, w] contiguous float32, index [n] int64 in
// [0, m) (checked). A level's gather in the forward loop: index_select's dispatch and setup cost more than
// the copy itself on a tree level's few rows.
static void gather_rows_into(at::Tensor& dst, const at::Tensor& src, const at::Tensor& index) {
  const int64_t n = index.numel(), w = src.size(1), m = src.size(0);
  const int64_t* I = index.data_ptr<int64_t>();
  const float* S = src.data_ptr<float>();
  float* D = dst.data_ptr<float>();
  for (int64_t r = 0; r < n; ++r) TORCH_CHECK(I[r] >= 0 && I[r] < m, "index ", I[r], " out of range for ", m, " rows");
  for (int64_t r = 0; r < n; ++r) std::memcpy(D + r * w, S + I[r] * w, sizeof(float) * w);
}

static std::vector<Level> levels_of(const std::vector<int64_t>& ptr, const std::vector<at::Tensor>& slots,
                                        const std::vector<std::vector<int64_t>>& position_groups) {
  TORCH_CHECK(ptr.size() == slots.size() + 1, "run_levels: ptr must have one entry more than slots");
  TORCH_CHECK(position_groups.empty() || position_groups.size() == slots.size(),
              "run_levels: position_groups must be empty or have one entry per level");
  std::vector<Level> levels;
  levels.reserve(slots.size());
  for (size_t l = 0; l < slots.size(); ++l) {
    const int64_t n = ptr[l + 1] - ptr[l];
    TORCH_CHECK(n > 0 && slots[l].numel() % n == 0, "run_levels: level ", l, " has ", n, " rows and ",
                slots[l].numel(), " slots");
    TORCH_CHECK(slots[l].device().is_cpu() && slots[l].scalar_type() == at::kLong && slots[l].is_contiguous(),
                "run_levels: slots must be contiguous int64 CPU tensors");
    std::vector<int64_t> groups = position_groups.empty() ? std::vector<int64_t>{} : position_groups[l];
    int64_t grouped = 0;
    for (auto size : groups) grouped += size;
    TORCH_CHECK(groups.empty() || grouped == n, "run_levels: level ", l, " has ", n, " rows but its position groups ",
                grouped);
    levels.push_back({static_cast<int64_t>(l), ptr[l], ptr[l + 1], slots[l].numel() / n, slots[l], std::move(groups)});
  }
  return levels;
}

// The forward loop of graphtree/engine/definition.py (run_update_levels) over a LevelKernel. buffers: the
// level-sorted state buffers, [num_nodes + 1, d] each (the last row zero: empty slots point there), written level by level;
// inputs: level-sorted per-node inputs; ptr: level boundaries; slots: each level's flat predecessor index;
// position_groups: each level's row groups (see Level), or empty.
void run_levels_forward(LevelKernel& kernel, std::vector<at::Tensor> buffers,
                        std::vector<at::Tensor> inputs, std::vector<int64_t> ptr, std::vector<at::Tensor> slots,
                        std::vector<std::vector<int64_t>> position_groups, bool save) {
  const auto levels = levels_of(ptr, slots, position_groups);
  for (const auto& buffer : buffers) {
    check(buffer, "every state buffer");
    TORCH_CHECK(buffer.dim() == 2 && buffer.is_contiguous(), "run_levels: state buffers must be contiguous [rows, d]");
  }
  check_all(inputs, "every input");  // the kernels index rows: every level's rows of an input are contiguous
  kernel.begin(levels, inputs, buffers, save);
  std::vector<at::Tensor> level_inputs(inputs.size()), children(buffers.size());
  for (const auto& level : levels) {
    for (size_t s = 0; s < buffers.size(); ++s) {
      if (level.width == 0) {
        children[s] = buffers[s].narrow(0, 0, 0);
        continue;
      }
      auto destination = kernel.gather_destination(level, static_cast<int64_t>(s));
      if (!destination.defined()) {
        destination = at::empty({level.slots.numel(), buffers[s].size(1)}, buffers[s].options());
      }
      TORCH_CHECK(destination.is_contiguous() && destination.size(0) == level.slots.numel() &&
                      destination.size(1) == buffers[s].size(1),
                  "run_levels: a gather destination must be a contiguous [slots, d] tensor");
      gather_rows_into(destination, buffers[s], level.slots);
      children[s] = destination;
    }
    for (size_t k = 0; k < inputs.size(); ++k) level_inputs[k] = inputs[k].narrow(0, level.begin, level.end - level.begin);
    kernel.forward(level, level_inputs, children, buffers, save);
  }
}

// The backward loop over the kernel of a saving forward loop: the derivative of run_levels_forward, levels in
// reverse. grad_states: the gradients of the buffers, added into in place; grad_inputs: of the inputs (None: not
// needed), likewise. Returns the parameter gradients, in the order of the kernel's param_grads().
std::vector<at::Tensor> run_levels_backward(
    LevelKernel& kernel, std::vector<at::Tensor> grad_states,
    std::vector<std::optional<at::Tensor>> grad_inputs, std::vector<int64_t> ptr,
    std::vector<at::Tensor> slots, std::vector<std::vector<int64_t>> position_groups) {
  const auto levels = levels_of(ptr, slots, position_groups);
  // The kernels index rows; these are the loop's own (the caller does not read them back), made contiguous.
  check_all(grad_states, "every state's gradient");
  std::vector<at::Tensor> whole_grad_inputs;  // undefined where none is needed
  for (const auto& grad : grad_inputs) {         // the caller's own, added into in place: a copy would not do
    whole_grad_inputs.push_back(grad ? *grad : at::Tensor());
    if (!grad) continue;
    check(*grad, "every input's gradient");
    TORCH_CHECK(grad->is_contiguous(), "run_levels: input gradients must be contiguous (the kernels index rows)");
  }
  kernel.begin_backward(grad_states);
  std::vector<at::Tensor> level_grads(grad_states.size()), level_grad_inputs(grad_inputs.size());
  for (auto level = levels.rbegin(); level != levels.rend(); ++level) {
    const int64_t n = level->end - level->begin;
    for (size_t s = 0; s < grad_states.size(); ++s) level_grads[s] = grad_states[s].narrow(0, level->begin, n);
    for (size_t k = 0; k < grad_inputs.size(); ++k) {
      const auto& grad = whole_grad_inputs[k];
      level_grad_inputs[k] = grad.defined() ? grad.narrow(0, level->begin, n) : at::Tensor();
    }
    auto child_grads = kernel.backward(*level, level_grads, level_grad_inputs);
    if (level->width == 0) continue;
    for (size_t s = 0; s < child_grads.size() && s < grad_states.size(); ++s) {
      if (!child_grads[s].defined()) continue;
      // Rows of the buffer they are added into would be read while written: scatter a copy.
      auto grads = child_grads[s].is_alias_of(grad_states[s]) ? child_grads[s].clone() : child_grads[s];
      scatter_add_rows_(grad_states[s], level->slots, grads);
    }
  }
  kernel.finish_backward(whole_grad_inputs);
  return kernel.param_grads();
}

// f(p) for each of several passes, `name` checking that each argument has one entry per pass (`sizes`): the
// passes spread over the threads of PyTorch's pool, each pass on one thread.
template <typename F>
static void each_pass(const char* name, size_t passes, std::initializer_list<size_t> sizes, const F& f) {
  for (auto size : sizes) TORCH_CHECK(size == passes, name, ": one entry per pass in every argument");
  at::parallel_for(0, static_cast<int64_t>(passes), 1, [&](int64_t begin, int64_t end) {
    at::NoGradGuard no_grad;  // a pool thread's own grad mode is on; the caller's (a Function's forward) is off
    for (int64_t p = begin; p < end; ++p) f(p);
  });
}

// Several independent passes (no pass reads another's states) side by side: run_levels_forward of each, the
// passes spread over the threads of PyTorch's pool, each pass on one thread. A pass's level products are
// too small for two threads to share well, so two chains of levels at once finish sooner than one after the
// other with both threads on every product. Inside the parallel region a pass's products run on its one thread
// (nested regions run serially), so each pass gives exactly what run_levels_forward gives in a one-thread
// process. The arguments are run_levels_forward's, one entry per pass.
void run_passes_forward(std::vector<std::shared_ptr<LevelKernel>> kernels,
                        std::vector<std::vector<at::Tensor>> buffers, std::vector<std::vector<at::Tensor>> inputs,
                        std::vector<std::vector<int64_t>> ptrs, std::vector<std::vector<at::Tensor>> slots,
                        std::vector<std::vector<std::vector<int64_t>>> position_groups, bool save) {
  each_pass("run_passes_forward", kernels.size(),
            {buffers.size(), inputs.size(), ptrs.size(), slots.size(), position_groups.size()}, [&](int64_t p) {
              run_levels_forward(*kernels[p], buffers[p], inputs[p], ptrs[p], slots[p], position_groups[p], save);
            });
}

// run_levels_backward of each pass of a saving run_passes_forward, side by side likewise; each pass's parameter
// gradients.
std::vector<std::vector<at::Tensor>> run_passes_backward(
    std::vector<std::shared_ptr<LevelKernel>> kernels, std::vector<std::vector<at::Tensor>> grad_states,
    std::vector<std::vector<std::optional<at::Tensor>>> grad_inputs, std::vector<std::vector<int64_t>> ptrs,
    std::vector<std::vector<at::Tensor>> slots, std::vector<std::vector<std::vector<int64_t>>> position_groups) {
  std::vector<std::vector<at::Tensor>> grads(kernels.size());
  each_pass("run_passes_backward", kernels.size(),
            {grad_states.size(), grad_inputs.size(), ptrs.size(), slots.size(), position_groups.size()},
            [&](int64_t p) {
              grads[p] = run_levels_backward(*kernels[p], grad_states[p], grad_inputs[p], ptrs[p], slots[p],
                                             position_groups[p]);
            });
  return grads;
}

}  // namespace graphtree
