// tai/tai.hpp - the whole public API: include this. Not included: tai/btree_driver.hpp (runs a
// tree's steps on one thread without a controller, for tests and tools; it pulls in <random>).
#pragma once

#include "tai/btree.hpp"
#include "tai/buffer.hpp"
#include "tai/controller.hpp"
#include "tai/controller_stats.hpp"
#include "tai/engine.hpp"
#include "tai/engine_selector.hpp"
#include "tai/error.hpp"
#include "tai/file.hpp"
#include "tai/io_queue.hpp"
#include "tai/quota.hpp"
#include "tai/receipt.hpp"
