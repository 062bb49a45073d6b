#include "torchleak/analysis.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <tuple>
#include <unistd.h>
#include <unordered_map>
#include <unordered_set>
#include <xtensor/xmath.hpp>
#include <xtensor/xtensor.hpp>

namespace torchleak {

// ---------------------------------------------------------------------------------------------
// Statistics

namespace {

// Continued fraction for the regularized incomplete beta function (Lentz's method).
double betaContinuedFraction(double a, double b, double x) {
    constexpr int kMaxIterations = 300;
    constexpr double kEps = 1e-15;
    constexpr double kTiny = 1e-300;
    double qab = a + b, qap = a + 1.0, qam = a - 1.0;
    double c = 1.0, d = 1.0 - qab * x / qap;
    if (std::fabs(d) < kTiny) {
        d = kTiny;
    }
    d = 1.0 / d;
    double h = d;
    for (int m = 1; m <= kMaxIterations; ++m) {
        int m2 = 2 * m;
        double aa = m * (b - m) * x / ((qam + m2) * (a + m2));
        d = 1.0 + aa * d;
        d = std::fabs(d) < kTiny ? kTiny : d;
        c = 1.0 + aa / c;
        c = std::fabs(c) < kTiny ? kTiny : c;
        d = 1.0 / d;
        h *= d * c;
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
        d = 1.0 + aa * d;
        d = std::fabs(d) < kTiny ? kTiny : d;
        c = 1.0 + aa / c;
        c = std::fabs(c) < kTiny ? kTiny : c;
        d = 1.0 / d;
        double del = d * c;
        h *= del;
        if (std::fabs(del - 1.0) < kEps) {
            break;
        }
    }
    return h;
}

double regularizedIncompleteBeta(double a, double b, double x) {
    if (x <= 0.0) {
        return 0.0;
    }
    if (x >= 1.0) {
        return 1.0;
    }
    double lnFront =
        std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log1p(-x);
    double front = std::exp(lnFront);
    if (x < (a + 1.0) / (a + b + 2.0)) {
        return front * betaContinuedFraction(a, b, x) / a;
    }
    return 1.0 - front * betaContinuedFraction(b, a, 1.0 - x) / b;
}

} // namespace

double studentTwoSidedP(double t, double dof) {
    if (!(dof > 0.0) || std::isnan(t)) {
        return 1.0;
    }
    if (std::isinf(t)) {
        return 0.0;
    }
    return regularizedIncompleteBeta(dof / 2.0, 0.5, dof / (dof + t * t));
}

LineFit fitLine(std::span<const double> values) {
    LineFit fit;
    const size_t n = values.size();
    if (n == 0) {
        return fit;
    }
    xt::xtensor<double, 1> y = xt::zeros<double>({n});
    std::copy(values.begin(), values.end(), y.begin());
    if (n == 1) {
        fit.intercept = y(0);
        return fit;
    }
    xt::xtensor<double, 1> x = xt::arange<double>(static_cast<double>(n));
    double mx = xt::mean(x)();
    double my = xt::mean(y)();
    xt::xtensor<double, 1> dx = x - mx;
    xt::xtensor<double, 1> dy = y - my;
    double sxx = xt::sum(dx * dx)();
    double sxy = xt::sum(dx * dy)();
    double syy = xt::sum(dy * dy)();
    fit.slope = sxy / sxx;
    fit.intercept = my - fit.slope * mx;
    xt::xtensor<double, 1> residual = y - (fit.intercept + fit.slope * x);
    double sse = xt::sum(residual * residual)();
    // Relative to the signal, an SSE this small is rounding noise: the points are on the line.
    bool exact = sse <= 1e-18 * std::max(1.0, syy);
    fit.r2 = syy > 0.0 ? std::clamp(1.0 - sse / syy, 0.0, 1.0) : 1.0;
    if (syy == 0.0) {
        fit.p_value = 1.0; // flat: no evidence of a trend
    } else if (exact) {
        fit.p_value = n >= 3 ? 0.0 : 1.0;
        fit.r2 = 1.0;
    } else if (n >= 3) {
        double se = std::sqrt(sse / static_cast<double>(n - 2) / sxx);
        fit.p_value = studentTwoSidedP(fit.slope / se, static_cast<double>(n - 2));
    }
    return fit;
}

// ---------------------------------------------------------------------------------------------
// Robust trend

double theilSenSlope(std::span<const double> y) {
    const size_t n = y.size();
    if (n < 2) {
        return 0.0;
    }
    std::vector<double> slopes;
    if (n <= 400) {
        slopes.reserve(n * (n - 1) / 2);
        for (size_t i = 0; i < n; ++i) {
            for (size_t j = i + 1; j < n; ++j) {
                slopes.push_back((y[j] - y[i]) / static_cast<double>(j - i));
            }
        }
    } else {
        // Long runs: pairs half a run apart keep it O(n) and still robust.
        size_t gap = n / 2;
        for (size_t i = 0; i + gap < n; ++i) {
            slopes.push_back((y[i + gap] - y[i]) / static_cast<double>(gap));
        }
    }
    auto mid = slopes.begin() + static_cast<std::ptrdiff_t>(slopes.size() / 2);
    std::nth_element(slopes.begin(), mid, slopes.end());
    double upper = *mid;
    if (slopes.size() % 2 == 1) {
        return upper;
    }
    double lower = *std::max_element(slopes.begin(), mid);
    return (lower + upper) / 2.0;
}

double mannKendallIncreasingP(std::span<const double> y) {
    const size_t n = y.size();
    if (n < 3) {
        return 1.0;
    }
    double s = 0;
    for (size_t i = 0; i < n; ++i) {
        for (size_t j = i + 1; j < n; ++j) {
            s += (y[j] > y[i]) - (y[j] < y[i]);
        }
    }
    std::vector<double> sorted(y.begin(), y.end());
    std::sort(sorted.begin(), sorted.end());
    double ties = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && sorted[j] == sorted[i]) {
            ++j;
        }
        double t = static_cast<double>(j - i);
        ties += t * (t - 1) * (2 * t + 5);
        i = j;
    }
    double dn = static_cast<double>(n);
    double var = (dn * (dn - 1) * (2 * dn + 5) - ties) / 18.0;
    if (var <= 0 || s <= 0) {
        return 1.0;
    }
    double z = (s - 1.0) / std::sqrt(var); // continuity correction
    return 0.5 * std::erfc(z / std::sqrt(2.0));
}

