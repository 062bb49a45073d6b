// The phase of buildReport that proves a leak's fix on the heap before it is printed: the named
// roots are walked again with the holder cut out (as if cleared), and what the roots still
// reach is what the fix would not free. A container that shares its tensors with another (a
// store that indexes each parameter in two dicts) is then not offered as the fix: clearing it
// frees nothing.

#include "report_assembly.h"
#include "torchleak/display_text.h"
#include "torchleak/retention.h"
#include "torchleak/suggestion.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace torchleak::assembly {

namespace {

// A proof is one more walk of the heap per finding: the biggest leaks only, and a few of each
// one's blocks (spread over its iterations) standing for all of them.
constexpr size_t kProvenFindings = 8;
constexpr size_t kProofBlocks = 64;
// A proof that frees its blocks walks everything the roots reach: on a large heap a second
// each. Past this much time the remaining findings keep their fix unproven (no `fix` in
// the JSON), so a final report never waits long for its proofs.
constexpr auto kProofBudget = std::chrono::seconds(2);

std::vector<FindingBlock> spreadOver(const std::vector<FindingBlock>& blocks) {
    if (blocks.size() <= kProofBlocks) {
        return blocks;
    }
    std::vector<FindingBlock> chosen;
    for (size_t k = 0; k < kProofBlocks; ++k) {
        chosen.push_back(blocks[k * blocks.size() / kProofBlocks]);
    }
    return chosen;
}

// The container one step above the block's tensor on its remaining path: what else holds it.
std::string otherHolder(const BlockPath& path) {
    std::vector<PathStep> steps = normalizePath(path.steps);
    return pathText(steps, steps.size() > 1 ? steps.size() - 1 : steps.size());
}

// What cutting `cut` leaves: the bytes of `chosen` the roots still reach, and one block's path.
struct CutResult {
    uint64_t keptBytes = 0;
    std::optional<BlockPath> other;
    bool keptOnlyNewest = true; // every block still reached was born in the newest iteration
};

std::optional<CutResult> cutAndWalk(RetentionExplainer& explainer,
                                    const std::vector<FindingBlock>& chosen,
                                    const std::vector<uintptr_t>& cut) {
    std::vector<uintptr_t> blocks;
    for (const FindingBlock& b : chosen) {
        blocks.push_back(b.block);
    }
    const auto stillReached = explainer.explainWithout(blocks, cut);
    if (!stillReached) {
        return std::nullopt;
    }
    CutResult result;
    uint32_t newest = 0;
    for (const FindingBlock& b : chosen) {
        newest = std::max(newest, b.birth);
    }
    for (const FindingBlock& b : chosen) {
        if (auto it = stillReached->find(b.block); it != stillReached->end()) {
            result.keptBytes += b.size;
            result.keptOnlyNewest = result.keptOnlyNewest && b.birth == newest;
            if (!result.other) {
                result.other = it->second;
            }
        }
    }
    return result;
}

uint64_t scaled(uint64_t total, uint64_t part, uint64_t whole) {
    return whole == 0
               ? 0
               : static_cast<uint64_t>(static_cast<double>(total) * static_cast<double>(part) /
                                       static_cast<double>(whole));
}

// The object of the other holder on a path the holder's clearing left (the container one step
// above the tensor, or the nearest object above it), or 0.
uintptr_t otherHolderObject(const BlockPath& path) {
    const std::vector<PathStep> steps = normalizePath(path.steps);
    for (size_t k = steps.size() >= 2 ? steps.size() - 1 : 0; k-- > 0;) {
        if (steps[k].object != 0) {
            return steps[k].object;
        }
    }
    return 0;
}

// The line that clears the other holder, where that is safe to run as written: an lru_cache's
// entries are results it computes again (`RoPE.freqs.cache_clear()`); a container a loop may
// read is not emptied on a guess.
std::string otherHolderClearCode(const BlockPath& path) {
    const std::vector<PathStep> steps = normalizePath(path.steps);
    for (size_t k = 1; k < steps.size(); ++k) {
        if (steps[k].label == "<lru_cache entries>") {
            const std::string function = pathText(steps, k);
            return isPythonAccessChain(function) ? function + ".cache_clear()" : "";
        }
    }
    return "";
}

// The words of a proof that the holder alone does not free the leak.
std::string partialFixText(const Finding& f, const FixProof& proof, bool freesNothing) {
    std::string text =
        "clearing " + shortPath(f.holder->path_text) + " alone frees " +
        (freesNothing ? std::string("nothing")
                      : "only " + formatBytes(static_cast<double>(proof.frees_bytes)) + " of " +
                            formatBytes(static_cast<double>(f.total_bytes))) +
        ": " + shortPath(proof.also_held_by) + " also holds them. ";
    if (!proof.owner.empty() && proof.owner_frees_bytes > proof.frees_bytes) {
        text += "Releasing everything " + shortPath(proof.owner) + " keeps frees " +
                formatBytes(static_cast<double>(proof.owner_frees_bytes)) +
                " (checked on the heap)";
        text += proof.owner_methods.empty()
                    ? ": a setting or method of its class controls what it keeps"
                    : "; its class's own " + methodCalls(proof.owner_methods) + " says it releases";
        return text + ". Otherwise release them where both are filled";
    }
    if (proof.together_frees_bytes && *proof.together_frees_bytes > proof.frees_bytes) {
        return text + "Clearing both frees " +
               formatBytes(static_cast<double>(*proof.together_frees_bytes)) +
               " (checked on the heap): release them in both, where both are filled";
    }
    return text + "Release them there too, where both are filled";
}

// A library object's private state is not the user's to clear: the proof is what releasing
// the object itself frees (what its releasing method or setting would reach at most).
void proveLibraryOwner(RetentionExplainer& explainer,
                       Finding& f,
                       const std::vector<FindingBlock>& chosen,
                       uint64_t chosenBytes,
                       FixProof& proof) {
    const LibraryObject& lib = *f.holder->library;
    const auto j = libraryOwnerStep(f);
    if (!j || f.path[*j].object == 0) {
        return;
    }
    const auto ownerCut = cutAndWalk(explainer, chosen, {f.path[*j].object});
    if (!ownerCut) {
        return;
    }
    proof.owner = lib.object;
    proof.owner_frees_bytes = scaled(f.total_bytes, chosenBytes - ownerCut->keptBytes, chosenBytes);
    proof.owner_methods = lib.methods;
    f.suggestion += " (checked on the heap: releasing everything " + shortPath(lib.object) +
                    " keeps frees " + formatBytes(static_cast<double>(proof.owner_frees_bytes)) +
                    " of " + formatBytes(static_cast<double>(f.total_bytes)) + ")";
}

} // namespace

