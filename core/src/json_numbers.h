#pragma once
// A report's numbers in JSON (report_json.cpp and the sections beside it): read back checked,
// never converted; a number that may be absent written as null.

#include "torchleak/errors.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace torchleak::json_numbers {

using nlohmann::json;

// Numbers read back are checked, never converted: nlohmann's get<int>() truncates 2.9 to 2 and
// get<uint64_t>() wraps -1 to 2^64-1, so a hand-edited or hostile report would load as
// nonsense. An integer field must be a JSON integer in the type's range; a real one finite.
template <class T> T integerFrom(const json& v, const char* what) {
    bool fits = false;
    if (v.is_number_unsigned()) {
        fits = v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max());
    } else if (v.is_number_integer()) {
        int64_t x = v.get<int64_t>();
        fits = x >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
               (x < 0 ||
                static_cast<uint64_t>(x) <= static_cast<uint64_t>(std::numeric_limits<T>::max()));
    }
    if (!fits) {
        throw SchemaError(std::string(what) + " must be an integer in range, got " + v.dump());
    }
    return v.get<T>();
}

template <class T> T integerAt(const json& owner, const char* key) {
    return integerFrom<T>(owner.at(key), key);
}

template <class T> T integerOr(const json& owner, const char* key, T fallback) {
    return owner.contains(key) ? integerFrom<T>(owner[key], key) : fallback;
}

template <class T> std::vector<T> integersAt(const json& owner, const char* key) {
    const json& list = owner.at(key);
    if (!list.is_array()) {
        throw SchemaError(std::string(key) + " must be a list of integers");
    }
    std::vector<T> out;
    out.reserve(list.size());
    for (const json& v : list) {
        out.push_back(integerFrom<T>(v, key));
    }
    return out;
}

template <class T> std::vector<T> integersOr(const json& owner, const char* key) {
    return owner.contains(key) ? integersAt<T>(owner, key) : std::vector<T>{};
}

// The finding indices a section names must exist: the views follow them.
inline std::vector<int> findingIndices(const json& owner, const char* key, size_t findings) {
    std::vector<int> out = integersAt<int>(owner, key);
    for (int i : out) {
        if (i < 0 || static_cast<size_t>(i) >= findings) {
            throw SchemaError(std::string(key) + " names finding " + std::to_string(i) +
                              ", which the report does not have");
        }
    }
    return out;
}

inline double realFrom(const json& v, const char* what) {
    if (v.is_null()) {
        return 0.0; // how the writer spells a NaN (a fit over a constant series)
    }
    if (!v.is_number() || !std::isfinite(v.get<double>())) {
        throw SchemaError(std::string(what) + " must be a finite number, got " + v.dump());
    }
    return v.get<double>();
}

inline double realOr(const json& owner, const char* key, double fallback) {
    return owner.contains(key) ? realFrom(owner[key], key) : fallback;
}

// An absent number (no projection, no request size) is null, never a 0 a view would plot.
template <typename T> json optionalJson(const std::optional<T>& v) {
    return v ? json(*v) : json(nullptr);
}

} // namespace torchleak::json_numbers