// ---------------------------------------------------------------------------------------------
// Verdict of one site

namespace {

// Splits at releases (a boundary where live bytes fall below half of the previous one).
std::vector<std::pair<size_t, size_t>> segmentsBetweenReleases(const std::vector<double>& y) {
    std::vector<std::pair<size_t, size_t>> segments;
    size_t start = 0;
    for (size_t i = 1; i < y.size(); ++i) {
        if (y[i] < 0.5 * y[i - 1]) {
            segments.emplace_back(start, i);
            start = i;
        }
    }
    segments.emplace_back(start, y.size());
    return segments;
}

double riseFraction(const std::vector<double>& y, size_t from, size_t to) {
    size_t rises = 0;
    for (size_t i = from + 1; i < to; ++i) {
        rises += y[i] > y[i - 1] ? 1 : 0;
    }
    return to - from > 1 ? static_cast<double>(rises) / static_cast<double>(to - from - 1) : 0.0;
}

} // namespace

Classification classify(const SiteSeries& s, int warmup, const AnalysisConfig& config) {
    Classification c;
    const size_t n = s.bytes.size();
    if (n == 0) {
        return c;
    }
    // The boundary that ends the last warm-up iteration is the baseline of the judged part.
    size_t first = std::min(static_cast<size_t>(std::max(warmup - 1, 0)), n - 1);
    std::vector<double> post(s.bytes.begin() + static_cast<std::ptrdiff_t>(first), s.bytes.end());
    const size_t m = post.size();
    LineFit ols = fitLine(post);
    c.fit.r2 = ols.r2;
    c.fit.intercept = ols.intercept;
    c.fit.slope = theilSenSlope(post);
    c.fit.p_value = mannKendallIncreasingP(post);
    c.bytes_per_iteration = static_cast<int64_t>(std::llround(c.fit.slope));
    const double minRate = static_cast<double>(config.min_leak_bytes_per_iteration);
    const int64_t last = s.bytes.back();

    if (m >= 3 && last > 0) {
        double rises = riseFraction(post, 0, m);
        // Still growing at the end: the last quarter (at least 3 boundaries) rises too, so a
        // cache that filled up and stopped (a plateau) is never called a leak, however long
        // the run.
        size_t tailLen = std::max<size_t>(3, (m + 3) / 4);
        tailLen = std::min(tailLen, m);
        std::vector<double> tail(post.end() - static_cast<std::ptrdiff_t>(tailLen), post.end());
        double tailSlope = theilSenSlope(tail);
        bool tailGrows =
            tailSlope >= std::max(minRate, 0.25 * c.fit.slope) && tail.back() > tail.front();

        if (rises == 1.0 && c.fit.slope >= minRate) {
            c.verdict = Verdict::Leak; // rises at every boundary
            c.confidence = std::clamp(1.0 - c.fit.p_value, 0.0, 1.0);
            return c;
        }
        double confidence = std::clamp((1.0 - c.fit.p_value) * (0.5 + 0.5 * rises), 0.0, 1.0);
        if (c.fit.slope >= minRate && c.fit.p_value < 0.05 && tailGrows &&
            confidence >= config.min_confidence) {
            c.verdict = Verdict::Leak; // a clear trend through noise
            c.confidence = confidence;
            return c;
        }
        // Grows between releases at a coarser boundary (outputs kept for an epoch-end hook):
        // still a leak at this granularity.
        auto segments = segmentsBetweenReleases(post);
        if (segments.size() >= 2) {
            std::vector<double> segmentSlopes;
            bool allRise = true;
            for (const auto& [a, b] : segments) {
                if (b - a < 3) {
                    continue;
                }
                std::vector<double> seg(post.begin() + static_cast<std::ptrdiff_t>(a),
                                        post.begin() + static_cast<std::ptrdiff_t>(b));
                segmentSlopes.push_back(theilSenSlope(seg));
                allRise = allRise && riseFraction(post, a, b) >= 0.75;
            }
            if (segmentSlopes.size() >= 2 && allRise) {
                std::nth_element(segmentSlopes.begin(),
                                 segmentSlopes.begin() +
                                     static_cast<std::ptrdiff_t>(segmentSlopes.size() / 2),
                                 segmentSlopes.end());
                double slope = segmentSlopes[segmentSlopes.size() / 2];
                if (slope >= minRate) {
                    c.verdict = Verdict::Leak;
                    c.released_periodically = true;
                    c.fit.slope = slope;
                    c.bytes_per_iteration = static_cast<int64_t>(std::llround(slope));
                    c.confidence = 0.8;
                    return c;
                }
            }
        }
    }
    if (last == 0) {
        c.verdict = Verdict::Transient; // everything the site left alive was freed later
        c.confidence = 1.0;
        c.bytes_per_iteration = 0;
        return c;
    }
    uint32_t oldest = s.oldest.empty() ? 0 : s.oldest.back();
    int64_t bornLast = s.born.empty() ? 0 : s.born.back();
    double growth = post.back() - post.front();
    if (bornLast == last && growth <= 0.0) {
        // What is alive now was allocated in the last iteration and will be replaced in the
        // next: a per-iteration working set that survives one boundary.
        c.verdict = Verdict::Transient;
        c.confidence = 0.9;
        c.bytes_per_iteration = 0;
        return c;
    }
    if (growth <= 0.0 && oldest <= static_cast<uint32_t>(std::max(warmup, 0))) {
        c.verdict = Verdict::Warmup; // created in the first iterations, then kept and reused
        c.confidence = 0.9;
        c.bytes_per_iteration = 0;
        return c;
    }
    c.verdict = Verdict::Plateau; // grew, then stopped: bounded
    c.confidence = 0.8;
    c.bytes_per_iteration = 0;
    return c;
}

