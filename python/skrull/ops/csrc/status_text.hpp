// status_text.hpp - the sentences skrull's Python binding raises, for the torch op and the
// libtorch trainer (cpp_example/libtorch, which compiles this file too).
//
// The op raises the same message as the ctypes binding (python/skrull/_errors.py, `_describe`
// and `Error.__str__`): "<sentence> [<STATUS_NAME>]". python/tests/test_ops.py compares the
// two for every status a plan or a configuration can fail with, so a change of wording on
// either side fails a test. Plain C++20: no torch header, so it compiles in a second.
#ifndef SKRULL_OPS_STATUS_TEXT_HPP
#define SKRULL_OPS_STATUS_TEXT_HPP

#include <cstdint>
#include <optional>
#include <string>

#include "skrull.h"

namespace skrull_ops {

/// The Python exception a failure maps to: skrull's ConfigError, BatchError and LayoutError
/// are ValueErrors, ArgumentError a TypeError, InternalError a RuntimeError.
enum class ErrorKind { value, type, runtime };

/// A failed call: the exception's kind, its sentence, the status name and the whole message
/// ("<detail> [<name>]", as the binding's `str(error)`).
struct Failure {
    ErrorKind kind;
    std::string detail;
    std::string name;
    std::string message;
};

/// The status's name as the Python binding spells it ("SEQUENCE_TOO_LONG"; "UNKNOWN_<n>" for
/// a number this file does not know).
std::string status_name(uint32_t status);

/// The kind of exception the Python binding raises for a library status (`error_class`).
ErrorKind kind_of(uint32_t status);

/// A failure with `detail` (empty: the library's own text) and the status name appended.
Failure make_failure(uint32_t status, const std::string &detail, ErrorKind kind);

/// What `describe` needs from the configuration and the caller.
struct DescribeContext {
    /// BucketSize of the configuration (named in SEQUENCE_TOO_LONG, CHUNK_OVER_BUDGET).
    uint32_t bucket_tokens = 0;
    /// The FLOPs formula's name (named in UNSUPPORTED_OPTION).
    std::string flops = "paper";
    /// The caller's own value of the offending length, when it did not fit uint32_t.
    std::optional<int64_t> caller_value;
};

/// The failure for a status the library returned with `info` (its skrull_error_info; used
/// only where `info.status == status`, as the binding does).
Failure describe(uint32_t status, const skrull_error_info &info, const DescribeContext &ctx);

}  // namespace skrull_ops

#endif
