// Synthetic workloads and device-side op buffers. See workload.h.
#include "workload.h"

#include "common/row.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

namespace indexer_q {
namespace cli {

namespace {

// xoshiro256** seeded through splitmix64: the same stream on every platform.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) {
    for (auto& s : s_) {
      seed += 0x9e3779b97f4a7c15ull;
      std::uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      s = z ^ (z >> 31);
    }
  }
  std::uint64_t next() {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  // Uniform in (0, 1].
  double uniform() { return (double(next() >> 11) + 1.0) * 0x1p-53; }
  // Uniform integer in [0, n).
  std::uint64_t below(std::uint64_t n) { return n ? next() % n : 0; }
  double normal() {
    if (have_spare_) {
      have_spare_ = false;
      return spare_;
    }
    const double r = std::sqrt(-2.0 * std::log(uniform()));
    const double a = 6.283185307179586 * uniform();
    spare_ = r * std::sin(a);
    have_spare_ = true;
    return r * std::cos(a);
  }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  std::uint64_t s_[4];
  double spare_ = 0.0;
  bool have_spare_ = false;
};

using detail::f32_bits;
using detail::f32_from_bits;

void store(std::vector<std::uint8_t>& buf, DType dt, std::size_t i, float v) {
  switch (dt) {
    case DType::kBFloat16: {
      const std::uint16_t h = f32_to_bf16(v);
      std::memcpy(buf.data() + 2 * i, &h, 2);
      break;
    }
    case DType::kFloat16: {
      const std::uint16_t h = f32_to_f16(v);
      std::memcpy(buf.data() + 2 * i, &h, 2);
      break;
    }
    default: std::memcpy(buf.data() + 4 * i, &v, 4); break;
  }
}

}  // namespace

std::uint16_t f32_to_bf16(float f) {
  const std::uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return std::uint16_t((u >> 16) | 0x40u);  // quiet NaN
  return std::uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

std::uint16_t f32_to_f16(float f) {
  const std::uint32_t u = f32_bits(f);
  const std::uint16_t sign = std::uint16_t((u >> 16) & 0x8000u);
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return std::uint16_t(sign | 0x7e00u);      // NaN
  if (a >= 0x477ff000u) return std::uint16_t(sign | 0x7c00u);     // >= 65520 rounds to Inf
  if (a < 0x38800000u) {                                           // below 2^-14: subnormal
    const float scaled = f32_from_bits(a) * 16777216.0f;               // exact: times 2^24, < 2^10
    const std::uint32_t r = f32_bits(scaled + 8388608.0f) - 0x4b000000u;  // round to integer, ties even
    return std::uint16_t(sign | r);                                // r == 0x400 is the smallest normal
  }
  const std::uint32_t r = (a + 0xfffu + ((a >> 13) & 1u)) >> 13;  // 10 mantissa bits, ties even
  return std::uint16_t(sign | (r - (112u << 10)));
}

std::int64_t workload_max_pos(std::int64_t tokens) {
  const std::int64_t t = std::max<std::int64_t>(tokens, 1);
  return (t + 4095) / 4096 * 4096 + 4096;
}

Workload make_workload(const WorkloadSpec& spec) {
  Workload w;
  io::ConformanceCase& c = w.data;
  c.recipe = spec.recipe;
  c.B = spec.tokens;
  c.H = spec.heads;
  c.dtype = spec.dtype;
  c.weight_dtype = spec.dtype;
  c.pos_dtype = spec.pos_dtype;
  c.max_pos = spec.max_pos > 0 ? spec.max_pos : workload_max_pos(spec.tokens);
  if (c.max_pos < spec.tokens) throw std::runtime_error("workload: max_pos smaller than the token count");
  c.weight_scale = float(1.0 / std::sqrt(double(spec.heads) * 128.0));
  const WeightFold fold = recipe(spec.recipe).fold;
  if (fold == WeightFold::kScaleThenTwoFactors || fold == WeightFold::kTwoFactors) {
    c.weight_scale = float(1.0 / std::sqrt(128.0));              // vLLM's softmax_scale
    c.head_scale = float(1.0 / std::sqrt(double(spec.heads)));  // and head_scale
  }
  Rng rng(spec.seed);

  // Outlier channels: distinct, seed-chosen.
  std::vector<int> dims(128);
  for (int i = 0; i < 128; ++i) dims[std::size_t(i)] = i;
  const int n_out = std::min(std::max(spec.outlier_channels, 0), 128);
  for (int i = 0; i < n_out; ++i) std::swap(dims[std::size_t(i)], dims[std::size_t(i) + rng.below(std::uint64_t(128 - i))]);
  w.outlier_dims.assign(dims.begin(), dims.begin() + n_out);
  std::sort(w.outlier_dims.begin(), w.outlier_dims.end());
  double mag[128];
  for (int i = 0; i < 128; ++i) mag[i] = 1.0;
  for (int d : w.outlier_dims) mag[d] = spec.outlier_scale;

  w.start_pos = std::int64_t(rng.below(std::uint64_t(c.max_pos - spec.tokens + 1)));

  const std::size_t es = dtype_size(spec.dtype);
  const std::size_t rows = std::size_t(spec.tokens * spec.heads);
  c.q_input.resize(rows * 128 * es);
  for (std::size_t r = 0; r < rows; ++r)
    for (int i = 0; i < 128; ++i) store(c.q_input, spec.dtype, r * 128 + std::size_t(i), float(rng.normal() * mag[i]));
  c.weight.resize(rows * es);
  for (std::size_t r = 0; r < rows; ++r) store(c.weight, spec.dtype, r, float(rng.normal()));

  if (spec.make_freqs) c.freqs.resize(std::size_t(c.max_pos) * 64 * 4);
  float* f = reinterpret_cast<float*>(c.freqs.data());
  double theta[32];
  for (int j = 0; j < 32; ++j) theta[j] = std::pow(10000.0, -2.0 * j / 64.0);
  const bool halves = recipe(spec.recipe).freqs_layout == FreqsLayout::kHalves;
  for (std::int64_t p = 0; spec.make_freqs && p < c.max_pos; ++p) {
    for (int j = 0; j < 32; ++j) {
      const double angle = double(p) * theta[j];
      f[p * 64 + (halves ? j : 2 * j)] = float(std::cos(angle));
      f[p * 64 + (halves ? 32 + j : 2 * j + 1)] = float(std::sin(angle));
    }
  }

  const std::size_t ps = dtype_size(spec.pos_dtype);
  c.positions.resize(std::size_t(spec.tokens) * ps);
  for (std::int64_t b = 0; b < spec.tokens; ++b) {
    const std::int64_t p = w.start_pos + b;
    if (spec.pos_dtype == DType::kInt32) {
      const std::int32_t v = std::int32_t(p);
      std::memcpy(c.positions.data() + 4 * b, &v, 4);
    } else {
      std::memcpy(c.positions.data() + 8 * b, &p, 8);
    }
  }
  return w;
}

// ---------------------------------------------------------------------------------------
OpArgs make_op_args(const io::ConformanceCase& c, const CasePointers& p, Device dev) {
  const Recipe& r = recipe(c.recipe);
  OpArgs a;
  a.recipe = c.recipe;
  a.q_input = TensorView::contiguous(p.q_input, c.dtype, {c.B, c.H, 128}, dev);
  if (r.format == OutFormat::kE2M1) {
    a.q_out = TensorView::contiguous(p.q_out, DType::kUInt8, {c.B, c.H, 64}, dev);
    a.q_scale = TensorView::contiguous(p.q_sf, DType::kInt32, {c.B, c.H}, dev);
  } else {
    a.q_out = TensorView::contiguous(
        p.q_out, r.format == OutFormat::kE4M3FNUZ ? DType::kFloat8E4M3FNUZ : DType::kFloat8E4M3, {c.B, c.H, 128},
        dev);
    if (r.scale_out) a.q_scale = TensorView::contiguous(p.q_sf, DType::kFloat32, {c.B, c.H, 1}, dev);
  }
  // A recipe without weights or without RoPE takes empty views for them.
  if (recipe_has_weights(r)) {
    a.weight = TensorView::contiguous(p.weight, c.weight_dtype, {c.B, c.H}, dev);
    a.weights_out = TensorView::contiguous(p.weights_out, DType::kFloat32, {c.B, c.H, 1}, dev);
  }
  a.weight_scale = c.weight_scale;
  a.head_scale = c.head_scale;
  if (recipe_has_rope(r)) {
    a.freqs = TensorView::contiguous(p.freqs, DType::kFloat32, {c.max_pos, 64}, dev);
    a.positions = TensorView::contiguous(p.positions, c.pos_dtype, {c.B}, dev);
  }
  return a;
}

namespace {
bool writes_sf(const io::ConformanceCase& c) { return recipe_writes_q_scale(recipe(c.recipe)); }
bool has_weights(const io::ConformanceCase& c) { return recipe_has_weights(recipe(c.recipe)); }
}  // namespace

DeviceCase::DeviceCase(DeviceRuntime& rt, const io::ConformanceCase& c, const float* shared_freqs) : rt_(rt) {
  shape_.recipe = c.recipe;
  shape_.B = c.B;
  shape_.H = c.H;
  shape_.max_pos = c.max_pos;
  shape_.dtype = c.dtype;
  shape_.pos_dtype = c.pos_dtype;
  shape_.weight_dtype = c.weight_dtype;
  shape_.weight_scale = c.weight_scale;
  shape_.head_scale = c.head_scale;
  try {
    p_.q_input = alloc_copy(c.q_input);
    p_.weight = alloc_copy(c.weight);
    p_.positions = alloc_copy(c.positions);
    p_.freqs = shared_freqs ? static_cast<const void*>(shared_freqs) : alloc_copy(c.freqs);
    p_.q_out = rt_.alloc(std::size_t(rows() * c.out_bytes_per_row()));
    owned_.push_back(p_.q_out);
    if (writes_sf(c)) {
      p_.q_sf = rt_.alloc(std::size_t(rows()) * 4);
      owned_.push_back(p_.q_sf);
    }
    if (has_weights(c)) {
      p_.weights_out = static_cast<float*>(rt_.alloc(std::size_t(rows()) * 4));
      owned_.push_back(p_.weights_out);
    }
  } catch (...) {
    for (void* p : owned_) rt_.release(p);
    throw;
  }
}

DeviceCase::~DeviceCase() {
  for (void* p : owned_) rt_.release(p);
}

void* DeviceCase::alloc_copy(const std::vector<std::uint8_t>& host) {
  void* p = rt_.alloc(host.size());
  owned_.push_back(p);
  if (!host.empty()) rt_.to_device(p, host.data(), host.size());
  return p;
}

OpArgs DeviceCase::args() const { return make_op_args(shape_, p_, rt_.device()); }

Status DeviceCase::run(const Options& options) const {
  Options o = options;
  o.stream = rt_.stream();
  return indexer_q::run(args(), o);
}

void DeviceCase::poison(unsigned char byte) {
  rt_.fill(p_.q_out, byte, std::size_t(rows() * shape_.out_bytes_per_row()));
  if (p_.q_sf) rt_.fill(p_.q_sf, byte, std::size_t(rows()) * 4);
  if (p_.weights_out) rt_.fill(p_.weights_out, byte, std::size_t(rows()) * 4);
}

void DeviceCase::download(Outputs* out) const {
  rt_.synchronize();
  out->q_out.resize(std::size_t(rows() * shape_.out_bytes_per_row()));
  out->q_sf.resize(p_.q_sf ? std::size_t(rows()) * 4 : 0);
  out->weights_out.resize(p_.weights_out ? std::size_t(rows()) : 0);
  if (rows() > 0) {
    rt_.to_host(out->q_out.data(), p_.q_out, out->q_out.size());
    if (p_.q_sf) rt_.to_host(out->q_sf.data(), p_.q_sf, out->q_sf.size());
    if (p_.weights_out) rt_.to_host(out->weights_out.data(), p_.weights_out, out->weights_out.size() * 4);
  }
}

Status reference_outputs(const io::ConformanceCase& c, Outputs* out) {
  const std::size_t rows = std::size_t(c.B * c.H);
  out->q_out.assign(rows * std::size_t(c.out_bytes_per_row()), 0);
  out->q_sf.assign(writes_sf(c) ? rows * 4 : 0, 0);
  out->weights_out.assign(has_weights(c) ? rows : 0, 0.0f);
  CasePointers p;
  p.q_input = c.q_input.data();
  p.weight = c.weight.data();
  p.freqs = c.freqs.data();
  p.positions = c.positions.data();
  p.q_out = out->q_out.data();
  p.q_sf = out->q_sf.empty() ? nullptr : out->q_sf.data();
  p.weights_out = out->weights_out.data();
  Options o;
  o.backend = Backend::kReference;
  return indexer_q::run(make_op_args(c, p), o);
}

Status fill_expected(io::ConformanceCase* c) {
  Outputs o;
  const Status s = reference_outputs(*c, &o);
  if (!s.ok()) return s;
  c->q_out = std::move(o.q_out);
  c->q_sf = std::move(o.q_sf);
  c->weights_out = std::move(o.weights_out);
  return s;
}

}  // namespace cli
}  // namespace indexer_q
