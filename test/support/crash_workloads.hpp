// Shared by the crash-simulation tests (test/crashsim_*_test.cpp): the workloads, configurations
// and rig of src/testing/crash_workload.hpp (which tai-bench crash uses too), under the
// tests' namespace.
#pragma once

#include "tai/testing/crash_workload.hpp"
#include "support/controller_support.hpp"
#include "support/engine_configs.hpp"

namespace tai::test::crash {
using namespace ::tai::engines::crash;  // NOLINT: the tests name the rig's types unqualified
}  // namespace tai::test::crash
