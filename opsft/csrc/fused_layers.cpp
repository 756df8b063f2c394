// Two elementwise layers of a Qwen3 / Llama block, forward and backward, each in one pass over its inputs (fp32,
// contiguous, CPU). Eager torch runs them as chains of elementwise kernels, each a full pass over memory; at the
// organism's sizes those passes cost about as much as the block's matrix products (see opsft/fused_layers.py).
//
//   SwiGLU:   h = silu(g) * u,  silu(g) = g * s,  s = 1 / (1 + exp(-g))
//             dg = dh * u * s * (1 + g * (1 - s)),  du = dh * silu(g)
//   RMSNorm:  r = 1 / sqrt(mean_j x_j^2 + eps),  y = w * (x * r)      (per row of D values)
//             dx = r * (w * dy - x * r * c),  c = r * mean_j (w_j dy_j x_j),  dw = sum_rows dy * x * r
//
// Determinism: every row is reduced by one thread, in a fixed lane order (16 partial sums, then a fixed tree),
// and dw sums fixed blocks of rows (kRowBlock) in block order: the results do not depend on the thread count.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <cstdint>
#include <vector>

namespace {

constexpr int64_t kGrain = 1 << 14;  // elements per parallel task (elementwise)
constexpr int64_t kRowBlock = 64;    // rows per dw partial sum
constexpr int kLanes = 16;           // partial sums of a row reduction (one AVX-512 register of floats)

// sum_j a_j * b_j over n values in kLanes interleaved partial sums, combined in a fixed order
inline float dot(const float* __restrict a, const float* __restrict b, int64_t n) {
  float acc[kLanes] = {0};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += a[j + l] * b[j + l];
  for (int64_t k = 0; j + k < n; ++k) acc[k] += a[j + k] * b[j + k];
  for (int width = kLanes / 2; width > 0; width /= 2)
    for (int l = 0; l < width; ++l) acc[l] += acc[l + width];
  return acc[0];
}

inline float sigmoid(float g) { return 1.0f / (1.0f + std::exp(-g)); }

void swiglu_forward_range(const float* __restrict g, const float* __restrict u, float* __restrict h, int64_t first,
                          int64_t last) {
  for (int64_t i = first; i < last; ++i) h[i] = g[i] * sigmoid(g[i]) * u[i];
}

void swiglu_backward_range(const float* __restrict dh, const float* __restrict g, const float* __restrict u,
                           float* __restrict dg, float* __restrict du, int64_t first, int64_t last) {
  for (int64_t i = first; i < last; ++i) {
    const float s = sigmoid(g[i]);
    du[i] = dh[i] * g[i] * s;
    dg[i] = dh[i] * u[i] * s * (1.0f + g[i] * (1.0f - s));
  }
}

void check(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == torch::kFloat && t.is_contiguous(), name,
              ": a contiguous float32 CPU tensor is required");
}

}  // namespace

torch::Tensor swiglu_forward(const torch::Tensor& g, const torch::Tensor& u) {
  check(g, "gate");
  check(u, "up");
  TORCH_CHECK(g.sizes() == u.sizes(), "gate and up differ in shape");
  auto h = torch::empty_like(g);
  const float *gp = g.data_ptr<float>(), *up = u.data_ptr<float>();
  float* hp = h.data_ptr<float>();
  at::parallel_for(0, g.numel(), kGrain, [&](int64_t a, int64_t b) { swiglu_forward_range(gp, up, hp, a, b); });
  return h;
}

std::vector<torch::Tensor> swiglu_backward(const torch::Tensor& dh, const torch::Tensor& g, const torch::Tensor& u) {
  check(dh, "grad");
  check(g, "gate");
  check(u, "up");
  auto dg = torch::empty_like(g), du = torch::empty_like(u);
  const float *dhp = dh.data_ptr<float>(), *gp = g.data_ptr<float>(), *up = u.data_ptr<float>();
  float *dgp = dg.data_ptr<float>(), *dup = du.data_ptr<float>();
  at::parallel_for(0, g.numel(), kGrain,
                   [&](int64_t a, int64_t b) { swiglu_backward_range(dhp, gp, up, dgp, dup, a, b); });
  return {dg, du};
}

