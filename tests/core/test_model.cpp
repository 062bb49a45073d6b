// The schema's enum names: every value round-trips, unknown names are schema errors.
#include "torchleak/errors.h"
#include "torchleak/model.h"

#include <catch2/catch.hpp>
#include <set>
#include <string>

using namespace torchleak;

namespace {
template <typename Enum, typename Parse>
void requireRoundTrip(std::initializer_list<Enum> all, Parse parse) {
    std::set<std::string> names;
    for (Enum v : all) {
        std::string name(toString(v));
        REQUIRE(names.insert(name).second); // one name per value
        REQUIRE(parse(name) == v);
    }
    REQUIRE_THROWS_AS(parse("no-such-name"), SchemaError);
    REQUIRE_THROWS_AS(parse(""), SchemaError);
}
} // namespace

TEST_CASE("every enum of the schema round-trips through its name") {
    requireRoundTrip({Verdict::Leak, Verdict::Warmup, Verdict::Plateau, Verdict::Transient,
                      Verdict::Fragmentation, Verdict::Allowed},
                     verdictFromString);
    requireRoundTrip({Severity::Critical, Severity::Warning, Severity::Info}, severityFromString);
    requireRoundTrip({BoundaryKind::Explicit, BoundaryKind::OptimizerStep, BoundaryKind::Repeat,
                      BoundaryKind::Cell},
                     boundaryFromString);
    requireRoundTrip({Retention::Reachable, Retention::Cycle, Retention::Unnamed,
                      Retention::CppOnly, Retention::Unknown},
                     retentionFromString);
    requireRoundTrip({StepKind::Root, StepKind::Frame, StepKind::Attr, StepKind::Index,
                      StepKind::Key, StepKind::GradFn, StepKind::NextFunctions, StepKind::Saved,
                      StepKind::Ctx, StepKind::Base, StepKind::Grad, StepKind::Closure,
                      StepKind::Ref, StepKind::Elided},
                     stepKindFromString);
}

TEST_CASE("path step kinds keep the names the schema gave them") {
    REQUIRE(toString(StepKind::GradFn) == "grad_fn");
    REQUIRE(toString(StepKind::NextFunctions) == "next_functions");
    REQUIRE(toString(StepKind::Ctx) == "ctx");
    REQUIRE(toString(Retention::CppOnly) == "cpp_only");
    REQUIRE(toString(BoundaryKind::OptimizerStep) == "optimizer_step");
}

TEST_CASE("A point's iteration: its own on a thinned grid, its index where every one was kept") {
    const std::vector<int64_t> thinned = {0, 1, 3, 7, 15};
    REQUIRE(pointIteration(thinned, 5, 3) == 7);
    REQUIRE(pointIteration(std::vector<int64_t>{}, 5, 3) == 3);
    // A grid that does not name every point (a report from before thinning, a merged rank's
    // shorter curve) is not mixed with indices: every point is its index.
    REQUIRE(pointIteration(thinned, 6, 3) == 3);
    REQUIRE(pointIteration(std::vector<uint32_t>{2, 4, 8}, 3, 2) == 8);
}
