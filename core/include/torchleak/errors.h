#pragma once
// torchleak's exceptions. They are thrown only on slow paths (API calls, report building,
// parsing); the allocator hook never throws. The bindings translate each one to exactly one
// Python exception type (kernel_ext/src/bindings/python.cpp), and tests/python/test_errors.py
// checks that table.

#include <stdexcept>

namespace torchleak {

class Error : public std::runtime_error {
    using std::runtime_error::runtime_error;
};

// The caller did something out of order: a second track() while one is active, a report of a
// session that never started. -> RuntimeError
class StateError : public Error {
    using Error::Error;
};

// A bad argument or configuration value. -> ValueError
class InvalidArgument : public Error {
    using Error::Error;
};

// JSON that is not a valid torchleak.report/1 document. -> ValueError (subclass ReportSchemaError)
class SchemaError : public Error {
    using Error::Error;
};

// Writing or reading a report file failed. -> OSError
class IoError : public Error {
    using Error::Error;
};

} // namespace torchleak
