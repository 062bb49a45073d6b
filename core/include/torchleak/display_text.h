#pragma once
// The display strings the core knows, written once here and emitted into the JSON (`site.text`,
// a device's `text` and `projection_text`, a finding's `tensor_text`, `block_label` and
// `rate_text`, a path tensor's `text`, the out-of-memory lists' `size_text`, `summary.headline`
// and `summary.empty_text`) so that every view (text, HTML, the notebook widget, the memory
// viewer's pickle) shows the same words instead of deriving its own.

#include "torchleak/model.h"
#include "torchleak/resident_memory.h"

#include <cstdint>
#include <string>
#include <vector>

namespace torchleak {

// 1536 -> "1.5 KiB", 100 -> "100 B": binary units, one decimal from KiB on. The Python and
// JavaScript views keep one formatter each for numbers the JSON carries raw, and a test holds
// all three to the same output.
std::string formatBytes(double bytes);

// "In [7], line 3" for a notebook cell ("In [3], [6], [9], line 3" for a cell re-run in watch
// mode, the middle of long lists elided), "backward (MmBackward0)" inside backward without a
// Python frame, "file.py:42" otherwise.
std::string siteText(const Frame& f);

// A retaining path's text short enough for a sentence or a table cell: the root with the steps
// that fit in a third of `most` characters (kShortPathChars), then as many of the last steps as
// fit, the middle elided at step boundaries: "root.child_level_0….child_level_25.items". No step
// is ever cut (a key too long for the room reads "[…]"), so a redacted string key is in it whole
// or not at all. Views show it with the whole path one hover or click away; the JSON keeps both
// (`path_short`).
inline constexpr size_t kShortPathChars = 80;
std::string shortPath(const std::string& path, size_t most = kShortPathChars);

// "12,345": thousands separated as users read counts of iterations.
std::string groupThousands(int64_t value);
// "a, b and c" (or "a, b or c"): the one way a list is said in a sentence.
std::string listWords(const std::vector<std::string>& items, const char* last = "and");
// The first `most` items said, the rest counted: "a, b, c and 2 more" (`more` names them).
std::string
listFirst(const std::vector<std::string>& items, size_t most, const std::string& more = "more");
// "clear() or reset()": methods a user may call instead of one another.
std::string methodCalls(const std::vector<std::string>& methods);

// What one iteration is, as rates say it: "iteration", or "cell run" in cell watch.
const char* iterationNoun(BoundaryKind boundary);
// How a holder grows: "+3 per iteration", or, where its entries share storages, "+192 entries
// per iteration, sharing 1 storage".
std::string holderGrowthText(const Holder& holder, BoundaryKind boundary);

// A live view's warning: "while the cell runs: the first 10 of 50 findings; the finished
// report lists every one".
std::string liveViewText(size_t shown, size_t total);

// "the process's resident memory grew 412.0 MiB from iteration 4 to 50 while the CPU memory
// torchleak tracks grew 1.0 MiB: 411.0 MiB grew outside tensors (...)": a report's warning.
std::string untrackedGrowthText(const UntrackedGrowth& growth, BoundaryKind boundary);

// "at 2.0 MiB per iteration, cuda:0 is full in ~9,582 iterations", or "" when the device does
// not leak or its capacity is unknown.
std::string projectionText(const DeviceTimeline& device,
                           int iterations,
                           BoundaryKind boundary = BoundaryKind::Explicit);

// A device's line: "cuda:0: 1.2 GiB tracked live at the end, leaking 2.0 MiB per iteration; at
// 2.0 MiB per iteration, cuda:0 is full in ~9,582 iterations; fragmentation (40% reserved but
// unused)".
std::string deviceText(const DeviceTimeline& device,
                       int iterations,
                       BoundaryKind boundary = BoundaryKind::Explicit);

// "1.2 MiB: activations 610 KiB (51%), gradients 300 KiB (25%), 2 more 90 KiB": the biggest
// roles of one moment with their share of it, the reserve left out (said apart).
std::string roleBreakdownText(const RoleBytes& roles);

// What a device's memory is made of, one line: "at its highest peak (iteration 13), 1.2 MiB:
// activations 610 KiB (51%), gradients 300 KiB (25%), parameters 200 KiB (17%), 2 more 90 KiB;
// at the end, 900 KiB: ...; 2.0 MiB reserved but unused". `at` gives each point's iteration
// (0-based; empty: the point's index); `boundary` its noun ("cell run" in cell watch, whose
// chart's axis says so too). "" without roles.
std::string rolesText(const DeviceTimeline& device,
                      const std::vector<int64_t>& at,
                      BoundaryKind boundary = BoundaryKind::Explicit);

// "the peak of iteration 778, 53.2 MiB, against 3.1 MiB typically: activations +50.0 MiB; its
// biggest block, 50.0 MiB, allocated at train.py:42".
std::string spikeText(const PeakSpike& spike, BoundaryKind boundary);

// When a finding's growth began and whether it stopped (model.h's GrowthSince): "leaking since
// iteration 121, 1.2 MiB per iteration", "grew 25.0 MiB until iteration 100, flat since"; ""
// without one. Iterations counted from 1, as every line of text counts them.
std::string growthText(const Finding& f, BoundaryKind boundary);

// "float32 [256, 1024]": a dtype and shape as every view prints them.
std::string tensorText(const std::string& dtype, const std::vector<int64_t>& shape);

// What a finding's blocks say in PyTorch's memory viewer (the innermost frame of each block's
// stack in the memory_viz pickle): "torchleak: held by losses (leak, user-held)", "torchleak:
// warmup, optimizer state" (the role when the report knows it).
std::string blockLabel(const Finding& f);

// A finding's per-iteration column: its rate ("1.0 MiB"), or "held" for a leak that holds
// memory without growing (the last exception's locals, an output kept in Out[n]), where "0 B
// per cell run" beside a 40 MiB leak read as if nothing were kept. Views that say the rate in a
// sentence put the finding's total before "held".
std::string rateText(const Finding& f);

// A tensor met on a retaining path: "float32 [256, 1024] 1.0 MiB, allocated at train.py:16".
std::string pathTensorText(const TensorInfo& tensor);

// The count line every view prints: "2 leak(s), 3 other finding(s)", or with causes that span
// several sites, "1 leak (4 allocation sites), 3 other finding(s)".
std::string headline(const Report& report);

// One line per cause, its size first: "2.5 MiB per iteration: loss_history keeps every
// iteration's autograd graph, across 4 allocation sites".
std::string causeText(const Cause& cause, const Report& report);

// A group of causes in one line (causes.h): "490.0 KiB per iteration: 49 lists in obj grow
// every iteration (obj.l48, obj.l47, obj.l46 and 46 more), 10.0 KiB each, at train.py:12".
// A cause alone is its causeText.
std::string causeGroupText(const CauseGroup& group, const Report& report);

// The sentence for a run in which nothing survived a boundary; "" when there are findings.
std::string emptyReportText(const Report& report);

// The out-of-memory account: the device, its totals at the failure and the likely culprit.
std::string outOfMemoryText(const OutOfMemoryReport& oom, const Report& report);
// "What filled cuda:0 at the failure, 9.0 MiB: user-held 6.0 MiB (67%), activations 3.0 MiB
// (33%); 55.0 MiB reserved but unused." ("" without roles).
std::string outOfMemoryRolesText(const OutOfMemoryReport& oom);

// What sampling means for the numbers: "blocks of 256.0 KiB and more were recorded whole ...".
std::string samplingText(uint64_t sampleBytes);

// Which ranks of a merged job report a finding is on: "leaks on rank 1 only", "leaks on ranks 0
// and 2 of 3", "leaks on every rank (3)" ("on rank 1 only" for other verdicts); "" outside a job.
std::string rankScopeText(const Finding& f, const Report& report);

// One line per rank of a merged job report ("rank 1: 20 iterations, 1 leak at 1.0 MiB per
// iteration, peak 32.0 MiB"; "rank 2: no report (timed out after 30 s)").
std::string rankText(const RankSummary& rank, BoundaryKind boundary);

// How the ranks differ, a line per measure that does: leak rate, peak memory, iterations run.
// Empty when the ranks agree (or fewer than two reported).
std::vector<std::string> rankSkewText(const JobRanks& job, BoundaryKind boundary);

} // namespace torchleak