// y and the per-row r of x (rows x D) and w (D)
std::vector<torch::Tensor> rms_norm_forward(const torch::Tensor& x, const torch::Tensor& w, double eps) {
  check(x, "input");
  check(w, "weight");
  const int64_t d = w.numel(), rows = x.numel() / d;
  TORCH_CHECK(x.size(-1) == d, "the input's last dimension differs from the weight's size");
  auto y = torch::empty_like(x);
  auto r = torch::empty({rows}, x.options());
  const float *xp = x.data_ptr<float>(), *wp = w.data_ptr<float>();
  float *yp = y.data_ptr<float>(), *rp = r.data_ptr<float>();
  const float e = static_cast<float>(eps);
  at::parallel_for(0, rows, std::max<int64_t>(1, kGrain / d), [&](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i) {
      const float* __restrict xi = xp + i * d;
      float* __restrict yi = yp + i * d;
      const float ri = 1.0f / std::sqrt(dot(xi, xi, d) / static_cast<float>(d) + e);
      rp[i] = ri;
      for (int64_t j = 0; j < d; ++j) yi[j] = wp[j] * (xi[j] * ri);
    }
  });
  return {y, r};
}

// dx (rows x D) and dw (D) from dy, x, w and the forward's r
std::vector<torch::Tensor> rms_norm_backward(const torch::Tensor& dy, const torch::Tensor& x, const torch::Tensor& w,
                                             const torch::Tensor& r) {
  check(dy, "grad");
  check(x, "input");
  check(w, "weight");
  check(r, "rstd");
  const int64_t d = w.numel(), rows = x.numel() / d, blocks = (rows + kRowBlock - 1) / kRowBlock;
  auto dx = torch::empty_like(x);
  auto partial = torch::zeros({blocks, d}, x.options());
  const float *dyp = dy.data_ptr<float>(), *xp = x.data_ptr<float>(), *wp = w.data_ptr<float>(),
              *rp = r.data_ptr<float>();
  float *dxp = dx.data_ptr<float>(), *pp = partial.data_ptr<float>();
  at::parallel_for(0, blocks, 1, [&](int64_t a, int64_t b) {
    std::vector<float> wdy(d);
    for (int64_t blk = a; blk < b; ++blk) {
      float* __restrict dw = pp + blk * d;
      for (int64_t i = blk * kRowBlock; i < std::min(rows, (blk + 1) * kRowBlock); ++i) {
        const float *__restrict xi = xp + i * d, *__restrict dyi = dyp + i * d;
        float* __restrict dxi = dxp + i * d;
        const float ri = rp[i];
        for (int64_t j = 0; j < d; ++j) wdy[j] = wp[j] * dyi[j];
        const float c = ri * ri * dot(wdy.data(), xi, d) / static_cast<float>(d);
        for (int64_t j = 0; j < d; ++j) {
          dxi[j] = ri * wdy[j] - xi[j] * (ri * c);
          dw[j] += dyi[j] * (xi[j] * ri);
        }
      }
    }
  });
  auto dw = partial.select(0, 0).clone();
  float* dwp = dw.data_ptr<float>();
  for (int64_t blk = 1; blk < blocks; ++blk)
    for (int64_t j = 0; j < d; ++j) dwp[j] += pp[blk * d + j];
  return {dx, dw};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("swiglu_forward", &swiglu_forward, "silu(g) * u");
  m.def("swiglu_backward", &swiglu_backward, "(dg, du) of silu(g) * u");
  m.def("rms_norm_forward", &rms_norm_forward, "(w * x / rms(x), 1 / rms(x)) over the last dimension");
  m.def("rms_norm_backward", &rms_norm_backward, "(dx, dw) of the RMS norm");
}
