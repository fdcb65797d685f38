// Used instead of tools/device_cuda.cu when the build has no CUDA (INDEXER_Q_CUDA=OFF).
#include "device.h"

namespace indexer_q {
namespace cli {

std::unique_ptr<DeviceRuntime> make_cuda_runtime(std::string* why) {
  if (why) *why = "built without CUDA (INDEXER_Q_CUDA=OFF)";
  return nullptr;
}

}  // namespace cli
}  // namespace indexer_q
