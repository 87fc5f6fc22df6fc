// tai/error.hpp - the error and result types every TAI layer returns.
//
// TAI reports failures as std::error_code (errno values use std::generic_category) plus a
// human-readable message that names what failed and why ("engine 'uring' unavailable:
// kernel.io_uring_disabled = 2"). Nothing in TAI throws on an I/O failure.
#pragma once

#include <cerrno>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>
#include <variant>

namespace tai {

/// An error code with a message for people. Copyable, cheap when empty.
struct Error {
  std::error_code code;
  std::string message;  ///< full sentence, already including code.message() where useful

  static Error from_errno(int err, std::string what) {
    Error e{std::error_code(err, std::generic_category()), std::move(what)};
    e.message += ": ";
    e.message += e.code.message();
    return e;
  }
};

/// Either a value or an Error. A minimal std::expected for C++17.
template <class T>
class Result {
 public:
  Result(T value) : v_(std::move(value)) {}          // NOLINT(google-explicit-constructor)
  Result(Error error) : v_(std::move(error)) {}      // NOLINT(google-explicit-constructor)

  bool ok() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return ok(); }

  T& value() & { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  const T& value() const& { return std::get<0>(v_); }
  T* operator->() { return &std::get<0>(v_); }
  T& operator*() & { return std::get<0>(v_); }

  /// The error; only valid when !ok().
  const Error& error() const& { return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

}  // namespace tai
