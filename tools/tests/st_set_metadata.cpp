// Test helper of the CLI tests: copies a safetensors file, setting one metadata string.
//   st_set_metadata IN.safetensors OUT.safetensors KEY VALUE
// (used to make a conformance file whose "variant" is not a recipe of the library).
#include <cstdio>
#include <string>

#include "io/safetensors.h"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: st_set_metadata IN OUT KEY VALUE\n");
    return 2;
  }
  indexer_q::io::StFile f;
  std::string err;
  if (!indexer_q::io::read_safetensors(argv[1], &f, &err) ||
      (f.metadata[argv[3]] = argv[4], !indexer_q::io::write_safetensors(argv[2], f, &err))) {
    std::fprintf(stderr, "st_set_metadata: %s\n", err.c_str());
    return 1;
  }
  return 0;
}
