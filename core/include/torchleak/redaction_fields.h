#pragma once
// What redaction (Report.redacted(): kernel_ext/torchleak/_redact.py walks the JSON) does to
// every string field of a torchleak.report/1 document, declared here beside the schema's writer
// so that a field report_json gains gets its rule where it is written; a string field with no
// rule fails tests/python/test_redact.py, and the walker takes it for words from outside.

#include <span>
#include <string_view>

namespace torchleak {

enum class Redaction {
    Keep,        // a word of the schema (verdict, role, device), a function or type name, a version
    File,        // a path: relative to the project or a library directory, else a hash
    Drop,        // a source line, a fix written from one, a dtype
    Key,         // a path step's label: a string key becomes a hash
    Sentence,    // torchleak's words quoting the fields: each withheld string replaced
    FreeText,    // words from outside torchleak: its paths, quoted strings, shapes replaced too
    WrittenAgain // a display string the core writes again from the redacted fields
};

// "kept", "file", "dropped", "key", "sentence", "free text", "written again".
std::string_view toString(Redaction rule);

struct RedactionField {
    std::string_view place; // "findings[].site.file": "[]" is each item of a list
    Redaction rule;
};

// Every string field of a report, by its place.
std::span<const RedactionField> redactionFields();

} // namespace torchleak
