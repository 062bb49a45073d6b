#include "torchleak/display_text.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace torchleak {

std::string formatBytes(double bytes) {
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
    if (f.file == "<backward>") {
        return "backward (" + f.function + ")";
    }
    return f.file + ":" + std::to_string(f.line);
}

std::string groupThousands(int64_t value) {
    std::string digits =
        std::to_string(value < 0 ? -static_cast<uint64_t>(value) : static_cast<uint64_t>(value));
    std::string out;
    for (size_t i = 0; i < digits.size(); ++i) {
        if (i > 0 && (digits.size() - i) % 3 == 0) {
            out += ',';
        }
        out += digits[i];
    }
    return value < 0 ? "-" + out : out;
}

std::string projectionText(const DeviceTimeline& d, int iterations) {
    if (d.leak_bytes_per_iteration <= 0 || !d.projected_oom_iteration) {
        return "";
    }
    int64_t remaining = std::max<int64_t>(*d.projected_oom_iteration - iterations, 0);
    return "at " + formatBytes(static_cast<double>(d.leak_bytes_per_iteration)) +
           " per iteration, " + d.device + " is full in ~" + groupThousands(remaining) +
           " iterations";
}

std::string headline(const Report& report) {
    size_t leaks = std::count_if(report.findings.begin(), report.findings.end(),
                                 [](const Finding& f) { return f.verdict == Verdict::Leak; });
    return std::to_string(leaks) + " leak(s), " + std::to_string(report.findings.size() - leaks) +
           " other finding(s)";
}

std::string emptyReportText(const Report& report) {
    return report.findings.empty()
               ? "No tensor allocated during the run survived an iteration boundary."
               : "";
}

} // namespace torchleak
