// The same program written for TAI's File API (the TAI paper's single-thread experiment, its
// figure 3.6): write() copies the record and returns a receipt at once, fsync() returns a receipt
// at once, and the program waits for the receipts only at the end of each batch of images.
#pragma once

#include <string>

#include "serial_loop.hpp"

namespace serial {

struct AsyncSettings {
  unsigned workers = 2;
  std::string engine = "auto";
  std::size_t batch = 1000;  // images between waits for every receipt of the batch
};

// The controller is made and shut down inside the clock, as a program would. *note says which
// engine ran.
LoopResult run_async_loop(const LoopSettings& settings, RecordSource& records, const AsyncSettings& async,
                          std::string* note);

}  // namespace serial