DeviceVerdict judgeDevice(const std::vector<int64_t>& allocated,
                          const std::vector<int64_t>& reserved,
                          int warmup,
                          const AnalysisConfig& config) {
    DeviceVerdict v;
    if (allocated.empty() || reserved.size() != allocated.size() || reserved.back() <= 0) {
        return v;
    }
    v.ratio = static_cast<double>(reserved.back() - allocated.back()) /
              static_cast<double>(reserved.back());
    size_t first = std::min(static_cast<size_t>(std::max(warmup - 1, 0)), allocated.size() - 1);
    std::vector<double> a(allocated.begin() + static_cast<std::ptrdiff_t>(first), allocated.end());
    std::vector<double> r(reserved.begin() + static_cast<std::ptrdiff_t>(first), reserved.end());
    double allocSlope = theilSenSlope(a);
    double reservedSlope = theilSenSlope(r);
    double scale = std::max(1.0, r.back());
    bool allocatedFlat = std::fabs(allocSlope) * static_cast<double>(a.size()) < 0.05 * scale;
    bool reserveGrows = r.size() >= 3 && reservedSlope > 0 && mannKendallIncreasingP(r) < 0.05;
    v.fragmentation = allocatedFlat && (reserveGrows || v.ratio > config.fragmentation_ratio);
    return v;
}

// ---------------------------------------------------------------------------------------------
// Devices

