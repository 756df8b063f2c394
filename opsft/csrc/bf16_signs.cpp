// The "bf16-visible" rule of direction extraction in one pass (see opsft/directions.py, sign_of_change):
//
//   v_i = sign(bf16(after_i) - bf16(before_i))  as int8,
//
// where bf16() rounds to nearest, ties to even, as torch's conversion does. The sign of the bf16 difference is
// the order of the two rounded values (a nonzero difference of two bf16 numbers never rounds to zero, and an
// overflow to inf keeps its sign), so v_i = [A > B] - [A < B] with A, B the rounded values held as float: +0 and
// -0 compare equal, and a NaN (or inf - inf, two infinities of one sign) compares unordered, giving 0 as
// torch.sign(NaN) does. The torch-ops version converts both tensors, subtracts, takes the sign and narrows to
// int8 (five passes and three temporaries); this loop reads each input once and writes only the int8 signs,
// and reports whether either input holds a NaN (which extraction refuses), so that no other pass is needed.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <atomic>
#include <cstdint>
#include <cstring>

namespace {

constexpr int64_t kGrain = 1 << 16;  // elements per parallel task

// fp32 bit pattern of a value, widened exactly (bf16 and fp16 values are all fp32 numbers)
inline uint32_t fp32_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
inline uint32_t fp32_bits(c10::BFloat16 x) { return static_cast<uint32_t>(x.x) << 16; }
inline uint32_t fp32_bits(c10::Half x) { return fp32_bits(static_cast<float>(x)); }

inline bool is_nan(uint32_t u) { return (u & 0x7FFFFFFFu) > 0x7F800000u; }

// the float value of fp32 bits u rounded to bf16 (to nearest, ties to even; NaN stays NaN): adding 0x7FFF plus
// the kept part's lowest bit carries into the kept 16 bits exactly when the dropped 16 bits round up
inline float bf16_rounded(uint32_t u, bool nan) {
  const uint32_t rounded = nan ? u : (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  float x;
  std::memcpy(&x, &rounded, sizeof x);
  return x;
}

// v over elements [first, last); returns whether BEFORE (bit 0) and AFTER (bit 1) hold a NaN there. The
// pointers are parameters rather than lambda captures so that __restrict holds: an int8_t store may alias any
// object, a captured pointer included, and the loop would not vectorize
template <typename T>
int fill_range(const T* __restrict before, const T* __restrict after, int8_t* __restrict out, int64_t first,
               int64_t last) {
  int nan_before = 0, nan_after = 0;
  for (int64_t i = first; i < last; ++i) {
    const uint32_t ua = fp32_bits(after[i]), ub = fp32_bits(before[i]);
    const bool na = is_nan(ua), nb = is_nan(ub);
    const float a = bf16_rounded(ua, na), b = bf16_rounded(ub, nb);
    out[i] = static_cast<int8_t>((a > b) - (a < b));  // branch-free
    nan_before |= nb;
    nan_after |= na;
  }
  return nan_before | (nan_after << 1);
}

template <typename T>
int fill_signs(const T* before, const T* after, int8_t* out, int64_t n) {
  std::atomic<int> nans{0};
  at::parallel_for(0, n, kGrain, [&nans, before, after, out](int64_t first, int64_t last) {
    nans.fetch_or(fill_range(before, after, out, first, last));
  });
  return nans.load();
}

}  // namespace

// (v, whether BEFORE holds a NaN, whether AFTER does) with v = sign(bf16(after) - bf16(before)) as int8, for
// contiguous CPU tensors of one shape and one dtype (fp32, bf16 or fp16)
std::tuple<at::Tensor, bool, bool> bf16_signs(const at::Tensor& before, const at::Tensor& after) {
  TORCH_CHECK(before.device().is_cpu() && after.device().is_cpu(), "bf16_signs takes CPU tensors");
  TORCH_CHECK(before.is_contiguous() && after.is_contiguous(), "bf16_signs takes contiguous tensors");
  TORCH_CHECK(before.sizes() == after.sizes(), "bf16_signs: shapes differ, ", before.sizes(), " and ",
              after.sizes());
  TORCH_CHECK(before.scalar_type() == after.scalar_type(), "bf16_signs: dtypes differ, ", before.scalar_type(),
              " and ", after.scalar_type());
  at::Tensor out = at::empty(before.sizes(), before.options().dtype(at::kChar));
  int8_t* v = out.data_ptr<int8_t>();
  const int64_t n = out.numel();
  int nans;
  const at::ScalarType dtype = before.scalar_type();
  if (dtype == at::kFloat) {
    nans = fill_signs(before.data_ptr<float>(), after.data_ptr<float>(), v, n);
  } else if (dtype == at::kBFloat16) {
    nans = fill_signs(before.data_ptr<c10::BFloat16>(), after.data_ptr<c10::BFloat16>(), v, n);
  } else {
    TORCH_CHECK(dtype == at::kHalf, "bf16_signs takes float32, bfloat16 or float16 tensors, not ", dtype);
    nans = fill_signs(before.data_ptr<c10::Half>(), after.data_ptr<c10::Half>(), v, n);
  }
  return {out, (nans & 1) != 0, (nans & 2) != 0};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("bf16_signs", &bf16_signs, "(v = sign(bf16(after) - bf16(before)) as int8, NaN in before, NaN in after)");
}
