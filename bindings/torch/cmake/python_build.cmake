# Included right before project(indexer_q) in pip / scikit-build-core builds
# (pyproject.toml sets CMAKE_PROJECT_indexer_q_INCLUDE_BEFORE to this file).
#
# Decides INDEXER_Q_CUDA for the Python package: the CUDA backend is built only when the torch
# the package builds against has CUDA *and* nvcc is found (the top-level default when nvcc is
# found). A CPU-only torch forces it OFF even where nvcc is installed. An explicit
# -DINDEXER_Q_CUDA=... (e.g. `pip install . -C cmake.define.INDEXER_Q_CUDA=OFF`) wins.
if(NOT DEFINED CACHE{INDEXER_Q_CUDA})
  set(_iq_py "${Python_EXECUTABLE}")
  if(NOT _iq_py)
    set(_iq_py "${Python3_EXECUTABLE}")
  endif()
  if(_iq_py)
    execute_process(COMMAND "${_iq_py}" -c "import torch; print(torch.version.cuda or '')"
                    OUTPUT_VARIABLE _iq_torch_cuda RESULT_VARIABLE _iq_rc
                    OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(_iq_rc EQUAL 0 AND _iq_torch_cuda STREQUAL "")
      message(STATUS "indexer_q: torch has no CUDA -> INDEXER_Q_CUDA=OFF")
      set(INDEXER_Q_CUDA OFF CACHE BOOL "Build the CUDA backend (default: ON when nvcc is found)")
    elseif(_iq_rc EQUAL 0)
      message(STATUS "indexer_q: torch has CUDA ${_iq_torch_cuda}: the CUDA backend is built if nvcc is found")
    endif()
  endif()
endif()
