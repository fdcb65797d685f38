// indexer-q: the command-line tool of indexer_q (run, verify, bench).
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <string>

#include "cli.h"
#include "kside_cli.h"

namespace {

const char* kHelp =
    "usage: indexer-q <command> [options]\n"
    "\n"
    "fused_q_indexer_rope_hadamard_quant (DeepSeek-V4 indexer, query side): RoPE on the last 64\n"
    "of 128 dims, a 128-point Hadamard transform, FP8 E4M3 quantization with the per-row scale\n"
    "folded into the head weight. One numeric contract, bit-identical on every backend. The\n"
    "other forms engines run (DeepSeek-V3.2 layout, RoPE first, FP4, FNUZ FP8, vLLM's FP8 and\n"
    "MXFP4) are recipes of the same op, and so is the key side (RMSNorm + the same steps, stored\n"
    "into a paged cache: v4_k_fp8, v4_k_fp4): --recipe NAME on run and bench ('indexer-q run\n"
    "--help' lists them all); verify reads the golden files of every recipe.\n"
    "\n"
    "commands:\n"
    "  run       one DeepSeek-V4-shaped call on the best backend, checked byte for byte against\n"
    "            the scalar reference, timed, with the quantization error it buys\n"
    "  verify    conformance files (safetensors, any recipe) through every available backend\n"
    "  bench     a recipes x tokens x heads sweep beside a plain copy on the same device\n"
    "\n"
    "  indexer-q <command> --help   options of a command\n"
    "  indexer-q --version          version, backends, CPU instruction sets and recipes of this build\n"
    "\n";  // then kExitStatusHelp (cli.cpp), the one exit-status table

void print_version() {
  using namespace indexer_q;
  std::printf("indexer-q %s\n", version());
  std::printf("backends:");
  for (int i = int(Backend::kAuto) + 1; std::string(backend_name(Backend(i))) != "unknown"; ++i)
    if (backend_available(Backend(i))) std::printf(" %s", backend_name(Backend(i)));
  std::printf("\nrecipes:");
  for (RecipeId r : all_recipes()) std::printf(" %s", recipe_name(r));
  std::printf("\nkey-side recipes:");
  for (KRecipeId r : all_krecipes()) std::printf(" %s", krecipe_name(r));
  std::printf("\ncpu isas:");
  for (CpuIsa i : supported_cpu_isas()) std::printf(" %s", cpu_isa_name(i));
  CpuIsa active;
  const Status s = active_cpu_isa(&active);
  if (s.ok()) std::printf(" (active: %s)", cpu_isa_name(active));
  std::printf("\ncuda: ");
  std::string why;
  if (backend_available(Backend::kCuda)) {
    auto rt = indexer_q::cli::make_cuda_runtime(&why);
    std::printf("%s\n", rt ? rt->name().c_str() : ("unusable: " + why).c_str());
  } else {
    indexer_q::cli::make_cuda_runtime(&why);
    std::printf("not available%s%s\n", why.empty() ? "" : ": ", why.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace indexer_q::cli;
  if (argc < 2) {
    std::fputs(kHelp, stderr);
    std::fputs(kExitStatusHelp, stderr);
    return kExitUsage;
  }
  const std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    std::fputs(kHelp, stdout);
    std::fputs(kExitStatusHelp, stdout);
    return 0;
  }
  if (cmd == "--version" || cmd == "version") {
    print_version();
    return 0;
  }
  int (*fn)(int, char**) = nullptr;
  if (cmd == "run") fn = cmd_run;
  else if (cmd == "verify") fn = cmd_verify;
  else if (cmd == "bench") fn = cmd_bench;
  if (!fn) {
    std::fprintf(stderr, "indexer-q: unknown command '%s' (expected run, verify or bench; see indexer-q --help)\n",
                 cmd.c_str());
    return kExitUsage;
  }
  try {
    return fn(argc - 2, argv + 2);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "indexer-q %s: %s\n", cmd.c_str(), e.what());
    return kExitUsage;
  } catch (const std::bad_alloc&) {  // named after the sizes the command noted (note_sizes)
    std::fprintf(stderr, "indexer-q %s: error: %s\n", cmd.c_str(), out_of_memory_message().c_str());
    return kExitRuntime;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "indexer-q %s: error: %s\n", cmd.c_str(), e.what());
    return kExitRuntime;
  }
}
