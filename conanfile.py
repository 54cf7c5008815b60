"""Conan 2 recipe for mwstrat, a header-only C++20 library.

The package carries the headers and mwstrat's own CMake package config; consumers call
find_package(mwstrat CONFIG) and link mwstrat::mwstrat (or find_package(mwstrat CONFIG COMPONENTS core ring) and
link the components they use), exactly as with a plain install. The components are declared below too, with the
dependencies each needs (cmake/mwstratComponents.cmake is the table they follow).
"""
import os

from conan import ConanFile
from conan.tools.build import check_min_cppstd
from conan.tools.cmake import CMake, CMakeToolchain, cmake_layout
from conan.tools.files import load
import re


class MwstratConan(ConanFile):
    name = "mwstrat"
    description = "Synchronous multi-worker data-parallel training (MultiWorkerMirroredStrategy) for C++20"
    license = "MIT"
    topics = ("distributed-training", "data-parallel", "allreduce", "header-only")
    package_type = "header-library"
    settings = "os", "arch", "compiler", "build_type"
    exports_sources = "CMakeLists.txt", "cmake/*", "include/*"
    no_copy_source = True

    def set_version(self):
        text = load(self, os.path.join(self.recipe_folder, "CMakeLists.txt"))
        self.version = re.search(r"project\(mwstrat VERSION ([0-9.]+)", text).group(1)

    def requirements(self):
        self.requires("boost/[>=1.81 <2]")
        self.requires("onetbb/[>=2021.5 <2023]")
        self.requires("zlib/[>=1.2.11 <2]")
        self.requires("openssl/[>=3.0 <4]")

    def validate(self):
        check_min_cppstd(self, 20)

    def layout(self):
        cmake_layout(self)

    def generate(self):
        CMakeToolchain(self).generate()

    def build(self):
        cmake = CMake(self)
        cmake.configure(variables={"MWSTRAT_BUILD_TESTS": "OFF", "MWSTRAT_BUILD_EXAMPLES": "OFF",
                                   "MWSTRAT_BUILD_BENCHMARKS": "OFF", "MWSTRAT_INSTALL": "ON"})

    def package(self):
        CMake(self).install()

    def package_id(self):
        self.info.clear()

    def package_info(self):
        # mwstrat installs its own config (which finds its dependencies per component); let CMake use it.
        self.cpp_info.set_property("cmake_find_mode", "none")
        builddirs = [os.path.join("share", "cmake", "mwstrat")]
        # The components, as in cmake/mwstratComponents.cmake: a program that brings its own tensors needs core
        # (+ ring, data) and no oneTBB. The optional components are left to the CMake config, which finds the
        # system's packages: mpi (collective/mpi/, MPI) for find_package(mwstrat COMPONENTS mpi), and images
        # (data/images/, libpng and libjpeg) for COMPONENTS images, and libtorch (libtorch/, Debian's libtorch-dev)
        # for COMPONENTS libtorch.
        components = {
            "core": ["boost::headers", "boost::json"],  # + Threads
            "ring": ["core", "openssl::crypto"],
            "data": ["core", "zlib::zlib"],
            "nn": ["core", "data", "onetbb::libtbb"],
            "mwstrat": ["core", "ring", "data", "nn"],  # the whole library: mwstrat::mwstrat
        }
        for name, requires in components.items():
            component = self.cpp_info.components[name]
            component.set_property("cmake_target_name", f"mwstrat::{name}")
            component.requires = requires
            component.bindirs = []
            component.libdirs = []
            component.builddirs = builddirs
            if name == "core" and self.settings.os in ("Linux", "FreeBSD"):
                component.system_libs = ["pthread"]
