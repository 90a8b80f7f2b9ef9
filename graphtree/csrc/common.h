// Helpers shared by graphtree's compiled level kernels (each paper cell's fast path: the cell's level_kernel
// method in graphtree/nn/ makes its kernel, graphtree/backend/dispatch.py chooses it), with the headers that every
// source file uses. Only ATen's tensor and the few operators the kernels call are included, not
// torch/extension.h (5,332 headers with pybind11 and the C++ frontend, 34 s of a compiler's time to read, where
// these take 6 s: docs/performance.md). bindings.cpp alone registers the kernels with PyTorch (TORCH_LIBRARY).
#pragma once

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

namespace graphtree {

using at::Tensor;

// Every kernel takes float32 CPU tensors; the Python side (native_kernels) routes everything else to PyTorch.

inline void check(const Tensor& t, const char* name) {
  TORCH_CHECK(t.device().is_cpu(), name, " must be a CPU tensor");
  TORCH_CHECK(t.scalar_type() == at::kFloat, name, " must be float32");
}

// check() every argument, and make each contiguous in place (the kernels index raw rows).
inline void check_all(std::initializer_list<Tensor*> tensors, const char* name = "every argument") {
  for (auto* t : tensors) {
    check(*t, name);
    *t = t->contiguous();
  }
}

inline void check_all(std::vector<Tensor>& tensors, const char* name) {
  for (auto& t : tensors) check_all({&t}, name);
}

// w ([rows, cols], float32) transposed into a new contiguous [cols, rows] tensor: w.t().contiguous(), the same
// values (a copy is exact), in 16 x 16 tiles, their bands of rows split over PyTorch's threads. The kernels
// make their transposed weights anew for every pass, since the optimizer changes the weights between passes,
// and PyTorch's strided copy took most of that set-up (benchmarks/kernel_setup.py times both copies).
inline Tensor transposed(const Tensor& w) {
  TORCH_CHECK(w.dim() == 2, "transposed: expected a matrix");
  check(w, "transposed's matrix");
  const auto src = w.contiguous();
  const int64_t rows = src.size(0), cols = src.size(1);
  auto out = at::empty({cols, rows}, src.options());
  const float* s = src.data_ptr<float>();
  float* o = out.data_ptr<float>();
  constexpr int64_t tile = 16;
  const int64_t bands = (rows + tile - 1) / tile;
  // Bands of 8 tile rows (128 rows) a task; a matrix under 64K elements (256 KB) is one task, since waking a
  // second thread for it costs more than it saves.
  const int64_t grain = src.numel() >= (int64_t{1} << 16) ? 8 : bands;
  at::parallel_for(0, bands, grain, [&](int64_t band_begin, int64_t band_end) {
    for (int64_t r0 = band_begin * tile; r0 < std::min(rows, band_end * tile); r0 += tile) {
      const int64_t r1 = std::min(rows, r0 + tile);
      for (int64_t c0 = 0; c0 < cols; c0 += tile) {
        const int64_t c1 = std::min(cols, c0 + tile);
        if (r1 - r0 == tile) {
          for (int64_t c = c0; c < c1; ++c) {
            float* dst = o + c * rows + r0;
#pragma omp simd
            for (int64_t r = 0; r < tile; ++r) dst[r] = s[(r0 + r) * cols + c];
          }
        } else {
          for (int64_t c = c0; c < c1; ++c)
            for (int64_t r = r0; r < r1; ++r) o[c * rows + r] = s[r * cols + c];
        }
      }
    }
  });
  return out;
}

// The int64 tensor of a list of row numbers (torch::tensor's, without the C++ frontend).
inline Tensor index_tensor(const std::vector<int64_t>& rows) {
  auto out = at::empty({static_cast<int64_t>(rows.size())}, at::kLong);
  std::copy(rows.begin(), rows.end(), out.data_ptr<int64_t>());
  return out;
}

// A weight as it is (for the gradients' products) and transposed (for the forward products): checked, contiguous.
struct Weight {
  Tensor w, t;
};

inline Weight with_transposed(const Tensor& weight) {
  auto w = weight.contiguous();
  return {w, transposed(w)};  // transposed() checks it
}

// exp(x) that the compiler can vectorize (std::exp is a scalar libm call here): Cody-Waite range
// reduction x = n ln2 + r with |r| <= ln2 / 2, a degree-6 polynomial for exp(r) (the coefficients of the
// Cephes library's expf), and 2^n put into the exponent bits. Relative error about 2e-7 over the clamped
// range [-87, 88], where the result is a normal float; NaN stays NaN.
inline float vexp(float x) {
  x = x < -87.f ? -87.f : (x > 88.f ? 88.f : x);
  const float n = std::floor(x * 1.44269504088896341f + 0.5f);
  float r = x - n * 0.693359375f;  // ln2 in two parts, the first exact in few bits
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

inline float sigmoid(float z) { return 1.f / (1.f + vexp(-z)); }

inline float tanh_of(float z) { return 1.f - 2.f / (vexp(2.f * z) + 1.f); }

// A row's memory through N ordered forget gates, c += sum_l f_l c_l, where f (the gates) and c_children (the
// children's memories) hold N consecutive d-wide blocks; and its derivative, given gc = dL/dc: each gate's
// pre-activation gradient gc c_l f_l (1 - f_l) into grad_f, each child memory's gc f_l into grad_children.
inline void add_forgotten(float* c, const float* f, const float* c_children, int64_t N, int64_t d) {
  for (int64_t l = 0; l < N; ++l) {
    const float *fl = f + l * d, *cl = c_children + l * d;
#pragma omp simd
    for (int64_t k = 0; k < d; ++k) c[k] += fl[k] * cl[k];
  }
}

inline void forgotten_backward(const float* gc, const float* f, const float* c_children, float* grad_f,
                               float* grad_children, int64_t N, int64_t d) {
  for (int64_t l = 0; l < N; ++l) {
    const float *fl = f + l * d, *cl = c_children + l * d;
    float *gfl = grad_f + l * d, *gcl = grad_children + l * d;
#pragma omp simd
    for (int64_t k = 0; k < d; ++k) {
      gfl[k] = gc[k] * cl[k] * fl[k] * (1.f - fl[k]);
      gcl[k] = gc[k] * fl[k];
    }
  }
}

// f(r) for each of a level's n rows, on the calling thread. The kernels are built with OpenMP for the engine's
// side-by-side passes (engine_ops.cpp), each on one thread of PyTorch's pool; splitting the row loops of tree
// levels over two threads showed no consistent gain, so the loops may share scratch rows.
template <typename F>
inline void for_rows(int64_t n, const F& f) {
  for (int64_t r = 0; r < n; ++r) f(r);
}

// Input terms W x + b ([n, 4 d] rows, a block per gate, the forget gate's at block f) and pre-activations of the
// same gates with N forget gates, f_1 .. f_N from block f on ([n, (N + 3) d]): x's block b feeds pre-activation
// blocks [first, first + count), every f_l for the forget gate's, its own gate for each other block. fn(b, x, p)
// for each pair, x and p the blocks' offsets in the raw rows of the n rows.
template <typename F>
inline void each_input_block(int64_t n, int64_t N, int64_t d, int64_t f, const F& fn) {
  for_rows(n, [&](int64_t r) {
    for (int64_t b = 0; b < 4; ++b) {
      const int64_t first = b <= f ? b : b + N - 1, count = b == f ? N : 1;
      for (int64_t l = 0; l < count; ++l) fn(b, (r * 4 + b) * d, (r * (N + 3) + first + l) * d);
    }
  });
}

// pre += the input terms, the block at `doubled` twice: the N-ary kernel doubles its candidate's weights (one
// sigmoid serves every gate there: tanh(z) = 2 sigmoid(2 z) - 1).
inline void add_input_terms(const Tensor& pre, const Tensor& terms, int64_t N, int64_t d, int64_t f,
                            int64_t doubled = -1) {
  float* P = pre.data_ptr<float>();
  const float* X = terms.data_ptr<float>();
  each_input_block(pre.size(0), N, d, f, [&](int64_t b, int64_t x, int64_t p) {
    const float scale = b == doubled ? 2.f : 1.f;
#pragma omp simd
    for (int64_t k = 0; k < d; ++k) P[p + k] += scale * X[x + k];
  });
}

// grad_terms += the input terms' gradient from that of the pre-activations (with respect to the undoubled
// candidate): each gate's block, the sum over the f_l for the forget gate's.
inline void add_input_terms_grad(const Tensor& grad_pre, const Tensor& grad_terms, int64_t N, int64_t d, int64_t f) {
  const float* G = grad_pre.data_ptr<float>();
  float* X = grad_terms.data_ptr<float>();
  each_input_block(grad_pre.size(0), N, d, f, [&](int64_t, int64_t x, int64_t g) {
#pragma omp simd
    for (int64_t k = 0; k < d; ++k) X[x + k] += G[g + k];
  });
}

// Independent parts of a level's work (products with different weights, or of different rows), f(k) for k in
// [0, count), side by side: each on a thread of PyTorch's pool, everything inside a part on that one thread (a
// product called inside a parallel region runs serially), so each part computes exactly what it computes in a
// one-thread process. With one thread, or inside a parallel region already (a side-by-side pass), one after the
// other. A level's products are too small for two threads to share one well; Child-Sum's two are too small to
// gain even so, and it does not use this.
template <typename F>
inline void side_by_side(int64_t count, const F& f) {
  if (count > 1 && at::get_num_threads() > 1 && !at::in_parallel_region()) {
    at::parallel_for(0, count, 1, [&](int64_t begin, int64_t end) {
      at::NoGradGuard no_grad;  // grad mode is thread-local: a pool thread's own would record the products
      for (int64_t k = begin; k < end; ++k) f(k);
    });
  } else {
    for (int64_t k = 0; k < count; ++k) f(k);
  }
}

}  // namespace graphtree
