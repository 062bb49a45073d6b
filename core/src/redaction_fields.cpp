#include "torchleak/redaction_fields.h"

namespace torchleak {

std::string_view toString(Redaction rule) {
    switch (rule) {
    case Redaction::Keep:
        return "kept";
    case Redaction::File:
        return "file";
    case Redaction::Drop:
        return "dropped";
    case Redaction::Key:
        return "key";
    case Redaction::Sentence:
        return "sentence";
    case Redaction::FreeText:
        return "free text";
    case Redaction::WrittenAgain:
        return "written again";
    }
    return "free text";
}

std::span<const RedactionField> redactionFields() {
    // A frame's fields recur under every place a frame sits (a site, a stack, a spike's site);
    // a device's under devices[] and a merged job's ranks.
    static constexpr RedactionField kFields[] = {
        {"schema_version", Redaction::Keep},
        {"torch_version", Redaction::Keep},
        {"python_version", Redaction::Keep},
        {"boundary", Redaction::Keep},
        {"iteration_unit", Redaction::Keep},
        // a failed rank's error or a profiler's complaint can be quoted in a warning
        {"warnings[]", Redaction::FreeText},
        {"sampling.text", Redaction::WrittenAgain},
        {"summary.grade", Redaction::Keep},
        {"summary.headline", Redaction::WrittenAgain},
        {"summary.empty_text", Redaction::WrittenAgain},
        {"summary.critical_issues[]", Redaction::Sentence},
        {"summary.recommendations[].priority", Redaction::Keep},
        {"summary.recommendations[].text", Redaction::Sentence},
        {"cause_groups[].severity", Redaction::Keep},
        {"cause_groups[].text", Redaction::WrittenAgain},
        {"cause_groups[].fix_code", Redaction::Drop},
        {"causes[].verdict", Redaction::Keep},
        {"causes[].severity", Redaction::Keep},
        {"causes[].keeper", Redaction::Sentence},
        {"causes[].suggestion", Redaction::Sentence},
        {"causes[].text", Redaction::WrittenAgain},
        {"causes[].holder.path_text", Redaction::Sentence},
        {"causes[].holder.path_short", Redaction::WrittenAgain},
        {"causes[].holder.growth_text", Redaction::WrittenAgain},
        {"causes[].holder.type", Redaction::Keep},
        {"causes[].holder.hooks.newest", Redaction::Keep},
        {"causes[].holder.library.object", Redaction::Sentence},
        {"causes[].holder.library.type", Redaction::Keep},
        {"causes[].holder.library.package", Redaction::Keep},
        {"causes[].holder.library.methods[]", Redaction::Keep},
        {"causes[].holders[]", Redaction::Sentence},
        {"causes[].new_key", Redaction::Key},
        {"devices[].device", Redaction::Keep},
        {"devices[].verdict", Redaction::Keep},
        {"devices[].text", Redaction::WrittenAgain},
        {"devices[].projection_text", Redaction::WrittenAgain},
        {"devices[].roles_text", Redaction::WrittenAgain},
        {"devices[].roles[].role", Redaction::Keep},
        {"devices[].roles[].label", Redaction::Keep},
        {"devices[].spikes[].site.file", Redaction::File},
        {"devices[].spikes[].site.function", Redaction::Keep},
        {"devices[].spikes[].site.source", Redaction::Drop},
        {"devices[].spikes[].site.text", Redaction::WrittenAgain},
        {"devices[].spikes[].role", Redaction::Keep},
        {"devices[].spikes[].text", Redaction::WrittenAgain},
        {"findings[].verdict", Redaction::Keep},
        {"findings[].severity", Redaction::Keep},
        {"findings[].device", Redaction::Keep},
        {"findings[].role", Redaction::Keep},
        {"findings[].retention", Redaction::Keep},
        {"findings[].autograd_node", Redaction::Keep},
        {"findings[].dtype", Redaction::Drop},
        {"findings[].fix_code", Redaction::Drop},
        {"findings[].fix_rule", Redaction::Keep},
        {"findings[].suggestion", Redaction::Sentence},
        {"findings[].path_text", Redaction::Sentence},
        {"findings[].path_short", Redaction::WrittenAgain},
        {"findings[].block_label", Redaction::WrittenAgain},
        {"findings[].tensor_text", Redaction::WrittenAgain},
        {"findings[].rate_text", Redaction::WrittenAgain},
        {"findings[].ranks_text", Redaction::WrittenAgain},
        {"findings[].growth_since.text", Redaction::WrittenAgain},
        {"findings[].holder.path_text", Redaction::Sentence},
        {"findings[].holder.path_short", Redaction::WrittenAgain},
        {"findings[].holder.growth_text", Redaction::WrittenAgain},
        {"findings[].holder.type", Redaction::Keep},
        {"findings[].holder.hooks.newest", Redaction::Keep},
        {"findings[].holder.library.object", Redaction::Sentence},
        {"findings[].holder.library.type", Redaction::Keep},
        {"findings[].holder.library.package", Redaction::Keep},
        {"findings[].holder.library.methods[]", Redaction::Keep},
        {"findings[].fix.also_held_by", Redaction::Sentence},
        {"findings[].fix.owner", Redaction::Sentence},
        {"findings[].fix.owner_methods[]", Redaction::Keep},
        {"findings[].site.file", Redaction::File},
        {"findings[].site.function", Redaction::Keep},
        {"findings[].site.source", Redaction::Drop},
        {"findings[].site.text", Redaction::WrittenAgain},
        {"findings[].allocated_inside.file", Redaction::File},
        {"findings[].allocated_inside.function", Redaction::Keep},
        {"findings[].allocated_inside.source", Redaction::Drop},
        {"findings[].allocated_inside.text", Redaction::WrittenAgain},
        {"findings[].compiled_op.source_nodes[]", Redaction::Keep},
        {"findings[].compiled_op.aten_ops[]", Redaction::Keep},
        {"findings[].compiled_op.text", Redaction::WrittenAgain},
        {"findings[].holder_read.line", Redaction::Keep},
        {"findings[].holder_read.source", Redaction::Drop},
        {"findings[].holder_read.file", Redaction::File},
        {"findings[].stack[].file", Redaction::File},
        {"findings[].stack[].function", Redaction::Keep},
        {"findings[].stack[].source", Redaction::Drop},
        {"findings[].stack[].text", Redaction::WrittenAgain},
        {"findings[].path[].kind", Redaction::Keep},
        {"findings[].path[].label", Redaction::Key},
        {"findings[].path[].note", Redaction::Sentence},
        {"findings[].path[].type", Redaction::Sentence},
        {"findings[].path[].tensor.device", Redaction::Keep},
        {"findings[].path[].tensor.dtype", Redaction::Drop},
        {"findings[].path[].tensor.text", Redaction::WrittenAgain},
        {"findings[].path[].tensor.site.file", Redaction::File},
        {"findings[].path[].tensor.site.function", Redaction::Keep},
        {"findings[].path[].tensor.site.source", Redaction::Drop},
        {"findings[].path[].tensor.site.text", Redaction::WrittenAgain},
        {"oom.device", Redaction::Keep},
        {"oom.error", Redaction::Keep},
        {"oom.totals_from", Redaction::Keep},
        {"oom.message", Redaction::FreeText},
        {"oom.text", Redaction::WrittenAgain},
        {"oom.roles_text", Redaction::WrittenAgain},
        {"oom.roles[].role", Redaction::Keep},
        {"oom.roles[].label", Redaction::Keep},
        {"oom.by_site[].site", Redaction::Sentence},
        {"oom.by_site[].size_text", Redaction::WrittenAgain},
        {"oom.by_holder[].holder", Redaction::Sentence},
        {"oom.by_holder[].size_text", Redaction::WrittenAgain},
        {"ranks.ranks[].status", Redaction::Keep},
        {"ranks.ranks[].note", Redaction::FreeText},
        {"ranks.ranks[].text", Redaction::WrittenAgain},
        {"ranks.ranks[].devices[].device", Redaction::Keep},
        {"ranks.ranks[].devices[].verdict", Redaction::Keep},
        {"ranks.ranks[].devices[].text", Redaction::WrittenAgain},
        {"ranks.ranks[].devices[].projection_text", Redaction::WrittenAgain},
        {"ranks.ranks[].devices[].roles_text", Redaction::WrittenAgain},
        {"ranks.ranks[].devices[].roles[].role", Redaction::Keep},
        {"ranks.ranks[].devices[].roles[].label", Redaction::Keep},
        {"ranks.ranks[].devices[].spikes[].site.file", Redaction::File},
        {"ranks.ranks[].devices[].spikes[].site.function", Redaction::Keep},
        {"ranks.ranks[].devices[].spikes[].site.source", Redaction::Drop},
        {"ranks.ranks[].devices[].spikes[].site.text", Redaction::WrittenAgain},
        {"ranks.ranks[].devices[].spikes[].role", Redaction::Keep},
        {"ranks.ranks[].devices[].spikes[].text", Redaction::WrittenAgain},
    };
    return kFields;
}

} // namespace torchleak
