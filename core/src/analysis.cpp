#include "torchleak/analysis.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <unistd.h>
#include <unordered_map>
#include <xtensor/xmath.hpp>
#include <xtensor/xtensor.hpp>

namespace torchleak {

// ---------------------------------------------------------------------------------------------
// Statistics

namespace {

// Continued fraction for the regularized incomplete beta function (Lentz's method).
double
betaContinuedFraction(double a, double b, double x) {
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

double
regularizedIncompleteBeta(double a, double b, double x) {
    if (x <= 0.0) {
        return 0.0;
    }
    if (x >= 1.0) {
        return 1.0;
    }
    double lnFront = std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) +
                     b * std::log1p(-x);
    double front = std::exp(lnFront);
    if (x < (a + 1.0) / (a + b + 2.0)) {
        return front * betaContinuedFraction(a, b, x) / a;
    }
    return 1.0 - front * betaContinuedFraction(b, a, 1.0 - x) / b;
}

}  // namespace

double
studentTwoSidedP(double t, double dof) {
    if (!(dof > 0.0) || std::isnan(t)) {
        return 1.0;
    }
    if (std::isinf(t)) {
        return 0.0;
    }
    return regularizedIncompleteBeta(dof / 2.0, 0.5, dof / (dof + t * t));
}

LineFit
fitLine(std::span<const double> values) {
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
        fit.p_value = 1.0;  // flat: no evidence of a trend
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
// Verdict of one site

Classification
classify(const SiteSeries& s, int warmup) {
    Classification c;
    const size_t n = s.bytes.size();
    if (n == 0) {
        return c;
    }
    size_t first = std::min(static_cast<size_t>(std::max(warmup, 0)), n - 1);
    std::vector<double> post(s.bytes.begin() + static_cast<std::ptrdiff_t>(first), s.bytes.end());
    const size_t m = post.size();
    c.fit = fitLine(post);
    c.bytes_per_iteration = static_cast<int64_t>(std::llround(c.fit.slope));

    size_t rises = 0;
    for (size_t i = 1; i < m; ++i) {
        rises += post[i] > post[i - 1] ? 1 : 0;
    }
    double growth = m > 0 ? post.back() - post.front() : 0.0;
    double riseFraction = m > 1 ? static_cast<double>(rises) / static_cast<double>(m - 1) : 0.0;
    int64_t last = s.bytes.back();

    if (m >= 3 && growth > 0.0 && last > 0) {
        if (rises == m - 1) {
            c.verdict = Verdict::Leak;
            c.confidence = std::clamp(1.0 - c.fit.p_value, 0.0, 1.0);
            return c;
        }
        // Tolerate iterations that free some or add nothing, as long as the trend is clear.
        if (riseFraction >= 0.6 && c.fit.p_value < 0.01 && c.fit.r2 >= 0.8) {
            c.verdict = Verdict::Leak;
            c.confidence = std::clamp((1.0 - c.fit.p_value) * c.fit.r2, 0.0, 1.0);
            return c;
        }
    }
    if (last == 0) {
        c.verdict = Verdict::Transient;  // everything the site left alive was freed later
        c.confidence = 1.0;
        c.bytes_per_iteration = 0;
        return c;
    }
    uint32_t oldest = s.oldest.empty() ? 0 : s.oldest.back();
    int64_t bornLast = s.born.empty() ? 0 : s.born.back();
    if (bornLast == last && growth <= 0.0) {
        // What is alive now was allocated in the last iteration and will be replaced in the
        // next: a per-iteration working set that survives one boundary.
        c.verdict = Verdict::Transient;
        c.confidence = 0.9;
        c.bytes_per_iteration = 0;
        return c;
    }
    if (growth > 0.0) {
        c.verdict = Verdict::Plateau;
        c.confidence = 1.0 - riseFraction;
        return c;
    }
    if (oldest <= static_cast<uint32_t>(std::max(warmup, 0))) {
        c.verdict = Verdict::Warmup;  // created in the first iterations, then kept and reused
        c.confidence = 0.9;
        c.bytes_per_iteration = 0;
        return c;
    }
    c.verdict = Verdict::Plateau;
    c.confidence = 0.7;
    return c;
}

// ---------------------------------------------------------------------------------------------
// Devices

std::string
deviceName(DeviceKey key) {
    static const char* const kNames[] = {"cpu", "cuda", "mkldnn", "opengl", "opencl", "ideep",
                                         "hip", "fpga", "maia", "xla", "vulkan", "metal",
                                         "xpu", "mps", "meta", "hpu", "ve", "lazy", "ipu",
                                         "mtia"};
    std::string base = (key.type >= 0 && static_cast<size_t>(key.type) < std::size(kNames))
                           ? kNames[key.type]
                           : "device" + std::to_string(key.type);
    if (key.type == 0 || key.index < 0) {
        return base;
    }
    return base + ":" + std::to_string(key.index);
}

uint64_t
hostMemoryCapacity() {
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
    uint64_t stackBytes = 0;  // bytes of the group whose stack we show
    uint64_t lastCount = 0;
    uintptr_t example = 0;
    uint64_t exampleSize = 0;
    GroupKey exampleKey;
};

std::string
siteKey(const Frame& f, const std::string& device, const std::string& node) {
    std::ostringstream out;
    out << f.file << '\x1f' << f.line << '\x1f' << f.function << '\x1f' << device << '\x1f'
        << node;
    return out.str();
}

std::string
humanBytes(double bytes) {
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

std::string
siteText(const Frame& f) {
    if (f.cell) {
        return "In [" + std::to_string(*f.cell) + "], line " + std::to_string(f.line);
    }
    return f.file + ":" + std::to_string(f.line);
}

Severity
severityOf(const Finding& f, int iterations, const Thresholds& t) {
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

std::string
defaultSuggestion(const Finding& f) {
    if (f.verdict != Verdict::Leak) {
        return "";
    }
    if (f.autograd_node) {
        return "gradients or buffers made by " + *f.autograd_node +
               " in backward stay alive: reset .grad (optimizer.zero_grad(set_to_none=True)) "
               "and do not keep outputs of backward(create_graph=True)";
    }
    return "tensors allocated here survive every iteration: something keeps a reference "
           "(a list or dict that grows, a tensor kept with its autograd graph); keep "
           ".detach() or .item() copies, or clear the container";
}

void
summarize(Report& report) {
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
    if (!report.warnings.empty()) {
        s.recommendations.push_back(
            {"low", "re-run without torch.profiler active: some allocation events were missed",
             {}});
    }
    s.score = std::max(0, 100 - penalty);
    s.grade = s.score >= 90 ? "A" : s.score >= 80 ? "B" : s.score >= 70 ? "C" : s.score >= 60 ? "D" : "F";
    report.summary = std::move(s);
}

}  // namespace

Report
buildReport(const AllocationRecorder& recorder,
            const ReportInputs& inputs,
            StackSymbolizer& symbolizer,
            BlockDescriber& describer) {
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

    std::map<std::string, SiteAccumulator> sites;
    std::vector<uint32_t> shadowedIterations;
    for (size_t b = 0; b < n; ++b) {
        const BoundarySnapshot& snap = boundaries[b];
        if (snap.shadowed) {
            shadowedIterations.push_back(snap.iteration);
        }
        for (const GroupSample& g : snap.groups) {
            const std::vector<Frame>& frames = framesOf(g.key.stack);
            std::string node = g.key.node ? recorder.nodeName(g.key.node) : std::string();
            std::string device = deviceName(g.key.device);
            Frame site;
            auto user = std::find_if(frames.begin(), frames.end(),
                                     [](const Frame& f) { return f.user; });
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
            SiteAccumulator& acc = sites[siteKey(site, device, node)];
            if (acc.series.bytes.empty()) {
                acc.site = site;
                acc.device = device;
                acc.node = node;
                acc.series.bytes.assign(n, 0);
                acc.series.born.assign(n, 0);
                acc.series.oldest.assign(n, std::numeric_limits<uint32_t>::max());
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

    // Describe an example block only if it is still the block the group recorded: its address
    // may have been freed and reused since the last boundary.
    std::unordered_map<uintptr_t, BlockRecord> liveNow;
    recorder.forEachLiveBlock(
        [&](uintptr_t ptr, const BlockRecord& rec) { liveNow.emplace(ptr, rec); });

    for (auto& [key, acc] : sites) {
        int64_t maxBytes = *std::max_element(acc.series.bytes.begin(), acc.series.bytes.end());
        if (maxBytes <= 0 || static_cast<uint64_t>(maxBytes) < inputs.thresholds.min_bytes) {
            continue;
        }
        for (auto& o : acc.series.oldest) {
            if (o == std::numeric_limits<uint32_t>::max()) {
                o = 0;
            }
        }
        Classification c = classify(acc.series, inputs.warmup);
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
        f.severity = severityOf(f, report.iterations, inputs.thresholds);
        f.suggestion = defaultSuggestion(f);
        report.findings.push_back(std::move(f));
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

}  // namespace torchleak
