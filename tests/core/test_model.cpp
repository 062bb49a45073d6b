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