std::string deviceName(DeviceKey key) {
    static const char* const kNames[] = {
        "cpu",    "cuda",  "mkldnn", "opengl", "opencl", "ideep", "hip", "fpga", "maia", "xla",
        "vulkan", "metal", "xpu",    "mps",    "meta",   "hpu",   "ve",  "lazy", "ipu",  "mtia"};
    std::string base = (key.type >= 0 && static_cast<size_t>(key.type) < std::size(kNames))
                           ? kNames[key.type]
                           : "device" + std::to_string(key.type);
    if (key.type == 0 || key.index < 0) {
        return base;
    }
    return base + ":" + std::to_string(key.index);
}

uint64_t hostMemoryCapacity() {
    uint64_t physical = 0;
    long pages = sysconf(_SC_PHYS_PAGES);
    long pageSize = sysconf(_SC_PAGE_SIZE);
    if (pages > 0 && pageSize > 0) {
        physical = static_cast<uint64_t>(pages) * static_cast<uint64_t>(pageSize);
    }
    for (const char* path :
         {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
        std::ifstream in(path);
        std::string text;
        if (in >> text && text != "max") {
            try {
                uint64_t limit = std::stoull(text);
                if (limit > 0 && (physical == 0 || limit < physical)) {
                    return limit;
                }
            } catch (...) {
            }
        }
    }
    return physical;
}

// ---------------------------------------------------------------------------------------------
// Report

namespace {

struct SiteAccumulator {
    Frame site;
    std::string device;
    std::string node;
    SiteSeries series;
    std::vector<Frame> stack;
    uint64_t stackBytes = 0; // bytes of the group whose stack we show
    uint64_t lastCount = 0;
    uintptr_t example = 0;
    uint64_t exampleSize = 0;
    GroupKey exampleKey;
    std::vector<GroupKey> groups;
    std::vector<uintptr_t> externalBlocks; // blocks attributed by an external stack
};

std::string siteKey(const Frame& f, const std::string& device, const std::string& node) {
    std::ostringstream out;
    out << (f.group.empty() ? f.file : f.group) << '\x1f' << f.line << '\x1f' << f.function
        << '\x1f' << device << '\x1f' << node;
    return out.str();
}

// The accumulator of a site, created with empty series of n boundaries on first use.
SiteAccumulator& siteFor(std::map<std::string, SiteAccumulator>& sites,
                         const Frame& site,
                         const std::string& device,
                         const std::string& node,
                         size_t n) {
    SiteAccumulator& acc = sites[siteKey(site, device, node)];
    if (acc.series.bytes.empty()) {
        acc.site = site;
        acc.device = device;
        acc.node = node;
        acc.series.bytes.assign(n, 0);
        acc.series.born.assign(n, 0);
        acc.series.oldest.assign(n, std::numeric_limits<uint32_t>::max());
    }
    return acc;
}

std::string humanBytes(double bytes) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    double v = std::fabs(bytes);
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        ++u;
    }
    std::ostringstream out;
    out.precision(u == 0 ? 0 : 1);
    out << std::fixed << (bytes < 0 ? -v : v) << ' ' << units[u];
    return out.str();
}

std::string siteText(const Frame& f) {
    if (f.cell) {
        return "In [" + std::to_string(*f.cell) + "], line " + std::to_string(f.line);
    }
    return f.file + ":" + std::to_string(f.line);
}

Severity severityOf(const Finding& f, int iterations, const AnalysisConfig& t) {
    if (f.verdict != Verdict::Leak) {
        return Severity::Info;
    }
    double projected = static_cast<double>(f.bytes_per_iteration) * std::max(iterations, 1);
    projected = std::max(projected, static_cast<double>(f.total_bytes));
    if (projected >= static_cast<double>(t.critical_bytes)) {
        return Severity::Critical;
    }
    if (projected >= static_cast<double>(t.warning_bytes)) {
        return Severity::Warning;
    }
    return Severity::Info;
}

bool heldByMachinery(const Finding& f) {
    if (f.path.empty()) {
        return false;
    }
    const std::string& root = f.path.front().label;
    // Only when C++ keeps a known Python-level object (a tensor or a custom Function's ctx):
    // a bare "<held only from C++>" may be one of torch's own caches.
    bool cppGraph = f.retention == Retention::CppOnly && !f.path.front().type.empty();
    return isOutputCacheRoot(root) || isLastExceptionRoot(root) || cppGraph;
}

