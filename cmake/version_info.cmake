# Writes OUT from IN with the source tree's git commit, at every build: configure_file leaves OUT untouched when the
# commit is unchanged, so only a new commit (or a change between clean and dirty) recompiles it.
# Run as: cmake -DSOURCE_DIR=... -DIN=... -DOUT=... -DPLUMB_VERSION=... -DPLUMB_CUDA_ARCHS_TEXT=...
#   -P version_info.cmake
set(PLUMB_GIT_COMMIT "unknown")
find_package(Git QUIET)
if(GIT_FOUND)
  execute_process(COMMAND ${GIT_EXECUTABLE} -C ${SOURCE_DIR} rev-parse --short=12 HEAD OUTPUT_VARIABLE commit
                  RESULT_VARIABLE failed OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(NOT failed)
    set(PLUMB_GIT_COMMIT "${commit}")
    execute_process(COMMAND ${GIT_EXECUTABLE} -C ${SOURCE_DIR} status --porcelain --untracked-files=no
                    OUTPUT_VARIABLE changes ERROR_QUIET)
    if(changes)
      string(APPEND PLUMB_GIT_COMMIT "-dirty")
    endif()
  endif()
endif()
configure_file(${IN} ${OUT} @ONLY)