void ReportBuilder::proveFixes(RetentionExplainer& explainer) {
    if (!explainer.canWalkAgain()) {
        return; // no fix is proven, none is refuted
    }
    std::vector<FindingDraft*> leaks;
    for (FindingDraft& draft : d_drafts) {
        const Finding& f = draft.finding;
        if (f.verdict == Verdict::Leak && f.holder && !f.holder->hooks &&
            f.retention == Retention::Reachable && !draft.blocks.empty()) {
            leaks.push_back(&draft);
        }
    }
    std::stable_sort(leaks.begin(), leaks.end(), [](const FindingDraft* a, const FindingDraft* b) {
        return a->finding.bytes_per_iteration > b->finding.bytes_per_iteration;
    });
    const std::vector<FindingDraft*> all = leaks;
    // The eight biggest, and every sibling of theirs: a holder filled by the same line in the same
    // container (nine lists in `holders`) is one group in every view, whose fix is all of its
    // members' code or none (cause_groups.h), so one unproven member would cost the group's.
    const auto siblingKey = [](const Finding& f) {
        const auto step = holderEnd(f);
        return step ? siteText(f.site) + '\x1f' + pathText(f.path, *step) : std::string();
    };
    std::vector<std::string> biggest;
    for (size_t k = 0; k < std::min(leaks.size(), kProvenFindings); ++k) {
        biggest.push_back(siblingKey(leaks[k]->finding));
    }
    size_t kept = 0;
    for (size_t k = 0; k < leaks.size(); ++k) {
        const std::string key = k < kProvenFindings ? "" : siblingKey(leaks[k]->finding);
        if (k < kProvenFindings ||
            (!key.empty() && std::find(biggest.begin(), biggest.end(), key) != biggest.end())) {
            leaks[kept++] = leaks[k];
        }
    }
    leaks.resize(kept);
    const auto started = std::chrono::steady_clock::now();
    for (FindingDraft* draft : leaks) {
        if (std::chrono::steady_clock::now() - started > kProofBudget) {
            break;
        }
        Finding& f = draft->finding;
        const auto step = holderEnd(f);
        if (!step || f.path[*step].object == 0) {
            continue;
        }
        const std::vector<FindingBlock> chosen = spreadOver(draft->blocks);
        uint64_t chosenBytes = 0;
        for (const FindingBlock& b : chosen) {
            chosenBytes += b.size;
        }
        const auto holderCut = cutAndWalk(explainer, chosen, {f.path[*step].object});
        if (!holderCut || chosenBytes == 0) {
            return; // this explainer cannot walk again: no fix is proven, none is refuted
        }
        FixProof proof;
        proof.frees_bytes = scaled(f.total_bytes, chosenBytes - holderCut->keptBytes, chosenBytes);
        if (f.holder->library) {
            proveLibraryOwner(explainer, f, chosen, chosenBytes, proof);
        } else if (holderCut->other) {
            proof.also_held_by = otherHolder(*holderCut->other);
            // The object the holder belongs to (`store` of `store._params`), cut as a whole.
            if (*step >= 1 && f.path[*step - 1].object != 0) {
                const PathStep& owner = f.path[*step - 1];
                if (const auto ownerCut = cutAndWalk(explainer, chosen, {owner.object})) {
                    proof.owner = pathText(f.path, *step);
                    proof.owner_frees_bytes =
                        scaled(f.total_bytes, chosenBytes - ownerCut->keptBytes, chosenBytes);
                    proof.owner_methods = owner.release_methods;
                }
            }
            // Both holders cut at once: what the pair frees (issue #63: a module's dict and the
            // class's lru_cache on the method that fills it).
            std::string pairCode;
            if (const uintptr_t other = otherHolderObject(*holderCut->other);
                other != 0 && other != f.path[*step].object) {
                if (const auto bothCut =
                        cutAndWalk(explainer, chosen, {f.path[*step].object, other})) {
                    proof.together_frees_bytes =
                        scaled(f.total_bytes, chosenBytes - bothCut->keptBytes, chosenBytes);
                    const std::string otherCode = otherHolderClearCode(*holderCut->other);
                    if (bothCut->keptBytes == 0 && !f.fix_code.empty() && !otherCode.empty()) {
                        pairCode = f.fix_code + "; " + otherCode;
                    }
                }
            }
            // Printed only as proven: a fix that frees nothing is not offered, and one that frees
            // part says what else holds the rest.
            const bool freesNothing = holderCut->keptBytes == chosenBytes;
            if (freesNothing) {
                f.suggestion = partialFixText(f, proof, true);
                f.fix_rule = pairCode.empty() ? "holder-frees-nothing" : "holders-free-together";
                f.fix_code = pairCode;
            } else if (!pairCode.empty()) {
                f.suggestion += " (" + partialFixText(f, proof, false) + ")";
                f.fix_rule = "holders-free-together";
                f.fix_code = pairCode;
            } else {
                // Most of it freed: the fix stands, with what it leaves. Not said when what is
                // left is the newest iteration's, held by a name the loop rebinds (`loss` beside
                // `losses`): that is the loop's current state, not a second holder to release.
                if (!(holderCut->keptOnlyNewest && isPythonName(proof.also_held_by))) {
                    f.suggestion += " (" + partialFixText(f, proof, false) + ")";
                }
                if (2 * proof.frees_bytes < f.total_bytes) {
                    f.fix_code.clear();
                }
            }
        }
        f.fix = std::move(proof);
    }
    // What was left unproven (past the budget, past the eight biggest, or reached only through
    // C++) keeps its words but not a `.clear()` to paste: fix_code is only what was proven.
    for (FindingDraft* draft : all) {
        Finding& f = draft->finding;
        const std::string_view code = f.fix_code;
        if (!f.fix && code.size() > 8 && code.substr(code.size() - 8) == ".clear()") {
            f.fix_code.clear();
        }
    }
}

} // namespace torchleak::assembly