void summarize(Report& report) {
    Summary s;
    int penalty = 0;
    for (size_t i = 0; i < report.findings.size(); ++i) {
        const Finding& f = report.findings[i];
        if (f.verdict != Verdict::Leak) {
            continue;
        }
        std::string what = humanBytes(static_cast<double>(f.bytes_per_iteration)) +
                           " per iteration leaks from " + siteText(f.site) +
                           (f.site.function.empty() ? "" : " (" + f.site.function + ")");
        switch (f.severity) {
        case Severity::Critical:
            penalty += 40;
            s.critical_issues.push_back(what);
            s.recommendations.push_back({"high", f.suggestion, {static_cast<int>(i)}});
            break;
        case Severity::Warning:
            penalty += 20;
            s.recommendations.push_back({"high", f.suggestion, {static_cast<int>(i)}});
            break;
        case Severity::Info:
            penalty += 10;
            s.recommendations.push_back({"medium", f.suggestion, {static_cast<int>(i)}});
            break;
        }
    }
    for (const DeviceTimeline& d : report.devices) {
        if (d.verdict == "fragmentation") {
            std::ostringstream text;
            text.precision(0);
            text << std::fixed << d.device << ": the allocator reserves "
                 << d.fragmentation_ratio * 100.0
                 << "% more than is allocated while allocated memory is flat (fragmentation or "
                    "an oversized cache): not a leak; try expandable segments "
                    "(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) or "
                    "torch.cuda.empty_cache() between phases";
            s.recommendations.push_back({"medium", text.str(), {}});
            penalty += 5;
        }
    }
    if (!report.warnings.empty()) {
        s.recommendations.push_back(
            {"low",
             "re-run without torch.profiler active: some allocation events were missed",
             {}});
    }
    s.score = std::max(0, 100 - penalty);
    s.grade = s.score >= 90   ? "A"
              : s.score >= 80 ? "B"
              : s.score >= 70 ? "C"
              : s.score >= 60 ? "D"
                              : "F";
    report.summary = std::move(s);
}

} // namespace

