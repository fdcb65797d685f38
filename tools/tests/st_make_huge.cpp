// Test helper of the CLI tests: writes a safetensors file with one U8 tensor "big" whose data
// section is larger than this machine's memory (twice its physical memory, at least 1 GiB),
// without writing that data: the file is extended sparsely (ftruncate), so it takes no disk.
//   st_make_huge OUT.safetensors           a consistent file of that size
//   st_make_huge OUT.safetensors --short   the same header, but the file ends after it
// Prints the tensor's byte count.
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3 || (argc == 3 && std::strcmp(argv[2], "--short") != 0)) {
    std::fprintf(stderr, "usage: st_make_huge OUT [--short]\n");
    return 2;
  }
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  std::uint64_t bytes = pages > 0 && page > 0 ? 2 * std::uint64_t(pages) * std::uint64_t(page) : 0;
  if (bytes < (std::uint64_t(1) << 30)) bytes = std::uint64_t(1) << 30;
  std::string header = "{\"big\":{\"dtype\":\"U8\",\"shape\":[" + std::to_string(bytes) +
                       "],\"data_offsets\":[0," + std::to_string(bytes) + "]}}";
  while (header.size() % 8) header += ' ';
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = (unsigned char)(std::uint64_t(header.size()) >> (8 * i));
  const int fd = ::open(argv[1], O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0 || ::write(fd, len, 8) != 8 || ::write(fd, header.data(), header.size()) != ssize_t(header.size()) ||
      (argc == 2 && ::ftruncate(fd, off_t(8 + header.size() + bytes)) != 0)) {
    std::perror("st_make_huge");
    return 1;
  }
  ::close(fd);
  std::printf("%llu\n", (unsigned long long)bytes);
  return 0;
}
