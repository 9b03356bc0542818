# Configure-time values for tools/cli/build_info.h (llmplan --version): so
# that the planner binary can name the LibTorch, CUDA and NCCL its executor
# was built with without loading them. Included from tools/CMakeLists.txt,
# after the top level has looked for LibTorch.

# The commit, when built from a git checkout (no git, or no checkout: none).
set(LLMPLAN_GIT_COMMIT "")
find_package(Git QUIET)
if(GIT_FOUND)
  execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse --short=12 HEAD
                  WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
                  RESULT_VARIABLE git_status OUTPUT_VARIABLE git_commit
                  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(git_status EQUAL 0)
    set(LLMPLAN_GIT_COMMIT ${git_commit})
    # HEAD's reflog changes with every commit and checkout: re-configure then,
    # so that an incremental build does not report the previous commit.
    execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse --git-path logs/HEAD
                    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
                    OUTPUT_VARIABLE git_reflog OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    get_filename_component(git_reflog "${git_reflog}" ABSOLUTE BASE_DIR ${PROJECT_SOURCE_DIR})
    if(EXISTS "${git_reflog}")
      set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${git_reflog}")
    endif()
  endif()
endif()

# LLMPLAN_COMMIT in the environment names the commit instead: the GPU
# machine's copy of the tree is not a checkout of it, and its git metadata,
# where any came along, named an older commit (a profile measured there on
# 2026-12-07 said d444fb5 of 83f2661). tools/device/gpu_build.sh configures
# on every call, so the variable set for a call reaches the build.
if(NOT "$ENV{LLMPLAN_COMMIT}" STREQUAL "")
  set(LLMPLAN_GIT_COMMIT "$ENV{LLMPLAN_COMMIT}")
endif()

# The executor's LibTorch, and with LLMPLAN_WITH_CUDA its CUDA toolkit and
# the NCCL whose nccl.h it compiles against (the NCCL_MAJOR/MINOR/PATCH
# defines; the library linked is the one beside that header).
set(LLMPLAN_TORCH_VERSION "")
set(LLMPLAN_WITH_CUDA_BOOL false)
set(LLMPLAN_CUDA_VERSION "")
set(LLMPLAN_NCCL_VERSION "")
if(LLMPLAN_WITH_TORCH)
  set(LLMPLAN_TORCH_VERSION "${Torch_VERSION}")
  if(LLMPLAN_WITH_CUDA)
    set(LLMPLAN_WITH_CUDA_BOOL true)
    find_package(CUDAToolkit QUIET)
    set(LLMPLAN_CUDA_VERSION "${CUDAToolkit_VERSION}")
    find_file(nccl_header nccl.h HINTS ${LLMPLAN_NCCL_ROOT}/include ${CUDAToolkit_INCLUDE_DIRS} NO_CACHE)
    if(nccl_header)
      file(STRINGS "${nccl_header}" nccl_defines REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) +[0-9]+")
      foreach(part MAJOR MINOR PATCH)
        string(REGEX MATCH "NCCL_${part} +([0-9]+)" unused "${nccl_defines}")
        set(nccl_${part} "${CMAKE_MATCH_1}")
      endforeach()
      set(LLMPLAN_NCCL_VERSION "${nccl_MAJOR}.${nccl_MINOR}.${nccl_PATCH}")
    endif()
  endif()
endif()

configure_file(${CMAKE_CURRENT_LIST_DIR}/build_info.h.in ${PROJECT_BINARY_DIR}/tools/cli/build_info.h @ONLY)