Report buildReport(const AllocationRecorder& recorder,
                   const ReportInputs& inputs,
                   StackSymbolizer& symbolizer,
                   BlockDescriber& describer,
                   RetentionExplainer* explainer) {
    Report report;
    report.torch_version = inputs.torch_version;
    report.python_version = inputs.python_version;
    report.warmup = inputs.warmup;
    report.boundary = inputs.boundary;
    report.warnings = inputs.warnings;
    report.events_recorded = recorder.eventCount();

    const auto& boundaries = recorder.boundaries();
    const size_t n = boundaries.size();
    report.iterations = static_cast<int>(n);

    std::unordered_map<StackToken, std::vector<Frame>> decoded;
    auto framesOf = [&](StackToken token) -> const std::vector<Frame>& {
        auto it = decoded.find(token);
        if (it == decoded.end()) {
            auto raw = recorder.stackFrames(token);
            it = decoded.emplace(token, token ? symbolizer.symbolize(raw) : std::vector<Frame>{})
                     .first;
        }
        return it->second;
    };

    // Every live block, read once: for external stacks, example descriptions (only if the
    // address still holds the block a group recorded: it may have been freed and reused since
    // the last boundary) and retaining paths.
    std::unordered_map<uintptr_t, BlockRecord> liveNow;
    recorder.forEachLiveBlock(
        [&](uintptr_t ptr, const BlockRecord& rec) { liveNow.emplace(ptr, rec); });

    std::map<std::string, SiteAccumulator> sites;
    std::vector<uint32_t> shadowedIterations;

    // Surviving blocks with an external stack (CUDA) become their own sites: a block alive
    // now was alive at every boundary since the one ending its birth iteration. What they
    // account for is taken out of the stackless group they were recorded in.
    std::unordered_map<GroupKey, std::vector<int64_t>, GroupKeyHash> attributed;
    for (const auto& [ptr, rec] : liveNow) {
        auto external = inputs.external_stacks.find(ptr);
        if (n == 0 || rec.stack != 0 || external == inputs.external_stacks.end() ||
            external->second.empty()) {
            continue;
        }
        const std::vector<Frame>& frames = external->second;
        GroupKey key{0, rec.node, rec.device};
        auto& taken = attributed[key];
        taken.resize(n, 0);
        std::string node = rec.node ? recorder.nodeName(rec.node) : std::string();
        std::string device = deviceName(rec.device);
        auto user =
            std::find_if(frames.begin(), frames.end(), [](const Frame& f) { return f.user; });
        Frame site = user != frames.end() ? *user : frames.front();
        if (!node.empty() && site.user) {
            site.function = node;
        }
        SiteAccumulator& acc = siteFor(sites, site, device, node, n);
        if (acc.stack.empty()) {
            acc.stack = frames;
        }
        for (size_t b = std::min<size_t>(rec.iteration, n); b < n; ++b) {
            acc.series.bytes[b] += static_cast<int64_t>(rec.size);
            acc.series.oldest[b] = std::min(acc.series.oldest[b], rec.iteration);
            taken[b] += static_cast<int64_t>(rec.size);
        }
        if (rec.iteration < n) {
            acc.series.born[rec.iteration] += static_cast<int64_t>(rec.size);
        }
        acc.lastCount += 1;
        acc.externalBlocks.push_back(ptr);
        if (rec.size > acc.exampleSize) {
            acc.exampleSize = rec.size;
            acc.example = ptr;
            acc.exampleKey = GroupKey{0, rec.node, rec.device};
        }
    }

    for (size_t b = 0; b < n; ++b) {
        const BoundarySnapshot& snap = boundaries[b];
        if (snap.shadowed) {
            shadowedIterations.push_back(snap.iteration);
        }
        for (const GroupSample& sample : snap.groups) {
            GroupSample g = sample;
            if (auto it = attributed.find(g.key); it != attributed.end()) {
                uint64_t take = static_cast<uint64_t>(std::max<int64_t>(it->second[b], 0));
                g.bytes = g.bytes > take ? g.bytes - take : 0;
                if (g.bytes == 0) {
                    continue;
                }
            }
            const std::vector<Frame>& frames = framesOf(g.key.stack);
            std::string node = g.key.node ? recorder.nodeName(g.key.node) : std::string();
            std::string device = deviceName(g.key.device);
            Frame site;
            auto user =
                std::find_if(frames.begin(), frames.end(), [](const Frame& f) { return f.user; });
            if (user != frames.end()) {
                site = *user;
                // In backward the user frame is the backward() call; the node says which
                // gradient formula allocated. Custom Functions (PyNode) keep their own frame.
                if (!node.empty() && node != "PyNode") {
                    site.function = node;
                }
            } else if (!node.empty()) {
                site.file = "<backward>";
                site.function = node;
                site.user = false;
            } else if (!frames.empty()) {
                site = frames.front();
            } else {
                site.file = "<unknown>";
                site.function = "<no Python stack>";
                site.user = false;
            }
            SiteAccumulator& acc = siteFor(sites, site, device, node, n);
            if (site.cell && acc.site.cell && *site.cell > *acc.site.cell) {
                acc.site = site; // the newest run of a re-run cell names the site
            }
            if (std::find(acc.groups.begin(), acc.groups.end(), g.key) == acc.groups.end()) {
                acc.groups.push_back(g.key);
            }
            acc.series.bytes[b] += static_cast<int64_t>(g.bytes);
            acc.series.born[b] += static_cast<int64_t>(g.bornThisIteration);
            acc.series.oldest[b] = std::min(acc.series.oldest[b], g.oldestIteration);
            if (g.bytes >= acc.stackBytes) {
                acc.stackBytes = g.bytes;
                acc.stack = frames;
            }
            if (b == n - 1) {
                acc.lastCount += g.count;
                if (g.largestBlockSize > acc.exampleSize) {
                    acc.exampleSize = g.largestBlockSize;
                    acc.example = g.largestBlock;
                    acc.exampleKey = g.key;
                }
            }
        }
    }

    std::vector<const SiteAccumulator*> findingSites;
    for (auto& [key, acc] : sites) {
        int64_t maxBytes = *std::max_element(acc.series.bytes.begin(), acc.series.bytes.end());
        if (maxBytes <= 0 || static_cast<uint64_t>(maxBytes) < inputs.config.min_bytes) {
            continue;
        }
        for (auto& o : acc.series.oldest) {
            if (o == std::numeric_limits<uint32_t>::max()) {
                o = 0;
            }
        }
        Classification c = classify(acc.series, inputs.warmup, inputs.config);
        Finding f;
        f.verdict = c.verdict;
        f.site = acc.site;
        f.stack = acc.stack;
        f.device = acc.device;
        if (!acc.node.empty()) {
            f.autograd_node = acc.node;
        }
        f.count = acc.lastCount;
        f.total_bytes = static_cast<uint64_t>(std::max<int64_t>(acc.series.bytes.back(), 0));
        f.bytes_per_iteration = c.bytes_per_iteration;
        f.series = acc.series.bytes;
        f.trend = {c.fit.slope, c.fit.r2, c.fit.p_value};
        f.confidence = c.confidence;
        if (acc.example != 0) {
            auto it = liveNow.find(acc.example);
            if (it != liveNow.end() && it->second.stack == acc.exampleKey.stack &&
                it->second.node == acc.exampleKey.node) {
                if (auto d = describer.describe(acc.example)) {
                    f.dtype = d->dtype;
                    f.shape = d->shape;
                }
            }
        }
        f.released_periodically = c.released_periodically;
        report.findings.push_back(std::move(f));
        findingSites.push_back(&acc);
    }
    if (explainer != nullptr && !report.findings.empty()) {
        std::unordered_map<GroupKey, size_t, GroupKeyHash> findingOf;
        for (size_t i = 0; i < findingSites.size(); ++i) {
            for (const GroupKey& k : findingSites[i]->groups) {
                findingOf.emplace(k, i);
            }
        }
        // Per finding: (birth iteration, size, sequence, block), so that sorting puts the
        // newest iteration first and, within it, the biggest block (the bytes that matter,
        // not a scalar allocated on the same line).
        using Candidate = std::tuple<uint32_t, uint64_t, uint64_t, uintptr_t>;
        std::vector<std::vector<Candidate>> blocksOf(report.findings.size());
        std::vector<uintptr_t> allBlocks;
        std::unordered_map<uintptr_t, size_t> externalOf;
        for (size_t i = 0; i < findingSites.size(); ++i) {
            for (uintptr_t ptr : findingSites[i]->externalBlocks) {
                externalOf.emplace(ptr, i);
            }
        }
        for (const auto& [ptr, rec] : liveNow) {
            std::optional<size_t> index;
            if (auto ext = externalOf.find(ptr); ext != externalOf.end()) {
                index = ext->second; // attributed to its own site by an external stack
            } else if (auto grp = findingOf.find(GroupKey{rec.stack, rec.node, rec.device});
                       grp != findingOf.end()) {
                index = grp->second;
            }
            if (index) {
                blocksOf[*index].emplace_back(rec.iteration, rec.size, rec.sequence, ptr);
                allBlocks.push_back(ptr);
            }
        }
        auto paths = explainer->explain(allBlocks);
        std::unordered_set<uintptr_t> normalized;
        auto siteOfBlock = [&](uintptr_t block) -> std::optional<Frame> {
            auto live = liveNow.find(block);
            if (live == liveNow.end()) {
                return std::nullopt;
            }
            const auto& frames = framesOf(live->second.stack);
            auto user =
                std::find_if(frames.begin(), frames.end(), [](const Frame& fr) { return fr.user; });
            if (user != frames.end()) {
                return *user;
            }
            if (live->second.node) {
                Frame fr;
                fr.file = "<backward>";
                fr.function = recorder.nodeName(live->second.node);
                fr.user = false;
                return fr;
            }
            return std::nullopt;
        };
        for (size_t i = 0; i < report.findings.size(); ++i) {
            Finding& f = report.findings[i];
            auto& blocks = blocksOf[i];
            std::sort(blocks.begin(), blocks.end(), std::greater<>());
            // The representative is the newest block from before the last iteration: the last
            // iteration's own blocks may just be the current state (model.last_hidden), while
            // older survivors are alive only because of what leaks.
            std::vector<const std::vector<PathStep>*> all;
            const BlockPath* representative = nullptr;
            const BlockPath* newest = nullptr;
            uint32_t lastIteration = n > 0 ? static_cast<uint32_t>(n - 1) : 0;
            for (const auto& [birth, size, seq, ptr] : blocks) {
                auto it = paths.find(ptr);
                if (it == paths.end()) {
                    continue;
                }
                if (!normalized.count(ptr)) {
                    it->second.steps = normalizePath(std::move(it->second.steps));
                    normalized.insert(ptr);
                }
                all.push_back(&it->second.steps);
                if (newest == nullptr) {
                    newest = &it->second;
                }
                if (representative == nullptr && birth < lastIteration) {
                    representative = &it->second;
                }
            }
            if (representative == nullptr) {
                representative = newest;
            }
            if (representative == nullptr) {
                continue;
            }
            f.retention = representative->retention;
            f.path = representative->steps;
            for (PathStep& step : f.path) {
                if (step.tensor && step.tensor->block != 0) {
                    step.tensor->site = siteOfBlock(step.tensor->block);
                }
            }
            f.path_text = pathText(f.path);
            // Blocks only autograd holds have no Python tensor for the describer; the path's
            // last tensor is one of them.
            if (!f.dtype && !f.path.empty() && f.path.back().tensor) {
                f.dtype = f.path.back().tensor->dtype;
                f.shape = f.path.back().tensor->shape;
            }
            double growthIterations =
                static_cast<double>(std::max(1, report.iterations - std::max(inputs.warmup, 0)));
            if (f.retention == Retention::Reachable) {
                f.holder = chooseHolder(f.path, all, growthIterations);
            }
        }
    }

    // Each finding's verdict is final only now that its path is known.
    for (Finding& f : report.findings) {
        // design.md, "What counts as a leak": memory that only notebook machinery (Out[n],
        // the last exception) or only C++ (an autograd graph no Python object reaches) keeps
        // is a leak even without growth: the user can no longer free it by name.
        if (f.verdict != Verdict::Leak && f.total_bytes > 0 && heldByMachinery(f)) {
            f.verdict = Verdict::Leak;
            f.confidence = 0.9;
        }
        // An intentional cache the user named (by site, function, path or holder).
        std::string site = f.site.file + ":" + std::to_string(f.site.line);
        for (const std::string& pattern : inputs.config.allow) {
            if (globMatch(pattern, site) || globMatch(pattern, f.site.function) ||
                (!f.path_text.empty() && globMatch(pattern, f.path_text)) ||
                (f.holder && globMatch(pattern, f.holder->path_text))) {
                f.verdict = Verdict::Allowed;
            }
        }
        f.severity = severityOf(f, report.iterations, inputs.config);
        f.suggestion = suggestFix(f);
        if (f.verdict == Verdict::Leak && f.released_periodically) {
            f.suggestion += " (it is released only at a coarser boundary, such as an epoch end, "
                            "and grows within each)";
        }
    }
    std::stable_sort(report.findings.begin(), report.findings.end(),
                     [](const Finding& a, const Finding& b) {
                         bool la = a.verdict == Verdict::Leak, lb = b.verdict == Verdict::Leak;
                         if (la != lb) {
                             return la;
                         }
                         return a.total_bytes > b.total_bytes;
                     });

    // Devices, in the order they first appeared.
    std::vector<DeviceKey> order;
    for (const auto& snap : boundaries) {
        for (const auto& d : snap.devices) {
            if (std::find(order.begin(), order.end(), d.device) == order.end()) {
                order.push_back(d.device);
            }
        }
    }
    for (DeviceKey key : order) {
        DeviceTimeline t;
        t.device = deviceName(key);
        for (const auto& info : inputs.devices) {
            if (info.key == key) {
                t.capacity_bytes = info.capacity_bytes;
            }
        }
        if (t.capacity_bytes == 0 && key.type == 0) {
            t.capacity_bytes = hostMemoryCapacity();
        }
        for (const auto& snap : boundaries) {
            auto it = std::find_if(snap.devices.begin(), snap.devices.end(),
                                   [&](const DeviceSample& d) { return d.device == key; });
            t.allocated.push_back(it != snap.devices.end() ? it->allocated : 0);
            t.reserved.push_back(it != snap.devices.end() ? it->reserved : 0);
            t.peak.push_back(it != snap.devices.end() ? it->peak : 0);
        }
        for (const Finding& f : report.findings) {
            if (f.verdict == Verdict::Leak && f.device == t.device && f.bytes_per_iteration > 0) {
                t.leak_bytes_per_iteration += f.bytes_per_iteration;
            }
        }
        if (t.leak_bytes_per_iteration > 0 && t.capacity_bytes > 0) {
            int64_t used = t.allocated.empty() ? 0 : t.allocated.back();
            int64_t room = std::max<int64_t>(static_cast<int64_t>(t.capacity_bytes) - used, 0);
            t.projected_oom_iteration =
                static_cast<int64_t>(n) +
                (room + t.leak_bytes_per_iteration - 1) / t.leak_bytes_per_iteration;
        }
        DeviceVerdict dv = judgeDevice(t.allocated, t.reserved, inputs.warmup, inputs.config);
        t.fragmentation_ratio = dv.ratio;
        if (dv.fragmentation) {
            t.verdict = "fragmentation";
        }
        // A leak that fills the device within ten runs of this length is critical whatever
        // its size.
        if (t.projected_oom_iteration && n > 0 &&
            *t.projected_oom_iteration <= static_cast<int64_t>(10 * n)) {
            for (Finding& f : report.findings) {
                if (f.verdict == Verdict::Leak && f.device == t.device) {
                    f.severity = Severity::Critical;
                }
            }
        }
        report.devices.push_back(std::move(t));
    }

    if (!shadowedIterations.empty()) {
        std::ostringstream w;
        w << "another profiler (torch.profiler) was on top of torchleak's hook during "
          << shadowedIterations.size()
          << " iteration(s); allocations and frees on this thread were not seen meanwhile, so "
             "findings in those iterations may be incomplete";
        report.warnings.push_back(w.str());
    }
    summarize(report);
    return report;
}

} // namespace torchleak
