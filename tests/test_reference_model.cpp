// The scalar reference against an INDEPENDENT float64 model written here: inputs decoded by
// their bit definitions (ldexp), RoPE in double, the Hadamard as an explicit +-1 matrix
// product in double (H[i][j] = (-1)^popcount(i & j)), the 1/sqrt(128) factor (SPEC's float
// constant, exact in double), scale = max(1e-4, amax) / 448, v = y / scale, and the nearest
// e4m3fn value by brute force over the 127 non-negative values (ties to the even code).
//
// Tolerance, and why. The reference computes in float32 (u = 2^-24), so it cannot match the
// exact model bit for bit; the test bounds the difference rigorously per element instead of
// picking a constant. For each row it runs a first-order running error analysis of the float32
// pipeline, using the model's own (double) magnitudes:
//   RoPE  : fma(xr, c, -(xi*s)) has error <= u|xi s| + u|result| (<= 2u(|xr c| + |xi s|));
//   stages: each butterfly output a +- b gets the two inputs' bounds plus u|a +- b|,
//           following SPEC's stride order 1..64 (the bound, not the value, uses that order);
//   y = z*k adds u|y|; amax inherits max_i err(y_i); scale = max(1e-4, amax)/448 adds u;
//   inv = 1/scale adds u; v = y*inv adds u.
// giving ev_i, a bound on |v32_i - v64_i| (times 1.01 for second-order terms). Then:
//   (1) per-row scale: |scale_ref - scale64| <= es (the bound for the scale), and overall the
//       relative error stays below 1e-5;
//   (2) every code is the nearest code of SOME value in [v64 - ev, v64 + ev]: equal to the
//       float64-rounded code except where v64 lies within the error bound of a rounding
//       boundary, where the neighbouring code is allowed;
//   (3) every dequantized code is within one fp8 step (at that magnitude) of v64;
//   (4) sanity: such boundary exemptions are rare (< 0.5% of the values) -- on random data the
//       float32 error is far below an fp8 step, so a wrong reference cannot hide in them;
//   (5) weights_out = w * weight_scale * scale within the same analysis.
// A test at the end shows the check fails for a reference fed a subtly different RoPE.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "iq_test_util.h"

namespace {

using namespace indexer_q;
using iqtest::HostCase;

constexpr double kU = 0x1p-24;                 // float32 unit roundoff
constexpr double kK = double(0x1.6a09e6p-4f);  // SPEC step 4 constant, exact in double
const double kFloor = double(1e-4f);

// ---- independent decoders (bit definitions) ----
double decode_input(const HostCase& c, const std::vector<std::uint8_t>& buf, std::size_t i) {
  if (c.dtype == DType::kFloat32) {
    float f;
    std::memcpy(&f, buf.data() + 4 * i, 4);
    return f;
  }
  std::uint16_t h;
  std::memcpy(&h, buf.data() + 2 * i, 2);
  const bool neg = h & 0x8000;
  double v;
  if (c.dtype == DType::kBFloat16) {
    const int e = (h >> 7) & 0xff, m = h & 0x7f;
    v = e == 0 ? std::ldexp(double(m), -133) : std::ldexp(1.0 + m / 128.0, e - 127);
  } else {
    const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    v = e == 0 ? std::ldexp(double(m), -24) : std::ldexp(1.0 + m / 1024.0, e - 15);
  }
  return neg ? -v : v;
}

// Position of token b (int32 or int64 by the case's position dtype).
std::int64_t position_of(const HostCase& c, std::int64_t b) {
  if (c.pos_dtype == DType::kInt32) {
    std::int32_t v;
    std::memcpy(&v, c.positions.data() + 4 * b, 4);
    return v;
  }
  std::int64_t p;
  std::memcpy(&p, c.positions.data() + 8 * b, 8);
  return p;
}

using iqtest::e4m3_value;

// Nearest e4m3fn code (brute force over the 127 values in double, ties to the even code,
// saturating at +-448); the sign kept (-0 -> 0x80).
int e4m3_nearest(double x) {
  const int sign = std::signbit(x) ? 0x80 : 0;
  const double a = std::fabs(x);
  int best = 0;
  double best_d = INFINITY;
  for (int k = 0; k <= 126; ++k) {
    const double d = std::fabs(a - e4m3_value(k));
    if (d < best_d || (d == best_d && (k & 1) == 0)) {
      best = k;
      best_d = d;
    }
  }
  return sign | best;
}

double fp8_step_at(double v) {
  const double a = std::fabs(v);
  if (a < 0x1p-6) return 0x1p-9;
  return std::ldexp(1.0, int(std::floor(std::log2(a))) - 3);
}

struct Violations {
  std::int64_t scale = 0, code = 0, step = 0, weight = 0;
  std::int64_t exemptions = 0, values = 0;
  double max_scale_rel = 0, max_ev_in_steps = 0;
  std::string first;
  std::int64_t total() const { return scale + code + step + weight; }
};

// Checks reference outputs (q_fp8, weights_out) of case c against the float64 model.
Violations check_against_model(const HostCase& c, const std::vector<std::uint8_t>& q_fp8,
                               const std::vector<float>& weights_out) {
  static int hsign[128][128];
  static bool init = false;
  if (!init) {
    for (int i = 0; i < 128; ++i)
      for (int j = 0; j < 128; ++j) hsign[i][j] = (__builtin_popcount(unsigned(i & j)) & 1) ? -1 : 1;
    init = true;
  }
  Violations out;
  auto note = [&](const std::string& s) {
    if (out.first.size() < 600) out.first += " " + s + ";";
  };
  for (std::int64_t b = 0; b < c.B; ++b) {
    const float* f = c.freqs.data() + position_of(c, b) * 64;
    for (std::int64_t h = 0; h < c.H; ++h) {
      const std::int64_t r = b * c.H + h;
      double x[128], e[128];
      for (int i = 0; i < 128; ++i) {
        x[i] = decode_input(c, c.q_input, std::size_t(r * 128 + i));
        e[i] = 0;
      }
      // RoPE in double (and its float32 error bound)
      for (int j = 0; j < 32; ++j) {
        const double xr = x[64 + 2 * j], xi = x[65 + 2 * j], cs = f[2 * j], sn = f[2 * j + 1];
        x[64 + 2 * j] = xr * cs - xi * sn;
        x[65 + 2 * j] = xr * sn + xi * cs;
        e[64 + 2 * j] = 2 * kU * (std::fabs(xr * cs) + std::fabs(xi * sn));
        e[65 + 2 * j] = 2 * kU * (std::fabs(xr * sn) + std::fabs(xi * cs));
      }
      // Hadamard: the value by the explicit matrix product
      double z[128];
      for (int i = 0; i < 128; ++i) {
        double s = 0;
        for (int j = 0; j < 128; ++j) s += hsign[i][j] * x[j];
        z[i] = s;
      }
      // ... and the float32 error bound along SPEC's butterfly order
      {
        double t[128];
        std::copy(x, x + 128, t);
        for (int st = 1; st < 128; st <<= 1)
          for (int i = 0; i < 128; ++i)
            if (!(i & st)) {
              const double a = t[i], bb = t[i + st], ea = e[i], eb = e[i + st];
              t[i] = a + bb;
              t[i + st] = a - bb;
              e[i] = ea + eb + kU * (std::fabs(a + bb) + ea + eb);
              e[i + st] = ea + eb + kU * (std::fabs(a - bb) + ea + eb);
            }
      }
      double y[128], ey[128], amax = 0, eamax = 0;
      for (int i = 0; i < 128; ++i) {
        y[i] = z[i] * kK;
        ey[i] = kK * e[i] + kU * (std::fabs(y[i]) + kK * e[i]);
        amax = std::max(amax, std::fabs(y[i]));
        eamax = std::max(eamax, ey[i]);
      }
      const double m = std::max(kFloor, amax);
      const double scale = m / 448.0;
      // amax > floor: |m32 - m| <= eamax; at the floor the error can only shrink
      const double es = 1.01 * (eamax + kU * (m + eamax)) / 448.0;

      // (1) the scale: w = 1 and weight_scale = 1 give weights_out == scale; otherwise divide
      const double w = decode_input(c, c.weight, std::size_t(b * c.weight_stride + h));
      const double ws = c.weight_scale;
      const double wo = weights_out[r];
      if (w == 1.0 && ws == 1.0) {
        const double rel = std::fabs(wo - scale) / scale;
        out.max_scale_rel = std::max(out.max_scale_rel, rel);
        if (!(std::fabs(wo - scale) <= es) || !(rel <= 1e-5)) {
          ++out.scale;
          note("row " + std::to_string(r) + ": scale " + std::to_string(wo) + " vs model " + std::to_string(scale));
        }
      } else {
        // (5) weights_out = fl(fl(w*ws)*scale32): two roundings on top of the scale's error
        const double want = w * ws * scale;
        const double tol = std::fabs(w * ws) * (es + 2.01 * kU * (scale + es)) + 1e-300;
        if (!(std::fabs(wo - want) <= tol)) {
          ++out.weight;
          note("row " + std::to_string(r) + ": weights_out " + std::to_string(wo) + " vs model " +
               std::to_string(want));
        }
      }
      // (2)-(4) the codes
      for (int i = 0; i < 128; ++i) {
        const double v = std::max(-448.0, std::min(448.0, y[i] / scale));
        const double ev =
            1.01 * ((ey[i] + std::fabs(y[i]) * es / scale) / (scale - es) + 2 * kU * (std::fabs(v) + 1e-30));
        const int code = q_fp8[std::size_t(r * 128 + i)];
        const int c64 = e4m3_nearest(v);
        const double got = e4m3_value(code);
        ++out.values;
        out.max_ev_in_steps = std::max(out.max_ev_in_steps, ev / fp8_step_at(v));
        if ((code & 0x7f) == 0x7f) {
          ++out.code;
          note("row " + std::to_string(r) + " i " + std::to_string(i) + ": NaN code");
          continue;
        }
        if (code != c64 && !(got == 0 && e4m3_value(c64) == 0)) {  // +0 / -0 are the same value
          ++out.exemptions;
          const double lo = e4m3_value(e4m3_nearest(std::max(-448.0, v - ev)));
          const double hi = e4m3_value(e4m3_nearest(std::min(448.0, v + ev)));
          if (!(got >= lo && got <= hi)) {
            ++out.code;
            note("row " + std::to_string(r) + " i " + std::to_string(i) + ": code " + std::to_string(code) + " (" +
                 std::to_string(got) + ") vs model " + std::to_string(c64) + " (v = " + std::to_string(v) +
                 ", bound " + std::to_string(ev) + ")");
          }
        }
        if (!(std::fabs(got - v) <= fp8_step_at(v))) {
          ++out.step;
          note("row " + std::to_string(r) + " i " + std::to_string(i) + ": more than one fp8 step from v = " +
               std::to_string(v));
        }
      }
    }
  }
  return out;
}

// Finite random inputs: per-row magnitudes over decades, outlier channels, integer rows,
// spikes, tiny rows (scale floor) and zero rows. unit_weights: w = 1, weight_scale = 1.
HostCase model_case(std::int64_t B, std::int64_t H, DType dt, DType pos_dt, bool unit_weights, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd;
  std::uniform_real_distribution<double> uni;
  HostCase c = iqtest::blank_case(B, H, dt, pos_dt, H + 3, 8192);
  // weight_scale > 0 (the validator refuses 0 and negative factors): the sign once drawn for it
  // flips the weights instead, so weights_out keeps both signs (the weights are normal too)
  c.weight_scale = unit_weights ? 1.0f : float(0.01 + uni(rng));
  const float weight_sign = unit_weights ? 1.0f : ((rng() & 1) ? -1.0f : 1.0f);
  const bool f16 = dt == DType::kFloat16;
  const double lo = f16 ? -3.0 : -6.0, hi = f16 ? 2.0 : 3.0;
  int outlier[3];
  for (int& o : outlier) o = int(rng() % 128);
  for (std::int64_t r = 0; r < B * H; ++r) {
    const double kind = uni(rng), mag = std::pow(10.0, lo + (hi - lo) * uni(rng));
    for (int i = 0; i < 128; ++i) {
      double v = nd(rng) * mag;
      if (kind < 0.5) v *= (std::find(outlier, outlier + 3, i) != outlier + 3) ? 25.0 : 1.0;
      else if (kind < 0.6) v = double(int(rng() % 31) - 15);
      else if (kind < 0.65) v = (i == int(r % 128)) ? mag : 0.0;
      else if (kind < 0.7) v = nd(rng) * (f16 ? 1e-6 : 1e-9);
      else if (kind < 0.72) v = 0.0;
      iqtest::store_as(c.q_input, dt, std::size_t(r * 128 + i), float(v));
    }
  }
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t h = 0; h < H + 3; ++h)
      iqtest::store_as(c.weight, dt, std::size_t(b * (H + 3) + h), unit_weights ? 1.0f : weight_sign * float(nd(rng)));
    iqtest::set_position(c, b, std::int64_t(rng() % 8192));
  }
  return c;
}

