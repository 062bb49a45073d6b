#include "torchleak/rank_merge.h"

#include "torchleak/causes.h"
#include "torchleak/errors.h"
#include "torchleak/report_json.h"
#include "torchleak/scoring.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace torchleak {

namespace {

// A missing rank's note when nobody said why.
constexpr const char* kNoReport = "no report arrived";

// "cuda:1" -> "cuda": rank r trains on cuda:r, and the same line leaking on two ranks is one
// bug, not two.
std::string deviceType(const std::string& device) {
    return device.substr(0, device.find(':'));
}

// The holder is part of a finding's identity: one site's outputs kept in two lists are two
// findings on every rank, and stay two in the merged report.
using FindingKey = std::tuple<Verdict, std::string, int, std::string, std::string, std::string>;

FindingKey keyOf(const Finding& f) {
    const std::string& identity = f.site.group.empty() ? f.site.file : f.site.group;
    return {f.verdict,
            identity,
            f.site.line,
            f.site.function,
            deviceType(f.device),
            f.holder ? f.holder->path_text : std::string()};
}

int64_t leakRate(const Report& r) {
    int64_t rate = 0;
    for (const Finding& f : r.findings) {
        if (f.verdict == Verdict::Leak) {
            rate += f.bytes_per_iteration;
        }
    }
    return rate;
}

RankSummary summarizeRank(const RankInput& in, const Report& r) {
    RankSummary s;
    s.rank = in.rank;
    s.status = in.status;
    s.note = in.note;
    s.iterations = r.iterations;
    for (const Finding& f : r.findings) {
        s.leaks += f.verdict == Verdict::Leak ? 1 : 0;
    }
    s.leak_bytes_per_iteration = leakRate(r);
    for (const DeviceTimeline& d : r.devices) {
        for (int64_t v : d.peak.empty() ? d.allocated : d.peak) {
            s.peak_bytes = std::max(s.peak_bytes, v);
        }
    }
    s.devices = r.devices;
    s.series_iterations = r.series_iterations;
    if (r.oom && s.note.empty()) {
        s.note = "out of memory on " + r.oom->device + " in iteration " +
                 std::to_string(r.oom->iteration);
    }
    return s;
}

} // namespace

Report mergeRankReports(const std::vector<RankInput>& inputs,
                        int worldSize,
                        const AnalysisConfig& config) {
    if (worldSize < 1) {
        throw InvalidArgument("a job has at least one rank, got world size " +
                              std::to_string(worldSize));
    }
    std::vector<std::optional<Report>> reports(static_cast<size_t>(worldSize));
    std::vector<RankInput> byRank(static_cast<size_t>(worldSize));
    for (size_t r = 0; r < byRank.size(); ++r) {
        byRank[r].rank = static_cast<int>(r);
        byRank[r].status = "missing";
        byRank[r].note = kNoReport;
    }
    for (const RankInput& in : inputs) {
        if (in.rank < 0 || in.rank >= worldSize) {
            throw InvalidArgument("rank " + std::to_string(in.rank) + " is not in a job of " +
                                  std::to_string(worldSize) + " ranks");
        }
        RankInput& slot = byRank[static_cast<size_t>(in.rank)];
        slot = in;
        if (!in.report) {
            slot.status = "missing";
            if (slot.note.empty()) {
                slot.note = kNoReport;
            }
            continue;
        }
        try {
            reports[static_cast<size_t>(in.rank)] = reportFromJson(*in.report);
        } catch (const SchemaError& e) {
            slot.status = "missing";
            slot.note = std::string("its report could not be read: ") + e.what();
        }
    }

    // The lead rank gives the merged report its devices, iteration count and grid.
    std::optional<size_t> lead;
    for (size_t r = 0; r < reports.size(); ++r) {
        if (reports[r] && (!lead || leakRate(*reports[r]) > leakRate(*reports[*lead]))) {
            lead = r;
        }
    }
    Report merged;
    JobRanks job;
    job.world_size = worldSize;
    if (lead) {
        const Report& l = *reports[*lead];
        merged.torch_version = l.torch_version;
        merged.python_version = l.python_version;
        merged.iterations = l.iterations;
        merged.series_iterations = l.series_iterations;
        merged.warmup = l.warmup;
        merged.boundary = l.boundary;
        merged.devices = l.devices;
    }
    std::map<FindingKey, size_t> index;
    for (size_t r = 0; r < reports.size(); ++r) {
        const RankInput& in = byRank[r];
        if (!reports[r]) {
            RankSummary missing;
            missing.rank = in.rank;
            missing.status = "missing";
            missing.note = in.note;
            job.ranks.push_back(std::move(missing));
            continue;
        }
        Report& rep = *reports[r];
        job.ranks.push_back(summarizeRank(in, rep));
        merged.events_recorded += rep.events_recorded;
        for (const std::string& w : rep.warnings) {
            merged.warnings.push_back("rank " + std::to_string(r) + ": " + w);
        }
        for (Finding& f : rep.findings) {
            auto [it, added] = index.try_emplace(keyOf(f), merged.findings.size());
            if (added) {
                f.ranks = {static_cast<int>(r)};
                merged.findings.push_back(std::move(f));
                continue;
            }
            Finding& kept = merged.findings[it->second];
            std::vector<int> ranks = std::move(kept.ranks);
            ranks.push_back(static_cast<int>(r));
            if (f.bytes_per_iteration > kept.bytes_per_iteration) {
                kept = std::move(f);
            }
            kept.ranks = std::move(ranks);
        }
    }
    std::stable_sort(merged.findings.begin(), merged.findings.end(), listedBefore);
    merged.causes = groupCauses(merged, config);
    merged.summary = summarize(merged);
    merged.ranks = std::move(job);
    return merged;
}

} // namespace torchleak
