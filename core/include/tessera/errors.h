// The error hierarchy of Tessera. Every exception the runtime throws derives from tessera::Error;
// messages name what was asked, what was found and what to do next. Exceptions never cross a
// plugin's C entry point (see plugin.h).
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

namespace tessera {

// Base of every Tessera exception.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An argument or tensor that does not fit the call: wrong shape, dtype, device or attribute.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// A malformed environment variable or option value; the message names the variable, the value
// and what is accepted.
class ConfigError : public Error {
 public:
  using Error::Error;
};

// A file that can not be read or written, or whose contents are malformed (a dataset, a
// checkpoint); the message names the file and what is wrong.
class FileError : public Error {
 public:
  using Error::Error;
};

// A device the user asked for does not exist or can not run on this system.
class DeviceUnavailable : public Error {
 public:
  using Error::Error;
};

// No device in the dispatch chain can run an op call: neither the call's own device nor any device
// of the fallback chain (dispatch.h); the message names the op, the device and what to set.
class UnsupportedOperation : public Error {
 public:
  using Error::Error;
};

// A device could not satisfy an allocation. Carries the device, the request and what was free.
class OutOfMemory : public Error {
 public:
  OutOfMemory(std::string device, std::size_t requested, std::size_t free_bytes);
  const std::string& device() const { return device_; }
  std::size_t requested() const { return requested_; }
  std::size_t free_bytes() const { return free_; }

 private:
  std::string device_;
  std::size_t requested_;
  std::size_t free_;
};

// A plugin misbehaved after it was loaded (a kernel or queue reported a backend failure).
class BackendError : public Error {
 public:
  using Error::Error;
};

// Formats a byte count for messages: "512 B", "3.0 MiB", "79.2 GiB".
std::string format_bytes(std::size_t bytes);

}  // namespace tessera
