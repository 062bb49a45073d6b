// The builder's phase from a site's replayed series to its verdict (report_assembly.h): the
// blocks it keeps from each point, the noise sampling adds to its curve, and in cell watch its
// series read per run of its cell.

#include "report_assembly.h"

#include <algorithm>

namespace torchleak::assembly {

// Of each site's blocks alive now, the bytes born in the iterations each point ends (since the
// point before it) and the oldest one's birth. On a long run's thinned grid a point stands for
// the iterations merged into it, and a staircase's step born at a dropped iteration is still
// that point's: counting only the point's own iteration lost every step that fell between kept
// points, and with it the staircase's proof. Born after the last boundary: in no point yet.
// And under sampling, what the blocks say about the noise it adds to the site's curve. One pass
// over the live blocks into their sites (a group never seen at a boundary is in no series): a
// table by group and birth iteration cost a look at 10^3 growing sites of 545 points a quarter
// of its time in hashing.
void ReportBuilder::fillSurvivors() {
    const bool sampling = d_recorder.sampler().threshold() > 0;
    for (const std::vector<LiveBlock>* blocks : {&d_liveNow, &d_freedAfterStop}) {
        for (const LiveBlock& block : *blocks) {
            const BlockRecord& rec = block.rec;
            auto group = d_replay.find(GroupKey{rec.stack, rec.node, rec.device});
            if (group == d_replay.end()) {
                continue;
            }
            SiteAccumulator& acc = *group->second.site;
            if (sampling) {
                acc.sampled.add(rec.size, rec.weight);
            }
            const auto b = static_cast<size_t>(
                std::lower_bound(d_at.begin(), d_at.end(), rec.iteration) - d_at.begin());
            if (b >= d_n) {
                continue;
            }
            std::vector<int64_t>& surviving = acc.series.surviving;
            std::vector<uint32_t>& since = acc.series.surviving_since;
            if (surviving.size() != d_n) {
                surviving.assign(d_n, 0);
                since.assign(d_n, 0);
            }
            since[b] = surviving[b] > 0 ? std::min(since[b], rec.iteration) : rec.iteration;
            surviving[b] += static_cast<int64_t>(rec.weight);
        }
    }
}

// A site's verdict and rate. In cell watch an iteration is one cell run, whichever cell:
// a cell re-run between others that adds 1 MiB each time grows 1 MiB per run of that cell,
// not a fraction per cell executed. So the series is read at the boundaries ending a run of
// the cell the allocations ran in (the outermost cell on the stack: a function defined in
// one cell and called from another leaks per run of the caller), and a site in that cell
// names every run.
Classification ReportBuilder::classifyPerRun(const SiteSeries& series,
                                             const std::vector<Frame>& stack,
                                             Frame& site) const {
    const std::vector<BoundaryRun>& runs = d_inputs.boundary_runs;
    const size_t total = static_cast<size_t>(d_report.iterations);
    auto outermostCell = std::find_if(stack.rbegin(), stack.rend(), [](const Frame& f) {
        return f.cell.has_value() && !f.group.empty();
    });
    if (d_inputs.boundary != BoundaryKind::Cell || runs.size() != total ||
        outermostCell == stack.rend()) {
        return classify(series, d_inputs.warmup, d_inputs.config);
    }
    const std::string& cell = outermostCell->group;
    // runsBefore[i]: the runs of the cell among iterations [0, i), i.e. the run number of
    // an iteration of the cell.
    std::vector<uint32_t> runsBefore(total + 1, 0);
    for (size_t i = 0; i < total; ++i) {
        runsBefore[i + 1] = runsBefore[i] + (runs[i].group == cell ? 1 : 0);
    }
    SiteSeries perRun;
    perRun.noise_variance_per_byte = series.noise_variance_per_byte;
    for (size_t b = 0; b < d_n; ++b) {
        uint32_t iteration = d_at[b];
        if (runs[iteration].group != cell) {
            continue;
        }
        perRun.bytes.push_back(series.bytes[b]);
        perRun.born.push_back(series.born[b]);
        if (series.surviving.size() == d_n) {
            perRun.surviving.push_back(series.surviving[b]);
        }
        perRun.at.push_back(runsBefore[iteration]);
        // A birth iteration, renumbered as the run it happened in (or the next run).
        perRun.oldest.push_back(runsBefore[std::min<size_t>(series.oldest[b], total)]);
    }
    if (perRun.bytes.empty()) {
        return classify(series, d_inputs.warmup, d_inputs.config);
    }
    if (site.group == cell && runsBefore[total] > 1) {
        for (size_t i = 0; i < total; ++i) {
            if (runs[i].group == cell) {
                site.runs.push_back(runs[i].cell);
            }
        }
    }
    return classify(perRun, d_inputs.warmup, d_inputs.config);
}

} // namespace torchleak::assembly
