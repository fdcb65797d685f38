// indexer-q run: one DeepSeek-V4-shaped call on the best backend, checked byte for byte against
// the scalar reference, timed, and with the quantization error it buys (Hadamard vs none).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli.h"
#include "common/problem.h"
#include "common/row.h"
#include "workload.h"

namespace indexer_q {
namespace cli {

namespace {

const std::vector<OptionSpec> kRunOptions = {
    {"backend", "B", "auto|reference|cpu|cuda (default auto: cuda when a device is usable, else cpu)"},
    {"isa", "I", "cpu backend instruction set: auto|scalar|avx2|avx512 (default auto: the best\n"
                 "supported one, or INDEXER_Q_CPU_ISA)"},
    {"threads", "N", "cpu backend threads, >= 1 (default: the library default, cpu_num_threads())"},
    {"tokens", "T", "tokens (B), >= 1 (default 4096)"},
    {"heads", "H", "heads per token, >= 1 (default 64)"},
    {"dtype", "D", "q_input / weight dtype: bf16|fp16|fp32 (default bf16)"},
    {"pos-dtype", "D", "positions dtype: int32|int64 (default int64)"},
    {"seed", "S", "workload seed, >= 0 (default 1)"},
    {"outliers", "N", "outlier channels in q, 0..128 (default 4)"},
    {"outlier-scale", "X", "magnitude of the outlier channels relative to the others, 1..1000000\n"
                           "(default 30)"},
    {"save", "FILE", "also write the workload and the checked outputs as a conformance file\n"
                     "(safetensors, readable by 'indexer-q verify')"},
    {"warmup", "N", "untimed calls before timing, >= 0 (default 1)"},
    {"iters", "N", "timed samples; the median is reported, >= 1 (default 5)"},
};

const char* kRunDescription =
    "Builds a DeepSeek-V4-shaped workload (deterministic from --seed): q ~ N(0,1) with outlier\n"
    "channels (default 4 channels of 30x magnitude), weight ~ N(0,1), weight_scale =\n"
    "1/sqrt(H*128), a real RoPE table (theta_j = 10000^(-2j/64), max_pos = round_up(T, 4096) +\n"
    "4096) and the positions of a prefill starting at a seed-chosen offset. Runs the op on the backend, checks every output byte against\n"
    "the scalar reference, and reports the time (median), the effective bandwidth (bytes read and\n"
    "written once) and the quantization error: the relative L2 error of dequant(q_fp8) against a\n"
    "float64 evaluation of RoPE + Hadamard, next to the error of quantizing the RoPE'd rows\n"
    "without the Hadamard (same per-row absmax recipe).\n"
    "Exit status: 0 if the output is bit-exact, 1 if not (or on an error), 2 for a bad command line.";

struct QuantError {
  double err_had = 0, norm_had = 0;      // sum of squares
  double err_plain = 0, norm_plain = 0;
};

float load_value(const std::vector<std::uint8_t>& buf, DType dt, std::size_t i) {
  if (dt == DType::kBFloat16 || dt == DType::kFloat16) {
    std::uint16_t h;
    std::memcpy(&h, buf.data() + 2 * i, 2);
    return dt == DType::kBFloat16 ? detail::bf16_to_f32(h) : detail::f16_to_f32(h);
  }
  float f;
  std::memcpy(&f, buf.data() + 4 * i, 4);
  return f;
}

// ||dequant(q_fp8) - y64|| / ||y64|| with y64 = float64 RoPE + Hadamard / sqrt(128), and the
// same for the RoPE'd rows quantized without the Hadamard.
QuantError quant_error(const io::ConformanceCase& c, const std::vector<std::uint8_t>& q_fp8) {
  using namespace detail;
  QuantError e;
  const double inv_sqrt128 = 1.0 / std::sqrt(128.0);
  const float* freqs = reinterpret_cast<const float*>(c.freqs.data());
  for (std::int64_t b = 0; b < c.B; ++b) {
    std::int64_t p;
    if (c.pos_dtype == DType::kInt32) {
      std::int32_t v;
      std::memcpy(&v, c.positions.data() + 4 * b, 4);
      p = v;
    } else {
      std::memcpy(&p, c.positions.data() + 8 * b, 8);
    }
    const float* f = freqs + p * kFreqsDim;
    for (std::int64_t h = 0; h < c.H; ++h) {
      const std::int64_t r = b * c.H + h;
      float x[kHeadDim];
      double xd[kHeadDim];
      for (int i = 0; i < kHeadDim; ++i) {
        x[i] = load_value(c.q_input, c.dtype, std::size_t(r * kHeadDim + i));
        xd[i] = x[i];
      }
      // float path: the RoPE'd row (for the no-Hadamard comparison) and the op's scale
      rope_row(x, f);
      float roped[kHeadDim];
      std::memcpy(roped, x, sizeof roped);
      hadamard_row(x);
      const float scale = scale_and_amax_row(x);
      // float64 path
      for (int j = 0; j < kRopeDim / 2; ++j) {
        const double xr = xd[kRopeOffset + 2 * j], xi = xd[kRopeOffset + 2 * j + 1];
        const double cs = f[2 * j], sn = f[2 * j + 1];
        xd[kRopeOffset + 2 * j] = xr * cs - xi * sn;
        xd[kRopeOffset + 2 * j + 1] = xr * sn + xi * cs;
      }
      double rd[kHeadDim];
      std::memcpy(rd, xd, sizeof rd);
      for (int s = 1; s < kHeadDim; s <<= 1)
        for (int i = 0; i < kHeadDim; ++i)
          if ((i & s) == 0) {
            const double a = xd[i], bb = xd[i + s];
            xd[i] = a + bb;
            xd[i + s] = a - bb;
          }
      for (int i = 0; i < kHeadDim; ++i) {
        const double y = xd[i] * inv_sqrt128;
        const double dq = double(e4m3fn_decode(q_fp8[std::size_t(r * kHeadDim + i)])) * double(scale);
        e.err_had += (dq - y) * (dq - y);
        e.norm_had += y * y;
      }
      // without the Hadamard: the same absmax recipe on the RoPE'd float row
      float amax = 0.0f;
      for (int i = 0; i < kHeadDim; ++i) amax = std::fmax(amax, std::fabs(roped[i]));
      const float scale2 = std::fmax(kScaleFloor, amax) / kFp8Max;
      const float inv2 = 1.0f / scale2;
      for (int i = 0; i < kHeadDim; ++i) {
        const double dq = double(e4m3fn_decode(quantize_value(roped[i], inv2))) * double(scale2);
        e.err_plain += (dq - rd[i]) * (dq - rd[i]);
        e.norm_plain += rd[i] * rd[i];
      }
    }
  }
  return e;
}

}  // namespace

int cmd_run(int argc, char** argv) {
  Args a("run", kRunOptions, argc, argv);
  if (a.help()) {
    std::fputs(a.help_text("indexer-q run [options]", kRunDescription).c_str(), stdout);
    return 0;
  }
  if (!a.positional().empty()) throw UsageError("unexpected argument '" + a.positional()[0] + "'");
  WorkloadSpec spec;
  spec.tokens = a.integer("tokens", 4096, 1, std::int64_t(1) << 22);
  spec.heads = a.integer("heads", 64, 1, 4096);
  spec.dtype = parse_dtype_option(a, "dtype", "bf16");
  spec.pos_dtype = parse_pos_dtype_option(a, "pos-dtype", "int64");
  spec.seed = std::uint64_t(a.integer("seed", 1, 0, INT64_MAX));
  spec.outlier_channels = int(a.integer("outliers", 4, 0, 128));
  spec.outlier_scale = double(a.integer("outlier-scale", 30, 1, 1000000));
  const int warmup = int(a.integer("warmup", 1, 0, 100000));
  const int iters = int(a.integer("iters", 5, 1, 100000));
  Runtimes rts;
  const Target t = select_target(a, &rts);
  if (spec.pos_dtype == DType::kInt32 && workload_max_pos(spec.tokens) > INT32_MAX)
    throw UsageError("option --pos-dtype int32: positions up to max_pos exceed int32");

  const Workload w = make_workload(spec);
  const io::ConformanceCase& c = w.data;
  const std::int64_t rows = c.B * c.H;

  // Expected bytes from the scalar reference on the host.
  std::vector<std::uint8_t> ref8;
  std::vector<float> refw;
  Status s = reference_outputs(c, &ref8, &refw);
  if (!s.ok()) {
    std::fprintf(stderr, "indexer-q run: reference: %s\n", s.message().c_str());
    return 1;
  }

  DeviceCase dc(*t.rt, c);
  dc.poison(0xff);
  const Options opts = t.options();
  s = dc.run(opts);
  if (!s.ok()) {
    std::fprintf(stderr, "indexer-q run: %s\n", s.message().c_str());
    return 1;
  }
  std::vector<std::uint8_t> out8;
  std::vector<float> outw;
  dc.download(&out8, &outw);
  const io::Diff d = io::compare_outputs(out8.data(), outw.data(), ref8.data(), refw.data(), rows);

  Status timed_status;
  const double us = t.rt->time_median_us(
      [&] {
        Status st = dc.run(opts);
        if (!st.ok()) timed_status = st;
      },
      warmup, iters);
  t.rt->synchronize();
  if (!timed_status.ok()) {
    std::fprintf(stderr, "indexer-q run: %s\n", timed_status.message().c_str());
    return 1;
  }
  const double bytes = double(detail::bytes_moved(c.B, c.H, c.dtype, c.pos_dtype));
  const QuantError qe = quant_error(c, out8);
  const double e_had = std::sqrt(qe.err_had / qe.norm_had);
  const double e_plain = std::sqrt(qe.err_plain / qe.norm_plain);

  std::string outl;
  for (int dim : w.outlier_dims) outl += (outl.empty() ? "" : ",") + std::to_string(dim);
  std::printf("indexer-q run: fused_q_indexer_rope_hadamard_quant (indexer_q %s)\n", version());
  std::printf("  workload     %lld tokens x %lld heads, %s, %s positions %lld..%lld (max_pos %lld), seed %llu,\n"
              "               outlier channels %s (%gx)\n",
              (long long)c.B, (long long)c.H, dtype_name(c.dtype), dtype_name(c.pos_dtype),
              (long long)w.start_pos, (long long)(w.start_pos + c.B - 1), (long long)c.max_pos,
              (unsigned long long)spec.seed, outl.empty() ? "none" : outl.c_str(), spec.outlier_scale);
  if (t.backend == Backend::kCuda)
    std::printf("  backend      cuda (%s)\n", t.rt->name().c_str());
  else if (t.backend == Backend::kCpu)
    std::printf("  backend      cpu, isa %s, %d thread%s (%s)\n", cpu_isa_name(t.isa), t.threads,
                t.threads == 1 ? "" : "s", t.rt->name().c_str());
  else
    std::printf("  backend      reference (scalar, 1 thread; %s)\n", t.rt->name().c_str());
  std::printf("  rows         %lld\n", (long long)rows);
  std::printf("  bytes moved  %s per call (read + written once)\n", human_bytes(bytes).c_str());
  std::printf("  time         %.2f us (median of %d)\n", us, iters);
  std::printf("  bandwidth    %.2f GB/s\n", bytes / (us * 1e3));
  std::printf("  bit-exact vs reference: %s (%lld of %lld fp8 bytes and %lld of %lld weights differ)\n",
              d.exact() ? "yes" : "NO", (long long)d.fp8_bytes, (long long)(rows * 128), (long long)d.weights,
              (long long)rows);
  std::printf("  quantization error, relative L2 vs float64 (||dequant(q_fp8) - y64|| / ||y64||):\n");
  std::printf("    with Hadamard (this op)   %.4e\n", e_had);
  std::printf("    without Hadamard          %.4e\n", e_plain);
  const double ratio = e_plain / e_had;
  std::printf("    ratio without / with      %.2fx (%s)\n", ratio,
              ratio > 1.005   ? "the Hadamard lowers the error"
              : ratio < 0.995 ? "the Hadamard raises the error on this data"
                              : "about the same");
  if (a.has("save")) {
    if (!d.exact()) {
      std::fprintf(stderr, "indexer-q run: --save: not written, the output is not bit-exact\n");
      return 1;
    }
    io::StFile f;
    auto put = [&f](const char* name, DType dt, std::vector<std::int64_t> shape, const std::uint8_t* p,
                    std::size_t n) {
      io::StTensor t;
      t.dtype = io::dtype_to_safetensors(dt);
      t.shape = std::move(shape);
      t.data.assign(p, p + n);
      f.tensors[name] = std::move(t);
    };
    put("q_input", c.dtype, {c.B, c.H, 128}, c.q_input.data(), c.q_input.size());
    put("weight", c.dtype, {c.B, c.H}, c.weight.data(), c.weight.size());
    put("freqs", DType::kFloat32, {c.max_pos, 64}, c.freqs.data(), c.freqs.size());
    put("positions", c.pos_dtype, {c.B}, c.positions.data(), c.positions.size());
    put("q_fp8", DType::kFloat8E4M3, {c.B, c.H, 128}, out8.data(), out8.size());
    put("weights_out", DType::kFloat32, {c.B, c.H, 1}, reinterpret_cast<const std::uint8_t*>(outw.data()),
        outw.size() * 4);
    f.metadata["weight_scale"] = fmt("%.17g", double(c.weight_scale));
    f.metadata["op"] = "fused_q_indexer_rope_hadamard_quant";
    f.metadata["producer"] = std::string("indexer-q run, backend ") + t.label + ", seed " + std::to_string(spec.seed);
    std::string err;
    if (!io::write_safetensors(a.str("save", ""), f, &err)) {
      std::fprintf(stderr, "indexer-q run: --save: %s\n", err.c_str());
      return 1;
    }
    std::printf("  saved        %s\n", a.str("save", "").c_str());
  }
  return d.exact() ? 0 : 1;
}

}  // namespace cli
}  // namespace indexer_q
