//! Memory extraction rules: what a memory candidate is, the LLM prompt, parsing and
//! validating model output, the rule-based extractor, and the content-safety filter.
//! Pure: the extract service does the I/O.

pub mod candidate;
pub mod parse;
pub mod prompt;
pub mod rules;
pub mod safety;

pub use candidate::ExtractedMemory;