iqtest::Outputs run_on(const iqtest::BackendUnderTest& be, const HostCase& c) {
  iqtest::Outputs o;
  const Status s = iqtest::run_case(be, c, &o, 0xA5);
  EXPECT_TRUE(s.ok()) << be.name << ": " << s.message();
  return o;
}

iqtest::Outputs run_reference(const HostCase& c) {
  iqtest::BackendUnderTest ref;
  ref.name = "reference";
  ref.options.backend = Backend::kReference;
  return run_on(ref, c);
}

class ReferenceModel : public testing::TestWithParam<DType> {};

TEST_P(ReferenceModel, MatchesFloat64ModelWithinTheErrorBound) {
  const DType dt = GetParam();
  for (bool unit_weights : {true, false}) {
    SCOPED_TRACE(unit_weights ? "w = 1, weight_scale = 1" : "random weights");
    const HostCase c = model_case(96, 16, dt, unit_weights ? DType::kInt64 : DType::kInt32, unit_weights,
                                  1000 + int(dt) * 10 + unit_weights);
    const iqtest::Outputs o = run_reference(c);
    const Violations v = check_against_model(c, o.q_out, o.weights_out);
    EXPECT_EQ(v.total(), 0) << "scale " << v.scale << ", code " << v.code << ", step " << v.step << ", weight "
                            << v.weight << ":" << v.first;
    EXPECT_EQ(v.values, c.B * c.H * 128);
    EXPECT_LT(double(v.exemptions), 0.005 * double(v.values)) << "boundary exemptions";
    std::printf("[model %s%s] %lld values, %lld boundary exemptions, max scale rel err %.3g, max bound %.3g steps\n",
                dtype_name(dt), unit_weights ? "" : " weights", (long long)v.values, (long long)v.exemptions,
                v.max_scale_rel, v.max_ev_in_steps);
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, ReferenceModel,
                         testing::Values(DType::kBFloat16, DType::kFloat16, DType::kFloat32),
                         [](const testing::TestParamInfo<DType>& i) { return std::string(dtype_name(i.param)); });

// The model check is not blind: a reference run on slightly different inputs (the sin terms of
// one RoPE pair negated, or the position off by one) is caught.
TEST(ReferenceModelCheck, CatchesAWrongRope) {
  const HostCase c = model_case(16, 8, DType::kFloat32, DType::kInt64, true, 42);
  {
    HostCase wrong = c;
    for (std::int64_t p = 0; p < wrong.max_pos; ++p) wrong.freqs[std::size_t(p * 64 + 2 * 31 + 1)] *= -1.0f;
    const iqtest::Outputs o = run_reference(wrong);
    EXPECT_GT(check_against_model(c, o.q_out, o.weights_out).total(), 0);
  }
  {
    HostCase wrong = c;
    for (std::int64_t b = 0; b < c.B; ++b) iqtest::set_position(wrong, b, (position_of(c, b) + 1) % c.max_pos);
    const iqtest::Outputs o = run_reference(wrong);
    EXPECT_GT(check_against_model(c, o.q_out, o.weights_out).total(), 0);
  }
  {
    const iqtest::Outputs o = run_reference(c);
    EXPECT_EQ(check_against_model(c, o.q_out, o.weights_out).total(), 0);
    // a scale 1e-4 too large (beyond the bound and the 1e-5 relative limit) is caught
    std::vector<float> w = o.weights_out;
    for (float& x : w) x = std::nextafter(x, INFINITY) * 1.0001f;
    EXPECT_GT(check_against_model(c, o.q_out, w).scale, 0);
  }
}

// ---------------------------------------------------------------------------------------
// Every recipe: an exact scalar model written from SPEC.md, docs/RECIPES.md and docs/RECIPES.md's
// text, with its own table of the forms (not recipes.inc, not src/common/row.h), compared with the
// reference byte for byte. The model's float32 steps are the spec's (explicit fma, ordinary products,
// butterflies in the stated order); the codecs are written differently from row.h: the bf16
// rounding point by scaling to an integer in double and nearbyint (ties to even), e4m3fn by the
// nearest of the 127 values (brute force in double, ties to the even code), UE8M0 by frexp
// (the smallest power of two >= s), e2m1 by walking the seven thresholds from the top (SGLang's
// ties to the smaller magnitude) or by the nearest of the eight magnitudes (vLLM's ties to even),
// vLLM's power-of-two scales by frexp.
// ---------------------------------------------------------------------------------------
struct SpecForm {
  const char* name;
  bool rope_first64;  // RoPE on dims 0..63 (else 64..127)
  bool halves;        // freqs [cos x32 | sin x32] (else interleaved (cos, sin))
  bool hadamard;
  bool fp4;
  bool fnuz;
  bool vllm;          // docs/RECIPES.md: bf16 after RoPE, pow2 FP8 scale / MX FP4, two weight factors
  // The forms added later (docs/RECIPES.md), each its own quantization; kSame: the flags above say it.
  enum Q { kSame, kCute, kV32, kRne, kTwoStage, kUe8m0, kSgl224, kFnuz224, kCuteMx } q = kSame;
  bool neox = false;     // RoPE pairs (j, j + 32) of the rotated 64
  bool no_rope = false;  // no RoPE at all
  bool x1c = false;      // the second value of a pair as fma(x1, c, x0 * s)
};
// SPEC.md (v4_fp8), docs/RECIPES.md and docs/RECIPES.md, one line per form.
const SpecForm kSpecForms[] = {
    {"v4_fp8", false, false, true, false, false, false},
    {"v32_fp8", true, true, false, false, false, false},
    {"rope_first_fp8", true, true, true, false, false, false},
    {"v4_fp4", false, false, true, true, false, false},
    {"v4_fp8_fnuz", false, false, true, false, true, false},
    {"v32_fp8_fnuz", true, true, false, false, true, false},
    {"rope_first_fp8_fnuz", true, true, true, false, true, false},
    {"vllm_v4_fp8", false, true, false, false, false, true},
    {"vllm_v4_mxfp4", false, true, false, true, false, true},
    // vLLM's V3.2 Triton kernel (NeoX and GPT-J pairs), its CuTe DSL kernel, SGLang V4.1's FP4 pair
    {"vllm_v32_fp8_neox", true, true, false, false, false, false, SpecForm::kV32, true},
    {"vllm_v32_fp8_gptj", true, true, false, false, false, false, SpecForm::kV32},
    {"vllm_v4_fp8_cutedsl", false, true, false, false, false, false, SpecForm::kCute},
    {"sgl_v41_fp4_rope_pack", false, false, false, true, false, false, SpecForm::kTwoStage},
    {"sgl_v41_fp4_quant_rne", false, false, false, true, false, false, SpecForm::kRne, false, true},
    // SGLang's V3.2 unfused query path: NeoX RoPE, bf16, Hadamard, bf16, act_quant ue8m0
    {"sgl_v32_unfused_neox_hadamard_ue8m0", true, true, true, false, false, false, SpecForm::kUe8m0, true, false,
     true},
    // the gfx942 forms (source only): SGLang's AOT kernel with 224, vLLM's ROCm Triton kernel
    {"sglang_v4_fp8_gfx942", false, false, true, false, false, false, SpecForm::kSgl224},
    {"vllm_v4_fp8_fnuz224", false, true, false, false, true, false, SpecForm::kFnuz224, false, false, true},
    // vLLM's CuTe DSL MXFP4 kernel (source only)
    {"vllm_v4_mxfp4_cute", false, true, false, true, false, false, SpecForm::kCuteMx},
};

const SpecForm* spec_form(RecipeId r) {
  for (const SpecForm& f : kSpecForms)
    if (std::string(f.name) == recipe_name(r)) return &f;
  return nullptr;
}

// Round to the nearest bf16 value (ties to even) and back; Inf and NaN stay; overflow gives Inf.
float model_bf16(float f) {
  if (std::isnan(f) || std::isinf(f) || f == 0.0f) return f;
  const double a = std::fabs(double(f));
  int e = 0;
  std::frexp(a, &e);                                // a in [2^(e-1), 2^e)
  const int qe = std::max(e - 1, -126) - 7;         // 8 significant bits; bf16 subnormals step 2^-133
  const double r = std::nearbyint(std::ldexp(a, -qe));  // default rounding: to nearest, ties to even
  const double v = std::ldexp(r, qe);
  const double bf16_max = std::ldexp(255.0, 120);   // (2 - 2^-7) * 2^127
  const float out = v > bf16_max ? INFINITY : float(v);
  return std::signbit(f) ? -out : out;
}

// UE8M0 byte of a block scale s > 0: the biased exponent of the smallest power of two >= s (255 for Inf).
int model_ue8m0(float s) {
  if (std::isinf(s)) return 255;
  int e = 0;
  const double fr = std::frexp(double(s), &e);  // s = fr * 2^e, fr in [0.5, 1)
  const int p = fr == 0.5 ? e - 1 : e;          // 2^p >= s, smallest such
  return 127 + p;
}
// inv: the float with bits (254 - e) << 23 in 32-bit unsigned arithmetic: 2^(127 - e) for
// e <= 253, and for e = 255 the bits 0xff800000 = -Inf.
float model_inv(int e) {
  if (e == 255) return -INFINITY;
  return float(std::ldexp(1.0, 127 - e));
}
// e2m1 code: thresholds strictly below min(|v|, 6) (NaN -> 6); sign 8 only on a nonzero code of v < 0.
int model_e2m1(float v) {
  static const float thr[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  const float a = std::isnan(v) ? 6.0f : std::min(std::fabs(v), 6.0f);
  int code = 7;
  while (code > 0 && !(a > thr[code - 1])) --code;
  return (v < 0.0f && code != 0) ? code | 8 : code;
}

// ---- docs/RECIPES.md's vLLM codecs (steps 6, 8) ----
// FP8 step 5: s rounded up to a power of two (the smallest 2^p >= s); +Inf stays +Inf.
float model_pow2_ceil(float s) {
  if (std::isinf(s)) return INFINITY;
  int e = 0;
  const double fr = std::frexp(double(s), &e);  // s = fr * 2^e, fr in [0.5, 1)
  return float(std::ldexp(1.0, fr == 0.5 ? e - 1 : e));
}
// FP8 step 6: the code of v = x / q_scale: NaN -> 0x7f, beyond +-448 (Inf too) -> +-448, else the
// nearest e4m3fn value (ties to even), the sign of zero kept.
int model_vllm_fp8(float v) {
  if (std::isnan(v)) return 0x7f;
  if (std::fabs(v) > 448.0f) return std::signbit(v) ? 0xfe : 0x7e;
  return e4m3_nearest(v);
}
// MXFP4 steps 1-3: the UE8M0 byte of a block's amax (NaN already ignored).
int model_mx_ue8m0(float amax) {
  const float floored = std::fmax(amax, std::ldexp(6.0f, -126));
  const float ratio = floored * iqtest::float_of(0x3e2aaaabu);  // 0x1.555556p-3, the float nearest 1/6
  if (std::isinf(ratio)) return 254;
  return model_ue8m0(ratio);
}
// MXFP4 step 4: the nearest of the eight e2m1 magnitudes, ties to the even code, |v| > 6 -> 6;
// bit 3 = the sign bit of v always. NaN -> 0x7 (+6) whatever its sign bit (the library's choice,
// docs/RECIPES.md: vLLM's kernel leaves it open, and devices disagree on NaN signs).
int model_mx_e2m1(float v) {
  static const double mag[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};
  if (std::isnan(v)) return 7;
  const double a = std::fabs(double(v));
  if (a > 6.0) return 7 | (std::signbit(v) ? 8 : 0);  // Inf included
  int best = 0;
  for (int k = 1; k < 8; ++k) {
    const double d = std::fabs(a - mag[k]), bd = std::fabs(a - mag[best]);
    if (d < bd || (d == bd && (k & 1) == 0)) best = k;
  }
  return best | (std::signbit(v) ? 8 : 0);
}

// Inputs by their bit definitions, Inf and NaN included (decode_input above is for finite data).
float decode_f32(const HostCase& c, const std::vector<std::uint8_t>& buf, std::size_t i) {
  if (c.dtype != DType::kFloat32) {
    std::uint16_t h;
    std::memcpy(&h, buf.data() + 2 * i, 2);
    const bool bf = c.dtype == DType::kBFloat16;
    const unsigned emax = bf ? 0xffu : 0x1fu, e = bf ? (h >> 7) & 0xffu : (h >> 10) & 0x1fu;
    const unsigned m = bf ? h & 0x7fu : h & 0x3ffu;
    if (e == emax) {
      const float v = m ? NAN : INFINITY;
      return (h & 0x8000) ? -v : v;
    }
  }
  return float(decode_input(c, buf, i));  // exact: every finite input value is a float
}

// Deliberate departures from the spec, for the control tests: the model must then disagree with
// the reference on the test data (each vLLM-specific step is observable).
enum class Perturb {
  kNone,
  kNoBf16AfterRope,   // vLLM forms: skip step 3 (bf16 rounding of the rotated dims)
  kOneHeadFactor,     // vLLM forms: weights_out with fl(softmax_scale * head_scale) in one multiply
  kExactFp8Scale,     // vllm_v4_fp8: q_scale not rounded up to a power of two
  kSglangTies,        // vllm_v4_mxfp4: e2m1 ties to the smaller magnitude, no sign on zero codes
  kSglangFloor,       // vllm_v4_mxfp4: amax floor 1e-4 and / 6 instead of 6 * 2^-126 and * fl(1/6)
};

// The e4m3fnuz code nearest to v (ties to the even code), by search over the codes' values
// (0x80 is NaN); a NaN v gives 0x80.
double model_fnuz_value(int code) {
  const int e = (code >> 3) & 15, m = code & 7;
  const double mag = e == 0 ? std::ldexp(double(m), -10) : std::ldexp(1.0 + m / 8.0, e - 8);
  return (code & 0x80) ? -mag : mag;
}
int model_fnuz_nearest(float v) {
  if (std::isnan(v)) return 0x80;
  int best = 0;
  double best_d = INFINITY;
  for (int c = 0; c < 256; ++c) {
    if (c == 0x80) continue;
    const double d = std::fabs(double(v) - model_fnuz_value(c));
    if (d < best_d || (d == best_d && (c & 1) == 0)) {
      best = c;
      best_d = d;
    }
  }
  return best;
}

// The later forms (docs/RECIPES.md) in other terms: scales by frexp / ldexp in double, codes by the
// nearest grid point, NaN rules spelled out; x holds the row after RoPE and its bf16 rounding.
float later_max_abs(const float* x, int n) {  // NaN ignored
  float m = 0.0f;
  for (int i = 0; i < n; ++i)
    if (!std::isnan(x[i])) m = std::max(m, std::fabs(x[i]));
  return m;
}
// E2M1 with ties to even (model_mx_e2m1's magnitude), NaN -> 7, the sign only on a nonzero code.
int later_e2m1(float v) {
  if (std::isnan(v)) return 7;
  const int m = model_mx_e2m1(std::fabs(v)) & 7;
  return m | (v < 0 && m != 0 ? 8 : 0);
}
float later_e2m1_value(float v) {  // the grid value of v's code, with v's sign (NaN -> +6)
  static const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  if (std::isnan(v)) return 6.0f;
  const float g = mag[model_mx_e2m1(std::fabs(v)) & 7];
  return v < 0 ? -g : g;
}
// The packer: e = the exponent of fmax(amax / 6, 1e-4) rounded up, kept in [1, 254]; codes of
// v * 2^(127 - e), except that the two-stage form's packer multiplies by 0 at e = 254.
int later_pack_exponent(float amax) {
  return std::min(254, std::max(1, model_ue8m0(std::fmax(amax / 6.0f, 1e-4f))));
}
void later_form_row(const SpecForm& F, float* x, float w, float ws, float hs, std::int64_t r, iqtest::Outputs& o,
                    Perturb) {
  const float inv448 = float(1.0 / 448.0);  // fl(1/448), bits 0x3b124925
  if (F.q == SpecForm::kSgl224) {  // SGLang's quantizer with 224 in place of 448
    const float scale = std::fmax(1e-4f, later_max_abs(x, 128)) / 224.0f;
    const float inv = 1.0f / scale;
    for (int i = 0; i < 128; ++i) {
      const float p = x[i] * inv;
      const float v = std::isnan(p) ? 224.0f : std::fmax(std::fmin(p, 224.0f), -224.0f);
      o.q_out[std::size_t(r * 128 + i)] = std::uint8_t(e4m3_nearest(v));
    }
    o.weights_out[std::size_t(r)] = (w * ws) * scale;
    return;
  }
  if (F.q == SpecForm::kFnuz224) {  // power-of-two scale of amax / 224, e4m3fnuz codes
    const float q_scale = model_pow2_ceil(std::fmax(later_max_abs(x, 128), 1e-4f) / 224.0f);
    for (int i = 0; i < 128; ++i) o.q_out[std::size_t(r * 128 + i)] = std::uint8_t(model_fnuz_nearest(x[i] / q_scale));
    o.weights_out[std::size_t(r)] = ((w * q_scale) * ws) * hs;
    return;
  }
  if (F.q == SpecForm::kUe8m0) {  // bf16 after the Hadamard, power-of-two scale, NaN -> -448
    for (int i = 0; i < 128; ++i) x[i] = model_bf16(x[i]);
    const float q_scale = model_pow2_ceil(std::fmax(later_max_abs(x, 128), 1e-4f) * inv448);
    for (int i = 0; i < 128; ++i) {
      const float v = x[i] / q_scale;
      o.q_out[std::size_t(r * 128 + i)] =
          std::uint8_t(std::isnan(v) ? 0xfe : model_vllm_fp8(std::fmin(std::fmax(v, -448.0f), 448.0f)));
    }
    o.weights_out[std::size_t(r)] = ((w * hs) * q_scale) * ws;
    std::memcpy(o.q_sf.data() + 4 * r, &q_scale, 4);
    return;
  }
  if (F.q == SpecForm::kV32 || F.q == SpecForm::kCute) {
    const float amax = later_max_abs(x, 128);
    float q_scale, inv = 0.0f;
    if (F.q == SpecForm::kV32) {
      q_scale = model_pow2_ceil(std::fmax(amax, 1e-10f) * inv448);
    } else {
      const float t = std::fmax(amax, 1e-4f) * inv448;
      q_scale = model_pow2_ceil(t);  // +Inf for an infinite amax
      inv = std::isinf(q_scale) ? -INFINITY : float(1.0 / double(q_scale));  // the bit trick's -Inf
    }
    for (int i = 0; i < 128; ++i) {
      int code;
      if (F.q == SpecForm::kV32) {
        const float v = x[i] / q_scale;
        code = std::isnan(v) ? 0x7e : model_vllm_fp8(std::fmin(std::fabs(v), 448.0f) * (std::signbit(v) ? -1.0f : 1.0f));
      } else {
        code = model_vllm_fp8(x[i] * inv);  // NaN -> 0x7f
      }
      o.q_out[std::size_t(r * 128 + i)] = std::uint8_t(code);
    }
    o.weights_out[std::size_t(r)] = F.q == SpecForm::kV32 ? ((w * q_scale) * ws) * hs : (w * ws) * q_scale;
    return;
  }
  std::uint32_t sf = 0;
  if (F.q == SpecForm::kCuteMx) {  // vLLM's CuTe MXFP4 (docs/RECIPES.md step 15)
    for (int blk = 0; blk < 4; ++blk) {
      // the smallest power of two >= fmax(amax, 6 * 2^-126) * fl(1/6), unclamped: 255 for Inf,
      // whose inverse bits 0xff800000 are -Inf; the codes vLLM's (model_mx_e2m1: ties to even,
      // saturating, the sign bit of v on every code, NaN -> +6, the PTX ISA's satfinite rule)
      const int e = model_ue8m0(std::fmax(later_max_abs(x + 32 * blk, 32), 0x1.8p-124f) * float(1.0 / 6.0));
      const float inv = e == 255 ? -INFINITY : float(std::ldexp(1.0, 127 - e));
      sf |= std::uint32_t(e) << (8 * blk);
      for (int i = 32 * blk; i < 32 * blk + 32; i += 2)
        o.q_out[std::size_t(r * 64 + i / 2)] =
            std::uint8_t(model_mx_e2m1(x[i] * inv) | (model_mx_e2m1(x[i + 1] * inv) << 4));
    }
    for (int byte = 0; byte < 4; ++byte) o.q_sf[std::size_t(r * 4 + byte)] = std::uint8_t(sf >> (8 * byte));
    o.weights_out[std::size_t(r)] = w * ws;  // ws = fl(softmax_scale * head_scale), one factor
    return;
  }
  for (int blk = 0; blk < 4; ++blk) {
    float v[32];
    for (int i = 0; i < 32; ++i) v[i] = x[32 * blk + i];
    if (F.q == SpecForm::kTwoStage) {  // stage 1: fake quantization with the MX-style exponent
      const int e1 = model_ue8m0(std::fmax(later_max_abs(v, 32), 0x1.8p-124f) * float(1.0 / 6.0));
      const float sc = e1 == 255 ? INFINITY : float(std::ldexp(1.0, e1 - 127));
      const float inv1 = e1 == 255 ? -INFINITY : float(std::ldexp(1.0, 127 - e1));
      for (int i = 0; i < 32; ++i) {
        const float u = (v[i] == 0.0f && std::isfinite(inv1)) ? 0.0f : v[i] * inv1;  // fma(x, inv, +0)
        v[i] = later_e2m1_value(u) * sc;
      }
    }
    const int e = later_pack_exponent(later_max_abs(v, 32));
    sf |= std::uint32_t(e) << (8 * blk);
    for (int i = 0; i < 32; i += 2) {
      auto scaled = [&](float y) {
        if (F.q == SpecForm::kTwoStage) return e == 254 ? y * 0.0f : float(double(y) * std::ldexp(1.0, 127 - e));
        return float(double(y) / std::ldexp(1.0, e - 127));
      };
      o.q_out[std::size_t(r * 64 + (32 * blk + i) / 2)] =
          std::uint8_t(later_e2m1(scaled(v[i])) | (later_e2m1(scaled(v[i + 1])) << 4));
    }
  }
  for (int byte = 0; byte < 4; ++byte) o.q_sf[std::size_t(r * 4 + byte)] = std::uint8_t(sf >> (8 * byte));
  if (F.q == SpecForm::kTwoStage) o.weights_out[std::size_t(r)] = model_bf16(w * ws);
}

// The model's outputs for a whole case (same layout as iqtest::Outputs).
iqtest::Outputs model_outputs(const HostCase& c, Perturb perturb = Perturb::kNone) {
  const SpecForm& F = *spec_form(c.recipe);
  const float k = iqtest::float_of(0x3db504f3u);
  iqtest::Outputs o;
  const std::int64_t rows = c.B * c.H;
  o.q_out.assign(std::size_t(rows * (F.fp4 ? 64 : 128)), 0);
  if (F.fp4 || F.q == SpecForm::kUe8m0) o.q_sf.assign(std::size_t(rows * 4), 0);
  o.weights_out.assign(F.q == SpecForm::kRne ? 0 : std::size_t(rows), 0.0f);
  for (std::int64_t b = 0; b < c.B; ++b) {
    const float* fr = c.freqs.data() + position_of(c, b) * 64;
    for (std::int64_t h = 0; h < c.H; ++h) {
      const std::int64_t r = b * c.H + h;
      float x[128];
      for (int i = 0; i < 128; ++i) x[i] = decode_f32(c, c.q_input, std::size_t(r * 128 + i));
      const int off = F.rope_first64 ? 0 : 64;
      for (int j = 0; j < 32 && !F.no_rope; ++j) {
        const int i0 = F.neox ? off + j : off + 2 * j, i1 = F.neox ? off + 32 + j : off + 2 * j + 1;
        const float xr = x[i0], xi = x[i1];
        const float cs = F.halves ? fr[j] : fr[2 * j], sn = F.halves ? fr[32 + j] : fr[2 * j + 1];
        const float p1 = xi * sn, p2 = xi * cs;
        x[i0] = std::fma(xr, cs, -p1);
        x[i1] = F.x1c ? std::fma(xi, cs, xr * sn) : std::fma(xr, sn, p2);
      }
      if (F.q != SpecForm::kSame ? (!F.no_rope && F.q != SpecForm::kSgl224) : (F.vllm ? perturb != Perturb::kNoBf16AfterRope : F.fp4))
        for (int i = off; i < off + 64; ++i) x[i] = model_bf16(x[i]);
      if (F.hadamard) {
        for (int hs = 1; hs < 128; hs *= 2)
          for (int base = 0; base < 128; base += 2 * hs)
            for (int i = base; i < base + hs; ++i) {
              const float a = x[i], bb = x[i + hs];
              x[i] = a + bb;
              x[i + hs] = a - bb;
            }
        for (int i = 0; i < 128; ++i) x[i] = x[i] * k;
      }
      const float w = decode_f32(c, c.weight, std::size_t(b * c.weight_stride + h));
      const float ws = c.weight_scale, hs = c.head_scale;  // vLLM: softmax_scale, head_scale
      if (F.q != SpecForm::kSame) {
        later_form_row(F, x, w, ws, hs, r, o, perturb);
        continue;
      }
      if (F.vllm && F.fp4) {  // docs/RECIPES.md, MXFP4 form: no Hadamard, no second bf16 rounding
        std::uint32_t sf = 0;
        for (int blk = 0; blk < 4; ++blk) {
          float amax = 0.0f;
          for (int i = 32 * blk; i < 32 * blk + 32; ++i)
            if (!std::isnan(x[i])) amax = std::max(amax, std::fabs(x[i]));
          const int e = perturb == Perturb::kSglangFloor ? model_ue8m0(std::fmax(1e-4f, amax) / 6.0f)
                                                         : model_mx_ue8m0(amax);
          // inv = float_from_bits((254 - e) << 23): 2^(127 - e) for e <= 253; for e = 254 (an
          // infinite amax) the bits are 0, so inv = 0: finite values give +-0, Inf gives NaN.
          const float inv = e == 254 ? 0.0f : float(std::ldexp(1.0, 127 - e));
          sf |= std::uint32_t(e) << (8 * blk);
          for (int i = 32 * blk; i < 32 * blk + 32; i += 2) {
            auto code = [&](float v) { return perturb == Perturb::kSglangTies ? model_e2m1(v) : model_mx_e2m1(v); };
            o.q_out[std::size_t(r * 64 + i / 2)] = std::uint8_t(code(x[i] * inv) | (code(x[i + 1] * inv) << 4));
          }
        }
        for (int byte = 0; byte < 4; ++byte) o.q_sf[std::size_t(r * 4 + byte)] = std::uint8_t(sf >> (8 * byte));
        o.weights_out[std::size_t(r)] = perturb == Perturb::kOneHeadFactor ? w * (ws * hs) : (w * ws) * hs;
        continue;
      }
      if (F.vllm) {  // docs/RECIPES.md, FP8 form
        float amax = 0.0f;
        for (int i = 0; i < 128; ++i)
          if (!std::isnan(x[i])) amax = std::max(amax, std::fabs(x[i]));
        const float s = std::fmax(amax, 1e-4f) / 448.0f;
        const float q_scale = perturb == Perturb::kExactFp8Scale ? s : model_pow2_ceil(s);
        for (int i = 0; i < 128; ++i) o.q_out[std::size_t(r * 128 + i)] = std::uint8_t(model_vllm_fp8(x[i] / q_scale));
        o.weights_out[std::size_t(r)] =
            perturb == Perturb::kOneHeadFactor ? (w * q_scale) * (ws * hs) : ((w * q_scale) * ws) * hs;
        continue;
      }
      if (F.fp4) {
        for (int i = 0; i < 128; ++i) x[i] = model_bf16(x[i]);
        std::uint32_t sf = 0;
        for (int blk = 0; blk < 4; ++blk) {
          float amax = 0.0f;
          for (int i = 32 * blk; i < 32 * blk + 32; ++i) amax = std::fmax(amax, std::fabs(x[i]));
          const float s = std::fmax(1e-4f, amax) / 6.0f;
          const int e = model_ue8m0(s);
          const float inv = model_inv(e);
          sf |= std::uint32_t(e) << (8 * blk);
          for (int i = 32 * blk; i < 32 * blk + 32; i += 2) {
            const int lo = model_e2m1(x[i] * inv), hi = model_e2m1(x[i + 1] * inv);
            o.q_out[std::size_t(r * 64 + i / 2)] = std::uint8_t(lo | (hi << 4));
          }
        }
        for (int byte = 0; byte < 4; ++byte) o.q_sf[std::size_t(r * 4 + byte)] = std::uint8_t(sf >> (8 * byte));
        o.weights_out[std::size_t(r)] = w * c.weight_scale;
        continue;
      }
      float amax = 0.0f;
      for (int i = 0; i < 128; ++i) amax = std::fmax(amax, std::fabs(x[i]));
      const float scale = std::fmax(1e-4f, amax) / 448.0f;
      const float inv = 1.0f / scale;
      for (int i = 0; i < 128; ++i) {
        const float v = std::fmax(std::fmin(x[i] * inv, 448.0f), -448.0f);
        int code = e4m3_nearest(v);
        if (F.fnuz && code == 0x80) code = 0;
        o.q_out[std::size_t(r * 128 + i)] = std::uint8_t(code);
      }
      const float wo = (w * c.weight_scale) * scale;
      o.weights_out[std::size_t(r)] = F.fnuz ? wo * 2.0f : wo;
    }
  }
  // docs/RECIPES.md "NaN": weights_out has one NaN, 0x7fffffff (0x7fff0000 for the bf16 fold)
  const std::uint32_t nan_bits = recipe(c.recipe).fold == WeightFold::kNoScaleBf16 ? 0x7fff0000u : 0x7fffffffu;
  for (float& w : o.weights_out)
    if (std::isnan(w)) w = iqtest::float_of(nan_bits);
  return o;
}

// The model's codecs on their own, against definitions stated once more in other terms.
TEST(RecipeModelCodecs, Bf16RoundingPoint) {
  EXPECT_EQ(iqtest::bits_of(model_bf16(iqtest::float_of(0x3f808000u))), 0x3f800000u);  // tie -> even (down)
  EXPECT_EQ(iqtest::bits_of(model_bf16(iqtest::float_of(0x3f818000u))), 0x3f820000u);  // tie -> even (up)
  EXPECT_EQ(iqtest::bits_of(model_bf16(iqtest::float_of(0x3f808001u))), 0x3f810000u);
  EXPECT_EQ(iqtest::bits_of(model_bf16(iqtest::float_of(0x7f7fffffu))), 0x7f800000u);  // overflow -> Inf
  EXPECT_EQ(iqtest::bits_of(model_bf16(iqtest::float_of(0x7f7f7fffu))), 0x7f7f0000u);
  EXPECT_EQ(iqtest::bits_of(model_bf16(iqtest::float_of(0x00018000u))), 0x00020000u);  // subnormal tie -> even
  EXPECT_EQ(iqtest::bits_of(model_bf16(iqtest::float_of(0x80008000u))), 0x80000000u);  // -> -0
  // against the plain bit rule (round half to even on the low 16 bits) on random finite patterns
  std::mt19937 rng(3);
  for (int t = 0; t < 200000; ++t) {
    const std::uint32_t u = rng();
    const float f = iqtest::float_of(u);
    if (!std::isfinite(f)) continue;
    const std::uint32_t want = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    ASSERT_EQ(iqtest::bits_of(model_bf16(f)), want) << std::hex << u;
  }
}

TEST(RecipeModelCodecs, E2m1AndUe8m0) {
  // ties go to the smaller magnitude; just above goes up; NaN -> 6 (code 7, no sign)
  const float at[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  for (int c = 0; c < 7; ++c) {
    EXPECT_EQ(model_e2m1(at[c]), c);
    EXPECT_EQ(model_e2m1(std::nextafter(at[c], 10.0f)), c + 1);
    EXPECT_EQ(model_e2m1(-at[c]), c == 0 ? 0 : (c | 8));
  }
  EXPECT_EQ(model_e2m1(-0.0f), 0);
  EXPECT_EQ(model_e2m1(-0.1f), 0);  // sign only on nonzero codes
  EXPECT_EQ(model_e2m1(NAN), 7);
  EXPECT_EQ(model_e2m1(-INFINITY), 15);
  EXPECT_EQ(model_e2m1(100.0f), 7);
  // UE8M0: exactly a power of two is kept, anything above rounds up
  EXPECT_EQ(model_ue8m0(1.0f), 127);
  EXPECT_EQ(model_ue8m0(std::nextafter(1.0f, 2.0f)), 128);
  EXPECT_EQ(model_ue8m0(0.75f), 127);
  EXPECT_EQ(model_ue8m0(1e-4f / 6.0f), 127 - 15);  // 1.67e-5 -> 2^-15
  EXPECT_EQ(model_ue8m0(INFINITY), 255);
  EXPECT_EQ(iqtest::bits_of(model_inv(255)), 0xff800000u);  // (254 - 255) << 23 in uint32
  EXPECT_EQ(model_inv(127), 1.0f);
  EXPECT_EQ(model_inv(253), 0x1p-126f);
}

// docs/RECIPES.md's vLLM codecs (steps 6, 8) in the model, against the spec's own examples and bit rules.
TEST(RecipeModelCodecs, VllmPow2ScaleAndFp8Codes) {
  EXPECT_EQ(model_pow2_ceil(0.125f), 0.125f);  // a power of two stays
  EXPECT_EQ(model_pow2_ceil(std::nextafter(0.125f, 1.0f)), 0.25f);
  EXPECT_EQ(model_pow2_ceil(1e-4f / 448.0f), 0x1p-22f);
  EXPECT_EQ(model_pow2_ceil(INFINITY), INFINITY);
  // against the spec's bit rule e = ((bits(s) + 0x7fffff) >> 23) & 0xff on random finite s > 0
  std::mt19937 rng(5);
  for (int t = 0; t < 200000; ++t) {
    const std::uint32_t u = (rng() % 0x7f000000u) + 0x00800000u;  // normal, finite, positive
    const std::uint32_t e = ((u + 0x7fffffu) >> 23) & 0xffu;
    ASSERT_EQ(iqtest::bits_of(model_pow2_ceil(iqtest::float_of(u))), e << 23) << std::hex << u;
  }
  EXPECT_EQ(model_vllm_fp8(NAN), 0x7f);
  EXPECT_EQ(model_vllm_fp8(-NAN), 0x7f);
  EXPECT_EQ(model_vllm_fp8(INFINITY), 0x7e);
  EXPECT_EQ(model_vllm_fp8(-INFINITY), 0xfe);
  EXPECT_EQ(model_vllm_fp8(-0.0f), 0x80);
  EXPECT_EQ(model_vllm_fp8(-0x1p-10f), 0x80);  // a tie between 0 and 2^-9: to 0, sign kept
  EXPECT_EQ(model_vllm_fp8(3 * 0x1p-10f), 0x02);
  EXPECT_EQ(model_vllm_fp8(17.0f), 0x58);  // ties to even
  EXPECT_EQ(model_vllm_fp8(19.0f), 0x5a);
}

TEST(RecipeModelCodecs, VllmMxE2m1AndUe8m0) {
  // docs/RECIPES.md step 8's examples: ties to even
  const float ties[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  const int want[7] = {0, 2, 2, 4, 4, 6, 6};  // codes of 0, 1, 1, 2, 2, 4, 4
  for (int i = 0; i < 7; ++i) {
    for (int k : {-20, -3, 0, 4}) {  // times 2^k with inv = 2^-k: the same codes
      const float v = std::ldexp(ties[i], k) * std::ldexp(1.0f, -k);
      EXPECT_EQ(model_mx_e2m1(v), want[i]) << ties[i];
      EXPECT_EQ(model_mx_e2m1(-v), want[i] | 8) << -ties[i];
    }
  }
  EXPECT_EQ(model_mx_e2m1(std::nextafter(0.25f, 1.0f)), 1);
  EXPECT_EQ(model_mx_e2m1(std::nextafter(0.75f, 0.0f)), 1);
  EXPECT_EQ(model_mx_e2m1(std::nextafter(5.0f, 6.0f)), 7);
  EXPECT_EQ(model_mx_e2m1(-0.1f), 8);  // the sign bit also on a zero magnitude
  EXPECT_EQ(model_mx_e2m1(-0.0f), 8);
  EXPECT_EQ(model_mx_e2m1(0.0f), 0);
  EXPECT_EQ(model_mx_e2m1(100.0f), 7);
  EXPECT_EQ(model_mx_e2m1(-INFINITY), 15);
  EXPECT_EQ(model_mx_e2m1(NAN), 7);
  EXPECT_EQ(model_mx_e2m1(-NAN), 7);
  // UE8M0: amax 6 * 2^k gives 127 + k (fl(1/6) * 6 rounds back to 1), just above rounds up;
  // the floor 6 * 2^-126 gives e = 1; Inf gives 254
  EXPECT_EQ(model_mx_ue8m0(6.0f), 127);
  EXPECT_EQ(model_mx_ue8m0(std::ldexp(6.0f, -10)), 117);
  EXPECT_EQ(model_mx_ue8m0(std::nextafter(6.0f, 7.0f)), 128);
  EXPECT_EQ(model_mx_ue8m0(0.0f), 1);
  EXPECT_EQ(model_mx_ue8m0(std::ldexp(1.0f, -130)), 1);
  EXPECT_EQ(model_mx_ue8m0(INFINITY), 254);
  EXPECT_EQ(model_mx_ue8m0(3e38f), 253);  // 3e38 * fl(1/6) = 5e37 -> 2^126
}

// The library's descriptor of each recipe is the spec's form.
TEST(RecipeModel, DescriptorsMatchTheSpec) {
  EXPECT_EQ(all_recipes().size(), sizeof kSpecForms / sizeof kSpecForms[0]);
  for (RecipeId r : all_recipes()) {
    const SpecForm* f = spec_form(r);
    ASSERT_NE(f, nullptr) << recipe_name(r) << " is not a form of the spec";
    const Recipe& d = recipe(r);
    EXPECT_EQ(d.rope_dims == RopeDims::kNoRope, f->no_rope) << f->name;
    EXPECT_EQ(d.rope_pairs == RopePairs::kNeox, f->neox) << f->name;
    if (f->q != SpecForm::kSame) {  // the later forms: quantizer and fold by name
      const Quantizer q[] = {Quantizer::kSglang,       Quantizer::kVllmCute,     Quantizer::kVllmV32,
                             Quantizer::kFp4Rne,       Quantizer::kFp4TwoStage,  Quantizer::kSglangUe8m0,
                             Quantizer::kSglang224,    Quantizer::kVllmFnuz224,  Quantizer::kVllmCute};
      const WeightFold fo[] = {WeightFold::kTimesScale,  WeightFold::kTimesScale,   WeightFold::kScaleThenTwoFactors,
                               WeightFold::kNoWeights,   WeightFold::kNoScaleBf16,  WeightFold::kHeadScaleFirst,
                               WeightFold::kTimesScale,  WeightFold::kScaleThenTwoFactors, WeightFold::kNoScale};
      EXPECT_EQ(d.quant, q[f->q]) << f->name;
      EXPECT_EQ(d.fold, fo[f->q]) << f->name;
      EXPECT_EQ(d.hadamard, f->hadamard) << f->name;
      EXPECT_EQ(d.bf16_after_rope, !f->no_rope && f->q != SpecForm::kSgl224) << f->name;
      EXPECT_EQ(d.bf16_after_hadamard, f->q == SpecForm::kUe8m0) << f->name;
      EXPECT_EQ(d.format == OutFormat::kE4M3FNUZ, f->fnuz) << f->name;
      EXPECT_EQ(d.scale_out, f->q == SpecForm::kUe8m0) << f->name;
      EXPECT_EQ(d.rope_fma == RopeFma::kFmaX1C, f->x1c) << f->name;
      EXPECT_EQ(d.format == OutFormat::kE2M1, f->fp4) << f->name;
      continue;
    }
    EXPECT_EQ(d.rope_dims == RopeDims::kFirst64, f->rope_first64) << f->name;
    EXPECT_EQ(d.freqs_layout == FreqsLayout::kHalves, f->halves) << f->name;
    EXPECT_EQ(d.hadamard, f->hadamard) << f->name;
    EXPECT_EQ(d.bf16_after_rope, f->fp4 || f->vllm) << f->name;
    EXPECT_EQ(d.bf16_after_hadamard, f->fp4 && !f->vllm) << f->name;
    EXPECT_EQ(d.format == OutFormat::kE2M1, f->fp4) << f->name;
    EXPECT_EQ(d.format == OutFormat::kE4M3FNUZ, f->fnuz) << f->name;
    EXPECT_EQ(d.quant, f->vllm ? Quantizer::kVllm : Quantizer::kSglang) << f->name;
    const WeightFold fold = f->vllm ? (f->fp4 ? WeightFold::kTwoFactors : WeightFold::kScaleThenTwoFactors)
                                    : (f->fp4 ? WeightFold::kNoScale : WeightFold::kTimesScale);
    EXPECT_EQ(d.fold, fold) << f->name;
  }
}

class RecipeModel : public testing::TestWithParam<RecipeId> {};

// Random cases (with the edge rows of iqtest::random_case: zero, tiny, huge, Inf, NaN, subnormal,
// FP8 ties, E2M1 thresholds, bf16 ties), every input dtype and both position dtypes.
TEST_P(RecipeModel, ReferenceMatchesTheModelByteForByte) {
  const RecipeId r = GetParam();
  std::uint64_t seed = 500 + 17 * std::uint64_t(r);
  for (DType dt : {DType::kBFloat16, DType::kFloat16, DType::kFloat32}) {
    for (DType pt : {DType::kInt32, DType::kInt64}) {
      const HostCase c = iqtest::random_case(41, 24, dt, pt, 27, ++seed, r);
      SCOPED_TRACE(c.describe());
      const iqtest::Outputs want = model_outputs(c);
      const iqtest::Outputs got = run_reference(c);
      const iqtest::Comparison cmp = iqtest::compare(got, want, c.H);
      EXPECT_TRUE(cmp.exact()) << cmp.summary();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Recipes, RecipeModel, testing::ValuesIn(all_recipes()),
                         [](const testing::TestParamInfo<RecipeId>& i) { return std::string(recipe_name(i.param)); });

// The model comparison is not blind: each recipe's model disagrees with the reference run
// under another recipe of a different form on the same inputs.
TEST(RecipeModelCheck, CatchesTheWrongForm) {
  const HostCase c = iqtest::random_case(9, 8, DType::kFloat32, DType::kInt64, 8, 99, RecipeId::kV32Fp8);
  for (RecipeId a : all_recipes()) {
    for (RecipeId b : all_recipes()) {
      if (a == b || (recipe(a).format == OutFormat::kE2M1) != (recipe(b).format == OutFormat::kE2M1)) continue;
      HostCase ca = c, cb = c;
      ca.recipe = a;
      cb.recipe = b;
      const iqtest::Comparison cmp = iqtest::compare(run_reference(cb), model_outputs(ca), c.H);
      EXPECT_FALSE(cmp.exact()) << recipe_name(a) << " vs " << recipe_name(b);
    }
  }
}

// Each vLLM-specific step is observable on the test data: the model with that step done
// another way (SGLang's way, or a plausible slip) disagrees with the reference.
TEST(RecipeModelCheck, CatchesEachVllmStepDoneDifferently) {
  const struct {
    RecipeId r;
    Perturb p;
    const char* what;
  } cases[] = {
      {RecipeId::kVllmV4Fp8, Perturb::kNoBf16AfterRope, "fp8 without the bf16 rounding after RoPE"},
      {RecipeId::kVllmV4Fp8, Perturb::kOneHeadFactor, "fp8 with fl(softmax_scale * head_scale)"},
      {RecipeId::kVllmV4Fp8, Perturb::kExactFp8Scale, "fp8 with the exact (not power-of-two) scale"},
      {RecipeId::kVllmV4Mxfp4, Perturb::kNoBf16AfterRope, "mxfp4 without the bf16 rounding after RoPE"},
      {RecipeId::kVllmV4Mxfp4, Perturb::kOneHeadFactor, "mxfp4 with fl(softmax_scale * head_scale)"},
      {RecipeId::kVllmV4Mxfp4, Perturb::kSglangTies, "mxfp4 with SGLang's e2m1 ties and zero signs"},
      {RecipeId::kVllmV4Mxfp4, Perturb::kSglangFloor, "mxfp4 with SGLang's amax floor and / 6"},
  };
  for (const auto& k : cases) {
    HostCase c = iqtest::random_case(41, 24, DType::kBFloat16, DType::kInt64, 24, 7100 + int(k.p), k.r);
    c.weight_scale = float(1.0 / std::sqrt(128.0));  // vLLM's factors (H^-0.5 with H = 24)
    c.head_scale = float(1.0 / std::sqrt(24.0));
    const iqtest::Outputs got = run_reference(c);
    EXPECT_TRUE(iqtest::compare(got, model_outputs(c), c.H).exact()) << k.what;
    const iqtest::Comparison cmp = iqtest::compare(got, model_outputs(c, k.p), c.H);
    EXPECT_FALSE(cmp.exact()) << "the model " << k.what << " still matches the reference";
    std::printf("[control %s] %s\n", k.what, cmp.summary().substr(0, cmp.summary().find(';')).c_str());
  }
}

// ---------------------------------------------------------------------------------------
// FP4 by hand: rows whose expected bytes are written out here, through every backend.
// ---------------------------------------------------------------------------------------
// One token (position 0: cos 1, sin 0, RoPE changes nothing), fp32 rows, weight 1, weight_scale 1.
HostCase fp4_rows(const std::vector<std::vector<float>>& rows) {
  HostCase c = iqtest::blank_case(1, std::int64_t(rows.size()), DType::kFloat32, DType::kInt64,
                                  std::int64_t(rows.size()), 4, RecipeId::kV4Fp4);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    for (int i = 0; i < 128; ++i) iqtest::store_as(c.q_input, c.dtype, r * 128 + i, rows[r][i]);
    iqtest::store_as(c.weight, c.dtype, r, -1.5f);
  }
  c.weight_scale = 0.5f;
  return c;
}

// x[0] = a, x[j] = b: after the Hadamard y[i] = (a + s_ij b) k with s_ij = (-1)^popcount(i & j);
// a, b chosen so that bf16((a + b) k) = P and bf16((a - b) k) = N.
std::vector<float> two_spikes(double P, double N, int j) {
  const double k = double(iqtest::float_of(0x3db504f3u));
  std::vector<float> row(128, 0.0f);
  row[0] = float(0.5 * (P + N) / k);
  row[j] = float(0.5 * (P - N) / k);
  return row;
}

// A row of `fill` with dim j set to v.
std::vector<float> row_with(float fill, int j, float v) {
  std::vector<float> row(128, fill);
  row[std::size_t(j)] = v;
  return row;
}

TEST(Fp4ByHand, ThresholdsNibblesScalesAndSigns) {
  std::vector<std::vector<float>> rows;
  // row 0: even dims 3.5 * 2^-3, odd dims -1.25 * 2^-3 (j = 1: s = (-1)^(i & 1)). amax 0.4375:
  //   s = 0.4375 / 6 -> 2^-3 (e = 124), v = 3.5 and -1.25: both ties, to the smaller magnitude:
  //   codes 5 (3.0) and 8 | 2 (-1.0); byte = 0x5 | 0xA << 4 = 0xA5. Every block the same.
  rows.push_back(two_spikes(3.5 / 8, -1.25 / 8, 1));
  // row 1: the same, a hair above the thresholds in the odd dims (-1.25 -> one bf16 step more).
  rows.push_back(two_spikes(3.5 / 8, -(1.25 + 1.0 / 128) / 8, 1));
  // row 2: even dims 6 * 2^4 (amax / 6 is exactly 2^4: e = 131, no rounding up), odd dims
  //   -0.1 * 2^4 (code 0, no sign bit): v = 6 -> 7; byte 0x07.
  rows.push_back(two_spikes(96.0, -1.6, 1));
  // row 3: a single +Inf at dim 0: every y = +Inf, amax = Inf, e = 255, inv = -Inf, v = -Inf:
  //   code 7 | 8 on every nibble (0xff), q_sf = 0xffffffff.
  rows.push_back(row_with(0.0f, 0, INFINITY));
  // row 4: a single -Inf: v = +Inf: code 7 everywhere (0x77), q_sf 0xffffffff.
  rows.push_back(row_with(0.0f, 0, -INFINITY));
  // row 5: zeros (dim 5 = -0): scale floor 1e-4 / 6 -> 2^-15 (e = 112); codes 0, no sign.
  rows.push_back(row_with(0.0f, 5, -0.0f));
  // row 6: a NaN at dim 3: every y NaN, amax ignores NaN (0, floor: e = 112), v NaN -> 6, code 7, no sign.
  rows.push_back(row_with(1.0f, 3, NAN));
  // row 7: j = 32: s = +1 for blocks 0 (dims 0..31) and 2 (64..95), -1 for blocks 1 and 3:
  //   block values 5 * 2^2 and -0.75 * 2^2: blocks 0, 2 -> e = 127 + 2 (s = 20/6 -> 4), v = 5.0
  //   is a tie: six thresholds strictly below, code 6 (4.0), not 7 (6.0) -> byte 0x66; blocks 1, 3 -> amax 3: s = 0.5 -> e = 126, inv = 2:
  //   v = -6 -> 8 | 7 -> byte 0xff.
  rows.push_back(two_spikes(20.0, -3.0, 32));
  const HostCase c = fp4_rows(rows);
  for (const auto& be : iqtest::backends_under_test({1, 2})) {
    SCOPED_TRACE(be.name);
    const iqtest::Outputs o = run_on(be, c);
    ASSERT_EQ(o.q_out.size(), rows.size() * 64);
    ASSERT_EQ(o.q_sf.size(), rows.size() * 4);
    auto sf = [&](std::size_t r) {  // q_sf as the int32 it is (little-endian bytes)
      return std::uint32_t(o.q_sf[r * 4]) | std::uint32_t(o.q_sf[r * 4 + 1]) << 8 |
             std::uint32_t(o.q_sf[r * 4 + 2]) << 16 | std::uint32_t(o.q_sf[r * 4 + 3]) << 24;
    };
    auto row_bytes = [&](std::size_t r, std::uint8_t want_even_blocks, std::uint8_t want_odd_blocks) {
      for (int m = 0; m < 64; ++m) {
        const bool odd_block = (m / 16) & 1;
        const std::uint8_t want = odd_block ? want_odd_blocks : want_even_blocks;
        ASSERT_EQ(int(o.q_out[r * 64 + m]), int(want)) << "row " << r << " byte " << m;
      }
    };
    // Row by row: the code bytes of blocks 0 and 2, of blocks 1 and 3, and q_sf.
    const struct {
      std::uint8_t even_blocks, odd_blocks;
      std::uint32_t sf;
    } expected[] = {
        {0xA5, 0xA5, 0x7c7c7c7cu},
        {0xB5, 0xB5, 0x7c7c7c7cu},  // -1.2578 > 1.25: code 3 (1.5), sign: 0xB
        {0x07, 0x07, 0x83838383u},
        {0xff, 0xff, 0xffffffffu},
        {0x77, 0x77, 0xffffffffu},
        {0x00, 0x00, 0x70707070u},
        {0x77, 0x77, 0x70707070u},
        {0x66, 0xff, 0x7e817e81u},
    };
    for (std::size_t r = 0; r < std::size(expected); ++r) {
      row_bytes(r, expected[r].even_blocks, expected[r].odd_blocks);
      EXPECT_EQ(sf(r), expected[r].sf) << "row " << r;
    }
    for (std::size_t r = 0; r < rows.size(); ++r)  // weights_out = weight * weight_scale, no scale
      EXPECT_EQ(o.weights_out[r], -0.75f) << r;
    // and the model agrees
    EXPECT_TRUE(iqtest::compare(o, model_outputs(c), c.H).exact()) << iqtest::compare(o, model_outputs(c), c.H).summary();
  }
}

// ---------------------------------------------------------------------------------------
// FNUZ: the FN result re-encoded (0x80 -> 0x00, weights_out x 2), so dequant(q) * weights_out
// is unchanged (SGLang's check: q_fnuz.float() * w_fnuz == q_fn.float() * w_fn exactly).
// ---------------------------------------------------------------------------------------
// float8_e4m3fnuz, by its own definition: bias 8, no infinities, 0x80 is NaN; e = 0 -> m * 2^-10.
double e4m3fnuz_value(int code) {
  if (code == 0x80) return NAN;
  const int e = (code >> 3) & 15, m = code & 7;
  const double mag = e == 0 ? std::ldexp(double(m), -10) : std::ldexp(1.0 + m / 8.0, e - 8);
  return (code & 0x80) ? -mag : mag;
}

TEST(Fnuz, SameProductsAsFn) {
  const std::pair<RecipeId, RecipeId> pairs[] = {{RecipeId::kV4Fp8, RecipeId::kV4Fp8Fnuz},
                                                 {RecipeId::kV32Fp8, RecipeId::kV32Fp8Fnuz},
                                                 {RecipeId::kRopeFirstFp8, RecipeId::kRopeFirstFp8Fnuz}};
  for (const auto& pr : pairs) {
    for (DType dt : {DType::kBFloat16, DType::kFloat32}) {
      const HostCase fn_case = iqtest::random_case(37, 16, dt, DType::kInt64, 16, 4000 + int(pr.first), pr.first);
      HostCase fnuz_case = fn_case;
      fnuz_case.recipe = pr.second;
      for (const auto& be : iqtest::backends_under_test({1, 3})) {
        SCOPED_TRACE(std::string(recipe_name(pr.second)) + " " + dtype_name(dt) + " " + be.name);
        const iqtest::Outputs fn = run_on(be, fn_case), fz = run_on(be, fnuz_case);
        ASSERT_EQ(fn.q_out.size(), fz.q_out.size());
        std::int64_t zeros = 0, bad = 0;
        for (std::size_t i = 0; i < fn.q_out.size(); ++i) {
          zeros += fn.q_out[i] == 0x80;
          const std::uint8_t want = fn.q_out[i] == 0x80 ? 0x00 : fn.q_out[i];
          if (fz.q_out[i] != want && bad++ < 3) ADD_FAILURE() << "byte " << i;
          ASSERT_NE(fz.q_out[i], 0x80) << "NaN code in fnuz output";
        }
        EXPECT_EQ(bad, 0);
        EXPECT_GT(zeros, 0) << "the case should hold negative zeros";
        for (std::size_t r = 0; r < fn.weights_out.size(); ++r) {
          const float wfn = fn.weights_out[r], wfz = fz.weights_out[r];
          if (std::isnan(wfn)) {
            EXPECT_TRUE(std::isnan(wfz)) << r;
            continue;
          }
          ASSERT_EQ(iqtest::bits_of(wfz), iqtest::bits_of(wfn * 2.0f)) << r;
          // dequant(q) * w, exactly equal, in float32 (SGLang's check) and in double
          for (int i = 0; i < 128; ++i) {
            const std::size_t at = r * 128 + i;
            const float dfn = float(e4m3_value(fn.q_out[at])), dfz = float(e4m3fnuz_value(fz.q_out[at]));
            // == as in SGLang's check (-0 == +0: the one code that changes); 0 * Inf is NaN on both sides
            const float fz32 = dfz * wfz, fn32 = dfn * wfn;
            ASSERT_TRUE(fz32 == fn32 || (std::isnan(fz32) && std::isnan(fn32))) << "row " << r << " i " << i;
            const double pz = double(dfz) * double(wfz), pn = double(dfn) * double(wfn);
            ASSERT_TRUE(pz == pn || (std::isnan(pz) && std::isnan(pn))) << "row " << r << " i " << i;
          }
        }
      }
    }
  }
}

}  // namespace
