// AnalysisConfig: the one settings table, parsing and validation.
#include "torchleak/config.h"
#include "torchleak/errors.h"

#include <catch2/catch.hpp>

using namespace torchleak;

namespace {
constexpr int64_t MiB = 1 << 20;
}

TEST_CASE("config: sizes with units, validation, unknown keys") {
    REQUIRE(parseSize("1MiB") == static_cast<uint64_t>(MiB));
    REQUIRE(parseSize("100MB") == 100000000ull);
    REQUIRE(parseSize(" 4096 ") == 4096ull);
    REQUIRE(parseSize("1.5KiB") == 1536ull);
    REQUIRE_THROWS_AS(parseSize("lots"), InvalidArgument);
    REQUIRE_THROWS_AS(parseSize("1.2.3MiB"), InvalidArgument);
    REQUIRE_THROWS_AS(parseSize("1e19"), InvalidArgument);
    REQUIRE_THROWS_AS(parseSize("99999999999TiB"), InvalidArgument);
    // Past int64's range: refused, never stored as 2^63.
    REQUIRE_THROWS_AS(parseSize("10000000000000000000"), InvalidArgument);
    REQUIRE_THROWS_AS(parseSize("9223372036854775808"), InvalidArgument);
    REQUIRE(parseSize("9223372036854774784") == 9223372036854774784ull); // 2^63 - 1024
    REQUIRE_THROWS_AS(parseSize("5 parsecs"), InvalidArgument);
    AnalysisConfig cfg;
    cfg.set("min_confidence", "0.9");
    REQUIRE(cfg.get("min_confidence") == "0.9");
    REQUIRE_THROWS_WITH(cfg.set("min_confidence", "2"), Catch::Contains("between 0 and 1"));
    REQUIRE_THROWS_WITH(cfg.set("colour", "red"), Catch::Contains("unknown setting 'colour'"));
    REQUIRE_THROWS_WITH(cfg.set("warmup", "-1"), Catch::Contains("warmup"));
    cfg.set("allow", "model.kv_cache*");
    cfg.set("allow", "cache.py:*");
    REQUIRE(cfg.allow.size() == 2);
    cfg.set("allow", "");
    REQUIRE(cfg.allow.empty());
}

TEST_CASE("globMatch") {
    REQUIRE(globMatch("model.kv_cache*", "model.kv_cache['k'][3]"));
    REQUIRE(globMatch("*cache.py:4?", "/src/cache.py:42"));
    REQUIRE_FALSE(globMatch("*cache.py:4?", "/src/cache.py:420"));
    REQUIRE(globMatch("*", ""));
}

TEST_CASE("config: one table names every setting, with its type, for every interface") {
    const auto& specs = AnalysisConfig::settings();
    REQUIRE(specs.size() == AnalysisConfig::keys().size());
    AnalysisConfig cfg;
    for (size_t i = 0; i < specs.size(); ++i) {
        REQUIRE(std::string(specs[i].name) == AnalysisConfig::keys()[i]);
        REQUIRE_FALSE(specs[i].description.empty());
        REQUIRE_NOTHROW(cfg.get(specs[i].name)); // every listed key is readable
    }
    auto typeOf = [&](std::string_view name) {
        for (const auto& s : specs) {
            if (s.name == name) {
                return std::string(toString(s.type));
            }
        }
        return std::string("missing");
    };
    REQUIRE(typeOf("min_bytes") == "size");
    REQUIRE(typeOf("warmup") == "count");
    REQUIRE(typeOf("min_confidence") == "fraction");
    REQUIRE(typeOf("fragmentation_ratio") == "fraction");
    REQUIRE(typeOf("allow") == "patterns");
}

TEST_CASE("config: set and get agree for every type, fraction bounds differ per setting") {
    AnalysisConfig cfg;
    cfg.set("min_bytes", "2KiB");
    REQUIRE(cfg.get("min_bytes") == "2048");
    cfg.set("warmup", "3");
    REQUIRE(cfg.get("warmup") == "3");
    REQUIRE_THROWS_WITH(cfg.set("warmup", "1.5"), Catch::Contains("whole number"));
    cfg.set("min_confidence", "1");
    REQUIRE(cfg.get("min_confidence") == "1");
    REQUIRE_THROWS_WITH(cfg.set("fragmentation_ratio", "1"), Catch::Contains("(exclusive)"));
    cfg.set("fragmentation_ratio", "0.5");
    REQUIRE(cfg.get("fragmentation_ratio") == "0.5");
    cfg.set("allow", "a*");
    cfg.set("allow", "b?");
    REQUIRE(cfg.get("allow") == "a*,b?");
    REQUIRE_THROWS_WITH(cfg.get("colour"), Catch::Contains("known: min_bytes"));
    REQUIRE_THROWS_WITH(cfg.set("warning_bytes", "2GiB"), Catch::Contains("critical_bytes"));
}

TEST_CASE("config: a long value is described in an error, not repeated") {
    AnalysisConfig cfg;
    const std::string digits(5000, '9');
    for (const char* key : {"warmup", "min_bytes", "min_confidence", ""}) {
        try {
            // the last: an unknown setting whose name is the long value
            *key ? cfg.set(key, digits) : cfg.set(digits, "1");
            FAIL("a 5,000-digit value was accepted for " << key);
        } catch (const InvalidArgument& e) {
            const std::string said = e.what();
            REQUIRE(said.size() < 400);
            REQUIRE(said.find("a value of 5000 characters") != std::string::npos);
        }
    }
    REQUIRE_THROWS_WITH(cfg.set("warmup", "-1"), Catch::Contains("got '-1'"));
}
