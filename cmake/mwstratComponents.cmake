# mwstrat's components: which headers each one holds, which other components its headers use, and which packages
# they need. The one table the build (CMakeLists.txt), the installed package config (mwstratConfig.cmake.in) and
# the boundary check (tests/cmake/check_boundaries.cmake) read; usable in script mode too.
#
# A header belongs to the first component (in the order of mwstrat_all_components) one of whose patterns matches
# its path below include/mwstrat/; the patterns name folders, so a header added to a folder lands in its
# component with no edit here. What no pattern claims is core's.
#
#   core  error, version, tensor/, cluster/, checkpoint/, collective/ (concepts, local backend), strategy/
#         (mirrored), train/ (fit, callbacks)           Boost.JSON (+ Boost headers), Threads
#   ring  collective/ring/, the multi-worker strategy and its options   core + OpenSSL (HMAC); Asio is Boost's
#   data  data/ (IDX, MNIST, sharding, image batches), fit's image-set input       core + zlib (gzip IDX)
#   nn    nn/ (the reference layers and kernels, on data's image batches)          core + data + oneTBB
#   mpi   collective/mpi/ (optional: defined where MPI is found)                   core + MPI
#   images data/images/ (PNG and JPEG image features; optional: defined where libpng and libjpeg are found)
#                                                                                  core + data + PNG + JPEG
#   libtorch libtorch/ (DDP for torch::nn::Module; optional: defined where libtorch is found)    core + Torch
# mwstrat::mwstrat is core + ring + data + nn and holds the umbrella header mwstrat.hpp.

set(mwstrat_all_components mpi images libtorch ring nn data core)  # the order patterns are tried in
set(mwstrat_whole_components core ring data nn)    # what mwstrat::mwstrat is (and find_package with no COMPONENTS)
# Defined only where their packages are found, never part of the whole (so mwstrat.hpp does not include them);
# find_package(mwstrat) with no COMPONENTS loads them where it finds their packages.
set(mwstrat_optional_components mpi images libtorch)

# Patterns (regular expressions on the path below include/mwstrat/).
set(mwstrat_mpi_patterns "^collective/mpi/")
# Image decoding links libpng and libjpeg: a program that reads TFRecords of raw tensors needs neither.
set(mwstrat_images_patterns "^data/images/")
# The libtorch adapter compiles against libtorch's headers (tens of seconds per translation unit): only its users
# pay for them.
set(mwstrat_libtorch_patterns "^libtorch/")
# The multi-worker strategy and its communication options (which carry the ring's transport) are the ring's; the
# family umbrellas collective.hpp and strategy.hpp include them.
set(mwstrat_ring_patterns "^collective/ring/" "^strategy/multi_worker" "^strategy/communication_options"
    "^collective\\.hpp$" "^strategy\\.hpp$")
set(mwstrat_nn_patterns "^nn/" "^nn\\.hpp$")
# train/distributed_input.hpp is data's image set as fit reads it (it includes data/), and train.hpp includes it.
set(mwstrat_data_patterns "^data/" "^data\\.hpp$" "^train/distributed_input" "^train/sample_weights" "^train\\.hpp$")
set(mwstrat_core_patterns ".")
# Headers of another component's folder that are core's vocabulary, tried before every folder pattern:
# data/cursor.hpp is the data position a training state (checkpoint/, core) stores.
set(mwstrat_core_pinned_patterns "^data/cursor\\.hpp$")
set(mwstrat_whole_patterns "^mwstrat\\.hpp$")  # checked first: the umbrella of everything

# Which components each one's headers include (direct; a component's closure follows these).
set(mwstrat_core_uses "")
set(mwstrat_ring_uses core)
set(mwstrat_data_uses core)
set(mwstrat_nn_uses core data)  # the reference model trains on data's image batches
set(mwstrat_mpi_uses core)
set(mwstrat_images_uses core data)  # decodes the image features of data/'s records
set(mwstrat_libtorch_uses core)  # a model for fit (train/), nothing of data/ or nn/

# find_package arguments (one string per package) and the targets linked, per component.
set(mwstrat_core_packages "Boost 1.81 COMPONENTS json" "Threads")
set(mwstrat_core_links Boost::headers Boost::json Threads::Threads)
set(mwstrat_ring_packages "OpenSSL")
set(mwstrat_ring_links OpenSSL::Crypto)
set(mwstrat_data_packages "ZLIB")
set(mwstrat_data_links ZLIB::ZLIB)
set(mwstrat_nn_packages "TBB")
set(mwstrat_nn_links TBB::tbb)
set(mwstrat_mpi_packages "MPI COMPONENTS CXX")
set(mwstrat_mpi_links MPI::MPI_CXX)
set(mwstrat_images_packages "PNG" "JPEG")
set(mwstrat_images_links PNG::PNG JPEG::JPEG)
set(mwstrat_libtorch_packages "Torch")
set(mwstrat_libtorch_links torch)

# mwstrat_component_of(<path below include/mwstrat/> <out-var>): the component that holds the header, or "whole"
# for the umbrella of everything.
function(mwstrat_component_of path out)
  foreach(pattern IN LISTS mwstrat_core_pinned_patterns)
    if(path MATCHES "${pattern}")
      set(${out} core PARENT_SCOPE)
      return()
    endif()
  endforeach()
  foreach(component whole ${mwstrat_all_components})
    foreach(pattern IN LISTS mwstrat_${component}_patterns)
      if(path MATCHES "${pattern}")
        set(${out} ${component} PARENT_SCOPE)
        return()
      endif()
    endforeach()
  endforeach()
endfunction()

# mwstrat_component_closure(<out-var> <components...>): the components and every component they use, in
# dependency order (core first).
function(mwstrat_component_closure out)
  set(todo ${ARGN})
  set(seen "")
  while(todo)
    list(POP_FRONT todo c)
    if(NOT c IN_LIST seen)
      list(APPEND seen ${c})
      list(APPEND todo ${mwstrat_${c}_uses})
    endif()
  endwhile()
  set(ordered "")
  foreach(c core ring data nn images libtorch mpi)
    if(c IN_LIST seen)
      list(APPEND ordered ${c})
    endif()
  endforeach()
  set(${out} ${ordered} PARENT_SCOPE)
endfunction()
