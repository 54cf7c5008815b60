#pragma once
/// \file
/// The cluster family: TF_CONFIG and other cluster descriptions, the chief rules, resolvers, write paths.
/// See docs/cluster.md.

#include <mwstrat/cluster/address.hpp>
#include <mwstrat/cluster/cluster_config.hpp>
#include <mwstrat/cluster/cluster_spec.hpp>
#include <mwstrat/cluster/concepts.hpp>
#include <mwstrat/cluster/environment.hpp>
#include <mwstrat/cluster/free_ports.hpp>
#include <mwstrat/cluster/hostfile.hpp>
#include <mwstrat/cluster/hostlist.hpp>
#include <mwstrat/cluster/launcher_environment.hpp>
#include <mwstrat/cluster/simple_resolver.hpp>
#include <mwstrat/cluster/mpi_resolver.hpp>
#include <mwstrat/cluster/slurm_resolver.hpp>
#include <mwstrat/cluster/task_info.hpp>
#include <mwstrat/cluster/tf_config.hpp>
#include <mwstrat/cluster/write_filepath.hpp>
