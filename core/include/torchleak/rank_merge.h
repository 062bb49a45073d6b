#pragma once
// One report for a torch.distributed job: the ranks' own reports, gathered at rank 0, merged.
//
// A site that leaks on some ranks only is one finding naming those ranks ("leaks on rank 1
// only"); the same site with another verdict elsewhere is a finding of its own. Each rank keeps
// its curves and totals in the `ranks` section, where skew between ranks shows. A rank whose
// report never came (crashed, hung past the timeout) is listed as missing with the reason, so
// the merged report says what it could not see.

#include "torchleak/config.h"
#include "torchleak/model.h"

#include <optional>
#include <string>
#include <vector>

namespace torchleak {

struct RankInput {
    int rank = 0;
    std::optional<std::string> report; // its torchleak.report/1 JSON; none when missing
    std::string status = "ok";         // "ok", "failed" or "missing" (RankSummary::status)
    std::string note;                  // why it failed or is missing
};

// Merges the reports of a job of `worldSize` ranks (ranks absent from `inputs` are missing).
// Findings match across ranks by site, verdict and device type; the finding kept is the rank's
// with the highest rate. Devices, iterations and the curves' grid are those of the lead rank:
// the one leaking most, else the lowest rank with a report. A report that does not parse makes
// its rank missing, not the merge fail. Throws InvalidArgument for a rank outside the job.
Report
mergeRankReports(const std::vector<RankInput>& inputs, int worldSize, const AnalysisConfig& config);

} // namespace torchleak
